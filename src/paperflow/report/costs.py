"""The per-paper cost table (DESIGN.md "Budgets"): what each paper's jobs cost in the last run.

Every job rule writes Snakemake's benchmark file (logs/<paper>/prepare.benchmark.tsv,
logs/<paper>/<variant>/seed<k>/run.benchmark.tsv, logs/<paper>/collect.benchmark.tsv; columns s, max_rss
in MB, cpu_time in s, ...). Per paper: the number of jobs, the summed wall time of its jobs, their summed
CPU time and the peak resident memory of any one job. A job that the job server ran (paperflow/jobserver.py)
also leaves <name>.usage.json beside its benchmark: the forked worker's CPU time and peak memory, which
Snakemake's benchmark does not see (it measures the job's own process tree, here a thin client). The projection divides the summed job time by the
number of CPUs (jobs run side by side, one thread each on a small machine), and scales the mean per paper
to the number of papers the project will hold.

Two bases (issue 27): job time (wall seconds of each job, what the user waits for; it grows when the machine is
shared, so a contended run over-states it) and CPU time (the compute a job did, nearly independent of load). The
projection gives both, the cost table shows each paper's job/CPU ratio (near 1 for a one-thread job on an idle
machine; 2-10 marks a run that waited for CPUs), and `budget_check` compares the job-time projection with the
budget (benchmarks/bench_costs.py --check 4h). Each paper's row carries the profile of the run that wrote its
logs (results/<paper>/metrics.csv), so a projection never mixes a smoke run into the default figure.
"""
from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path
from typing import Iterable

TARGET_PAPERS = 75


def _float(text: str | None) -> float:
    try:
        return float(text) if text not in (None, "", "NA", "-") else float("nan")
    except ValueError:
        return float("nan")


def read_benchmark(path: Path) -> dict[str, float]:
    """The last row of a Snakemake benchmark TSV as {column: value} (nan where not measured)."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    return {k: _float(v) for k, v in rows[-1].items()} if rows else {}


def with_worker_usage(row: dict[str, float], benchmark: Path) -> dict[str, float]:
    """Add the job server's measurement of the worker that ran this job (if it did) to the client's benchmark row."""
    usage_path = benchmark.with_name(benchmark.name.replace(".benchmark.tsv", ".usage.json"))
    try:
        usage = json.loads(usage_path.read_text())
    except (FileNotFoundError, ValueError):
        return row
    if not row:
        return row
    row = dict(row, threads=float(usage.get("threads", 1)))
    if usage.get("via") != "jobserver":
        return row
    client_cpu = row.get("cpu_time", float("nan"))
    row["cpu_time"] = float(usage["cpu_s"]) + (0.0 if math.isnan(client_cpu) else client_cpu)
    row["max_rss"] = max(float(usage["maxrss_mb"]), row.get("max_rss", 0.0) if not math.isnan(row.get("max_rss", float("nan"))) else 0.0)
    return row


def run_profile(root: Path, paper: str) -> str:
    """The profile of the paper's last collected run (results/<paper>/metrics.csv's profile column), "" if none."""
    try:
        with open(root / "results" / paper / "metrics.csv", newline="") as fh:
            row = next(csv.DictReader(fh), None)
    except FileNotFoundError:
        return ""
    return (row or {}).get("profile") or ""


def logged_papers(root: Path) -> list[str]:
    """Every paper with a folder under logs/ (the latest run of each, whatever run wrote it)."""
    logs = root / "logs"
    return sorted(p.name for p in logs.iterdir() if p.is_dir() and p.name != "resources") if logs.is_dir() else []


def paper_costs(root: Path, papers: Iterable[str]) -> list[dict]:
    """One row per paper that has benchmark files: jobs, job_s, cpu_s, peak_rss_mb, profile, newest (mtime)."""
    out = []
    for pid in papers:
        files = sorted((root / "logs" / pid).rglob("*.benchmark.tsv")) if (root / "logs" / pid).is_dir() else []
        rows = [with_worker_usage(read_benchmark(f), f) for f in files]
        rows = [r for r in rows if r]
        if not rows:
            continue
        out.append({
            "paper": pid, "jobs": len(rows),
            "job_s": sum(r.get("s", 0.0) for r in rows if not math.isnan(r.get("s", float("nan")))),
            # CPU-seconds held: a job with T torch threads holds T CPUs for its wall time
            "core_s": sum(r.get("s", 0.0) * r.get("threads", 1.0) for r in rows if not math.isnan(r.get("s", float("nan")))),
            "cpu_s": sum(r["cpu_time"] for r in rows if not math.isnan(r.get("cpu_time", float("nan")))),
            "peak_rss_mb": max((r.get("max_rss", float("nan")) for r in rows), default=float("nan")),
            "profile": run_profile(root, pid), "newest": max(f.stat().st_mtime for f in files),
        })
    return out


def latest_costs(roots: Iterable[Path], profile: str | None = None) -> list[dict]:
    """Each paper's costs from the root whose benchmark files are newest (per-paper runs assembled into one
    table), keeping only runs of `profile` when given; every row gains "root"."""
    best: dict[str, dict] = {}
    for root in roots:
        for row in paper_costs(Path(root), logged_papers(Path(root))):
            if profile and row["profile"] != profile:
                continue
            if row["paper"] not in best or row["newest"] > best[row["paper"]]["newest"]:
                best[row["paper"]] = {**row, "root": str(root)}
    return [best[k] for k in sorted(best)]


def projection(costs: list[dict], cpus: int | None = None, target: int = TARGET_PAPERS) -> dict[str, float]:
    """Summed job time, its wall-time estimate on `cpus` CPUs, and the same scaled to `target` papers."""
    cpus = cpus or os.cpu_count() or 1
    total = sum(c.get("core_s", c["job_s"]) for c in costs)  # CPU-seconds held (job time x its threads)
    cpu_total = sum(c["cpu_s"] for c in costs)
    n = len(costs)
    return {"papers": n, "cpus": cpus, "job_s": total, "wall_s": total / cpus, "cpu_s": cpu_total,
            "target_papers": target, "target_wall_s": (total / n * target / cpus) if n else float("nan"),
            "target_cpu_wall_s": (cpu_total / n * target / cpus) if n else float("nan")}


def parse_budget(text: str) -> float:
    """'4h', '90m', '3600s' or '3600' -> seconds."""
    text = text.strip().lower()
    scale = {"h": 3600.0, "m": 60.0, "s": 1.0}.get(text[-1:], None)
    try:
        return float(text[:-1]) * scale if scale else float(text)
    except ValueError:
        raise ValueError(f"budget must look like 4h, 90m or 3600s, got {text!r}") from None


def budget_check(proj: dict[str, float], budget_s: float) -> tuple[bool, str]:
    """Whether the job-time projection to the target number of papers fits `budget_s` of wall time, and a line
    saying so (the CPU-time projection beside it: the floor an idle machine would approach)."""
    ok = proj["target_wall_s"] <= budget_s
    return ok, (f"{'OK' if ok else 'OVER BUDGET'}: {proj['target_papers']} papers projected at "
                f"{proj['target_wall_s'] / 3600:.2f} h of job time on {proj['cpus']} CPUs (CPU-time basis "
                f"{proj['target_cpu_wall_s'] / 3600:.2f} h) against a budget of {budget_s / 3600:.2f} h")


def cost_lines(costs: list[dict], proj: dict[str, float]) -> list[str]:
    """Markdown table of the costs, most expensive first, and the projection line."""
    lines = ["| paper | profile | jobs | job time (s) | CPU time (s) | job/CPU | peak memory (MB) |",
             "|---|---|---|---|---|---|---|"]
    for c in sorted(costs, key=lambda c: -c["job_s"]):
        ratio = c["job_s"] / c["cpu_s"] if c["cpu_s"] > 0 else float("nan")
        lines.append(f"| {c['paper']} | {c.get('profile') or '?'} | {c['jobs']} | {c['job_s']:.0f} | {c['cpu_s']:.0f} | "
                     f"{ratio:.2f} | {c['peak_rss_mb']:.0f} |")
    lines += ["", f"Total job time (x threads per job) {proj['job_s']:.0f} s over {proj['papers']} papers: about {proj['wall_s'] / 60:.1f} min "
              f"of wall time on {proj['cpus']} CPUs; at this mean per paper, {proj['target_papers']} papers would take "
              f"about {proj['target_wall_s'] / 3600:.2f} h (on the CPU-time basis, the floor on an idle machine: "
              f"{proj['target_cpu_wall_s'] / 3600:.2f} h)."]
    return lines

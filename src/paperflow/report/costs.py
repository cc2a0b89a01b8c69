"""The per-paper cost table (DESIGN.md "Budgets"): what each paper's jobs cost in the last run.

Every job rule writes Snakemake's benchmark file (logs/<paper>/prepare.benchmark.tsv,
logs/<paper>/<variant>/seed<k>/run.benchmark.tsv, logs/<paper>/collect.benchmark.tsv; columns s, max_rss
in MB, cpu_time in s, ...). Per paper: the number of jobs, the summed wall time of its jobs, their summed
CPU time and the peak resident memory of any one job. A job that the job server ran (paperflow/jobserver.py)
also leaves <name>.usage.json beside its benchmark: the forked worker's CPU time and peak memory, which
Snakemake's benchmark does not see (it measures the job's own process tree, here a thin client). The projection divides the summed job time by the
number of CPUs (jobs run side by side, one thread each on a small machine), and scales the mean per paper
to the number of papers the project will hold.
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
    if not row or usage.get("via") != "jobserver":
        return row
    row = dict(row)
    client_cpu = row.get("cpu_time", float("nan"))
    row["cpu_time"] = float(usage["cpu_s"]) + (0.0 if math.isnan(client_cpu) else client_cpu)
    row["max_rss"] = max(float(usage["maxrss_mb"]), row.get("max_rss", 0.0) if not math.isnan(row.get("max_rss", float("nan"))) else 0.0)
    return row


def paper_costs(root: Path, papers: Iterable[str]) -> list[dict]:
    """One row per paper that has benchmark files: jobs, job_s, cpu_s, peak_rss_mb."""
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
            "cpu_s": sum(r["cpu_time"] for r in rows if not math.isnan(r.get("cpu_time", float("nan")))),
            "peak_rss_mb": max((r.get("max_rss", float("nan")) for r in rows), default=float("nan")),
        })
    return out


def projection(costs: list[dict], cpus: int | None = None, target: int = TARGET_PAPERS) -> dict[str, float]:
    """Summed job time, its wall-time estimate on `cpus` CPUs, and the same scaled to `target` papers."""
    cpus = cpus or os.cpu_count() or 1
    total = sum(c["job_s"] for c in costs)
    n = len(costs)
    return {"papers": n, "cpus": cpus, "job_s": total, "wall_s": total / cpus,
            "target_papers": target, "target_wall_s": (total / n * target / cpus) if n else float("nan")}


def cost_lines(costs: list[dict], proj: dict[str, float]) -> list[str]:
    """Markdown table of the costs, most expensive first, and the projection line."""
    lines = ["| paper | jobs | job time (s) | CPU time (s) | peak memory (MB) |", "|---|---|---|---|---|"]
    for c in sorted(costs, key=lambda c: -c["job_s"]):
        lines.append(f"| {c['paper']} | {c['jobs']} | {c['job_s']:.0f} | {c['cpu_s']:.0f} | {c['peak_rss_mb']:.0f} |")
    lines += ["", f"Total job time {proj['job_s']:.0f} s over {proj['papers']} papers: about {proj['wall_s'] / 60:.1f} min "
              f"of wall time on {proj['cpus']} CPUs; at this mean per paper, {proj['target_papers']} papers would take "
              f"about {proj['target_wall_s'] / 3600:.2f} h."]
    return lines

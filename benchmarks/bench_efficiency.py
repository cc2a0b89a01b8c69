"""Compute efficiency of the heaviest papers: FLOPs, achieved GFLOP/s against this machine's matmul peak, and
where a job's time goes (issue 27, item 1).

    python benchmarks/bench_efficiency.py --root . [--root /tmp/paperflow-dev/lococo-default ...] \
        [--top 10 | --papers dcmha,lococo] [--threads 1] [--scaling] [--out before.json] [--compare before.json
        [--same-jobs]]

For the `--top` papers with the largest CPU time in the latest default runs under the roots (the cost table,
benchmarks/bench_costs.py), it reruns one job per paper (its most expensive (variant, seed), and its prepare job
too where prepare is over 20% of the paper's CPU time) in a scratch root next to the workspace's prepared data,
twice, each in a fresh interpreter with MLflow tracking off:
1. timed under cProfile: job seconds, split into stages (train / compress / evaluate or prepare) and into
   tuning (paperflow.tuning.tune and functions named tune_*), data loading (artifacts.load_torch), model
   loading (from_pretrained and the SmolLM2 loaders), torch kernels (time inside torch's C functions:
   builtins whose name mentions torch or _C) and Python overhead (the rest);
2. under torch.utils.flop_counter.FlopCounterMode: FLOPs per stage (matmul, conv and attention kernels, the
   ops with a registered formula; element-wise ops are not counted, so the ratio is a lower bound).
GFLOP/s of a stage = its FLOPs (run 2) / its seconds (run 1); the ratio is to the fp32 matmul peak of this
machine at the same thread count, measured in the same run (torch.mm of 1024 x 1024, best of 5). `--scaling` times
each job again at 2 threads and prints the speedup of its main stage (PaperSpec.thread_speedup). `--out` writes
the figures as JSON; `--compare` prints the before/after ratio of job seconds and of the peak fraction.
Goal of the issue: training at >= 0.4 of the matmul peak, or the floor named (a model too small to fill a core).
"""
from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

STAGES = ("prepare", "train", "compress", "evaluate")
MODEL_LOADERS = ("from_pretrained", "frozen_smollm2", "load_smollm2", "dense_lm", "load_lm")


def matmul_peak_gflops(threads: int, n: int = 1024, reps: int = 20) -> float:
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(reps):
            torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 * reps / best / 1e9


# ---------------------------------------------------------------- one job in a child interpreter
def _scratch_root(workspace: Path, paper: str, stage: str) -> Path:
    """A root that shares the workspace's settings, resources and (for a run job) prepared data, and writes its
    own results (nothing of the workspace is overwritten)."""
    root = Path(tempfile.mkdtemp(prefix=f"bench-eff-{paper}-"))
    for name in ("params.yaml", "Snakefile", "resources", "sources"):
        if (workspace / name).exists():
            (root / name).symlink_to((workspace / name).resolve())
    if stage != "prepare":
        (root / "results" / paper).mkdir(parents=True)
        (root / "results" / paper / "data").symlink_to((workspace / "results" / paper / "data").resolve())
    return root


def _child(mode: str, paper: str, stage: str, variant: str, seed: str, threads: int, profile: str, out: str) -> None:
    """Run `paperflow stage` in this interpreter (cwd = scratch root) and write the figures of `mode` to out."""
    os.environ["PAPERFLOW_TRACKING"] = "off"
    from paperflow import cli, stages

    marks: dict[str, float] = {}
    counter = None
    if mode == "flops":
        from torch.utils.flop_counter import FlopCounterMode

        counter = FlopCounterMode(display=False)

    def wrap(name):
        fn = getattr(stages, name)

        def timed(*args, **kwargs):
            before = counter.get_total_flops() if counter else time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                after = counter.get_total_flops() if counter else time.perf_counter()
                marks[name] = marks.get(name, 0.0) + (after - before)
        setattr(stages, name, timed)

    for name in STAGES:
        wrap(name)
    argv = ["stage", stage, "--paper", paper, "--profile", profile, "--threads", str(threads)]
    if stage == "run":
        argv += ["--variant", variant, "--seed", seed]
    result: dict = {"mode": mode}
    t0 = time.perf_counter()
    if counter is not None:
        with counter:
            rc = cli.main(argv)
        result["flops"] = {k: v for k, v in marks.items()}
        result["flops_total"] = counter.get_total_flops()
    else:
        prof = cProfile.Profile()
        rc = prof.runcall(cli.main, argv)
        result["seconds"] = marks
        stats = pstats.Stats(prof)
        result["split"] = _split(stats)
        result["hot"] = _hot_python(stats)
    result["job_s"] = time.perf_counter() - t0
    result["rc"] = rc
    Path(out).write_text(json.dumps(result))


def _split(stats: pstats.Stats) -> dict[str, float]:
    """Seconds in tuning, data loading, model loading (cumulative, outermost call), torch kernels and the rest."""
    kernels = total = 0.0
    cum: dict[str, float] = {"tuning": 0.0, "data_loading": 0.0, "model_loading": 0.0}
    for (filename, _line, func), (_cc, _nc, tottime, cumtime, callers) in stats.stats.items():
        total += tottime
        name = f"{filename}:{func}"
        if filename == "~" and ("torch" in func or "_C." in func or "Tensor" in func):
            kernels += tottime
        recursive = any(c[2] == func for c in callers)  # count the outermost frame only
        if recursive:
            continue
        if func == "tune" and "paperflow" in filename or func.startswith("tune_") and "paperflow" in filename:
            cum["tuning"] = max(cum["tuning"], cumtime)
        elif func == "load_torch" and "artifacts" in filename:
            cum["data_loading"] += cumtime
        elif any(func == m for m in MODEL_LOADERS) and "paperflow" in name:
            cum["model_loading"] = max(cum["model_loading"], cumtime)
    return {**cum, "torch_kernels": kernels, "python_overhead": max(0.0, total - kernels), "profiled_total": total}


def _hot_python(stats: pstats.Stats, n: int = 3) -> list[tuple[str, float]]:
    """The n Python functions (not C builtins) with the most own time: where the Python overhead sits."""
    rows = [(f"{Path(fn).stem}:{func}", tt) for (fn, _line, func), (_cc, _nc, tt, _ct, _callers) in stats.stats.items()
            if fn != "~"]
    return sorted(rows, key=lambda r: -r[1])[:n]


def run_child(mode: str, workspace: Path, paper: str, stage: str, variant: str, seed: int, threads: int,
              profile: str) -> dict:
    scratch = _scratch_root(workspace, paper, stage)
    out = scratch / f"{mode}.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PAPERFLOW_TRACKING": "off", "PAPERFLOW_JOBSERVER": "off"}
    cmd = [sys.executable, __file__, "--child", mode, paper, stage, variant, str(seed), str(threads), profile, str(out)]
    proc = subprocess.run(cmd, cwd=scratch, env=env, capture_output=True, text=True)
    try:
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"{paper} {stage} {variant}/{seed} ({mode}) failed:\n{proc.stdout[-1500:]}\n{proc.stderr[-3000:]}")
        return json.loads(out.read_text())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# ---------------------------------------------------------------- which jobs
def heaviest_jobs(row: dict) -> list[tuple[str, str, int]]:
    """[(stage, variant, seed)]: the paper's most expensive run job, and prepare where it is > 20% of its CPU."""
    from paperflow.report.costs import read_benchmark, with_worker_usage

    logs = Path(row["root"]) / "logs" / row["paper"]
    jobs, prepare_cpu = [], 0.0
    for f in logs.rglob("*.benchmark.tsv"):
        cpu = with_worker_usage(read_benchmark(f), f).get("cpu_time", 0.0)
        rel = f.relative_to(logs).parts
        if rel[-1].startswith("prepare"):
            prepare_cpu = cpu
        elif len(rel) == 3 and rel[1].startswith("seed"):
            jobs.append((cpu, rel[0], int(rel[1][4:])))
    out = [("run", max(jobs)[1], max(jobs)[2])] if jobs else []
    if prepare_cpu > 0.2 * row["cpu_s"]:
        out.insert(0, ("prepare", "-", 0))
    return out


def jobs_of(labels: list[str]) -> list[tuple[str, str, int]]:
    """The (stage, variant, seed) of job labels as a result row writes them ("prepare", "<variant>/seed<N>")."""
    out = []
    for label in labels:
        if label == "prepare":
            out.append(("prepare", "-", 0))
        else:
            variant, seed = label.rsplit("/seed", 1)
            out.append(("run", variant, int(seed)))
    return out


def measure(row: dict, threads: int, profile: str, peak: float, scaling: bool = False,
            jobs: list[tuple[str, str, int]] | None = None) -> list[dict]:
    found = []
    for stage, variant, seed in jobs or heaviest_jobs(row):
        label = f"{row['paper']} {stage if stage == 'prepare' else f'{variant}/seed{seed}'}"
        print(f"[bench] {label}: timing ...", flush=True)
        timed = run_child("time", Path(row["root"]), row["paper"], stage, variant, seed, threads, profile)
        print(f"[bench] {label}: counting FLOPs ...", flush=True)
        flops = run_child("flops", Path(row["root"]), row["paper"], stage, variant, seed, threads, profile)
        # the stage that takes longest (train for most papers; compress for a pruning paper like owl)
        main = max(timed["seconds"], key=lambda k: timed["seconds"][k] if k != "run" else -1.0)
        sec, fl = timed["seconds"].get(main, 0.0), flops["flops"].get(main, 0.0)
        gflops = fl / sec / 1e9 if sec > 0 else float("nan")
        kernel_s = timed["split"]["torch_kernels"]
        found.append({"paper": row["paper"], "job": label.split(" ", 1)[1], "threads": threads, "job_s": timed["job_s"],
                      "stage_s": timed["seconds"], "stage_flops": flops["flops"], "main": main,
                      "gflops": gflops, "peak_fraction": gflops / peak, "split": timed["split"], "hot": timed["hot"],
                      # FLOPs of the whole job over the seconds spent inside torch's kernels: below the matmul peak
                      # when the kernels themselves are small (shapes too small to fill a core, element-wise ops)
                      "kernel_gflops": flops["flops_total"] / kernel_s / 1e9 if kernel_s > 0 else float("nan")})
        if scaling:  # the same job at 2 threads: PaperSpec.thread_speedup (main stage's seconds, 1 / 2 threads)
            print(f"[bench] {label}: timing at 2 threads ...", flush=True)
            two = run_child("time", Path(row["root"]), row["paper"], stage, variant, seed, 2, profile)
            found[-1]["thread_speedup"] = sec / max(two["seconds"].get(main, 0.0), 1e-9)
    return found


def table(results: list[dict], peak: float, small: dict[int, float] | None = None) -> list[str]:
    sizes = ", ".join(f"{n}: {g:.1f}" for n, g in (small or {}).items())
    lines = [f"fp32 matmul peak: {peak:.1f} GFLOP/s" + (f" (square n x n at n = {sizes} GFLOP/s: the floor of small "
             "layers)" if sizes else ""), "",
             "| paper | job | job s | main stage | its s | its GFLOP | GFLOP/s | / peak | in-kernel GFLOP/s | tuning s | "
             "data s | model load s | torch kernels s | python s | hottest Python |", "|" + "---|" * 15]
    for r in results:
        s = r["split"]
        if "thread_speedup" in r:
            lines.insert(0, f"{r['paper']} {r['job']}: {r['main']} at 2 threads is {r['thread_speedup']:.2f}x faster than at 1")
        lines.append(f"| {r['paper']} | {r['job']} | {r['job_s']:.1f} | {r['main']} | {r['stage_s'].get(r['main'], 0):.1f} | "
                     f"{r['stage_flops'].get(r['main'], 0) / 1e9:.1f} | {r['gflops']:.1f} | {r['peak_fraction']:.2f} | "
                     f"{r.get('kernel_gflops', float('nan')):.1f} | "
                     f"{s['tuning']:.1f} | {s['data_loading']:.1f} | {s['model_loading']:.1f} | {s['torch_kernels']:.1f} | "
                     f"{s['python_overhead']:.1f} | {'; '.join(f'{n} {t:.1f}s' for n, t in r.get('hot', []))} |")
    return lines


def compare(before: list[dict], after: list[dict]) -> list[str]:
    old = {(r["paper"], r["job"]): r for r in before}
    lines = ["| paper | job | job s before | after | ratio | peak fraction before | after |", "|" + "---|" * 7]
    for r in after:
        b = old.get((r["paper"], r["job"]))
        if b:
            lines.append(f"| {r['paper']} | {r['job']} | {b['job_s']:.1f} | {r['job_s']:.1f} | {r['job_s'] / b['job_s']:.2f} | "
                         f"{b['peak_fraction']:.2f} | {r['peak_fraction']:.2f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        _child(*argv[1:6], int(argv[6]), argv[7], argv[8])
        return 0
    from paperflow.report.costs import latest_costs

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", action="append", default=None, help="workspace with logs/ and results/ (repeatable)")
    parser.add_argument("--profile", default="default")
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--papers", default="", help="comma-separated ids instead of the top ones")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--scaling", action="store_true", help="also time each job at 2 threads (thread_speedup)")
    parser.add_argument("--out", default=None, help="write the figures as JSON")
    parser.add_argument("--compare", default=None, help="JSON of an earlier --out: print before/after ratios")
    parser.add_argument("--same-jobs", action="store_true",
                        help="with --compare: rerun exactly the earlier JSON's papers and jobs (not the heaviest of these roots)")
    args = parser.parse_args(argv)
    rows = latest_costs([Path(r) for r in (args.root or [str(ROOT)])], profile=args.profile)
    same: dict[str, list[str]] = {}
    if args.same_jobs:
        if not args.compare:
            parser.error("--same-jobs needs --compare (the JSON whose jobs to rerun)")
        for r in json.loads(Path(args.compare).read_text())["results"]:
            same.setdefault(r["paper"], []).append(r["job"])
        args.papers = ",".join(same)
    if args.papers:
        wanted = args.papers.split(",")
        rows = [r for r in rows if r["paper"] in wanted]
    else:
        rows = sorted(rows, key=lambda r: -r["cpu_s"])[: args.top]
    if not rows:
        print("no default runs with benchmark files under the roots: run the workflow first")
        return 1
    peak = matmul_peak_gflops(args.threads)
    small = {n: matmul_peak_gflops(args.threads, n=n, reps=max(20, 2 * (1024 // n) ** 3 // 64)) for n in (32, 64, 128, 256)}
    results = []
    for row in rows:
        results += measure(row, args.threads, args.profile, peak, args.scaling, jobs_of(same[row["paper"]]) if same else None)
    print("\n".join(table(results, peak, small)))
    if args.out:
        Path(args.out).write_text(json.dumps({"peak_gflops": peak, "small_gflops": small, "results": results}, indent=1))
    if args.compare:
        print("\n" + "\n".join(compare(json.loads(Path(args.compare).read_text())["results"], results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

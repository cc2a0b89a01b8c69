"""Job start cost: from process spawn to the first stage's start, as a ratio to a bare `import torch`.

Usage: python benchmarks/bench_job_start.py [--paper icl_functional_gd] [--repeats 3]

A workflow job is `python -m paperflow.cli stage run ...`; its first stage (train) starts when it prints
"<paper>/<variant>/seed<k>: train" (after the imports, the MLflow parent and stage runs, the data load).
The benchmark prepares the paper once in a scratch copy (smoke profile, its own mlflow.db), then per repeat
spawns, alternating: (a) `python -c "import torch"`, (b) the same plus one AdamW step on a Linear (the floor of
any job that trains with torch.optim: the optimizer's step imports torch._dynamo), (c) the real job logging to
the sqlite store through the mlflow library (PAPERFLOW_TRACKING_SERVER=off), (d) the real job as the workflow
runs it, logging over REST to the loopback tracking server (paperflow/tracking_server.py, started once here as
the Snakefile's onstart does), (e) the job as the workflow runs it now: `python -m paperflow.job`, handed to the job
fork server (paperflow/jobserver.py, torch and the papers imported once) and logging over REST. Jobs are killed
as soon as their train stage starts. It prints the medians, the
ratios to (a) and (b), the modules that cost most in (d) (`python -X importtime`), and the number of jobs in the
default DAG (what a second of start cost is multiplied by). Run it on an idle machine: the ratios are what it is
for.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
PY = sys.executable
TORCH_ONLY = "import torch"
TORCH_STEP = ("import torch; m = torch.nn.Linear(4, 4); o = torch.optim.AdamW(m.parameters()); "
              "m(torch.randn(2, 4)).sum().backward(); o.step()")


def scratch_checkout(paper: str) -> Path:
    """params.yaml + Snakefile (find_root's markers) + resources, and the paper prepared on the smoke profile."""
    ws = Path(tempfile.mkdtemp(prefix="pf_jobstart_"))
    for name in ("params.yaml", "Snakefile"):
        shutil.copy(ROOT / name, ws / name)
    if (ROOT / "resources").exists():
        (ws / "resources").symlink_to(ROOT / "resources")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    subprocess.run([PY, "-m", "paperflow.cli", "init-tracking", "--papers", paper], cwd=ws, env=env, check=True)
    subprocess.run([PY, "-m", "paperflow.cli", "stage", "prepare", "--paper", paper, "--profile", "smoke"], cwd=ws,
                   env=env, check=True, capture_output=True)
    return ws


def spawn_seconds(code: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([PY, "-c", code], check=True)
    return time.perf_counter() - t0


def job_start_seconds(ws: Path, paper: str, variant: str, extra: list[str] | None = None, server: str | None = None,
                      forked: bool = False) -> float:
    """Seconds until the job prints that its train stage starts; the job is then killed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PAPERFLOW_STAGE_CACHE": "off", **_server_env(ws, server),
           "PAPERFLOW_JOBSERVER": "on" if forked else "off"}
    cmd = [PY, *(extra or []), "-m", "paperflow.job" if forked else "paperflow.cli", "stage", "run", "--paper", paper, "--variant", variant,
           "--seed", "0", "--profile", "smoke", "--threads", "1"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ws, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        for line in proc.stdout:  # type: ignore[union-attr]
            if line.rstrip().endswith(f"{paper}/{variant}/seed0: train"):
                return time.perf_counter() - t0
        raise RuntimeError(f"the job ended without starting its train stage: {' '.join(cmd)}")
    finally:
        proc.kill()
        proc.wait()


def _server_env(ws: Path, server: str | None) -> dict[str, str]:
    from paperflow.tracking import default_uri

    if server:
        return {"MLFLOW_TRACKING_URI": server, "PAPERFLOW_TRACKING_STORE": default_uri(ws)}
    return {"PAPERFLOW_TRACKING_SERVER": "off"}


def importtime_top(ws: Path, paper: str, variant: str, n: int = 12, server: str | None = None) -> list[tuple[float, str]]:
    """The top-level packages a job imports, by cumulative import time (s), from python -X importtime."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PAPERFLOW_STAGE_CACHE": "off", **_server_env(ws, server)}
    cmd = [PY, "-X", "importtime", "-m", "paperflow.cli", "stage", "run", "--paper", paper, "--variant", variant,
           "--seed", "0", "--profile", "smoke", "--threads", "1"]
    with tempfile.TemporaryFile("w+") as log:  # a file, not a pipe: ~100 kB of importtime lines would block it
        proc = subprocess.Popen(cmd, cwd=ws, env=env, stdout=subprocess.PIPE, stderr=log, text=True)
        for line in proc.stdout:  # type: ignore[union-attr]
            if line.rstrip().endswith(": train"):
                break
        proc.kill()
        proc.wait()
        log.seek(0)
        err = log.read()
    top: dict[str, float] = {}
    for row in err.splitlines():
        if not row.startswith("import time:") or "|" not in row:
            continue
        _, cumulative, name = row.split("|")
        if not cumulative.strip().isdigit():  # the header line
            continue
        if len(name) - len(name.lstrip()) == 1:  # imported at top level, not as a child of another module
            pkg = name.strip().split(".")[0]
            top[pkg] = top.get(pkg, 0.0) + int(cumulative) / 1e6
    return sorted(((s, p) for p, s in top.items()), reverse=True)[:n]


def default_dag_jobs() -> int:
    from paperflow import config

    plan = config.workflow_plan(config.read_params(ROOT / "params.yaml"))
    runs = sum(len(p["seeds"]) * len(p["variants"]) for p in plan["papers"].values())
    return runs + 2 * len(plan["papers"]) + 1  # run jobs + prepare + collect per paper + report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--paper", default="icl_functional_gd", help="a paper that needs no resource (cheap prepare)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from paperflow.registry import get_paper

    variant = get_paper(args.paper).variants[0]
    ws = scratch_checkout(args.paper)
    from paperflow import jobserver, tracking_server
    from paperflow.tracking import default_uri

    t0 = time.perf_counter()
    server = tracking_server.start(ws, default_uri(ws))
    server_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    os.environ.update({"MLFLOW_TRACKING_URI": server, "PAPERFLOW_TRACKING_STORE": default_uri(ws)})  # what jobs inherit
    jobserver.start(ws)
    jobserver_s = time.perf_counter() - t0
    for key in ("MLFLOW_TRACKING_URI", "PAPERFLOW_TRACKING_STORE"):
        os.environ.pop(key)
    try:
        a, b, c, d, e = [], [], [], [], []
        for _ in range(args.repeats):  # interleaved, so drifting load hits all four alike
            a.append(spawn_seconds(TORCH_ONLY))
            b.append(spawn_seconds(TORCH_STEP))
            c.append(job_start_seconds(ws, args.paper, variant))
            d.append(job_start_seconds(ws, args.paper, variant, server=server))
            e.append(job_start_seconds(ws, args.paper, variant, server=server, forked=True))
        ma, mb, mc, md, me = (statistics.median(x) for x in (a, b, c, d, e))
        print(f"job start ({args.paper}/{variant}, median of {args.repeats}, {os.cpu_count()} CPUs):")
        print(f"  (a) python -c 'import torch'                 {ma:6.2f} s")
        print(f"  (b) import torch + one AdamW step (floor)    {mb:6.2f} s   b/a = {mb / ma:.2f}")
        print(f"  (c) job to its train stage, mlflow library   {mc:6.2f} s   c/a = {mc / ma:.2f}   c/b = {mc / mb:.2f}")
        print(f"  (d) job to its train stage, REST to server   {md:6.2f} s   d/a = {md / ma:.2f}   d/b = {md / mb:.2f}")
        print(f"  (e) job to its train stage, job server       {me:6.2f} s   e/a = {me / ma:.2f}   e/b = {me / mb:.2f}")
        print(f"  loopback tracking server start (once per workflow run): {server_s:.1f} s")
        print(f"  job server start, torch and every paper imported (once per workflow run): {jobserver_s:.1f} s")
        print("  top-level imports of (d), cumulative s (-X importtime, one run):")
        for seconds, pkg in importtime_top(ws, args.paper, variant, server=server):
            print(f"    {pkg:<28} {seconds:6.2f}")
        jobs = default_dag_jobs()
        print(f"default DAG: {jobs} jobs; each second of start cost is {jobs / 60:.1f} min of job time")
    finally:
        jobserver.stop(ws)
        tracking_server.stop(ws)
        shutil.rmtree(ws, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

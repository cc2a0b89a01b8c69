"""Workflow speed figures (printed, not asserted):
  1. no-op `snakemake --cores 8 all` after a complete run (target: under 3 s);
  2. DAG build for 75 papers x 3 variants x 3 seeds of dummy specs (target: under 5 s), cold (the plan
     cache is empty: every paper module imported and validated) and warm.
Usage: python benchmarks/bench_workflow.py [--profile default]
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]

DUMMY = '''
from dataclasses import dataclass
from paperflow.registry import register_paper
from paperflow.spec import Comparison, PaperSpec

@dataclass(frozen=True)
class Config:
    steps: int = 1

for i in range(75):
    register_paper(PaperSpec(id=f"dummy{i:02d}", title="dummy", claim="a below b", Config=Config,
        variants=("a", "b", "c"), prepare=None, train=None, evaluate=None,
        comparisons=lambda cfg: [Comparison("loss", "a", "b")], data="none"))
'''


def timed(cmd: list[str], cwd: Path) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return seconds, proc.stdout + proc.stderr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--profile", default="default")
    args = ap.parse_args()

    # 1. no-op in the repository (needs a complete run of that profile)
    seconds, out = timed(SNAKEMAKE + ["--cores", "8", "all", "--config", f"profile={args.profile}"], ROOT)
    seconds, out = timed(SNAKEMAKE + ["--cores", "8", "all", "--config", f"profile={args.profile}"], ROOT)
    if "Nothing to be done" in out:
        print(f"no-op snakemake all ({args.profile}): {seconds:.2f} s  (target < 3 s: ratio {seconds / 3:.2f})")
    else:
        print(f"no-op check skipped: the {args.profile} run is not complete (it ran jobs for {seconds:.1f} s)")

    # 2. DAG build with 75 dummy papers
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        for name in ("Snakefile", "workflow", "src"):
            src = ROOT / name
            (shutil.copytree if src.is_dir() else shutil.copy2)(src, ws / name)
        (ws / "bench_dummy_papers.py").write_text(DUMMY)
        ids = [f"dummy{i:02d}" for i in range(75)]
        params = {
            "profile": "default", "only": ids, "plugins": ["bench_dummy_papers"],
            "profiles": {"default": {"seeds": [0, 1, 2], "papers": {}}}, "papers": {i: {"steps": 1} for i in ids},
        }
        (ws / "params.yaml").write_text(yaml.safe_dump(params))
        env_cmd = ["env", f"PYTHONPATH={ws}:{ws / 'src'}"] + SNAKEMAKE + ["-n", "--cores", "8", "all", "-q"]
        cold, _ = timed(env_cmd, ws)
        warm, _ = timed(env_cmd, ws)
        jobs = 75 * 3 * 3 + 75 + 75 + 2  # run per (variant, seed), prepare and collect per paper, report, all
        print(f"DAG build, 75 papers x 3 variants x 3 seeds ({jobs} jobs): cold {cold:.2f} s, warm {warm:.2f} s  "
              f"(target < 5 s: ratio {max(cold, warm) / 5:.2f})")


if __name__ == "__main__":
    main()

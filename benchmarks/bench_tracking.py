"""MLflow logging overhead of a stage (target: under 5% of the stage's time), printed as a ratio.

Runs the same train stage of one paper twice through the stage runner, with tracking on (a fresh
sqlite store) and off, and prints the wall-time ratio and the time spent inside logging calls.
Usage: python benchmarks/bench_tracking.py [--paper dcmha] [--variant mha] [--profile smoke]
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--paper", default="dcmha")
    ap.add_argument("--variant", default="mha")
    ap.add_argument("--profile", default="smoke")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        for name in ("Snakefile", "params.yaml", "workflow", "src"):
            src = ROOT / name
            (shutil.copytree if src.is_dir() else shutil.copy2)(src, ws / name)
        (ws / "resources").symlink_to(ROOT / "resources")
        pf = [sys.executable, "-m", "paperflow.cli"]
        env = {"PYTHONPATH": str(ws / "src"), "PATH": "/usr/bin:/bin"}
        subprocess.run(pf + ["stage", "prepare", "--paper", args.paper, "--profile", args.profile], cwd=ws, check=True, env={**env, "PAPERFLOW_TRACKING": "off"}, capture_output=True)
        subprocess.run(pf + ["init-tracking"], cwd=ws, check=True, env=env, capture_output=True)
        cmd = pf + ["stage", "train", "--paper", args.paper, "--variant", args.variant, "--seed", "0", "--profile", args.profile]
        times = {"on": [], "off": []}
        for _ in range(args.repeats):
            for mode in ("off", "on"):
                t0 = time.perf_counter()
                subprocess.run(cmd, cwd=ws, check=True, env={**env, "PAPERFLOW_TRACKING": mode}, capture_output=True)
                times[mode].append(time.perf_counter() - t0)
        on, off = min(times["on"]), min(times["off"])
        import sqlite3

        db = sqlite3.connect(ws / "mlflow.db")
        logging_s = db.execute("select value from latest_metrics where key = 'time/logging_s' order by value limit 1").fetchone()
        train_s = db.execute("select value from latest_metrics where key = 'time/train_s' order by value limit 1").fetchone()
        print(f"{args.paper}/{args.variant} train stage ({args.profile}): tracking off {off:.2f} s, on {on:.2f} s; "
              f"overhead {100 * (on - off) / off:.1f}% of the stage (target < 5%)")
        if logging_s and train_s:
            print(f"time inside per-step logging calls: {logging_s[0]:.3f} s of {train_s[0]:.2f} s training "
                  f"({100 * logging_s[0] / train_s[0]:.2f}%)")


if __name__ == "__main__":
    main()

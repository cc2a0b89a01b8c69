"""The per-paper cost table of the last run, from Snakemake's benchmark files under logs/ (printed).

Usage: python benchmarks/bench_costs.py [--root PATH] [--cpus N]
Prints each paper's jobs, summed job time, CPU time and peak memory, the projected wall time of the run on
N CPUs, and the projection to 75 papers at the same mean cost (the budgets in docs/DESIGN.md).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from paperflow.report.costs import cost_lines, paper_costs, projection  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default=str(ROOT))
    parser.add_argument("--cpus", type=int, default=None)
    args = parser.parse_args()
    root = Path(args.root)
    papers = sorted(p.name for p in (root / "logs").iterdir() if p.is_dir() and p.name != "resources") if (root / "logs").is_dir() else []
    costs = paper_costs(root, papers)
    if not costs:
        print(f"no benchmark files under {root / 'logs'}: run the workflow first")
        return 1
    print("\n".join(cost_lines(costs, projection(costs, args.cpus))))
    return 0


if __name__ == "__main__":
    sys.exit(main())

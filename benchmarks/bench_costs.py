"""The per-paper cost table of the latest runs, from Snakemake's benchmark files under logs/ (printed).

Usage: python benchmarks/bench_costs.py [--root PATH ...] [--profile default] [--cpus N] [--check 4h]
Prints each paper's jobs, summed job time, CPU time, their ratio and peak memory, the projected wall time of the
run on N CPUs, and the projection to the whole registry (75 papers) at the same mean cost, on the job-time and
the CPU-time basis (DESIGN.md "Budgets"). Several --root folders assemble one table from per-paper runs
(scripts/dev_run.sh workspaces): each paper's row comes from the root whose benchmark files are newest.
--check BUDGET exits 1 when the job-time projection exceeds BUDGET (4h, 240m, 14400s).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from paperflow.report.costs import budget_check, cost_lines, latest_costs, parse_budget, projection  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", action="append", default=None, help="workspace with logs/ (repeatable)")
    parser.add_argument("--profile", default=None, help="keep only runs of this profile (e.g. default)")
    parser.add_argument("--cpus", type=int, default=None)
    parser.add_argument("--target", type=int, default=75, help="papers to project to")
    parser.add_argument("--check", default=None, metavar="BUDGET", help="exit 1 if the projection exceeds it")
    args = parser.parse_args(argv)
    roots = [Path(r) for r in (args.root or [str(ROOT)])]
    costs = latest_costs(roots, profile=args.profile)
    if not costs:
        print(f"no benchmark files{' of profile ' + args.profile if args.profile else ''} under "
              f"{', '.join(str(r / 'logs') for r in roots)}: run the workflow first")
        return 1
    proj = projection(costs, args.cpus, target=args.target)
    print("\n".join(cost_lines(costs, proj)))
    if args.check:
        ok, line = budget_check(proj, parse_budget(args.check))
        print(line)
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

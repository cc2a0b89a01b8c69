"""The per-paper cost table: sums of Snakemake benchmark files and the projection, on a hand-made run."""
from __future__ import annotations

import pytest

from paperflow.report.costs import budget_check, cost_lines, latest_costs, paper_costs, parse_budget, projection

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def _bench(path, s, rss, cpu):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + f"{s}\t0:00:{int(s):02d}\t{rss}\t1\t1\t1\t0\t0\t50\t{cpu}\n")


def test_costs_sum_jobs_and_project(tmp_path):
    _bench(tmp_path / "logs/a/prepare.benchmark.tsv", 10.0, 100.0, 9.0)
    _bench(tmp_path / "logs/a/m/seed0/run.benchmark.tsv", 30.0, 400.0, 28.0)
    _bench(tmp_path / "logs/a/m/seed1/run.benchmark.tsv", 20.0, 300.0, "NA")
    _bench(tmp_path / "logs/b/m/seed0/run.benchmark.tsv", 60.0, 50.0, 59.0)
    costs = paper_costs(tmp_path, ["a", "b", "c"])  # c has no files: left out
    assert [(c["paper"], c["jobs"], c["job_s"], c["cpu_s"], c["peak_rss_mb"]) for c in costs] == [
        ("a", 3, 60.0, 37.0, 400.0), ("b", 1, 60.0, 59.0, 50.0)]
    proj = projection(costs, cpus=2, target=75)
    assert proj["job_s"] == 120.0 and proj["wall_s"] == 60.0
    assert proj["target_wall_s"] == pytest.approx(120.0 / 2 * 75 / 2)  # mean 60 s per paper x 75 / 2 CPUs
    lines = cost_lines(costs, proj)
    assert lines[2].startswith("| a |") and "75 papers" in lines[-1]


def _metrics(root, paper, profile):
    path = root / "results" / paper / "metrics.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"paper,variant,seed,profile\n{paper},m,0,{profile}\n")


def test_latest_costs_assemble_roots_by_profile_and_recency(tmp_path):
    import os

    a, b = tmp_path / "a", tmp_path / "b"
    _bench(a / "logs/p/m/seed0/run.benchmark.tsv", 10.0, 1.0, 10.0)
    _bench(b / "logs/p/m/seed0/run.benchmark.tsv", 40.0, 1.0, 20.0)  # newer run of p: wins
    _bench(a / "logs/q/m/seed0/run.benchmark.tsv", 5.0, 1.0, 5.0)
    _bench(b / "logs/q/m/seed0/run.benchmark.tsv", 1.0, 1.0, 1.0)  # newer, but a smoke run: left out
    for root, paper, profile in ((a, "p", "default"), (b, "p", "default"), (a, "q", "default"), (b, "q", "smoke")):
        _metrics(root, paper, profile)
    os.utime(a / "logs/p/m/seed0/run.benchmark.tsv", (1, 1))
    os.utime(a / "logs/q/m/seed0/run.benchmark.tsv", (1, 1))
    rows = latest_costs([a, b], profile="default")
    assert [(r["paper"], r["job_s"], r["root"]) for r in rows] == [("p", 40.0, str(b)), ("q", 5.0, str(a))]
    proj = projection(rows, cpus=2, target=4)
    assert proj["target_wall_s"] == pytest.approx(45.0 / 2 * 4 / 2)
    assert proj["target_cpu_wall_s"] == pytest.approx(25.0 / 2 * 4 / 2)
    assert "| p | default | 1 | 40 | 20 | 2.00 |" in "\n".join(cost_lines(rows, proj))


def test_budget_check_fails_over_budget_and_the_cli_exits_1(tmp_path, capsys):
    import importlib.util
    from pathlib import Path

    assert parse_budget("4h") == 14400 and parse_budget("90m") == 5400 and parse_budget("30") == 30
    with pytest.raises(ValueError):
        parse_budget("four hours")
    _bench(tmp_path / "logs/p/m/seed0/run.benchmark.tsv", 600.0, 1.0, 590.0)
    _metrics(tmp_path, "p", "default")
    proj = projection(latest_costs([tmp_path]), cpus=2, target=75)  # 600 s x 75 / 2 = 6.25 h
    assert budget_check(proj, 4 * 3600)[0] is False and budget_check(proj, 7 * 3600)[0] is True
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_costs.py"
    spec = importlib.util.spec_from_file_location("bench_costs", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--root", str(tmp_path), "--cpus", "2", "--check", "4h"]) == 1
    assert "OVER BUDGET" in capsys.readouterr().out
    assert bench.main(["--root", str(tmp_path), "--cpus", "2", "--check", "7h"]) == 0

"""The per-paper cost table: sums of Snakemake benchmark files and the projection, on a hand-made run."""
from __future__ import annotations

import pytest

from paperflow.report.costs import cost_lines, paper_costs, projection

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

"""Issue 27's plumbing: the LM preloaded by the job server is what the jobs get (shared, not re-read), a job's
torch threads reach the cost table (a 2-thread job holds 2 CPUs), and bench_efficiency's matmul peak is sane."""
from __future__ import annotations

import json

import pytest
import torch

from paperflow import job
from paperflow.data import smollm2
from paperflow.report.costs import paper_costs, projection

from tiny_llama import tiny_llama


def test_preloaded_lm_is_shared_frozen_and_copied_trainable(tmp_path):
    model_dir = tmp_path / "tiny"
    tiny_llama().save_pretrained(str(model_dir), safe_serialization=True)
    threads = torch.get_num_threads()
    try:
        smollm2.preload(str(model_dir))
        assert torch.get_num_threads() == 1  # the job server forks from a process without an OpenMP pool
        (model_dir / "model.safetensors").rename(tmp_path / "moved")  # a job must not read the file again
        frozen = smollm2.frozen_smollm2(str(tmp_path / "." / "tiny"))  # same folder, other spelling
        assert frozen is smollm2._PRELOADED[smollm2._key(str(model_dir))]
        assert not any(p.requires_grad for p in frozen.parameters())
        own = smollm2.load_smollm2(str(model_dir))
        assert own is not frozen and all(p.requires_grad for p in own.parameters()) and not own.training
        for (name, a), (_, b) in zip(own.state_dict().items(), frozen.state_dict().items()):
            assert torch.equal(a, b), name
        with torch.no_grad():
            own.model.embed_tokens.weight.add_(1.0)  # the caller's copy: the shared model is untouched
        assert not torch.equal(own.model.embed_tokens.weight, frozen.model.embed_tokens.weight)
    finally:
        smollm2._PRELOADED.clear()
        torch.set_num_threads(threads)


def test_job_threads_follow_the_cli_rule(monkeypatch):
    monkeypatch.setenv("PAPERFLOW_SLOTS_PER_CPU", "4")
    monkeypatch.setattr(job.os, "cpu_count", lambda: 2)
    assert job.torch_threads(["stage", "run", "--job-threads", "8"]) == 2
    assert job.torch_threads(["stage", "run", "--job-threads", "4"]) == 1
    assert job.torch_threads(["stage", "run", "--job-threads", "16"]) == 2  # never more than the CPUs
    assert job.torch_threads(["stage", "run", "--threads", "3"]) == 3
    assert job.torch_threads(["stage", "run"]) == 1


def test_a_two_thread_job_counts_twice_in_the_projection(tmp_path):
    header = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
    for seed, threads in ((0, 2), (1, 1)):
        d = tmp_path / "logs" / "p" / "m" / f"seed{seed}"
        d.mkdir(parents=True)
        (d / "run.benchmark.tsv").write_text(header + "10\t0:00:10\t1\t1\t1\t1\t0\t0\t50\t1\n")
        (d / "run.usage.json").write_text(json.dumps({"via": "jobserver", "cpu_s": 19.0, "maxrss_mb": 5.0, "threads": threads}))
    (row,) = paper_costs(tmp_path, ["p"])
    assert row["job_s"] == 20.0 and row["core_s"] == 30.0
    assert projection([row], cpus=2, target=1)["target_wall_s"] == pytest.approx(15.0)


def test_matmul_peak_is_positive_and_finite():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_efficiency.py"
    spec = importlib.util.spec_from_file_location("bench_efficiency", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    threads = torch.get_num_threads()
    try:
        peak = bench.matmul_peak_gflops(1, n=128, reps=2)
    finally:
        torch.set_num_threads(threads)
    assert 0 < peak < 1e5


def test_threads_per_job_follow_the_measured_speedup():
    import dataclasses

    from paperflow.registry import get_paper
    from paperflow.spec import THREADS_RULE

    spec = get_paper("dcmha")
    assert dataclasses.replace(spec, thread_speedup=THREADS_RULE).job_threads() == 2
    assert dataclasses.replace(spec, thread_speedup=THREADS_RULE - 0.05).job_threads() == 1
    assert dataclasses.replace(spec, thread_speedup=0.0, weight=2).job_threads() == 1  # weight is memory, not threads


def test_the_workflow_profile_keeps_the_scheduler_cheap():
    """profiles/default/config.yaml (Snakemake's workflow profile): the greedy scheduler and a one-minute job-rate
    timespan, which took the Snakemake process from ~30% of a core to idle in the default run (DESIGN.md, issue 27)."""
    from pathlib import Path

    import yaml

    profile = yaml.safe_load((Path(__file__).resolve().parents[1] / "profiles" / "default" / "config.yaml").read_text())
    assert profile["scheduler"] == "greedy"
    n, span = profile["max-jobs-per-timespan"].split("/")
    assert int(n) >= 100 and span.endswith("m")

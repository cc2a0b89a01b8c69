"""The whole DAG on the smoke profile: report, MLflow layout, no-op, determinism, a killed job.

One smoke run per session (conftest.smoke_run); every registered paper is checked by the
registry-parametrized tests, so a new paper is covered without new test code.
"""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time

import polars as pl
import pytest
import torch

from conftest import ROOT, SNAKEMAKE, run
from paperflow.config import load
from paperflow.registry import list_papers
from paperflow.report.claims import VERDICTS

PAPERS = [s.id for s in list_papers()]
NO_STAGE_CACHE = {"PAPERFLOW_STAGE_CACHE": "off"}  # retrain for real: determinism and kill tests
CLAIM_COLUMNS = [
    "paper", "claim", "metric", "better", "method", "baseline", "method_mean", "method_std", "baseline_mean",
    "baseline_std", "delta", "ci_low", "ci_high", "n_seeds", "verdict", "compressed_method_mean",
    "compressed_baseline_mean", "data", "substitutions",
]


def test_report_is_written(workspace, smoke_run):
    for name in ("index.html", "claims.md", "claims.csv"):
        assert (workspace / "reports" / name).stat().st_size > 0
    claims = pl.read_csv(workspace / "reports" / "claims.csv")
    assert set(CLAIM_COLUMNS) <= set(claims.columns)
    judged = claims.filter(pl.col("role") != "fact")
    assert set(judged["verdict"].unique()) <= set(VERDICTS)
    fact_verdicts = claims.filter(pl.col("role") == "fact")["verdict"].fill_null("")
    assert (fact_verdicts == "").all(), "a fact row carries a verdict"  # written as "" (no verdict)
    for pid in PAPERS:  # every paper reports its headline
        assert claims.filter((pl.col("paper") == pid) & (pl.col("role") == "headline")).height >= 1, pid
    assert set(claims["paper"].unique()) == set(PAPERS)
    html = (workspace / "reports" / "index.html").read_text()
    for pid in PAPERS:
        assert f"id='{pid}'" in html
    assert "Data and substitutions" in html and "Headline claims" in html
    assert (workspace / "reports" / "claims.md").read_text().index("## Headline claims") < \
        (workspace / "reports" / "claims.md").read_text().index(f"## {PAPERS[0]}:")


@pytest.mark.parametrize("paper", PAPERS)
def test_every_paper_runs_end_to_end(workspace, smoke_run, paper):
    spec = next(s for s in list_papers() if s.id == paper)
    table = pl.read_csv(workspace / "results" / paper / "metrics.csv")
    # derive() may add "<name>|<view>" rows (one modality pruned only, the best lr of a sweep, a reference
    # line); every trained variant appears as a plain row and nothing else is plain
    plain = {v for v in table["variant"] if "|" not in v}
    assert sorted(plain) == sorted(spec.variants)
    for view in set(table["variant"]) - plain:
        head = view.split("|", 1)[0]
        assert head in plain or head == "ref" or any(v.startswith(head + "_") for v in plain), view
    dense = [c for c in table.columns if c.startswith("dense/")]
    assert dense, "evaluate returned no dense metric"
    # contract v3: every mechanism gate reads a column the runs logged (never a config value)
    from paperflow.contract import logged_problems

    smoke_cfg = load(ROOT / "params.yaml", profile="smoke").config(paper)  # metric names follow the profile's levels
    assert not logged_problems(spec, smoke_cfg, table.columns)
    if spec.compress is not None:
        assert any(c.startswith("compressed:") for c in table.columns), "no compressed metrics"
    else:
        # the compress stage is skipped only where no weights exist (or the paper says why, e.g. LoCoCo's cache
        # policy is its compression): a trained model with a weight matrix and no compression fails here
        model = torch.load(workspace / "results" / paper / spec.variants[0] / "seed0" / "model.pt", weights_only=True)
        assert spec.compression_exempt or not _has_weight_matrix(model), \
            f"{paper}: its variants have weights but no compress stage (issue: compress every paper with weights)"
        assert spec.compression, f"{paper}: compress=None must say why in PaperSpec.compression"
    # papers that log training curves get a curves figure (calibration-only papers like OWL log none)
    logged = any(len(c) >= 2 for p in (workspace / "results" / paper).glob("*/seed*/curves.json")
                 for c in json.loads(p.read_text()).values())  # a one-point curve draws no chart
    assert (workspace / "reports" / "figures" / f"{paper}_curves.png").exists() or not logged
    if spec.tradeoff:
        assert (workspace / "reports" / "figures" / f"{paper}_tradeoff.png").exists()


def _has_weight_matrix(obj) -> bool:
    """True when a saved model (nested dicts/lists of tensors) holds a floating tensor with >= 2 dims."""
    if isinstance(obj, torch.Tensor):
        return obj.is_floating_point() and obj.dim() >= 2
    if isinstance(obj, dict):
        return any(_has_weight_matrix(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(_has_weight_matrix(v) for v in obj)
    return False


def test_mlflow_layout(workspace, smoke_run):
    db = sqlite3.connect(workspace / "mlflow.db")
    exps = dict(db.execute("select name, experiment_id from experiments").fetchall())
    settings = load(ROOT / "params.yaml", profile="smoke")
    for spec in list_papers():
        seeds = len(settings.seeds(spec.id))
        exp = exps[spec.id]
        parents = db.execute(
            "select r.run_uuid, r.status from runs r join tags t on t.run_uuid = r.run_uuid "
            "join tags c on c.run_uuid = r.run_uuid "
            "where r.experiment_id = ? and t.key = 'stage' and t.value = 'run' and c.key = 'current' and c.value = 'true'", (exp,)
        ).fetchall()
        assert len(parents) == len(spec.variants) * seeds
        assert {status for _, status in parents} == {"FINISHED"}
        for run_id, _ in parents[:2]:
            children = db.execute(
                "select t2.value from tags t join tags t2 on t2.run_uuid = t.run_uuid "
                "where t.key = 'mlflow.parentRunId' and t.value = ? and t2.key = 'stage'", (run_id,)
            ).fetchall()
            assert sorted(c for (c,) in children) == ["compress", "evaluate", "train"]
            tags = dict(db.execute("select key, value from tags where run_uuid = ?", (run_id,)).fetchall())
            for key in ("paper", "variant", "seed", "profile", "git_commit"):
                assert key in tags
            metrics = {k for (k,) in db.execute("select key from latest_metrics where run_uuid = ?", (run_id,))}
            assert any(k.startswith("dense/") for k in metrics)


def test_noop_rerun_does_nothing(workspace, smoke_run):
    proc = run(SNAKEMAKE + ["--cores", "8", "all", "--config", "profile=smoke"], workspace)
    assert "Nothing to be done" in proc.stdout + proc.stderr


@pytest.mark.parametrize("cores", [["--cores", "1"], []], ids=["cores1", "no-cores"])
def test_thread_count_is_not_a_rerun_trigger(workspace, smoke_run, cores):
    """The run was made with --cores 8; a dry run with another (or no) core count has nothing to do."""
    proc = run(SNAKEMAKE + ["-n", *cores, "all", "--config", "profile=smoke"], workspace)
    out = proc.stdout + proc.stderr
    assert "Nothing to be done" in out, out[-3000:]


def test_dvc_relinking_resources_reruns_nothing(workspace, smoke_run):
    """DVC re-links unchanged resources (new mtimes, same content): Snakemake must not rerun any paper."""
    resources = (workspace / "resources").resolve()
    for path in [resources, *resources.rglob("*")]:
        os.utime(path)  # what `dvc repro resources` / `dvc checkout` does to an unchanged artifact
    proc = run(SNAKEMAKE + ["-n", "--cores", "8", "all", "--config", "profile=smoke"], workspace)
    assert "Nothing to be done" in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]


def test_a_hole_under_results_is_rebuilt(workspace, smoke_run):
    """A job output deleted (an interrupted --forcerun) is planned again by `snakemake all`, not hidden."""
    data = workspace / "results" / "dcmha" / "data" / "data.pt"
    aside = data.with_name("data.pt.aside")
    os.rename(data, aside)
    try:
        proc = run(SNAKEMAKE + ["-n", "--cores", "8", "all", "--config", "profile=smoke"], workspace)
        out = proc.stdout + proc.stderr
        assert "Missing output files: results/dcmha/data/data.pt" in out, out[-3000:]
    finally:
        os.rename(aside, data)


def test_report_keeps_every_paper_when_only_one_runs(workspace, smoke_run):
    """`only` restricts what runs, not what is reported: a report rebuilt under only=[dcmha] keeps all papers."""
    run(SNAKEMAKE + ["--cores", "2", "all", "--config", "profile=smoke", "only=[dcmha]", "--forcerun", "report"], workspace)
    claims = pl.read_csv(workspace / "reports" / "claims.csv")
    assert set(claims["paper"].unique()) == set(PAPERS)


def test_dvc_reads_headline_metrics(workspace, smoke_run):
    """dvc.yaml declares each paper's headline numbers as metrics: `dvc metrics show` reads them."""
    proc = run([SNAKEMAKE[0], "-m", "dvc", "metrics", "show", "--json"], workspace)
    shown = json.loads(proc.stdout)
    files = next(iter(shown.values()))["data"]
    for pid in PAPERS:
        data = files[f"reports/metrics/{pid}.json"]["data"]
        heads = [v for k, v in data.items() if k.startswith("headline")]
        assert heads and all(h["verdict"] in ("reproduced", "inconclusive", "not reproduced", "not testable") for h in heads), (pid, data)


def _one_run(workspace):
    spec = next(s for s in list_papers() if s.id == "fairgrad")
    return workspace / "results" / spec.id / spec.variants[0] / "seed0"


def test_same_seed_same_metrics(workspace, smoke_run):
    run_dir = _one_run(workspace)
    before = json.loads((run_dir / "metrics.json").read_text())["metrics"]
    run(SNAKEMAKE + ["--cores", "8", "--config", "profile=smoke", "--forcerun", str(run_dir.relative_to(workspace) / "model.pt"),
                     "--", str(run_dir.relative_to(workspace) / "metrics.json")], workspace, env=NO_STAGE_CACHE)
    after = json.loads((run_dir / "metrics.json").read_text())["metrics"]
    assert after == before


def test_killed_job_leaves_no_artifact_and_next_run_completes(workspace, smoke_run):
    import torch

    run_dir = _one_run(workspace)
    rel = run_dir.relative_to(workspace)
    log = workspace / "logs" / rel.parts[1] / rel.parts[2] / rel.parts[3] / "run.log"
    before = json.loads((run_dir / "metrics.json").read_text())["metrics"]
    log.unlink(missing_ok=True)
    proc = subprocess.Popen(
        SNAKEMAKE + ["--cores", "2", "--config", "profile=smoke", "--forcerun", str(rel / "model.pt"), "--", str(rel / "metrics.json")],
        cwd=workspace, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        env={**os.environ, **NO_STAGE_CACHE},
    )
    deadline = time.time() + 120
    while time.time() < deadline and not (log.exists() and ": train" in log.read_text()):
        time.sleep(0.02)
    time.sleep(0.3)  # mid-way through the train job
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    # No half-written model: either absent, or the complete file (if the job had already finished).
    if (run_dir / "model.pt").exists():
        torch.load(run_dir / "model.pt", weights_only=True)
    run(SNAKEMAKE + ["--unlock", "--config", "profile=smoke"], workspace)  # the killed run held the lock
    done = run(SNAKEMAKE + ["--cores", "2", "--config", "profile=smoke", "--rerun-incomplete", "--", str(rel / "metrics.json")], workspace,
               env=NO_STAGE_CACHE)
    assert done.returncode == 0
    assert json.loads((run_dir / "metrics.json").read_text())["metrics"] == before


def test_a_compress_only_knob_does_not_retrain(workspace, smoke_run):
    """`dvc exp run -S papers.dcmha.sparsity=...` reruns dcmha's jobs, which reuse the trained models and
    recompute only compress and evaluate (stagecache.py)."""
    import yaml

    params_path = workspace / "params.yaml"
    original = params_path.read_text()
    params = yaml.safe_load(original)
    params["papers"]["dcmha"]["sparsity"] = 0.6
    params_path.write_text(yaml.safe_dump(params, sort_keys=False))
    try:
        run(SNAKEMAKE + ["--cores", "8", "all", "--config", "profile=smoke", "only=[dcmha]"], workspace)
        logs = [p.read_text() for p in (workspace / "logs" / "dcmha").glob("*/seed0/run.log")]
        assert logs and all("train (reused" in log and ": compress" in log for log in logs)
        table = pl.read_csv(workspace / "results" / "dcmha" / "metrics.csv")
        assert "compressed:0.60/val_loss" in table.columns
    finally:
        params_path.write_text(original)


def test_editing_a_paper_module_reruns_only_that_paper(workspace, smoke_run):
    run(SNAKEMAKE + ["--cores", "8", "all", "--config", "profile=smoke"], workspace)  # settle earlier tests' reruns
    module = workspace / "src" / "paperflow" / "papers" / "dcmha.py"
    module.write_text(module.read_text() + "\n# an edit\n")  # Snakemake compares content, not just mtime
    proc = run(SNAKEMAKE + ["-n", "--cores", "8", "all", "--config", "profile=smoke"], workspace)
    out = proc.stdout + proc.stderr
    assert "wildcards: paper=dcmha" in out
    assert "paper=owl" not in out and "paper=fairgrad" not in out

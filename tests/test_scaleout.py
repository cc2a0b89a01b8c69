"""Beyond one machine (README "Cluster and shared tracking"): the SLURM executor profile on a local single-node
SLURM, and a shared MLflow server on PostgreSQL, including a server that dies mid-run.

These start real services (scripts/local_slurm.sh, scripts/local_postgres.sh install them with apt when
missing, which needs root or sudo, as in CI); without them the tests skip and say why. Results are compared with
the session's local smoke run (conftest.smoke_run): same code, same seed, same numbers.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import polars as pl
import pytest

from conftest import ROOT, SNAKEMAKE, copy_checkout, run
from paperflow.tracking import _clean

SLURM_PAPERS = ("icl_functional_gd", "slab")  # cheap smoke papers with and without data resources
PG_PAPERS = ("icl_functional_gd", "slab", "id_vl_pruning")
SMOKE = ["--config", "profile=smoke"]


def _can_install() -> bool:
    return os.geteuid() == 0 or shutil.which("sudo") is not None


def _fresh_workspace(tmp_path: Path, repo_resources: Path) -> Path:
    ws = copy_checkout(tmp_path / "ws")
    shutil.rmtree(ws / "resources", ignore_errors=True)
    (ws / "resources").symlink_to(repo_resources)
    if (ROOT / "sources").exists():
        (ws / "sources").symlink_to(ROOT / "sources")
    run(["git", "init", "-q"], ws)
    return ws


def _metrics(ws: Path, paper: str) -> pl.DataFrame:
    table = pl.read_csv(ws / "results" / paper / "metrics.csv")
    # measured wall-clock quantities (stage times, slab's latencies) differ between runs; nothing else may
    keep = [c for c in table.columns if not any(t in c for t in ("time/", "latency", "_ms", "speedup", "throughput"))]
    return table.select(keep).sort(["variant", "seed"])


def _only(papers) -> str:
    return f"only=[{','.join(papers)}]"


# ------------------------------------------------------------------------------------------------ SLURM
@pytest.fixture(scope="module")
def slurm():
    if shutil.which("sinfo") is None and not _can_install():
        pytest.skip("no SLURM here and no root/sudo to install Debian slurm-wlm")
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "local_slurm.sh"), "start"], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        pytest.skip(f"local SLURM did not start: {proc.stderr[-2000:]}")
    yield


def test_slurm_profile_runs_papers_and_reports_a_failed_job(slurm, workspace, smoke_run, tmp_path, repo_resources):
    ws = _fresh_workspace(tmp_path, repo_resources)
    # a third paper whose train stage raises: the cluster run must report it failed (not lose it) and still
    # finish the other two (--keep-going)
    broken = ws / "src" / "paperflow" / "papers" / "traveling_waves.py"
    broken.write_text(broken.read_text().replace("\ndef train(", "\ndef train(*a, **k):\n    raise RuntimeError('deliberate failure for the SLURM test')\n\n\ndef _unused_train(", 1))
    cmd = ["timeout", "-k", "20", "1500"] + SNAKEMAKE + ["--workflow-profile", "workflow/profiles/slurm", "--keep-going", "all",
                                                         "--config", "profile=smoke", _only(SLURM_PAPERS + ("traveling_waves",))]
    proc = subprocess.run(cmd, cwd=ws, capture_output=True, text=True, timeout=1600)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, "a failed SLURM job must fail the workflow"
    assert "Error in rule run" in out and "traveling_waves" in out, out[-4000:]
    assert "deliberate failure" in "".join(p.read_text() for p in (ws / "logs" / "traveling_waves").rglob("run.log"))
    assert "SLURM jobid" in out  # the jobs went through sbatch, not the local executor
    for paper in SLURM_PAPERS:
        assert _metrics(ws, paper).equals(_metrics(workspace, paper)), paper  # equal to the local run


# ------------------------------------------------------------------------------------------- PostgreSQL
@pytest.fixture(scope="module")
def postgres():
    if shutil.which("pg_createcluster") is None and not _can_install():
        pytest.skip("no PostgreSQL here and no root/sudo to install Debian postgresql")
    script = str(ROOT / "scripts" / "local_postgres.sh")
    proc = subprocess.run(["bash", script, "start"], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        pytest.skip(f"PostgreSQL did not start: {proc.stderr[-2000:]}")
    store = proc.stdout.strip().splitlines()[-1]
    _reset_database(store)
    yield store
    subprocess.run(["bash", script, "stop"], capture_output=True, timeout=300)


def _reset_database(store: str) -> None:
    import psycopg2

    with psycopg2.connect(store) as conn, conn.cursor() as cur:  # an earlier session's tables would mix in
        cur.execute("drop schema public cascade; create schema public")


def _server(ws: Path, store: str) -> str:
    from paperflow import tracking_server

    return tracking_server.start(ws, store)


def _check_store(uri: str, ws: Path, papers) -> None:
    """Every (variant, seed) of every paper has one current FINISHED parent run with the evaluate metrics of
    results/, its three nested stage runs, and the tags paper/variant/seed/stage."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    for paper in papers:
        exp = client.get_experiment_by_name(paper)
        assert exp is not None, paper
        runs = client.search_runs([exp.experiment_id], max_results=1000)
        table = pl.read_csv(ws / "results" / paper / "metrics.csv")
        for row in table.filter(~pl.col("variant").str.contains("|", literal=True)).iter_rows(named=True):
            parents = [r for r in runs if r.data.tags.get("stage") == "run" and r.data.tags.get("variant") == row["variant"]
                       and r.data.tags.get("seed") == str(row["seed"]) and r.data.tags.get("current") == "true"]
            assert len(parents) == 1, (paper, row["variant"], row["seed"], len(parents))
            parent = parents[0]
            assert parent.info.status == "FINISHED" and parent.data.tags["paper"] == paper
            saved = json.loads((ws / "results" / paper / row["variant"] / f"seed{row['seed']}" / "metrics.json").read_text())
            for key, value in saved["metrics"].items():  # MLflow keys are the sanitised ones (tracking._clean)
                assert parent.data.metrics[_clean(key)] == pytest.approx(value, rel=1e-6, abs=1e-9, nan_ok=True), (paper, key)
            children = {r.data.tags.get("stage") for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
            assert {"train", "compress", "evaluate"} <= children, (paper, children)


def test_shared_server_on_postgres_gets_every_run(postgres, workspace, smoke_run, tmp_path, repo_resources):
    from paperflow import tracking_server

    ws = _fresh_workspace(tmp_path, repo_resources)
    uri = _server(ws, postgres)
    try:
        env = {"MLFLOW_TRACKING_URI": uri}  # a team's server: the workflow starts none of its own
        run(SNAKEMAKE + ["--cores", "8", "all", "--config", "profile=smoke", _only(PG_PAPERS)], ws, timeout=1800, env=env)
        _check_store(uri, ws, PG_PAPERS)
        for paper in PG_PAPERS:
            assert _metrics(ws, paper).equals(_metrics(workspace, paper)), paper
        assert not (ws / "mlflow.db").exists()  # nothing went to a local store
    finally:
        tracking_server.stop(ws)


def test_server_killed_mid_run_fails_loudly_and_a_rerun_completes(postgres, tmp_path, repo_resources):
    from paperflow import tracking_server

    ws = _fresh_workspace(tmp_path, repo_resources)
    paper = "icl_functional_gd"
    uri = _server(ws, postgres)
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "PAPERFLOW_TRACKING_RETRY_S": "10", "PAPERFLOW_STAGE_CACHE": "off"}
    proc = subprocess.Popen(SNAKEMAKE + ["--cores", "2", "all", "--config", "profile=smoke", _only([paper])], cwd=ws, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    logs = ws / "logs" / paper
    deadline = time.time() + 600
    while time.time() < deadline and not any(": train" in p.read_text() for p in logs.rglob("run.log")):
        time.sleep(0.05)
    tracking_server.stop(ws)  # the server dies while a job trains
    try:
        out, _ = proc.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    assert proc.returncode != 0, "a job that cannot reach its tracking server must fail, not run on untracked"
    assert "unreachable" in "".join(p.read_text() for p in logs.rglob("run.log")) + out
    uri = _server(ws, postgres)  # the server is back (same PostgreSQL store): the rerun completes
    try:
        run(SNAKEMAKE + ["--cores", "2", "all", "--rerun-incomplete", "--config", "profile=smoke", _only([paper])], ws, timeout=900,
            env={"MLFLOW_TRACKING_URI": uri, "PAPERFLOW_STAGE_CACHE": "off"})  # default retry budget again
        _check_store(uri, ws, [paper])  # nothing lost: every run has its metrics, the failed parents are superseded
    finally:
        tracking_server.stop(ws)

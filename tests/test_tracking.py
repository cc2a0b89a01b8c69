"""MLflow store under parallel writers, FAILED runs, and the logging buffer."""
from __future__ import annotations

import multiprocessing as mp
import sqlite3

import pytest

from paperflow import tracking


def _job(uri: str, i: int) -> str:
    parent = tracking.create_parent_run(uri, "demo", f"v{i % 3}", i, {"profile": "test"})
    with tracking.stage_run(uri, paper="demo", stage="train", tags={"variant": f"v{i % 3}", "seed": str(i)}, parent_id=parent, finish_parent=True) as run:
        run.log_params({"lr": 0.1, "width": 8})
        for step in range(200):
            run.log(step, **{"train/loss": 1.0 / (step + 1)})
        run.log_final({"dense/acc": 0.5 + i / 100})
    return parent


def test_eight_parallel_jobs_lose_nothing(tmp_path):
    uri = tracking.default_uri(tmp_path)
    tracking.init_store(uri, ["demo"])  # what the Snakefile's onstart does
    with mp.get_context("spawn").Pool(8) as pool:
        parents = pool.starmap(_job, [(uri, i) for i in range(8)])
    db = sqlite3.connect(tmp_path / "mlflow.db")
    statuses = dict(db.execute("select run_uuid, status from runs").fetchall())
    assert len(statuses) == 16 and set(statuses.values()) == {"FINISHED"}
    for parent in parents:
        (child,) = db.execute("select run_uuid from tags where key='mlflow.parentRunId' and value=?", (parent,)).fetchone()
        # curves and final metrics live on the parent (what the UI's Compare shows), once
        n_points = db.execute("select count(*) from metrics where run_uuid=? and key='train/loss'", (parent,)).fetchone()[0]
        assert n_points == 200
        assert db.execute("select count(*) from latest_metrics where run_uuid=? and key='dense/acc'", (parent,)).fetchone()[0] == 1
        assert db.execute("select count(*) from latest_metrics where run_uuid=?", (child,)).fetchone()[0] == 0
        name = db.execute("select name from runs where run_uuid=?", (child,)).fetchone()[0]
        assert name.startswith("train demo v") and "seed" in name


def test_failed_stage_marks_run_failed(tmp_path):
    uri = tracking.default_uri(tmp_path)
    tracking.init_store(uri, ["demo"])
    parent = tracking.create_parent_run(uri, "demo", "v", 0, {})
    with pytest.raises(RuntimeError):
        with tracking.stage_run(uri, paper="demo", stage="train", tags={}, parent_id=parent) as run:
            run.log(0, loss=1.0)
            raise RuntimeError("boom")
    db = sqlite3.connect(tmp_path / "mlflow.db")
    statuses = dict(db.execute("select run_uuid, status from runs").fetchall())
    assert statuses[parent] == "FAILED" and list(statuses.values()).count("FAILED") == 2
    assert db.execute("select value from tags where key='error'").fetchone()[0] == "RuntimeError: boom"


def test_keys_are_sanitised():
    assert tracking._clean("a@b#c/ppl") == "a_b_c/ppl"


def test_report_metric_keys_are_mlflow_keys():
    """The report's keys (dense/*, compressed:<level>/*) reach MLflow unchanged, so the UI and the report name
    the same metric the same way (issue 14 item 9)."""
    from paperflow.spec import Comparison

    key = Comparison("acc", "m", "b", "higher", stage="compressed", level="0.50").column
    assert tracking._clean(key) == key == "compressed:0.50/acc"
    from mlflow.utils.validation import _validate_metric_name

    _validate_metric_name(key)


def test_a_rerun_supersedes_a_killed_run(tmp_path):
    """kill -9 leaves a RUNNING parent and stage run; the rerun's parent ends them (KILLED) and marks them
    superseded, so one current run per (variant, seed) remains."""
    uri = tracking.default_uri(tmp_path)
    tracking.init_store(uri, ["demo"])
    killed = tracking.create_parent_run(uri, "demo", "v", 0, {})
    stage = tracking.stage_run(uri, paper="demo", stage="train", tags={"variant": "v", "seed": "0"}, parent_id=killed)
    stage.__enter__()  # a job killed mid-stage: the context never exits
    done = tracking.create_parent_run(uri, "demo", "v", 1, {})  # another seed: untouched
    rerun = tracking.create_parent_run(uri, "demo", "v", 0, {})
    db = sqlite3.connect(tmp_path / "mlflow.db")
    status = dict(db.execute("select run_uuid, status from runs").fetchall())
    tags = {(r, k): v for r, k, v in db.execute("select run_uuid, key, value from tags")}
    assert status[killed] == "KILLED" and [s for r, s in status.items() if r not in (killed, done, rerun)] == ["KILLED"]
    assert tags[(killed, "current")] == "false" and tags[(killed, "superseded_by")] == rerun
    assert tags[(rerun, "current")] == "true" and tags[(done, "current")] == "true" and status[done] == "RUNNING"


def test_only_the_running_papers_get_experiments(tmp_path, monkeypatch):
    from paperflow.cli import main

    uri = tracking.default_uri(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    assert main(["init-tracking", "--papers", "dcmha"]) == 0  # what the Snakefile's onstart runs with only=[dcmha]
    names = {n for (n,) in sqlite3.connect(tmp_path / "mlflow.db").execute("select name from experiments")}
    assert names == {"Default", "dcmha", "report"}


def test_experiments_open_in_the_classic_view(tmp_path):
    uri = tracking.default_uri(tmp_path)
    tracking.init_store(uri, ["demo"])
    db = sqlite3.connect(tmp_path / "mlflow.db")
    (value,) = db.execute("select t.value from experiment_tags t join experiments e on e.experiment_id = t.experiment_id "
                          "where e.name = 'demo' and t.key = 'mlflow.experimentKind'").fetchone()
    assert value == "custom_model_development"


_PREPARE_SCRIPT = """
import sys, time
from paperflow.cli import _raise_on_sigterm
from paperflow import tracking
_raise_on_sigterm()
with tracking.stage_run(sys.argv[1], paper="demo", stage="prepare", tags={"variant": "data", "seed": "-"}):
    print("preparing", flush=True)
    time.sleep(120)
"""


def test_sigterm_during_prepare_marks_it_killed_and_a_rerun_supersedes_it(tmp_path):
    """Ctrl-C / Snakemake cancelling a prepare job sends SIGTERM: its run must not stay RUNNING (issue 26)."""
    import signal
    import subprocess
    import sys

    uri = tracking.default_uri(tmp_path)
    tracking.init_store(uri, ["demo"])
    proc = subprocess.Popen([sys.executable, "-c", _PREPARE_SCRIPT, uri], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "preparing"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    db = sqlite3.connect(tmp_path / "mlflow.db")
    (first, status), = db.execute("select run_uuid, status from runs").fetchall()
    assert status == "KILLED"
    with tracking.stage_run(uri, paper="demo", stage="prepare", tags={"variant": "data", "seed": "-"}) as run:
        pass
    tags = dict(db.execute("select key, value from tags where run_uuid=?", (first,)).fetchall())
    assert tags["current"] == "false" and tags["superseded_by"] == run.run_id
    assert dict(db.execute("select key, value from tags where run_uuid=?", (run.run_id,)).fetchall())["current"] == "true"


def test_a_run_of_another_profile_does_not_supersede(tmp_path):
    """The profile is part of the supersede key: a smoke rerun leaves the default profile's run current (issue 26)."""
    uri = tracking.default_uri(tmp_path)
    tracking.init_store(uri, ["demo"])
    default = tracking.create_parent_run(uri, "demo", "m", 0, {"profile": "default"})
    smoke = tracking.create_parent_run(uri, "demo", "m", 0, {"profile": "smoke"})
    again = tracking.create_parent_run(uri, "demo", "m", 0, {"profile": "smoke"})
    db = sqlite3.connect(tmp_path / "mlflow.db")
    current = dict(db.execute("select run_uuid, value from tags where key='current'").fetchall())
    assert current == {default: "true", smoke: "false", again: "true"}

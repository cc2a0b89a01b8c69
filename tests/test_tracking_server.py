"""The loopback tracking server and the REST client: what a job logs over REST lands in the sqlite store exactly
as through the mlflow library, a job never imports mlflow, and a server that is down fails loudly."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from paperflow import tracking, tracking_server
from paperflow.mlflow_rest import RestClient, RestError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("tracking server")  # a space: file URIs are percent-encoded (issue 26)
    store = tracking.default_uri(root)
    uri = tracking_server.start(root, store)
    yield root, store, uri
    tracking_server.stop(root)


def test_rest_logging_lands_in_the_sqlite_store(server, monkeypatch):
    root, store, uri = server
    monkeypatch.setenv("PAPERFLOW_TRACKING_STORE", store)
    tracking.init_store(uri, ["demo"])
    first = tracking.create_parent_run(uri, "demo", "method", 0, {"profile": "smoke"})
    parent = tracking.create_parent_run(uri, "demo", "method", 0, {"profile": "smoke"})  # supersedes `first`
    artifact = root / "metrics.json"
    artifact.write_text('{"acc": 1.0}')
    with tracking.stage_run(uri, paper="demo", stage="train", tags={"variant": "method", "seed": "0"}, parent_id=parent) as run:
        for step in range(3):
            run.log(step, **{"train/loss": 1.0 / (step + 1)})
        run.log_params({"lr": 0.001}, also_parent=True)
        run.log_final({"dense/acc": 91.5, "compressed:0.50/acc": 88.0})
        run.log_artifact(artifact)
        train_id = run.run_id
    with pytest.raises(ValueError):
        with tracking.stage_run(uri, paper="demo", stage="evaluate", tags={"variant": "method", "seed": "0"}, parent_id=parent):
            raise ValueError("boom")

    from mlflow.tracking import MlflowClient  # read back through the library, on the store itself

    lib = MlflowClient(tracking_uri=store)
    p = lib.get_run(parent)
    assert p.data.metrics["dense/acc"] == 91.5 and p.data.metrics["compressed:0.50/acc"] == 88.0
    assert [m.value for m in lib.get_metric_history(parent, "train/loss")] == pytest.approx([1.0, 0.5, 1 / 3])
    assert p.data.params["lr"] == "0.001" and p.data.tags["current"] == "true"
    assert p.info.status == "FAILED"  # the evaluate stage raised
    assert lib.get_run(first).data.tags["superseded_by"] == parent
    assert lib.get_run(train_id).info.status == "FINISHED"
    assert lib.get_run(train_id).data.tags["mlflow.parentRunId"] == parent
    assert [f.path for f in lib.list_artifacts(train_id)] == ["metrics.json"]  # file:// root beside the store
    assert lib.get_run(train_id).info.artifact_uri.startswith("file://")


def test_a_job_on_the_server_never_imports_mlflow(server):
    root, store, uri = server
    code = textwrap.dedent(f"""
        import sys
        from paperflow import tracking
        tracking.init_store({uri!r}, ["demo2"])
        parent = tracking.create_parent_run({uri!r}, "demo2", "base", 1, {{}})
        with tracking.stage_run({uri!r}, paper="demo2", stage="train", tags={{"variant": "base", "seed": "1"}}, parent_id=parent) as run:
            run.log(0, loss=1.0)
            run.log_final({{"dense/acc": 1.0}})
        print(sorted(m for m in sys.modules if m == "mlflow" or m.startswith("mlflow.")))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "PAPERFLOW_TRACKING_STORE": store})
    assert out.stdout.strip() == "[]"


def test_a_second_start_reuses_the_running_server(server):
    root, store, uri = server
    assert tracking_server.start(root, store) == uri
    assert tracking_server.read_state(root)["uri"] == uri


def test_a_server_that_is_down_fails_loudly():
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = RestClient(f"http://127.0.0.1:{port}", timeout_s=2)
    with pytest.raises(RestError, match="unreachable"):
        client.get_experiment_by_name("x")
    with pytest.raises(RestError, match="unreachable"):
        tracking._retry(client.get_experiment_by_name, "x", attempts=2)  # retried, then raised


def test_rest_client_rejects_a_non_http_uri():
    with pytest.raises(ValueError, match="http"):
        RestClient("sqlite:///x.db")


def test_a_stage_run_later_outside_the_workflow_finds_its_parent(server, monkeypatch):
    """run.json records the store, not the loopback server's URL: `paperflow stage compress` run on its own (store
    read directly, the server long gone) reuses the parent train made, instead of creating an empty RUNNING one and
    superseding the real one (issue 26)."""
    import json

    from paperflow import stages

    root, store, uri = server
    monkeypatch.setenv("PAPERFLOW_TRACKING_STORE", store)
    tracking.init_store(uri, ["demo"])
    parent = tracking.create_parent_run(uri, "demo", "later", 0, {"profile": "smoke"})
    run_dir = root / "results" / "demo" / "later" / "seed0"
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"parent_run_id": parent, "tracking_uri": uri,
                                                  "tracking_store": tracking.store_id(uri)}))
    monkeypatch.delenv("PAPERFLOW_TRACKING_STORE")  # a later shell: no workflow, no server
    ctx = stages.Context(root=root, settings=None, tracking_uri=store)
    assert stages._parent(ctx, "demo", "later", 0) == parent


def test_a_non_finite_metric_does_not_lose_the_batch(server, monkeypatch):
    """json.dumps writes bare NaN, which the server rejects with the whole batch: slab's ln_softmax runs lost every
    evaluate metric for one undefined mechanism value (sla_share of a model without SLA). Non-finite values go as
    protobuf JSON strings and read back as such."""
    import math

    root, store, uri = server
    monkeypatch.setenv("PAPERFLOW_TRACKING_STORE", store)
    tracking.init_store(uri, ["demo_nan"])
    parent = tracking.create_parent_run(uri, "demo_nan", "method", 0, {"profile": "smoke"})
    with tracking.stage_run(uri, paper="demo_nan", stage="evaluate", tags={"variant": "method", "seed": "0"}, parent_id=parent) as run:
        run.log_final({"dense/acc": 18.2, "dense/sla_share": float("nan"), "dense/ratio": float("inf")})

    from mlflow.tracking import MlflowClient

    metrics = MlflowClient(tracking_uri=store).get_run(parent).data.metrics
    assert metrics["dense/acc"] == 18.2
    assert math.isnan(metrics["dense/sla_share"])
    assert metrics["dense/ratio"] >= 1.7e308  # MLflow's store clamps +inf to the largest float

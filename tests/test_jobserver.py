"""The job fork server (paperflow/jobserver.py) and its client (paperflow/job.py): a job run through the server
gives the same bytes as the same job in its own interpreter, exit codes and output pass through, the worker's
CPU time is recorded for the cost table, a cancelled client takes its job down, and the server refuses (client
runs the job itself) after a source edit or under SLURM."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from paperflow import jobserver
from paperflow.report.costs import paper_costs

REPO = Path(__file__).resolve().parents[1]
PAPER, VARIANT = "fairgrad", "fairgrad"  # a cheap smoke run on real data (Multi-Fashion+MNIST)


@pytest.fixture(scope="module")
def served_ws(tmp_path_factory):
    ws = tmp_path_factory.mktemp("jobserver_ws")
    for name in ("params.yaml", "Snakefile"):
        shutil.copy(REPO / name, ws / name)
    (ws / "resources").symlink_to(REPO / "resources")
    watch = ws / "watched_src"
    watch.mkdir()
    (watch / "module.py").write_text("x = 1\n")
    env = {**os.environ, "PAPERFLOW_TRACKING": "off", "PYTHONPATH": str(REPO / "src")}
    old = dict(os.environ)
    os.environ.update(env)
    try:
        jobserver.start(ws, watch=watch)
        yield ws
    finally:
        jobserver.stop(ws)
        os.environ.clear()
        os.environ.update(old)


def run_job(ws: Path, *args: str, usage: Path | None = None, env_extra: dict | None = None, timeout: float = 300):
    env = {**os.environ, "PAPERFLOW_TRACKING": "off", "PYTHONPATH": str(REPO / "src"), **(env_extra or {})}
    cmd = [sys.executable, "-m", "paperflow.job"] + (["--usage", str(usage)] if usage else []) + list(args)
    return subprocess.run(cmd, cwd=ws, env=env, capture_output=True, text=True, timeout=timeout)


def strip_times(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not k.startswith("time/") and "seconds" not in k}


def test_output_exit_code_and_usage_pass_through(served_ws):
    ok = run_job(served_ws, "check", "--profile", "smoke", usage=served_ws / "u_ok.json")
    assert ok.returncode == 0, ok.stderr
    assert "params.yaml ok" in ok.stdout  # the child wrote into the client's own stdout
    usage = json.loads((served_ws / "u_ok.json").read_text())
    assert usage["via"] == "jobserver" and usage["rc"] == 0 and usage["cpu_s"] > 0 and usage["maxrss_mb"] > 50
    bad = run_job(served_ws, "stage", "run", "--paper", "no_such_paper", "--variant", "x", "--seed", "0")
    assert bad.returncode != 0
    assert "no_such_paper" in bad.stderr


def test_same_bytes_as_own_interpreter(served_ws):
    args = ["stage", "run", "--paper", PAPER, "--variant", VARIANT, "--seed", "0", "--profile", "smoke"]
    assert run_job(served_ws, "stage", "prepare", "--paper", PAPER, "--profile", "smoke").returncode == 0
    out = served_ws / "results" / PAPER / VARIANT / "seed0"
    no_cache = {"PAPERFLOW_STAGE_CACHE": "off"}  # both runs train for real
    plain = run_job(served_ws, *args, usage=served_ws / "u_plain.json", env_extra={**no_cache, "PAPERFLOW_JOBSERVER": "off"})
    assert plain.returncode == 0, plain.stderr
    assert json.loads((served_ws / "u_plain.json").read_text())["via"] == "process"
    first = json.loads((out / "metrics.json").read_text())
    for name in ("metrics.json", "model.pt", "compressed.pt", "curves.json", "run.json"):
        (out / name).unlink()
    served = run_job(served_ws, *args, usage=served_ws / "u_served.json", env_extra=no_cache)
    assert served.returncode == 0, served.stderr
    assert json.loads((served_ws / "u_served.json").read_text())["via"] == "jobserver"
    second = json.loads((out / "metrics.json").read_text())
    assert strip_times(first["metrics"]) == strip_times(second["metrics"])  # bit-identical floats


def test_cost_table_counts_the_worker(tmp_path):
    logs = tmp_path / "logs" / "p" / "v" / "seed0"
    logs.mkdir(parents=True)
    (logs / "run.benchmark.tsv").write_text("s\th:m:s\tmax_rss\tcpu_time\n2.5\t0:00:02\t20.0\t0.05\n")
    (logs / "run.usage.json").write_text(json.dumps({"via": "jobserver", "cpu_s": 2.0, "maxrss_mb": 400.0, "rc": 0}))
    (row,) = paper_costs(tmp_path, ["p"])
    assert row["job_s"] == 2.5 and row["cpu_s"] == pytest.approx(2.05) and row["peak_rss_mb"] == 400.0
    (logs / "run.usage.json").write_text(json.dumps({"via": "process"}))  # the benchmark saw the whole job
    (row,) = paper_costs(tmp_path, ["p"])
    assert row["cpu_s"] == pytest.approx(0.05) and row["peak_rss_mb"] == 20.0


def test_slurm_jobs_run_in_their_own_interpreter(served_ws):
    res = run_job(served_ws, "check", usage=served_ws / "u_slurm.json", env_extra={"SLURM_JOB_ID": "1"})
    assert res.returncode == 0
    assert json.loads((served_ws / "u_slurm.json").read_text())["via"] == "process"


def test_cancelled_client_kills_its_job(served_ws):
    # A job that blocks for sure: its tracking server accepts connections and never answers (client timeout 60 s).
    silent = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "PAPERFLOW_TRACKING": "on",
           "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{silent.getsockname()[1]}"}
    log = served_ws / jobserver.LOG
    marker = f"stage prepare --paper {PAPER} --profile smoke"
    before = sum(line.endswith(marker) for line in log.read_text().splitlines())
    client = subprocess.Popen([sys.executable, "-m", "paperflow.job", *marker.split()],
                              cwd=served_ws, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pid, deadline = None, time.time() + 60
    while time.time() < deadline and pid is None:
        found = [line for line in log.read_text().splitlines() if line.endswith(marker)]
        pid = int(found[-1].split()[2].rstrip(":")) if len(found) > before else None
        time.sleep(0.1)
    assert pid is not None
    time.sleep(1.0)  # the child is now waiting on the silent server
    os.kill(pid, 0)
    client.send_signal(signal.SIGTERM)
    assert client.wait(timeout=30) != 0
    deadline = time.time() + 30
    while time.time() < deadline and f"client of pid {pid} went away" not in log.read_text():
        time.sleep(0.1)
    assert f"client of pid {pid} went away" in log.read_text()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    silent.close()


def test_edited_source_makes_the_server_refuse(served_ws):
    (served_ws / "watched_src" / "module.py").write_text("x = 2  # edited after the server started\n")
    res = run_job(served_ws, "check", usage=served_ws / "u_stale.json")
    assert res.returncode == 0
    assert "refused" in res.stderr and "changed" in res.stderr
    assert json.loads((served_ws / "u_stale.json").read_text())["via"] == "process"


def test_stop_removes_socket_and_state(tmp_path):
    assert jobserver.stop(tmp_path) is False  # nothing recorded: nothing to stop
    assert not (tmp_path / jobserver.SOCKET).exists()

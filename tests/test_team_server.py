"""The README's team tracking server command (README "Cluster and shared tracking"), run as written with a sqlite
store in place of PostgreSQL: members reaching it by the host name in --allowed-hosts get answers, any other Host
header gets MLflow's 403 (its DNS-rebinding guard), and the GenAI job queue is not started."""
from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from conftest import PYTHON, ROOT


def _readme_command() -> tuple[dict, list[str]]:
    text = (ROOT / "README.md").read_text()
    line = next(ln for ln in text.splitlines() if "mlflow server" in ln and "local_postgres.sh" in ln)
    words = shlex.split(line)
    env = {}
    while "=" in words[0] and not words[0].startswith("."):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    return env, words


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _status(port: int, host: str) -> int:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/search?max_results=1", headers={"Host": host})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code


@pytest.mark.slow
def test_readme_team_server_answers_members_by_host_name(tmp_path):
    env, words = _readme_command()
    assert env.get("MLFLOW_SERVER_ENABLE_JOB_EXECUTION") == "false"
    assert "--allowed-hosts" in words
    port = _free_port()
    args = words[1:]  # drop the .venv/bin/mlflow path: run this interpreter's mlflow
    args[args.index("--backend-store-uri") + 1] = f"sqlite:///{tmp_path / 'store.db'}"
    args[args.index("--artifacts-destination") + 1] = str(tmp_path / "artifacts")
    args[args.index("--port") + 1] = str(port)
    allowed = args.index("--allowed-hosts") + 1
    args[allowed] = args[allowed].replace(":5000", f":{port}")
    proc = subprocess.Popen([PYTHON, "-m", "mlflow", *args], cwd=tmp_path, env={**os.environ, **env}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and _status_or_none(port) is None:
            time.sleep(0.5)
        assert _status(port, f"tracking-host:{port}") == 200  # a member using the host name
        assert _status(port, "tracking-host") == 200
        assert _status(port, f"evil.example:{port}") == 403  # the guard still stands for other names
        children = subprocess.run(["pgrep", "-f", "huey", "-g", str(proc.pid)], capture_output=True, text=True).stdout
        assert not children.strip(), "MLflow's job queue was started"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def _status_or_none(port: int):
    try:
        return _status(port, f"localhost:{port}")
    except (urllib.error.URLError, ConnectionError, OSError):
        return None

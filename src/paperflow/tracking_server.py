"""A loopback MLflow tracking server for one workflow run, in front of the repo's sqlite store.

Why: with an http tracking URI the jobs log through paperflow.mlflow_rest (no `import mlflow` in a job, ~2-4 s
less start-up per job; benchmarks/bench_job_start.py), and one server process is the only writer of the sqlite
file (no "database is locked" retries between parallel jobs). The Snakefile's onstart calls `start`, which
exports MLFLOW_TRACKING_URI to every job; onsuccess/onerror call `stop`. The store is the same mlflow.db as
before, so `mlflow ui --backend-store-uri sqlite:///mlflow.db` shows the same runs afterwards.

Not started when MLFLOW_TRACKING_URI is already set (a team's server: README "Tracking"), when
PAPERFLOW_TRACKING=off, or when PAPERFLOW_TRACKING_SERVER=off (jobs then import mlflow and write sqlite directly).

State lives in .paperflow/tracking_server.json (pid, port, store, uri): a server left by a killed workflow is
reused when it is alive and serves the same store, else replaced. The port is derived from the store's path
(stable URIs in run.json across runs), or any free port when that one is taken.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import zlib
from pathlib import Path

STATE = Path(".paperflow") / "tracking_server.json"
LOG = Path("logs") / "mlflow_server.log"


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _pick_port(store: str) -> int:
    preferred = 20000 + zlib.crc32(store.encode()) % 20000
    if _port_free(preferred):
        return preferred
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(uri: str, timeout_s: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{uri}/health", timeout=timeout_s) as resp:
            return resp.status == 200
    except Exception:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def read_state(root: Path) -> dict | None:
    path = root / STATE
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None


def start(root: Path, store: str, wait_s: float = 120.0) -> str:
    """Start (or reuse) the loopback server for `store` (a sqlite:/// URI); returns its http URI."""
    root = Path(root).resolve()
    state = read_state(root)
    if state and state.get("store") == store and _alive(int(state["pid"])) and healthy(state["uri"]):
        return state["uri"]
    if state:
        stop(root)
    port = _pick_port(store)
    uri = f"http://127.0.0.1:{port}"
    (root / LOG).parent.mkdir(parents=True, exist_ok=True)
    (root / STATE).parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", store, "--host", "127.0.0.1",
           "--port", str(port), "--workers", "1", "--artifacts-destination", str(root / "mlartifacts")]
    # MLflow 3's server also launches a Huey job queue (~7 consumer processes, ~260 MB and ~3 CPU-s each at start)
    # for GenAI scorer jobs that paperflow never submits: off.
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    if store.startswith("sqlite:"):  # measured (SCALEOUT.md): on sqlite the server's connection pool drops
        env["MLFLOW_SQLALCHEMYSTORE_POOLCLASS"] = "NullPool"  # writers past 16 concurrent ones; NullPool: 32/32
    env.pop("MLFLOW_TRACKING_URI", None)
    with open(root / LOG, "ab") as log:
        proc = subprocess.Popen(cmd, cwd=root, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)  # own process group: stop() ends its workers too
    (root / STATE).write_text(json.dumps({"pid": proc.pid, "port": port, "store": store, "uri": uri}))
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        if healthy(uri):
            return uri
        time.sleep(0.25)
    tail = (root / LOG).read_text(errors="replace")[-3000:] if (root / LOG).exists() else ""
    stop(root)
    raise RuntimeError(f"MLflow tracking server for {store} did not come up on {uri} within {wait_s:.0f} s "
                       f"(exit code {proc.poll()}); log {root / LOG}:\n{tail}")


def stop(root: Path, wait_s: float = 15.0) -> bool:
    """Stop the server recorded in the state file (its whole process group); True if one was running."""
    root = Path(root).resolve()
    state = read_state(root)
    (root / STATE).unlink(missing_ok=True)
    if not state or not _alive(int(state["pid"])):
        return False
    pid = int(state["pid"])
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    return True
            except ChildProcessError:  # not our child (started by an earlier process): poll instead
                if not _alive(pid):
                    return True
            time.sleep(0.1)
    return True


def wanted() -> bool:
    """Start a loopback server? Not with a user's URI, tracking off, or the server switched off."""
    off = ("off", "0", "false", "no")
    return (not os.environ.get("MLFLOW_TRACKING_URI") and os.environ.get("PAPERFLOW_TRACKING", "on").lower() not in off
            and os.environ.get("PAPERFLOW_TRACKING_SERVER", "on").lower() not in off)


def start_for_workflow(root: Path) -> str | None:
    """The Snakefile's onstart: start (or reuse) the loopback server in front of root/mlflow.db when wanted(), and
    export its URI to this process's environment, which every job inherits. Returns the URI, or None."""
    if not wanted():
        return None
    from .tracking import default_uri

    store = default_uri(root)
    uri = start(root, store)
    state = read_state(Path(root).resolve())
    if state:  # a killed workflow process must not leave the server (and its workers) running
        from .watchdog import spawn

        spawn(os.getpid(), [int(state["pid"])], str(Path(root).resolve() / LOG))
    os.environ["MLFLOW_TRACKING_URI"] = uri
    os.environ["PAPERFLOW_TRACKING_STORE"] = store  # artifacts stay file:// beside the store (tracking._artifact_root)
    os.environ["PAPERFLOW_OWN_TRACKING_SERVER"] = "1"
    return uri


def stop_for_workflow(root: Path) -> None:
    """The Snakefile's onsuccess/onerror: stop the server start_for_workflow started (never a user's server)."""
    if os.environ.pop("PAPERFLOW_OWN_TRACKING_SERVER", None):
        os.environ.pop("MLFLOW_TRACKING_URI", None)
        os.environ.pop("PAPERFLOW_TRACKING_STORE", None)
        stop(root)

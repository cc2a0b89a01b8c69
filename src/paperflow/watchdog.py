"""End a workflow's helper processes when the workflow process dies without stopping them (kill -9 of snakemake).

The Snakefile's onstart starts the loopback MLflow server and the job fork server in their own sessions, so that
Ctrl-C in the terminal does not kill them mid-write; onsuccess/onerror stop them. A workflow process that is
killed outright runs neither, and without this both servers (about 1.3 GB) and a forked job writing into results/
outlived it (issue 26). `python -m paperflow.watchdog PARENT PGID...` (stdlib only, ~10 MB) polls once a second:
when every group is gone it exits (a normal stop); when PARENT is gone it sends SIGTERM to every group (the job
server then kills its jobs), waits, and sends SIGKILL to what is left.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _signal_groups(groups: list[int], sig: int) -> None:
    for pgid in groups:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def watch(parent: int, groups: list[int], poll_s: float = 1.0, grace_s: float = 20.0) -> str:
    """Block until the groups end ("stopped") or the parent dies ("parent died": the groups are ended)."""
    while True:
        if not any(group_alive(g) for g in groups):
            return "stopped"
        if not alive(parent):
            break
        time.sleep(poll_s)
    _signal_groups(groups, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(group_alive(g) for g in groups):
        time.sleep(0.2)
    _signal_groups(groups, signal.SIGKILL)
    return "parent died"


def spawn(parent: int, groups: list[int], log: str | None = None) -> int:
    """Start a detached watchdog for `groups` (returns its pid); it needs nothing but the standard library."""
    src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": src + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")}
    out = open(log, "ab") if log else subprocess.DEVNULL
    try:
        proc = subprocess.Popen([sys.executable, "-m", "paperflow.watchdog", str(parent), *map(str, groups)],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    finally:
        if log:
            out.close()
    return proc.pid


if __name__ == "__main__":
    parent_pid, *pgids = (int(a) for a in sys.argv[1:])
    outcome = watch(parent_pid, list(pgids))
    if outcome != "stopped":
        print(f"[watchdog] workflow process {parent_pid} died: ended process groups {pgids}", flush=True)

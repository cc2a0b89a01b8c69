"""What a workflow job runs: `python3 -m paperflow.job [--usage FILE] <paperflow cli arguments>`.

It hands the command to the workflow's job server (paperflow/jobserver.py: torch and the papers already
imported, one fork per job) and exits with the job's exit code; it imports only the standard library, so a
job's start-up is ~0.1 s instead of ~3 s. Where there is no server (PAPERFLOW_JOBSERVER=off, a SLURM job, a
server that is not up, or one that refuses because the code changed) it runs `python -m paperflow.cli` itself,
which gives the same result. --usage FILE records the CPU time and peak memory of the process that did the work
(JSON): Snakemake's benchmark measures only this client when the server ran the job (report/costs.py reads both).
"""
from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time

SOCKET = os.path.join(".paperflow", "jobs.sock")  # paperflow.jobserver.SOCKET, relative to the workflow root


def _use_server() -> bool:
    if os.environ.get("PAPERFLOW_JOBSERVER", "on").lower() in ("off", "0", "false", "no"):
        return False
    return "SLURM_JOB_ID" not in os.environ and os.path.exists(SOCKET)  # cluster jobs run on their own node


def _via_server(argv: list[str]) -> dict | None:
    """The server's reply {"rc", "cpu_s", "maxrss_mb"}, or None when it did not take the job."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(SOCKET)
    except OSError:
        return None
    request = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}).encode() + b"\n"
    socket.send_fds(sock, [request], [0, 1, 2])
    # Snakemake cancels a job with SIGTERM: exiting closes the socket, and the server kills the child.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(143))
    reply = b""
    while not reply.endswith(b"\n"):
        chunk = sock.recv(4096)
        if not chunk:
            raise SystemExit("paperflow.job: the job server went away while running this job (see logs/jobserver.log)")
        reply += chunk
    answer = json.loads(reply)
    if "refused" in answer:
        print(f"[paperflow.job] job server refused ({answer['refused']}): running here", file=sys.stderr)
        return None
    if answer.get("error"):
        print(f"[paperflow.job] {answer['error']}", file=sys.stderr)
    return answer


def _write_usage(path: str | None, usage: dict) -> None:
    if path:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w") as fh:
            json.dump(usage, fh)


def torch_threads(argv: list[str]) -> int:
    """The torch threads the CLI will run this job with (cli._torch_threads, without importing it): --job-threads
    T over PAPERFLOW_SLOTS_PER_CPU, or --threads N, else 1. The cost table multiplies job time by it: a
    two-thread job holds two CPUs for its wall time."""
    def value(flag: str) -> int | None:
        return int(argv[argv.index(flag) + 1]) if flag in argv[:-1] and argv[argv.index(flag) + 1].isdigit() else None

    return threads_for(value("--job-threads"), value("--threads") or 1)


def threads_for(job_threads: int | None, threads: int) -> int:
    """The one thread rule (the CLI uses it too): --job-threads T from a Snakemake job is T slots over
    PAPERFLOW_SLOTS_PER_CPU (set by the workflow's shell prefix), never more than the machine's CPUs; without it,
    --threads N (workflow/rules/common.smk, thread policy)."""
    if job_threads is None:
        return max(1, threads)
    slots = max(1, int(os.environ.get("PAPERFLOW_SLOTS_PER_CPU", "1")))
    return max(1, min(os.cpu_count() or 1, job_threads // slots))


def main(argv: list[str]) -> int:
    usage_path = None
    if argv[:1] == ["--usage"]:
        usage_path, argv = argv[1], argv[2:]
    t0 = time.monotonic()
    answer = _via_server(argv) if _use_server() else None
    if answer is not None:
        _write_usage(usage_path, {"via": "jobserver", "wall_s": time.monotonic() - t0, "cpu_s": answer["cpu_s"],
                                  "maxrss_mb": answer["maxrss_mb"], "rc": answer["rc"],
                                  "threads": torch_threads(argv)})
        return int(answer["rc"])
    _write_usage(usage_path, {"via": "process", "threads": torch_threads(argv)})  # Snakemake's benchmark of this process tree is the truth
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, "-m", "paperflow.cli", *argv])
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""A fork server for workflow jobs: torch and every paper module imported once per workflow run, not once per job.

Why: a job's own work is often a few seconds in the smoke profile, while `python -m paperflow.cli` spends
~2.5-3 s importing torch, numpy and the paper modules before it starts (benchmarks/bench_job_start.py). With
4-8 jobs per paper that start-up alone broke the smoke budget of 20 s of job time per paper. Here one process
(started by the Snakefile's onstart, next to the tracking server) imports everything, then forks a child per
job; the child inherits the imported modules (copy-on-write) and runs `paperflow.cli.main(argv)` exactly as the
plain command would.

Protocol (unix socket, .paperflow/jobs.sock relative to the workflow root): the client (`paperflow.job`, which
imports nothing heavy) sends one JSON line {"argv", "cwd", "env"} with its stdin/stdout/stderr passed as file
descriptors (SCM_RIGHTS), so the child writes straight into the job's `| tee log` pipe. The server answers one
JSON line {"rc", "cpu_s", "maxrss_mb"} when the child exits (its own rusage: Snakemake's benchmark only sees the
client process), or {"refused": why} when it cannot serve the job, and the client then runs the command itself.

Isolation and safety:
- the child gets the client's cwd and its whole environment (os.environ replaced), its own process group, and
  default signal handlers; the parent never runs a torch op, so no OpenMP pool or CUDA context is forked;
- a client that goes away (Snakemake cancelled the job) makes the server kill the child's process group;
- the server refuses jobs once a source file under src/paperflow changed after it started (a stale import
  would run old code), and jobs under SLURM never use it (client side), so cluster accounting stays true;
- stopping the server (onsuccess/onerror, or SIGTERM) kills children still running: their clients fail loudly.
Switch off with PAPERFLOW_JOBSERVER=off (every job then starts its own interpreter, as before).
"""
from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path

SOCKET = Path(".paperflow") / "jobs.sock"  # relative: AF_UNIX paths are limited to ~107 bytes
STATE = Path(".paperflow") / "jobserver.json"
LOG = Path("logs") / "jobserver.log"
OFF = ("off", "0", "false", "no")
MIN_JOBS = 4  # fewer stage jobs than this run in their own interpreters (the Snakefile's onstart)


def source_fingerprint(package: Path | None = None) -> tuple[int, int]:
    """(number of .py files, newest mtime in ns) under the paperflow package: changes when code is edited."""
    package = package or Path(__file__).resolve().parent
    times = [p.stat().st_mtime_ns for p in package.rglob("*.py")]
    return len(times), max(times, default=0)


def _preload() -> None:
    """Import what jobs import: torch, the CLI and stages, every registered paper (and the shared modules they use)."""
    from .config import import_jsonschema

    import_jsonschema()  # params validation
    import torch
    import torch._dynamo  # noqa: F401  (torch.optim's first step imports it, and sympy with it: ~0.5 s per job)

    try:  # the LM papers' loader (data/smollm2.py): transformers' lazy modules cost ~1.8 s per job otherwise
        import transformers
        from transformers.models.llama import modeling_llama  # noqa: F401

        transformers.AutoModelForCausalLM, transformers.AutoTokenizer, transformers.LlamaConfig  # noqa: B018
    except ImportError:
        pass

    try:  # the GP papers' inference library (cellular_gp imports it inside its functions): ~1-2 s per job otherwise
        import gpytorch  # noqa: F401
    except ImportError:
        pass

    from . import cli, stages  # noqa: F401
    from .config import paper_code
    from .registry import list_papers

    for spec in list_papers():
        paper_code(spec)  # parses each paper's imports once (dvcgen caches per file version); jobs inherit it
    if torch.cuda.is_initialized():  # a CUDA context does not survive fork: jobs must create their own
        raise RuntimeError("a module initialised CUDA at import time; the job server cannot fork from it")


class Server:
    def __init__(self, sock_path: Path, watch: Path | None = None):
        self.sock_path = sock_path
        self.watch = watch  # the source tree whose edits make the server refuse jobs (default: this package)
        self.fingerprint = source_fingerprint(watch)
        self.sel = selectors.DefaultSelector()
        self.children: dict[int, socket.socket] = {}  # pid -> the client's connection
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock_path.unlink(missing_ok=True)
        self.listener.bind(str(sock_path))
        self.listener.listen(64)
        self.sel.register(self.listener, selectors.EVENT_READ, "accept")
        self.stopping = False

    def serve_forever(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stopping", True))
        signal.signal(signal.SIGINT, lambda *_: setattr(self, "stopping", True))
        print(f"[jobserver] pid {os.getpid()} serving {self.sock_path}", flush=True)
        while not self.stopping:
            for key, _ in self.sel.select(timeout=0.05):
                if key.data == "accept":
                    self._accept()
                else:  # a client with a running child became readable: it went away (EOF) or sent junk
                    self._client_gone(key.fileobj, key.data)
            self._reap()
        self._shutdown()

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        try:
            conn.settimeout(10)
            msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
            if not msg:  # a readiness probe (ready()): connect and close
                conn.close()
                return
            while not msg.endswith(b"\n"):  # one JSON line; the fds came with its first bytes
                more = conn.recv(1 << 20)
                if not more:
                    raise ConnectionError("client closed mid-request")
                msg += more
            request = json.loads(msg)
            if len(fds) != 3:
                raise ValueError(f"expected 3 file descriptors, got {len(fds)}")
        except Exception as err:  # a broken client must not take the server down
            print(f"[jobserver] bad request: {err}", flush=True)
            conn.close()
            return
        if source_fingerprint(self.watch) != self.fingerprint:
            self._answer(conn, {"refused": "source files changed since the job server started"})
            for fd in fds:
                os.close(fd)
            return
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            self._child(conn, fds, request)  # never returns
        for fd in fds:
            os.close(fd)
        self.children[pid] = conn
        self.sel.register(conn, selectors.EVENT_READ, pid)
        print(f"[jobserver] pid {pid}: {' '.join(request['argv'])}", flush=True)

    def _child(self, conn: socket.socket, fds: list[int], request: dict) -> None:
        rc = 1
        try:
            os.setpgid(0, 0)
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, signal.SIG_DFL)
            self.listener.close()
            for other in self.children.values():
                other.close()
            conn.close()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            sys.argv = ["paperflow", *request["argv"]]
            from .cli import main

            rc = main(list(request["argv"]))
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if not isinstance(exc.code, (int, type(None))):
                print(exc.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
            rc = 1
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(int(rc or 0) & 0xFF)

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is None:
                continue
            rc = os.waitstatus_to_exitcode(status)
            rc = 128 - rc if rc < 0 else rc  # killed by signal N -> 128 + N, as a shell reports it
            self.sel.unregister(conn)
            self._answer(conn, {"rc": rc, "cpu_s": usage.ru_utime + usage.ru_stime, "maxrss_mb": usage.ru_maxrss / 1024})
            print(f"[jobserver] pid {pid} exited {rc} after {usage.ru_utime + usage.ru_stime:.1f} CPU s", flush=True)

    def _answer(self, conn: socket.socket, reply: dict) -> None:
        try:
            conn.sendall((json.dumps(reply) + "\n").encode())
        except OSError:
            pass
        conn.close()

    def _client_gone(self, conn: socket.socket, pid: int) -> None:
        try:
            data = conn.recv(1, socket.MSG_PEEK)
        except OSError:
            data = b""
        if data:
            return
        self._kill(pid)
        self.sel.unregister(conn)
        conn.close()
        self.children.pop(pid, None)
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        print(f"[jobserver] client of pid {pid} went away: killed its process group", flush=True)

    def _kill(self, pid: int, grace_s: float = 5.0) -> None:
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
            time.sleep(0.05)
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def _shutdown(self) -> None:
        for pid, conn in list(self.children.items()):
            self._kill(pid)
            self._answer(conn, {"rc": 143, "error": "job server stopped while the job ran"})
        self.children.clear()
        self.listener.close()
        self.sock_path.unlink(missing_ok=True)
        print("[jobserver] stopped", flush=True)


def serve(sock_path: Path, watch: Path | None = None, preload_lm: list[str] | None = None) -> None:
    t0 = time.monotonic()
    _preload()
    print(f"[jobserver] preloaded torch and {len(sys.modules)} modules in {time.monotonic() - t0:.1f} s", flush=True)
    for model_dir in preload_lm or []:  # a run with LM papers: the weights once, shared by every job's fork
        t1 = time.monotonic()
        from .data import smollm2

        smollm2.preload(model_dir)
        print(f"[jobserver] preloaded the LM {model_dir} in {time.monotonic() - t1:.1f} s", flush=True)
    server = Server(sock_path, watch)
    server.serve_forever()


# ---- lifecycle, called by the Snakefile's onstart / onsuccess / onerror ----

def wanted() -> bool:
    return os.environ.get("PAPERFLOW_JOBSERVER", "on").lower() not in OFF


def forced() -> bool:
    """PAPERFLOW_JOBSERVER=always: start the server even for a run of fewer than MIN_JOBS stage jobs."""
    return os.environ.get("PAPERFLOW_JOBSERVER", "on").lower() == "always"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def start(root: Path, wait_s: float = 120.0, watch: Path | None = None, preload_lm: list[str] | None = None) -> int:
    """Start a fresh server in `root` (any earlier one is stopped: its imports may be stale); returns its pid.
    preload_lm: SmolLM2 model folders to load before serving (data/smollm2.py, preload)."""
    root = Path(root).resolve()
    stop(root)
    for rel in (SOCKET, STATE, LOG):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    with open(root / LOG, "ab") as log:
        cmd = [sys.executable, "-m", "paperflow.jobserver", "--socket", str(SOCKET)] + (["--watch", str(watch)] if watch else [])
        cmd += [arg for d in preload_lm or [] for arg in ("--preload-lm", str(Path(d).resolve()))]
        proc = subprocess.Popen(cmd, cwd=root,
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)
    (root / STATE).write_text(json.dumps({"pid": proc.pid, "socket": str(SOCKET)}))
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        if ready(root):
            return proc.pid
        time.sleep(0.1)
    tail = (root / LOG).read_text(errors="replace")[-3000:]
    stop(root)
    raise RuntimeError(f"job server did not come up within {wait_s:.0f} s (exit code {proc.poll()}); log {root / LOG}:\n{tail}")


def ready(root: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(str(Path(root) / SOCKET))
            return True
        except OSError:
            return False


def stop(root: Path, wait_s: float = 15.0) -> bool:
    """Stop the server recorded in root's state file (its children too); True if one was running."""
    root = Path(root).resolve()
    try:
        pid = int(json.loads((root / STATE).read_text())["pid"])
    except (FileNotFoundError, ValueError, KeyError):
        return False
    (root / STATE).unlink(missing_ok=True)
    if not _alive(pid):
        (root / SOCKET).unlink(missing_ok=True)
        return False
    for sig in (signal.SIGTERM, signal.SIGKILL):
        os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    return True
            except ChildProcessError:  # started by an earlier workflow process: poll
                if not _alive(pid):
                    return True
            time.sleep(0.05)
    return True


def start_for_workflow(root: Path, preload_lm: list[str] | None = None) -> int | None:
    """The Snakefile's onstart (after the tracking server, whose URI the jobs' environment carries)."""
    if not wanted():
        return None
    pid = start(root, preload_lm=[d for d in preload_lm or [] if Path(d).is_dir()])
    os.environ["PAPERFLOW_OWN_JOBSERVER"] = "1"
    from .watchdog import spawn

    spawn(os.getpid(), [pid], str(Path(root).resolve() / LOG))  # a killed workflow process must not leave it running
    return pid


def stop_for_workflow(root: Path) -> None:
    if os.environ.pop("PAPERFLOW_OWN_JOBSERVER", None):
        stop(root)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="paperflow job fork server (started by the Snakefile)")
    parser.add_argument("--socket", type=Path, default=SOCKET)
    parser.add_argument("--watch", type=Path, help="source tree whose edits make the server refuse jobs (tests)")
    parser.add_argument("--preload-lm", action="append", default=[], help="SmolLM2 folder to load before serving")
    args = parser.parse_args()
    serve(args.socket, args.watch, args.preload_lm)

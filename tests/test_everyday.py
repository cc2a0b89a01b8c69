"""Everyday use after a smoke run (issue 26): DVC experiments record fresh results, edits to the verdict code
re-render the report, and a user without root's permission override can rerun after `dvc commit`.

Each test works on a copy of the session's smoke workspace (DVC and edits rewrite files later tests must not see).
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import polars as pl
import yaml

from conftest import PYTHON, ROOT, SNAKEMAKE, run

DVC = [PYTHON, "-m", "dvc"]
# Run a command as root would run it without CAP_DAC_OVERRIDE: like any user, it cannot write a read-only file.
NO_DAC_OVERRIDE = ["setpriv", "--inh-caps=-dac_override", "--bounding-set=-dac_override"]
SMOKE = ["--config", "profile=smoke"]
PAPER, KNOB = "icl_functional_gd", "noise"  # a cheap smoke paper; its observation noise changes every metric


def _copy(workspace: Path, dest: Path) -> Path:
    shutil.copytree(workspace, dest, symlinks=True,
                    ignore=shutil.ignore_patterns("mlflow.db", "mlartifacts", "logs", "locks", "incomplete"))
    if not (dest / ".venv").exists():  # dvc.yaml's commands run .venv/bin/python (scripts/setup.sh makes it)
        (dest / ".venv").symlink_to(ROOT / ".venv")
    return dest


def _git_commit(ws: Path) -> None:
    run(["git", "add", "-A"], ws)
    run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "state"], ws)


def test_editing_the_verdict_code_rerenders_the_report(workspace, smoke_run, tmp_path):
    ws = _copy(workspace, tmp_path / "ws")
    claims = ws / "src" / "paperflow" / "report" / "claims.py"
    claims.write_text(claims.read_text() + "\n# a change to how verdicts are computed\n")
    out = run(SNAKEMAKE + ["-n", "--cores", "8", "all", *SMOKE], ws)
    stats = _job_stats(out.stdout + out.stderr)
    assert stats.get("report") == 1 and "run" not in stats and "collect" not in stats, stats  # only the report


def _job_stats(text: str) -> dict[str, int]:
    """Snakemake's "Job stats" table of a dry run: {rule: count}."""
    if "Job stats:" not in text:
        return {}
    rows = text.split("Job stats:", 1)[1].splitlines()[3:]
    out = {}
    for row in rows:
        parts = row.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        out[parts[0]] = int(parts[1])
    return out


def test_dvc_experiments_record_fresh_metrics_without_root_override(workspace, smoke_run, tmp_path):
    ws = _copy(workspace, tmp_path / "ws")
    params = yaml.safe_load((ws / "params.yaml").read_text())
    assert KNOB in params["papers"][PAPER]
    text = (ws / "params.yaml").read_text().replace("\nprofile: default\n", "\nprofile: smoke\n", 1)
    (ws / "params.yaml").write_text(text)  # DVC's commands read the profile from params.yaml
    run([PYTHON, "-m", "paperflow.cli", "resolve-params"], ws)  # what the params stage records for the smoke profile
    _git_commit(ws)
    run(DVC + ["commit", "--force"], ws, timeout=1800)  # record what Snakemake made (README "DVC")
    _git_commit(ws)

    def seen():
        return (json.loads((ws / "reports" / "metrics" / f"{PAPER}.json").read_text()),
                pl.read_csv(ws / "results" / PAPER / "metrics.csv"))

    m1, t1 = seen()  # the committed smoke run (noise 0.1)
    # as a user without root's override: outputs DVC cached must still be writable (cache.type copy)
    run(NO_DAC_OVERRIDE + DVC + ["exp", "run", "-S", f"papers.{PAPER}.{KNOB}=0.3"], ws, timeout=1800)
    m2, t2 = seen()
    # a key the smoke profile overrides: the paper's resolved params do not change, so DVC reruns nothing of it
    hidden = run(NO_DAC_OVERRIDE + DVC + ["exp", "run", "-S", f"papers.{PAPER}.steps=777"], ws, timeout=1800)
    assert f"Stage '{PAPER}' didn't change" in hidden.stdout + hidden.stderr, (hidden.stdout + hidden.stderr)[-3000:]
    assert not t1.equals(t2), "the knob changed nothing in results"
    assert m1 != m2, "reports/metrics kept the committed run's numbers"
    assert m2["headline"]["verdict"] in ("reproduced", "inconclusive", "not reproduced", "not testable")  # a word
    table = run(DVC + ["exp", "show", "--only-changed", "--csv"], ws, timeout=600).stdout
    header = table.splitlines()[0].split(",")
    assert len(header) < 40, f"`dvc exp show --only-changed` has {len(header)} columns"  # fits a screen (README)
    assert any(f"papers.{PAPER}.{KNOB}" in h for h in header)
    run(DVC + ["plots", "show"], ws, timeout=600)
    status = run(["git", "status", "--porcelain"], ws).stdout
    assert "dvc_plots" not in status, status  # ignored, not left for the user to commit


def test_rerun_after_dvc_commit_without_root_override(workspace, smoke_run, tmp_path):
    ws = _copy(workspace, tmp_path / "ws")
    _git_commit(ws)
    run(DVC + ["commit", "--force", f"{PAPER}"], ws, timeout=1200)
    target = f"results/{PAPER}/metrics.csv"
    proc = subprocess.run(NO_DAC_OVERRIDE + SNAKEMAKE + ["--cores", "2", "--forcerun", target, *SMOKE, "--", target], cwd=ws,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "ProtectedOutputException" not in proc.stdout + proc.stderr


def _pids(ws: Path) -> dict[str, int]:
    out = {}
    for name, rel in (("jobserver", ".paperflow/jobserver.json"), ("tracking", ".paperflow/tracking_server.json")):
        try:
            out[name] = int(json.loads((ws / rel).read_text())["pid"])
        except (FileNotFoundError, ValueError, KeyError):
            pass
    return out


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by its parent) counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_kill_9_of_the_workflow_ends_its_servers_and_a_plain_rerun_completes(workspace, smoke_run, tmp_path):
    import os
    import signal
    import time

    ws = _copy(workspace, tmp_path / "ws")
    run_dir = next((ws / "results" / PAPER).glob("*/seed0"))
    rel = run_dir.relative_to(ws)
    log = ws / "logs" / PAPER / rel.parts[2] / "seed0" / "run.log"
    env = {**os.environ, "PAPERFLOW_STAGE_CACHE": "off", "PAPERFLOW_JOBSERVER": "always"}  # one job: force the server
    proc = subprocess.Popen(SNAKEMAKE + ["--cores", "2", "--forcerun", str(rel / "model.pt"), *SMOKE, "--", str(rel / "metrics.json")],
                            cwd=ws, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and not (log.exists() and ": train" in log.read_text()):
        time.sleep(0.05)
    pids = _pids(ws)
    assert set(pids) == {"jobserver", "tracking"}, pids
    os.kill(proc.pid, signal.SIGKILL)  # only the workflow process, as `kill -9 <snakemake pid>` does
    proc.wait()
    deadline = time.time() + 90
    while time.time() < deadline and any(_alive(p) for p in pids.values()):
        time.sleep(0.5)
    assert not any(_alive(p) for p in pids.values()), f"still running after the workflow died: {pids}"
    # a plain rerun: no --unlock, no --rerun-incomplete
    again = subprocess.run(SNAKEMAKE + ["--cores", "2", *SMOKE, "--", str(rel / "metrics.json")], cwd=ws, env=env,
                           capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    assert (run_dir / "metrics.json").exists()

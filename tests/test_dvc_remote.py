"""A DVC remote restores a run's results on a fresh clone (README "DVC"): after `dvc commit -f` and `dvc push` in
the workspace that ran the smoke DAG, a clone with the same git files plus dvc.lock and .dvc/config (what a
team commits) gets results/ and reports/ back with `dvc pull`, and then neither DVC nor Snakemake has anything
to do. A local directory remote behaves like S3/GCS remotes for push/pull (SCALEOUT.md)."""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import yaml

from conftest import PYTHON, ROOT, SNAKEMAKE, copy_checkout, run

DVC = [PYTHON, "-m", "dvc"]


def _dvc_outs(root: Path) -> list[str]:
    """Every path dvc.yaml declares as an output (outs, metrics, plots) except resources/ (rebuilt, not pushed)."""
    stages = yaml.safe_load((root / "dvc.yaml").read_text())["stages"]
    paths = [next(iter(o)) if isinstance(o, dict) else o for st in stages.values()
             for kind in ("outs", "metrics", "plots") for o in st.get(kind, [])]
    return [p for p in paths if not p.startswith("resources/")]


def _digests(root: Path, paths: list[str]) -> dict[str, str]:
    out = {}
    for rel in paths:
        top = root / rel
        for path in sorted([top] if top.is_file() else top.rglob("*")):
            if path.is_file():
                out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def test_dvc_pull_on_a_fresh_clone_restores_results(workspace, smoke_run, tmp_path):
    # a copy of the session's workspace: `dvc commit` rewrites outputs (new mtimes), which later tests must not see
    made = tmp_path / "made"
    shutil.copytree(workspace, made, symlinks=True, ignore=shutil.ignore_patterns(".snakemake", "logs", "mlartifacts", "mlflow.db"))
    remote = tmp_path / "remote"
    run(DVC + ["config", "--local", "cache.type", "copy"], made)
    run(DVC + ["remote", "add", "--force", "-d", "store", str(remote)], made)
    run(DVC + ["commit", "--force"], made, timeout=1200)  # record what Snakemake made (README "DVC")
    pushed = run(DVC + ["push"], made, timeout=1200)
    assert remote.exists() and any(remote.rglob("*")), pushed.stdout

    clone = copy_checkout(tmp_path / "clone")  # the git files of a fresh clone ...
    shutil.copy(made / "dvc.lock", clone / "dvc.lock")  # ... plus what the team commits after a push
    shutil.copy(made / ".dvc" / "config", clone / ".dvc" / "config")
    (clone / "resources").symlink_to(ROOT / "resources")  # rebuilt by scripts/setup.sh, never pushed (cache: false)
    run(["git", "init", "-q"], clone)
    assert not (clone / "results").exists()

    run(DVC + ["pull"], clone, timeout=1200)
    outs = _dvc_outs(clone)
    restored = _digests(clone, outs)
    assert restored == _digests(made, outs)
    assert any(k.startswith("results/") for k in restored) and "reports/claims.csv" in restored

    status = run(DVC + ["status"], clone, timeout=600)
    assert "up to date" in status.stdout.lower(), status.stdout[-3000:]
    # pulled files carry the pull's mtimes: `--touch` re-syncs Snakemake's view (README), then nothing runs
    run(SNAKEMAKE + ["--touch", "--cores", "1", "all", "--config", "profile=smoke"], clone, timeout=600)
    dry = run(SNAKEMAKE + ["-n", "--cores", "8", "all", "--config", "profile=smoke"], clone, timeout=600)
    assert "Nothing to be done" in dry.stdout + dry.stderr, (dry.stdout + dry.stderr)[-3000:]

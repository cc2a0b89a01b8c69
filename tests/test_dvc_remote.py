"""A DVC remote restores a run's results on a fresh clone (README "DVC"): after `dvc commit -f` and `dvc push` in
the workspace that ran the smoke DAG, a clone with the same git files plus dvc.lock and .dvc/config (what a
team commits) gets results/ and reports/ back with `dvc pull`, and then neither DVC nor Snakemake has anything
to do. A local directory remote behaves like S3/GCS remotes for push/pull (SCALEOUT.md)."""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from conftest import PYTHON, ROOT, SNAKEMAKE, copy_checkout, run

DVC = [PYTHON, "-m", "dvc"]


def _digests(root: Path, folders: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for folder in folders:
        for path in sorted((root / folder).rglob("*")):
            if path.is_file():
                out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def test_dvc_pull_on_a_fresh_clone_restores_results(workspace, smoke_run, tmp_path):
    remote = tmp_path / "remote"
    # copies, not hardlinks, in this shared session workspace: later tests rewrite result files in place
    run(DVC + ["config", "--local", "cache.type", "copy"], workspace)
    run(DVC + ["remote", "add", "--force", "-d", "store", str(remote)], workspace)
    run(DVC + ["commit", "--force"], workspace, timeout=1200)  # record what Snakemake made (README "DVC")
    pushed = run(DVC + ["push"], workspace, timeout=1200)
    assert remote.exists() and any(remote.rglob("*")), pushed.stdout

    clone = copy_checkout(tmp_path / "clone")  # the git files of a fresh clone ...
    shutil.copy(workspace / "dvc.lock", clone / "dvc.lock")  # ... plus what the team commits after a push
    shutil.copy(workspace / ".dvc" / "config", clone / ".dvc" / "config")
    (clone / "resources").symlink_to(ROOT / "resources")  # rebuilt by scripts/setup.sh, never pushed (cache: false)
    run(["git", "init", "-q"], clone)
    assert not (clone / "results").exists()

    run(DVC + ["pull"], clone, timeout=1200)
    folders = ("results", "reports")
    assert _digests(clone, folders) == _digests(workspace, folders)

    status = run(DVC + ["status"], clone, timeout=600)
    assert "up to date" in status.stdout.lower(), status.stdout[-3000:]
    # pulled files carry the pull's mtimes: `--touch` re-syncs Snakemake's view (README), then nothing runs
    run(SNAKEMAKE + ["--touch", "--cores", "1", "all", "--config", "profile=smoke"], clone, timeout=600)
    dry = run(SNAKEMAKE + ["-n", "--cores", "8", "all", "--config", "profile=smoke"], clone, timeout=600)
    assert "Nothing to be done" in dry.stdout + dry.stderr, (dry.stdout + dry.stderr)[-3000:]

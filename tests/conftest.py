"""Shared fixtures: the repository root and a smoke-profile workspace (a copy of the checkout)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
SNAKEMAKE = [PYTHON, "-m", "snakemake"]
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


def run(cmd: list[str], cwd: Path, timeout: float = 900, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


def copy_checkout(dest: Path) -> Path:
    """The checkout's tracked and untracked-but-not-ignored files (what a clean clone has)."""
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, files):
        src = ROOT / name.decode()
        if src.is_file():
            target = dest / name.decode()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
    return dest


@pytest.fixture(scope="session")
def repo_resources() -> Path:
    """Build the data resources once in the repository (cheap when present)."""
    run(SNAKEMAKE + ["--cores", "2", "--nolock", "resources_all", "--config", "profile=smoke"], ROOT, timeout=1800)
    return ROOT / "resources"


@pytest.fixture(scope="session")
def workspace(tmp_path_factory, repo_resources) -> Path:
    """A fresh copy of the checkout sharing the repository's resources/ and sources/."""
    ws = copy_checkout(tmp_path_factory.mktemp("workspace"))
    shutil.rmtree(ws / "resources", ignore_errors=True)  # DVC may keep a .gitignore there
    (ws / "resources").symlink_to(repo_resources)
    if (ROOT / "sources").exists():
        (ws / "sources").symlink_to(ROOT / "sources")
    run(["git", "init", "-q"], ws)
    yield ws
    from paperflow import jobserver, tracking_server

    tracking_server.stop(ws)  # a run killed by a test leaves its loopback MLflow server up: end it
    jobserver.stop(ws)  # and its job server


@pytest.fixture(scope="session")
def smoke_run(workspace) -> subprocess.CompletedProcess:
    """`snakemake --cores 8 all --config profile=smoke` once per test session."""
    return run(SNAKEMAKE + ["--cores", "8", "all", "--config", "profile=smoke"], workspace, timeout=2700)

def pytest_collection_modifyitems(items):
    """Tests that need the session's smoke run or real services are `slow`: `pytest -m "not slow"` is the quick
    unit suite (a few minutes), the full suite (scripts/test.sh, CI) runs everything."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "smoke_run" in fixtures or "served_ws" in fixtures or item.module.__name__ in ("test_scaleout", "test_browser"):
            item.add_marker(pytest.mark.slow)

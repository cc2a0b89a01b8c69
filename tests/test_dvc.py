"""dvc.yaml is generated from the registry and must stay in sync; DVC can read it."""
from __future__ import annotations

import subprocess

import yaml

from conftest import PYTHON, ROOT
from paperflow.dvcgen import dvc_stages, dvc_yaml_text
from paperflow.registry import list_papers


def test_dvc_yaml_in_sync():
    assert (ROOT / "dvc.yaml").read_text() == dvc_yaml_text(), "run `paperflow dvc-yaml --write`"


def test_one_stage_per_paper_plus_resources_and_report():
    stages = dvc_stages()["stages"]
    assert set(stages) == {s.id for s in list_papers()} | {"resources", "report"}
    for spec in list_papers():
        stage = stages[spec.id]
        assert f"papers.{spec.id}" in stage["params"]
        assert stage["outs"] == [{f"results/{spec.id}": {"persist": True}}]
        assert any(d.endswith(f"papers/{spec.id}.py") for d in stage["deps"])
        # another paper's module is not a dependency (changing it must not rerun this stage)
        others = {s.id for s in list_papers()} - {spec.id}
        assert not any(d.endswith(f"papers/{o}.py") for o in others for d in stage["deps"])


def test_paper_stage_depends_on_the_shared_code_it_imports():
    stages = dvc_stages()["stages"]
    assert "src/paperflow/compress/wanda.py" in stages["owl"]["deps"]
    assert "src/paperflow/loop.py" in stages["dcmha"]["deps"]


def test_dvc_reads_the_pipeline():
    proc = subprocess.run([PYTHON, "-m", "dvc", "dag", "--md"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for spec in list_papers():
        assert spec.id in proc.stdout
    assert yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]


def test_snakemake_lint_is_clean():
    proc = subprocess.run([PYTHON, "-m", "snakemake", "--lint", "--config", "profile=smoke"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "in a good condition" in proc.stdout + proc.stderr, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_no_stale_dvc_lock_is_committed():
    """dvc.lock records hashes of results made on a user's machine; a committed one goes stale with every code
    change and makes `dvc status` on a fresh clone flag every stage (README "DVC")."""
    tracked = subprocess.run(["git", "ls-files", "dvc.lock"], cwd=ROOT, capture_output=True, text=True).stdout
    assert tracked.strip() == "", "dvc.lock is tracked by git: `git rm --cached dvc.lock`"

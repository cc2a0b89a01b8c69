"""Tests of the ETHER paper module (papers/ether.py): the sweep's param groups, the spec path on a tiny random
Llama (merge == unmerged), derive (best lr, spread, parameter ratios), Config validation. The reflection math
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


def test_spec_path_and_derive(tiny):
    cfg, data = tiny
    spec = get_paper("ether")
    rows = []
    for variant in spec.variants:
        if not variant.endswith(("_lr0", "_lr2")):
            continue
        model = spec.train(cfg, data, variant, 0, lambda step, **m: None)
        merged = spec.compress(cfg, model, data, variant, 0)["merged"]
        dense, comp = spec.evaluate(cfg, model, data), spec.evaluate(cfg, merged, data)
        assert comp["merge_err"] < 1e-4 and comp["acc"] == dense["acc"]
        rows.append({"paper": "ether", "variant": variant, "seed": 0, **{f"dense/{k}": v for k, v in dense.items()}})
    out = {r["variant"]: r for r in et.derive(cfg, rows)}
    for m in et.METHODS:
        accs = [out[f"{m}_lr{i}"]["dense/acc"] for i in (0, 2)]
        assert out[f"{m}|best"]["dense/acc_spread"] == pytest.approx(max(accs) - min(accs))
    lora, ether = out["lora|best"]["dense/params"], out["ether|best"]["dense/params"]
    assert out["ether|best"]["dense/lora_over_params"] == pytest.approx(lora / ether)
    assert ether == 32 * 6 + 64  # one vector of size `in` per linear
    assert out["ref|10x"]["dense/lora_over_params"] == 10.0


def test_derive_best_is_chosen_on_validation():
    rows = [{"paper": "ether", "variant": f"lora_lr{i}", "seed": 1, "dense/acc": a, "dense/val_acc": v,
             "dense/val_loss": 1.0, "dense/params": 100.0, "dense/lr": lr}
            for i, (a, v, lr) in enumerate([(0.2, 0.9, 1e-4), (0.8, 0.1, 1e-3), (0.5, 0.5, 1e-2)])]
    out = {r["variant"]: r for r in et.derive(et.Config(), rows)}
    assert out["lora|best"]["dense/acc"] == 0.2 and out["lora|best"]["dense/best_lr"] == 1e-4
    assert out["lora|best"]["dense/acc_spread"] == pytest.approx(0.6)
    assert out["lora|best"]["dense/acc_worst"] == 0.2


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
        et.parse_variant("ether_lr7")

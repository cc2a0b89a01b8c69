"""Tests of the LoRA+ paper module (papers/loraplus.py): the optimizer groups of create_loraplus_optimizer,
the spec path on a tiny random Llama, derive (best-lr views, steps to target), Config validation."""
from __future__ import annotations

import pytest
import torch

from paperflow import finetune as ft
from paperflow.nn.adapters import LoRALinear
from paperflow.papers import loraplus as lp
from paperflow.registry import get_paper
from paperflow.spec import ConfigError
from tiny_llama import tiny_resources

torch.set_num_threads(1)

TINY = dict(seq_len=8, n_train=6, n_val=2, n_test=2, steps=4, batch_size=4, warmup=1, eval_every=2, lora_r=2)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    cfg = lp.Config(**TINY)
    return cfg, get_paper("loraplus").prepare(cfg, tiny_resources(tmp_path_factory.mktemp("lp")))


def test_loraplus_groups_give_B_and_vectors_ratio_times_lr(tiny):
    cfg, data = tiny
    model = ft.build_model(cfg, data, "lora", 0)
    groups = {g["name"]: g for g in lp.loraplus_groups(model, 1e-3, 16.0, weight_decay=0.1)}
    assert groups["A"]["lr"] == 1e-3 and groups["B"]["lr"] == groups["B_no_decay"]["lr"] == pytest.approx(1.6e-2)
    loras = [m for m in model.modules() if isinstance(m, LoRALinear)]
    assert len(loras) == 7  # q/k/v/o/gate/up/down of the top layer
    ids = lambda ps: {id(p) for p in ps}
    assert ids(groups["B"]["params"]) == ids(m.lora_B for m in loras)
    assert ids(groups["A"]["params"]) == ids([m.lora_A for m in loras] + [model.head.weight])
    assert ids(groups["B_no_decay"]["params"]) == {id(model.head.bias)}  # every trainable 1-D parameter
    assert groups["B_no_decay"]["weight_decay"] == 0.0 and groups["B"]["weight_decay"] == 0.1
    n = sum(len(g["params"]) for g in groups.values())
    assert n == sum(1 for p in model.parameters() if p.requires_grad)  # every trainable parameter, once


def test_ratio_survives_the_schedule(tiny):
    cfg, data = tiny
    seen = []
    orig = torch.optim.AdamW.step

    def spy(self, *a, **k):
        seen.append([g["lr"] for g in self.param_groups])
        return orig(self, *a, **k)

    torch.optim.AdamW.step = spy
    try:
        lp.train(cfg, data, "loraplus_lr1", 0, None)
    finally:
        torch.optim.AdamW.step = orig
    for lrs in seen:
        assert lrs[1] == pytest.approx(16 * lrs[0]) and lrs[2] == pytest.approx(16 * lrs[0])
    assert seen[0][0] != seen[-1][0]  # the schedule moved


def test_spec_path_prepare_train_compress_evaluate(tiny):
    cfg, data = tiny
    spec = get_paper("loraplus")
    rows = []
    for variant in ("lora_lr0", "loraplus_lr1", "full_lr0"):
        model = spec.train(cfg, data, variant, 0, lambda step, **m: None)
        comp = spec.compress(cfg, model, data, variant, 0)
        dense, merged = spec.evaluate(cfg, model, data), spec.evaluate(cfg, comp["merged"], data)
        assert merged["merge_err"] < 1e-4 and dense["acc"] == merged["acc"]
        rows.append({"paper": "loraplus", "variant": variant, "seed": 0, **{f"dense/{k}": v for k, v in dense.items()}})
    assert rows[0]["dense/params"] == rows[1]["dense/params"] > 0 and rows[2]["dense/params"] == 0
    out = lp.derive(cfg, rows)
    views = {r["variant"]: r for r in out if "|" in r["variant"]}
    assert set(views) == {"lora|best", "loraplus|best", "full|best"}
    target = max(min(ft.curve_of(views[v])[1]) for v in views)
    for r in out:
        assert r["dense/loss_target"] == target and r["dense/steps_to_target"] in (2.0, 4.0, 6.0)


def test_derive_picks_best_val_lr_and_steps_to_shared_target():
    def row(v, val_acc, curve):
        r = {"paper": "loraplus", "variant": v, "seed": 0, "dense/val_acc": val_acc, "dense/val_loss": curve[-1]}
        r.update({f"dense/val_loss@{10 * (i + 1)}": l for i, l in enumerate(curve)})
        return r
    cfg = lp.Config(steps=30, eval_every=10)
    rows = [row("lora_lr0", 0.5, [1.5, 1.2, 1.0]), row("lora_lr1", 0.6, [1.4, 1.1, 0.9]),
            row("loraplus_lr0", 0.7, [1.0, 0.8, 0.7]), row("full_lr0", 0.4, [1.6, 1.5, 1.3])]
    out = {r["variant"]: r for r in lp.derive(cfg, rows)}
    assert out["lora|best"]["dense/val_acc"] == 0.6 and out["lora|best"]["dense/best_lr_index"] == 1
    # target = max of the best runs' minima = max(0.9, 0.7, 1.3) = 1.3
    assert out["lora|best"]["dense/steps_to_target"] == 20 and out["loraplus|best"]["dense/steps_to_target"] == 10
    assert out["full|best"]["dense/steps_to_target"] == 30


def test_config_validation():
    with pytest.raises(ConfigError):
        lp.Config(lrs=(1e-3, 1e-2))
    with pytest.raises(ConfigError):
        lp.Config(ratio=0.5)
    with pytest.raises(ConfigError):
        lp.Config(targets=("nope",))
    with pytest.raises(ConfigError):
        lp.Config(warmup=500)
    with pytest.raises(ConfigError):
        get_paper("loraplus").make_config({"bogus": 1})
    assert lp.Config(lrs=[1, 2, 3]).lrs == (1.0, 2.0, 3.0)

"""Tests of the LoRA+ paper module (papers/loraplus.py): the optimizer groups of create_loraplus_optimizer
(lr ratio and the weight-decay rule), the spec path on a tiny random Llama (merge == unmerged, pruned level),
the in-job lr grid (chosen run = best on validation), derive (steps to the shared target), Config validation."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

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


def test_weight_decay_follows_the_codes_rule_for_1d_parameters():
    """create_loraplus_optimizer: decay = names outside norm layers minus "bias"; every 1-D parameter is in the
    lr * ratio groups, decayed unless it is a bias or a norm scale (a hand-built module with each case)."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = LoRALinear(nn.Linear(4, 4), r=2)
            self.norm = nn.LayerNorm(4)
            self.rms = nn.RMSNorm(4)
            self.scale = nn.Parameter(torch.ones(4))  # 1-D, neither bias nor norm: decayed at lr * ratio
            self.head = nn.Linear(4, 2)

    net = Net()
    assert lp.decay_names(net) == {"q.lora_A", "q.lora_B", "q.base.weight", "scale", "head.weight"}
    groups = {g["name"]: {id(p) for p in g["params"]} for g in lp.loraplus_groups(net, 1e-3, 16.0, 0.1)}
    assert groups["A"] == {id(net.q.lora_A), id(net.head.weight)}
    assert groups["B"] == {id(net.q.lora_B), id(net.scale)}
    assert groups["B_no_decay"] == {id(p) for p in (net.norm.weight, net.norm.bias, net.rms.weight, net.head.bias)}


def test_ratio_survives_the_schedule(tiny):
    cfg, data = tiny
    seen = []
    orig = torch.optim.AdamW.step

    def spy(self, *a, **k):
        seen.append([g["lr"] for g in self.param_groups])
        return orig(self, *a, **k)

    torch.optim.AdamW.step = spy
    try:
        lp.train(cfg, data, "loraplus", 0, None)
    finally:
        torch.optim.AdamW.step = orig
    for lrs in seen:
        assert lrs[1] == pytest.approx(16 * lrs[0]) and lrs[2] == pytest.approx(16 * lrs[0])
    assert seen[0][0] != seen[-1][0]  # the schedule moved


def test_spec_path_prepare_train_compress_evaluate(tiny):
    cfg, data = tiny
    spec = get_paper("loraplus")
    assert tuple(spec.variants) == ("lora", "loraplus", "head")
    head = spec.train(cfg, data, "head", 0, lambda step, **m: None)
    assert len(head["grid"]) == len(cfg.head_lrs) and spec.compress(cfg, head, data, "head", 0) == {}
    h = spec.evaluate(cfg, head, data)
    assert h["params"] == 0 and not any(k.startswith("same_lr_val_loss@") for k in h) and "lora_ba_ratio" not in h
    rows = []
    for variant in lp.METHODS:
        model = spec.train(cfg, data, variant, 0, lambda step, **m: None)
        assert len(model["grid"]) == len(cfg.lrs) and model["lr"] == model["tuning"]["tuned_lr"]
        comp = spec.compress(cfg, model, data, variant, 0)
        assert set(comp) == {"merged", "0.50"} and "grid" not in comp["merged"]
        dense, merged = spec.evaluate(cfg, model, data), spec.evaluate(cfg, comp["merged"], data)
        assert merged["merge_err"] < 1e-4 and dense["acc"] == merged["acc"]
        assert spec.evaluate(cfg, comp["0.50"], data)["sparsity"] == pytest.approx(0.5)
        # the chosen run is the grid's best on validation; its test numbers are the grid entry's
        i = int(dense["tuned_lr_index"])
        assert dense["val_acc"] == max(dense[f"val_acc@lr{j}"] for j in range(len(cfg.lrs))) == dense[f"val_acc@lr{i}"]
        assert dense["acc"] == dense[f"acc@lr{i}"] and dense["acc_worst"] == min(dense[f"acc@lr{j}"] for j in range(5))
        assert any(k.startswith("same_lr_val_loss@") for k in dense) and "same_lr_val_loss@4" not in merged
        # metrics reuses the grid's test numbers and the curve's last validation point: the same as evaluating anew
        net = ft.load_model(cfg, data, model)
        assert dense["acc"] == ft.evaluate_split(net, data, 2)["acc"] and dense["loss"] == pytest.approx(ft.evaluate_split(net, data, 2)["loss"])
        assert dense["val_acc"] == ft.evaluate_split(net, data, 1)["acc"]
        assert dense["lora_b_norm"] > 0 and dense["lora_a_shift"] > 0 and "lora_b_norm" not in merged
        rows.append({"paper": "loraplus", "variant": variant, "seed": 0, **{f"dense/{k}": v for k, v in dense.items()}})
    assert rows[0]["dense/params"] == rows[1]["dense/params"] > 0
    out = lp.derive(cfg, rows)
    target = max(min(ft.curve_of(r)[1]) for r in rows)
    for r in out:
        assert r["dense/steps_to_target_target"] == target and r["dense/steps_to_target"] in (2.0, 4.0, 6.0)
        assert r["dense/steps_to_target_same_lr"] in (2.0, 4.0, 6.0)


def test_head_only_fast_path_equals_the_full_forward(tiny):
    """finetune's "head" runs on frozen features computed once; the same training through the full forward (a
    LoRA model whose optimizer holds only the head: B = 0 stays 0, so the layer is the frozen one, and the seed gives
    the same head init and batches) ends at the same head."""
    cfg, data = tiny
    stored = ft.head_features(data, splits=(0, 1, 2))  # from the data artifact (prepare_task)
    without = {k: v for k, v in data.items() if k != "head_features"}
    for a, b in zip(stored, ft.head_features(without, splits=(0, 1, 2))):  # computed on the fly
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    fast = ft.finetune(cfg, data, "head", 3e-2, 5)
    head_only = lambda m, r: [{"params": list(m.head.parameters()), "lr": r, "weight_decay": 0.0}]  # noqa: E731
    slow = ft.finetune(cfg, data, "lora", 3e-2, 5, groups=head_only)
    for k in ("head.weight", "head.bias"):
        torch.testing.assert_close(fast["state"][k], slow["state"][k], rtol=1e-5, atol=1e-6)
    assert fast["curve"]["val_loss"] == pytest.approx(slow["curve"]["val_loss"], rel=1e-5)
    assert fast["trainable_params"] == slow["trainable_params"]  # the head only in both


def test_adapter_stats_by_hand(tiny):
    """lora_b_norm = mean ||B||_F, lora_a_shift = mean ||A - A_0||_F, weight_shift = mean ||s B A||_F / ||W||_F (hand
    computed from the adapters); an untrained model has B = 0 and A = A_0; LoRA+'s ratio 16 moves B further
    relative to A than ratio 1 at the same lr_A."""
    from paperflow.nn.adapters import adapters_of

    cfg, data = tiny
    fresh = ft.build_model(cfg, data, "lora", 3)
    zero = ft.adapter_stats(cfg, data, {"method": "lora", "seed": 3, "state": ft.trainable_state(fresh)})
    assert zero["lora_b_norm"] == 0 and zero["lora_a_shift"] == 0 and zero["weight_shift"] == 0
    runs = {ratio: ft.finetune(cfg, data, "lora", 1e-2, 3, groups=lambda m, r, q=ratio: lp.loraplus_groups(m, r, q))
            for ratio in (1.0, 16.0)}
    stats = {q: ft.adapter_stats(cfg, data, m) for q, m in runs.items()}
    ads = adapters_of(ft.load_model(cfg, data, runs[1.0]))
    init = adapters_of(fresh)
    with torch.no_grad():
        b = sum(float(a.lora_B.norm()) for a in ads.values()) / len(ads)
        da = sum(float((a.lora_A - init[n].lora_A).norm()) for n, a in ads.items()) / len(ads)
        ws = sum(float((a.scale * a.lora_B @ a.lora_A).norm() / a.base.weight.norm()) for a in ads.values()) / len(ads)
    assert stats[1.0]["lora_b_norm"] == pytest.approx(b) and stats[1.0]["lora_a_shift"] == pytest.approx(da)
    assert stats[1.0]["weight_shift"] == pytest.approx(ws, rel=1e-4) and stats[1.0]["lora_ba_ratio"] == pytest.approx(b / da)
    assert stats[16.0]["lora_ba_ratio"] > 2 * stats[1.0]["lora_ba_ratio"]


def test_derive_steps_to_the_shared_target_per_seed():
    def row(v, seed, curve, same):
        r = {"paper": "loraplus", "variant": v, "seed": seed}
        r.update({f"dense/val_loss@{10 * (i + 1)}": l for i, l in enumerate(curve)})
        r.update({f"dense/same_lr_val_loss@{10 * (i + 1)}": l for i, l in enumerate(same)})
        return r
    cfg = lp.Config(steps=30, eval_every=10)
    rows = [row("lora", 0, [1.4, 1.1, 0.9], [1.5, 1.2, 1.0]), row("loraplus", 0, [1.0, 0.8, 0.7], [1.0, 0.6, 0.5]),
            row("lora", 1, [1.0, 0.9, 0.8], [2.0, 1.9, 1.8])]  # seed 1 has no LoRA+ run: no target
    out = {(r["variant"], r["seed"]): r for r in lp.derive(cfg, rows)}
    # seed 0: target = max of the minima = max(0.9, 0.7) = 0.9 -> LoRA at step 30, LoRA+ at 20 (0.8 <= 0.9)
    assert out["lora", 0]["dense/steps_to_target"] == 30 and out["loraplus", 0]["dense/steps_to_target"] == 20
    # same-lr curves: target max(1.0, 0.5) = 1.0 -> LoRA at 30, LoRA+ at 10
    assert out["lora", 0]["dense/steps_to_target_same_lr"] == 30 and out["loraplus", 0]["dense/steps_to_target_same_lr"] == 10
    assert "dense/steps_to_target" not in out["lora", 1]
    # the target is the larger minimum, so both runs reach it: here LoRA+ only at its last point (1.05)
    rows[1] = row("loraplus", 0, [1.0, 0.8, 0.7], [1.1, 1.1, 1.05])
    out = {(r["variant"], r["seed"]): r for r in lp.derive(cfg, rows)}
    assert out["loraplus", 0]["dense/steps_to_target_same_lr_target"] == 1.05
    assert out["lora", 0]["dense/steps_to_target_same_lr"] == 30 and out["loraplus", 0]["dense/steps_to_target_same_lr"] == 30


def test_config_validation():
    with pytest.raises(ConfigError):
        lp.Config(lrs=(1e-3, 1e-2))
    with pytest.raises(ConfigError):
        lp.Config(lrs=(1e-3, 1e-2, 3e-2, 5e-2, 4e-2))  # not increasing
    with pytest.raises(ConfigError):
        lp.Config(same_lr=5)
    with pytest.raises(ConfigError):
        lp.Config(sparsities=(1.0,))
    with pytest.raises(ConfigError):
        lp.Config(ratio=0.5)
    with pytest.raises(ConfigError):
        lp.Config(targets=("nope",))
    with pytest.raises(ConfigError):
        lp.Config(warmup=500)
    with pytest.raises(ConfigError):
        get_paper("loraplus").make_config({"bogus": 1})
    assert lp.Config(lrs=[1, 2, 3, 4, 5]).lrs == (1.0, 2.0, 3.0, 4.0, 5.0)
    with pytest.raises(ConfigError):
        lp.Config(head_lrs=(1e-3, 1e-4, 1e-2))

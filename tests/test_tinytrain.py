"""TinyTrain: Fisher potential, multi-objective criterion and budgeted selection, exact channel-sparse
update, measured backward costs, and a tiny prepare -> train -> evaluate through the spec."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from paperflow.papers import tinytrain as P
from paperflow.spec import ConfigError, Resources

torch.set_num_threads(1)


def test_fisher_potential_hand_computed():
    # N=2 examples, C=2 channels, 1x2 spatial positions
    a = torch.tensor([[[[1.0, 2.0]], [[0.0, 1.0]]],
                      [[[3.0, -1.0]], [[2.0, 2.0]]]])
    g = torch.tensor([[[[0.5, 1.0]], [[4.0, -1.0]]],
                      [[[1.0, 1.0]], [[0.5, 0.25]]]])
    # channel 0: example sums 1*.5+2*1 = 2.5 and 3*1-1*1 = 2 -> (6.25 + 4) / (2*2) = 2.5625
    # channel 1: 0*4+1*(-1) = -1 and 2*.5+2*.25 = 1.5 -> (1 + 2.25) / 4 = 0.8125
    assert torch.allclose(P.fisher_potential(a, g), torch.tensor([2.5625, 0.8125]))


def test_multi_objective_scores_and_budgeted_selection():
    s = P.multi_objective_scores({"a": 4.0, "b": 2.0, "c": 1.0}, {"a": 2.0, "b": 1.0, "c": 1.0}, {"a": 2.0, "b": 1.0, "c": 2.0})
    # s = I / ((M / max M) * (A / max A)): a 4/(1*1), b 2/(.5*.5), c 1/(.5*1)
    assert s == pytest.approx({"a": 4.0, "b": 8.0, "c": 2.0})
    cost = {"b": 5.0, "a": 4.0, "c": 2.0, "d": 1.0}
    order = sorted(cost, key=lambda l: -{"a": 4.0, "b": 8.0, "c": 2.0, "d": 0.5}[l])  # b, a, c, d
    additive = lambda layers: sum(cost[l] for l in layers)
    chosen = P.greedy_select(order, additive, budget=8.0)
    assert chosen == ["b", "c", "d"]  # a (4) would overflow after b (5); c and d still fit
    assert additive(chosen) <= 8.0
    assert P.greedy_select(order, additive, budget=8.0, stop_at_first_miss=True) == ["b"]
    assert P.greedy_select(order, additive, budget=0.5) == []


def _tiny_state(seed=0, channels=(4, 6, 8, 8), n_classes=3):
    return P.init_state(channels, n_classes, seed)


def test_channel_sparse_update_is_exact_and_touches_only_selected_channels():
    state = _tiny_state()
    x, y = torch.randn(6, 1, 28, 28), torch.tensor([0, 1, 2, 0, 1, 2])
    sel = torch.tensor([1, 3, 4])
    plan = {"conv2": sel, "fc": "full"}
    p, trainable = P.make_update(state, plan)
    assert torch.allclose(P.logits(p, x), P.logits(state, x), atol=1e-5)  # split forward == dense forward
    assert [t.shape for t in trainable] == [(3, 4, 3, 3), (3,), (3, 8), (3,)]
    opt = torch.optim.SGD(trainable, lr=0.5)
    F.cross_entropy(P.logits(p, x), y).backward()
    opt.step()
    new = P.merge_update(p)
    rest = torch.tensor([0, 2, 5])
    assert torch.equal(new["conv2.weight"][rest], state["conv2.weight"][rest])
    assert torch.equal(new["conv2.bias"][rest], state["conv2.bias"][rest])
    assert (new["conv2.weight"][sel] - state["conv2.weight"][sel]).abs().flatten(1).sum(1).min() > 0
    for name in ("conv1", "conv3", "conv4"):
        assert torch.equal(new[f"{name}.weight"], state[f"{name}.weight"])
    assert not torch.equal(new["fc.weight"], state["fc.weight"])


def test_measured_backward_costs_order():
    state = _tiny_state()
    x, y = torch.randn(5, 1, 28, 28), torch.tensor([0, 1, 2, 0, 1])
    head = {"fc": "full"}
    full = P.measure_update(state, {**{l: "full" for l in P.LAYERS}, **head}, x, y)
    last = P.measure_update(state, head, x, y)
    conv4 = P.measure_update(state, {"conv4": "full", **head}, x, y)
    conv4_half = P.measure_update(state, {"conv4": torch.arange(4), **head}, x, y)
    assert last["bwd_flops"] < conv4_half["bwd_flops"] < conv4["bwd_flops"] < full["bwd_flops"]
    assert last["bwd_bytes"] < conv4["bwd_bytes"] < full["bwd_bytes"]
    # last layer: dL/dW of a (3 x 8) linear on 5 examples = 2 * 5 * 3 * 8 FLOPs, no input gradient
    assert last["bwd_flops"] == 2 * 5 * 3 * 8
    # weight grad of 4 of conv4's 8 output channels costs half of the full layer's weight grad
    w_grad_full = 2 * 5 * 8 * 8 * 9 * 7 * 7
    assert conv4["bwd_flops"] - conv4_half["bwd_flops"] == w_grad_full // 2
    assert conv4_half["bwd_param_bytes"] == 2 * 4 * (4 * (8 * 9 + 1) + 3 * 8 + 3)


def test_tinytrain_plan_respects_budget_and_static_is_task_independent():
    cfg = P.Config(channels=(4, 6, 8, 8), mem_budget=0.3, channel_ratio=0.5)
    state = _tiny_state()
    x, y = torch.randn(6, 1, 28, 28), torch.tensor([0, 1, 2, 0, 1, 2])
    head = {"fc": "full"}
    budget = cfg.mem_budget * P.measure_update(state, {**{l: "full" for l in P.LAYERS}, **head}, x, y)["bwd_bytes"]
    for variant in ("tinytrain", "static_sparse"):
        plan = P.plan_update(cfg, variant, state, x, y)
        assert plan["fc"] == "full" and any(l in plan for l in P.LAYERS)
        assert P.measure_update(state, plan, x, y)["bwd_bytes"] <= budget
        assert all(len(plan[l]) == P.n_channels(state[f"{l}.weight"].shape[0], 0.5) for l in P.LAYERS if l in plan)
    fisher = P.channel_fisher(state, x, y)
    plan = P.plan_update(cfg, "tinytrain", state, x, y)
    for l in P.LAYERS:
        if l in plan:  # the top-k channels by Fisher potential
            assert set(plan[l].tolist()) == set(torch.topk(fisher[l], len(plan[l])).indices.tolist())
    other = P.plan_update(cfg, "static_sparse", state, torch.randn(6, 1, 28, 28), y)
    static = P.plan_update(cfg, "static_sparse", state, x, y)
    assert static.keys() == other.keys() and all(torch.equal(static[l], other[l]) for l in P.LAYERS if l in static)


def test_config_validation():
    with pytest.raises(ConfigError, match="mem_budget"):
        P.Config(mem_budget=0.0)
    with pytest.raises(ConfigError, match="channel_ratio"):
        P.Config(channel_ratio=1.5)
    with pytest.raises(ConfigError, match="channels"):
        P.Config(channels=(8, 8))
    with pytest.raises(ConfigError, match="unknown key"):
        P.SPEC.make_config({"nope": 1})
    assert P.Config(channels=[4, 4, 4, 4]).channels == (4, 4, 4, 4)


def _synthetic_resources(tmp_path):
    rng = np.random.default_rng(0)

    def images(n, labels):  # class-dependent bright bar + noise
        x = rng.integers(0, 60, (n, 28, 28)).astype(np.uint8)
        for i, y in enumerate(labels):
            x[i, 2 * y : 2 * y + 4, 4:20] = 250
        return x

    yf, yt, ym = np.arange(400) % 10, np.arange(200) % 10, np.arange(400) % 10
    np.savez(tmp_path / "fashion.npz", x_train=images(400, yf), y_train=yf, x_test=images(200, yt), y_test=yt)
    np.savez(tmp_path / "mnist.npz", x=images(400, ym), y=ym)
    return Resources(root=str(tmp_path), paths={"fashion_mnist": str(tmp_path / "fashion.npz"),
                                                "mnist10k": str(tmp_path / "mnist.npz")})


def test_end_to_end_through_spec(tmp_path):
    spec = P.SPEC
    cfg = spec.make_config({"channels": [4, 4, 8, 8], "pretrain_n": 150, "pretrain_steps": 5, "pretrain_batch": 32,
                            "pool_per_class": 10, "query_per_class": 8, "episodes": 1, "ft_steps": 3, "log_every": 1})
    data = spec.prepare(cfg, _synthetic_resources(tmp_path))
    assert data["fmnist5"]["x_pool"].dtype == torch.uint8 and data["mnist"]["n_way"] == 10
    assert spec.compress is None
    rows, logged = {}, []
    for variant in spec.variants:
        model = spec.train(cfg, data, variant, 0, lambda step, **m: logged.append(m))
        rows[variant] = spec.evaluate(cfg, model, data)
        assert all(math.isfinite(v) for v in rows[variant].values())
    assert {"acc", "acc_fmnist5", "acc_mnist", "bwd_bytes", "bwd_flops"} <= set(rows["tinytrain"])
    assert rows["last_layer"]["bwd_flops"] < rows["tinytrain"]["bwd_flops"] < rows["full_ft"]["bwd_flops"]
    assert rows["tinytrain"]["bwd_bytes"] < rows["full_ft"]["bwd_bytes"]
    assert any("train/loss" in m for m in logged)
    for c in spec.comparisons(cfg):
        assert c.metric in rows["tinytrain"] and c.method in spec.variants and c.baseline in spec.variants
    a = spec.train(cfg, data, "tinytrain", 1, None)
    b = spec.train(cfg, data, "tinytrain", 1, None)
    assert all(torch.equal(ea["state"][k], eb["state"][k]) for ea, eb in zip(a["episodes"], b["episodes"]) for k in ea["state"])

"""TinyTrain: Fisher potential, multi-objective criterion and budgeted selection, exact channel-sparse
update, measured backward costs (and the shared backward_step_costs on a hand example), equal lr tuning on
held-out support images, the compress stage, and a tiny prepare -> train -> compress -> evaluate through the spec."""
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
    with pytest.raises(ConfigError, match="val_shots"):
        P.Config(shots=2, val_shots=2)
    with pytest.raises(ConfigError, match="ft_lrs"):
        P.Config(ft_lrs=(1e-2, 1e-3))
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
    assert spec.compress is not None  # the sparse update is the saving; magnitude pruning is the compress stage
    rows, logged = {}, []
    for variant in spec.variants:
        model = spec.train(cfg, data, variant, 0, lambda step, **m: logged.append(m))
        rows[variant] = spec.evaluate(cfg, model, data)
        assert all(math.isfinite(v) for v in rows[variant].values())
        assert model["tuning"]["tuned_lr"] in cfg.ft_lrs and model["tuning"]["grid_edge"] in (0.0, 1.0)
        levels = spec.compress(cfg, model, data, variant, 0)
        assert sorted(levels) == ["0.50", "0.80"]
        pruned = spec.evaluate(cfg, levels["0.50"], data)
        assert pruned["bwd_flops"] == rows[variant]["bwd_flops"] and 0 <= pruned["acc"] <= 100
    assert {"acc", "acc_fmnist5", "acc_mnist", "bwd_bytes", "bwd_flops", "grid_edge", "log10_lr"} <= set(rows["tinytrain"])
    assert rows["last_layer"]["bwd_flops"] < rows["tinytrain"]["bwd_flops"] < rows["full_ft"]["bwd_flops"]
    assert rows["tinytrain"]["bwd_bytes"] < rows["full_ft"]["bwd_bytes"]
    assert any("train/loss" in m for m in logged)
    comps = spec.comparisons(cfg)
    assert [c.role for c in comps] == ["headline", "secondary", "secondary", "control", "secondary", "fact", "fact"]
    for c in comps:
        assert c.metric in rows["tinytrain"] and c.method in spec.variants and c.baseline in spec.variants
        edges = {g.variant for g in c.gates if g.kind == "grid_edge"}
        assert c.role == "fact" or {c.method, c.baseline} <= edges  # lr inside the grid, both arms (directional)
    head = comps[0]
    assert head.refuted_if and edges_of(head) == {"tinytrain", "full_ft", "last_layer"}
    mech = head.mechanism_gates
    assert (mech[0].comparison.method, mech[0].comparison.baseline) == ("full_ft", "last_layer")  # full FT > last layer
    assert mech[1].variant == "tinytrain" and mech[1].column == "dense/layers_updated" and "layers_updated" in rows["tinytrain"]
    a = spec.train(cfg, data, "tinytrain", 1, None)
    b = spec.train(cfg, data, "tinytrain", 1, None)
    assert all(torch.equal(ea["state"][k], eb["state"][k]) for ea, eb in zip(a["episodes"], b["episodes"]) for k in ea["state"])


def edges_of(comp):
    return {g.variant for g in comp.gates if g.kind == "grid_edge"}


def test_split_support_holds_out_the_last_val_shots_of_every_class():
    y = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2])
    fit, val = P.split_support(y, 1)
    assert fit.tolist() == [0, 1, 3, 4, 6, 7] and val.tolist() == [2, 5, 8]
    fit, val = P.split_support(torch.tensor([1, 0, 1, 0, 1, 0]), 2)  # classes interleaved
    assert sorted(val.tolist()) == [2, 3, 4, 5] and sorted(fit.tolist()) == [0, 1]


def test_held_out_score_fits_on_the_rest_and_scores_the_held_out_images(monkeypatch):
    """The lr score of one episode: the variant's procedure on the fit part, accuracy on the held-out part."""
    cfg = P.Config(channels=(4, 4, 8, 8), shots=3, val_shots=1, ft_steps=2, ft_lrs=(1e-4, 1e-3, 1e-2))
    backbone = _tiny_state(n_classes=3)
    xs, y = P.to_float(torch.randint(0, 255, (9, 28, 28), dtype=torch.uint8)), torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2])
    calls, real = [], P.finetune
    monkeypatch.setattr(P, "finetune", lambda start, plan, a, b, lr, steps, *r, **k: calls.append((lr, a.shape[0])) or real(start, plan, a, b, lr, steps))
    score = P.held_out_score(cfg, backbone, "full_ft", xs, y, 3)
    fit, val = P.split_support(y, 1)
    start = P.prototype_head(backbone, xs[fit], y[fit], 3)
    plan = P.plan_update(cfg, "full_ft", start, xs[fit], y[fit])
    for lr in cfg.ft_lrs:
        pred = P.logits(real(start, plan, xs[fit], y[fit], lr, 2), xs[val]).argmax(1)
        assert score(lr) == pytest.approx(100.0 * sum(int(p == t) for p, t in zip(pred, y[val])) / 3)
    assert calls == [(lr, 6) for lr in cfg.ft_lrs]


def test_train_picks_one_lr_per_seed_by_the_mean_held_out_accuracy(monkeypatch):
    """tune() over the grid with the episodes' mean held-out accuracy; the chosen lr refits every episode on all shots."""
    fake = {1e-4: [30.0, 50.0], 1e-3: [60.0, 40.0], 1e-2: [70.0, 20.0]}  # per episode; means 40, 50, 45 -> 1e-3
    count = iter(range(100))
    monkeypatch.setattr(P, "held_out_score", lambda *a: (lambda k: (lambda lr: fake[lr][k]))(next(count)))
    cfg = P.Config(channels=(4, 4, 8, 8), pool_per_class=6, query_per_class=4, episodes=1, ft_steps=1, ft_lrs=(1e-4, 1e-3, 1e-2))
    g = torch.Generator().manual_seed(0)
    d = lambda n_way: {"x_pool": torch.randint(0, 255, (6 * n_way, 28, 28), dtype=torch.uint8, generator=g),  # noqa: E731
                       "y_pool": torch.arange(n_way).repeat(6), "x_query": torch.randint(0, 255, (4 * n_way, 28, 28), dtype=torch.uint8, generator=g),
                       "y_query": torch.arange(n_way).repeat(4), "n_way": n_way}
    data = {"backbone": _tiny_state(n_classes=5), "fmnist5": d(5), "mnist": d(10)}
    model = P.train(cfg, data, "last_layer", 0, None)
    assert model["tuning"]["tuned_lr"] == 1e-3 and model["tuning"]["grid_edge"] == 0.0
    assert len(model["episodes"]) == 2 and all("state" in ep for ep in model["episodes"])


def test_backward_step_costs_on_a_hand_example():
    """y = x W^T (W trainable, x not): the backward keeps x only (for dW = g^T x) and costs 2*B*in*out FLOPs;
    with x trainable too, dx adds another 2*B*in*out and W is then saved - but W is a weight (excluded)."""
    from paperflow.measure import backward_step_costs

    w, x = torch.randn(3, 4, requires_grad=True), torch.randn(5, 4)
    m = backward_step_costs(lambda: (x @ w.t()).sum(), weights=[w])
    assert m == {"bwd_flops": 2 * 5 * 4 * 3, "saved_bytes": 5 * 4 * 4}
    x.requires_grad_(True)
    m = backward_step_costs(lambda: (x @ w.t()).sum(), weights=[w])
    assert m["bwd_flops"] == 2 * (2 * 5 * 4 * 3) and m["saved_bytes"] == 5 * 4 * 4


def test_compress_prunes_the_conv_weights_globally_and_keeps_the_classifier():
    cfg = P.Config(channels=(4, 6, 8, 8), sparsities=(0.5, 0.8))
    state = _tiny_state()
    model = {"variant": "full_ft", "seed": 0, "episodes": [{"state": state, "target": "mnist"}]}
    levels = P.compress(cfg, model, None, "full_ft", 0)
    convs = [f"{l}.weight" for l in P.LAYERS]
    total = sum(state[n].numel() for n in convs)
    for level, m in levels.items():
        pruned = m["episodes"][0]["state"]
        assert sum(int((pruned[n] == 0).sum()) for n in convs) == int(total * float(level))  # one global threshold
        kept = torch.cat([state[n][pruned[n] != 0].abs() for n in convs])
        gone = torch.cat([state[n][pruned[n] == 0].abs() for n in convs])
        assert kept.min() >= gone.max()
        for n in state:
            if n not in convs:
                assert torch.equal(pruned[n], state[n]), n  # biases and the classifier stay dense

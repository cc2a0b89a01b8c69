"""Eureka-moments (ICML 2024): NormSoftmax on hand-computed rows, the two-step task's labels and layout,
the intermediate-task metrics, and a tiny prepare -> train -> evaluate run through the spec on synthetic images."""
from __future__ import annotations

import math

import pytest
import torch

from paperflow.papers import eureka as eu
from paperflow.spec import ConfigError

# ---------------------------------------------------------------------------------------------- NormSoftmax


def test_norm_softmax_small_spread_uses_variance_as_temperature():
    a = torch.tensor([[0.0, 1.0, 2.0]])  # unscaled logits; variance = 2/3 < sqrt(16) = 4
    got = eu.norm_softmax(a, d_head=16)
    e = torch.exp(torch.tensor([0.0, 1.5, 3.0]))  # a / (2/3)
    torch.testing.assert_close(got, (e / e.sum())[None])
    assert got.sum().item() == pytest.approx(1.0)


def test_norm_softmax_std_variant_uses_the_standard_deviation():
    a = torch.tensor([[0.0, 1.0, 2.0]])  # unbiased std = 1 < 4
    torch.testing.assert_close(eu.norm_softmax(a, 16, "std"), torch.softmax(a, -1))
    with pytest.raises(ValueError):
        eu.norm_softmax(a, 16, "bogus")


def test_norm_softmax_equals_plain_softmax_when_spread_is_large():
    a = torch.tensor([[0.0, 10.0, 20.0], [5.0, -5.0, 0.0]])  # variances 66.7 and 16.7 >= sqrt(16) = 4
    torch.testing.assert_close(eu.norm_softmax(a, 16), eu.plain_softmax(a, 16))
    b = torch.tensor([[0.0, 10.0, 20.0]])  # std 10 >= 4
    torch.testing.assert_close(eu.norm_softmax(b, 16, "std"), eu.plain_softmax(b, 16))
    e = torch.exp(torch.tensor([0.0, 2.5, 5.0]))
    torch.testing.assert_close(eu.plain_softmax(a, 16)[0], e / e.sum())  # softmax(a / sqrt(d))


def test_norm_softmax_sharpens_near_uniform_attention_at_small_init():
    torch.manual_seed(0)
    attn = eu.EurekaAttention(32, 4, "softmax")
    eu.init_weights(attn, 0.02, torch.Generator().manual_seed(0))
    x = torch.nn.functional.layer_norm(torch.randn(2, 5, 32), (32,))
    ent = {}
    for mode in eu.MODES:
        attn.mode, attn.keep_attn = mode, True
        with torch.no_grad():
            attn(x)
        p = attn.last_attn
        ent[mode] = float(-(p * p.clamp_min(1e-12).log()).sum(-1).mean())
    assert ent["softmax"] == pytest.approx(math.log(5), abs=1e-3)  # plain softmax ~uniform at std 0.02
    assert ent["normsoftmax"] < ent["softmax"] - 0.1  # NormSoftmax is not
    assert ent["normsoftmax_std"] < ent["softmax"] - 0.1


# ---------------------------------------------------------------------------------------------- the task


def test_task_labels_follow_the_indicator_rule():
    d_tl, d_br = torch.tensor([1, 1, 2, 2]), torch.tensor([1, 2, 2, 1])
    y_tr, y_bl = torch.tensor([3, 3, 0, 9]), torch.tensor([7, 7, 5, 4])
    y, y_alt, same = eu.task_labels(d_tl, d_br, y_tr, y_bl)
    assert y.tolist() == [3, 7, 0, 4]  # equal digits -> top-right, else bottom-left
    assert y_alt.tolist() == [7, 3, 5, 9]
    assert same.tolist() == [True, False, True, False]


def test_compose_places_the_four_images():
    imgs = [torch.full((1, 2, 2), v, dtype=torch.uint8) for v in (1, 2, 3, 4)]
    x = eu.compose(*imgs)
    assert x.shape == (1, 4, 4)
    assert x[0].tolist() == [[1, 1, 2, 2], [1, 1, 2, 2], [3, 3, 4, 4], [3, 3, 4, 4]]


def test_draw_labels_match_the_drawn_images():
    ind_x = torch.stack([torch.full((2, 2), 10 + i, dtype=torch.uint8) for i in range(4)])
    fash_x = torch.stack([torch.full((2, 2), 100 + i, dtype=torch.uint8) for i in range(6)])
    pools = {"ind_x": ind_x, "ind_y": torch.tensor([1, 2, 1, 2]), "fash_x": fash_x, "fash_y": torch.arange(6)}
    b = eu.draw(pools, 64, torch.Generator().manual_seed(0))
    d_tl = pools["ind_y"][b["x"][:, 0, 0].long() - 10]
    d_br = pools["ind_y"][b["x"][:, 3, 3].long() - 10]
    y_tr, y_bl = b["x"][:, 0, 3].long() - 100, b["x"][:, 3, 0].long() - 100
    assert torch.equal(b["same"], d_tl == d_br)
    assert torch.equal(b["y"], torch.where(d_tl == d_br, y_tr, y_bl))
    assert 0 < int(b["same"].sum()) < 64


def test_selection_accuracy_and_steps_to_learn():
    y, y_alt = torch.tensor([0, 1, 2, 3, 4]), torch.tensor([5, 6, 7, 8, 4])
    pred = torch.tensor([0, 1, 7, 9, 4])  # 2 hits, 1 distractor, 1 other, last row has equal targets
    assert eu.selection_accuracy(pred, y, y_alt) == pytest.approx(2 / 3)
    assert eu.steps_to_learn([[100, 0.5, 0], [200, 0.85, 0], [300, 0.9, 0]], 0.8, 1000) == (200.0, 1.0)
    assert eu.steps_to_learn([[100, 0.5, 0], [200, 0.6, 0]], 0.8, 1000) == (1000.0, 0.0)


def test_plateau_fraction_counts_classified_but_unselected_evaluations():
    curve = [[100, 0.50, 20.0],  # targets not yet classified: not the plateau
             [200, 0.52, 45.0], [300, 0.55, 48.0],  # hedging between the two targets: plateau
             [400, 0.65, 60.0], [500, 0.95, 85.0]]  # leaving it / solved
    assert eu.plateau_fraction(curve, 30.0, 0.6) == pytest.approx(2 / 5)
    assert eu.plateau_fraction(curve, 30.0, 0.7) == pytest.approx(3 / 5)
    assert eu.plateau_fraction([], 30.0, 0.6) == 0.0


# ---------------------------------------------------------------------------------------------- spec run


def _synthetic_data(cfg):
    g = torch.Generator().manual_seed(0)
    mx = torch.randint(0, 256, (40, 28, 28), generator=g, dtype=torch.uint8)
    my = torch.arange(40) % 10
    fx = torch.randint(0, 256, (30, 28, 28), generator=g, dtype=torch.uint8)
    fy = torch.arange(30) % 10
    return eu.build_data(cfg, mx, my, fx, fy, fx[:20], fy[:20])


def test_tiny_spec_run_and_determinism():
    cfg = eu.Config(cell=7, patch=7, n_fashion_train=30, n_test=16, n_curve=8, d_model=16, n_layer=1, n_head=2, grad_steps=2,
                    steps=4, batch_size=8, warmup=1, eval_every=2, eval_batch=8)
    data = _synthetic_data(cfg)
    assert data["test"]["x"].shape == (16, 14, 14) and data["test"]["x"].dtype == torch.uint8
    assert set(data["train"]["ind_y"].tolist()) <= {1, 2}
    logged = []
    for variant in eu.VARIANTS:
        model = eu.train(cfg, data, variant, 0, lambda step, **kw: logged.append(kw))
        assert [c[0] for c in model["curve"]] == [2.0, 4.0]
        m = eu.evaluate(cfg, model, data)
        assert set(m) >= {"acc", "sel_acc", "steps_to_learn", "learned", "plateau_frac"}
        assert 0 <= m["acc"] <= 100 and m["learned"] in (0.0, 1.0) and 0 <= m["plateau_frac"] <= 1
        assert m["steps_to_learn"] in (2.0, 4.0)
        levels = eu.SPEC.compress(cfg, model, data, variant, 0)
        assert set(levels) == {"0.50", "0.80"}
        for name, sp in (("0.50", 0.5), ("0.80", 0.8)):
            state = levels[name]["state"]
            mats = {k: v for k, v in state.items() if v.dim() >= 2 and k not in ("cls_token", "pos")}
            zeros = sum(int((v == 0).sum()) for v in mats.values())
            assert zeros >= int(sp * sum(v.numel() for v in mats.values()))
            for k in ("cls_token", "pos", "blocks.0.attn.proj.bias"):
                assert torch.equal(state[k], model["state"][k])  # not pruned
            mc = eu.evaluate(cfg, levels[name], data)
            assert mc["steps_to_learn"] == m["steps_to_learn"] and 0 <= mc["acc"] <= 100
    assert any("val/sel_acc" in kw for kw in logged)
    a = eu.train(cfg, data, "normsoftmax", 1, lambda step, **kw: None)
    b = eu.train(cfg, data, "normsoftmax", 1, lambda step, **kw: None)
    for k in a["state"]:
        torch.testing.assert_close(a["state"][k], b["state"][k])
    std = eu.train(eu.Config(**{**cfg.__dict__, "norm_gamma": "std"}), data, "normsoftmax", 1, None)
    assert std["arch"]["mode"] == "normsoftmax_std" and a["arch"]["mode"] == "normsoftmax"
    rows = eu.comparisons(cfg)
    assert [r.role for r in rows].count("headline") == 1 and rows[0].metric == "steps_to_learn"
    assert {g.variant for r in rows for g in r.gates} <= set(eu.VARIANTS)
    with pytest.raises(ValueError):
        eu.train(cfg, data, "bogus", 0, lambda step, **kw: None)


def test_early_qk_gradient_norm_matches_a_hand_computed_first_step():
    """With grad_steps = 1, qk_grad_early / v_grad_early are the norms of the first step's loss gradient w.r.t. the
    W_Q/W_K (resp. W_V) rows of the qkv weights, recomputed here from the same init and batch."""
    cfg = eu.Config(n_fashion_train=30, n_test=16, n_curve=8, d_model=16, n_layer=2, n_head=2, steps=2, grad_steps=1,
                    batch_size=8, warmup=1, eval_every=2, eval_batch=8)
    data = _synthetic_data(cfg)
    model = eu.train(cfg, data, "normsoftmax", 3, None)
    torch.manual_seed(3)
    net = eu.build_model(model["arch"])
    eu.init_weights(net, cfg.init_std, torch.Generator().manual_seed(1000 + 3))
    b = eu.draw(data["train"], cfg.batch_size, torch.Generator().manual_seed(3))
    torch.nn.functional.cross_entropy(net(eu._images(b["x"])), b["y"], label_smoothing=cfg.label_smoothing).backward()
    grads = [blk.attn.qkv.weight.grad for blk in net.blocks]
    qk = math.sqrt(sum(float(g[:32].pow(2).sum()) for g in grads))
    v = math.sqrt(sum(float(g[32:].pow(2).sum()) for g in grads))
    assert model["qk_grad_early"] == pytest.approx(qk, rel=1e-4) and model["v_grad_early"] == pytest.approx(v, rel=1e-4)


@pytest.mark.parametrize("bad", [{"cell": 5}, {"patch": 4}, {"learned_threshold": 0.5}, {"n_curve": 5000},
                                 {"d_model": 30, "n_head": 4}, {"eval_every": 0}, {"norm_gamma": "max"},
                                 {"plateau_sel": 0.5}, {"sparsities": (0.5, 1.0)}, {"grad_steps": 0}])
def test_config_validation(bad):
    with pytest.raises(ConfigError):
        eu.Config(**bad)


def test_row_spread_hand_computed_and_temp_active_counter():
    """temp_active counts the attention rows whose gamma(a) < sqrt(d_h): where NormSoftmax's temperature is below
    softmax's (elsewhere NormSoftmax is plain softmax). Rows [0,1,2]: var 2/3, std 1; [0,10,20]: var 66.7, std 10."""
    a = torch.tensor([[0.0, 1.0, 2.0], [0.0, 10.0, 20.0]])
    torch.testing.assert_close(eu.row_spread(a, "var"), torch.tensor([[2 / 3], [200 / 3]]))
    torch.testing.assert_close(eu.row_spread(a, "std"), torch.tensor([[1.0], [10.0]]))
    attn = eu.EurekaAttention(8, 2, "softmax")  # d_h = 4: cap sqrt(4) = 2
    torch.manual_seed(0)
    x = torch.randn(3, 5, 8)
    for mode in eu.MODES:
        attn.mode, attn.track, attn.track_gamma = mode, [0, 0], "var"
        attn.train()
        with torch.no_grad():
            attn(x)
            q, k, _ = attn.qkv(x).view(3, 5, 3, 2, 4).permute(2, 0, 3, 1, 4)
            expect = int((eu.row_spread(q @ k.transpose(-2, -1), "var") < 2.0).sum())
        assert attn.track == [expect, 3 * 2 * 5]  # the same count whatever the mode (softmax: where the fix would act)
        attn.eval()
        with torch.no_grad():
            attn(x)  # evaluation forwards are not counted
        assert attn.track == [expect, 30]
    attn.track = None
    attn(x)  # no counter: nothing recorded, no error


def test_headline_gates_and_temp_active_logged():
    cfg = eu.Config(cell=7, patch=7, n_fashion_train=30, n_test=16, n_curve=8, d_model=16, n_layer=1, n_head=2, grad_steps=2,
                    steps=4, batch_size=8, warmup=1, eval_every=2, eval_batch=8)
    data = _synthetic_data(cfg)
    m = eu.evaluate(cfg, eu.train(cfg, data, "normsoftmax", 0, None), data)
    assert 0.0 <= m["temp_active"] <= 1.0 and m["n_params"] > 0
    head = [r for r in eu.comparisons(cfg) if r.role == "headline"][0]
    assert [g.kind for g in head.gates] == ["precondition", "mechanism"]
    assert head.mechanism_gates[0].metric == "temp_active" and head.mechanism_gates[0].variant == "normsoftmax"
    assert head.refuted_if

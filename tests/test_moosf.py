"""MOOSF (ICML 2024): the long-tail profile, the strategy losses against their closed forms, CAGrad
(paperflow.mtl) against brute force and its primal property, the best-single selection, and a tiny run."""
from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
import torch

from paperflow import mtl
from paperflow.papers import moosf as mo
from paperflow.spec import ConfigError, Resources

D = torch.float64


# ---------------------------------------------------------------------------------------------- long tail


def test_longtail_counts_match_cifar10_lt_profile():
    # Cao et al. (2019) CIFAR-10-LT at imbalance 100 (5000 images in the head class)
    assert mo.longtail_counts(5000, 10, 100) == [5000, 2997, 1796, 1077, 645, 387, 232, 139, 83, 50]
    c = mo.longtail_counts(2000, 10, 10)
    assert c[0] == 2000 and c[-1] == 200 and all(a >= b for a, b in zip(c, c[1:]))
    assert mo.longtail_counts(100, 10, 1) == [100] * 10


# ---------------------------------------------------------------------------------------------- losses


def _case():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 4, generator=g, dtype=D)
    y = torch.tensor([0, 1, 3, 3, 2, 0])
    counts = torch.tensor([100.0, 30.0, 10.0, 1.0], dtype=D)
    return logits, y, counts


def test_balanced_softmax_closed_form():
    logits, y, n = _case()
    p = n * logits.exp() / (n * logits.exp()).sum(1, keepdim=True)  # Ren et al.: n_j e^{f_j} / sum_k n_k e^{f_k}
    expected = -torch.log(p[torch.arange(6), y]).mean()
    torch.testing.assert_close(mo.strategy_loss("bs", logits, y, n), expected)


def test_reweighted_ce_is_inverse_frequency_weighted_mean():
    logits, y, n = _case()
    w = (1 / n) / (1 / n).sum() * 4
    per = -torch.log_softmax(logits, 1)[torch.arange(6), y]
    expected = (w[y] * per).sum() / w[y].sum()
    torch.testing.assert_close(mo.strategy_loss("rw", logits, y, n), expected)
    torch.testing.assert_close(mo.strategy_loss("ce", logits, y, n), per.mean())
    with pytest.raises(ValueError):
        mo.strategy_loss("la", logits, y, n)  # LA was dropped in contract v3 (module docstring)


# ---------------------------------------------------------------------------------------------- CAGrad


def _G(seed, K=3, P=5):
    return torch.randn(K, P, generator=torch.Generator().manual_seed(seed), dtype=D)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cagrad_weights_minimise_the_dual(seed):
    G = _G(seed)
    A = mtl.gram(G)
    alpha = 0.5
    c = alpha * math.sqrt(A.mean())
    b = np.ones(3) / 3

    def dual(w):
        return w @ A @ b + c * math.sqrt(w @ A @ w)

    w = mtl.cagrad_weights(A, alpha)
    assert w.min() >= -1e-9 and w.sum() == pytest.approx(1.0, abs=1e-6)
    grid = [np.array([i, j, 60 - i - j]) / 60 for i, j in itertools.product(range(61), repeat=2) if i + j <= 60]
    assert dual(w) <= min(dual(p) for p in grid) + 1e-4


@pytest.mark.parametrize("seed", range(6))
def test_exact_face_solver_matches_the_official_slsqp_dual(seed):
    """moosf's exact CAGrad dual solver: never above SLSQP's objective, at the brute-force minimum, and the same
    weights where the minimum is unique (interior and boundary cases, a conflicting pair in odd seeds)."""
    G = _G(seed)
    if seed % 2:
        G[1] = -0.8 * G[0] + 0.3 * G[1]
    A, alpha = mtl.gram(G), 0.5
    c, b = alpha * math.sqrt(A.mean()), np.ones(3) / 3

    def dual(w):
        return w @ A @ b + c * math.sqrt(w @ A @ w)

    w, w_ref = mo.cagrad_weights_exact(A, alpha), mtl.cagrad_weights(A, alpha)
    assert w.min() >= 0 and w.sum() == pytest.approx(1.0)
    assert dual(w) <= dual(w_ref) + 1e-10
    grid = [np.array([i, j, 60 - i - j]) / 60 for i, j in itertools.product(range(61), repeat=2) if i + j <= 60]
    assert dual(w) <= min(dual(p) for p in grid) + 1e-9
    np.testing.assert_allclose(w, w_ref, atol=2e-3)


def test_cagrad_direction_is_the_primal_maximiser():
    # CAGrad: d* = g0 + c ||g0|| g_w / ||g_w|| maximises min_k g_k . d over ||d - g0|| <= c ||g0||
    G = _G(3)
    G[1] = -0.8 * G[0] + 0.3 * G[1]  # strongly conflicting pair
    alpha, K = 0.5, 3
    d = mtl.make_cagrad(alpha=alpha, scale_by_k=False)(G, torch.zeros(K)) * (1 + alpha ** 2)  # undo the rescale
    g0 = G.mean(0)
    r = alpha * float(g0.norm())
    assert float((d - g0).norm()) == pytest.approx(r, rel=1e-4)
    best = float((G @ d).min())
    u = torch.randn(4000, G.shape[1], generator=torch.Generator().manual_seed(1), dtype=D)
    pts = g0 + r * u / u.norm(dim=1, keepdim=True)  # points on the sphere (the max lies on it)
    assert float((pts @ G.T).min(1).values.max()) <= best + 1e-3
    assert best > float((G @ g0).min())  # better worst-case decrease than the plain average


def test_cagrad_scaling_and_registry():
    G = _G(4)
    d = mtl.make_combiner("cagrad", alpha=0.0)(G, torch.zeros(3))
    torch.testing.assert_close(d, G.sum(0), atol=1e-6, rtol=1e-6)  # c = 0: the mean gradient, x K = the sum
    d5 = mtl.make_cagrad(alpha=0.5)(G, torch.zeros(3))
    d5_unscaled = mtl.make_cagrad(alpha=0.5, scale_by_k=False)(G, torch.zeros(3))
    torch.testing.assert_close(d5, 3 * d5_unscaled)
    with pytest.raises(ValueError):
        mtl.make_cagrad(alpha=-1.0)


def test_fusion_monitor_counts_conflicts_and_measures_the_departure_from_the_mean():
    """The mechanism metrics on hand cases: conflict_frac counts steps with a negative pairwise inner product;
    fused_angle is the angle between the combined direction and the mean gradient."""
    mean = mo.FusionMonitor(lambda G, losses: G.sum(0))  # the plain sum: direction = K g0, angle 0
    agree = torch.tensor([[1.0, 0.0], [1.0, 1.0], [2.0, 0.5]], dtype=D)
    clash = torch.tensor([[1.0, 0.0], [-1.0, 2.0], [0.5, 0.5]], dtype=D)  # rows 0, 1: inner product -1
    for G in (agree, clash, agree, agree):
        mean(G, torch.zeros(3))
    st = mean.stats("ir100")
    assert st["conflict_frac_ir100"] == 0.25 and st["fused_angle_ir100"] == pytest.approx(0.0, abs=1e-5)
    tilt = mo.FusionMonitor(lambda G, losses: G[0])  # always the first gradient
    tilt(agree, torch.zeros(3))
    g0 = agree.mean(0)
    expected = math.degrees(math.acos(float(g0[0] / g0.norm())))
    assert tilt.stats("t")["fused_angle_t"] == pytest.approx(expected)
    cag = mo.FusionMonitor(mtl.make_cagrad(alpha=0.5))  # CAGrad tilts at most asin(c) = 30 degrees off g0
    cag(clash, torch.zeros(3))
    assert 0 < cag.stats("t")["fused_angle_t"] <= 30.0 + 1e-6 and cag.stats("t")["conflict_frac_t"] == 1.0


# ---------------------------------------------------------------------------------------------- selection, config


def test_best_single_is_chosen_on_validation():
    rows = [{"variant": v, "seed": s, "dense/acc_ir100": 50.0 + s + i, "dense/val_acc_ir100": val, "dense/val_acc_ir10": val10}
            for s in (0, 1) for i, (v, val, val10) in enumerate([("moosf", 99, 99), ("sum3", 98, 98), ("ce", 70, 80),
                                                                 ("rw", 75, 80), ("bs", 72, 79)])]
    # moosf and sum3 are not strategies; ties: SINGLES order
    assert mo.best_single(rows, "ir100") == "rw" and mo.best_single(rows, "ir10") == "ce"
    out = mo.derive(mo.Config(), rows)
    best = [r for r in out if r["variant"] == "ref|best_single_ir100"]
    rw = {r["seed"]: r for r in rows if r["variant"] == "rw"}
    assert [r["seed"] for r in best] == [0, 1] and all(r["dense/acc_ir100"] == rw[r["seed"]]["dense/acc_ir100"] for r in best)
    assert mo.best_single([r for r in rows if r["variant"] != "bs"], "ir100") is None


def test_config_and_comparisons():
    with pytest.raises(ConfigError, match="groups"):
        mo.Config(groups=(3, 3, 3))
    with pytest.raises(ConfigError, match="n_max"):
        mo.Config(n_max=50, imbalances=(100,))
    with pytest.raises(ConfigError, match="multiple"):
        mo.Config(n_test=105)
    with pytest.raises(ConfigError, match="6000"):
        mo.Config(n_max=5000, n_test=10000)
    cfg = mo.SPEC.make_config({"imbalances": [100, 10]})
    rows = mo.comparisons(cfg)
    assert [r.role for r in rows].count("headline") == 1
    head = rows[0]
    assert (head.method, head.baseline, head.metric) == ("moosf", "ref|best_single_ir100", "acc_ir100") and head.refuted_if
    (gate,) = head.mechanism_gates
    assert (gate.variant, gate.metric, gate.above) == ("moosf", "conflict_frac_ir100", 0.10)
    ablation = [r for r in rows if r.baseline == "sum3"]
    assert len(ablation) == 1 and ablation[0].role == "secondary" and ablation[0].mechanism_gates == (gate,)
    assert sum(r.role == "secondary" for r in rows) <= 4


# ---------------------------------------------------------------------------------------------- end to end


def _resources(tmp_path):
    rng = np.random.default_rng(0)

    def images(labels):
        x = rng.integers(0, 60, (len(labels), 28, 28)).astype(np.uint8)
        for i, y in enumerate(labels):
            x[i, 2 * y : 2 * y + 5, 3:9] = 250
        return x

    ytr, yte = np.repeat(np.arange(10), 60), rng.integers(0, 10, 100)
    np.savez(tmp_path / "f.npz", x_train=images(ytr), y_train=ytr, x_test=images(yte), y_test=yte)
    return Resources(root=str(tmp_path), paths={"fashion_mnist": str(tmp_path / "f.npz")})


def test_end_to_end_through_spec(tmp_path):
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        spec = mo.SPEC
        section = {"n_max": 40, "imbalances": [10, 4], "n_val_per_class": 5, "n_test": 100, "steps": 3,
                   "tune_steps": 2, "lr_grid": [0.01, 0.1], "batch_size": 16, "hidden": [16]}
        cfg = spec.make_config(section)
        data = spec.prepare(cfg, _resources(tmp_path))
        assert data["y_ir10"].bincount(minlength=10).tolist() == mo.longtail_counts(40, 10, 10)
        assert data["y_val"].bincount(minlength=10).tolist() == [5] * 10
        assert data["y_test"].bincount(minlength=10).tolist() == [10] * 10  # balanced, from unused training images
        seen = {tuple(v.flatten().tolist()) for k in ("x_val", "x_ir10", "x_ir4") for v in data[k]}
        assert not any(tuple(v.flatten().tolist()) in seen for v in data["x_test"])
        other = spec.prepare(spec.make_config({**section, "test_seed": 7}), _resources(tmp_path))
        assert torch.equal(other["x_ir10"], data["x_ir10"]) and not torch.equal(other["x_test"], data["x_test"])
        rows = []
        for v in spec.variants:
            model = spec.train(cfg, data, v, 0, None)
            m = spec.evaluate(cfg, model, data)
            assert ("conflict_frac_ir10" in m) == ("fused_angle_ir4" in m) == (v == "moosf") and m["n_min_ir10"] == 4.0
            assert {"acc_few_ir10", "acc_many_ir4", "grid_edge_ir10", "tuned_lr_ir4"} <= set(m)
            row = {"variant": v, "seed": 0, **{f"dense/{k}": x for k, x in m.items()}}
            for level, comp in spec.compress(cfg, model, data, v, 0).items():
                w = comp["states"]["ir10"]["1.weight"]
                assert float((w == 0).float().mean()) >= float(level) - 0.05
                row.update({f"compressed:{level}/{k}": x for k, x in spec.evaluate(cfg, comp, data).items()})
            rows.append(row)
        out = spec.derive(cfg, rows)
        assert sum(r["variant"].startswith("ref|best_single_") for r in out) == 2
        # the ablation is the method's limit: with CAGrad's c = 0 MOOSF trains as sum3 (the equal-weight sum)
        flat = dataclasses.replace(cfg, cagrad_c=0.0)
        a, _ = mo.fit_model(flat, data, "moosf", 10, 1, 0.1, 3, None)
        b, _ = mo.fit_model(flat, data, "sum3", 10, 1, 0.1, 3, None)
        for k in a:
            torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5)
    finally:
        torch.set_num_threads(n)

"""FairGrad (ICML 2024): combiner math (paperflow.mtl), Multi-Fashion+MNIST overlays, Delta-m%, and a tiny
prepare -> train -> compress -> evaluate -> derive run on synthetic images through the spec."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from paperflow import mtl
from paperflow.data.multimnist import build_overlay_set, draw_indices, overlay, split_pool
from paperflow.papers import fairgrad as fg
from paperflow.spec import ConfigError, Resources


def _random_G(K=3, P=40, seed=0):
    return torch.randn(K, P, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# ---------------------------------------------------------------------------------------------- FairGrad


@pytest.mark.parametrize("alpha", [0.5, 1.0, 2.0, 5.0])
def test_fairgrad_weights_solve_fixed_point(alpha):
    A = mtl.gram(_random_G())
    w = mtl.fairgrad_weights(A, alpha)
    assert np.all(w > 0)
    np.testing.assert_allclose(A @ w, w ** (-1.0 / alpha), rtol=1e-6)  # A w = w^(-1/alpha)


def test_fairgrad_orthogonal_equal_norm_gives_analytic_equal_weights():
    c, alpha, K = 4.0, 2.0, 3
    G = math.sqrt(c) * torch.eye(K, 7, dtype=torch.float64)  # A = c I
    w = mtl.fairgrad_weights(mtl.gram(G), alpha)
    np.testing.assert_allclose(w, np.full(K, c ** (-alpha / (alpha + 1))), rtol=1e-6)  # c w = w^(-1/alpha)


def test_fairgrad_combiner_scales_by_k_and_clips():
    G = 1e-2 * _random_G(K=2, P=30)
    combine = mtl.make_fairgrad(alpha=2.0, max_norm=0.0)
    d = combine(G, torch.zeros(2))
    w = mtl.fairgrad_weights(mtl.gram(G), 2.0)
    torch.testing.assert_close(d, 2 * torch.as_tensor(w) @ G)  # x K as the official overwrite_grad
    clipped = mtl.make_fairgrad(alpha=2.0, max_norm=1.0)(G, torch.zeros(2))
    assert float(d.norm()) > 1.0
    assert float(clipped.norm()) == pytest.approx(1.0, rel=1e-5)
    torch.testing.assert_close(clipped / clipped.norm(), d / d.norm())


# ---------------------------------------------------------------------------------------------- MGDA


def test_mgda_two_tasks_closed_form_and_descent():
    g1 = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
    g2 = torch.tensor([-0.5, 2.0, 0.0], dtype=torch.float64)
    G = torch.stack([g1, g2])
    w = mtl.mgda_weights(mtl.gram(G))
    gamma = float((g2 @ g2 - g1 @ g2) / ((g1 - g2) @ (g1 - g2)))  # argmin ||c g1 + (1-c) g2||
    np.testing.assert_allclose(w, [gamma, 1 - gamma], rtol=1e-12)
    d = mtl.make_mgda()(G, torch.zeros(2))
    torch.testing.assert_close(d, 2 * (gamma * g1 + (1 - gamma) * g2))
    assert all(float(d @ g) >= -1e-12 for g in G)  # min-norm point: d . g_k >= ||d||^2 / K >= 0


def test_mgda_two_tasks_edge_case_follows_minnormsolver():
    G = torch.tensor([[1.0, 0.0], [3.0, 0.5]], dtype=torch.float64)  # g1 . g2 >= g1 . g1: g1 is the min
    np.testing.assert_allclose(mtl.mgda_weights(mtl.gram(G)), [0.999, 0.001])


def test_mgda_general_k_matches_brute_force():
    G = _random_G(K=4, P=6, seed=3)
    A = mtl.gram(G)
    w = mtl.mgda_weights(A)
    assert w.min() >= 0 and w.sum() == pytest.approx(1.0)
    grid = [np.array(p) / 40 for p in itertools.product(range(41), repeat=3) if sum(p) <= 40]
    best = min(float(np.r_[p, 1 - p.sum()] @ A @ np.r_[p, 1 - p.sum()]) for p in grid)
    assert float(w @ A @ w) <= best + 1e-3
    d = torch.as_tensor(w) @ G
    assert all(float(d @ g) >= float(d @ d) - 1e-3 for g in G)  # KKT of the min-norm point


# ---------------------------------------------------------------------------------------------- PCGrad, LS


def test_pcgrad_projects_conflicting_gradients():
    g1 = torch.tensor([1.0, 1.0], dtype=torch.float64)
    g2 = torch.tensor([-1.0, 0.5], dtype=torch.float64)
    assert float(g1 @ g2) < 0
    P = mtl.pcgrad_project(torch.stack([g1, g2]), torch.Generator().manual_seed(0))
    assert float(P[0] @ g2) == pytest.approx(0.0, abs=1e-12)  # g1' orthogonal to g2
    assert float(P[1] @ g1) == pytest.approx(0.0, abs=1e-12)  # g2' orthogonal to g1
    torch.testing.assert_close(P[0], g1 - (g1 @ g2) / (g2 @ g2) * g2)
    d = mtl.make_pcgrad(seed=0, max_norm=0.0)(torch.stack([g1, g2]), torch.zeros(2))
    torch.testing.assert_close(d, P.sum(0))


def test_pcgrad_leaves_non_conflicting_gradients():
    G = torch.tensor([[1.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    torch.testing.assert_close(mtl.make_pcgrad(max_norm=0.0)(G, torch.zeros(2)), G.sum(0))


def test_ls_is_sum_and_registry_fails_loudly():
    G = _random_G()
    torch.testing.assert_close(mtl.make_combiner("ls")(G, torch.zeros(3)), G.sum(0))
    with pytest.raises(KeyError, match="fairgrad"):
        mtl.make_combiner("nope")
    with pytest.raises(TypeError):
        mtl.make_combiner("ls", alpha=2.0)


# ---------------------------------------------------------------------------------------------- data


def test_overlay_hand_example():
    a = torch.zeros(1, 28, 28, dtype=torch.uint8)
    b = torch.zeros(1, 28, 28, dtype=torch.uint8)
    a[0, 0, 0], a[0, 10, 12] = 200, 50
    b[0, 2, 4], b[0, 27, 27] = 100, 255  # b lands at +8: (10, 12) and (35, 35)
    out = overlay(a, b, canvas=36, size=None)
    assert out.shape == (1, 36, 36) and out.dtype == torch.uint8
    assert int(out[0, 0, 0]) == 200 and int(out[0, 35, 35]) == 255
    assert int(out[0, 10, 12]) == 100  # max(50, 100)
    assert int(out.sum()) == 200 + 100 + 255
    assert overlay(a, b).shape == (1, 28, 28)


def test_overlay_set_deterministic_and_labels_follow_images():
    xa = torch.arange(5, dtype=torch.uint8).view(5, 1, 1).expand(5, 28, 28).contiguous() * 10
    xb = torch.zeros(7, 28, 28, dtype=torch.uint8)
    ya, yb = torch.arange(5), torch.arange(7)
    s1, s2 = build_overlay_set(xa, ya, xb, yb, 12, seed=3), build_overlay_set(xa, ya, xb, yb, 12, seed=3)
    for k in s1:
        assert torch.equal(s1[k], s2[k])
    assert s1["x"].shape == (12, 28, 28)
    assert torch.equal(s1["x"][:, 0, 0].long(), s1["y_a"] * 10)  # top-left pixel comes from image A
    assert torch.bincount(draw_indices(5, 10, torch.Generator().manual_seed(0)), minlength=5).tolist() == [2] * 5
    tr, te = split_pool(10, 3, seed=0)
    assert sorted(torch.cat([tr, te]).tolist()) == list(range(10)) and len(te) == 3


# ---------------------------------------------------------------------------------------------- Delta-m, config


def test_delta_m_hand_example():
    # task a: 90 vs 100 -> -10 %, task b: 88 vs 80 -> +10 %; higher is better -> Delta = -(1/2)(-10 + 10)
    assert fg.delta_m([90.0, 88.0], [100.0, 80.0], [True, True]) == pytest.approx(0.0)
    assert fg.delta_m([90.0, 80.0], [100.0, 80.0], [True, True]) == pytest.approx(5.0)
    rows = [
        {"variant": "stl_a", "seed": 0, "dense/acc_a": 100.0, "compressed:0.50/acc_a": 50.0},
        {"variant": "stl_b", "seed": 0, "dense/acc_b": 80.0, "compressed:0.50/acc_b": 40.0},
        {"variant": "ls", "seed": 0, "dense/acc_a": 90.0, "dense/acc_b": 80.0,
         "compressed:0.50/acc_a": 50.0, "compressed:0.50/acc_b": 44.0},
        {"variant": "ls", "seed": 1, "dense/acc_a": 90.0, "dense/acc_b": 80.0},  # no STL of seed 1
    ]
    out = fg.derive(fg.Config(), rows)
    assert out[2]["dense/delta_m"] == pytest.approx(5.0)
    assert out[2]["compressed:0.50/delta_m"] == pytest.approx(-5.0)
    assert "dense/delta_m" not in out[3] and "dense/delta_m" not in out[0]
    assert "dense/delta_m" not in rows[2]  # inputs are not mutated


def test_config_validation_and_comparisons():
    with pytest.raises(ConfigError, match="compare_level"):
        fg.Config(compare_level=0.8)
    with pytest.raises(ConfigError, match="lr_grid"):
        fg.Config(lr_grid=(0.0, 1e-3))
    with pytest.raises(ConfigError, match="lr_grid"):
        fg.Config(lr_grid=(1e-2, 1e-3))  # ascending, so that ties go to the smaller lr
    cfg = fg.SPEC.make_config({"sparsities": [0.5, 0.9], "compare_level": 0.9})
    assert cfg.sparsities == (0.5, 0.9)
    rows = fg.comparisons(cfg)
    assert [(r.baseline, r.column, r.role) for r in rows if r.role != "fact"] == [
        (fg.BEST, "dense/delta_m", "headline"), ("ls", "dense/delta_m", "secondary"), ("mgda", "dense/delta_m", "secondary"),
        ("pcgrad", "dense/delta_m", "secondary"), ("ls", "compressed:0.90/delta_m", "control")]
    assert {g.variant for g in rows[0].gates if g.kind == "grid_edge"} == {"fairgrad", fg.BEST}
    assert [(g.variant, g.metric, g.above) for g in rows[0].mechanism_gates] == [("fairgrad", "conflict_frac", fg.CONFLICT_MIN)]
    assert rows[0].refuted_if


def test_conflict_counter_by_hand():
    """Pairwise cosines of hand-made task gradients: a conflicting step, an aligned one; the combiner still runs."""
    from paperflow.mtl_bench import ConflictCounter
    seen = []
    counter = ConflictCounter(lambda G, losses: seen.append(G.clone()) or G.sum(0))
    out = counter(torch.tensor([[1.0, 0.0], [-1.0, 1.0]]), torch.zeros(2))  # cos = -1/sqrt(2), norms 1 and sqrt(2)
    assert torch.equal(out, torch.tensor([0.0, 1.0])) and len(seen) == 1
    counter(torch.tensor([[2.0, 0.0], [1.0, 0.0]]), torch.zeros(2))  # cos = 1, norm ratio 2
    st = counter.stats()
    assert st["conflict_frac"] == 0.5
    assert st["mean_cos"] == pytest.approx((-2 ** -0.5 + 1.0) / 2)
    assert st["grad_norm_ratio"] == pytest.approx((2 ** 0.5 + 2.0) / 2)


def test_best_baseline_is_chosen_on_validation_delta_m():
    # validation Delta-m% vs STL (90, 80): ls (-10%, 0%) -> 5.0; mgda (0%, -5%) -> 2.5; pcgrad (-20%, +10%) -> 5.0
    val = {"stl_a": {"dense/val_acc_a": 90.0}, "stl_b": {"dense/val_acc_b": 80.0},
           "ls": {"dense/val_acc_a": 81.0, "dense/val_acc_b": 80.0}, "mgda": {"dense/val_acc_a": 90.0, "dense/val_acc_b": 76.0},
           "pcgrad": {"dense/val_acc_a": 72.0, "dense/val_acc_b": 88.0}}
    rows = [{"variant": v, "seed": s, "dense/acc_a": 50.0 + s, "dense/acc_b": 60.0, **cols}
            for s in (0, 1) for v, cols in val.items()]
    assert fg.best_baseline(rows) == "mgda"
    out = fg.derive(fg.Config(), rows)
    best = [r for r in out if r["variant"] == fg.BEST]
    assert [r["seed"] for r in best] == [0, 1] and all(r["dense/best_baseline"] == 1.0 for r in best)
    mgda = {r["seed"]: r for r in out if r["variant"] == "mgda"}
    assert all(r["dense/delta_m"] == mgda[r["seed"]]["dense/delta_m"] for r in best)  # test values of mgda, per seed
    rows[4]["dense/val_acc_a"] = 94.5  # pcgrad now (-5%, +10%) -> -2.5: the best
    assert fg.best_baseline(rows) == "pcgrad"
    assert fg.best_baseline([r for r in rows if r["variant"] != "stl_b"]) is None


# ---------------------------------------------------------------------------------------------- end to end


def _synthetic_resources(tmp_path):
    rng = np.random.default_rng(0)

    def images(n, labels):  # class-dependent bright square + noise, so a few steps can learn something
        x = rng.integers(0, 60, (n, 28, 28)).astype(np.uint8)
        for i, y in enumerate(labels):
            x[i, 2 * y : 2 * y + 6, 4:10] = 250
        return x

    yf, yt, ym = rng.integers(0, 10, 300), rng.integers(0, 10, 100), rng.integers(0, 10, 10000)
    np.savez(tmp_path / "fashion.npz", x_train=images(300, yf), y_train=yf, x_test=images(100, yt), y_test=yt)
    np.savez(tmp_path / "mnist.npz", x=images(10000, ym), y=ym)
    return Resources(root=str(tmp_path), paths={"fashion_mnist": str(tmp_path / "fashion.npz"),
                                                "mnist10k": str(tmp_path / "mnist.npz")})


def test_end_to_end_through_spec(tmp_path):
    spec = fg.SPEC
    cfg = spec.make_config({"n_train": 256, "n_test": 128, "mnist_test": 200, "n_val": 64, "fashion_val": 100, "mnist_val": 100,
                            "lr_grid": [1e-3, 3e-3, 1e-2], "tune_steps": 3, "steps": 4, "batch_size": 32,
                            "channels": [4, 8], "hidden": 16, "sparsities": [0.5, 0.9], "compare_level": 0.5})
    data = spec.prepare(cfg, _synthetic_resources(tmp_path))
    assert data["x_train"].shape == (256, 28, 28) and data["x_train"].dtype == torch.uint8
    assert data["x_val"].shape == (cfg.n_val, 28, 28)
    for variant, rec in data["tuning"].items():  # every variant tuned on the same grid, best validation score kept
        scores = [rec[f"val_score@{i}"] for i in range(len(cfg.lr_grid))]
        assert rec["tuned_lr"] == cfg.lr_grid[int(rec["tuned_lr_index"])]
        assert scores[int(rec["tuned_lr_index"])] == max(scores) and scores.index(max(scores)) == rec["tuned_lr_index"]
        assert rec["grid_edge"] == (1.0 if rec["tuned_lr_index"] in (0, len(cfg.lr_grid) - 1) else 0.0)
    rows, logged = [], []
    for variant in spec.variants:
        torch.manual_seed(0)
        model = spec.train(cfg, data, variant, 0, lambda step, **m: logged.append(m))
        row = {"variant": variant, "seed": 0, **{f"dense/{k}": v for k, v in spec.evaluate(cfg, model, data).items()}}
        for level, comp in spec.compress(cfg, model, data, variant, 0).items():
            trunk = {k: v for k, v in comp["state"].items() if k.startswith("trunk.") and v.dim() >= 2}
            assert sum(int((v == 0).sum()) for v in trunk.values()) >= float(level) * sum(v.numel() for v in trunk.values()) - 1
            assert torch.equal(comp["state"]["heads.0.weight"], model["state"]["heads.0.weight"])
            row.update({f"compressed:{level}/{k}": v for k, v in spec.evaluate(cfg, comp, data).items()})
        rows.append(row)
    assert set(rows[0]) >= {"dense/acc_a", "dense/acc_b", "compressed:0.90/acc_b"}
    assert "dense/acc_b" not in rows[spec.variants.index("stl_a")]
    assert rows[0]["dense/tuned_lr"] == data["tuning"][spec.variants[0]]["tuned_lr"]
    assert any("train/grad_norm_shared" in m for m in logged)
    out = spec.derive(cfg, rows)
    assert sum(r["variant"] == fg.BEST for r in out) == 1
    for r in out:
        if r["variant"] in fg.MTL_VARIANTS:
            assert all(math.isfinite(r[f"{s}/delta_m"]) for s in ("dense", "compressed:0.50", "compressed:0.90"))
    # bit-identical per seed
    torch.manual_seed(0)
    again = spec.train(cfg, data, "pcgrad", 0, lambda step, **m: None)
    torch.manual_seed(0)
    first = spec.train(cfg, data, "pcgrad", 0, lambda step, **m: None)
    assert all(torch.equal(again["state"][k], first["state"][k]) for k in first["state"])

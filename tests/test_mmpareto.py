"""MMPareto (ICML 2024): the agree/conflict rule, the MGDA direction and the magnitude step on hand 2-vector
cases, the combiner's encoder layout, the two views, and a tiny run through the spec."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from paperflow.papers import mmpareto as mp
from paperflow.spec import ConfigError, Resources

D = torch.float64


def t(*v):
    return torch.tensor(v, dtype=D)


def test_agreeing_gradients_are_summed_then_scaled_by_gamma():
    gm, gu = t(1.0, 0.0), t(1.0, 1.0)  # cos > 0
    a_mm, a_u, cos = mp.pair_weights(gm, gu, "mmpareto")
    assert (a_mm, a_u) == (0.5, 0.5) and cos == pytest.approx(1 / math.sqrt(2))
    new, _ = mp.integrate(gm, gu, [2], "mmpareto", gamma=1.5)
    torch.testing.assert_close(new, 1.5 * (gm + gu))  # 2 * 0.5 * (gm + gu) has the plain-sum norm: only gamma


def test_conflicting_gradients_take_the_mgda_direction():
    gm, gu = t(1.0, 0.0), t(-0.5, 2.0)  # cos < 0
    c = float((gu @ gu - gm @ gu) / ((gm - gu) @ (gm - gu)))  # argmin_c ||c gm + (1 - c) gu||
    a_mm, a_u, cos = mp.pair_weights(gm, gu, "mmpareto")
    assert cos < 0 and a_mm == pytest.approx(c) and a_u == pytest.approx(1 - c)
    d = 2 * (c * gm + (1 - c) * gu)
    new, _ = mp.integrate(gm, gu, [2], "pareto", gamma=1.5)  # conventional Pareto: no magnitude step
    torch.testing.assert_close(new, d)
    assert float(new @ gm) >= 0 and float(new @ gu) >= 0  # a common descent direction
    assert float(new @ gm) == pytest.approx(float(new @ gu))  # interior min-norm point: equal inner products
    out, _ = mp.integrate(gm, gu, [2], "mmpareto", gamma=1.5)
    s = float((gm + gu).norm())
    assert s > float(d.norm())  # the plain-sum norm is larger here, so the magnitude is raised to it
    torch.testing.assert_close(out, 1.5 * s / d.norm() * d)
    assert float(out @ gm) > 0 and float(out @ gu) > 0  # same direction as the MGDA one


def test_cosine_zero_goes_to_mgda_as_in_the_official_code():
    gm, gu = t(2.0, 0.0), t(0.0, 1.0)  # orthogonal: min-norm weights proportional to 1 / ||g||^2
    a_mm, a_u, cos = mp.pair_weights(gm, gu, "mmpareto")
    assert cos == 0.0 and a_mm == pytest.approx(1 / 5) and a_u == pytest.approx(4 / 5)
    assert mp.pair_weights(gm, gu, "sum")[:2] == (0.5, 0.5)


def test_magnitude_step_is_per_tensor():
    # two tensors of sizes 2 and 1; conflict overall, so MGDA weights; each chunk rescaled on its own
    gm, gu = t(1.0, 0.0, 0.1), t(-0.5, 2.0, 3.0)
    assert float(gm @ gu) < 0
    a_mm, a_u, _ = mp.pair_weights(gm, gu, "mmpareto")
    d = 2 * (a_mm * gm + a_u * gu)
    out, _ = mp.integrate(gm, gu, [2, 1], "mmpareto", gamma=1.0)
    for sl in (slice(0, 2), slice(2, 3)):
        s, n = float((gm[sl] + gu[sl]).norm()), float(d[sl].norm())
        torch.testing.assert_close(out[sl], d[sl] * max(1.0, s / n))


def test_combiner_splits_encoders_and_counts_conflicts():
    torch.manual_seed(0)
    p1, p2 = [3, 2], [4]
    G = torch.randn(3, 9, dtype=D)
    G[1, 5:] = 0  # g_1 lives on encoder 1 only
    G[2, :5] = 0  # g_2 on encoder 2 only
    G[2, 5:] = -G[0, 5:]  # encoder 2: exact conflict (cos = -1)
    comb = mp.MMParetoCombiner(p1, p2, "mmpareto", gamma=1.5)
    out = comb(G, torch.zeros(3))
    e1, _ = mp.integrate(G[0, :5], G[1, :5], p1, "mmpareto", 1.5)
    e2, _ = mp.integrate(G[0, 5:], G[2, 5:], p2, "mmpareto", 1.5)
    torch.testing.assert_close(out, torch.cat([e1, e2]))
    assert comb.conflicts[1] == 1 and comb.steps == 1
    # the two-row layout (L_mm, L_1 + L_2) used in training gives the same update: g_1 + g_2 splits by encoder
    comb2 = mp.MMParetoCombiner(p1, p2, "mmpareto", gamma=1.5)
    torch.testing.assert_close(comb2(torch.stack([G[0], G[1] + G[2]]), torch.zeros(2)), out)
    assert comb2.conflicts == comb.conflicts


def test_uniform_gamma_is_mmpareto_without_its_pareto_step():
    # agreeing gradients (cos > 0): MMPareto is exactly the uniform sum scaled by gamma, i.e. uniform_gamma
    gm, gu = t(1.0, 0.0, 0.3), t(1.0, 1.0, -0.2)
    assert float(gm @ gu) > 0
    for sizes in ([3], [2, 1]):
        mmp, _ = mp.integrate(gm, gu, sizes, "mmpareto", gamma=1.5)
        ug, _ = mp.integrate(gm, gu, sizes, "sum_gamma", gamma=1.5)
        torch.testing.assert_close(mmp, ug)
        torch.testing.assert_close(ug, 1.5 * (gm + gu))
    # gamma = 1: uniform_gamma is the plain uniform sum
    torch.testing.assert_close(mp.integrate(gm, gu, [3], "sum_gamma", gamma=1.0)[0], mp.integrate(gm, gu, [3], "sum", 1.5)[0])
    # conflicting gradients: uniform_gamma keeps the summed direction, MMPareto takes the MGDA one
    gm, gu = t(1.0, 0.0), t(-2.0, 1.0)
    ug, cos = mp.integrate(gm, gu, [2], "sum_gamma", gamma=1.5)
    mmp, _ = mp.integrate(gm, gu, [2], "mmpareto", gamma=1.5)
    torch.testing.assert_close(ug, t(-1.5, 1.5))
    assert cos < 0 and float(ug @ gm) < 0  # the scaled sum increases L_mm to first order
    assert float(mmp @ gm) > 0 and float(mmp @ gu) > 0  # the MGDA direction (0.1, 0.3) decreases both


def test_conflict_fraction_counts_the_mgda_branch_steps():
    """conflict_frac_m2 (the mechanism gate's metric) on a hand sequence: 2 of 4 steps conflict on encoder 2."""
    comb = mp.MMParetoCombiner([2], [2], "mmpareto", gamma=1.5)
    for sign in (1.0, -1.0, 1.0, -1.0):
        G = torch.zeros(3, 4, dtype=D)
        G[0] = t(1.0, 0.5, 1.0, 0.0)
        G[1, :2] = t(1.0, 1.0)  # encoder 1 always agrees
        G[2, 2:] = t(sign, 0.3)  # encoder 2: cos = sign / |(1, 0.3)|
        comb(G, torch.zeros(3))
    assert comb.steps == 4 and comb.conflicts == [0, 2]
    assert comb.cos_sum[1] == pytest.approx(0.0)


def test_views_are_fixed_per_seed_and_use_the_top_rows():
    cfg = mp.Config()
    x = torch.randint(0, 256, (5, 28, 28), dtype=torch.uint8)
    m1, m2 = mp.make_views(x, cfg, seed=3)
    assert m1.shape == (5, 14 * 28) and m2.shape == (5, 49)
    z = (x.float() / 255 - mp.FASHION_MEAN) / mp.FASHION_STD
    torch.testing.assert_close(m1, z[:, :14].reshape(5, -1))
    assert torch.equal(m2, mp.make_views(x, cfg, seed=3)[1]) and not torch.equal(m2, mp.make_views(x, cfg, seed=4)[1])


def test_config_and_comparisons():
    with pytest.raises(ConfigError, match="compare_level"):
        mp.Config(compare_level=0.7)
    with pytest.raises(ConfigError, match="lr_grid"):
        mp.Config(lr_grid=(0.1, 0.01))
    cfg = mp.SPEC.make_config({"sparsities": [0.5, 0.8]})
    rows = mp.comparisons(cfg)
    assert [r.role for r in rows].count("headline") == 1
    head = rows[0]
    assert (head.method, head.baseline, head.metric) == ("mmpareto", "uniform", "acc_mm")
    (gate,) = head.mechanism_gates
    assert (gate.variant, gate.metric, gate.above) == ("mmpareto", "conflict_frac_m2", 0.10) and head.refuted_if
    ablation = [r for r in rows if r.baseline == "uniform_gamma"]
    assert len(ablation) == 1 and ablation[0].role == "secondary" and ablation[0].mechanism_gates == (gate,)


def _resources(tmp_path):
    rng = np.random.default_rng(0)

    def images(labels):
        x = rng.integers(0, 60, (len(labels), 28, 28)).astype(np.uint8)
        for i, y in enumerate(labels):
            x[i, y : y + 4, 2 * y : 2 * y + 6] = 250
        return x

    ytr, yte = rng.integers(0, 10, 400), rng.integers(0, 10, 200)
    np.savez(tmp_path / "f.npz", x_train=images(ytr), y_train=ytr, x_test=images(yte), y_test=yte)
    return Resources(root=str(tmp_path), paths={"fashion_mnist": str(tmp_path / "f.npz")})


@pytest.fixture
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: threads only add contention on a shared machine
    yield
    torch.set_num_threads(n)


def test_end_to_end_through_spec(tmp_path, one_thread):
    spec = mp.SPEC
    cfg = spec.make_config({"n_train": 200, "n_val": 60, "n_test": 60, "steps": 4, "tune_steps": 2, "batch_size": 16,
                            "lr_grid": [0.01, 0.03], "hidden": 16, "feat": 8, "probe_n": 60, "probe_steps": 3})
    data = spec.prepare(cfg, _resources(tmp_path))
    assert set(data["tuning"]) == set(spec.variants)
    logged = []
    for v in spec.variants:
        model = spec.train(cfg, data, v, 0, lambda step, **m: logged.append(m))
        m = spec.evaluate(cfg, model, data)
        assert 0 <= m["acc_mm"] <= 100 and "probe_acc_m2" in m and m["tuned_lr"] in cfg.lr_grid
        assert ("acc_head2" in m) == (v != "mm_only") and ("conflict_frac_m2" in m) == (v in mp.MODES)
        for level, comp in spec.compress(cfg, model, data, v, 0).items():
            w = comp["state"]["enc1.0.weight"]
            assert float((w == 0).float().mean()) >= float(level) - 0.05
            assert torch.equal(comp["state"]["head.weight"], model["state"]["head.weight"])
            mc = spec.evaluate(cfg, comp, data)
            assert "acc_mm" in mc and "probe_acc_m2" not in mc  # probes on dense models only
    assert any("train/grad_norm_shared" in m for m in logged)
    a = spec.train(cfg, data, "mmpareto", 1, None)["state"]
    b = spec.train(cfg, data, "mmpareto", 1, None)["state"]
    assert all(torch.equal(a[k], b[k]) for k in a)

"""dp_public: the Gaussian mechanism's calibration (exact delta, classic bound, linear in the sensitivity), the weighted
estimators' unbiasedness and MSE against their closed forms, optimality of the weights; semi-DP GD (clipping, the
composed noise, DP-GD as its beta = n_priv/n special case, the mechanism measure on a hand case); the spec/Config."""
from __future__ import annotations

import math

import numpy as np
import pytest

from paperflow.papers import dp_public as dp
from paperflow.spec import ConfigError


def test_analytic_gaussian_calibration_hand_case():
    s = dp.gaussian_sigma(1.0, 1e-5, 1.0)
    assert dp.gaussian_delta(s, 1.0, 1.0) == pytest.approx(1e-5, rel=1e-6)  # exactly at the target delta
    assert dp.gaussian_delta(0.99 * s, 1.0, 1.0) > 1e-5  # and the smallest such sigma
    classic = math.sqrt(2 * math.log(1.25 / 1e-5)) / 0.5  # Dwork-Roth (valid for eps < 1) at eps = 0.5
    assert dp.gaussian_sigma(0.5, 1e-5) < classic
    assert dp.gaussian_sigma(2.0, 1e-5, 2.0) == pytest.approx(2 * dp.gaussian_sigma(2.0, 1e-5, 1.0), rel=1e-9)
    # Balle & Wang's Theorem 8 by hand at sigma = sens = eps = 1: Phi(1/2 - 1) - e Phi(-1/2 - 1)
    from scipy.stats import norm
    assert dp.gaussian_delta(1.0, 1.0, 1.0) == pytest.approx(norm.cdf(-0.5) - math.e * norm.cdf(-1.5))


def test_central_weights_unbiased_sensitivity_and_optimal():
    n_pub, n_priv, d, c, V = 50, 950, 10, 40.0, 1.0
    alpha, beta, sd = dp.central_weights(n_pub, n_priv, d, c, V)
    assert alpha * n_pub + beta * n_priv == pytest.approx(1.0)  # E estimate = mu
    assert sd == pytest.approx(2 * beta * c)  # replacing one private x (||x|| <= 1) moves the sum by <= 2 beta
    mse = lambda b: V * (((1 - b * n_priv) / n_pub) ** 2 * n_pub + b ** 2 * n_priv) + 4 * d * b ** 2 * c ** 2
    grid = np.linspace(0, 1 / n_priv, 20001)
    assert mse(beta) <= min(mse(b) for b in grid) + 1e-15
    assert dp.central_weights(n_pub, n_priv, d, 0.0, V)[1] == pytest.approx(1 / (n_pub + n_priv))  # no privacy: plain mean


def test_local_weight_is_inverse_variance_and_beats_both_bounds():
    for eps in (0.5, 2.0, 8.0):
        s1 = dp.gaussian_sigma(eps, 1e-5)
        for model in dp.VARIANTS:
            b = dp.mse_bounds(model, 40, 1960, 10, s1, 1.0)
            assert b["weighted"] < min(b["public_only"], b["all_private"])
    w = dp.local_weight(10, 90, 1, 3.0, 1.0)  # v_pub = 0.1, v_priv = 10 / 90
    assert w == pytest.approx((10 / 90) / (0.1 + 10 / 90))


def test_estimators_unbiased_and_mse_matches_closed_form():
    cfg = dp.Config(dim=3, n=200, reps=4000, mean_norm=0.0)  # mean 0: x uniform on the unit sphere, E||x||^2 = 1 = V
    rng = np.random.default_rng(0)
    mu, x = dp.sample(cfg, rng)
    assert np.abs(np.linalg.norm(x, axis=2) - 1).max() < 1e-12
    for model, eps in (("local", 4.0), ("central", 0.2)):
        est = dp.estimates(cfg, model, x, 20, eps, rng)
        bound = dp.mse_bounds(model, 20, 180, 3, dp.gaussian_sigma(eps, cfg.dp_delta), 1.0)
        for e, v in est.items():
            err = v - mu
            assert np.abs(err.mean(0)).max() < 4 * err.std(0).max() / math.sqrt(cfg.reps)  # unbiased
            assert np.mean(np.sum(err ** 2, 1)) == pytest.approx(bound[e], rel=0.08)  # variance exactly V here


def test_clipping_and_composed_noise():
    X = np.array([[1.0, 0.0], [0.0, 2.0]])
    y = np.array([0.0, 1.0])
    theta = np.array([3.0, 1.0])  # residuals 3, 1: gradients 2 x r = (6, 0) and (0, 4)
    np.testing.assert_allclose(dp.clipped_grad_sum(X, y, theta, 1.0), [1.0, 1.0])
    np.testing.assert_allclose(dp.clipped_grad_sum(X, y, theta, 5.0), [5.0, 4.0])  # the second is not clipped
    cfg = dp.Config(reg_steps=16, reg_eps=2.0)
    s = dp.reg_noise_multiplier(cfg)
    assert s == pytest.approx(4 * dp.gaussian_sigma(2.0, cfg.dp_delta))
    # 16 steps at noise s compose to one Gaussian step at s / 4: exactly (eps, delta)
    assert dp.gaussian_delta(s / 4, 2.0, 1.0) == pytest.approx(cfg.dp_delta, rel=1e-6)


def test_dp_gd_is_semi_dp_with_proportional_weight():
    """The ablation: semi-DP with beta = n_priv / n and DP-GD at the same clip norm make the same run."""
    cfg = dp.Config(reg_steps=7)
    data = dp.reg_data(cfg, np.random.default_rng(0))
    n_pub, n_priv = len(data["pub"][1]), len(data["priv"][1])
    assert (n_pub, n_priv, len(data["val"][1])) == (30, 970, 250)  # 1.5 p public, p / ratio * 1.5 train, train / 4
    z = np.random.default_rng(1).standard_normal((cfg.reg_steps, cfg.reg_p))
    semi = dp.reg_run(cfg, data, "semi_dp", 0.3, n_priv / (n_pub + n_priv), z)
    np.testing.assert_allclose(semi, dp.reg_run(cfg, data, "dp_gd", 0.3, cfg.reg_clip, z), rtol=1e-10)
    # beta = 0 never reads the private data: every private label can change without moving the run
    other = {**data, "priv": (data["priv"][0], data["priv"][1] + 100.0)}
    np.testing.assert_allclose(dp.reg_run(cfg, data, "semi_dp", 0.3, 0.0, z), dp.reg_run(cfg, other, "semi_dp", 0.3, 0.0, z))


def test_mechanism_measure_hand_case():
    cfg = dp.Config()
    data = dp.reg_data(cfg, np.random.default_rng(2))
    out = dp.ivw_weight(cfg, data, np.random.default_rng(5), draws=3)
    (Xq, yq), (Xp, yp), (Xv, yv) = data["pub"], data["priv"], data["val"]
    theta = np.linalg.lstsq(Xq, yq, rcond=None)[0]
    ref = dp.clipped_grad_sum(Xv, yv, theta, 1.0) / len(yv)
    e_pub = np.sum((dp.clipped_grad_sum(Xq, yq, theta, 1.0) / len(yq) - ref) ** 2)
    z = np.random.default_rng(5).standard_normal((3, cfg.reg_p))
    noisy = (dp.clipped_grad_sum(Xp, yp, theta, 1.0) + dp.reg_noise_multiplier(cfg) * z) / len(yp)
    e_priv = np.mean(np.sum((noisy - ref) ** 2, axis=1))
    assert out["ivw_beta"] == pytest.approx(e_pub / (e_pub + e_priv)) and 0 < out["ivw_beta"] < 1


def test_derive_views_and_spec():
    with pytest.raises(ConfigError, match="fracs"):
        dp.Config(fracs=(0.2, 0.1))
    with pytest.raises(ConfigError, match="reg_betas"):
        dp.Config(reg_betas=(0.5, 0.9, 1.5))
    cfg = dp.SPEC.make_config({"n": 100, "reps": 5, "fracs": [0.05, 0.2], "eps_local": [1, 4], "eps_central": [0.1, 0.5],
                               "reg_steps": 5, "reg_lrs": [0.1, 0.3, 1.0], "reg_betas": [0.7, 0.9, 1.0],
                               "reg_clips": [0.3, 1.0, 3.0]})
    rows = []
    for variant in ("local", "regression"):
        model = dp.train(cfg, dp.prepare(cfg, None), variant, 0, lambda step, **m: None)
        rows.append({"paper": "dp_public", "variant": variant, "seed": 0,
                     **{f"dense/{k}": v for k, v in dp.evaluate(cfg, model, None).items()}})
    views = {r["variant"]: r for r in dp.derive(cfg, rows)}
    assert set(views) == {"local", "regression"} | {f"local|{e}" for e in dp.ESTIMATORS + ("best_baseline",)} | {
        f"regression|{m}" for m in dp.REG_METHODS + ("best_baseline",)}
    k = dp.key(4.0, 0.05)
    assert views["local|best_baseline"][f"dense/mse@{k}"] == min(views["local|public_only"][f"dense/mse@{k}"],
                                                                 views["local|all_private"][f"dense/mse@{k}"])
    best = views["regression|best_baseline"]  # chosen on validation, never on the test number
    pick = min(("dp_gd", "public_only"), key=lambda m: views[f"regression|{m}"]["dense/val"])
    assert best["dense/logexcess"] == views[f"regression|{pick}"]["dense/logexcess"]
    assert 0 < views["regression"]["dense/ivw_beta"] < 1
    comps = dp.comparisons(cfg)
    heads = [r for r in comps if r.role == "headline"]
    assert len(heads) == 1 and heads[0].method == "regression|semi_dp" and heads[0].refuted_if
    assert heads[0].mechanism_gates[0].metric == "ivw_beta"
    assert all(r.text.startswith("verification:") for r in comps if r.method.split("|")[0] in dp.MEAN_MODELS)
    assert all(r.column in views[r.method] for r in comps if r.method in views)

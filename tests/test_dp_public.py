"""dp_public: the Gaussian mechanism's calibration (exact delta, classic bound, linear in the sensitivity), the weighted
estimators' unbiasedness and MSE against their closed forms, optimality of the weights, and the spec/Config."""
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


def test_derive_views_and_spec():
    with pytest.raises(ConfigError, match="fracs"):
        dp.Config(fracs=(0.2, 0.1))
    cfg = dp.SPEC.make_config({"n": 100, "reps": 5, "fracs": [0.05, 0.2], "eps_local": [1, 4], "eps_central": [0.1, 0.5]})
    model = dp.train(cfg, dp.prepare(cfg, None), "local", 0, lambda step, **m: None)
    row = {"paper": "dp_public", "variant": "local", "seed": 0, **{f"dense/{k}": v for k, v in dp.evaluate(cfg, model, None).items()}}
    out = dp.derive(cfg, [row])
    views = {r["variant"]: r for r in out}
    assert set(views) == {"local"} | {f"local|{e}" for e in dp.ESTIMATORS + ("best_baseline",)}
    k = dp.key(4.0, 0.05)
    assert views["local|best_baseline"][f"dense/mse@{k}"] == min(views["local|public_only"][f"dense/mse@{k}"],
                                                                 views["local|all_private"][f"dense/mse@{k}"])
    rows = dp.comparisons(cfg)
    assert sum(r.role == "headline" for r in rows) == 1
    assert all(r.column in views[r.method] for r in rows if r.method.startswith("local"))

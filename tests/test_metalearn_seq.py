"""metalearn_seq: the Bayes-optimal sequential predictor against a brute-force joint-Gaussian posterior, the
decomposition (chain rule) and the slope fit; spec and Config load."""
from __future__ import annotations

import math

import numpy as np
import pytest

from paperflow.papers import metalearn_seq as ms
from paperflow.spec import ConfigError


def _tiny(seed=0, d=2, M=3, T=4):
    cfg = ms.Config(d=d, s_psi=0.8, s_theta=0.6, s_noise=0.5, m_grid=(1, 2, 3), t_grid=(2, 4), t_meta=T, replicates=2)
    return cfg, ms.sample_data(np.random.default_rng(seed), cfg, 1, M, T)


def _joint_cov(cfg, X):
    """Covariance of all y (M*T) given X under psi ~ N(0, s_psi^2), theta_m = psi + N(0, s_theta^2), noise s^2."""
    M, T, d = X.shape
    Z = X.reshape(M * T, d)
    same = np.kron(np.eye(M), np.ones((T, T)))
    return (Z @ Z.T) * (cfg.s_psi**2 + cfg.s_theta**2 * same) + cfg.s_noise**2 * np.eye(M * T)


def test_bayes_predictive_matches_brute_force_conditioning():
    """Every token's Bayes predictive N(mean, var) equals the Schur-complement conditional of the joint Gaussian."""
    cfg, data = _tiny()
    X, Y = data["X"][0], data["Y"][0]
    M, T, d = X.shape
    K, y = _joint_cov(cfg, X), Y.reshape(-1)
    # sequential predictor, written out with its psi posterior as in bayes_excess
    Lam, h, I = np.eye(d)[None] / cfg.s_psi**2, np.zeros((1, d)), np.eye(d)
    means, varis = [], []
    for m in range(M):
        S = np.linalg.inv(Lam)
        mu = np.einsum("rij,rj->ri", S, h)
        _, mm, vv = ms.kalman_losses(X[None, m], Y[None, m], mu, S + cfg.s_theta**2 * I, cfg.s_noise**2)
        means += list(mm[0]); varis += list(vv[0])
        P, b = ms.sequence_info(X[None, m], Y[None, m], cfg.s_theta**2, cfg.s_noise**2)
        Lam, h = Lam + P, h + b
    for i in range(M * T):
        k = K[i, :i]
        w = np.linalg.solve(K[:i, :i], k) if i else np.zeros(0)
        assert means[i] == pytest.approx(float(w @ y[:i]), abs=1e-9)
        assert varis[i] == pytest.approx(float(K[i, i] - w @ k), abs=1e-9)


def test_cumulative_log_loss_is_minus_log_marginal_likelihood_and_decomposes():
    """Chain rule: sum of Bayes token losses = -log N(y; 0, K); Bayes - theta-oracle = meta + intra parts."""
    cfg, data = _tiny(seed=3)
    X, Y, theta = data["X"][0], data["Y"][0], data["theta"][0]
    K = _joint_cov(cfg, X)
    y = Y.reshape(-1)
    nll = 0.5 * (len(y) * math.log(2 * math.pi) + np.linalg.slogdet(K)[1] + y @ np.linalg.solve(K, y))
    resid = Y - np.einsum("mtd,md->mt", X, theta)
    nll_theta = float((0.5 * (math.log(2 * math.pi) + math.log(cfg.s_noise**2)) + resid**2 / (2 * cfg.s_noise**2)).sum())
    meta, intra, mi = ms.bayes_excess(cfg, data)
    assert float(meta.sum() + intra.sum()) == pytest.approx(nll - nll_theta, rel=1e-9)
    # closed-form I(H; psi | X) = 1/2 logdet(I + s_psi^2 sum P_m) against 1/2 logdet of the covariance ratio
    Kpsi0 = K - (X.reshape(-1, cfg.d) @ X.reshape(-1, cfg.d).T) * cfg.s_psi**2  # covariance given psi
    assert mi[0, -1] == pytest.approx(0.5 * (np.linalg.slogdet(K)[1] - np.linalg.slogdet(Kpsi0)[1]), rel=1e-9)


def test_slope_and_predicted_rates():
    xs = np.array([1, 2, 4, 8.0])
    assert ms.slope(xs, 3 * xs**-0.7) == pytest.approx(-0.7)
    cfg = ms.Config()
    pm, pt = ms.predicted_slopes(cfg)
    assert -1 < pm < -0.5 and -1 < pt < -0.7  # d log(.)/x: -1 up to the log factor
    assert [c.role for c in ms.comparisons(cfg)] == ["headline", "secondary", "control"]
    assert ms.comparisons(cfg)[0].target == pytest.approx(pm)


def test_train_evaluate_small_and_config_errors():
    cfg = ms.SPEC.make_config({"replicates": 20, "m_grid": [1, 2, 4], "t_grid": [8, 16], "t_meta": 4})
    logged = []
    model = ms.train(cfg, ms.prepare(cfg, None), "bayes", 0, lambda step, **m: logged.append(m))
    out = ms.evaluate(cfg, model, {})
    assert out["slope_m"] < 0 and out["slope_t"] < 0 and abs(out["meta_gap"]) < 0.3
    assert any("sweep_m/meta_error" in m for m in logged)
    rows = ms.derive(cfg, [{"paper": "metalearn_seq", "variant": "bayes", "seed": 0, "dense/slope_m": out["slope_m"]}])
    assert rows[-1]["variant"] == "bayes|theory"
    with pytest.raises(ConfigError, match="m_grid"):
        ms.Config(m_grid=(4, 2))
    with pytest.raises(ConfigError):
        ms.SPEC.make_config({"nope": 1})

"""metalearn_seq: the Gaussian-prior and mixture-prior Bayes predictors against brute-force (mixtures of) joint-Gaussian
posteriors, the chain-rule decomposition and the closed-form information, the mixture reducing to the Gaussian
predictor, the bound, the slope fit and the spec/Config."""
from __future__ import annotations

import math

import numpy as np
import pytest

from paperflow.papers import metalearn_seq as ms
from paperflow.spec import ConfigError


def _tiny(seed=0, d=2, M=3, T=4, K=3):
    cfg = ms.Config(d=d, s_psi=0.8, s_theta=0.6, s_noise=0.5, mix_k=K, mix_tau=0.3, m_grid=(1, 2, 3), t_grid=(2, 4),
                    t_meta=T, replicates=2)
    rng = np.random.default_rng(seed)
    centres = ms.mixture_centres(cfg, rng)
    return cfg, centres, ms.sample_data(rng, cfg, centres, 1, M, T)


def _joint_cov(cfg, X, s_psi2):
    """Covariance of all y (M*T) given X under psi ~ N(., s_psi2 I), theta_m = psi + N(0, s_theta^2), noise s^2."""
    M, T, d = X.shape
    Z = X.reshape(M * T, d)
    same = np.kron(np.eye(M), np.ones((T, T)))
    return (Z @ Z.T) * (s_psi2 + cfg.s_theta**2 * same) + cfg.s_noise**2 * np.eye(M * T)


def _gauss_nll(y, mean, K):
    r = y - mean
    return 0.5 * (len(y) * math.log(2 * math.pi) + np.linalg.slogdet(K)[1] + r @ np.linalg.solve(K, r))


def test_gaussian_prior_predictor_matches_brute_force_conditioning():
    """Every token's predictive N(mean, var) under psi ~ N(mu0, s_psi^2 I) equals the Schur-complement conditional of
    the joint Gaussian, and the summed losses per sequence are the chain rule of -log p(y)."""
    cfg, centres, data = _tiny()
    X, Y = data["X"][0], data["Y"][0]
    M, T, d = X.shape
    mu0 = np.array([0.3, -0.2])
    K, y = _joint_cov(cfg, X, cfg.s_psi**2), Y.reshape(-1)
    mean = X.reshape(M * T, d) @ mu0
    losses = ms.gaussian_prior_losses(X[None], Y[None], mu0[None], (cfg.s_psi**2 * np.eye(d))[None],
                                      cfg.s_theta**2, cfg.s_noise**2)
    for m in range(1, M + 1):  # prefix sums = -log p(y of the first m sequences)
        n = m * T
        assert losses[0, :m].sum() == pytest.approx(_gauss_nll(y[:n], mean[:n], K[:n, :n]), rel=1e-9)
    # token by token, via kalman_losses with the psi posterior written out (as in gaussian_prior_losses)
    Lam, h = np.eye(d)[None] / cfg.s_psi**2, (mu0 / cfg.s_psi**2)[None]
    means, varis = [], []
    for m in range(M):
        S = np.linalg.inv(Lam)
        _, mm, vv = ms.kalman_losses(X[None, m], Y[None, m], np.einsum("rij,rj->ri", S, h), S + cfg.s_theta**2 * np.eye(d),
                                     cfg.s_noise**2)
        means += list(mm[0]); varis += list(vv[0])
        P, b = ms.sequence_info(X[None, m], Y[None, m], cfg.s_theta**2, cfg.s_noise**2)
        Lam, h = Lam + P, h + b
    for i in range(M * T):
        k = K[i, :i]
        w = np.linalg.solve(K[:i, :i], k) if i else np.zeros(0)
        assert means[i] == pytest.approx(mean[i] + float(w @ (y[:i] - mean[:i])), abs=1e-9)
        assert varis[i] == pytest.approx(float(K[i, i] - w @ k), abs=1e-9)


def test_mixture_predictor_is_minus_log_of_the_mixture_likelihood():
    """Chain rule for the mixture prior: the summed losses of the first m sequences are -log (1/K) sum_k N(y; X c_k, K_tau)."""
    cfg, centres, data = _tiny(seed=4)
    X, Y = data["X"][0], data["Y"][0]
    M, T, d = X.shape
    K, y, Z = _joint_cov(cfg, X, cfg.mix_tau**2), Y.reshape(-1), X.reshape(M * T, d)
    losses = ms.mixture_prior_losses(X[None], Y[None], centres, cfg.mix_tau**2, cfg.s_theta**2, cfg.s_noise**2)
    for m in range(1, M + 1):
        n = m * T
        comps = np.array([-_gauss_nll(y[:n], Z[:n] @ c, K[:n, :n]) for c in centres])
        top = comps.max()
        assert losses[0, :m].sum() == pytest.approx(-(top + math.log(np.exp(comps - top).mean())), rel=1e-9)


def test_mixture_with_identical_centres_is_the_gaussian_predictor():
    cfg, centres, data = _tiny(seed=2)
    same = np.repeat(centres[:1], cfg.mix_k, axis=0)
    args = (cfg.s_theta**2, cfg.s_noise**2)
    mix = ms.mixture_prior_losses(data["X"], data["Y"], same, cfg.mix_tau**2, *args)
    gauss = ms.gaussian_prior_losses(data["X"], data["Y"], same[:1], (cfg.mix_tau**2 * np.eye(cfg.d))[None], *args)
    np.testing.assert_allclose(mix, gauss, rtol=1e-10)


def test_closed_form_information_and_decomposition():
    """Gaussian model: 1/2 logdet(I + s_psi^2 sum P) = 1/2 [logdet K - logdet K | psi]; Bayes - theta-oracle splits
    into (Bayes - psi-oracle) + (psi-oracle - theta-oracle) exactly (per sequence)."""
    cfg, centres, data = _tiny(seed=3)
    X, Y, theta, psi = data["X"][0], data["Y"][0], data["theta"][0], data["psi"]
    K = _joint_cov(cfg, X, cfg.s_psi**2)
    Kpsi = K - (X.reshape(-1, cfg.d) @ X.reshape(-1, cfg.d).T) * cfg.s_psi**2
    info = ms.gaussian_information(X[None], cfg.s_psi**2, cfg.s_theta**2, cfg.s_noise**2)
    assert info[0, -1] == pytest.approx(0.5 * (np.linalg.slogdet(K)[1] - np.linalg.slogdet(Kpsi)[1]), rel=1e-9)
    oracle = ms.oracle_losses(X[None], Y[None], psi, cfg.s_theta**2, cfg.s_noise**2)
    for m in range(X.shape[0]):  # psi-oracle on sequence m is -log N(y_m; X_m psi, s_theta^2 X X^T + s^2 I)
        C = cfg.s_theta**2 * X[m] @ X[m].T + cfg.s_noise**2 * np.eye(X.shape[1])
        assert oracle[0, m] == pytest.approx(_gauss_nll(Y[m], X[m] @ psi[0], C), rel=1e-9)


def test_slope_bounds_and_predicted_rates():
    xs = np.array([1, 2, 4, 8.0])
    assert ms.slope(xs, 3 * xs**-0.7) == pytest.approx(-0.7)
    cfg = ms.Config()
    p = ms.predicted_slopes(cfg)
    assert -0.65 < p["mixture"] < -0.55 and -0.65 < p["gaussian"] < -0.55 and -0.85 < p["intra"] < -0.75  # docstring
    curves = ms.predicted_curves(cfg)
    M = np.asarray(cfg.m_grid, float)  # hand value of the mixture bound at M = 1: (log 4 + 4 log 1.25)/16
    assert curves["mixture"][0] == pytest.approx((math.log(4) + 4 * math.log(1.25)) / 16)
    assert np.all(curves["mixture"] <= curves["gaussian"] * (1 + 1e-12)) and M[0] == 1
    rows = ms.comparisons(cfg)
    assert [c.role for c in rows] == ["headline", "control", "control", "fact", "fact"]
    assert rows[0].target == pytest.approx(p["mixture"]) and rows[0].refuted_if and rows[0].mechanism_gates
    assert all(c.text.startswith("verification:") for c in rows if c.role == "control")


def test_train_evaluate_small_and_config_errors():
    cfg = ms.SPEC.make_config({"replicates": 20, "m_grid": [1, 2, 4], "t_grid": [8, 16], "t_meta": 4})
    logged = []
    model = ms.train(cfg, ms.prepare(cfg, None), "bayes", 0, lambda step, **m: logged.append(m))
    out = ms.evaluate(cfg, model, {})
    assert out["slope_m"] < 0 and out["slope_t"] < 0 and out["misspec_gap"] > -0.05 and out["over_bound"] > 0
    assert any("sweep_m/meta_error" in m for m in logged)
    rows = ms.derive(cfg, [{"paper": "metalearn_seq", "variant": "bayes", "seed": 0,
                            **{f"dense/{k}": v for k, v in out.items()}}])
    views = {r["variant"]: r for r in rows}
    assert views[ms.ABLATION]["dense/logmeta"] == out["logmeta_gauss_prior"] and ms.THEORY in views
    with pytest.raises(ConfigError, match="m_grid"):
        ms.Config(m_grid=(4, 2))
    with pytest.raises(ConfigError, match="mix_tau"):
        ms.Config(mix_tau=1.5)
    with pytest.raises(ConfigError):
        ms.SPEC.make_config({"nope": 1})

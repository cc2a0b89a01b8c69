"""performative_zo (ICML 2024, Chen et al.): ZO estimators unbiased on quadratics, the strategic response and the
exact PR gradient against closed forms / finite differences, RRM's fixed point on a linear-Gaussian location family,
stable point = optimum when the bias absorbs a uniform shift and a measured gap when the classes respond differently,
the regret- and excess-exponent fits on power laws (a linear regret with an intercept has excess exponent 0), the
Newton logistic fit against scikit-learn, and a tiny prepare -> train -> compress -> evaluate -> derive."""
from __future__ import annotations

import math

import numpy as np
import pytest

from paperflow.papers import performative_zo as P
from paperflow.registry import get_paper
from paperflow.spec import ConfigError


def _quadratic(d: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    M = rng.standard_normal((d, d))
    A, b = M @ M.T + np.eye(d), rng.standard_normal(d)
    return (lambda x: 0.5 * x @ A @ x + b @ x), (lambda x: A @ x + b)


def test_two_point_estimator_is_exact_on_quadratics_over_a_symmetric_design_and_unbiased_in_mc():
    d = 6
    f, grad = _quadratic(d)
    x = np.linspace(-1, 1, d)
    # over the 2d directions +-e_i (a design with E[u u^T] = I/d) the average IS the expectation: exact gradient
    dirs = [s * e for e in np.eye(d) for s in (1, -1)]
    for delta in (0.01, 0.5, 2.0):
        est = np.mean([P.two_point_estimate(f, x, delta, u) for u in dirs], axis=0)
        assert np.allclose(est, grad(x), atol=1e-10)
        est1 = np.mean([P.one_point_estimate(f, x, delta, u) for u in dirs], axis=0)  # smoothing of a quadratic: same gradient
        assert np.allclose(est1, grad(x), atol=1e-9)
    # Monte Carlo over the sphere: E[d/(2 delta)(f(x+du) - f(x-du)) u] = grad f (quadratic: no smoothing bias)
    rng = np.random.default_rng(1)
    est = np.mean([P.two_point_estimate(f, x, 0.3, P.unit_sphere(rng, d)) for _ in range(40000)], axis=0)
    assert np.linalg.norm(est - grad(x)) < 0.05 * np.linalg.norm(grad(x)) + 0.05


def test_unit_sphere_has_unit_norm_and_isotropic_second_moment():
    rng = np.random.default_rng(0)
    U = np.array([P.unit_sphere(rng, 4) for _ in range(20000)])
    assert np.allclose(np.linalg.norm(U, axis=1), 1.0)
    assert np.allclose(U.T @ U / len(U), np.eye(4) / 4, atol=0.01)


def test_strategic_response_closed_form():
    X = np.arange(12.0).reshape(3, 4)
    w = np.array([1.0, -2.0, 3.0, 0.5])
    Xs = P.strategic_response(X, w, 0.5, (1, 3))
    expect = X.copy()
    expect[:, 1] += 1.0  # - 0.5 * (-2)
    expect[:, 3] -= 0.25
    assert np.array_equal(Xs, expect)
    assert np.array_equal(X, np.arange(12.0).reshape(3, 4))  # input untouched


def _small_env(eps=0.7, lam=0.05, seed=0, eps_pos=None):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((80, 5))
    y = np.where(X[:, 0] + 0.5 * X[:, 1] + 0.3 * rng.standard_normal(80) > 0, 1.0, -1.0)
    return P.Env(X, y, eps, lam, (0, 2), eps_pos=eps_pos)


def test_population_pr_and_its_gradient():
    env = _small_env()
    th = np.array([0.4, -0.3, 0.2, 0.1, -0.5, 0.05])
    w, b = th[:-1], th[-1]
    Xs = env.X.copy()
    Xs[:, [0, 2]] -= env.eps * w[[0, 2]]
    by_hand = np.mean(np.log1p(np.exp(-env.y * (Xs @ w + b)))) + 0.5 * env.lam * w @ w
    assert env.pr(th) == pytest.approx(by_hand, rel=1e-12)
    # the score is w.x - eps |w_S|^2 + b: the shift acts as a bias change
    assert np.allclose(Xs @ w + b, env.X @ w - env.eps * (w[0] ** 2 + w[2] ** 2) + b)
    val, g = env.pr_grad(th)
    fd = np.array([(env.pr(th + 1e-6 * e) - env.pr(th - 1e-6 * e)) / 2e-6 for e in np.eye(6)])
    assert val == pytest.approx(env.pr(th))
    assert np.allclose(g, fd, atol=1e-7)


def test_rrm_converges_to_the_analytic_stable_point_of_a_location_family():
    # z ~ N(mu + eps theta, 1), loss (z - theta)^2 / 2: RRM theta_{k+1} = E_{D(theta_k)} z = mu + eps theta_k,
    # stable point mu / (1 - eps) for |eps| < 1 (Perdomo et al. 2020, Prop. on location families)
    mu, eps = 1.5, 0.6
    th, conv = P.rrm_fixed_point(lambda t: mu + eps * t, np.array([0.0]))
    assert conv and th[0] == pytest.approx(mu / (1 - eps), abs=1e-8)
    # a sample version with fixed noise xi: argmin mean (z - theta)^2 = mean z  -> (mu + mean xi) / (1 - eps)
    xi = np.random.default_rng(0).standard_normal(200)
    th, conv = P.rrm_fixed_point(lambda t: np.atleast_1d(np.mean(mu + eps * t + xi)), np.array([3.0]))
    assert conv and th[0] == pytest.approx((mu + xi.mean()) / (1 - eps), abs=1e-8)
    _, conv = P.rrm_fixed_point(lambda t: mu + 1.5 * t, np.array([0.1]), rounds=50)  # eps > 1: no convergence
    assert not conv


def test_stable_point_equals_optimum_when_the_bias_absorbs_the_shift():
    # PR(w, b) = R(w, b - eps |w_S|^2) + lam/2 |w|^2 with b unregularized: the stable point is a fixed point of
    # RRM and also minimizes PR (reparameterization b' = b - eps |w_S|^2 makes PR convex)
    env = _small_env()
    th0 = P.logistic_fit(env.X, env.y, env.lam)
    ps, pr_ps, conv = P.stable_point(env, th0)
    po, pr_po = P.performative_optimum(env, [th0, np.zeros(env.d)])
    assert conv
    assert np.allclose(P.logistic_fit(env.respond(ps), env.y, env.lam, ps), ps, atol=1e-7)
    assert pr_ps == pytest.approx(pr_po, abs=1e-8)
    assert env.pr(th0) > pr_po + 1e-4  # the non-strategic fit is not optimal once agents respond


def test_logistic_fit_matches_sklearn():
    from sklearn.linear_model import LogisticRegression

    env = _small_env()
    lam, n = 0.05, len(env.y)
    th = P.logistic_fit(env.X, env.y, lam)
    sk = LogisticRegression(C=1.0 / (lam * n), tol=1e-12, max_iter=10000).fit(env.X, env.y)
    assert np.allclose(th[:-1], sk.coef_[0], atol=1e-4) and th[-1] == pytest.approx(sk.intercept_[0], abs=1e-3)


def test_regret_exponent_of_sqrt_and_linear_curves():
    n = np.linspace(1.0, 1e5, 2001)
    assert P.regret_exponent(n, 3.0 * np.sqrt(n), 1e4, 1e5, 12) == pytest.approx(0.5, abs=1e-3)
    assert P.regret_exponent(n, 0.2 * n, 1e4, 1e5, 12) == pytest.approx(1.0, abs=1e-6)
    assert P.regret_exponent(n, n ** (5 / 6), 1e4, 1e5, 12) == pytest.approx(5 / 6, abs=1e-3)


def test_deployer_charges_budget_and_regret_exactly():
    env = _small_env()
    th = np.zeros(env.d)
    dep = P.Deployer(env, pr_star=0.1, budget=1000, rng=np.random.default_rng(0))
    dep.deploy(th, dep.draw(300))
    dep.deploy(th, dep.draw(800))  # clipped to the 700 left
    assert dep.used == 1000 and dep.left() == 0
    assert dep.regret == pytest.approx(1000 * (env.pr(th) - 0.1))
    assert dep.summary(th)["pr_end"] == pytest.approx(env.pr(th))


def test_learn_model_moves_towards_the_model_that_induces_the_target():
    env = _small_env(eps=1.0)
    cfg = P.Config(strategic=(0, 2), n_kl=400, inner_steps=30, inner_lr=0.3, inner_radius=0.3)
    target_theta = np.array([0.5, 0.0, -0.4, 0.0, 0.0, 0.0])
    phi = env.respond(target_theta)[:, env.S].mean(0)
    dep = P.Deployer(env, 0.0, 10 ** 7, np.random.default_rng(0))
    start = np.zeros(env.d)
    out = P.learn_model(cfg, dep, phi, start, env.X[:, env.S].var(0), 0.3)
    assert np.linalg.norm(out[env.S] - target_theta[env.S]) < 0.25 * np.linalg.norm(target_theta[env.S])


def test_spec_and_config():
    spec = get_paper("performative_zo")
    cfg = P.Config()
    assert spec.variants == ("run",) and spec.headlines == 2
    rows = spec.comparisons(cfg)
    assert sum(r.role == "headline" for r in rows) == 2
    with pytest.raises(ConfigError):
        P.Config(eta_grid_zo2=(0.1, 0.3))  # grids of different sizes: unequal tuning
    with pytest.raises(ConfigError):
        P.Config(strategic=(0, 30))
    with pytest.raises(ConfigError):
        spec.make_config({"no_such_key": 1})


def test_tiny_pipeline():
    cfg = P.Config(budget=2000, n_deploy=20, n_kl=10, inner_steps=1, tune_reps=1, nr_grid_rrm=(100, 150, 200, 300, 400),
                   n_checkpoints=4)
    data = P.prepare(cfg, None)
    assert set(data["tuning"]) == set(P.METHODS)
    model = P.train(cfg, data, "run", 0, None)
    dense = P.evaluate(cfg, model, data)
    comp = P.compress(cfg, model, data, "run", 0)
    assert set(comp) == {"0.50", "0.80"}
    for m in P.METHODS:
        assert dense[f"{m}_pr_end"] >= dense["pr_star"] - 1e-9 and math.isfinite(dense[f"{m}_regret_exp"])
        w = comp["0.80"]["thetas"][m][:-1]
        assert int((w == 0).sum()) == 24  # 80% of 30 weights pruned, bias kept
    row = {"paper": "performative_zo", "variant": "run", "seed": 0, **{f"dense/{k}": v for k, v in dense.items()}}
    for lv, c in comp.items():
        row.update({f"compressed:{lv}/{k}": v for k, v in P.evaluate(cfg, c, data).items()})
    views = {r["variant"]: r for r in P.derive(cfg, [row])}
    assert views["run|zo2"]["dense/pr_end"] == dense["zo2_pr_end"]
    assert views["run|rrm"]["compressed:0.50/pr_final"] == row["compressed:0.50/rrm_pr_final"]
    assert views["run|zo_theta"]["dense/grid_edge"] in (0.0, 1.0)


def test_exact_inverse_map_induces_the_target_parameter():
    # zo2_exact's LearnModel: w_S = (mu_S - phi) / eps gives E_{D(theta)} x_S = phi exactly (the response is linear)
    env = _small_env(eps=0.8)
    phi = np.array([0.3, -0.2])
    th = np.zeros(env.d)
    th[env.S] = (env.X[:, env.S].mean(0) - phi) / env.eps_bar
    assert np.allclose(env.respond(th)[:, env.S].mean(0), phi, atol=1e-12)
    env = _small_env(eps=0.8, eps_pos=0.1)  # class-dependent: the slope is the mean response strength
    assert env.eps_bar == pytest.approx(np.mean(np.where(env.y > 0, 0.1, 0.8)))
    th[env.S] = (env.X[:, env.S].mean(0) - phi) / env.eps_bar
    assert np.allclose(env.respond(th)[:, env.S].mean(0), phi, atol=1e-12)


def test_class_dependent_response_pr_gradient_and_bandit_loss():
    env = _small_env(eps=0.9, eps_pos=0.2)
    th = np.array([0.4, -0.3, 0.2, 0.1, -0.5, 0.05])
    e = np.where(env.y > 0, 0.2, 0.9)
    Xs = env.X.copy()
    Xs[:, [0, 2]] -= e[:, None] * th[[0, 2]]
    assert np.allclose(env.respond(th), Xs)
    assert env.pr(th) == pytest.approx(P.sample_loss(th, Xs, env.y, env.lam), rel=1e-12)
    idx = np.array([3, 3, 7, 40])
    assert env.loss(th, idx) == pytest.approx(P.sample_loss(th, Xs[idx], env.y[idx], env.lam), rel=1e-12)
    _, g = env.pr_grad(th)
    fd = np.array([(env.pr(th + 1e-6 * u) - env.pr(th - 1e-6 * u)) / 2e-6 for u in np.eye(6)])
    assert np.allclose(g, fd, atol=1e-7)
    dep = P.Deployer(env, 0.0, 100, np.random.default_rng(0))
    assert dep.loss(th, idx) == pytest.approx(env.loss(th, idx)) and dep.used == 4  # bandit feedback is charged


def test_class_dependent_response_opens_a_gap_that_only_the_difference_sets():
    # the bias absorbs the part of the shift common to every agent: only eps - eps_pos matters; with it non-zero,
    # RRM's fixed point (a stable point) is no longer the optimum
    th0 = P.logistic_fit(_small_env().X, _small_env().y, 0.05)
    refs = []
    for eps, eps_pos in ((0.7, 0.0), (1.2, 0.5)):
        env = _small_env(eps=eps, eps_pos=eps_pos)
        ps, pr_ps, conv = P.stable_point(env, th0)
        _, pr_po = P.performative_optimum(env, [th0, np.zeros(env.d), ps])
        assert conv and np.allclose(P.logistic_fit(env.respond(ps), env.y, env.lam, ps), ps, atol=1e-7)
        refs.append((pr_ps, pr_po))
    # (to 1e-5: logistic_fit keeps a 1e-6 ridge on the bias, which the shifted bias feels)
    assert refs[0][0] == pytest.approx(refs[1][0], abs=1e-5) and refs[0][1] == pytest.approx(refs[1][1], abs=1e-5)
    assert refs[0][0] - refs[0][1] > 1e-3  # PR(stable) - PR* > 0


def test_excess_exponent_is_the_rate_of_the_per_sample_excess():
    n = np.linspace(50.0, 1e5, 2000)
    for gamma in (0.5, 5 / 6, 1.0):  # R = a + b N^gamma: excess b gamma N^(gamma - 1), exactly on log-spaced windows
        assert P.excess_exponent(n, 7.0 + 3.0 * n ** gamma, 1e4, 1e5, 12) == pytest.approx(gamma - 1, abs=1e-3)
    # v2's test passed a linear regret with an intercept (slope of log R below 1); the excess exponent says 0
    assert P.regret_exponent(n, 400.0 + 0.05 * n, 1e4, 1e5, 12) < 0.9
    assert P.excess_exponent(n, 400.0 + 0.05 * n, 1e4, 1e5, 12) == pytest.approx(0.0, abs=1e-9)
    # a curve whose first point comes after the window starts (RRM's large deployments) starts from the origin
    big = np.array([32000.0, 64000.0, 96000.0, 128000.0, 150000.0])
    assert P.excess_exponent(big, 0.01 * big, 15000.0, 150000.0, 12) == pytest.approx(0.0, abs=1e-9)
    assert math.isnan(P.excess_exponent(n, np.full_like(n, 5.0), 1e4, 1e5, 12))  # no excess in a window


def test_headlines_carry_the_measured_gap_as_mechanism_and_say_what_refutes_them():
    cfg = P.Config()
    heads = [c for c in P.comparisons(cfg) if c.role == "headline"]
    assert len(heads) == get_paper("performative_zo").headlines == 2
    for c in heads:
        assert c.refuted_if and [g.metric for g in c.mechanism_gates] == ["ps_gap"]
    assert heads[1].metric == "excess_exp" and heads[1].baseline == "run|flat"
    assert get_paper("performative_zo").fidelity == "reconstruction"

"""apg: the core math against independent computations."""
import numpy as np

from paperflow import tabular as T
from paperflow.papers import apg


def test_gap_by_performance_difference_matches_direct_difference():
    rng = np.random.default_rng(0)
    mdp = T.random_mdp(rng, 4, 3, gamma=0.8, rho="dirichlet")
    V_star, _ = T.value_iteration(mdp, tol=1e-13)
    A_star = apg.optimal_advantage(mdp)
    for _ in range(5):
        pi = T.softmax_policy(rng.normal(size=(4, 3)))
        direct = mdp.rho @ V_star - T.objective(mdp, pi)
        assert np.isclose(apg.suboptimality_gap(mdp, pi, A_star), direct, rtol=1e-9, atol=1e-12)


def test_authors_mdp_optimum_matches_their_logged_values():
    # their args.yaml: V_opt 9.408398506373334, optimal_policy [0, 3, 4, 3, 4]
    V, pi = T.policy_iteration(apg.authors_mdp())
    assert np.isclose(apg.authors_mdp().rho @ V, 9.408398506373334, atol=1e-9)
    assert list(pi.argmax(-1)) == [0, 3, 4, 3, 4]


def test_apg_first_steps_by_hand_on_a_bandit():
    r = np.array([1.0, 0.5, 0.0])
    mdp = T.bandit_mdp(r)
    eta = 0.4
    theta0 = np.zeros((1, 3))
    # by hand: bandit gradient pi (r - pi r); t = 1: theta1 = theta0 + eta/2 g(theta0), phi1 = theta1 (coef 0)
    g = lambda th: (lambda p: p * (r - p @ r))(T.softmax_policy(th)[0])[None]
    th1 = theta0 + eta * 1 / 2 * g(theta0)
    om1 = th1
    th2 = om1 + eta * 2 / 3 * g(om1)
    phi2 = th2 + 1 / 4 * (th2 - th1)
    V = lambda th: float(T.softmax_policy(th)[0] @ r)
    om2 = phi2 if V(phi2) >= V(th2) else th2
    th3 = om2 + eta * 3 / 4 * g(om2)
    out = apg.run(mdp, theta0, eta, 3, "apg", record=[3])
    A_star = apg.optimal_advantage(mdp)
    assert np.isclose(out["gaps"][0], apg.suboptimality_gap(mdp, T.softmax_policy(th3), A_star), rtol=1e-12)
    pg = apg.run(mdp, theta0, eta, 2, "pg", record=[2])
    th = theta0 + eta * g(theta0); th = th + eta * g(th)
    assert np.isclose(pg["gaps"][0], 1.0 - V(th), rtol=1e-12)


def test_slope_fit_recovers_a_power_law_and_the_window_is_fixed():
    ts = apg.fit_points(10000)
    assert ts[0] == 1000 and ts[-1] == 10000 and len(ts) >= 30
    for k in (1.0, 2.0, 3.5):
        assert np.isclose(apg.fitted_slope(ts, 7.0 * ts ** -k), -k)


def test_rates_on_the_bandit_pg_minus_one_apg_minus_two():
    mdp = T.bandit_mdp([1.0, 0.99, 0.0])
    pg = apg.run(mdp, np.zeros((1, 3)), 5.0, 4000, "pg")
    ap = apg.run(mdp, np.zeros((1, 3)), 5.0, 4000, "apg")
    assert abs(apg.fitted_slope(pg["ts"], pg["gaps"]) + 1) < 0.1
    assert abs(apg.fitted_slope(ap["ts"], ap["gaps"]) + 2) < 0.1
    assert ap["momentum_frac"] > 0.5

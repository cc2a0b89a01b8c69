"""Shared tabular MDP module: each function checked against an independent computation."""
import itertools

import numpy as np
import pytest

from paperflow import tabular as T


def _two_state():
    # s0: a0 stays (r=1), a1 goes to s1 (r=0); s1: a0 stays (r=2), a1 goes to s0 (r=0)
    P = np.zeros((2, 2, 2))
    P[0, 0, 0] = 1; P[0, 1, 1] = 1; P[1, 0, 1] = 1; P[1, 1, 0] = 1
    R = np.array([[1.0, 0.0], [2.0, 0.0]])
    return T.TabularMDP(P=P, R=R, gamma=0.9, rho=np.array([1.0, 0.0]))


def test_policy_evaluation_hand_solved_two_state():
    mdp = _two_state()
    # pi: in s0 stay w.p. p, in s1 stay w.p. q.  Solve by hand:
    p, q, g = 0.3, 0.8, 0.9
    pi = np.array([[p, 1 - p], [q, 1 - q]])
    # V0 = p(1 + g V0) + (1-p) g V1 ; V1 = q(2 + g V1) + (1-q) g V0
    a11, a12, b1 = 1 - g * p, -g * (1 - p), p
    a21, a22, b2 = -g * (1 - q), 1 - g * q, 2 * q
    det = a11 * a22 - a12 * a21
    V0 = (b1 * a22 - a12 * b2) / det
    V1 = (a11 * b2 - a21 * b1) / det
    np.testing.assert_allclose(T.policy_evaluation(mdp, pi), [V0, V1], rtol=1e-12)
    # optimal: go to s1 and stay: V1* = 2/(1-g) = 20, V0* = g * 20 = 18 > 1/(1-g) = 10
    V, pist = T.value_iteration(mdp)
    np.testing.assert_allclose(V, [18.0, 20.0], rtol=1e-9)
    np.testing.assert_array_equal(pist, [[0, 1], [1, 0]])


def test_policy_evaluation_vs_power_iteration_and_monte_carlo():
    rng = np.random.default_rng(0)
    mdp = T.random_mdp(rng, 4, 3, gamma=0.8)
    pi = rng.dirichlet(np.ones(3), size=4)
    V = T.policy_evaluation(mdp, pi)
    # power iteration of the Bellman operator
    W = np.zeros(4)
    Ppi, rpi = T.policy_transition(mdp, pi), T.policy_reward(mdp, pi)
    for _ in range(400):
        W = rpi + mdp.gamma * Ppi @ W
    np.testing.assert_allclose(V, W, rtol=1e-10)
    # Monte Carlo of the discounted return from s=0 (expected rewards, truncated at 80 steps: 0.8^80 ~ 2e-8)
    n, H = 4000, 80
    s = np.zeros(n, dtype=int)
    ret = np.zeros(n)
    for t in range(H):
        a = (rng.uniform(size=n)[:, None] > np.cumsum(pi[s], -1)).sum(-1)
        ret += mdp.gamma ** t * mdp.R[s, a]
        u = rng.uniform(size=n)[:, None]
        s = (u > np.cumsum(mdp.P[s, a], -1)).sum(-1)
        s = np.minimum(s, 3)
    se = ret.std() / np.sqrt(n)
    assert abs(ret.mean() - V[0]) < 4 * se


def test_value_iteration_vs_brute_force_deterministic_policies():
    rng = np.random.default_rng(1)
    for seed in range(3):
        mdp = T.random_mdp(rng, 4, 3, gamma=0.9, branching=2)
        best = None
        for acts in itertools.product(range(3), repeat=4):
            pi = np.zeros((4, 3)); pi[np.arange(4), acts] = 1
            V = T.policy_evaluation(mdp, pi)
            best = V if best is None else np.maximum(best, V)
        V, pi = T.value_iteration(mdp, tol=1e-12)
        np.testing.assert_allclose(V, best, atol=1e-9)
        Vpi, _ = T.policy_iteration(mdp)
        np.testing.assert_allclose(Vpi, best, atol=1e-9)


def test_occupancy_sums_to_one_and_matches_series():
    rng = np.random.default_rng(2)
    mdp = T.random_mdp(rng, 5, 2, gamma=0.7, rho="dirichlet")
    pi = rng.dirichlet(np.ones(2), size=5)
    d = T.discounted_occupancy(mdp, pi)
    assert np.isclose(d.sum(), 1.0)
    Ppi = T.policy_transition(mdp, pi)
    x, acc = mdp.rho.copy(), np.zeros(5)
    for t in range(200):
        acc += (1 - mdp.gamma) * mdp.gamma ** t * x
        x = x @ Ppi
    np.testing.assert_allclose(d, acc, atol=1e-12)
    # J = rho V = sum_s d(s) r_pi(s) / (1 - gamma)
    assert np.isclose(T.objective(mdp, pi), d @ T.policy_reward(mdp, pi) / (1 - mdp.gamma))


@pytest.mark.parametrize("gamma", [0.0, 0.6, 0.95])
def test_softmax_gradient_vs_finite_differences(gamma):
    rng = np.random.default_rng(3)
    mdp = T.random_mdp(rng, 3, 4, gamma=gamma, rho="dirichlet")
    theta = rng.normal(size=(3, 4))
    g = T.softmax_policy_gradient(mdp, theta)
    J = lambda th: T.objective(mdp, T.softmax_policy(th))
    fd = np.zeros_like(theta)
    h = 1e-6
    for i in range(3):
        for j in range(4):
            e = np.zeros_like(theta); e[i, j] = h
            fd[i, j] = (J(theta + e) - J(theta - e)) / (2 * h)
    np.testing.assert_allclose(g, fd, atol=1e-7)
    # Lemma C.1 form with the normalised occupancy
    pi = T.softmax_policy(theta)
    if gamma > 0:
        lc1 = T.discounted_occupancy(mdp, pi)[:, None] * pi * T.advantages(mdp, pi) / (1 - gamma)
        np.testing.assert_allclose(g, lc1, atol=1e-12)


def test_bandit_gradient_closed_form():
    r = np.array([1.0, 0.5, 0.2])
    mdp = T.bandit_mdp(r)
    theta = np.array([[0.1, -0.3, 0.7]])
    pi = T.softmax_policy(theta)[0]
    # d/dtheta_a (pi @ r) = pi_a (r_a - pi @ r)
    np.testing.assert_allclose(T.softmax_policy_gradient(mdp, theta)[0], pi * (r - pi @ r), atol=1e-14)
    V, pist = T.value_iteration(mdp)
    assert np.isclose(V[0], 1.0) and pist[0, 0] == 1


def test_softmax_policy_stable_and_validation():
    pi = T.softmax_policy(np.array([[1000.0, 0.0], [-1000.0, -1000.0]]))
    np.testing.assert_allclose(pi, [[1, 0], [0.5, 0.5]])
    with pytest.raises(ValueError):
        T.TabularMDP(P=np.ones((2, 2, 2)), R=np.zeros((2, 2)), gamma=0.9, rho=np.array([0.5, 0.5]))
    with pytest.raises(ValueError):
        T.TabularMDP(P=np.full((2, 2, 2), 0.5), R=np.zeros((2, 2)), gamma=1.0, rho=np.array([0.5, 0.5]))

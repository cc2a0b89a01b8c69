"""Shared tabular MDP tools (issue 30): exact policy evaluation, value iteration, true softmax policy gradients.

Everything is numpy float64 and exact (linear solves, no sampling), for papers that study planning / policy
optimisation on small known MDPs (apg, robust_markov_games, dtr_reassess, ...).

Conventions
-----------
* ``P[s, a, s']`` transition probabilities (rows sum to 1), ``R[s, a]`` expected reward, ``gamma`` in [0, 1),
  ``rho[s]`` start distribution.
* A policy is an ``[S, A]`` row-stochastic array ``pi[s, a]``.
* ``J(pi) = rho @ V^pi`` (unnormalised discounted return).
* ``discounted_occupancy`` is normalised: ``d_rho^pi(s) = (1 - gamma) sum_t gamma^t Pr(s_t = s)``, summing to 1.
* Softmax policy gradient (Agarwal, Kakade, Lee, Mahajan 2021, Lemma C.1):
  ``dJ/dtheta[s, a] = d_rho^pi(s) pi(a|s) A^pi(s, a) / (1 - gamma)``.

A bandit is the special case S = 1 with gamma = 0 (J = sum_a pi(a) r(a)); ``bandit_mdp`` builds it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "TabularMDP", "policy_evaluation", "q_values", "advantages", "value_iteration", "policy_iteration",
    "discounted_occupancy", "state_visitation", "softmax_policy", "softmax_policy_gradient", "objective",
    "random_mdp", "bandit_mdp", "greedy_policy", "uniform_policy", "policy_transition", "policy_reward",
]


@dataclass
class TabularMDP:
    P: np.ndarray       # [S, A, S]
    R: np.ndarray       # [S, A]
    gamma: float
    rho: np.ndarray     # [S]

    def __post_init__(self):
        self.P = np.asarray(self.P, dtype=np.float64)
        self.R = np.asarray(self.R, dtype=np.float64)
        self.rho = np.asarray(self.rho, dtype=np.float64)
        self.gamma = float(self.gamma)
        S, A = self.R.shape
        if self.P.shape != (S, A, S):
            raise ValueError(f"P has shape {self.P.shape}, expected {(S, A, S)}")
        if self.rho.shape != (S,):
            raise ValueError(f"rho has shape {self.rho.shape}, expected {(S,)}")
        if not np.allclose(self.P.sum(-1), 1.0, atol=1e-8) or (self.P < -1e-12).any():
            raise ValueError("P[s, a, :] must be probability vectors")
        if not np.isclose(self.rho.sum(), 1.0, atol=1e-8) or (self.rho < -1e-12).any():
            raise ValueError("rho must be a probability vector")
        if not 0.0 <= self.gamma < 1.0:
            raise ValueError("gamma must lie in [0, 1)")

    @property
    def n_states(self) -> int:
        return self.R.shape[0]

    @property
    def n_actions(self) -> int:
        return self.R.shape[1]


def _check_policy(mdp: TabularMDP, pi) -> np.ndarray:
    pi = np.asarray(pi, dtype=np.float64)
    if pi.shape != mdp.R.shape:
        raise ValueError(f"policy has shape {pi.shape}, expected {mdp.R.shape}")
    return pi


def policy_transition(mdp: TabularMDP, pi) -> np.ndarray:
    """P_pi[s, s'] = sum_a pi(a|s) P(s'|s, a)."""
    pi = _check_policy(mdp, pi)
    return np.einsum("sa,sat->st", pi, mdp.P)


def policy_reward(mdp: TabularMDP, pi) -> np.ndarray:
    """r_pi[s] = sum_a pi(a|s) R(s, a)."""
    pi = _check_policy(mdp, pi)
    return (pi * mdp.R).sum(-1)


def policy_evaluation(mdp: TabularMDP, pi) -> np.ndarray:
    """Exact V^pi: solve (I - gamma P_pi) V = r_pi."""
    S = mdp.n_states
    return np.linalg.solve(np.eye(S) - mdp.gamma * policy_transition(mdp, pi), policy_reward(mdp, pi))


def q_values(mdp: TabularMDP, V) -> np.ndarray:
    """Q[s, a] = R(s, a) + gamma sum_s' P(s'|s, a) V(s')."""
    return mdp.R + mdp.gamma * mdp.P @ np.asarray(V, dtype=np.float64)


def advantages(mdp: TabularMDP, pi) -> np.ndarray:
    """A^pi[s, a] = Q^pi(s, a) - V^pi(s)."""
    V = policy_evaluation(mdp, pi)
    return q_values(mdp, V) - V[:, None]


def objective(mdp: TabularMDP, pi) -> float:
    """J(pi) = rho @ V^pi."""
    return float(mdp.rho @ policy_evaluation(mdp, pi))


def greedy_policy(Q) -> np.ndarray:
    """Deterministic greedy policy (ties to the lowest action index) as an [S, A] one-hot array."""
    Q = np.asarray(Q)
    pi = np.zeros_like(Q, dtype=np.float64)
    pi[np.arange(Q.shape[0]), Q.argmax(-1)] = 1.0
    return pi


def uniform_policy(mdp: TabularMDP) -> np.ndarray:
    return np.full(mdp.R.shape, 1.0 / mdp.n_actions)


def value_iteration(mdp: TabularMDP, tol: float = 1e-10, max_iter: int = 100_000):
    """Value iteration to sup-norm residual < tol, then one exact policy evaluation of the greedy policy.

    Returns (V*, pi*) where pi* is greedy (one-hot) and V* = V^{pi*} solved exactly.  If the greedy policy
    is not optimal to within tol (can only happen when max_iter was too small), falls back to policy iteration.
    """
    V = np.zeros(mdp.n_states)
    for _ in range(max_iter):
        Vn = q_values(mdp, V).max(-1)
        done = np.max(np.abs(Vn - V)) < tol * (1 - mdp.gamma) / max(2 * mdp.gamma, 1e-300)
        V = Vn
        if done:
            break
    pi = greedy_policy(q_values(mdp, V))
    Vpi = policy_evaluation(mdp, pi)
    if np.max(q_values(mdp, Vpi).max(-1) - Vpi) > max(tol, 1e-9):
        return policy_iteration(mdp)
    return Vpi, pi


def policy_iteration(mdp: TabularMDP, max_iter: int = 10_000):
    """Exact (Howard) policy iteration; returns (V*, greedy pi*)."""
    pi = greedy_policy(mdp.R)
    for _ in range(max_iter):
        V = policy_evaluation(mdp, pi)
        Q = q_values(mdp, V)
        cur = (Q * pi).sum(-1)
        # switch only on strict improvement (avoids cycling among ties)
        better = Q.max(-1) > cur + 1e-12 * (1 + np.abs(cur))
        if not better.any():
            return V, pi
        new = pi.copy()
        idx = np.where(better)[0]
        new[idx] = 0.0
        new[idx, Q[idx].argmax(-1)] = 1.0
        pi = new
    return policy_evaluation(mdp, pi), pi


def state_visitation(mdp: TabularMDP, pi) -> np.ndarray:
    """Unnormalised discounted visitation sum_t gamma^t Pr(s_t = s) = rho^T (I - gamma P_pi)^{-1}."""
    S = mdp.n_states
    return np.linalg.solve((np.eye(S) - mdp.gamma * policy_transition(mdp, pi)).T, mdp.rho)


def discounted_occupancy(mdp: TabularMDP, pi) -> np.ndarray:
    """Normalised d_rho^pi(s) = (1 - gamma) sum_t gamma^t Pr(s_t = s); sums to 1."""
    return (1.0 - mdp.gamma) * state_visitation(mdp, pi)


def softmax_policy(theta) -> np.ndarray:
    """pi(a|s) = exp(theta[s, a]) / sum_a' exp(theta[s, a']) (numerically stable)."""
    theta = np.asarray(theta, dtype=np.float64)
    z = theta - theta.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


def softmax_policy_gradient(mdp: TabularMDP, theta) -> np.ndarray:
    """True gradient dJ/dtheta[s, a] = d_rho^pi(s) pi(a|s) A^pi(s, a) / (1 - gamma) (Agarwal et al. Lemma C.1).

    Written as state_visitation(s) * pi(a|s) * A(s, a), which is the same quantity and also valid for gamma = 0.
    """
    pi = softmax_policy(theta)
    V = policy_evaluation(mdp, pi)
    A = q_values(mdp, V) - V[:, None]
    return state_visitation(mdp, pi)[:, None] * pi * A


def random_mdp(rng, S: int, A: int, gamma: float = 0.9, *, branching: int | None = None,
               reward: str = "uniform", rho: str | np.ndarray = "uniform") -> TabularMDP:
    """A random MDP: each (s, a) has Dirichlet(1) transitions over ``branching`` random next states (all S when
    None); rewards U[0, 1) ("uniform") or Bernoulli-like {0,1} with p=1/2 ("binary"); rho uniform, "dirichlet",
    or an explicit array."""
    rng = np.random.default_rng(rng)
    P = np.zeros((S, A, S))
    k = S if branching is None else int(min(max(branching, 1), S))
    for s in range(S):
        for a in range(A):
            nxt = rng.choice(S, size=k, replace=False)
            P[s, a, nxt] = rng.dirichlet(np.ones(k))
    if reward == "uniform":
        R = rng.uniform(0.0, 1.0, size=(S, A))
    elif reward == "binary":
        R = (rng.uniform(size=(S, A)) < 0.5).astype(np.float64)
    else:
        raise ValueError(f"unknown reward kind {reward!r}")
    if isinstance(rho, str):
        if rho == "uniform":
            r0 = np.full(S, 1.0 / S)
        elif rho == "dirichlet":
            r0 = rng.dirichlet(np.ones(S))
        else:
            raise ValueError(f"unknown rho kind {rho!r}")
    else:
        r0 = np.asarray(rho, dtype=np.float64)
    return TabularMDP(P=P, R=R, gamma=gamma, rho=r0)


def bandit_mdp(rewards) -> TabularMDP:
    """A K-armed bandit with expected rewards r as a 1-state MDP with gamma = 0 (J(pi) = pi @ r)."""
    r = np.asarray(rewards, dtype=np.float64)[None, :]
    K = r.shape[1]
    return TabularMDP(P=np.ones((1, K, 1)), R=r, gamma=0.0, rho=np.ones(1))

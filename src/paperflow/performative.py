"""The strategic-classification environment of performative_zo (papers/performative_zo.py): exact population risk,
its references (performative optimum, stable point), budget and regret accounting, zeroth-order estimators, and the
rate fits. Split out of the paper module (contract v3 kept it under 500 lines); nothing here is paper-specific
beyond the environment.

Response (Perdomo et al. 2020, quadratic cost, linear model): agent i moves its strategic features x'_S = x_S - eps_i w_S.
eps_i may depend on the agent's class (Env(eps_pos=...)): with one eps for every agent the score moves by the same
-eps |w_S|^2 for everyone, the bias absorbs it and the stable point equals the optimum (unit-tested); with
class-dependent eps it does not.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.special import expit


# ---- The strategic environment (exact population risk) and its references

def strategic_response(X: np.ndarray, w: np.ndarray, eps, strategic) -> np.ndarray:
    """Best response of agents with quadratic cost to a linear model (Perdomo et al. 2020): x'_S = x_S - eps w_S;
    eps a number (every agent) or one value per row of X."""
    Xs = np.array(X, dtype=float, copy=True)
    S = list(strategic)
    e = np.asarray(eps, dtype=float)
    Xs[:, S] -= (e[:, None] if e.ndim else e) * np.asarray(w, dtype=float)[S]
    return Xs


def _softplus(z: np.ndarray) -> np.ndarray:  # log(1 + e^z), stable
    return np.logaddexp(0.0, z)


def sample_loss(theta: np.ndarray, Xs: np.ndarray, ys: np.ndarray, lam: float) -> float:
    """Mean regularized logistic loss of theta = (w, b) on (already responded) agents; ys in {-1, +1}."""
    w, b = theta[:-1], theta[-1]
    return float(_softplus(-ys * (Xs @ w + b)).mean() + 0.5 * lam * w @ w)


class Env:
    """One environment population (X standardized, y~ in {-1,+1}) with the exact PR and its gradient. Agents of the
    negative class respond with strength eps, those of the positive class with eps_pos (None: eps, a uniform response)."""

    def __init__(self, X: np.ndarray, y: np.ndarray, eps: float, lam: float, strategic, eps_pos: float | None = None):
        self.X, self.y, self.eps, self.lam = np.asarray(X, float), np.asarray(y, float), float(eps), float(lam)
        self.eps_pos = self.eps if eps_pos is None else float(eps_pos)
        self.eps_i = np.where(self.y > 0, self.eps_pos, self.eps)  # per-agent response strength
        self.eps_bar = float(self.eps_i.mean())  # d E[x_S] / d w_S = -eps_bar (the exact inverse map's slope)
        self.S = np.asarray(strategic, dtype=int)
        self.d = self.X.shape[1] + 1

    def respond(self, theta: np.ndarray, idx=None) -> np.ndarray:
        X, e = (self.X, self.eps_i) if idx is None else (self.X[idx], self.eps_i[idx])
        return strategic_response(X, theta[:-1], e, self.S)

    def score(self, theta: np.ndarray, idx=None) -> np.ndarray:
        """w.x' + b of the responding agents (all, or idx) without building x': w.x - eps_i |w_S|^2 + b."""
        w, b = theta[:-1], theta[-1]
        X, e = (self.X, self.eps_i) if idx is None else (self.X[idx], self.eps_i[idx])
        wS = w[self.S]
        return X @ w - e * (wS @ wS) + b

    def loss(self, theta: np.ndarray, idx=None) -> float:
        """Mean regularized loss of theta on its own induced agents (all: the exact PR, or the agents idx)."""
        y = self.y if idx is None else self.y[idx]
        w = theta[:-1]
        return float(_softplus(-y * self.score(theta, idx)).mean() + 0.5 * self.lam * w @ w)

    def pr(self, theta: np.ndarray) -> float:
        return self.loss(theta)

    def pr_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = theta[:-1], theta[-1]
        Xs = self.respond(theta)
        z = -self.y * (Xs @ w + b)
        s = -self.y / (1.0 + np.exp(-z))  # d softplus(z)/d score
        gw = Xs.T @ s / len(s) + self.lam * w
        gw[self.S] -= w[self.S] * (s * self.eps_i).mean()  # d score_i / d w_S = x_S - 2 eps_i w_S = x'_S - eps_i w_S
        return float(_softplus(z).mean() + 0.5 * self.lam * w @ w), np.append(gw, s.mean())


def logistic_fit(X: np.ndarray, y: np.ndarray, lam: float, theta0=None, iters: int = 25) -> np.ndarray:
    """Exact minimizer of sample_loss on fixed data (Newton; lam > 0 makes it strongly convex in w)."""
    n, d = X.shape
    A = np.hstack([X, np.ones((n, 1))])
    th = np.zeros(d + 1) if theta0 is None else np.array(theta0, float)
    reg = np.append(np.full(d, lam), 1e-6)  # the bias is (almost) unregularized
    obj = lambda t: float(_softplus(-y * (A @ t)).mean() + 0.5 * reg @ (t * t))  # noqa: E731
    f = obj(th)
    for _ in range(iters):
        p = expit(-y * (A @ th))
        g = -(A.T @ (y * p)) / n + reg * th
        H = (A.T * (p * (1 - p))) @ A / n + np.diag(reg)
        step, a = np.linalg.solve(H, g), 1.0
        while a > 1e-4 and obj(th - a * step) > f + 1e-12:  # backtracking: Newton from far starts
            a *= 0.5
        th = th - a * step
        f_new = obj(th)
        if f - f_new < 1e-12:
            break
        f = f_new
    return th


def performative_optimum(env: Env, starts) -> tuple[np.ndarray, float]:
    """PR* by L-BFGS with the exact gradient (the map is known to the reference only) from several starts."""
    from scipy.optimize import minimize

    runs = [minimize(env.pr_grad, np.asarray(s, float), jac=True, method="L-BFGS-B", options={"maxiter": 2000, "gtol": 1e-10})
            for s in starts]
    best = min(runs, key=lambda r: r.fun)
    return best.x, float(best.fun)


def rrm_fixed_point(refit, theta0, rounds: int = 200, tol: float = 1e-9) -> tuple[np.ndarray, bool]:
    """Population RRM theta_{k+1} = refit(theta_k) = argmin_theta E_{D(theta_k)} l(z; theta) (Perdomo et al. 2020)."""
    th = np.array(theta0, float)
    for _ in range(rounds):
        new = np.asarray(refit(th), float)
        if np.abs(new - th).max() < tol:
            return new, True
        th = new
    return th, False


def stable_point(env: Env, theta0: np.ndarray, rounds: int = 200) -> tuple[np.ndarray, float, bool]:
    """The performatively stable point of the environment (RRM on the whole population), its PR, converged."""
    th, conv = rrm_fixed_point(lambda t: logistic_fit(env.respond(t), env.y, env.lam, t), theta0, rounds)
    return th, env.pr(th), conv


# ---- Budget and regret accounting (every environment sample goes through Deployer), ZO estimators

class Deployer:
    """Deploys models on an Env, draws agents, charges the budget and accumulates the regret PR(theta) - PR*."""

    def __init__(self, env: Env, pr_star: float, budget: int, rng: np.random.Generator, tail_frac: float = 0.1):
        self.env, self.pr_star, self.budget, self.rng = env, pr_star, budget, rng
        self.used, self.regret, self.tail_from = 0, 0.0, int(round((1 - tail_frac) * budget))
        self.curve_n, self.curve_r, self.tail_w, self.tail_pr = [], [], 0, 0.0

    def left(self) -> int:
        return self.budget - self.used

    def draw(self, n: int) -> np.ndarray:
        """Indices of n agents (with replacement) of the population."""
        return self.rng.integers(0, len(self.env.y), min(n, self.left()))

    def _charge(self, theta: np.ndarray, n: int) -> None:
        """Account for deploying theta to n agents: budget, regret n (PR(theta) - PR*), the tail's mean PR."""
        pr, start = self.env.pr(theta), self.used
        self.used += n
        self.regret += n * (pr - self.pr_star)
        self.curve_n.append(self.used)
        self.curve_r.append(self.regret)
        tail = max(0, self.used - max(start, self.tail_from))
        self.tail_w, self.tail_pr = self.tail_w + tail, self.tail_pr + tail * pr

    def deploy(self, theta: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Deploy theta to the agents idx (charged: len(idx) samples); returns their responses and labels."""
        self._charge(theta, len(idx))
        return self.env.respond(theta, idx), self.env.y[idx]

    def loss(self, theta: np.ndarray, idx: np.ndarray) -> float:
        """Bandit feedback: the mean loss of the deployed model on its agents (charged like deploy)."""
        self._charge(theta, len(idx))
        return self.env.loss(theta, idx)

    def summary(self, theta_final: np.ndarray) -> dict:
        """Serves the rest of the budget (too small for another step) with the final model, then the run's record."""
        if self.left() > 0:
            self.deploy(theta_final, self.draw(self.left()))
        return {"theta": theta_final, "pr_end": self.tail_pr / max(1, self.tail_w), "pr_final": self.env.pr(theta_final),
                "regret": self.regret, "curve_n": np.array(self.curve_n), "curve_r": np.array(self.curve_r)}


def unit_sphere(rng: np.random.Generator, d: int) -> np.ndarray:
    return (lambda u: u / np.linalg.norm(u))(rng.standard_normal(d))


def two_point_estimate(f, x: np.ndarray, delta: float, u: np.ndarray) -> np.ndarray:
    """d/(2 delta) (f(x + delta u) - f(x - delta u)) u: unbiased for the gradient of the delta-ball smoothing of f."""
    return len(x) / (2 * delta) * (f(x + delta * u) - f(x - delta * u)) * u


def one_point_estimate(f, x: np.ndarray, delta: float, u: np.ndarray) -> np.ndarray:
    """d/delta f(x + delta u) u (Flaxman et al. 2005): unbiased for the same smoothed gradient."""
    return len(x) / delta * f(x + delta * u) * u


def _from_origin(n, r) -> tuple[np.ndarray, np.ndarray]:
    """The regret curve (samples used, R) with its origin (0, 0): a method whose first deployment is large (RRM) has
    no curve point before it, and interpolation must not hold R flat there."""
    n, r = np.asarray(n, float), np.asarray(r, float)
    return (np.r_[0.0, n], np.r_[0.0, r]) if len(n) and n[0] > 0 else (n, r)


def regret_exponent(n: np.ndarray, r: np.ndarray, lo: float, hi: float, points: int) -> float:
    """Least-squares slope of log R on log N at `points` log-spaced N in [lo, hi] (R interpolated on the curve)."""
    grid = np.exp(np.linspace(math.log(lo), math.log(hi), points))
    rr = np.interp(grid, *_from_origin(n, r))
    if np.any(rr <= 0):
        return float("nan")
    return float(np.polyfit(np.log(grid), np.log(rr), 1)[0])


def excess_exponent(n: np.ndarray, r: np.ndarray, lo: float, hi: float, points: int) -> float:
    """Least-squares slope of log e_k on log N_k, e_k = (R(N_{k+1}) - R(N_k)) / (N_{k+1} - N_k) the mean per-sample
    excess PR(theta_deployed) - PR* over the k-th of the points - 1 log-spaced windows of [lo, hi], N_k their geometric
    midpoints. R is piecewise linear between deployments, so the interpolation is exact. Negative: the per-sample excess
    decays (sublinear regret, the quantity the theorem bounds: R(N)/N = O(N^(-1/6))); nan if a window has no excess."""
    grid = np.exp(np.linspace(math.log(lo), math.log(hi), points))
    rr = np.interp(grid, *_from_origin(n, r))
    e = np.diff(rr) / np.diff(grid)
    if np.any(e <= 0):
        return float("nan")
    return float(np.polyfit(0.5 * (np.log(grid[1:]) + np.log(grid[:-1])), np.log(e), 1)[0])

"""Gradient-combination methods for multi-task learning, as hooks for `paperflow.loop.train_loop`.

Every method here is a *combiner*: `combine(G, losses) -> direction`, where G is (K, P) (one flattened
gradient of the shared parameters per task, as train_loop builds it), losses is (K,) and the (P,)
direction is written into the shared parameters' .grad. Task-specific parameters (heads) always get the
gradient of the summed losses (train_loop does that), as in the official code of all methods below.

Methods and the official code they follow (OptMN-Lab/fairgrad, methods/weight_methods.py, which itself
follows the Nash-MTL / LibMTL family of code bases):

- "ls"       linear scalarization: direction = sum_k g_k (LinearScalarization, task weights 1 -> a sum,
             not a mean).
- "mgda"     MGDA (Sener & Koltun, NeurIPS 2018): w = argmin_{w in simplex} ||w^T G||^2, solved on the
             K x K Gram matrix with the MGDA-UB MinNormSolver (closed form for K = 2, projected gradient
             with exact line search for K > 2); direction = K * sum_k w_k g_k (the code scales the weights
             by K "to make sure it sums to n_tasks"); gradient normalisation "none" (their default).
- "pcgrad"   PCGrad (Yu et al., NeurIPS 2020): every g_i is projected onto the normal plane of each g_j
             it conflicts with (g_i . g_j < 0), visiting the g_j in a random order; direction = sum_i of
             the projected g_i (reduction "sum").
- "fairgrad" FairGrad (Ban & Ji, ICML 2024): w > 0 solves the alpha-fair optimality condition
             A w = w^(-1/alpha) with A = G G^T (K x K), by scipy least squares started at 1/K with bounds
             (0, inf) exactly as the official code; direction = K * sum_k w_k g_k (their overwrite_grad
             multiplies by n_tasks "to match the sum loss").

Clipping, as the official code effectively does it: `WeightMethod.backward` calls
clip_grad_norm_(shared, max_norm=1.0) *before* loss.backward(), right after optimizer.zero_grad(), so
for LS and MGDA (and STL) it clips nothing; PCGrad and FairGrad override backward and clip the shared
gradient to norm 1.0 after writing it. The factories below therefore default to max_norm=0 (off) for
"ls"/"mgda" and max_norm=1.0 for "pcgrad"/"fairgrad"; pass max_norm to change that.

Add a method by writing a factory `make_x(**options) -> combiner` and one line in COMBINERS.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

Combiner = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

MGDA_MAX_ITER = 250  # MinNormSolver.MAX_ITER
MGDA_STOP_CRIT = 1e-5  # MinNormSolver.STOP_CRIT


# ----------------------------------------------------------------------------------------------------
# Pure functions: weights from the Gram matrix, projections, clipping.


def gram(G: torch.Tensor) -> np.ndarray:
    """A = G G^T in float64, (K, K): every weighting method below only needs inner products."""
    G64 = G.detach().to(torch.float64)
    return (G64 @ G64.T).cpu().numpy()


def clip_direction(direction: torch.Tensor, max_norm: float) -> torch.Tensor:
    """Scale `direction` to norm max_norm if it is longer (torch.nn.utils.clip_grad_norm_'s rule)."""
    if max_norm <= 0:
        return direction
    norm = float(direction.norm())
    coef = max_norm / (norm + 1e-6)  # clip_grad_norm_ adds 1e-6 to the norm
    return direction * coef if coef < 1.0 else direction


def fairgrad_weights(A: np.ndarray, alpha: float) -> np.ndarray:
    """alpha-fair weights: w > 0 with A w = w^(-1/alpha) (FairGrad's optimality condition), (K,).

    The FairGrad update d = sum_k w_k g_k maximises sum_k u_alpha(g_k^T d) with the alpha-fair utility
    u_alpha(x) = x^(1-alpha) / (1-alpha) under ||d|| <= 1; its KKT condition, up to scale, is
    g_k^T d = w_k^(-1/alpha), i.e. (G G^T w)_k = w_k^(-1/alpha). Solved as the official code does: scipy
    least_squares on the residual A w - (1/w)^(1/alpha), start 1/K, bounds (0, inf) (method "trf").
    """
    K = A.shape[0]

    def residual(w: np.ndarray) -> np.ndarray:  # (K,)
        return A @ w - np.power(1.0 / w, 1.0 / alpha)

    from scipy.optimize import least_squares  # here, not at import: scipy.optimize costs ~0.5 s per job start

    return least_squares(residual, np.ones(K) / K, bounds=(0, np.inf)).x


def min_norm_2(v1v1: float, v1v2: float, v2v2: float) -> tuple[float, float]:
    """argmin_c ||c x1 + (1-c) x2||^2 on [0, 1] from the inner products: (c, squared norm).

    Interior: c = (v2v2 - v1v2) / (v1v1 + v2v2 - 2 v1v2). At the ends MGDA-UB's solver returns
    c = 0.999 / 0.001 rather than 1 / 0 (kept here, so the result matches their weights).
    """
    if v1v2 >= v1v1:  # x1 is the min-norm point
        return 0.999, v1v1
    if v1v2 >= v2v2:  # x2 is the min-norm point
        return 0.001, v2v2
    c = (v2v2 - v1v2) / (v1v1 + v2v2 - 2 * v1v2)
    return c, v2v2 + c * (v1v2 - v2v2)


def _projection_to_simplex(y: np.ndarray) -> np.ndarray:
    """Euclidean projection of y onto the probability simplex (sort-based rule of MinNormSolver)."""
    m = len(y)
    s = np.sort(y)[::-1]
    tmpsum, tmax_f = 0.0, (np.sum(y) - 1.0) / m
    for i in range(m - 1):
        tmpsum += s[i]
        tmax = (tmpsum - 1.0) / (i + 1)
        if tmax > s[i + 1]:
            tmax_f = tmax
            break
    return np.maximum(y - tmax_f, 0.0)


def _next_point(cur: np.ndarray, grad: np.ndarray) -> np.ndarray:
    """A step along the simplex-projected descent direction to the simplex boundary (MinNormSolver)."""
    n = len(cur)
    proj_grad = grad - np.sum(grad) / n
    tm1 = -cur[proj_grad < 0] / proj_grad[proj_grad < 0]
    tm2 = (1.0 - cur[proj_grad > 0]) / proj_grad[proj_grad > 0]
    t = 1.0
    if np.any(tm1 > 1e-7):
        t = np.min(tm1[tm1 > 1e-7])
    if np.any(tm2 > 1e-7):
        t = min(t, np.min(tm2[tm2 > 1e-7]))
    return _projection_to_simplex(proj_grad * t + cur)


def mgda_weights(A: np.ndarray) -> np.ndarray:
    """Min-norm point of the convex hull of the task gradients: simplex weights w, (K,).

    MGDA-UB's MinNormSolver.find_min_norm_element on the Gram matrix A = G G^T: start at the best pair
    (closed form above); for K = 2 that is the answer; for K > 2 iterate a projected-gradient step
    followed by the exact line search between the current and the new point, until the weights move
    less than 1e-5 (L1) or after 250 iterations.
    """
    K = A.shape[0]
    if K == 1:
        return np.ones(1)
    best = None
    for i in range(K):
        for j in range(i + 1, K):
            c, d = min_norm_2(A[i, i], A[i, j], A[j, j])
            if best is None or d < best[2]:
                best = (i, j, c, d)
    i, j, c, _ = best
    w = np.zeros(K)
    w[i], w[j] = c, 1.0 - c
    if K < 3:
        return w
    for _ in range(MGDA_MAX_ITER):
        new = _next_point(w, -A @ w)
        c, _ = min_norm_2(w @ A @ w, w @ A @ new, new @ A @ new)
        new_w = c * w + (1 - c) * new
        if np.sum(np.abs(new_w - w)) < MGDA_STOP_CRIT:
            break
        w = new_w
    return w


def pcgrad_project(G: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """PCGrad's projected gradients, (K, P): for each i, for j in a random order (all K tasks, as in the
    official code; j = i never conflicts), if g_i' . g_j < 0 then g_i' -= (g_i' . g_j / ||g_j||^2) g_j.
    The projections use the running g_i' and the original g_j. A fresh order is drawn for every i.
    """
    K = G.shape[0]
    out = G.clone()
    sq = (G * G).sum(1)  # (K,) ||g_j||^2
    for i in range(K):
        for j in torch.randperm(K, generator=generator).tolist():
            dot = torch.dot(out[i], G[j])
            if dot < 0:
                out[i] = out[i] - dot / sq[j] * G[j]
    return out


# ----------------------------------------------------------------------------------------------------
# Combiners: small callables holding the method's options (and the last weights, for inspection).


class WeightedCombiner:
    """direction = scale * sum_k w_k g_k with w = weight_fn(G G^T), then clip to max_norm."""

    def __init__(self, weight_fn: Callable[[np.ndarray], np.ndarray], scale_by_k: bool, max_norm: float):
        self.weight_fn, self.scale_by_k, self.max_norm = weight_fn, scale_by_k, max_norm
        self.last_weights: np.ndarray | None = None

    def __call__(self, G: torch.Tensor, losses: torch.Tensor) -> torch.Tensor:
        w = self.weight_fn(gram(G))  # (K,)
        self.last_weights = w
        if self.scale_by_k:
            w = w * G.shape[0]
        direction = torch.as_tensor(w, dtype=G.dtype, device=G.device) @ G  # (P,)
        return clip_direction(direction, self.max_norm)


class PCGradCombiner:
    """direction = sum (or mean) of PCGrad-projected gradients, then clip to max_norm."""

    def __init__(self, seed: int, reduction: str, max_norm: float):
        if reduction not in ("sum", "mean"):
            raise ValueError(f"pcgrad reduction must be sum|mean, got {reduction!r}")
        self.generator = torch.Generator().manual_seed(seed)
        self.reduction, self.max_norm = reduction, max_norm

    def __call__(self, G: torch.Tensor, losses: torch.Tensor) -> torch.Tensor:
        projected = pcgrad_project(G, self.generator)  # (K, P)
        direction = projected.sum(0) if self.reduction == "sum" else projected.mean(0)
        return clip_direction(direction, self.max_norm)


def make_ls(weights: tuple[float, ...] | None = None, max_norm: float = 0.0) -> Combiner:
    """Linear scalarization: sum_k c_k g_k with fixed c (default all 1, the official LS)."""

    def fixed(A: np.ndarray) -> np.ndarray:
        return np.ones(A.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64)

    return WeightedCombiner(fixed, scale_by_k=False, max_norm=max_norm)


def make_mgda(max_norm: float = 0.0, scale_by_k: bool = True) -> Combiner:
    return WeightedCombiner(mgda_weights, scale_by_k=scale_by_k, max_norm=max_norm)


def make_pcgrad(seed: int = 0, reduction: str = "sum", max_norm: float = 1.0) -> Combiner:
    return PCGradCombiner(seed=seed, reduction=reduction, max_norm=max_norm)


def make_fairgrad(alpha: float = 2.0, max_norm: float = 1.0, scale_by_k: bool = True) -> Combiner:
    if alpha <= 0:
        raise ValueError(f"fairgrad alpha must be > 0, got {alpha}")
    return WeightedCombiner(lambda A: fairgrad_weights(A, alpha), scale_by_k=scale_by_k, max_norm=max_norm)


# name -> factory(**options) -> combiner; an option a method does not take raises (TypeError).
COMBINERS: dict[str, Callable[..., Combiner]] = {
    "ls": make_ls,
    "mgda": make_mgda,
    "pcgrad": make_pcgrad,
    "fairgrad": make_fairgrad,
}


def make_combiner(name: str, **options: object) -> Combiner:
    """COMBINERS[name](**options); an unknown name raises with the list of known ones."""
    if name not in COMBINERS:
        raise KeyError(f"unknown MTL combiner {name!r}; known: {', '.join(sorted(COMBINERS))}")
    return COMBINERS[name](**options)

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

State: the combiners above (ls, mgda, pcgrad, fairgrad) hold no state across steps (only `last_weights` for
inspection, and PCGrad's random generator). Methods whose weights evolve over training ("excessmtl", "dwa",
"groupdro", added below) are callable objects holding their state (accumulators, running weights, loss
history): make ONE instance per training run and let train_loop call it once per step. "nashmtl" (Nash-MTL)
is stateless here (the official warm start only seeds its iterative solver). The BayesAgg-MTL functions at the
end are not combiners: they aggregate gradients with respect to the shared representation.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

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


# ----------------------------------------------------------------------------------------------------
# Stateful combiners (added for ExcessMTL, ICML 2024, and its loss-based baselines) and Nash-MTL.
#
# The combiners above hold no state across steps (only `last_weights`, for inspection). The ones below
# keep state between calls: a combiner is a callable object, and ONE instance must live for the whole
# run (make a fresh one per training run; train_loop calls it once per step, in step order).
#
# - "excessmtl" ExcessMTL (He et al., ICML 2024; official code yifei-he/ExcessMTL,
#             LibMTL/weighting/ExcessMTL.py): per task k an AdaGrad accumulator a_k += g_k^2 (elementwise);
#             excess-risk proxy w_k = g_k^T diag(1 / sqrt(a_k + 1e-7)) g_k (the Taylor / diagonal-Fisher
#             estimate); the FIRST call only stores w_first (task weights stay 1); every later call sets
#             lambda_k <- lambda_k exp(eta w_k / w_first,k), then lambda <- K lambda / sum(lambda);
#             direction = sum_k lambda_k g_k (the official code backpropagates sum_k lambda_k L_k).
# - "dwa"      Dynamic Weight Average (Liu et al., CVPR 2019; LibMTL DWA): with L_k(e) the mean training
#             loss of task k over "epoch" e (here: consecutive windows of `period` steps), the weights of
#             epoch e >= 2 are lambda = K softmax(r / T), r_k = L_k(e-1) / L_k(e-2); epochs 0 and 1 use 1.
# - "groupdro" GroupDRO-style max-loss weighting (LibMTL GroupDRO, as used by the ExcessMTL paper):
#             exponentiated gradient on the task losses, lambda_k <- lambda_k exp(eta L_k), renormalised to
#             sum K, updated before it is used in the same step.
# - "nashmtl"  Nash-MTL (Navon et al., ICML 2022; official AvivNavon/nash-mtl, methods/weight_methods.py):
#             the Gram matrix is normalised by its Frobenius norm, A_n = A / ||A||_F, and alpha > 0 solves
#             the bargaining condition A_n alpha = 1 / alpha; direction = sum_k alpha_k g_k, clipped to norm
#             1.0 (their max_norm). The official code approximates the solution with 20 steps of a
#             convex-concave procedure in cvxpy (ECOS), warm-started at the previous alpha; cvxpy is not
#             installed here, so the condition is solved with scipy.optimize.least_squares (the same solve
#             as fairgrad_weights with alpha = 1, which is exactly Nash-MTL's condition).


class ExcessMTLCombiner:
    """ExcessMTL task weights from exponentiated excess-risk estimates (stateful; see the notes above)."""

    def __init__(self, step_size: float = 1e-2, eps: float = 1e-7, max_norm: float = 0.0):
        if step_size <= 0:
            raise ValueError(f"excessmtl step_size must be > 0, got {step_size}")
        self.step_size, self.eps, self.max_norm = step_size, eps, max_norm
        self.grad_sq_sum: torch.Tensor | None = None  # (K, P) AdaGrad accumulator per task
        self.first: torch.Tensor | None = None  # (K,) excess-risk proxy at the first call
        self.weights: torch.Tensor | None = None  # (K,) lambda, sums to K
        self.last_risks: torch.Tensor | None = None

    def excess_risks(self, G: torch.Tensor) -> torch.Tensor:
        """Update the accumulators with G and return w_k = g_k^T diag(1/sqrt(a_k + eps)) g_k, (K,)."""
        G = G.detach()
        if self.grad_sq_sum is None:
            self.grad_sq_sum = torch.zeros_like(G)
        self.grad_sq_sum += G * G
        return (G * G / torch.sqrt(self.grad_sq_sum + self.eps)).sum(1)

    def __call__(self, G: torch.Tensor, losses: torch.Tensor) -> torch.Tensor:
        K = G.shape[0]
        if self.weights is None:
            self.weights = torch.ones(K, dtype=torch.float64)
        w = self.excess_risks(G).to(torch.float64)
        self.last_risks = w
        if self.first is None:
            self.first = w.clone()  # the first step only stores the reference values
        else:
            lam = self.weights * torch.exp(self.step_size * w / self.first)
            self.weights = lam / lam.sum() * K
        direction = self.weights.to(dtype=G.dtype, device=G.device) @ G
        return clip_direction(direction, self.max_norm)


def dwa_weights(prev: np.ndarray, prev2: np.ndarray, temperature: float) -> np.ndarray:
    """K softmax((L(e-1) / L(e-2)) / T): DWA's weights from the last two epochs' mean task losses, (K,)."""
    r = np.asarray(prev, dtype=np.float64) / np.asarray(prev2, dtype=np.float64)
    z = np.exp((r - r.max()) / temperature)
    return len(r) * z / z.sum()


class DWACombiner:
    """Dynamic Weight Average over windows ("epochs") of `period` steps (stateful)."""

    def __init__(self, period: int, temperature: float = 2.0, max_norm: float = 0.0):
        if period < 1 or temperature <= 0:
            raise ValueError(f"dwa needs period >= 1 and temperature > 0, got {period}, {temperature}")
        self.period, self.temperature, self.max_norm = period, temperature, max_norm
        self.step = 0
        self.history: list[np.ndarray] = []  # mean task losses of each finished epoch
        self._sum: np.ndarray | None = None
        self._count = 0
        self.last_weights: np.ndarray | None = None

    def __call__(self, G: torch.Tensor, losses: torch.Tensor) -> torch.Tensor:
        if self.step > 0 and self.step % self.period == 0:  # an epoch just ended
            self.history.append(self._sum / self._count)
            self._sum, self._count = None, 0
        K = G.shape[0]
        w = dwa_weights(self.history[-1], self.history[-2], self.temperature) if len(self.history) >= 2 else np.ones(K)
        loss_np = losses.detach().to(torch.float64).cpu().numpy()
        self._sum = loss_np.copy() if self._sum is None else self._sum + loss_np
        self._count += 1
        self.step += 1
        self.last_weights = w
        direction = torch.as_tensor(w, dtype=G.dtype, device=G.device) @ G
        return clip_direction(direction, self.max_norm)


class GroupDROCombiner:
    """Exponentiated-gradient (max-loss) task weights on the task losses (stateful)."""

    def __init__(self, step_size: float = 1e-2, max_norm: float = 0.0):
        if step_size <= 0:
            raise ValueError(f"groupdro step_size must be > 0, got {step_size}")
        self.step_size, self.max_norm = step_size, max_norm
        self.weights: torch.Tensor | None = None

    def __call__(self, G: torch.Tensor, losses: torch.Tensor) -> torch.Tensor:
        K = G.shape[0]
        lam = torch.ones(K, dtype=torch.float64) if self.weights is None else self.weights
        lam = lam * torch.exp(self.step_size * losses.detach().to(torch.float64).cpu())
        self.weights = lam / lam.sum() * K
        direction = self.weights.to(dtype=G.dtype, device=G.device) @ G
        return clip_direction(direction, self.max_norm)


def nashmtl_weights(A: np.ndarray) -> np.ndarray:
    """Nash-MTL's alpha > 0 with A_n alpha = 1/alpha, A_n = A / ||A||_F (the official normalisation), (K,).
    Equivalently w = alpha / sqrt(||A||_F) solves the bargaining condition on A itself: (A w)_k = 1 / w_k."""
    norm = float(np.linalg.norm(A))
    return fairgrad_weights(A / norm, 1.0)


def make_excessmtl(step_size: float = 1e-2, max_norm: float = 0.0) -> Combiner:
    return ExcessMTLCombiner(step_size=step_size, max_norm=max_norm)


def make_dwa(period: int = 100, temperature: float = 2.0, max_norm: float = 0.0) -> Combiner:
    return DWACombiner(period=period, temperature=temperature, max_norm=max_norm)


def make_groupdro(step_size: float = 1e-2, max_norm: float = 0.0) -> Combiner:
    return GroupDROCombiner(step_size=step_size, max_norm=max_norm)


def make_nashmtl(max_norm: float = 1.0) -> Combiner:
    return WeightedCombiner(nashmtl_weights, scale_by_k=False, max_norm=max_norm)


COMBINERS.update({"excessmtl": make_excessmtl, "dwa": make_dwa, "groupdro": make_groupdro, "nashmtl": make_nashmtl})


# ----------------------------------------------------------------------------------------------------
# BayesAgg-MTL (Achituve et al., ICML 2024; official ssi-research/BayesAgg_MTL, BayesAgg_MTL/BayesAggMTL.py).
# Not a (K, P) combiner: it aggregates the gradients of the task losses with respect to the shared
# REPRESENTATION h (per example and per dimension), which the caller backpropagates through the trunk.
# Each task's linear head theta = [W, b] (C, D+1) gets a Gaussian posterior; for a multi-class task this
# is the official Taylor (Laplace/GGN) approximation: one Newton step from the current head on the
# summed batch cross-entropy plus the Gaussian prior, precision = GGN + prior precision. The posterior
# induces a distribution over dL/dh = W^T (softmax(W h + b) - onehot(y)); its per-example mean and
# diagonal variance are estimated by Monte Carlo. Aggregation (GaussianAgg.aggregate): per example and
# dimension, the precision-weighted mean of the task means, Lambda_k = 1 / var_k^p (variances clamped at
# 1e-8 and raised to sqrt_power p), divided by the batch size.


def _with_bias(h: torch.Tensor) -> torch.Tensor:
    return torch.cat([h, torch.ones(h.shape[0], 1, dtype=h.dtype, device=h.device)], 1)  # (B, D+1)


def ggn_multiclass(h: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """sum_m (diag(p_m) - p_m p_m^T) kron (h~_m h~_m^T), h~ = [h, 1]: the GGN of the summed cross-entropy
    w.r.t. theta = [W, b].flatten() (index c (D+1) + j), (C(D+1), C(D+1)). Computed as a block diagonal
    minus V^T V with V_m = p_m kron h~_m, which avoids the (B, C, C(D+1)) Jacobians."""
    hb = _with_bias(h)
    B, D1 = hb.shape
    C = probs.shape[1]
    blocks = torch.einsum("mc,mp,mq->cpq", probs, hb, hb)  # (C, D1, D1)
    V = (probs[:, :, None] * hb[:, None, :]).reshape(B, C * D1)
    return torch.block_diag(*blocks) - V.T @ V


def _safe_cholesky(A: torch.Tensor) -> torch.Tensor:
    """Cholesky factor of a symmetric p.d. matrix, adding jitter 1e-7 * 10^i to the diagonal if needed
    (the official psd_safe_cholesky rule)."""
    L, info = torch.linalg.cholesky_ex(A)
    jitter = 1e-7 if A.dtype == torch.float32 else 1e-9
    for i in range(25):
        if not bool(info):
            return L
        L, info = torch.linalg.cholesky_ex(A + jitter * 10**i * torch.eye(A.shape[0], dtype=A.dtype, device=A.device))
    raise ValueError("ggn posterior precision is not positive definite")


def laplace_multiclass_posterior(h: torch.Tensor, y: torch.Tensor, theta: torch.Tensor, prior_mean: torch.Tensor,
                                 prior_precision: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian posterior over a multi-class head theta (C, D+1) (weights then bias column) from a batch
    (h (B, D), y (B,)) and a Gaussian prior (mean (C(D+1),), precision (C(D+1), C(D+1))):
    precision = GGN + prior precision, mean = theta - precision^-1 (grad_theta sum_m CE_m + prior_precision
    (theta - prior_mean)). Returns (mean (C(D+1),), Cholesky factor L of the precision)."""
    h, theta = h.detach(), theta.detach()
    hb = _with_bias(h)
    probs = torch.softmax(hb @ theta.T, dim=1)  # (B, C)
    resid = probs - F.one_hot(y, theta.shape[0]).to(probs.dtype)
    flat = theta.reshape(-1)
    a = (resid.T @ hb).reshape(-1) + prior_precision @ (flat - prior_mean)
    L = _safe_cholesky(ggn_multiclass(h, probs) + prior_precision)
    return flat - torch.cholesky_solve(a[:, None], L)[:, 0], L


def sample_gaussian_precision(mean: torch.Tensor, precision_chol: torch.Tensor, n: int,
                              generator: torch.Generator | None = None) -> torch.Tensor:
    """n samples of N(mean, Lambda^-1) with Lambda = L L^T: mean + L^-T eps, (n, dim)."""
    eps = torch.randn(mean.shape[0], n, generator=generator, dtype=mean.dtype)
    return mean + torch.linalg.solve_triangular(precision_chol.T, eps, upper=True).T


def mc_grad_moments_multiclass(h: torch.Tensor, y: torch.Tensor, mean: torch.Tensor, precision_chol: torch.Tensor,
                               n_samples: int, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Monte-Carlo mean and (population) variance over theta ~ posterior of the per-example gradient of the
    cross-entropy w.r.t. the representation, dL_m/dh_m = W^T (softmax(W h_m + b) - onehot(y_m)): (B, D), (B, D)."""
    h = h.detach()
    B, D = h.shape
    thetas = sample_gaussian_precision(mean, precision_chol, n_samples, generator).view(n_samples, -1, D + 1)
    W, b = thetas[..., :D], thetas[..., D]  # (S, C, D), (S, C)
    logits = torch.einsum("bd,scd->sbc", h, W) + b[:, None, :]
    resid = torch.softmax(logits, dim=-1) - F.one_hot(y, W.shape[1]).to(h.dtype)[None]
    g = torch.einsum("scd,sbc->sbd", W, resid)  # (S, B, D)
    mu = g.mean(0)
    return mu, (g * g).mean(0) - mu * mu


def bayesagg_aggregate(means: torch.Tensor, variances: torch.Tensor, sqrt_power: float = 1.0,
                       min_var: float = 1e-8) -> torch.Tensor:
    """GaussianAgg: per example and dimension sum_k Lambda_k mu_k / sum_k Lambda_k, divided by the batch
    size, with Lambda_k = 1 / clamp(var_k, min_var)^sqrt_power. means, variances (K, B, D) -> (B, D)."""
    prec = 1.0 / variances.clamp(min=min_var) ** sqrt_power
    return (prec * means).sum(0) / prec.sum(0) / means.shape[1]


# ----------------------------------------------------------------------------------------------------
# CAGrad (Liu et al., NeurIPS 2021), added for MOOSF (papers/moosf.py); official code Cranial-XIX/CAGrad
# (nyuv2/utils.py::cagrad with rescale=1, overwrite_grad's "* n_tasks"). Registered as "cagrad".


def cagrad_weights(A: np.ndarray, alpha: float) -> np.ndarray:
    """CAGrad's dual weights w on the simplex, (K,): argmin_w w^T A b + c sqrt(w^T A w) with b = 1/K (so
    G^T b = g0, the mean gradient) and c = alpha ||g0|| = alpha sqrt(mean(A)); A = G G^T. Solved as the
    official code: scipy.optimize.minimize from 1/K with bounds (0, 1) and the constraint sum w = 1 (SLSQP),
    here with the analytic gradients of objective and constraint."""
    from scipy.optimize import minimize  # here, not at import: scipy.optimize costs ~0.5 s per job start

    K = A.shape[0]
    b = np.ones(K) / K
    c = alpha * np.sqrt(A.mean() + 1e-8) + 1e-8

    def objective(w: np.ndarray) -> float:
        return float(w @ A @ b + c * np.sqrt(w @ A @ w + 1e-8))

    def jacobian(w: np.ndarray) -> np.ndarray:  # analytic (the official code lets SLSQP difference it: same optimum, ~4x slower)
        return A @ b + c * (A @ w) / np.sqrt(w @ A @ w + 1e-8)

    res = minimize(objective, b.copy(), jac=jacobian, bounds=[(0.0, 1.0)] * K,
                   constraints=({"type": "eq", "fun": lambda w: 1.0 - np.sum(w), "jac": lambda w: -np.ones(K)},))
    return res.x


class CAGradCombiner:
    """direction = scale * (g0 + c / ||g_w|| * g_w) / (1 + alpha^2), g0 = mean_k g_k, g_w = sum_k w_k g_k with
    w = cagrad_weights, c = alpha ||g0||; scale = K (official overwrite_grad "to match the sum loss") or 1.
    g0 + c g_w/||g_w|| maximises min_k g_k^T d over the ball ||d - g0|| <= c ||g0|| (CAGrad's primal)."""

    def __init__(self, alpha: float, scale_by_k: bool, max_norm: float,
                 solver: Callable[[np.ndarray, float], np.ndarray] | None = None):
        if alpha < 0:
            raise ValueError(f"cagrad alpha must be >= 0, got {alpha}")
        self.alpha, self.scale_by_k, self.max_norm = alpha, scale_by_k, max_norm
        self.solver = solver or cagrad_weights  # solver(A, alpha) -> w: another exact solver of the same dual
        self.last_weights: np.ndarray | None = None

    def __call__(self, G: torch.Tensor, losses: torch.Tensor) -> torch.Tensor:
        A = gram(G)
        w = self.solver(A, self.alpha)
        self.last_weights = w
        K = G.shape[0]
        c = self.alpha * float(np.sqrt(A.mean() + 1e-8)) + 1e-8
        gw = torch.as_tensor(w, dtype=G.dtype, device=G.device) @ G
        direction = G.mean(0) + c / (float(gw.norm()) + 1e-8) * gw
        direction = direction / (1.0 + self.alpha ** 2)
        if self.scale_by_k:
            direction = direction * K
        return clip_direction(direction, self.max_norm)


def make_cagrad(alpha: float = 0.5, scale_by_k: bool = True, max_norm: float = 0.0,
                solver: Callable[[np.ndarray, float], np.ndarray] | None = None) -> Combiner:
    return CAGradCombiner(alpha=alpha, scale_by_k=scale_by_k, max_norm=max_norm, solver=solver)


COMBINERS["cagrad"] = make_cagrad

"""Stochastic block models, spectral clustering and community-recovery accuracy: the one shared copy (issue 29).

Used by the graph papers whose setting is a generated SBM (mv_sbm, deepwalk_sbm; other graph papers may reuse it).
Everything is numpy/scipy (scipy.sparse.linalg and scipy.optimize imported inside the functions that need them).

Model (the parametrisation of the SBM literature the MV-SBM paper uses): n vertices, k balanced communities, average
degree d and bias eps in [0, k]:
    P(i ~ j) = (1 + (1 - 1/k) eps) d / n   if i, j are in the same community,
               (1 - eps / k) d / n          otherwise,
so the expected degree is d (up to the O(1/n) self-pair), the within/between densities differ by eps d / n, and the
signal-to-noise ratio of one graph is SNR = eps^2 d / k^2 (weak recovery is efficiently possible above 1: the
Kesten-Stigum threshold). `sbm_probs` gives the k x k matrix, `sample_sbm` draws an undirected simple graph from any
k x k probability matrix exactly (a binomial edge count per block pair, then that many distinct pairs), and
`measured_block_stats` reads (d, eps, SNR) back from a graph and the true labels (what the papers log as measured).

Clustering: `spectral_embedding` is regularised spectral clustering (Amini et al. 2013; Qin & Rohe 2013): the top-k
eigenvectors of D_tau^{-1/2} W D_tau^{-1/2} with D_tau = D + tau I and tau = tau_factor x the mean degree (rows
normalised to unit length), robust to the high-degree vertices of sparse graphs; `kmeans_labels` rounds an
embedding to k labels (k-means++ seeds and Lloyd's iterations in numpy, fixed seed). `recovery_accuracy` is the agreement with the truth under
the best relabelling (Hungarian algorithm on the confusion matrix, scipy.optimize.linear_sum_assignment), `overlap`
the chance-corrected version (acc - 1/k) / (1 - 1/k) (0 = chance, 1 = exact).
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import scipy.sparse as sp


# ---------------------------------------------------------------------------------------------- the model


def sbm_probs(n: int, k: int, d: float, eps: float) -> np.ndarray:
    """k x k edge probabilities of the symmetric SBM with average degree d and bias eps (module docstring)."""
    if not (k >= 2 and n > k and d > 0):
        raise ValueError(f"sbm_probs: need k >= 2, n > k, d > 0 (got n={n}, k={k}, d={d})")
    if not 0.0 <= eps <= k:
        raise ValueError(f"sbm_probs: eps must be in [0, k={k}], got {eps}")
    p_in = (1.0 + (1.0 - 1.0 / k) * eps) * d / n
    p_out = (1.0 - eps / k) * d / n
    if p_in > 1.0:
        raise ValueError(f"sbm_probs: within-community probability {p_in:.3g} > 1 (d={d}, eps={eps}, n={n})")
    probs = np.full((k, k), p_out)
    np.fill_diagonal(probs, p_in)
    return probs


def snr(d: float, eps: float, k: int) -> float:
    """eps^2 d / k^2: one graph's signal-to-noise ratio (Kesten-Stigum threshold at 1)."""
    return eps * eps * d / (k * k)


def balanced_labels(n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """n labels in 0..k-1, community sizes differing by at most one, in random order."""
    return rng.permutation(np.arange(n) % k).astype(np.int64)


def _pairs_of_triangle(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index t of the strict lower triangle (row-major: (1,0), (2,0), (2,1), ...) -> (i, j) with j < i."""
    i = np.floor((1.0 + np.sqrt(8.0 * t.astype(np.float64) + 1.0)) / 2.0).astype(np.int64)
    # float rounding at huge t: fix i so that i(i-1)/2 <= t < i(i+1)/2
    i -= (i * (i - 1) // 2 > t).astype(np.int64)
    i += ((i + 1) * i // 2 <= t).astype(np.int64)
    j = t - i * (i - 1) // 2
    return i, j


def sample_sbm(labels: np.ndarray, probs: np.ndarray, rng: np.random.Generator) -> sp.csr_matrix:
    """An undirected simple graph (symmetric 0/1 CSR adjacency, no self-loops) with P(i ~ j) = probs[l_i, l_j],
    exactly: per block pair, an edge count ~ Binomial(#pairs, p) and that many distinct pairs drawn uniformly."""
    labels = np.asarray(labels, dtype=np.int64)
    n, k = labels.shape[0], probs.shape[0]
    members = [np.flatnonzero(labels == r) for r in range(k)]
    rows, cols = [], []
    for r in range(k):
        for s in range(r, k):
            p = float(probs[r, s])
            if p <= 0:
                continue
            a, b = members[r], members[s]
            n_pairs = a.size * (a.size - 1) // 2 if r == s else a.size * b.size
            if n_pairs == 0:
                continue
            m = int(rng.binomial(n_pairs, min(p, 1.0)))
            if m == 0:
                continue
            t = rng.choice(n_pairs, size=m, replace=False)
            if r == s:
                i, j = _pairs_of_triangle(t)
                u, v = a[i], a[j]
            else:
                u, v = a[t // b.size], b[t % b.size]
            rows.append(u)
            cols.append(v)
    if not rows:
        return sp.csr_matrix((n, n), dtype=np.float64)
    u, v = np.concatenate(rows), np.concatenate(cols)
    data = np.ones(2 * u.size, dtype=np.float64)
    adj = sp.coo_matrix((data, (np.concatenate([u, v]), np.concatenate([v, u]))), shape=(n, n)).tocsr()
    adj.sum_duplicates()
    return adj


def measured_block_stats(adj: sp.spmatrix, labels: np.ndarray, k: int) -> dict:
    """(d, eps, snr, p_in, p_out) of a graph read with the true labels: d = 2|E| / n, p_in / p_out = the observed
    within / between edge densities, eps = (p_in - p_out) n / d (the model's eps when the graph follows it)."""
    labels = np.asarray(labels, dtype=np.int64)
    n = labels.shape[0]
    coo = sp.triu(adj, k=1).tocoo()
    w = coo.data
    same = labels[coo.row] == labels[coo.col]
    sizes = np.bincount(labels, minlength=k).astype(np.float64)
    pairs_in = float((sizes * (sizes - 1) / 2).sum())
    pairs_out = n * (n - 1) / 2 - pairs_in
    e_in, e_out = float(w[same].sum()), float(w[~same].sum())
    p_in, p_out = e_in / max(pairs_in, 1.0), e_out / max(pairs_out, 1.0)
    d = 2.0 * (e_in + e_out) / n
    eps = (p_in - p_out) * n / d if d > 0 else 0.0
    return {"d": d, "eps": eps, "snr": snr(d, eps, k), "p_in": p_in, "p_out": p_out}


def block_densities(adj: sp.spmatrix, labels: np.ndarray, k: int) -> tuple[float, float]:
    """Observed (within, between) edge densities of `adj` under any labelling (estimated or true)."""
    stats = measured_block_stats(adj, labels, k)
    return stats["p_in"], stats["p_out"]


def union_graph(views: Sequence[sp.spmatrix]) -> sp.csr_matrix:
    """The union graph: an edge wherever any view has one (0/1)."""
    total = sum_graph(views)
    total.data = np.ones_like(total.data)
    return total


def sum_graph(views: Sequence[sp.spmatrix], weights: Sequence[float] | None = None) -> sp.csr_matrix:
    """sum_l w_l A_l (w = 1: the multigraph sum), zero entries dropped."""
    weights = [1.0] * len(views) if weights is None else list(weights)
    if len(weights) != len(views):
        raise ValueError(f"sum_graph: {len(weights)} weights for {len(views)} views")
    total = sp.csr_matrix(views[0].shape, dtype=np.float64)
    for w, a in zip(weights, views):
        if w != 0:
            total = total + float(w) * sp.csr_matrix(a, dtype=np.float64)
    total = sp.csr_matrix(total)
    total.eliminate_zeros()
    return total


# ---------------------------------------------------------------------------------------------- clustering


def spectral_embedding(weights: sp.spmatrix, k: int, tau_factor: float = 1.0, normalize_rows: bool = True,
                       seed: int = 0) -> np.ndarray:
    """(n, k) top-k eigenvectors of D_tau^{-1/2} W D_tau^{-1/2}, D_tau = diag(degrees) + tau I, tau = tau_factor x the
    mean degree (regularised spectral clustering); rows scaled to unit norm when normalize_rows. W must be symmetric
    with non-negative entries. Deterministic: ARPACK's start vector comes from `seed`."""
    from scipy.sparse.linalg import eigsh

    w = sp.csr_matrix(weights, dtype=np.float64)
    n = w.shape[0]
    if k >= n:
        raise ValueError(f"spectral_embedding: k={k} must be < n={n}")
    deg = np.asarray(w.sum(axis=1)).ravel()
    tau = tau_factor * float(deg.mean())
    inv = 1.0 / np.sqrt(np.maximum(deg + tau, 1e-12))
    lap = sp.diags(inv) @ w @ sp.diags(inv)
    v0 = np.random.default_rng(seed).standard_normal(n)
    if n <= max(50, 5 * k):  # tiny graphs: dense solver (ARPACK needs k well below n; dense eigh is slow past that)
        vals, vecs = np.linalg.eigh(lap.toarray())
        vecs = vecs[:, np.argsort(vals)[::-1][:k]]
    else:
        vals, vecs = eigsh(lap, k=k, which="LA", v0=v0, tol=1e-6, maxiter=20 * n)
        vecs = vecs[:, np.argsort(vals)[::-1]]
    if normalize_rows:
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        vecs = vecs / np.maximum(norms, 1e-12)
    return vecs


def kmeans_labels(x: np.ndarray, k: int, seed: int = 0, n_init: int = 10, max_iter: int = 100) -> np.ndarray:
    """k-means labels of the rows of x: Lloyd's iterations from k-means++ seeds, n_init restarts, the lowest inertia kept
    (numpy, deterministic for a seed; tests/test_sbm.py checks it against scikit-learn's inertia). Written here because
    scikit-learn's KMeans spent seconds per call in its thread pool on small embeddings on the shared 2-CPU machine."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    n = x.shape[0]
    if not 1 <= k <= n:
        raise ValueError(f"kmeans_labels: need 1 <= k <= n, got k={k}, n={n}")
    rng = np.random.default_rng(seed)
    best_inertia, best = math.inf, np.zeros(n, dtype=np.int64)
    for _ in range(n_init):
        centres = [x[rng.integers(n)]]
        d2 = ((x - centres[0]) ** 2).sum(1)
        for _j in range(1, k):  # k-means++: the next seed with probability proportional to the squared distance
            total = d2.sum()
            idx = rng.choice(n, p=d2 / total) if total > 0 else rng.integers(n)
            centres.append(x[idx])
            d2 = np.minimum(d2, ((x - x[idx]) ** 2).sum(1))
        c = np.array(centres)
        for _it in range(max_iter):
            dist = ((x[:, None, :] - c[None, :, :]) ** 2).sum(2)
            lab = dist.argmin(1)
            counts = np.bincount(lab, minlength=k)
            sums = np.zeros_like(c)
            np.add.at(sums, lab, x)
            new = np.where(counts[:, None] > 0, sums / np.maximum(counts, 1)[:, None], c)
            if np.allclose(new, c, rtol=0, atol=1e-10):
                c = new
                break
            c = new
        dist = ((x[:, None, :] - c[None, :, :]) ** 2).sum(2)
        lab = dist.argmin(1)
        inertia = float(dist[np.arange(n), lab].sum())
        if inertia < best_inertia - 1e-12:
            best_inertia, best = inertia, lab.astype(np.int64)
    return best


def spectral_clustering(weights: sp.spmatrix, k: int, tau_factor: float = 1.0, seed: int = 0) -> np.ndarray:
    """Regularised spectral clustering of a (weighted) graph into k communities."""
    return kmeans_labels(spectral_embedding(weights, k, tau_factor, seed=seed), k, seed=seed)


# ---------------------------------------------------------------------------------------------- recovery


def confusion(pred: np.ndarray, truth: np.ndarray, k: int) -> np.ndarray:
    pred, truth = np.asarray(pred, dtype=np.int64), np.asarray(truth, dtype=np.int64)
    if pred.shape != truth.shape:
        raise ValueError(f"confusion: {pred.shape} predictions for {truth.shape} labels")
    kk = max(k, int(pred.max(initial=0)) + 1, int(truth.max(initial=0)) + 1)
    m = np.zeros((kk, kk), dtype=np.int64)
    np.add.at(m, (pred, truth), 1)
    return m


def recovery_accuracy(pred: np.ndarray, truth: np.ndarray, k: int) -> float:
    """Fraction of vertices labelled correctly under the best one-to-one relabelling of the predicted communities
    (Hungarian algorithm on the confusion matrix)."""
    from scipy.optimize import linear_sum_assignment

    m = confusion(pred, truth, k)
    r, c = linear_sum_assignment(-m)
    return float(m[r, c].sum()) / max(1, len(truth))


def overlap(acc: float, k: int) -> float:
    """Chance-corrected agreement (acc - 1/k) / (1 - 1/k): 0 at chance, 1 at exact recovery."""
    return (acc - 1.0 / k) / (1.0 - 1.0 / k)


def isotonic_increasing(y: Sequence[float]) -> np.ndarray:
    """Least-squares non-decreasing fit of y (pool-adjacent-violators, equal weights)."""
    blocks: list[list[float]] = []  # [mean, count]
    for v in map(float, y):
        blocks.append([v, 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, c2 = blocks.pop()
            m1, c1 = blocks.pop()
            blocks.append([(m1 * c1 + m2 * c2) / (c1 + c2), c1 + c2])
    return np.concatenate([np.full(int(c), m) for m, c in blocks]) if blocks else np.zeros(0)


def crossing_point(x: Sequence[float], y: Sequence[float], threshold: float, log_x: bool = True) -> tuple[float, float]:
    """Where a sweep's increasing curve y(x) first reaches `threshold`: the isotonic fit of y, linearly interpolated
    (in log x when log_x) between the two grid points around the crossing. Returns (x*, censored): censored = +1 when
    the fit never reaches the threshold (x* = one grid step beyond the last point), -1 when it is already above at the
    first point (x* = one step before it), else 0."""
    x = np.asarray(x, dtype=np.float64)
    if x.size < 2 or np.any(np.diff(x) <= 0):
        raise ValueError(f"crossing_point: x must be increasing with >= 2 points, got {x}")
    t = np.log(x) if log_x else x.copy()
    fit = isotonic_increasing(y)
    back = (lambda v: float(math.exp(v))) if log_x else float
    if fit[0] >= threshold:
        return back(t[0] - (t[1] - t[0])), -1.0
    above = np.flatnonzero(fit >= threshold)
    if above.size == 0:
        return back(t[-1] + (t[-1] - t[-2])), 1.0
    j = int(above[0])
    f0, f1 = fit[j - 1], fit[j]
    frac = (threshold - f0) / (f1 - f0) if f1 > f0 else 1.0
    return back(t[j - 1] + frac * (t[j] - t[j - 1])), 0.0

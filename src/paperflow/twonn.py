"""TwoNN intrinsic dimension (Facco, d'Errico, Rodriguez, Laio 2017), as the ID-guided pruning paper's
official code computes it (Nofear18/ID_VL_Pruning ComputeID.py::estimate, block_analysis, estimate_ID_2nn).

For each point with nearest-neighbour distances r1 < r2, mu = r2 / r1 follows F(mu) = 1 - mu^(-d), so
    -log(1 - F_emp(mu_(i))) = d log mu_(i),
and d is the slope of a least-squares line through the origin. Official-code details kept:
  - points with r1 = 0 (duplicates) or r1 = r2 (degeneracies) are dropped;
  - the `fraction` argument of ComputeID.py::estimate is unused there: the fit takes all sorted ratios
    but the two largest (x = log mu[:-2]);
  - block_analysis splits the n points into b = 1..blocks random disjoint subsets of n // b points,
    averages the estimate over the b subsets, and estimate_ID_2nn returns the MEAN over b (not the
    n -> infinity extrapolation of the TwoNN paper). Subsets with <= 3 usable points (the official code
    only warns there) give nan and are left out of the mean.
"""
from __future__ import annotations

import math

import numpy as np
import torch


def twonn_fit(dist: np.ndarray) -> float:
    """TwoNN on an (m, m) distance matrix: slope through the origin of -log(1 - F_emp) vs log(r2 / r1)
    over all sorted ratios but the two largest; nan with <= 3 usable points."""
    Y = np.sort(dist, axis=1)
    r1, r2 = Y[:, 1], Y[:, 2]
    good = (r1 != 0) & (r1 != r2)
    mu = np.sort(r2[good] / r1[good])
    n = mu.shape[0]
    if n <= 3:
        return float("nan")
    femp = np.arange(1, n + 1, dtype=np.float64) / n
    xs, ys = np.log(mu[:-2]), -np.log(1.0 - femp[:-2])
    return float(xs @ ys / (xs @ xs))


def twonn_id(x: torch.Tensor, blocks: int = 20, seed: int = 0) -> float:
    """ID of the rows of x (flattened per row): mean over b = 1..blocks of the mean TwoNN estimate on b
    disjoint random subsets of n // b points (nan when no subset had enough points)."""
    x = x.reshape(x.shape[0], -1).double()
    dist = torch.cdist(x, x).numpy()
    rng = np.random.default_rng(seed)
    n, dims = x.shape[0], []
    for b in range(1, blocks + 1):
        m = n // b
        idx = rng.permutation(n)[: m * b].reshape(b, m)
        est = [e for e in (twonn_fit(dist[np.ix_(i, i)]) for i in idx) if math.isfinite(e)]
        if est:
            dims.append(float(np.mean(est)))
    return float(np.mean(dims)) if dims else float("nan")

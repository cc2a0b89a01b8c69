"""TwoNN intrinsic dimension (paperflow.twonn): data of known dimension, the fit by hand, degenerate sets."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from paperflow.twonn import twonn_fit, twonn_id


def test_twonn_recovers_linear_subspace_dimension():
    gen = torch.Generator().manual_seed(0)
    basis, _ = torch.linalg.qr(torch.randn(50, 5, generator=gen, dtype=torch.float64))  # 5-dim subspace of R^50
    x = torch.randn(2000, 5, generator=gen, dtype=torch.float64) @ basis.T
    d = twonn_id(x, blocks=20, seed=0)
    assert abs(d - 5.0) < 0.75, d  # mean over n..n/20 subsamples (small subsets bias TwoNN slightly low)


@pytest.mark.parametrize("dim", [1, 3])
def test_twonn_on_uniform_cube_tracks_dimension(dim):
    x = torch.rand(1500, dim, generator=torch.Generator().manual_seed(dim), dtype=torch.float64)
    assert abs(twonn_id(x, blocks=1) - dim) < 0.25 * dim + 0.1


def test_twonn_fit_is_slope_through_origin_without_two_largest_ratios():
    # 1-D points: r2/r1 known in closed form; the fit must use all but the two largest sorted ratios
    pts = np.array([0.0, 1.0, 3.0, 7.0, 15.0, 31.0, 40.0])
    dist = np.abs(pts[:, None] - pts[None, :])
    Y = np.sort(dist, axis=1)
    mu = np.sort(Y[:, 2] / Y[:, 1])
    n = mu.size
    x, y = np.log(mu[:-2]), -np.log(1 - np.arange(1, n + 1)[:-2] / n)
    assert twonn_fit(dist) == pytest.approx(float(x @ y / (x @ x)))


def test_twonn_drops_duplicates_and_handles_tiny_sets():
    x = torch.randn(300, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    x = torch.cat([x, x[:20]])  # duplicates: r1 = 0, dropped
    assert 2.0 < twonn_id(x, blocks=5) < 4.0
    assert math.isnan(twonn_fit(np.abs(np.arange(3.0)[:, None] - np.arange(3.0)[None, :])))

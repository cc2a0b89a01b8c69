"""paperflow.gp (shared by cmanp and cellular_gp) and measure.peak_tensor_bytes: kernels against their formulas, exact
GP prediction against the direct linear-algebra formula, the 1-D task sampler's moments, the oracle's optimality."""
from __future__ import annotations

import math

import pytest
import torch

from paperflow import gp
from paperflow.measure import peak_tensor_bytes


def test_kernels_match_their_formulas():
    x1 = torch.tensor([[0.0], [1.0]], dtype=torch.float64)
    x2 = torch.tensor([[0.5], [3.0], [1.0]], dtype=torch.float64)
    k = gp.rbf(x1, x2, lengthscale=0.7, scale=1.3)
    for i in range(2):
        for j in range(3):
            r2 = (float(x1[i, 0]) - float(x2[j, 0])) ** 2
            assert float(k[i, j]) == pytest.approx(1.69 * math.exp(-r2 / (2 * 0.49)), rel=1e-12)
    m = gp.matern52(x1, x2, lengthscale=2.0)
    r = abs(0.0 - 3.0) / 2.0
    assert float(m[0, 1]) == pytest.approx((1 + math.sqrt(5) * r + 5 * r * r / 3) * math.exp(-math.sqrt(5) * r), rel=1e-12)
    assert float(m[1, 2]) == pytest.approx(1.0)
    # batched: one lengthscale per task
    xb = torch.rand(3, 4, 1, dtype=torch.float64)
    ls = torch.tensor([0.2, 0.5, 1.0], dtype=torch.float64)
    kb = gp.rbf(xb, xb, ls, torch.ones(3, dtype=torch.float64))
    for b in range(3):
        assert torch.allclose(kb[b], gp.rbf(xb[b], xb[b], float(ls[b])))


def test_exact_predict_matches_direct_formula():
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(7, 1, generator=gen, dtype=torch.float64)
    xs = torch.rand(4, 1, generator=gen, dtype=torch.float64)
    y = torch.randn(7, generator=gen, dtype=torch.float64)
    k, ks = gp.rbf(x, x, 0.3), gp.rbf(x, xs, 0.3)
    mean, var = gp.exact_predict(k, ks, torch.ones(4, dtype=torch.float64), y, 0.05)
    a = k + 0.05 * torch.eye(7, dtype=torch.float64)
    assert torch.allclose(mean, ks.T @ torch.linalg.solve(a, y), atol=1e-9)
    assert torch.allclose(var, 1 - torch.diagonal(ks.T @ torch.linalg.solve(a, ks)), atol=1e-9)
    # almost no noise: the posterior interpolates the training points
    k1 = gp.rbf(x, x, 0.05)  # well conditioned, so the 1e-8 jitter does not matter
    m0, v0 = gp.exact_predict(k1, k1, torch.ones(7, dtype=torch.float64), y, 1e-10)
    assert torch.allclose(m0, y, atol=1e-3) and float(v0.max()) < 1e-3


def test_sampler_moments_and_split():
    gen = torch.Generator().manual_seed(1)
    t = gp.sample_gp_tasks(gen, 4000, 6, 4)
    assert t["xc"].shape == (4000, 6, 1) and t["yt"].shape == (4000, 4, 1)
    assert float(t["xc"].min()) >= -2 and float(t["xt"].max()) <= 2
    assert 0.1 <= float(t["lengthscale"].min()) and float(t["lengthscale"].max()) <= 0.6
    # E[y^2] = E[scale^2] + eps^2, scale ~ U(0.1, 1): (1 - 0.001) / (3 * 0.9)
    expected = 0.999 / 2.7 + 0.02 ** 2
    y2 = torch.cat([t["yc"], t["yt"]], 1).pow(2).mean()
    assert float(y2) == pytest.approx(expected, rel=0.05)
    with pytest.raises(ValueError):
        gp.sample_gp_tasks(gen, 1, 0, 3)


def test_oracle_beats_a_wrong_lengthscale():
    """The exact posterior at the true hyperparameters has the higher expected predictive log-likelihood."""
    gen = torch.Generator().manual_seed(2)
    t = gp.sample_gp_tasks(gen, 400, 10, 10, max_length=0.3)
    mean, var = gp.gp_task_posterior(t)
    good = gp.gaussian_log_prob(t["yt"].double().squeeze(-1), mean, var).mean()
    wrong = dict(t, lengthscale=t["lengthscale"] * 4)
    mw, vw = gp.gp_task_posterior(wrong)
    bad = gp.gaussian_log_prob(t["yt"].double().squeeze(-1), mw, vw).mean()
    assert float(good) > float(bad)


def test_peak_tensor_bytes_counts_live_tensors():
    def two_temporaries():
        a = torch.ones(1000)  # 4000 bytes
        s = float(a.sum())
        del a
        b = torch.ones(500)  # 2000 bytes, after a is freed
        return s + float(b.sum())

    peak, out = peak_tensor_bytes(two_temporaries)
    assert out == 1500.0
    assert 4000 <= peak < 4000 + 2000  # a and b never alive together (sums are 4-byte scalars)

    def views_share_storage():
        a = torch.ones(1000)
        return a[:10].clone(), a.view(10, 100)

    peak2, _ = peak_tensor_bytes(views_share_storage)
    assert peak2 == 4000 + 40

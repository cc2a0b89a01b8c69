"""GGAE: the dual-metric estimate against closed forms (trace identity, the pushforward of a linear map), the relaxed
distortion as ||H - I||^2 - n, D*'s scale invariance, the swiss roll's arc length, and the stages end to end."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from paperflow.data.resources import MFEAT_DIMS
from paperflow.papers import ggae as G
from paperflow.spec import Resources


def _grid(n=25, spacing=1.0):
    u = np.arange(n) * spacing
    pts = np.stack(np.meshgrid(u, u), -1).reshape(-1, 2)
    return torch.tensor(pts, dtype=torch.float64)


def test_trace_of_the_dual_metric_is_a_laplacian_energy():
    """P's rows sum to one, so tr H_i = 1/2 sum_j P_ij ||z_j - z_i||^2 / (c h)."""
    rng = np.random.default_rng(0)
    x = torch.tensor(rng.normal(size=(40, 3)))
    z = torch.tensor(rng.normal(size=(40, 2)))
    h = 1.3
    dist = torch.cdist(x, x)
    L = G.laplacian(dist, h)
    P = L * (G.C_LAP * h) + torch.eye(40, dtype=torch.float64)
    assert torch.allclose(P.sum(1), torch.ones(40, dtype=torch.float64))
    H = G.dual_metric(L, z)
    pair = torch.cdist(z, z) ** 2
    expected = 0.5 * (P * pair).sum(1) / (G.C_LAP * h)
    assert torch.allclose(H.diagonal(dim1=-2, dim2=-1).sum(-1), expected)
    assert torch.allclose(H, H.transpose(-1, -2))


def test_dual_metric_of_a_linear_map_is_its_pushforward():
    """z = A x on a dense planar grid: at interior points H ~ A A^T (Perrault-Joncas & Meila's estimator)."""
    x = _grid(31)
    A = torch.tensor([[1.5, 0.3], [-0.2, 0.7]], dtype=torch.float64)
    z = x @ A.T
    H = G.dual_metric(G.laplacian(torch.cdist(x, x), 2.0), z)
    centre = ((x - 15.0).abs() <= 3).all(1)
    assert torch.allclose(H[centre].mean(0), A @ A.T, rtol=0.05, atol=0.02)
    # an isometry scores D* ~ 0 there and the relaxed distortion ~ -n
    Hi = G.dual_metric(G.laplacian(torch.cdist(x, x), 2.0), x)[centre]
    assert G.dstar(Hi) < 1e-3 and float(G.relaxed_distortion(Hi)) == pytest.approx(-2.0, abs=0.02)


def test_relaxed_distortion_is_frobenius_minus_n_and_dstar_is_scale_free():
    rng = np.random.default_rng(1)
    B = torch.tensor(rng.normal(size=(30, 2, 2)))
    H = B @ B.transpose(-1, -2)
    frob = ((H - torch.eye(2, dtype=torch.float64)) ** 2).sum((-2, -1)).mean()
    assert float(G.relaxed_distortion(H)) == pytest.approx(float(frob) - 2)
    assert G.dstar(7.0 * H) == pytest.approx(G.dstar(H))
    s = np.linspace(0.01, 5, 20001)  # brute force over the scale
    brute = min(float((((si * H - torch.eye(2, dtype=torch.float64)) ** 2).sum((-2, -1))).mean()) / 2 for si in s)
    assert G.dstar(H) == pytest.approx(brute, abs=1e-4)
    assert G.dstar(torch.eye(2, dtype=torch.float64).repeat(5, 1, 1) * 3) == pytest.approx(0.0, abs=1e-12)


def test_swiss_roll_arc_length_inverse_and_authors_ratio():
    th = np.linspace(1.5 * np.pi, 4 * np.pi, 50)
    assert np.allclose(G._s2th(G._th2s(th)), th)
    x, gt = G.swiss_roll(500, 0)
    assert x.shape == (500, 3) and gt.shape == (500, 2)
    assert 0.1 < G.authors_ratio() < 0.5  # h = 0.2 against a median squared NN distance near 0.9 in their batches


def test_stages_end_to_end_small(tmp_path):
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(10), 200)
    np.savez(tmp_path / "mfeat.npz", labels=labels, **{f"view{i}": rng.normal(size=(2000, d)) for i, d in enumerate(MFEAT_DIMS)})
    cfg = G.Config(sr_train=200, sr_val=80, sr_test=120, mf_val=80, mf_test=120, hidden=8, depth=1, steps=5,
                   batch_size=64, lambda_grid=(1.0, 10.0), log_every=5)
    data = G.prepare(cfg, Resources(root=str(tmp_path), paths={"mfeat": str(tmp_path / "mfeat.npz")}))
    for variant in G.VARIANTS:
        model = G.train(cfg, data, variant, 0, None)
        m = G.evaluate(cfg, model, data)
        for key in ("sr_dstar", "mf_dstar", "sr_knn", "mf_knn", "sr_dstar_excess", "sr_mse"):
            assert key in m and np.isfinite(m[key]), key
        assert 0.0 <= m["sr_dstar"] <= 1.0
        comp = G.compress(cfg, model, data, variant, 0)
        assert set(comp) == {"0.50", "0.80"}
        mc = G.evaluate(cfg, comp["0.50"], data)
        assert np.isfinite(mc["sr_dstar"])
    assert "sr_grid_edge" in G.evaluate(cfg, G.train(cfg, data, "ggae", 1, None), data)

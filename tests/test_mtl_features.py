"""mtl_features: principal angles of a known rotation, ridge heads against lstsq, labels, pruning, and a tiny run."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from paperflow.papers import mtl_features as mf
from paperflow.spec import ConfigError


def test_principal_angles_of_a_known_rotation():
    # span(e1, e2) rotated by angle t in the (e2, e3) plane: principal angles (t, 0)
    d, t = 5, 0.3
    B = torch.zeros(d, 2); B[0, 0] = B[1, 1] = 1
    W = torch.zeros(3, d)
    W[0, 0] = 3.0
    W[1, 1], W[1, 2] = 2 * math.cos(t), 2 * math.sin(t)
    W[2, 4] = 0.1  # a small third direction outside the top-2 subspace
    ang = mf.principal_angles(W, B, 2)
    np.testing.assert_allclose(sorted(ang), [0.0, t], atol=1e-7)
    Q, _ = torch.linalg.qr(torch.randn(d, d, dtype=torch.float64))  # a common rotation leaves the angles unchanged
    np.testing.assert_allclose(sorted(mf.principal_angles(W.double() @ Q.T, Q @ B.double(), 2)), [0.0, t], atol=1e-7)


def test_ridge_heads_solve_the_normal_equations():
    g = torch.Generator().manual_seed(0)
    phi, y = torch.randn(30, 4, generator=g, dtype=torch.float64), torch.randn(30, 2, generator=g, dtype=torch.float64)
    C = mf.ridge_heads(phi, y, 0.1)
    phi1 = torch.cat([phi, torch.ones(30, 1, dtype=torch.float64)], 1)
    grad = phi1.T @ (phi1 @ C - y) + 0.1 * 30 * C  # gradient of the ridge objective vanishes
    assert float(grad.abs().max()) < 1e-9


def test_labels_depend_only_on_the_projection():
    cfg = mf.Config(d=6, r=2, n_tasks=3, probe_tasks=2)
    gt = mf.ground_truth(cfg, 0)
    torch.testing.assert_close(gt["B"].T @ gt["B"], torch.eye(2), atol=1e-6, rtol=0)
    x = torch.randn(50, 6)
    y = mf.labels(x, gt["B"], gt["A"])
    assert set(y.unique().tolist()) <= {-1.0, 1.0}
    noise = torch.randn(50, 6)
    noise = noise - noise @ gt["B"] @ gt["B"].T  # any change orthogonal to span(B) leaves every label unchanged
    torch.testing.assert_close(mf.labels(x + noise, gt["B"], gt["A"]), y)


def test_tiny_run_through_spec():
    spec = mf.SPEC
    cfg = spec.make_config({"d": 12, "r": 2, "width": 8, "n_tasks": 6, "batch": 32, "steps": 10, "tune_steps": 5,
                            "n_val": 100, "probe_tasks": 3, "n_probe": 8, "n_probe_test": 100})
    data = spec.prepare(cfg, None)
    for v in mf.VARIANTS:
        model = spec.train(cfg, data, v, 0, lambda step, **m: None)
        out = spec.evaluate(cfg, model, data)
        assert 0 <= out["max_angle"] <= 90 and 0 <= out["probe_acc"] <= 1 and out["tuned_lr"] in cfg.lr_grid
        comp = spec.compress(cfg, model, data, v, 0)
        assert int((comp["0.80"]["W"] == 0).sum()) == int(0.8 * model["W"].numel())
        assert "max_angle" in spec.evaluate(cfg, comp["0.50"], data)
    assert [c.role for c in mf.comparisons(cfg)].count("headline") == 1
    with pytest.raises(ConfigError, match="r <"):
        mf.Config(r=12, d=12)

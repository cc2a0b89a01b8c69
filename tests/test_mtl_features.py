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
        assert out["lr_fallbacks"] >= 0 and out["w_shift"] > 0
        comp = spec.compress(cfg, model, data, v, 0)
        assert int((comp["0.80"]["W"] == 0).sum()) == int(0.8 * model["W"].numel())
        assert "max_angle" in spec.evaluate(cfg, comp["0.50"], data)
    assert [c.role for c in mf.comparisons(cfg)].count("headline") == 1
    with pytest.raises(ConfigError, match="r <"):
        mf.Config(r=12, d=12)


def test_single_all_labels_depend_on_every_direction_of_the_subspace_only():
    cfg = mf.Config(d=10, r=3, n_tasks=2, probe_tasks=2)
    gt = mf.ground_truth(cfg, 1)
    B = gt["B"].double()
    x = torch.randn(20000, 10, dtype=torch.float64)
    y = mf.radial_labels(x, B)
    assert abs(float(y.mean())) < 0.03  # the chi^2_r median threshold balances the classes
    noise = torch.randn(20000, 10, dtype=torch.float64)
    torch.testing.assert_close(mf.radial_labels(x + noise - noise @ B @ B.T, B), y)  # blind to directions outside span(B)
    # every direction of span(B) matters: moving x along any column of B by 3 flips some labels
    for k in range(3):
        assert float((mf.radial_labels(x + 3 * B[:, k], B) != y).double().mean()) > 0.1
    assert mf.chi2_median(2) == pytest.approx(2 * math.log(2))  # chi^2_2 is exponential with mean 2


def test_w_shift_angle_drop_and_reference_views():
    cfg = mf.Config(d=6, r=2, width=3, n_tasks=2, probe_tasks=2, n_probe=4, n_probe_test=20)
    gt = mf.ground_truth(cfg, 0)
    W0 = torch.randn(3, 6)
    W = W0 + 0.5 * W0  # moved by half its norm
    out = mf.evaluate(cfg, {"W": W, "W0": W0, "seed": 0, "val_acc": 0.9}, None)
    assert out["w_shift"] == pytest.approx(0.5, rel=1e-6)
    assert out["angle_drop"] == pytest.approx(0.0, abs=1e-4) and out["max_angle"] == pytest.approx(out["max_angle_init"], abs=1e-4)
    W = torch.cat([gt["B"].T * 2.0, torch.zeros(1, 6)])  # W spans exactly span(B)
    out = mf.evaluate(cfg, {"W": W, "W0": W0, "seed": 0, "val_acc": 0.9}, None)
    assert out["max_angle"] == pytest.approx(0.0, abs=1e-3) and out["energy_in_subspace"] == pytest.approx(1.0, abs=1e-6)
    rows = [{"paper": "mtl_features", "variant": v, "seed": 0, "dense/max_angle": 5.0, "dense/max_angle_init": 88.0} for v in mf.VARIANTS]
    views = {r["variant"]: r for r in mf.derive(cfg, rows)}
    assert views["mtl|recovered"]["dense/max_angle"] == mf.RECOVERED_DEG
    assert views["mtl|init"]["dense/max_angle"] == 88.0 and views["single_all|init"]["dense/max_angle"] == 88.0
    assert views["mtl|init"]["paper"] == "mtl_features" and views["mtl|init"]["seed"] == 0


def test_a_diverging_lr_scores_nan_and_is_never_chosen():
    cfg = mf.Config(d=12, r=2, width=8, n_tasks=3, batch=32, tune_steps=20, n_val=50, lr_grid=(0.01, 0.1, 1e4))
    _, score = mf._val_score(cfg, "single_all", 1e4)
    assert math.isnan(score)
    data = mf.prepare(cfg, None)
    assert data["tuning"]["single_all"]["tuned_lr"] < 1e4


def test_headline_reads_an_absolute_threshold_and_a_logged_mechanism():
    cfg = mf.Config()
    head = [c for c in mf.comparisons(cfg) if c.role == "headline"]
    assert len(head) == 1 and head[0].baseline == "mtl|recovered" and head[0].refuted_if
    assert [g.metric for g in head[0].mechanism_gates] == ["w_shift"]

"""mlab_nc (ICML 2024): NC1-NC3 and the tag-wise average on constructed collapsed / perturbed features, the simplex
ETF, pick-all-label CE and set accuracy by hand, config, and a tiny prepare -> train -> evaluate -> derive run."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from paperflow.data import fashion_grids as fgr
from paperflow.papers import mlab_nc as nc
from paperflow.spec import ConfigError, Resources


def _collapsed(K=4, d=6, n1=3, n2=2, scale=2.0, pair_scale=0.7, seed=0):
    """Features at exact M-lab NC: single-label features = their class mean (an ETF embedded in R^d, shifted by a
    global mean g); pair features = g + pair_scale * (M_i + M_j)."""
    g = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(d, K, generator=g, dtype=torch.float64))
    M = scale * nc.simplex_etf(K).double() @ Q.T  # (K, d), rows: a simplex ETF
    mu_g = torch.randn(d, generator=g, dtype=torch.float64)
    Y = torch.from_numpy(fgr.balanced_label_sets(K, n1, n2)).double()
    H = torch.stack([mu_g + (M[int(y.argmax())] if y.sum() == 1 else pair_scale * (M * y[:, None]).sum(0)) for y in Y])
    return H, Y, M


def test_simplex_etf_geometry():
    K = 5
    W = nc.simplex_etf(K)
    G = W @ W.T
    np.testing.assert_allclose(torch.diag(G), np.ones(K), atol=1e-6)
    off = G[~torch.eye(K, dtype=torch.bool)]
    np.testing.assert_allclose(off, np.full(K * (K - 1), -1 / (K - 1)), atol=1e-6)
    np.testing.assert_allclose(W.sum(0), np.zeros(K), atol=1e-6)


def test_nc_metrics_zero_at_collapse():
    H, Y, M = _collapsed()
    m = nc.nc_metrics(H, Y, 3.0 * M)  # self-dual classifier (any scale)
    for k in ("nc1", "nc2", "nc3", "tag_err"):
        assert m[k] == pytest.approx(0.0, abs=1e-6), k
    # the shuffled-pair null: K = 4 has 6 pairs; rotated by 3, every pair meets its complement, whose ETF sum is the
    # negative of its own (M_0 + M_1 = -(M_2 + M_3)): no positive scale fits, residual 1 for every pair
    assert m["tag_err_null"] == pytest.approx(1.0)


def test_tag_residual_by_hand():
    u = torch.tensor([3.0, 4.0], dtype=torch.float64)
    assert nc.tag_residual(u, 2 * u) == pytest.approx(0.0)
    assert nc.tag_residual(u, torch.tensor([1.0, 0.0], dtype=torch.float64)) == pytest.approx(0.8)  # sin = 4/5
    assert nc.tag_residual(u, -u) == 1.0  # a negative scale is not a scaled average
    assert nc.tag_residual(u, torch.tensor([-4.0, 3.0], dtype=torch.float64)) == pytest.approx(1.0)  # orthogonal


def test_null_on_ten_classes_is_far_from_the_relation():
    """K = 10 at exact collapse: a pair meets a disjoint pair (cos -1/4: residual 1) or one sharing a class
    (cos 3/8: residual sqrt(1 - 9/64)); the null's mean lies between, far above any tolerance, the own pairs at 0."""
    H, Y, M = _collapsed(K=10, d=12)
    m = nc.nc_metrics(H, Y, M)
    assert m["tag_err"] == pytest.approx(0.0, abs=1e-6)
    assert (1 - 9 / 64) ** 0.5 - 1e-9 <= m["tag_err_null"] <= 1.0


def test_nc_metrics_positive_when_perturbed():
    H, Y, M = _collapsed()
    g = torch.Generator().manual_seed(1)
    noisy = H + 0.3 * torch.randn(H.shape, generator=g, dtype=torch.float64)
    m = nc.nc_metrics(noisy, Y, M)
    assert m["nc1"] > 0.01 and m["tag_err"] > 0.01
    # NC1 by hand on the single-label rows: tr(Sigma_W Sigma_B^+) / K
    K = Y.shape[1]
    s = Y.sum(1) == 1
    ys = Y[s].argmax(1)
    mu = torch.stack([noisy[s][ys == k].mean(0) for k in range(K)])
    W_ = noisy[s] - mu[ys]
    B_ = mu - mu.mean(0)
    want = torch.trace((W_.T @ W_ / s.sum()) @ torch.linalg.pinv(B_.T @ B_ / K)) / K
    assert m["nc1"] == pytest.approx(float(want), rel=1e-6)
    # a classifier that is not the means: NC3 > 0; means that are not an ETF: NC2 > 0
    rot = nc.nc_metrics(H, Y, M.flip(0))
    assert rot["nc3"] > 0.5 and rot["nc2"] == pytest.approx(0.0, abs=1e-6)
    Hs = H.clone()
    Hs[(Y[:, 0] == 1) & (Y.sum(1) == 1)] *= 2.0  # one class mean twice as long (relative to the origin)
    assert nc.nc_metrics(Hs, Y, M)["nc2"] > 0.05
    # tag-wise error is scale-free: pair means rescaled about the centre keep it at 0, a rotated pair mean does not
    H2 = H.clone()
    pairs = Y.sum(1) == 2
    mu_g = H[Y.sum(1) == 1].mean(0)
    H2[pairs] = mu_g + 5.0 * (H[pairs] - mu_g)
    assert nc.nc_metrics(H2, Y, M)["tag_err"] == pytest.approx(0.0, abs=1e-6)
    H3 = H.clone()
    first_pair = torch.nonzero((Y[:, 0] == 1) & (Y[:, 1] == 1)).flatten()
    H3[first_pair] = mu_g + (H[first_pair] - mu_g).flip(1)
    assert nc.nc_metrics(H3, Y, M)["tag_err"] > 0.0


def test_pal_ce_and_set_accuracy_by_hand():
    logits = torch.tensor([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0]])
    y = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    lse = torch.logsumexp(logits, 1)
    want = ((lse[0] - 2.0) + (lse[0] - 1.0) + (lse[1] - 3.0)) / 2  # sum of CE over positive labels, mean over samples
    assert float(nc.pal_ce(logits, y)) == pytest.approx(float(want))

    class Fixed(torch.nn.Module):
        W = torch.eye(3)

        def eval(self):
            return self

        def features(self, x):
            return x.float()

    x = torch.tensor([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0], [0.0, 1.0, 3.0]])
    Y = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0], [1.0, 0.0, 1.0]])  # third: top-2 is {1, 2}, wrong
    assert nc.set_accuracy(nc.Config(), {"net": Fixed()}, x, Y) == pytest.approx(200 / 3)


def test_config_and_comparisons():
    with pytest.raises(ConfigError, match="feat_dim"):
        nc.Config(feat_dim=4)
    with pytest.raises(ConfigError, match="early_epoch"):
        nc.Config(early_epoch=500)
    cfg = nc.SPEC.make_config({"lr_grid": [0.01, 0.1, 0.3]})
    rows = nc.comparisons(cfg)
    head = [r for r in rows if r.role == "headline"]
    assert len(head) == 1 and head[0].kind == "matches" and head[0].target == 0.0 and head[0].tolerance == cfg.tag_tolerance
    assert head[0].baseline == "" and head[0].refuted_if
    (mech,) = head[0].mechanism_gates
    assert (mech.variant, mech.column, mech.above) == ("pal", "dense/tag_err_init", cfg.tag_tolerance)
    assert any(g.column == "dense/tag_err_null" and g.above == cfg.tag_tolerance for g in head[0].gates)
    assert any(r.baseline == "pal|null" and r.role == "control" for r in rows)


def test_end_to_end_through_spec(tmp_path):
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rng = np.random.default_rng(0)
        ytr, yte = np.tile(np.arange(10), 30), np.tile(np.arange(10), 10)
        xs = [rng.integers(0, 255, (len(y), 28, 28)).astype(np.uint8) for y in (ytr, yte)]
        np.savez(tmp_path / "f.npz", x_train=xs[0], y_train=ytr, x_test=xs[1], y_test=yte)
        res = Resources(root=str(tmp_path), paths={"fashion_mnist": str(tmp_path / "f.npz")})
        spec = nc.SPEC
        cfg = spec.make_config({"n_classes": 4, "n_single": 4, "n_pair": 2, "val_single": 2, "val_pair": 1, "test_single": 2,
                                "test_pair": 1, "fashion_val": 100, "hidden": 16, "feat_dim": 8, "epochs": 6, "tune_epochs": 1,
                                "eval_every": 2, "early_epoch": 2, "batch_size": 8, "lr_grid": [0.01, 0.1]})
        data = spec.prepare(cfg, res)
        assert data["x_train"].shape == (4 * 4 + 6 * 2, 14, 28)
        rows = []
        for v in spec.variants:
            model = spec.train(cfg, data, v, 0, lambda step, **m: None)
            assert model["curve"]["epoch"] == [2.0, 4.0, 6.0]
            row = {"paper": "mlab_nc", "variant": v, "seed": 0, **{f"dense/{k}": x for k, x in spec.evaluate(cfg, model, data).items()}}
            for lv, comp in spec.compress(cfg, model, data, v, 0).items():
                row.update({f"compressed:{lv}/{k}": x for k, x in spec.evaluate(cfg, comp, data).items()})
            rows.append(row)
        assert rows[1]["dense/trainable_params"] < rows[0]["dense/trainable_params"]  # the trick trains fewer parameters
        assert math.isfinite(rows[0]["dense/tag_err"]) and math.isfinite(rows[0]["dense/tag_err_early"])
        assert math.isfinite(rows[0]["dense/tag_err_init"]) and math.isfinite(rows[0]["dense/tag_err_null"])
        # the init reading is the untrained network's: rebuild it with the same seed and measure
        torch.manual_seed(0)
        net0 = nc._build(cfg, "pal", data["x_train"][0].numel())
        want = nc.nc_metrics(nc._features(net0, data["x_train"]), data["y_train"].float(), net0.W.detach())["tag_err"]
        assert rows[0]["dense/tag_err_init"] == pytest.approx(want)
        assert "compressed:0.50/tag_err_init" not in rows[0]
        out = spec.derive(cfg, rows)
        early = [r for r in out if r["variant"] == "pal|early"]
        assert len(early) == 1 and early[0]["dense/nc1"] == rows[0]["dense/nc1_early"]
        null = [r for r in out if r["variant"] == "pal|null"]
        assert len(null) == 1 and null[0]["dense/tag_err"] == rows[0]["dense/tag_err_null"]
    finally:
        torch.set_num_threads(n)

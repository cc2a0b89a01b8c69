"""mc_ensemble (ICML 2024): SupCon against a brute-force loop, FPR@95 and the kNN score on hand examples, the
augmentation, and a tiny prepare -> train -> compress -> evaluate run through the spec."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from paperflow.papers import mc_ensemble as mc
from paperflow.spec import ConfigError, Resources


def test_supcon_matches_brute_force():
    gen = torch.Generator().manual_seed(0)
    z = F.normalize(torch.randn(8, 5, generator=gen, dtype=torch.float64), dim=1)
    labels = torch.tensor([0, 1, 0, 2, 0, 1, 3, 2])  # label 3 has no positive: not an anchor
    tau = 0.3
    total, anchors = 0.0, 0
    for i in range(8):
        pos = [p for p in range(8) if p != i and labels[p] == labels[i]]
        if not pos:
            continue
        denom = sum(math.exp(float(z[i] @ z[a]) / tau) for a in range(8) if a != i)
        total += -sum(math.log(math.exp(float(z[i] @ z[p]) / tau) / denom) for p in pos) / len(pos)
        anchors += 1
    assert float(mc.supcon_loss(z, labels, tau)) == pytest.approx(total / anchors, rel=1e-10)


def test_supcon_prefers_label_clusters():
    labels = torch.tensor([0, 0, 1, 1])
    good = F.normalize(torch.tensor([[1.0, 0.0], [1.0, 0.01], [0.0, 1.0], [0.01, 1.0]]), dim=1)
    bad = F.normalize(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.01], [0.01, 1.0]]), dim=1)
    assert float(mc.supcon_loss(good, labels, 0.1)) < float(mc.supcon_loss(bad, labels, 0.1))


def test_fpr95_hand_example():
    id_scores = np.arange(1, 21, dtype=float)  # 20 ID scores; keeping 95% (19) puts the threshold at 2
    ood = np.array([0.0, 1.5, 2.0, 2.5, 30.0])  # 2.0, 2.5, 30 are >= 2 -> 3 / 5
    assert mc.fpr_at_95_tpr(id_scores, ood) == pytest.approx(0.6)
    assert mc.fpr_at_95_tpr(id_scores, np.array([-1.0, 0.5])) == 0.0
    assert mc.fpr_at_95_tpr(id_scores, np.array([100.0])) == 1.0
    # brute force: the largest threshold keeping >= 95% of ID
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=101), rng.normal(0.5, 1, size=57)
    t = max(t for t in a if np.mean(a >= t) >= 0.95)
    assert mc.fpr_at_95_tpr(a, b) == pytest.approx(np.mean(b >= t))
    assert mc.auroc(np.array([2.0, 3.0]), np.array([0.0, 1.0])) == 1.0
    assert mc.auroc(np.array([0.0, 3.0]), np.array([1.0, 2.0])) == pytest.approx(0.5)


def test_knn_score_concatenation_matches_brute_force():
    gen = torch.Generator().manual_seed(1)
    q = [torch.randn(4, 3, generator=gen), torch.randn(4, 5, generator=gen)]
    b = [torch.randn(10, 3, generator=gen), torch.randn(10, 5, generator=gen)]
    k = 3
    cat_q = torch.cat([F.normalize(x, dim=1) for x in q], 1) / math.sqrt(2)
    cat_b = torch.cat([F.normalize(x, dim=1) for x in b], 1) / math.sqrt(2)
    dist = torch.cdist(cat_q, cat_b)  # (4, 10)
    expected = -dist.sort(1).values[:, k - 1]
    np.testing.assert_allclose(mc.knn_scores(q, b, k), expected.numpy(), atol=1e-5)


def test_augment_shift_and_flip():
    x = torch.zeros(64, 28, 28, dtype=torch.uint8)
    x[:, 14, 10] = 255
    out = mc.augment(x, 2, torch.Generator().manual_seed(0))
    assert out.shape == (64, 28, 28) and out.dtype == torch.float32
    assert torch.allclose(out.sum((1, 2)), torch.ones(64))  # the pixel is moved, never lost (2 px from the edge)
    rows, cols = torch.nonzero(out, as_tuple=True)[1:]
    assert int((rows - 14).abs().max()) <= 2
    assert bool(((cols - 10).abs() <= 2).logical_or((cols - 17).abs() <= 2).all())  # 27 - 10 = 17 when flipped
    torch.testing.assert_close(mc.augment(x, 0, torch.Generator().manual_seed(0)).sum((1, 2)), torch.ones(64))


def test_config_and_comparisons():
    with pytest.raises(ConfigError, match="id_classes"):
        mc.Config(id_classes=(0, 0, 1))
    with pytest.raises(ConfigError, match="compare_level"):
        mc.Config(compare_level=0.3)
    rows = mc.comparisons(mc.SPEC.make_config({"sparsities": [0.5, 0.8]}))
    assert [r.role for r in rows].count("headline") == 1 and rows[0].method == "mc" and rows[0].baseline == "de"
    assert mc.MEMBERS["de"] == ("ce",) * 3 and len(mc.MEMBERS["mc"]) == 3


def test_end_to_end_through_spec(tmp_path):
    rng = np.random.default_rng(0)

    def images(labels):
        x = rng.integers(0, 40, (len(labels), 28, 28)).astype(np.uint8)
        for i, c in enumerate(labels):
            x[i, 4 + 2 * c : 8 + 2 * c, 6:22] = 230
        return x

    yf, yt, ym = rng.integers(0, 10, 900), rng.integers(0, 10, 300), rng.integers(0, 10, 200)
    np.savez(tmp_path / "f.npz", x_train=images(yf), y_train=yf, x_test=images(yt), y_test=yt)
    np.savez(tmp_path / "m.npz", x=rng.integers(0, 255, (200, 28, 28)).astype(np.uint8), y=ym)
    res = Resources(root=str(tmp_path), paths={"fashion_mnist": str(tmp_path / "f.npz"), "mnist10k": str(tmp_path / "m.npz")})
    spec = mc.SPEC
    cfg = spec.make_config({"n_train": 400, "fashion_val": 60, "n_bank": 100, "n_test": 60, "hidden": 16, "feat_dim": 8,
                            "large_hidden": 48, "proj_dim": 4, "steps": 2, "tune_steps": 1, "batch_size": 16,
                            "lr_grid": [1e-3, 1e-2]})
    data = spec.prepare(cfg, res)
    assert set(data["tuning"]) == set(mc.KINDS) | {"rot_own"} and data["x_near"].shape[1:] == (28, 28)
    for v in spec.variants:
        model = spec.train(cfg, data, v, 0, lambda step, **m: None)
        m = spec.evaluate(cfg, model, data)
        assert 0 <= m["auroc"] <= 100 and 0 <= m["fpr95"] <= 100 and m["grid_edge"] in (0.0, 1.0)
        assert len(model["members"]) == len(mc.MEMBERS[v])
        comp = spec.compress(cfg, model, data, v, 0)
        w = comp["0.80"]["members"][0]["state"]
        mats = [t for n, t in w.items() if t.dim() >= 2]
        assert sum(int((t == 0).sum()) for t in mats) >= 0.8 * sum(t.numel() for t in mats) - 1
        if v == "mc":
            assert math.isfinite(spec.evaluate(cfg, comp["0.50"], data)["auroc"])
        if v == "mc":
            assert [mem["kind"] for mem in model["members"]] == ["ce", "supcon", "rot"] and "id_acc" in m
        if v == "de":
            again = spec.train(cfg, data, "de", 0, None)
            assert all(torch.equal(model["members"][1]["state"][k], again["members"][1]["state"][k]) for k in again["members"][1]["state"])
            assert not torch.equal(model["members"][0]["state"]["1.weight"], model["members"][1]["state"]["1.weight"])  # inits differ


def test_all_rotations_labels_match_rot90_and_a_perfect_rotation_head_scores_100():
    x = torch.arange(2 * 5 * 5, dtype=torch.float32).reshape(2, 5, 5)
    xr, q = mc.all_rotations(x)
    assert xr.shape == (8, 5, 5) and q.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    for k in range(4):
        torch.testing.assert_close(xr[q == k], torch.rot90(x, k, dims=(1, 2)))
    # An encoder whose features are the four corner pixels (which corner holds the brightest value of an image whose
    # top-left pixel is brightest tells the rotation) and a head that reads the corners: 100% rotation accuracy.
    cfg = mc.Config(hidden=8, feat_dim=4)
    enc = mc.build_encoder({"hidden": 8, "feat_dim": 4})
    with torch.no_grad():
        first, second = enc[1], enc[3]
        first.weight.zero_(); first.bias.zero_(); second.weight.zero_(); second.bias.zero_()
        corners = [0, 27 * 28, 27 * 28 + 27, 27]  # top-left, bottom-left, bottom-right, top-right (after q x 90 deg ccw)
        for i, c in enumerate(corners):
            first.weight[i, c] = 1.0
            second.weight[i, i] = 1.0
    head = torch.nn.Linear(4, 4)
    with torch.no_grad():
        head.weight.copy_(torch.eye(4)); head.bias.zero_()
    imgs = torch.zeros(3, 28, 28, dtype=torch.uint8)
    imgs[:, 0, 0] = 255
    member = {"arch": {"hidden": 8, "feat_dim": 4}, "state": enc.state_dict(), "rot_head": head.state_dict()}
    assert mc.rotation_accuracy(cfg, member, imgs) == 100.0

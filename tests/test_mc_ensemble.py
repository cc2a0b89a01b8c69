"""mc_ensemble (ICML 2024): SupCon against a brute-force loop, FPR@95 and the kNN score on hand examples, the
augmentation, linear CKA against the kernel (HSIC) formula, the own-objective tuning rule, and a tiny
prepare -> train -> compress -> evaluate run through the spec, and the v3 test draw (fresh pools, test_seed)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from paperflow.data.images import select_classes, subset
from paperflow.papers import mc_ensemble as mc
from paperflow.spec import ConfigError, Resources
from synthetic_images import fake_fashion


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

    yf, yt, ym = rng.integers(0, 10, 900), rng.integers(0, 10, 300), rng.integers(0, 10, 1700)
    fake_fashion(tmp_path / "f.npz", rng, yf, yt, top=4)
    np.savez(tmp_path / "m.npz", x=rng.integers(0, 255, (1700, 28, 28)).astype(np.uint8), y=ym)  # 1500 are v2's
    res = Resources(root=str(tmp_path), paths={"fashion_mnist": str(tmp_path / "f.npz"), "mnist10k": str(tmp_path / "m.npz")})
    spec = mc.SPEC
    cfg = spec.make_config({"n_train": 360, "fashion_val": 60, "n_bank": 100, "n_test": 60, "hidden": 16, "feat_dim": 8,
                            "large_hidden": 48, "proj_dim": 4, "steps": 2, "tune_steps": 1, "batch_size": 16,
                            "lr_grid": [1e-3, 1e-2]})
    data = spec.prepare(cfg, res)
    assert set(data["tuning"]) == set(mc.KINDS) and data["x_near"].shape[1:] == (28, 28)
    for v in spec.variants:
        model = spec.train(cfg, data, v, 0, lambda step, **m: None)
        m = spec.evaluate(cfg, model, data)
        assert 0 <= m["auroc"] <= 100 and 0 <= m["fpr95"] <= 100 and m["grid_edge"] in (0.0, 1.0)
        assert 0 <= m["member_cka"] <= 1 + 1e-9 and (m["member_cka"] == 1.0) == (v == "large")
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


def _cka_kernel(x: torch.Tensor, y: torch.Tensor) -> float:
    """Linear CKA via centred Gram matrices: tr(K H L H) / sqrt(tr(K H K H) tr(L H L H)), K = X X^T, L = Y Y^T."""
    n = x.shape[0]
    h = torch.eye(n, dtype=torch.float64) - 1.0 / n
    k, l = x.double() @ x.double().T, y.double() @ y.double().T
    hsic = lambda a, b: float(torch.trace(a @ h @ b @ h))
    return hsic(k, l) / math.sqrt(hsic(k, k) * hsic(l, l))


def test_linear_cka_matches_the_kernel_formula_and_its_invariances():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(30, 5, generator=g), torch.randn(30, 7, generator=g)
    assert mc.linear_cka(x, y) == pytest.approx(_cka_kernel(x, y), rel=1e-9)
    q, _ = torch.linalg.qr(torch.randn(5, 5, generator=g))
    assert mc.linear_cka(x, 3.0 * x @ q + 2.0) == pytest.approx(1.0)  # orthogonal map, scale and shift
    # hand case: x = (1, 2, 3), y = (1, 0, -1) as 1-d features: centred x = (-1, 0, 1), y = (1, 0, -1) = -x: CKA 1;
    # y = (1, -2, 1) is orthogonal to centred x: CKA 0
    xs = torch.tensor([[1.0], [2.0], [3.0]])
    assert mc.linear_cka(xs, torch.tensor([[1.0], [0.0], [-1.0]])) == pytest.approx(1.0)
    assert mc.linear_cka(xs, torch.tensor([[1.0], [-2.0], [1.0]])) == pytest.approx(0.0, abs=1e-12)
    assert mc.member_cka([x]) == 1.0 and mc.member_cka([x, x]) == pytest.approx(1.0)
    assert mc.member_cka([x, x, y]) == pytest.approx((1 + 2 * _cka_kernel(F.normalize(x, dim=1), F.normalize(y, dim=1))) / 3)


def test_tuning_rule_uses_each_members_own_objective(monkeypatch):
    """ce / large / rot keep the lr with the highest score, supcon the lowest loss; the scores come from each kind's own
    objective (validation_objective), not from one shared rule."""
    cfg = mc.Config(lr_grid=(1e-3, 3e-3, 1e-2))
    seen = []
    monkeypatch.setattr(mc, "fit_members", lambda cfg, data, kind, seeds, lrs, steps, log: [{"kind": kind, "lr": lr} for lr in lrs])
    monkeypatch.setattr(mc, "fit_member", lambda cfg, data, kind, seed, lr, steps, log: {"kind": kind, "lr": lr})

    def objective(cfg, member, x, y):
        seen.append(member["kind"])
        return {1e-3: 1.0, 3e-3: 2.0, 1e-2: 0.5}[member["lr"]]  # peak in the middle, lowest at the top

    monkeypatch.setattr(mc, "validation_objective", objective)
    out = mc.tune_lrs(cfg, {"x_val": None, "y_val": None})
    assert {k: out[k]["tuned_lr"] for k in mc.KINDS} == {"ce": 3e-3, "large": 3e-3, "rot": 3e-3, "supcon": 1e-2}
    assert out["supcon"]["grid_edge"] == 1.0 and out["ce"]["grid_edge"] == 0.0 and sorted(set(seen)) == sorted(mc.KINDS)


def test_validation_objective_hand_cases():
    cfg = mc.Config(hidden=8, feat_dim=4, proj_dim=3, batch_size=4, shift=0)
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, 255, (6, 28, 28), generator=gen, dtype=torch.uint8)
    y = torch.tensor([0, 1, 0, 1, 2, 2])
    enc = mc.build_encoder({"hidden": 8, "feat_dim": 4})
    head = torch.nn.Linear(4, 6)
    with torch.no_grad():  # a CE head whose logits ignore the features and always say class 0: accuracy = 2 / 6
        head.weight.zero_(); head.bias.copy_(torch.tensor([1.0, 0, 0, 0, 0, 0]))
    member = {"kind": "ce", "arch": {"hidden": 8, "feat_dim": 4}, "state": enc.state_dict(), "head": head.state_dict()}
    assert mc.validation_objective(cfg, member, x, y) == pytest.approx(100 * 2 / 6)
    proj = mc.supcon_head(cfg)
    member = {"kind": "supcon", "arch": member["arch"], "state": enc.state_dict(), "proj_head": proj.state_dict()}
    g = torch.Generator().manual_seed(cfg.tune_seed)  # the same augmentation draws, batches of 4 then 2 images
    expect = []
    with torch.no_grad():
        for a in (0, 4):
            xb, yb = x[a : a + 4], y[a : a + 4]
            views = torch.cat([mc.augment(xb, 0, g), mc.augment(xb, 0, g)])
            expect.append(float(mc.supcon_loss(F.normalize(proj(enc(views)), dim=1), torch.cat([yb, yb]), cfg.temperature)))
    assert mc.validation_objective(cfg, member, x, y) == pytest.approx(float(np.mean(expect)))


def test_augment_crop_equals_the_per_pixel_gather():
    """The unfold-based crop is the v2 per-pixel gather (same random draws, same values), only cheaper."""
    x = torch.randint(0, 256, (50, 28, 28), dtype=torch.uint8, generator=torch.Generator().manual_seed(4))
    gen = torch.Generator().manual_seed(9)
    b, h, w, s = 50, 28, 28, 2
    padded = F.pad(x.float() / 255.0, (s, s, s, s))
    dy, dx = torch.randint(0, 2 * s + 1, (b,), generator=gen), torch.randint(0, 2 * s + 1, (b,), generator=gen)
    rows, cols = (dy[:, None] + torch.arange(h))[:, :, None], (dx[:, None] + torch.arange(w))[:, None, :]
    ref = padded[torch.arange(b)[:, None, None], rows, cols]
    flip = torch.rand(b, generator=gen) < 0.5
    ref = torch.where(flip[:, None, None], ref.flip(2), ref)
    assert torch.equal(mc.augment(x, s, torch.Generator().manual_seed(9)), ref)


def _tagged_resources(tmp_path):
    """Fashion (1200 training images, 120 per class; 300 test) and MNIST (1800) images whose first three pixels name
    them: (index // 256, index % 256, source) with source 1 = Fashion train, 2 = Fashion test, 3 = MNIST."""
    def tagged(n, source):
        x = np.zeros((n, 28, 28), dtype=np.uint8)
        x[:, 0, 0], x[:, 0, 1], x[:, 0, 2] = np.arange(n) // 256, np.arange(n) % 256, source
        return x

    yf, yt, ym = np.arange(1200) % 10, np.arange(300) % 10, np.arange(1800) % 10
    np.savez(tmp_path / "f.npz", x_train=tagged(1200, 1), y_train=yf, x_test=tagged(300, 2), y_test=yt)
    np.savez(tmp_path / "m.npz", x=tagged(1800, 3), y=ym)
    return Resources(root=str(tmp_path), paths={"fashion_mnist": str(tmp_path / "f.npz"), "mnist10k": str(tmp_path / "m.npz")})


def _names(x: torch.Tensor) -> set:
    return {tuple(r) for r in x[:, 0, :3].tolist()}


def test_test_sets_are_fresh_and_train_val_bank_do_not_depend_on_test_seed(tmp_path, monkeypatch):
    res = _tagged_resources(tmp_path)
    seen = []
    monkeypatch.setattr(mc, "tune_lrs", lambda cfg, data: seen.append(sorted(data)) or {"stub": True})
    base = {"n_train": 300, "fashion_val": 100, "n_bank": 50, "n_test": 60}  # 720 ID training images: 320 unused
    a = mc.prepare(mc.SPEC.make_config({**base, "test_seed": 1}), res)
    b = mc.prepare(mc.SPEC.make_config({**base, "test_seed": 2}), res)
    assert seen == [["x_train", "x_val", "y_train", "y_val"]] * 2  # tuning sees training and validation images only
    for k in ("x_train", "y_train", "x_val", "y_val", "bank_idx"):
        assert torch.equal(a[k], b[k])
    assert all(not torch.equal(a[k], b[k]) for k in ("x_test", "x_near", "x_far"))  # test sets change with test_seed
    # v2 (the code before v3): ID / near from the Fashion test split, far from MNIST, seeds data_seed + 1, 2, 3
    f, m = np.load(tmp_path / "f.npz"), np.load(tmp_path / "m.npz")
    ft, yt = torch.from_numpy(f["x_test"]), torch.from_numpy(f["y_test"]).long()
    mx, my = torch.from_numpy(m["x"]), torch.from_numpy(m["y"]).long()
    v2 = _names(subset(*select_classes(ft, yt, (0, 1, 2, 3, 4, 5)), 60, 1)[0]) | _names(subset(*select_classes(ft, yt, (6, 7, 8, 9)), 60, 2)[0])
    v2 |= _names(subset(mx, my, 60, 3)[0]) | _names(subset(mx, my, 1500, 3)[0])  # at this n_test and at the v2 default
    for d in (a, b):
        used = _names(d["x_train"]) | _names(d["x_val"])
        for k, source in (("x_test", 1), ("x_near", 1), ("x_far", 3)):
            names = _names(d[k])
            assert len(names) == 60 and {s for *_, s in names} == {source}
            assert not names & used and not names & v2
        assert set(d["y_test"].tolist()) <= set(range(6))
        ids = torch.tensor([256 * hi + lo for hi, lo, _ in d["x_test"][:, 0, :3].tolist()])
        assert torch.equal(torch.from_numpy(f["y_train"])[ids], d["y_test"])  # ID labels kept (classes 0-5 map to themselves)
        near = torch.tensor([256 * hi + lo for hi, lo, _ in d["x_near"][:, 0, :3].tolist()])
        assert set(torch.from_numpy(f["y_train"])[near].tolist()) <= {6, 7, 8, 9}
    with pytest.raises(ConfigError, match="n_test = 321 exceeds the 320 ID training images"):
        mc.prepare(mc.SPEC.make_config({**base, "n_test": 321}), res)
    with pytest.raises(ConfigError, match="MNIST-10k images outside the v2"):  # 1800 - 1500 = 300 fresh MNIST images
        mc.prepare(mc.SPEC.make_config({**base, "n_train": 100, "n_test": 301}), res)


def test_v2_far_indices_are_the_v2_subset_draw():
    cfg = mc.Config(n_test=40, data_seed=5)
    x, y = torch.arange(3000), torch.zeros(3000, dtype=torch.long)
    drawn = mc.v2_far_indices(cfg, 3000)
    assert drawn.numel() == mc.V2_N_TEST and set(subset(x, y, 40, 8)[0].tolist()) <= set(drawn.tolist())
    assert set(drawn.tolist()) == set(subset(x, y, 1500, 8)[0].tolist())
    assert mc.v2_far_indices(mc.Config(n_test=2000), 3000).numel() == 2000


@pytest.mark.parametrize("kind,seeds,lrs", [("supcon", [3, 4, 5], [1e-3] * 3), ("ce", [7, 7, 7], [1e-3, 3e-3, 1e-2]),
                                            ("rot", [1, 2], [3e-3, 1e-3])])
def test_stacked_members_equal_separate_members(kind, seeds, lrs):
    """Issue 27: members of one kind trained as one stacked model (fit_members: the lr grid of tuning from one seed; also
    members of different seeds) equal the members fit_member trains one at a time, within float tolerance. The tolerance is a
    twentieth of one Adam step (lr): Adam moves a weight by lr g / (|g| + eps), so where a gradient is near eps (1e-8) the
    batched kernel's last-bit rounding of g changes that one step by a fraction of lr (measured: <= 0.017 lr after
    1 step, not growing over 15); everywhere else the weights agree to 1e-6."""
    cfg = mc.Config(hidden=16, feat_dim=8, proj_dim=4, batch_size=12, shift=2)
    gen = torch.Generator().manual_seed(0)
    data = {"x_train": torch.randint(0, 256, (60, 28, 28), dtype=torch.uint8, generator=gen),
            "y_train": torch.randint(0, len(cfg.id_classes), (60,), generator=gen)}
    stacked = mc.fit_members(cfg, data, kind, seeds, lrs, 15, None)
    for k, (seed, lr) in enumerate(zip(seeds, lrs)):
        alone = mc.fit_member(cfg, data, kind, seed, lr, 15, None)
        assert set(stacked[k]) == set(alone)
        for part in ("state", {"ce": "head", "rot": "rot_head", "supcon": "proj_head"}[kind]):
            for name, value in alone[part].items():
                diff = (stacked[k][part][name] - value).abs()
                assert float(diff.max()) < 0.05 * lr and float(diff.median()) < 1e-6, (k, part, name, float(diff.max()))
    assert not torch.allclose(stacked[0]["state"]["1.weight"], stacked[1]["state"]["1.weight"])  # they really differ

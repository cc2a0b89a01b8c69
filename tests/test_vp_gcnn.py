"""vp_gcnn (ICML 2024): exact C4 equivariance of the lifting and group convolutions under a 90-degree rotation (and the
group convolution against its definition as a sum over input rotations), invariance of the full G-CNN, ECE on a hand
example, the VP distribution and regulariser on hand values, the data split (test draw fresh, tuning blind to
test_seed), and a tiny prepare -> train -> compress -> evaluate run through the spec."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from paperflow.papers import vp_gcnn as vp
from paperflow.spec import Resources


def _rot(x, r=1):
    return torch.rot90(x, r, dims=(-2, -1))


def test_lifting_and_group_convolutions_are_exactly_c4_equivariant():
    torch.manual_seed(0)
    x = torch.randn(3, 2, 12, 12, dtype=torch.float64)
    lift = vp.LiftConv(2, 3, 5).double()
    gconv = vp.GroupConv(3, 4, 3).double()
    with torch.no_grad():
        lift.bias.normal_(), gconv.bias.normal_()
        y = lift(x)
        for r in range(1, 4):  # rotating the input by r x 90 degrees rotates the plane and shifts the group axis by r
            assert torch.allclose(lift(_rot(x, r)), vp.rotate_group_features(y, r), atol=1e-12)
        z = gconv(y)
        for r in range(1, 4):
            assert torch.allclose(gconv(vp.rotate_group_features(y, r)), vp.rotate_group_features(z, r), atol=1e-12)
        assert torch.equal(vp.rotate_group_features(y, 4), y)  # the action has order 4


def test_group_convolution_matches_its_definition():
    """out[:, o, r] = sum_s sum_i f[:, i, s] * rot90(W[o, i, (s - r) mod 4], r) (correlation), computed by loops."""
    torch.manual_seed(1)
    f = torch.randn(2, 3, 4, 7, 7, dtype=torch.float64)
    gconv = vp.GroupConv(3, 2, 3).double()
    w = gconv.weight.detach()
    with torch.no_grad():
        fast = gconv(f)
    slow = torch.zeros_like(fast)
    for r in range(4):
        for s in range(4):
            k = torch.rot90(w[:, :, (s - r) % 4], r, dims=(2, 3))  # (C_out, C_in, 3, 3)
            slow[:, :, r] += F.conv2d(f[:, :, s], k, padding=1)
    assert torch.allclose(fast, slow, atol=1e-12)


def test_full_gcnn_is_invariant_and_cnn_is_not():
    torch.manual_seed(2)
    cfg = vp.Config(channels=(2, 2, 3))
    x = torch.randn(5, 1, 12, 12)
    for kind, invariant in (("gcnn", True), ("pgcnn", True), ("cnn", False)):  # pgcnn at init keeps every element (mode)
        net = vp.Net(cfg, kind).eval()
        with torch.no_grad():
            a, _, kept = net(x)
            b, _, _ = net(_rot(x))
        assert torch.allclose(a, b, atol=1e-5) == invariant, kind
        if kind != "cnn":
            assert torch.allclose(kept, torch.ones(5))


def test_vp_breaks_invariance_when_it_keeps_one_element():
    torch.manual_seed(3)
    net = vp.Net(vp.Config(channels=(2, 2, 3)), "vp_global").eval()  # init bias -3: one element per layer
    x = torch.randn(4, 1, 12, 12)
    with torch.no_grad():
        a, _, kept = net(x)
        b, _, _ = net(_rot(x))
    assert torch.allclose(kept, torch.full((4,), 0.25)) and not torch.allclose(a, b, atol=1e-4)
    with torch.no_grad():
        net.enc_z.fill_(6.0)  # tau near tau_max: every element kept -> invariant again
        a, _, kept = net(x)
        b, _, _ = net(_rot(x))
    assert torch.allclose(kept, torch.ones(4)) and torch.allclose(a, b, atol=1e-5)


def test_ece_hand_example():
    probs = torch.tensor([[0.9, 0.05, 0.05], [0.8, 0.1, 0.1], [0.6, 0.3, 0.1], [0.4, 0.35, 0.25]])
    labels = torch.tensor([0, 1, 0, 0])
    # 2 bins: (0.5, 1] holds 0.9 (right), 0.8 (wrong), 0.6 (right): |2/3 - 0.7667| x 3/4 = 0.075;
    # (0, 0.5] holds 0.4 (right): |1 - 0.4| x 1/4 = 0.15; ECE = 0.225
    assert vp.expected_calibration_error(probs, labels, 2) == pytest.approx(0.225, abs=1e-6)
    # one bin: |mean accuracy - mean confidence| = |0.75 - 0.675|
    assert vp.expected_calibration_error(probs, labels, 1) == pytest.approx(0.075, abs=1e-6)
    # a confidence of exactly 0.5 belongs to the bin (0, 0.5]
    half = torch.tensor([[0.5, 0.5], [1.0, 0.0]])
    assert vp.expected_calibration_error(half, torch.tensor([0, 0]), 2) == pytest.approx(0.25, abs=1e-6)


def test_confusion_69_hand_example():
    labels = torch.tensor([6, 6, 9, 9, 1, 6])
    pred = torch.tensor([9, 6, 6, 0, 6, 6])  # one 6 -> 9 and one 9 -> 6 among five 6/9s; 9 -> 0 and 1 -> 6 do not count
    assert vp.confusion_69(pred, labels) == pytest.approx(40.0)


def test_vp_distribution_and_regulariser():
    z = torch.tensor([-3.0, 0.0, 3.0], requires_grad=True)
    q, u = vp.vp_distribution(z, 0.1, 12.0)
    assert torch.allclose(q.sum(-1), torch.ones(3))
    assert (u.detach() > 0).sum(-1).tolist() == [1, 3, 4]  # tau = 0.67, 6.05, 11.44
    assert torch.allclose(u.detach(), (q.detach() > 0.2).float())
    tau = 0.1 + 11.9 * torch.sigmoid(torch.tensor(0.0))
    expected = torch.softmax(torch.arange(4.0) / tau, 0)
    assert torch.allclose(q[1].detach(), expected)
    u.sum().backward()  # straight-through: the hard mask passes the gradient of q
    assert z.grad is not None and torch.isfinite(z.grad).all()
    reg = vp.vp_regulariser(q.detach())
    by_hand = sum(sum((float(q[b, k].detach()) - 1 / 4.5) ** 2 for k in range(4)) for b in range(3)) / 3
    assert float(reg) == pytest.approx(by_hand, rel=1e-6)


def test_gumbel_keep_mode_and_identity():
    logits = torch.tensor([[5.0, 0.0], [-1.0, 0.0], [0.5, 0.0]])
    assert vp.gumbel_keep(logits, 1.0, training=False).tolist() == [1.0, 1.0, 0.0, 1.0]
    torch.manual_seed(0)
    sample = vp.gumbel_keep(logits, 1.0, training=True)
    assert sample[0] == 1.0 and set(sample.detach().round().tolist()) <= {0.0, 1.0}


def _fake_mnist(tmp_path, n=1000):
    """Noise images with a class-dependent bar: enough for a tiny run."""
    rng = np.random.default_rng(0)
    y = np.arange(n) % 10
    x = rng.integers(0, 30, (n, 28, 28)).astype(np.uint8)
    for i, c in enumerate(y):
        x[i, 4 + 2 * c: 7 + 2 * c, 6:14] = 230
    np.savez(tmp_path / "m.npz", x=x, y=y)
    return Resources(root=str(tmp_path), paths={"mnist10k": str(tmp_path / "m.npz")})


def test_split_is_disjoint_and_tuning_never_reads_the_test_draw(tmp_path, monkeypatch):
    res = _fake_mnist(tmp_path)
    seen = []
    monkeypatch.setattr(vp, "tune_lrs", lambda cfg, data: seen.append(sorted(data)) or {})
    base = {"n_train": 500, "n_val": 100, "n_test": 300}
    a = vp.prepare(vp.SPEC.make_config({**base, "test_seed": 1}), res)
    b = vp.prepare(vp.SPEC.make_config({**base, "test_seed": 2}), res)
    assert seen == [["k_train", "k_val", "x_train", "x_val", "y_train", "y_val"]] * 2
    for k in ("x_train", "y_train", "x_val", "y_val", "k_train"):
        assert torch.equal(a[k], b[k])
    assert not torch.equal(a["x_test"], b["x_test"])

    idx = vp.split_indices(vp.SPEC.make_config({**base, "test_seed": 1}), 1000)
    parts = [set(idx[p].tolist()) for p in ("train", "val", "test")]
    assert all(not (parts[i] & parts[j]) for i in range(3) for j in range(i + 1, 3))
    assert [len(p) for p in parts] == [500, 100, 300]
    # 6 and 9 are never rotated, every other digit is (uniformly over the four rotations)
    broken = torch.isin(a["y_train"], torch.tensor(vp.BROKEN))
    assert int(a["k_train"][broken].abs().sum()) == 0 and set(a["k_train"][~broken].tolist()) == {0, 1, 2, 3}


def test_spec_runs_end_to_end(tmp_path):
    res = _fake_mnist(tmp_path)
    spec = vp.SPEC
    cfg = spec.make_config({"n_train": 400, "n_val": 100, "n_test": 200, "channels": [2, 2, 3], "steps": 3,
                            "tune_steps": 2, "batch_size": 16, "lr_grid": [1e-3, 1e-2], "sparsities": [0.5, 0.8]})
    data = spec.prepare(cfg, res)
    assert set(data["tuning"]) == set(vp.VARIANTS)
    for v in spec.variants:
        model = spec.train(cfg, data, v, 0, lambda step, **m: None)
        m = spec.evaluate(cfg, model, data)
        assert 0 <= m["acc"] <= 100 and 0 <= m["ece"] <= 100 and 0 <= m["conf69"] <= 100
        assert m["grid_edge"] == 1.0 and m["tuned_lr"] in (1e-3, 1e-2)  # a 2-value grid has no inside
        assert ("kept_gap" in m) == (v != "cnn")
        if v == "gcnn":
            assert m["kept69"] == 100.0 and m["kept_other"] == 100.0
        comp = spec.compress(cfg, model, data, v, 0)
        mats = [t for n, t in comp["0.80"]["state"].items() if t.dim() >= 2 and (n.startswith("convs.") or n.startswith("fc."))]
        assert sum(int((t == 0).sum()) for t in mats) >= 0.8 * sum(t.numel() for t in mats) - 1
        assert math.isfinite(spec.evaluate(cfg, comp["0.50"], data)["acc"])
        again = spec.train(cfg, data, v, 0, None)
        assert all(torch.equal(model["state"][k], again["state"][k]) for k in model["state"])  # seeded
    counts = {v: spec.evaluate(cfg, spec.train(cfg, data, v, 0, None), data)["n_params"] for v in ("cnn", "gcnn")}
    assert counts["gcnn"] < counts["cnn"]

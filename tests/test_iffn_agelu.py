"""IFFN / AGeLU (ICML 2024): AGeLU at identity parameters is GeLU, the spatial enhancement is a depth-wise conv
over the patch grid that leaves the class token alone, counted FLOPs equal a hand count, the compress stage
prunes exactly the blocks' matrices, and a tiny prepare -> train -> compress -> evaluate through the spec on
synthetic images."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from paperflow.measure import count_flops, count_params
from paperflow.nn.vit import MLP
from paperflow.papers import iffn_agelu as P
from paperflow.spec import ConfigError, Resources

SPEC = P.SPEC


def test_agelu_identity_parameters_equal_gelu():
    x = torch.linspace(-6, 6, 101).view(1, -1, 1).expand(2, -1, 5)
    act = P.AGeLU(5)
    torch.testing.assert_close(act(x), F.gelu(x), atol=1e-6, rtol=1e-6)
    mirrored = P.AGeLU(5, sign=-1.0)  # the second branch's initialisation
    torch.testing.assert_close(mirrored(x), F.gelu(-x), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(act(x) - mirrored(x), x, atol=1e-5, rtol=1e-5)  # GeLU(h) - GeLU(-h) = h
    with torch.no_grad():  # general parameters: a * GeLU(b x + c) + d per channel
        for name, val in zip("abcd", (2.0, 0.5, -1.0, 0.25)):
            getattr(act, name).fill_(val)
    torch.testing.assert_close(act(x), 2.0 * F.gelu(0.5 * x - 1.0) + 0.25)


def _se(C=3, side=3, kernel=3, seed=0):
    torch.manual_seed(seed)
    se = P.SpatialEnhance(C, side, n_prefix=1, kernel=kernel)
    with torch.no_grad():
        se.bn.running_mean.normal_()
        se.bn.running_var.uniform_(0.5, 2.0)
        se.act.c.normal_()
    return se.eval()


def test_spatial_enhancement_is_depthwise_conv_on_patches_and_skips_cls():
    C, side = 3, 3
    se = _se(C, side)
    assert se.dwc.groups == C and se.dwc.weight.shape == (C, 1, 3, 3)  # depth-wise
    u = torch.randn(2, 1 + side * side, C)
    out = se(u)
    torch.testing.assert_close(out[:, 0], u[:, 0])  # the class token passes unchanged
    # explicit: every channel convolved with its own 3x3 kernel over the row-major patch grid
    grid = u[:, 1:].transpose(1, 2).reshape(2, C, side, side)
    padded = F.pad(grid, (1, 1, 1, 1))
    conv = torch.zeros_like(grid)
    for c in range(C):
        for i in range(side):
            for j in range(side):
                conv[:, c, i, j] = (padded[:, c, i : i + 3, j : j + 3] * se.dwc.weight[c, 0]).sum((-1, -2)) + se.dwc.bias[c]
    bn = (conv - se.bn.running_mean.view(1, C, 1, 1)) / torch.sqrt(se.bn.running_var.view(1, C, 1, 1) + se.bn.eps)
    bn = bn * se.bn.weight.view(1, C, 1, 1) + se.bn.bias.view(1, C, 1, 1)
    ref = u[:, 1:] + se.act(bn.flatten(2).transpose(1, 2))
    with torch.no_grad():
        torch.testing.assert_close(out[:, 1:], ref, atol=1e-5, rtol=1e-5)
        # the class token neither enters the grid nor is changed by it
        u2 = u.clone()
        u2[:, 0] += 10.0
        torch.testing.assert_close(se(u2)[:, 1:], out[:, 1:])
        u3 = u.clone()
        u3[:, 5] += 10.0  # the centre patch reaches all 8 neighbours of the 3x3 grid, never the class token
        assert torch.equal(se(u3)[:, 0], u[:, 0])


def test_iffn_counted_flops_equal_hand_count():
    C, H, side = 4, 6, 3
    N = side * side + 1  # patches + class token
    iffn = P.IFFN(C, H, N, n_prefix=1, n_branches=2, se_kernel=3)
    x = torch.randn(1, N, C)
    fc1 = 2 * N * C * H  # 2 FLOPs per multiply-add
    fc2 = 2 * N * (2 * H) * C
    dwc = 2 * (2 * H) * (side * side) * (3 * 3)  # one 3x3 kernel per channel at every grid position
    assert count_flops(iffn, x) == fc1 + fc2 + dwc == 480 + 960 + 1944
    no_se = P.IFFN(C, H, N, n_prefix=1, n_branches=2, se_kernel=0)
    assert count_flops(no_se, x) == fc1 + fc2
    assert count_flops(MLP(C, 12), x) == 4 * N * C * 12  # the plain FFN: 4 N C H
    # parameters: fc1, fc2, two AGeLU (4 per channel), dwc (weights + bias), BN affine, SE AGeLU
    assert count_params(iffn) == (C * H + H) + (2 * H * C + C) + 2 * 4 * H + (2 * H * 9 + 2 * H) + 2 * 2 * H + 4 * 2 * H


def test_ffn_small_is_flops_matched_and_iffn_is_cheaper_than_ffn4x():
    cfg = P.Config(d_model=24, n_head=2, n_layer=2)
    nets = {v: P.build_model(P.make_arch(cfg, v)) for v in P.VARIANTS}
    ffn = {v: P.ffn_cost(n, n.cfg.n_tokens)[0] for v, n in nets.items()}
    assert ffn["iffn"] < ffn["ffn4x"]
    assert abs(ffn["ffn_small"] - ffn["iffn"]) <= 4 * nets["iffn"].cfg.n_tokens * cfg.d_model * cfg.n_layer  # within one unit
    assert nets["iffn"].blocks[0].ffn.fc1.out_features == 2 * cfg.d_model
    assert nets["ffn4x"].blocks[0].ffn.fc1.out_features == 4 * cfg.d_model
    assert P.make_arch(P.Config(small_ratio=2.0), "ffn_small")["vit"]["mlp_ratio"] == 2.0
    # the ablation: the same IFFN without the spatial part (no depth-wise conv / BN), so it costs exactly FC1 + FC2
    nose = nets["iffn_nose"].blocks[0].ffn
    assert nose.se is None and nets["iffn"].blocks[0].ffn.se is not None and len(nose.branches) == 2
    n_tok = nets["iffn"].cfg.n_tokens
    assert ffn["iffn_nose"] == cfg.n_layer * 2 * n_tok * (cfg.d_model * 2 * cfg.d_model + 4 * cfg.d_model * cfg.d_model)
    assert ffn["iffn_nose"] < ffn["iffn"]


def _fake_fashion(path, n_train=256, n_test=64, seed=0):
    g = np.random.default_rng(seed)
    y_tr, y_te = g.integers(0, 10, n_train), g.integers(0, 10, n_test)

    def imgs(y):  # class-dependent bright stripe
        x = g.integers(0, 60, (len(y), 28, 28)).astype(np.uint8)
        for i, c in enumerate(y):
            x[i, 2 * c : 2 * c + 3, :] = 250
        return x

    np.savez(path, x_train=imgs(y_tr), y_train=y_tr, x_test=imgs(y_te), y_test=y_te)


TINY = dict(n_train=256, n_test=64, d_model=32, n_layer=2, n_head=2, steps=12, batch_size=16, warmup=2, log_every=4, eval_batch=32)


def test_spec_end_to_end_on_synthetic_images(tmp_path):
    path = tmp_path / "fashion.npz"
    _fake_fashion(path)
    cfg = SPEC.make_config(TINY)
    data = SPEC.prepare(cfg, Resources(str(tmp_path), {"fashion_mnist": str(path)}))
    assert data["x_train"].dtype == torch.uint8
    assert SPEC.compress is not None  # the smaller FFN is the saving; magnitude pruning is the compress stage
    metrics, logged = {}, []
    for variant in SPEC.variants:
        model = SPEC.train(cfg, data, variant, 0, lambda step, **m: logged.append(m))
        metrics[variant] = SPEC.evaluate(cfg, model, data)
        assert set(metrics[variant]) == {"acc", "flops", "params", "ffn_flops", "ffn_params"}
        assert all(math.isfinite(v) for v in metrics[variant].values())
        levels = SPEC.compress(cfg, model, data, variant, 0)
        assert sorted(levels) == ["0.50", "0.70"]
        for pruned in levels.values():
            m = SPEC.evaluate(cfg, pruned, data)
            assert m["flops"] == metrics[variant]["flops"] and 0 <= m["acc"] <= 100  # same architecture, pruned weights
    assert metrics["iffn"]["flops"] < metrics["ffn4x"]["flops"]  # at d=32 the depth-wise conv costs less than FC1 saves
    assert metrics["iffn"]["ffn_flops"] < metrics["ffn4x"]["ffn_flops"]
    assert any("train/loss" in m for m in logged)
    rows = SPEC.comparisons(cfg)
    assert [(r.metric, r.baseline, r.role) for r in rows] == [
        ("acc", "ffn4x", "headline"), ("flops", "ffn4x", "fact"), ("params", "ffn4x", "fact"), ("flops", "iffn", "fact"),
        ("acc", "ffn_small", "secondary"), ("acc", "ffn_small", "secondary"), ("acc", "iffn_nose", "secondary"),
        ("flops", "iffn", "fact"), ("acc", "ffn_small", "control"), ("acc", "ffn4x", "secondary")]
    assert rows[-1].stage == "compressed" and rows[-1].level == "0.50"
    head = rows[0]  # contract v3: the 4x FFN must beat the small plain FFN, else "close to it" is vacuous
    assert head.refuted_if and [g.kind for g in head.mechanism_gates] == ["mechanism"]
    gate = head.mechanism_gates[0].comparison
    assert (gate.metric, gate.method, gate.baseline, gate.better) == ("acc", "ffn4x", "ffn_small", "higher")
    assert SPEC.tradeoff == ("flops", "acc")


def test_compress_prunes_each_block_matrix_to_the_level_and_nothing_else():
    cfg = P.Config(d_model=24, n_head=2, n_layer=2, sparsities=(0.5, 0.7))
    torch.manual_seed(0)
    net = P.build_model(P.make_arch(cfg, "iffn"))
    model = {"state": {k: v.detach().clone() for k, v in net.state_dict().items()}, "arch": P.make_arch(cfg, "iffn")}
    levels = P.compress(cfg, model, None, "iffn", 0)
    for level, pruned in levels.items():
        s = float(level)
        for name, w in model["state"].items():
            p = pruned["state"][name]
            if name.startswith("blocks.") and w.dim() >= 2:  # qkv, proj, fc1, fc2, the SE depth-wise kernel
                assert int((p == 0).sum()) == int(w.numel() * s), name
                kept = p != 0  # the kept entries are the largest |w| of this matrix, unchanged
                assert torch.equal(p[kept], w[kept]) and w[kept].abs().min() >= w[~kept].abs().max()
            else:  # patch embedding, positions, class token, norms, AGeLU parameters, head
                assert torch.equal(p, w), name
    assert {n for n in model["state"] if n.startswith("blocks.") and model["state"][n].dim() >= 2} >= {
        "blocks.0.ffn.fc1.weight", "blocks.0.ffn.se.dwc.weight", "blocks.1.attn.qkv.weight"}


def test_training_is_deterministic_per_seed():
    cfg = P.Config(**TINY)
    g = torch.Generator().manual_seed(0)
    data = {"x_train": torch.randint(0, 256, (64, 28, 28), dtype=torch.uint8, generator=g),
            "y_train": torch.randint(0, 10, (64,), generator=g)}
    a = P.train(cfg, data, "iffn", 5, lambda *x, **k: None)["state"]
    b = P.train(cfg, data, "iffn", 5, lambda *x, **k: None)["state"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_config_validation():
    with pytest.raises(ConfigError, match="se_kernel"):
        P.Config(se_kernel=2)
    with pytest.raises(ConfigError, match="iffn_ratio"):
        P.Config(iffn_ratio=0.0)
    with pytest.raises(ConfigError, match="small_ratio"):
        P.Config(small_ratio=-1.0)
    with pytest.raises(ConfigError, match="sparsities"):
        P.Config(sparsities=(0.5, 1.0))
    with pytest.raises(ConfigError, match="unknown key"):
        SPEC.make_config({"hidden": 3})
    with pytest.raises(ConfigError, match="variant"):
        P.make_arch(P.Config(), "ffn8x")

"""SLAB (ICML 2024): RepBN folding, the PRepBN lambda schedule, simplified linear attention against an explicit
O(N^2) evaluation, and a tiny prepare -> train -> compress -> evaluate through the spec on synthetic images."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn as nn

from paperflow.papers import slab as P
from paperflow.spec import ConfigError, Resources

SPEC = P.SPEC


def _randomise_norms(net: nn.Module, seed: int = 0) -> None:
    """Non-trivial BN statistics/affine, alpha and LN affine so that folding is really tested."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, P.RepBN):
                C = m.bn.num_features
                m.bn.running_mean.copy_(torch.randn(C, generator=g))
                m.bn.running_var.copy_(torch.rand(C, generator=g) + 0.5)
                m.bn.weight.copy_(torch.randn(C, generator=g))
                m.bn.bias.copy_(torch.randn(C, generator=g))
                m.alpha.fill_(0.7)
            elif isinstance(m, nn.LayerNorm) and m.elementwise_affine:
                m.weight.copy_(torch.randn(m.normalized_shape, generator=g))
                m.bias.copy_(torch.randn(m.normalized_shape, generator=g))


TINY = dict(n_train=256, n_test=64, d_model=16, n_layer=2, n_head=2, steps=12, batch_size=16, warmup=2,
            log_every=4, eval_batch=32, latency_batch=4, latency_repeats=1, latency_rounds=1, large_patch=2)


@pytest.mark.parametrize("variant", P.VARIANTS)
def test_folded_and_unfolded_give_the_same_outputs(variant):
    cfg = P.Config(**TINY)
    torch.manual_seed(0)
    net = P.build_model(P.make_arch(cfg, variant))
    _randomise_norms(net)
    model = {"state": P._state(net), "arch": P.make_arch(cfg, variant)}
    folded = P.fold_model(model)
    a, b = P.load_model(model), P.load_model(folded)
    x = torch.randn(5, 1, 28, 28)
    with torch.no_grad():
        torch.testing.assert_close(b(x), a(x), atol=1e-5, rtol=1e-5)
    if variant == "slab":  # PRepBN: no norm op left, fewer parameters
        assert not any(isinstance(m, (P.RepBN, P.LinearNorm, nn.LayerNorm, nn.BatchNorm1d)) for m in b.modules())
        assert folded["arch"]["norm"] == "identity"
    else:  # LN: only the parameter-free standardisation stays
        assert all(not m.elementwise_affine for m in b.modules() if isinstance(m, nn.LayerNorm))
    assert sum(p.numel() for p in b.parameters()) < sum(p.numel() for p in a.parameters())


def test_repbn_affine_and_fold_into_linear():
    torch.manual_seed(1)
    bn = P.RepBN(6)
    _randomise_norms(bn)
    bn.eval()
    x = torch.randn(3, 4, 6)
    s, t = bn.affine()
    with torch.no_grad():
        ref = (x - bn.bn.running_mean) / torch.sqrt(bn.bn.running_var + bn.bn.eps) * bn.bn.weight + bn.bn.bias + 0.7 * x
        torch.testing.assert_close(bn(x), ref)
        torch.testing.assert_close(s * x + t, ref, atol=1e-6, rtol=1e-6)
        lin = nn.Linear(6, 5)
        y = lin(bn(x))
        P.fold_into(lin, s, t)
        torch.testing.assert_close(lin(x), y, atol=1e-5, rtol=1e-5)


def _used_lambda(norm: P.LinearNorm, x: torch.Tensor) -> float:
    """Run one training-mode call and recover the lambda it used from out = l LN(x) + (1 - l) RepBN(x)."""
    with torch.no_grad():
        ln, bn = norm.norm1(x), norm.norm2(x)  # BN in train mode: batch statistics, deterministic in x
        out = norm(x)
        d = (ln - bn).flatten()
        return float(((out - bn).flatten() @ d) / (d @ d))


def test_linear_norm_lambda_schedule_counts_forward_calls():
    torch.manual_seed(0)
    T, warm = 4, 2
    norm = P.LinearNorm(8, decay_steps=T, warm_steps=warm).train()
    x = torch.randn(6, 5, 8) * 3 + 1
    used = [_used_lambda(norm, x) for _ in range(warm + T + 3)]
    expected = [1.0] * warm + [(T - k) / T for k in range(T)] + [0.0] * 3  # 1, linear, then 0
    np.testing.assert_allclose(used, expected, atol=1e-5)
    # evaluation calls use only RepBN and do not move the counter
    norm2 = P.LinearNorm(8, decay_steps=T).train()
    _used_lambda(norm2, x)
    norm2.eval()
    with torch.no_grad():
        torch.testing.assert_close(norm2(x), norm2.norm2(x))
        for _ in range(5):
            norm2(x)
    norm2.train()
    assert norm2.lam() == pytest.approx((T - 1) / T)
    assert _used_lambda(norm2, x) == pytest.approx((T - 1) / T, abs=1e-5)
    # the counter is saved with the state dict
    assert int(norm2.state_dict()["remaining"]) == T - 2


def test_train_decays_lambda_over_the_configured_fraction():
    cfg = P.Config(**dict(TINY, steps=10, prepbn_decay=0.5))
    arch = P.make_arch(cfg, "slab")
    assert arch["decay_steps"] == 5
    g = torch.Generator().manual_seed(0)
    data = {"x_train": torch.randint(0, 256, (64, 28, 28), dtype=torch.uint8, generator=g),
            "y_train": torch.randint(0, 10, (64,), generator=g)}
    model = P.train(cfg, data, "slab", 0, lambda *a, **k: None)
    assert int(model["state"]["blocks.0.norm1.remaining"]) == 0  # one decrement per training step (forward call)
    assert int(model["state"]["norm.remaining"]) == 0


def _explicit_sla(q, k, v, eps=1e-6):
    """(S2) one query at a time with the full N x N kernel matrix: sum_j (q_i.k_j) v_j / (sum_j q_i.k_j + eps)."""
    BH, N, _ = q.shape
    out = torch.empty(BH, N, v.shape[-1], dtype=torch.float64)
    for b in range(BH):
        for i in range(N):
            w = torch.stack([q[b, i] @ k[b, j] for j in range(N)])  # (N,)
            out[b, i] = (w[:, None] * v[b]).sum(0) / (w.sum() + eps)
    return out


@pytest.mark.parametrize("order", ["kv", "qk", "auto"])
def test_linear_attention_equals_explicit_quadratic_form(order):
    g = torch.Generator().manual_seed(0)
    q = torch.relu(torch.randn(3, 9, 4, generator=g, dtype=torch.float64))
    k = torch.relu(torch.randn(3, 9, 4, generator=g, dtype=torch.float64))
    v = torch.randn(3, 9, 5, generator=g, dtype=torch.float64)
    out = P.linear_attention(q.float(), k.float(), v.float(), order=order)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), _explicit_sla(q, k, v), atol=1e-5, rtol=1e-5)


def test_sla_module_matches_explicit_kernel_plus_shared_dwc():
    torch.manual_seed(0)
    D, H, N = 8, 2, 16
    sla = P.SimplifiedLinearAttention(D, H, N, kernel=3)
    with torch.no_grad():
        sla.pos_k.normal_()
    x = torch.randn(2, N, D)
    q, k, v = sla.qkv(x).chunk(3, dim=-1)
    q, k = torch.relu(q), torch.relu(k + sla.pos_k)
    c = D // H
    outs = []
    for h in range(H):
        sl = slice(h * c, (h + 1) * c)
        att = _explicit_sla(q[..., sl].double(), k[..., sl].double(), v[..., sl].double()).float()  # (B, N, c)
        grid = v[..., sl].transpose(1, 2).reshape(2, c, 4, 4)  # the same conv for every head
        outs.append(att + sla.dwc(grid).flatten(2).transpose(1, 2))
    ref = sla.proj(torch.cat(outs, dim=-1))
    with torch.no_grad():
        torch.testing.assert_close(sla(x), ref, atol=1e-5, rtol=1e-5)
    assert sla.dwc.groups == c and sla.dwc.weight.shape == (c, 1, 3, 3)  # depth-wise, head_dim channels
    with pytest.raises(ConfigError, match="square"):
        P.SimplifiedLinearAttention(D, H, 17)


def _fake_fashion(path, n_train=256, n_test=64, seed=0):
    g = np.random.default_rng(seed)
    y_tr, y_te = g.integers(0, 10, n_train), g.integers(0, 10, n_test)

    def imgs(y):  # class-dependent bright stripe, learnable in a few steps
        x = g.integers(0, 60, (len(y), 28, 28)).astype(np.uint8)
        for i, c in enumerate(y):
            x[i, 2 * c : 2 * c + 3, :] = 250
        return x

    np.savez(path, x_train=imgs(y_tr), y_train=y_tr, x_test=imgs(y_te), y_test=y_te)


def test_spec_end_to_end_on_synthetic_images(tmp_path):
    path = tmp_path / "fashion.npz"
    _fake_fashion(path)
    cfg = SPEC.make_config(TINY)
    data = SPEC.prepare(cfg, Resources(str(tmp_path), {"fashion_mnist": str(path)}))
    assert data["x_train"].dtype == torch.uint8 and data["x_train"].shape == (256, 28, 28)
    logged, table = [], []
    for variant in SPEC.variants:
        model = SPEC.train(cfg, data, variant, 0, lambda step, **m: logged.append((variant, step, m)))
        dense = SPEC.evaluate(cfg, model, data)
        levels = SPEC.compress(cfg, model, data, variant, 0)
        assert set(levels) == {P.LEVEL}
        comp = SPEC.evaluate(cfg, levels[P.LEVEL], data)
        for m in (dense, comp):
            assert set(m) >= {"acc", "flops", "params", "latency_ms", "latency_rel", "latency_large_ms", "latency_large_rel"}
            assert all(math.isfinite(v) for k, v in m.items() if not (k == "sla_share" and variant == "ln_softmax"))
            assert 0 < m["sla_share"] < 1 if variant == "slab" else math.isnan(m["sla_share"])
        assert comp["latency_replaced_share"] < 1 and "latency_replaced_share" not in dense  # folded stage only (timing: noisy)
        table.append({"paper": "slab", "variant": variant, "seed": 0, **{f"dense/{k}": v for k, v in dense.items()},
                      **{f"compressed:{P.LEVEL}/{k}": v for k, v in comp.items()}})
        assert comp["acc"] == pytest.approx(dense["acc"], abs=100.0 / 64 + 1e-9)  # folding is exact up to ties
        assert comp["params"] < dense["params"] and comp["flops"] == dense["flops"]
    assert any("train/prepbn_lambda" in m for v, _, m in logged if v == "slab")
    rows = SPEC.comparisons(cfg)
    head = [r for r in rows if r.role == "headline"]
    assert len(head) == 1 and head[0].column == "compressed:folded/latency_claim_j"  # latency AND accuracy (timing: interleaved)
    assert {g.metric for g in head[0].mechanism_gates} == {"sla_share", "compressed:folded/latency_replaced_share"}
    assert any(r.column == "dense/acc" and r.kind == "close" and r.role == "secondary" for r in rows)
    assert all(r.role == "fact" for r in rows if r.metric in ("flops", "flops_large", "params", "sla_share"))
    assert all(r.method == "slab" and r.baseline in ("ln_softmax", "") for r in rows)
    by = {r["variant"]: r for r in SPEC.derive(cfg, table)}
    assert by["ln_softmax"]["compressed:folded/latency_claim_j"] == 0.0
    assert by["slab"]["compressed:folded/latency_claim_j"] == pytest.approx(min(by["slab"]["compressed:folded/latency_term"],
                                                                        by["slab"]["compressed:folded/acc_term"]))
    assert all(r.column in by[r.method] and (not r.baseline or r.column in by[r.baseline]) for r in rows)


def test_claim_terms_by_hand():
    """latency_claim_j = min(1 - latency ratio, acc / acc_LN - (1 - margin)) > 0 iff faster AND accuracy within the margin."""
    cfg = P.Config(acc_margin=0.01)
    t = P.claim_terms(cfg, {"latency_rel": 0.8, "acc": 85.0}, {"acc": 85.0})
    assert t["latency_term"] == pytest.approx(0.2) and t["acc_term"] == pytest.approx(0.01) and t["latency_claim_j"] == pytest.approx(0.01)
    assert P.claim_terms(cfg, {"latency_rel": 1.1, "acc": 90.0}, {"acc": 85.0})["latency_claim_j"] == pytest.approx(-0.1)
    assert P.claim_terms(cfg, {"latency_rel": 0.5, "acc": 80.0}, {"acc": 100.0})["latency_claim_j"] == pytest.approx(-0.19)


def test_sla_share_is_the_linear_terms_norm_share():
    torch.manual_seed(0)
    cfg = SPEC.make_config(TINY)
    net = P.build_model(P.make_arch(cfg, "slab")).eval()
    x = torch.randint(0, 256, (8, 28, 28), dtype=torch.uint8)
    share = P.sla_share(cfg, net, x)
    for m in net.modules():  # zero DWC: the whole attention output is the linear term
        if isinstance(m, P.SimplifiedLinearAttention):
            torch.nn.init.zeros_(m.dwc.weight), torch.nn.init.zeros_(m.dwc.bias)
    assert 0 < share < 1 and P.sla_share(cfg, net, x) == pytest.approx(1.0)
    assert SPEC.tradeoff == ("latency_ms", "acc")


def test_training_is_deterministic_per_seed():
    cfg = P.Config(**TINY)
    g = torch.Generator().manual_seed(0)
    data = {"x_train": torch.randint(0, 256, (64, 28, 28), dtype=torch.uint8, generator=g),
            "y_train": torch.randint(0, 10, (64,), generator=g)}
    a = P.train(cfg, data, "slab", 3, lambda *x, **k: None)["state"]
    b = P.train(cfg, data, "slab", 3, lambda *x, **k: None)["state"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_config_validation():
    with pytest.raises(ConfigError, match="patch_size"):
        P.Config(patch_size=5)
    with pytest.raises(ConfigError, match="prepbn_decay"):
        P.Config(prepbn_decay=0.0)
    with pytest.raises(ConfigError, match="dwc_kernel"):
        P.Config(dwc_kernel=4)
    with pytest.raises(ConfigError, match="unknown key"):
        SPEC.make_config({"no_such_key": 1})
    with pytest.raises(ConfigError, match="variant"):
        P.make_arch(P.Config(), "ln_linear")


def test_layernorm_eps_is_the_authors_1e6_and_latency_reference_matches_the_stage():
    cfg = P.Config(**TINY)
    for variant in P.VARIANTS:
        arch = P.make_arch(cfg, variant)
        lns = [m for m in P.build_model(arch).modules() if isinstance(m, nn.LayerNorm)]
        assert lns and all(m.eps == 1e-6 for m in lns)  # LN baseline and LinearNorm's norm1
        folded = dict(arch, norm={"prepbn": "identity", "ln": "lnstat"}[arch["norm"]])
        assert all(m.eps == 1e-6 for m in P.build_model(folded).modules() if isinstance(m, nn.LayerNorm))
        # the latency reference is LN + softmax at the same stage; for ln_softmax its own architecture (A/A)
        assert P._reference_arch(arch)["norm"] == "ln" and P._reference_arch(folded)["norm"] == "lnstat"
        if variant == "ln_softmax":
            assert P._reference_arch(arch) == arch and P._reference_arch(folded) == folded

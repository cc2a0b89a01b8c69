"""Tests of papers/icl_functional_gd.py: the Proposition 3.1 construction (a hand-set kernel-attention layer IS one
functional GD step), functional GD converging to kernel interpolation, the data sampler, and the spec path."""
from __future__ import annotations

import math

import pytest
import torch

from paperflow.papers import icl_functional_gd as P
from paperflow.spec import ConfigError


def _prompt(n=6, d=3, b=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, n + 1, d, generator=g)
    x = x / x.norm(dim=-1, keepdim=True)
    y = torch.randn(b, n + 1, generator=g)
    return x, y


def _hand_set(net: P.KernelAttentionTransformer, etas):
    """Proposition 3.1: B = C = [[I_d, 0], [0, 0]] (x only), V = [[0, 0], [0, -eta_l]] (every member)."""
    d = net.d
    with torch.no_grad():
        if net.param == "full":
            net.B.zero_(); net.C.zero_(); net.V.zero_()
            net.B[..., :d, :d] = torch.eye(d); net.C[..., :d, :d] = torch.eye(d)
            net.V[..., d, d] = -torch.as_tensor(etas)
        else:
            net.B.copy_(torch.eye(d).expand_as(net.B)); net.C.copy_(net.B)
            net.V.copy_(-torch.as_tensor(etas).expand_as(net.V))


@pytest.mark.parametrize("param", ["full", "sparse"])
@pytest.mark.parametrize("act", P.ACTS)
def test_one_hand_set_layer_is_one_functional_gd_step(act, param):
    x, y = _prompt()
    n, d, eta = x.shape[1] - 1, x.shape[2], 0.7
    net = P.KernelAttentionTransformer(d, 1, act, param, 0.0)
    _hand_set(net, [eta])
    z1 = net.layer(P.to_tokens(x, y)[None], 0)[0]
    # f_1(x_j) = eta (1/n) sum_i y_i K(x_i, x_j), written out by hand (softmax: normalised over the n keys)
    k = torch.empty(x.shape[0], n, n + 1)
    for b in range(x.shape[0]):
        for i in range(n):
            for j in range(n + 1):
                t = float(x[b, i] @ x[b, j])
                k[b, i, j] = {"linear": t, "relu": max(t, 0.0), "exp": math.exp(t), "softmax": math.exp(t)}[act]
    k = k / k.sum(1, keepdim=True) if act == "softmax" else k / n
    f1 = eta * torch.einsum("bi,bij->bj", y[:, :n], k)
    assert torch.allclose(z1[:, :d], P.to_tokens(x, y)[:, :d])  # x rows untouched
    assert torch.allclose(z1[:, d, :n], y[:, :n] - f1[:, :n], atol=1e-5)  # residuals y_i - f_1(x_i)
    assert torch.allclose(-z1[:, d, n], f1[:, n], atol=1e-5)  # -[Z_1]_{d+1,n+1} = f_1(x_q)
    # and L hand-set layers = L functional GD steps (E3) with the same step sizes
    etas = [0.3, 0.9, 1.4]
    net3 = P.KernelAttentionTransformer(d, 3, act, param, 0.0)
    _hand_set(net3, etas)
    assert torch.allclose(net3(P.to_tokens(x, y))[0], P.functional_gd(act, x, y, torch.tensor(etas)), atol=1e-5)


def test_functional_gd_many_steps_converges_to_kernel_interpolation():
    x, y = _prompt(n=5, d=3, b=2, seed=3)
    x, y = x.double(), y.double()
    n = 5
    k = torch.exp(x @ x.transpose(1, 2))  # K_exp, positive definite on distinct points
    lam_max = torch.linalg.eigvalsh(k[:, :n, :n] / n).max()
    eta = float(1.0 / lam_max)  # < 2 / lambda_max: the iteration r <- (I - eta K/n) r contracts
    f = P.functional_gd("exp", x, y, torch.full((20000,), eta, dtype=torch.float64))
    interp = (k[:, n:, :n] @ torch.linalg.solve(k[:, :n, :n], y[:, :n, None]))[:, 0, 0]  # K_q^T K^{-1} Y
    assert torch.allclose(f, interp, rtol=1e-4, atol=1e-5)
    # the GP posterior mean (E6) with noise -> 0 is the same interpolant
    assert torch.allclose(P.bayes_predict("exp", x.float(), y.float(), 0.0).double(), interp, atol=2e-3)


def test_psd_clip_and_sampler():
    a = torch.tensor([[1.0, 2.0], [2.0, 1.0]], dtype=torch.float64)  # eigenvalues 3, -1
    c = P.psd_clip(a)
    assert torch.allclose(c, torch.full((2, 2), 1.5, dtype=torch.float64))
    spd = torch.tensor([[2.0, 0.5], [0.5, 1.0]], dtype=torch.float64)
    assert torch.allclose(P.psd_clip(spd), spd)
    g = torch.Generator().manual_seed(0)
    x, y = P.sample_prompts("linear", 4000, 1, 2, 0.0, g)
    assert torch.allclose(x.norm(dim=-1), torch.ones(4000, 2), atol=1e-5)
    # linear kernel: y = w^T x with w ~ N(0, I), so Cov(y_1, y_2) = x_1^T x_2 -> E[y_1 y_2 - x_1.x_2] = 0
    resid = (y[:, 0] * y[:, 1] - (x[:, 0] * x[:, 1]).sum(-1)).mean()
    assert abs(float(resid)) < 0.06
    assert abs(float((y[:, 0] ** 2).mean()) - 1.0) < 0.08


@pytest.mark.parametrize("param", ["full", "sparse"])
def test_stacked_members_equal_separate_models_and_train_independently(param):
    """The four activations as members of one batched model: forward = each one-activation model's forward, and
    one MemberClipAdam step = one Adam step of each model alone with its own clip_grad_norm_ (clipping active)."""
    x, y = _prompt(n=7, b=8, seed=5)
    z, gen = P.to_tokens(x, y), torch.Generator().manual_seed(3)
    stacked = P.KernelAttentionTransformer(3, 2, P.ACTS, param, 0.3, 0.5, gen)
    assert torch.equal(stacked.B[0], stacked.B[3])  # the same initial matrices for every activation
    singles = []
    for k, act in enumerate(P.ACTS):
        net = P.KernelAttentionTransformer(3, 2, act, param, 0.0)
        net.load_state_dict(stacked.member(k))
        singles.append(net)
        assert torch.allclose(net(z)[0], stacked(z)[k], atol=1e-6)
    opt = P.MemberClipAdam(stacked.parameters(), lr=0.05, clip_norm=1e-3)
    opt.zero_grad()
    ((stacked(z) - y[:, -1]) ** 2).mean(1).sum().backward()
    opt.step()
    for k, net in enumerate(singles):
        o = torch.optim.Adam(net.parameters(), lr=0.05)
        ((net(z)[0] - y[:, -1]) ** 2).mean().backward()
        assert float(torch.nn.utils.clip_grad_norm_(list(net.parameters()), 1e-3)) > 1e-3  # the clip is active
        o.step()
        for name, p in net.named_parameters():
            assert torch.allclose(p, stacked.member(k)[name], atol=1e-6), (k, name)


def test_variants_config_and_comparisons():
    assert P.parse_variant("on_exp") == "exp"
    with pytest.raises(ConfigError):
        P.parse_variant("on_gelu")
    for bad in (dict(n_min=10, n_max=5), dict(attn_param="dense"), dict(eval_ns=()), dict(noise=-1.0), dict(n_layer=0),
                dict(bc_std=0.0), dict(sparsities=(1.0,))):
        with pytest.raises(ConfigError):
            P.Config(**bad)
    cfg = P.Config()
    assert cfg.eval_ns == tuple(cfg.eval_ns) and isinstance(P.Config(eval_ns=[4, 8]).eval_ns, tuple)
    rows = P.comparisons(cfg)
    assert [r.role for r in rows].count("headline") == 1 and rows[0].method == "on|matched"
    views = {f"{v}|{m}" for v in P.VARIANTS for m in P.MODELS} | {"on|matched", "on|swapped", "on|linear", "on|softmax",
                                                                    "on|fgd"}
    assert all(r.method in views and (r.baseline in views or r.role == "fact") for r in rows)


def test_derive_views_average_the_two_classes():
    rows = []
    for cls, base in (("relu", 1.0), ("exp", 10.0)):
        m = {f"dense/{a}.rel_err": base + k for k, a in enumerate(P.MODELS)}
        m.update({f"compressed:0.50/{a}.rel_err": 2 * base + k for k, a in enumerate(P.MODELS)})
        rows.append({"paper": "icl_functional_gd", "variant": f"on_{cls}", "seed": 0, **m})
    out = {r["variant"]: r for r in P.derive(P.Config(), rows)}
    k = {a: i for i, a in enumerate(P.MODELS)}
    assert out["on_exp|softmax"]["dense/rel_err"] == 10.0 + k["softmax"]
    # matched: relu on K_relu (1 + k_relu), exp on K_exp (10 + k_exp); swapped: the other way round
    assert out["on|matched"]["dense/rel_err"] == pytest.approx((1 + k["relu"] + 10 + k["exp"]) / 2)
    assert out["on|swapped"]["dense/rel_err"] == pytest.approx((1 + k["exp"] + 10 + k["relu"]) / 2)
    assert out["on|matched"]["compressed:0.50/rel_err"] == pytest.approx((2 + k["relu"] + 20 + k["exp"]) / 2)


def test_end_to_end_through_spec():
    cfg = P.Config(steps=3, fgd_steps=3, fit_steps=3, eval_prompts=8, eval_ns=(4, 8), n_min=4, n_max=8,
                   batch_size=4, warmup=0, log_every=1)
    data = P.SPEC.prepare(cfg, None)
    logged = []
    for variant in P.VARIANTS:
        model = P.SPEC.train(cfg, data, variant, 0, lambda step, **m: logged.append(m))
        model = torch.load(_roundtrip(model), weights_only=True)
        m = P.SPEC.evaluate(cfg, model, data)
        for key in ("exp.icl_err", "relu.err@4", "linear.err@8", "bayes_err", "softmax.fgd_gap", "fgd.rel_err"):
            assert math.isfinite(m[key]), (variant, key)
        levels = P.SPEC.compress(cfg, model, data, variant, 0)
        assert set(levels) == {"0.50", "0.80"}
        for lv, frac in (("0.50", 0.5), ("0.80", 0.8)):
            st = levels[lv]["states"]["relu"]
            zeros = sum(int((st[k] == 0).sum()) for k in ("B", "C"))
            assert zeros == int(frac * (st["B"].numel() + st["C"].numel()))  # global magnitude pruning of B, C
            assert torch.equal(st["V"], model["states"]["relu"]["V"])
            mc = P.SPEC.evaluate(cfg, levels[lv], data)
            assert math.isfinite(mc["relu.icl_err"]) and "relu.fgd_gap" not in mc
    assert logged and any("train/loss_relu" in m for m in logged) and any("train/loss_fgd" in m for m in logged)
    # determinism given the seed
    a = P.SPEC.train(cfg, data, "on_relu", 1, lambda *a, **k: None)
    b = P.SPEC.train(cfg, data, "on_relu", 1, lambda *a, **k: None)
    assert all(torch.equal(a["states"]["exp"][k], b["states"]["exp"][k]) for k in a["states"]["exp"])


def _roundtrip(obj):
    import io
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return buf


def test_headline_gates_and_verdicts():
    """Contract v3: the headline carries a mechanism gate on the logged fgd_gap (the matched transformer IS functional
    GD in the data kernel's RKHS) and says what refutes it; a table where the matched activation loses reads
    `not reproduced`, one where the matched transformer does not track FGD reads `not testable`."""
    import dataclasses

    import polars as pl

    from paperflow.report.claims import claims_rows

    cfg = P.Config()
    head = [r for r in P.comparisons(cfg) if r.role == "headline"][0]
    assert head.refuted_if and [g.metric for g in head.mechanism_gates] == ["fgd_gap"]
    spec = dataclasses.replace(P.SPEC, comparisons=lambda _cfg: [head])

    def table(matched, swapped, gap):
        rows = []
        for s in range(10):
            j = 0.01 * (s % 3)
            rows += [{"variant": "on|matched", "seed": s, "dense/rel_err": matched + j, "dense/r2": 0.8, "dense/fgd_gap": gap},
                     {"variant": "on|swapped", "seed": s, "dense/rel_err": swapped + 2 * j, "dense/r2": 0.7},
                     {"variant": "on|fgd", "seed": s, "dense/rel_err": 4.0 + j},
                     {"variant": "on|fgd_swap", "seed": s, "dense/rel_err": 5.0 + 2 * j}]
        return pl.DataFrame(rows)

    verdict = lambda t: claims_rows(spec, cfg, t, "default")[0]["verdict"]
    assert verdict(table(3.0, 4.0, 0.05)) == "reproduced"
    assert verdict(table(4.5, 4.0, 0.05)) == "not reproduced"
    assert verdict(table(3.0, 4.0, 0.30)) == "not testable"

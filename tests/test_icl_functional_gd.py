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
    """Proposition 3.1: B = C = [[I_d, 0], [0, 0]] (x only), V = [[0, 0], [0, -eta_l]]."""
    d = net.d
    with torch.no_grad():
        if net.param == "full":
            net.B.zero_(); net.C.zero_(); net.V.zero_()
            net.B[:, :d, :d] = torch.eye(d); net.C[:, :d, :d] = torch.eye(d)
            net.V[:, d, d] = -torch.as_tensor(etas)
        else:
            net.B.copy_(torch.eye(d).repeat(net.n_layer, 1, 1)); net.C.copy_(net.B)
            net.V.copy_(-torch.as_tensor(etas))


@pytest.mark.parametrize("param", ["full", "sparse"])
@pytest.mark.parametrize("act", P.ACTS)
def test_one_hand_set_layer_is_one_functional_gd_step(act, param):
    x, y = _prompt()
    n, d, eta = x.shape[1] - 1, x.shape[2], 0.7
    net = P.KernelAttentionTransformer(d, 1, act, param, 0.0)
    _hand_set(net, [eta])
    z1 = net.layer(P.to_tokens(x, y), 0)
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
    assert torch.allclose(net3(P.to_tokens(x, y)), P.functional_gd(act, x, y, torch.tensor(etas)), atol=1e-5)


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


def test_variants_config_and_comparisons():
    assert P.parse_variant("relu_on_exp") == ("relu", "exp")
    assert P.parse_variant("fgd_on_relu") == ("fgd", "relu")
    with pytest.raises(ConfigError):
        P.parse_variant("gelu_on_relu")
    for bad in (dict(classes=("rbf",)), dict(classes=("linear",)), dict(n_min=10, n_max=5), dict(attn_param="dense"), dict(eval_ns=()),
                dict(noise=-1.0), dict(n_layer=0)):
        with pytest.raises(ConfigError):
            P.Config(**bad)
    cfg = P.Config()
    assert cfg.eval_ns == tuple(cfg.eval_ns) and isinstance(P.Config(eval_ns=[4, 8]).eval_ns, tuple)
    rows = P.comparisons(cfg)
    assert {r.method for r in rows} == {"relu_on_relu", "exp_on_exp"}
    assert all(r.baseline in P.VARIANTS and r.method in P.VARIANTS for r in rows)


def test_end_to_end_through_spec():
    cfg = P.Config(steps=3, fgd_steps=3, fit_steps=3, eval_prompts=8, eval_ns=(4, 8), n_min=4, n_max=8,
                   batch_size=4, warmup=0, log_every=1)
    data = P.SPEC.prepare(cfg, None)
    logged = []
    for variant in ("exp_on_exp", "linear_on_relu", "fgd_on_relu"):
        model = P.SPEC.train(cfg, data, variant, 0, lambda step, **m: logged.append(m))
        model = torch.load(_roundtrip(model), weights_only=True)
        m = P.SPEC.evaluate(cfg, model, data)
        for key in ("icl_err", "err@4", "err@8", "bayes_err", "fgd_gap", "fgd_eta_3"):
            assert math.isfinite(m[key]), (variant, key)
    assert logged and all("train/loss" in m for m in logged)
    assert P.SPEC.compress is None
    # determinism given the seed
    a = P.SPEC.train(cfg, data, "relu_on_relu", 1, lambda *a, **k: None)
    b = P.SPEC.train(cfg, data, "relu_on_relu", 1, lambda *a, **k: None)
    assert all(torch.equal(a["state"][k], b["state"][k]) for k in a["state"])


def _roundtrip(obj):
    import io
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return buf

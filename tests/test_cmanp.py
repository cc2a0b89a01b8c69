"""cmanp (ICML 2024): the cross-attention update identity (chunked == one pass, state included), CMANP and CNP
streamed prediction == one pass, constant vs growing inference memory, the log-log slope, and a tiny spec run."""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from paperflow.papers import cmanp as cm
from paperflow.spec import ConfigError

TINY = dict(d_model=8, n_latents=3, n_layers=2, n_heads=2, dim_ff=8, baseline_width=8, steps=4, tune_steps=2, batch_size=2,
            lr_grid=(1e-3,), n_val_batches=1, n_test_batches=1, eval_tasks=2, mem_contexts=(8, 16, 32), mem_block=4,
            mem_targets=3, max_points=12, log_every=2)


def test_cross_attention_update_equals_one_pass():
    torch.manual_seed(0)
    mha = cm.MHA(8, 6, heads=2).double()
    x = torch.randn(3, 4, 8, dtype=torch.float64)
    ctx = torch.randn(3, 11, 6, dtype=torch.float64) * 3  # large logits: the stable form matters
    c_full, o_full = mha.start(x, ctx)
    state = mha.start(x, ctx[:, :2])
    for a, b in ((2, 7), (7, 8), (8, 11)):
        state = mha.update(x, ctx[:, a:b], state)
    assert torch.allclose(state[0], c_full, atol=1e-10) and torch.allclose(state[1], o_full, atol=1e-10)
    assert torch.allclose(mha.finish(state), mha(x, ctx), atol=1e-10)
    # the log normaliser is log sum_j exp(s_ij), by brute force
    s, _ = mha._logits(x, ctx)
    assert torch.allclose(c_full.squeeze(-1), torch.log(torch.exp(s).sum(-1)), atol=1e-9)


@pytest.mark.parametrize("variant", ["cmanp", "cnp"])
def test_streamed_prediction_equals_one_pass(variant):
    cfg = cm.Config(**TINY)
    net = cm.build(cfg, variant, 0).double().eval()
    gen = torch.Generator().manual_seed(1)
    xc, yc, xt = (torch.randn(2, n, 1, generator=gen, dtype=torch.float64) for n in (13, 13, 5))
    m1, s1 = net(xc, yc, xt, None)
    for block in (1, 4, 5, 13, 50):
        m2, s2 = net(xc, yc, xt, block)
        assert torch.allclose(m1, m2, atol=1e-10) and torch.allclose(s1, s2, atol=1e-10)
    # permutation invariance in the context (CMAB property (i))
    perm = torch.randperm(13, generator=gen)
    m3, _ = net(xc[:, perm], yc[:, perm], xt, 4)
    assert torch.allclose(m1, m3, atol=1e-10)


def test_memory_constant_when_streamed_and_growing_otherwise():
    cfg = cm.Config(**{**TINY, "mem_contexts": (16, 32, 64, 128)})
    ctx = list(cfg.mem_contexts)
    cmanp = cm.build(cfg, "cmanp", 0).eval()
    streamed = cm.memory_curve(cfg, cmanp, cfg.mem_block)
    assert abs(cm.slope(ctx, streamed)) < 0.02
    assert cm.slope(ctx, cm.memory_curve(cfg, cmanp, None)) > 0.5
    anp = cm.build(cfg, "anp", 0).eval()
    assert cm.slope(ctx, cm.memory_curve(cfg, anp, None)) > 1.0  # self-attention over the context: ~ |D_C|^2


def test_slope_of_a_power_law():
    xs = [10, 20, 40, 80]
    assert cm.slope(xs, [3 * x ** 1.5 for x in xs]) == pytest.approx(1.5)
    assert cm.slope(xs, [7.0] * 4) == pytest.approx(0.0)


def test_config_refuses_bad_values():
    with pytest.raises(ConfigError):
        cm.Config(d_model=10, n_heads=4)
    with pytest.raises(ConfigError):
        cm.Config(test_seed=1000)  # equals tune_seed
    with pytest.raises(ConfigError):
        cm.Config(mem_contexts=(16, 64), mem_block=32)


def test_tiny_run_through_the_spec():
    cfg = cm.Config(**TINY)
    data = cm.prepare(cfg, None)
    assert set(data["tuning"]) == set(cm.VARIANTS)
    for variant in cm.VARIANTS:
        model = cm.train(cfg, data, variant, 0, None)
        levels = cm.compress(cfg, model, data, variant, 0)
        dense = cm.evaluate(cfg, model, data)
        assert math.isfinite(dense["tar_ll"]) and dense["ll_gap"] == pytest.approx(dense["oracle_ll"] - dense["tar_ll"])
        if variant == "anp":
            assert levels == {}
        else:
            comp = cm.evaluate(cfg, levels[cm.STREAM], data)
            assert comp["stream_max_abs_diff"] < 1e-4
            assert comp["tar_ll"] == pytest.approx(dense["tar_ll"], abs=1e-4)
            assert abs(comp["mem_exponent"]) < 0.05
    assert dataclasses.is_dataclass(cfg)

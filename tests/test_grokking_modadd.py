"""grokking_modadd: the analytic Fourier solution (100% accuracy, margin 9p/4, l_inf norm 1), the batched network
against a per-pair loop, splits, pruning, and a tiny run through the spec."""
from __future__ import annotations

import math

import pytest
import torch

from paperflow.papers import grokking_modadd as gm
from paperflow.spec import ConfigError


@pytest.mark.parametrize("p", [5, 7, 13])
def test_fourier_construction_is_exact(p):
    U, V, W = gm.fourier_network(p)
    assert U.shape == (p, 9 * (p - 1) // 2) and W.shape == (9 * (p - 1) // 2, p)
    assert float(max(U.abs().max(), V.abs().max(), W.abs().max())) <= 1 + 1e-12  # l_inf norm 1
    logits = gm.logits_of(U[None], V[None], W[None])[0]
    labels = gm.labels_of(p)
    assert bool((logits.argmax(-1) == labels).all())  # 100% accuracy on all p^2 pairs
    # closed form: logit(c) = 9/2 sum_k cos(2 pi k (a+b-c)/p) = 9(p-1)/4 if c = a+b else -9/4
    correct = logits.gather(1, labels[:, None])[:, 0]
    torch.testing.assert_close(correct, torch.full_like(correct, 9 * (p - 1) / 4))
    torch.testing.assert_close(gm.margin(logits, labels), torch.full((p * p,), 9 * p / 4, dtype=torch.float64))


def test_batched_logits_match_a_loop():
    g = torch.Generator().manual_seed(0)
    U, V, W = torch.randn(2, 5, 3, generator=g), torch.randn(2, 5, 3, generator=g), torch.randn(2, 3, 5, generator=g)
    out = gm.logits_of(U, V, W)
    for f in range(2):
        for a in range(5):
            for b in range(5):
                torch.testing.assert_close(out[f, a * 5 + b], (U[f, a] + V[f, b]) ** 2 @ W[f])
    assert gm.labels_of(5)[2 * 5 + 4] == 1


def test_linearized_network_is_the_first_order_taylor_expansion():
    g = torch.Generator().manual_seed(1)
    U, V, W = (torch.randn(1, 5, 4, generator=g, dtype=torch.float64) for _ in range(2)), None, None
    U, V = list(U)
    W = torch.randn(1, 4, 5, generator=g, dtype=torch.float64)
    dU, dV, dW = (torch.randn(*t.shape, generator=g, dtype=torch.float64) for t in (U, V, W))
    f0 = gm.logits_of(U, V, W)
    torch.testing.assert_close(gm.linear_logits(U, V, W, 0 * dU, 0 * dV, 0 * dW), f0)
    for eps in (1e-3, 1e-4):  # error of the linearization is O(eps^2)
        exact = gm.logits_of(U + eps * dU, V + eps * dV, W + eps * dW)
        lin = gm.linear_logits(U, V, W, eps * dU, eps * dV, eps * dW)
        assert float((exact - lin).abs().max()) < 50 * eps**2


def test_splits_are_disjoint_and_sized():
    cfg = gm.Config(p=7, fractions=(0.3, 0.6))
    m = gm.split_masks(cfg, 3)
    assert not bool((m["train"] & m["val"]).any() or (m["train"] & m["test"]).any() or (m["val"] & m["test"]).any())
    assert m["train"].sum(1).tolist() == [round(0.3 * 49), round(0.6 * 49)]
    assert bool((m["train"][0] <= m["train"][1]).all())  # nested training sets


def test_tiny_run_through_spec_and_pruning():
    spec = gm.SPEC
    cfg = spec.make_config({"p": 7, "width": 8, "fractions": [0.5, 0.8], "steps": 10, "tune_steps": 2, "eval_every": 5,
                            "lr_grid": [3e-2]})
    data = spec.prepare(cfg, None)
    assert set(data["tuning"]) == set(gm.VARIANTS)
    logged = []
    for v in gm.VARIANTS:
        model = spec.train(cfg, data, v, 0, lambda step, **m: logged.append(m))
        out = spec.evaluate(cfg, model, data)
        assert 0 < out["frac_needed"] <= 1 and out["tuned_lr"] in cfg.lr_grid
        levels = spec.compress(cfg, model, data, v, 0)
        W = levels["0.80"]["W"]
        keys = [k for k in ("U", "V", "W", "dU", "dV", "dW") if k in model]
        for i in range(2):
            n = sum(levels["0.80"][k][i].numel() for k in keys)
            assert sum(int((levels["0.80"][k][i] == 0).sum()) for k in keys) >= int(0.8 * n)
        if v == "kernel":
            assert torch.equal(model["U"], gm.fit(cfg, v, 0, 1e-2, 1)["U"])  # linearized at a fixed init
            assert float(model["dW"].abs().sum()) > 0
        assert W.shape == model["W"].shape
    assert any("val/test_acc_f0.8" in m for m in logged)
    rows = gm.derive(cfg, [{"variant": "linf", "seed": 0, "dense/gen_step": 30.0, "dense/fit_step": 10.0}])
    assert rows[-1]["variant"] == "linf|fit" and rows[-1]["dense/gen_step"] == 10.0
    assert [c.role for c in gm.comparisons(cfg)].count("headline") == 1
    with pytest.raises(ConfigError, match="prime"):
        gm.Config(p=21)
    with pytest.raises(ConfigError, match="fractions"):
        gm.Config(fractions=(0.5, 0.2))


def test_linf_decay_bounds_the_weights():
    cfg = gm.Config(p=7, width=8, fractions=(0.5, 0.8), steps=30, eval_every=30)
    lin, none = gm.fit(cfg, "linf", 0, 3e-2, 30), gm.fit(cfg, "none", 0, 3e-2, 30)
    norm = lambda m: max(float(m[k].abs().max()) for k in "UVW")
    assert norm(lin) < norm(none) and math.isfinite(norm(lin))

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
    assert data["tuning"]["linf"]["tuned_lr"] == data["tuning"]["none"]["tuned_lr"] and "tuned_lam" in data["tuning"]["linf"]
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


def _prox_brute(x: torch.Tensor, tau: float) -> torch.Tensor:
    """argmin_y 0.5 ||y - x||^2 + tau ||y||_inf by scanning the l_inf radius t (y = clip(x, -t, t) for the best t)."""
    ts = torch.linspace(0, float(x.abs().max()), 200001, dtype=torch.float64)
    obj = 0.5 * ((x.abs()[None, :] - ts[:, None]).clamp(min=0) ** 2).sum(1) + tau * ts
    t = ts[obj.argmin()]
    return torch.sign(x) * torch.minimum(x.abs(), t)


def test_prox_linf_hand_case_and_brute_force():
    # [3, 1, -2] with tau = 1.5: clipping the two largest to t removes (3 - t) + (2 - t) = 1.5, so t = 1.75
    out = gm.prox_linf(torch.tensor([[3.0, 1.0, -2.0]], dtype=torch.float64), 1.5)
    torch.testing.assert_close(out, torch.tensor([[1.75, 1.0, -1.75]], dtype=torch.float64))
    assert bool((gm.prox_linf(torch.tensor([[0.5, -0.25]]), 1.0) == 0).all())  # ||x||_1 <= tau: prox is 0
    x = torch.tensor([[0.3, -0.7]])
    torch.testing.assert_close(gm.prox_linf(x, 0.0), x)
    g = torch.Generator().manual_seed(0)
    xs = torch.randn(3, 40, generator=g, dtype=torch.float64)
    for tau in (0.05, 1.0, 7.0):
        got = gm.prox_linf(xs, tau)
        for row in range(3):
            torch.testing.assert_close(got[row], _prox_brute(xs[row], tau), atol=2e-4, rtol=0)
            removed = float((xs[row].abs() - got[row].abs()).sum())
            assert removed == pytest.approx(min(tau, float(xs[row].abs().sum())), abs=1e-9)  # exactly tau of l_1 mass


def test_at_max_fraction_and_normalized_margin_scale_free():
    x = torch.tensor([[1.0, 0.9995, 0.5, -1.0], [2.0, 1.0, 1.0, 1.0]])
    torch.testing.assert_close(gm.at_max_fraction(x), torch.tensor([0.75, 0.25]))
    U, V, W = gm.fourier_network(7)
    labels = gm.labels_of(7)
    nm = [float(gm.margin(gm.logits_of(c * U[None], c * V[None], c * W[None])[0], labels).min() / c**3) for c in (1.0, 2.5)]
    assert nm[0] == pytest.approx(nm[1]) and nm[0] == pytest.approx(9 * 7 / 4)  # ||theta||_inf = 1: margin 9p/4


def test_prox_adam_pins_weights_at_the_norm_and_lambda_zero_is_adam():
    cfg = gm.Config(p=7, width=8, fractions=(0.5, 0.8), steps=30, eval_every=30)
    lin, none = gm.fit(cfg, "linf", 0, 3e-2, 30, lam=20.0), gm.fit(cfg, "none", 0, 3e-2, 30)
    zero = gm.fit(cfg, "linf", 0, 3e-2, 30, lam=0.0)
    assert all(torch.equal(zero[k], none[k]) for k in "UVW")  # lambda 0: the prox is the identity, linf = none
    norm = lambda m: gm.flat_weights(m).abs().amax(1)
    assert bool((norm(lin) < norm(none)).all())
    assert bool((gm.at_max_fraction(gm.flat_weights(lin)) > 5 * gm.at_max_fraction(gm.flat_weights(none))).all())


def test_evaluation_partition_is_redrawn_and_tuning_keeps_its_own():
    cfg = gm.Config(p=7, fractions=(0.3, 0.6))
    old = torch.randperm(49, generator=torch.Generator().manual_seed(5))  # v2: the seed alone
    m0, m1 = gm.split_masks(cfg, 5, 0), gm.split_masks(cfg, 5, 1)
    assert bool(m0["train"][0, old[: round(0.3 * 49)]].all())
    assert not torch.equal(m0["test"], m1["test"])


def test_delay_is_measured_at_the_smallest_generalizing_fraction():
    p = 7
    U, V, W = (t.float() for t in gm.fourier_network(p))
    g = torch.Generator().manual_seed(0)
    cfg = gm.Config(p=p, width=U.shape[1], fractions=(0.3, 0.6, 0.9), gen_threshold=0.9)
    rand = [torch.randn(*t.shape, generator=g) * 0.01 for t in (U, V, W)]
    model = {"U": torch.stack([rand[0], U, U]), "V": torch.stack([rand[1], V, V]), "W": torch.stack([rand[2], W, W]),
             "seed": 0, "split_seed": 1, "fit_step": [10.0, 100.0, 50.0], "gen_step": [math.nan, 400.0, 150.0]}
    out = gm.evaluate(cfg, model, {})
    assert out["frac_needed"] == 0.6 and out["gen_step"] == 400.0 and out["fit_step"] == 100.0 and out["grok_delay"] == 300.0
    assert out["at_max_frac"] > 0 and math.isfinite(out["norm_margin"])
    model["U"][1] = rand[0]
    model["U"][2] = rand[0]
    out = gm.evaluate(cfg, model, {})
    assert out["frac_needed"] == 1.0 and math.isnan(out["grok_delay"])  # no fraction generalizes: censored, delay nan


def test_warm_started_threshold_is_the_cold_one():
    """ProxAdam warm-starts the Newton iteration at the previous step's threshold; from above or below the root, and from
    a threshold above every entry, it ends where the cold start ends."""
    g = torch.Generator().manual_seed(3)
    a = torch.randn(4, 300, generator=g, dtype=torch.float64).abs()
    cold = gm.linf_prox_threshold(a, 2.0)
    for t0 in (cold + 0.3, cold - 0.3, torch.full_like(cold, 100.0), torch.full_like(cold, -5.0)):
        torch.testing.assert_close(gm.linf_prox_threshold(a, 2.0, t0), cold, atol=1e-12, rtol=0)
    assert bool(((a - cold).clamp(min=0).sum(1) - 2.0).abs().max() < 1e-9)

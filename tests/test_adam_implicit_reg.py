"""Implicit bias of Adam (ICML 2024): the backward-error correction term against a numerically integrated
one-step modified equation on a quadratic, its regimes, the global rates on a quadratic (|Adam - modified flow| =
O(h^2), |Adam - plain flow| = O(h)), the integrators' orders, the metrics on hand-made runs, and a tiny run through
the spec on synthetic images. (PaperAdam vs torch.optim.Adam: tests/test_optim.py.)"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from paperflow.optim import PaperAdam
from paperflow.papers import adam_implicit_reg as air
from paperflow.spec import ConfigError, Resources

D = torch.float64
A = torch.tensor([[2.0, 0.3, 0.0], [0.3, 1.0, 0.2], [0.0, 0.2, 0.5]], dtype=D)
B = torch.tensor([1.0, -0.5, 0.3], dtype=D)
grad = lambda th: A @ th - B  # noqa: E731  E = 1/2 th^T A th - b^T th


def _rk4(th, dt, n, fun):
    for _ in range(n):
        k1 = fun(th); k2 = fun(th + dt / 2 * k1); k3 = fun(th + dt / 2 * k2); k4 = fun(th + dt * k3)  # noqa: E702
        th = th + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return th


def _one_step_error(h, eps, beta, rho, corrected, K=120, sub=4):
    """Put the history of Adam's iterates on the (modified) flow, take one Adam step (moments over the history,
    late-training weights), and return its distance to the flow at time h."""
    def fun(th):
        g = grad(th)
        f = -g / torch.sqrt(g * g + eps)
        return f + h * air.correction(g, A, eps, beta, rho, 10 ** 6) if corrected else f

    th0 = torch.tensor([1.5, -1.0, 2.0], dtype=D)
    hist = [th0]
    for _ in range(K):
        hist.append(_rk4(hist[-1], -h / sub, sub, fun))
    G = torch.stack([grad(t) for t in hist])
    w1 = torch.tensor([(1 - beta) * beta ** k for k in range(K + 1)], dtype=D)
    w2 = torch.tensor([(1 - rho) * rho ** k for k in range(K + 1)], dtype=D)
    m, nu = (w1[:, None] * G).sum(0) / w1.sum(), (w2[:, None] * G * G).sum(0) / w2.sum()
    step = th0 - h * m / torch.sqrt(nu + eps)
    return float((step - _rk4(th0, h / sub, sub, fun)).norm())


@pytest.mark.parametrize("eps,beta,rho", [(0.5, 0.5, 0.8), (1e-3, 0.8, 0.6), (2.0, 0.0, 0.7)])
def test_correction_term_is_the_one_step_modified_equation(eps, beta, rho):
    """With the correction the local error is O(h^3) (ratio ~8 when h halves); without it O(h^2) (ratio ~4)."""
    plain = [_one_step_error(h, eps, beta, rho, False) for h in (0.02, 0.01)]
    fixed = [_one_step_error(h, eps, beta, rho, True) for h in (0.02, 0.01)]
    assert 3.3 < plain[0] / plain[1] < 4.7
    assert fixed[0] / fixed[1] > 6.5
    assert fixed[1] < plain[1] / 5


def test_mean_lag_and_regimes():
    for d in (0.0, 0.5, 0.9):
        for n in (0, 3, 40):
            w = np.array([(1 - d) * d ** k for k in range(n + 1)])
            assert air.mean_lag(d, n) == pytest.approx(float((np.arange(n + 1) * w).sum() / w.sum()), abs=1e-12)
    assert air.mean_lag(0.9, 10 ** 5) == pytest.approx(9.0)
    g = torch.tensor([1.0, -2.0, 0.5], dtype=D)
    n = 10 ** 6
    # sqrt(eps) small against |g|: c -> beta/(1-beta) - rho/(1-rho) (anti-penalizing when rho > beta)
    torch.testing.assert_close(air.coefficients(g, 1e-12, 0.9, 0.999, n), torch.full((3,), 9.0 - 999.0, dtype=D), atol=1e-6, rtol=0)
    assert bool((air.coefficients(g, 1e-12, 0.99, 0.9, n) > 0).all())
    # eps dominating: c -> beta/(1-beta) + 1/2 > 0, whatever rho (GD-like penalty)
    torch.testing.assert_close(air.coefficients(g, 1e12, 0.9, 0.999, n), torch.full((3,), 9.5, dtype=D), atol=1e-6, rtol=0)


def test_rmsprop_large_eps_is_barrett_dherin_gd():
    """beta = 0, eps >> g^2: Adam is GD with lr eta = h/sqrt(eps), whose modified flow is
    -grad(E + eta/4 ||grad E||^2) in time units of eta: h f1 -> -(eta/2) H g / sqrt(eps)."""
    g, eps, h = torch.tensor([0.3, -0.1, 0.2], dtype=D), 1e8, 1e-2
    eta = h / eps ** 0.5
    hf1 = h * air.correction(g, A, eps, 0.0, 0.9, 10 ** 6)
    torch.testing.assert_close(hf1, -(eta / 2) * (A @ g) / eps ** 0.5, rtol=1e-6, atol=0)


def test_modified_rhs_is_the_leading_flow_plus_h_times_the_correction():
    th, eps, h, beta, rho = torch.tensor([0.3, -0.2, 0.4], dtype=D), 1e-3, 1e-2, 0.9, 0.99
    loss = lambda p: 0.5 * p @ A @ p - B @ p  # noqa: E731
    g = grad(th)
    for n in (0, 3, 40):
        expect = -g / torch.sqrt(g * g + eps) + h * air.correction(g, A, eps, beta, rho, n)
        torch.testing.assert_close(air.modified_rhs(loss, eps, beta, rho, h)(th, n), expect, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(air.plain_rhs(loss, eps)(th, 0), -g / torch.sqrt(g * g + eps))
    torch.testing.assert_close(air.plain_rhs(loss, None)(th, 0), -g)


@pytest.mark.parametrize("eps,beta,rho", [(0.2, 0.0, 0.7), (0.05, 0.8, 0.6)])
def test_adam_follows_the_modified_flow_to_second_order_and_the_plain_flow_to_first(eps, beta, rho):
    """The theorem on a quadratic: over an h sweep at fixed T, |Adam - modified flow| = O(h^2) while |Adam - plain
    flow| = O(h) (T/h >> the moments' memory, as in the paper's late-training regime)."""
    loss = lambda p: 0.5 * p @ A @ p - B @ p  # noqa: E731
    p0, T, errs = torch.tensor([1.5, -1.0, 2.0], dtype=D), 0.5, []
    flow = air.rk4(air.plain_rhs(loss, eps), p0, 0.0025 / 4, int(4 * T / 0.0025))
    for h in (0.005, 0.0025):
        steps = int(round(T / h))
        adam = air.run_adam(loss, p0, h, steps, eps, beta, rho)
        mod = air.rk4(air.modified_rhs(loss, eps, beta, rho, h), p0, h, steps)
        errs.append((float((adam - mod).norm()), float((adam - flow).norm())))
    assert air.rate_exponent(errs[0][0], errs[1][0]) == pytest.approx(2.0, abs=0.15)
    assert air.rate_exponent(errs[0][1], errs[1][1]) == pytest.approx(1.0, abs=0.1)
    assert errs[1][0] < errs[1][1] / 5
    assert air.rate_exponent(8.0, 2.0) == pytest.approx(2.0) and math.isnan(air.rate_exponent(0.0, 1.0))


def test_paper_adam_matches_official_recursion_with_eps_inside():
    loss = lambda p: 0.5 * p @ A @ p - B @ p  # noqa: E731
    x0 = torch.tensor([1.5, -1.0, 2.0], dtype=D)
    x = torch.nn.Parameter(x0.clone())
    opt = PaperAdam([x], lr=0.01, betas=(0.9, 0.999), eps=1e-4)
    m = v = torch.zeros(3, dtype=D)
    ref = x.detach().clone()
    for n in range(1, 6):
        x.grad = grad(x.detach())
        opt.step()
        g = grad(ref)
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        ref = ref - 0.01 * (m / (1 - 0.9 ** n)) / torch.sqrt(v / (1 - 0.999 ** n) + 1e-4)
    torch.testing.assert_close(x.detach(), ref, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(air.run_adam(loss, x0, 0.01, 5, 1e-4, 0.9, 0.999), ref, rtol=1e-12, atol=1e-14)


def _fake_run(n_flow, n_mod, n_adam, err_mod=(4e-4, 1e-4), err_flow=(2e-2, 1e-2), corr=(2e-2, 1e-2)):
    return {"eps": 1e-6, "beta": 0.5, "rho": 0.8, "moved": 1.0, "n_flow": n_flow, "n_mod_h": n_mod, "n_mod_h2": n_mod,
            "n_adam_h": n_adam, "n_adam_h2": n_adam, "err_mod_h": err_mod[0], "err_mod_h2": err_mod[1],
            "err_flow_h": err_flow[0], "err_flow_h2": err_flow[1], "corr_h": corr[0], "corr_h2": corr[1], "loss_adam_h": 1.5}


def test_evaluate_on_hand_made_runs():
    runs = [_fake_run(10.0, 9.0, 9.5), _fake_run(10.0, 11.0, 10.4), _fake_run(10.0, 11.0, 9.8, err_mod=(8e-4, 1e-4))]
    model = {"runs": runs, "gd": [{"lr": 0.1, "norm_gd": 0.9, "norm_flow": 1.0}], "loss_init": 2.0}
    out = air.evaluate(air.Config(), model, {})
    assert out["exp_mod_s0"] == pytest.approx(2.0) and out["exp_mod_s2"] == pytest.approx(3.0) and out["exp_mod"] == pytest.approx(2.0)
    assert out["exp_flow"] == pytest.approx(1.0) and out["rel_corr"] == pytest.approx(0.02) and out["corr_ratio"] == pytest.approx(2.0)
    assert out["err_mod_rel"] == pytest.approx(1e-4) and out["err_flow_rel"] == pytest.approx(1e-2) and out["loss_drop"] == pytest.approx(0.5)
    # predicted (N_mod < N_flow): pen, anti, anti; measured (N_adam < N_flow): yes, no, yes -> 2 of 3 agree (each at h and h/2)
    assert out["agree_frac"] == pytest.approx(2 / 3) and out["both_regimes"] == 1.0
    assert out["chance_frac"] == pytest.approx(1 / 3 * 2 / 3 + 2 / 3 * 1 / 3)
    assert out["gap_pen"] == pytest.approx(-0.05) and out["gap_anti"] == pytest.approx((0.04 - 0.02) / 2)
    assert out["gd_gap"] == pytest.approx(-0.1)
    rows = [{"paper": "adam_implicit_reg", "variant": "run", "seed": 0, **{f"dense/{k}": v for k, v in out.items()}}]
    views = {r["variant"]: r for r in air.derive(air.Config(), rows)}
    assert views["run|chance"]["dense/agree_frac"] == out["chance_frac"] and views["run|zero"]["dense/gap_pen"] == 0.0
    assert views["run|mod"]["dense/err"] == out["err_mod_rel"] and views["run|flow"]["dense/err"] == out["err_flow_rel"]


def test_config_spec_and_tiny_run(tmp_path):
    with pytest.raises(ConfigError, match="settings"):
        air.Config(settings=((1e-6, 0.9, 1.0), (1e-6, 0.5, 0.8)))
    with pytest.raises(ConfigError, match="side"):
        air.Config(side=10)
    spec = air.SPEC
    rows = spec.comparisons(spec.make_config({}))
    heads = [r for r in rows if r.role == "headline"]
    assert len(heads) == 1 and heads[0].metric == "exp_mod" and heads[0].target == 2.0 and heads[0].refuted_if
    assert [g.metric for g in heads[0].mechanism_gates] == ["rel_corr"] and spec.fidelity == "reconstruction"
    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, 300)
    x = rng.integers(0, 255, (300, 28, 28)).astype(np.uint8)
    np.savez(tmp_path / "f.npz", x_train=x, y_train=y, x_test=x[:50], y_test=y[:50])
    cfg = spec.make_config({"pool": 200, "n_train": 64, "hidden": 8, "steps": 6, "gd_steps": 4, "gd_lrs": [0.02], "h": 1e-3,
                            "settings": [[1e-6, 0.5, 0.3], [1e-6, 0.3, 0.5]]})
    data = spec.prepare(cfg, Resources(root=str(tmp_path), paths={"fashion_mnist": str(tmp_path / "f.npz")}))
    assert data["x_pool"].shape == (200, 14, 14)
    torch.manual_seed(0)
    model = spec.train(cfg, data, "run", 0, lambda step, **m: None)
    assert len(model["runs"]) == 2 and len(model["gd"]) == 1
    m = spec.evaluate(cfg, model, data)
    assert 0 <= m["agree_frac"] <= 1 and m["n_settings"] == 2 and math.isfinite(m["exp_mod"]) and m["rel_corr"] > 0
    out = spec.derive(cfg, [{"paper": "adam_implicit_reg", "variant": "run", "seed": 0, **{f"dense/{k}": v for k, v in m.items()}}])
    assert {"run|chance", "run|zero", "run|mod", "run|flow"} <= {r["variant"] for r in out}

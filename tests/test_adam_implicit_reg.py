"""Implicit bias of Adam (ICML 2024): the backward-error correction term against a numerically integrated
one-step modified equation on a quadratic, its regimes, the predicted rate against a dense computation, the Heun
reference, and a tiny run through the spec on synthetic images. (PaperAdam vs torch.optim.Adam: tests/test_optim.py.)"""
from __future__ import annotations

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


def test_rate_terms_match_the_dense_rate():
    g, eps, h, beta, rho, n = torch.tensor([0.3, -0.02, 0.2], dtype=D), 1e-3, 1e-3, 0.9, 0.99, 7
    s = torch.sqrt(g * g + eps)
    u = A @ (g / s)  # grad of N = sum sqrt(g^2 + eps)
    rate = float(u @ (h * air.correction(g, A, eps, beta, rho, n)))
    a1, a2 = air.rate_terms(u, g, eps)
    b, r = air.mean_lag(beta, n), air.mean_lag(rho, n)
    assert rate == pytest.approx(-h * ((b - r) * a1 + (r + 0.5) * a2), rel=1e-12)
    assert air.predicted_change([a1, 2 * a1], [a2, a2], 5, 10, h, beta, rho) < 0 or b - r < 0


def test_heun_reference_is_second_order():
    x = torch.nn.Parameter(torch.tensor([1.5, -1.0, 2.0], dtype=D))
    exact = torch.linalg.solve(A, B) + torch.linalg.matrix_exp(-A * 0.5) @ (torch.tensor([1.5, -1.0, 2.0], dtype=D) - torch.linalg.solve(A, B))
    errs = []
    for n in (10, 20):
        x.data = torch.tensor([1.5, -1.0, 2.0], dtype=D)
        opt = air.HeunFlow([x], 0.5 / n, None)
        for _ in range(2 * n):
            x.grad = grad(x.detach())
            opt.step()
        errs.append(float((x.detach() - exact).norm()))
    assert 3.5 < errs[0] / errs[1] < 4.5


def test_paper_adam_matches_official_recursion_with_eps_inside():
    x = torch.nn.Parameter(torch.tensor([1.5, -1.0, 2.0], dtype=D))
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


def test_config_spec_and_tiny_run(tmp_path):
    with pytest.raises(ConfigError, match="adam_betas"):
        air.Config(adam_betas=((0.9, 1.0),))
    with pytest.raises(ConfigError, match="side"):
        air.Config(side=10)
    spec = air.SPEC
    rows = spec.comparisons(spec.make_config({}))
    assert [r.role for r in rows].count("headline") == 1 and rows[0].baseline == "adam|chance"
    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, 300)
    x = rng.integers(0, 255, (300, 28, 28)).astype(np.uint8)
    np.savez(tmp_path / "f.npz", x_train=x, y_train=y, x_test=x[:50], y_test=y[:50])
    cfg = spec.make_config({"pool": 200, "n_train": 64, "n_test": 50, "steps": 6, "eps_grid": [1e-8, 1e-2],
                            "adam_betas": [[0.9, 0.999], [0.99, 0.9]], "rmsprop_rhos": [0.9], "gd_lrs": [0.02], "checkpoint_every": 2})
    data = spec.prepare(cfg, Resources(root=str(tmp_path), paths={"fashion_mnist": str(tmp_path / "f.npz")}))
    assert data["x_pool"].shape == (200, 14, 14)
    rows = []
    for v in spec.variants:
        torch.manual_seed(0)
        model = spec.train(cfg, data, v, 0, lambda step, **m: None)
        assert len(model["runs"]) == len(air.settings(cfg, v))
        m = {f"dense/{k}": val for k, val in spec.evaluate(cfg, model, data).items()}
        for lv, comp in spec.compress(cfg, model, data, v, 0).items():
            m.update({f"compressed:{lv}/{k}": val for k, val in spec.evaluate(cfg, comp, data).items()})
        assert 0 <= m["dense/agree_frac"] <= 1 and m["dense/n_settings"] == len(model["runs"])
        pred = [r["predicted"] < 0 for r in model["runs"]]
        meas = [r["norm_run"] < r["norm_flow"] for r in model["runs"]]
        pp, pm = np.mean(pred), np.mean(meas)
        assert m["dense/chance_frac"] == pytest.approx(pp * pm + (1 - pp) * (1 - pm))
        rows.append({"paper": "adam_implicit_reg", "variant": v, "seed": 0, **m})
    out = spec.derive(cfg, rows)
    names = {r["variant"] for r in out}
    assert {"adam|chance", "adam|flow", "adam|pen", "adam|anti", "gd|flow"} <= names
    chance = next(r for r in out if r["variant"] == "adam|chance")
    assert chance["dense/agree_frac"] == rows[0]["dense/chance_frac"] and chance["paper"] == "adam_implicit_reg"

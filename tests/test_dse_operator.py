"""dse_operator (ICML 2024): the Burgers solver against the Cole-Hopf closed form, the DSE layer equal to the authors'
complex Vandermonde form and, on an equispaced grid, to the FFT Fourier layer; the periodic interpolation matrices
exact on linear data; and a tiny prepare -> train -> compress -> evaluate run."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from paperflow.papers import dse_operator as P
from paperflow.spec import ConfigError


def test_burgers_matches_cole_hopf():
    """phi = 1 + b cos(2 pi x) exp(-4 pi^2 nu t) solves the heat equation, so u = -2 nu phi_x / phi solves Burgers."""
    nu, b, t, n = 0.05, 0.5, 0.3, 256
    x = np.arange(n) / n

    def exact(tt):
        e = b * np.exp(-4 * math.pi ** 2 * nu * tt)
        return 4 * math.pi * nu * e * np.sin(2 * math.pi * x) / (1 + e * np.cos(2 * math.pi * x))

    u = P.burgers_solve(exact(0.0)[None], nu, t, 1e-3)[0]
    assert np.abs(u - exact(t)).max() < 1e-7


def test_dse_layer_equals_complex_form_and_fft_on_a_uniform_grid():
    torch.manual_seed(0)
    conv = P.SpectralConv(6, 5)
    h = torch.randn(3, 6, 40)
    x = torch.rand(40).sort().values
    torch.testing.assert_close(conv(h, P.dse_bases(x, 5)), P.dse_complex_reference(h, conv.weight, P.vandermonde(x, 5)),
                               atol=1e-5, rtol=1e-4)
    grid = torch.arange(40, dtype=torch.float32) / 40
    torch.testing.assert_close(conv(h, P.dse_bases(grid, 5)), conv(h, None), atol=1e-5, rtol=1e-4)


def test_interpolation_matrices():
    rng = np.random.default_rng(0)
    xs = np.sort(rng.choice(200, 30, replace=False)) / 200
    xg = np.arange(16) / 16
    m = P.interp_matrix(xs, xg)
    np.testing.assert_allclose(m.sum(0), 1.0)
    np.testing.assert_allclose(np.ones(30) @ m, np.ones(16))
    np.testing.assert_allclose(P.interp_matrix(xs, xs), np.eye(30), atol=1e-12)  # nodes reproduce themselves
    # a function linear between the nodes (a periodic hat) is reproduced exactly
    f = np.interp(xg, np.r_[xs - 1, xs, xs + 1], np.tile(np.sin(7 * xs), 3))
    np.testing.assert_allclose(np.sin(7 * xs) @ m, f, atol=1e-12)
    assert P.pipeline_floor(np.sin(7 * xs)[None] @ P.interp_matrix(xs, xg) @ P.interp_matrix(xg, xs), P.interp_matrix(xg, xs)) < 1e-8


def test_config_checks():
    with pytest.raises(ConfigError):
        P.Config(n_grid=100)
    with pytest.raises(ConfigError):
        P.Config(modes=80)


def test_tiny_run():
    cfg = P.Config(solver_grid=64, dt=2e-3, n_points=24, n_grid=16, n_train=12, n_val=4, n_test=4, modes=4, width=4,
                   layers=2, steps=3, batch_size=4, tune_steps=2, time_rounds=1, log_every=1)
    data = P.prepare(cfg, None)
    assert data["interp_err"] > 0 and data["floor_err"] >= 0
    cols = set()
    for v in P.VARIANTS:
        model = P.train(cfg, data, v, 0, None)
        out = P.evaluate(cfg, model, data)
        cols |= {f"dense/{k}" for k in out}
        assert np.isfinite(out["rel_l2"])
        comp = P.compress(cfg, model, data, v, 0)
        assert set(comp) == {"0.50", "0.80"}
        P.evaluate(cfg, comp["0.80"], data)
    from paperflow.contract import logged_problems
    assert not logged_problems(P.SPEC, cfg, cols)


def test_transform_errors_vanish_on_an_equispaced_set():
    """On equispaced points both spectral round trips equal the exact mode truncation (up to aliasing of the decayed
    high modes); on a clustered set the DSE's unweighted adjoint is not an inverse (its diagnostic is large)."""
    cfg = P.Config()
    rng = np.random.default_rng(0)
    u = P.burgers_solve(P.grf_1d(rng, 4, 512), cfg.nu, cfg.t_final, 1e-3)
    xg = np.arange(128) / 128
    iu = np.arange(0, 512, 4)
    out = P.transform_errors(cfg, u, iu, P.interp_matrix(iu / 512, xg), P.interp_matrix(xg, iu / 512))
    assert out["transform_err_dse"] < 1e-3 and out["transform_err_pipe"] < 1e-6
    ic = P.draw_points(rng, cfg)
    out = P.transform_errors(cfg, u, ic, P.interp_matrix(ic / 512, xg), P.interp_matrix(xg, ic / 512))
    assert out["transform_err_dse"] > 10 * out["transform_err_pipe"]

"""cellular_gp (ICML 2024): boundary matrices by hand and B1 B2 = 0, the cellular Matern kernel against a matrix inverse
and a fractional matrix power, the reaction-diffusion kernel reducing to it at c = 0 and matching the full Dirac-operator
formula otherwise, the Hodge split of the generated flows, gpytorch's prediction against paperflow.gp.exact_predict, and a
tiny spec run."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from paperflow.gp import exact_predict
from paperflow.papers import cellular_gp as cg
from paperflow.spec import ConfigError

T64 = torch.float64
TINY = dict(graph="florentine_families", n_points=12, fit_steps=5)


def test_incidence_of_a_square_with_a_diagonal():
    # vertices 0-1-2-3 (a square), diagonal 0-2; faces (0, 1, 2) and (0, 2, 3)
    edges = [(0, 1), (0, 2), (0, 3), (1, 2), (2, 3)]
    b1, b2 = cg.incidence(4, edges, [[0, 1, 2], [0, 2, 3]])
    assert b1[:, 3].tolist() == [0, -1, 1, 0]
    # face 0->1->2->0: +e01 +e12 -e02; face 0->2->3->0: +e02 +e23 -e03
    assert b2[:, 0].tolist() == [1, -1, 0, 1, 0]
    assert b2[:, 1].tolist() == [0, 1, -1, 0, 1]
    assert np.abs(b1 @ b2).max() == 0
    with pytest.raises(ValueError):
        cg.incidence(4, edges, [[1, 3, 2]])  # uses the missing edge 1-3


@pytest.mark.parametrize("which", ["delaunay", "graph"])
def test_boundary_of_boundary_vanishes(which):
    cx = cg.delaunay_complex(25, 0) if which == "delaunay" else cg.graph_complex("karate_club", 4, 0)
    b1, b2 = cg.incidence(len(cx["pos"]), cx["edges"], cx["faces"])
    assert b2.shape[1] > 0 and np.abs(b1 @ b2).max() == 0
    d = cg.dirac(b1, b2)
    nv, ne = b1.shape
    d2 = d @ d
    assert np.allclose(d2[nv:nv + ne, nv:nv + ne], b1.T @ b1 + b2 @ b2.T)  # D^2's edge block is the Hodge Laplacian
    assert np.allclose(d2[:nv, nv + ne:], 0)


def _small():
    cfg = cg.Config(**TINY)
    cx = cg.build_complex(cg.delaunay_complex(12, 3), cfg, np.random.default_rng(0))
    return cfg, cx


def test_cellular_matern_is_the_matrix_function():
    _, cx = _small()
    lap = (cx["b1"].T @ cx["b1"] + cx["b2"] @ cx["b2"].T)
    nu, kappa = torch.tensor(1.0, dtype=T64), torch.tensor(0.7, dtype=T64)
    k = cg.spectral_matern(cx["hodge_lam"], cx["hodge_u"], nu, kappa)
    direct = torch.linalg.inv(2 / 0.49 * torch.eye(lap.shape[0], dtype=T64) + lap)  # nu = 1: (2/kappa^2 + Delta)^-1
    assert torch.allclose(k, direct / torch.diagonal(direct).mean(), atol=1e-10)
    from scipy.linalg import fractional_matrix_power

    nu2 = 2.3
    m = fractional_matrix_power(2 * nu2 / 0.49 * np.eye(lap.shape[0]) + lap.numpy(), -nu2).real
    k2 = cg.spectral_matern(cx["hodge_lam"], cx["hodge_u"], torch.tensor(nu2, dtype=T64), kappa)
    assert np.allclose(k2.numpy(), m / np.diag(m).mean(), atol=1e-8)


def test_rd_kernel_reduces_to_cellular_matern_and_matches_the_dirac_formula():
    _, cx = _small()
    nu, kappa = torch.tensor(1.7, dtype=T64), torch.tensor(0.9, dtype=T64)
    k0 = cg.rd_edge_kernel(cx["dirac_mu"], cx["dirac_ue"], nu, kappa, torch.tensor(0.0, dtype=T64))
    km = cg.spectral_matern(cx["hodge_lam"], cx["hodge_u"], nu, kappa)
    assert torch.allclose(k0, km, atol=1e-9)
    from scipy.linalg import fractional_matrix_power

    a = 0.8
    d = cg.dirac(cx["b1"].numpy(), cx["b2"].numpy())
    r = 2 * 1.7 / 0.81
    c = 2 * np.sqrt(r) * np.tanh(a)
    full = fractional_matrix_power(r * np.eye(len(d)) + d @ d + c * d, -1.7).real
    nv, ne = cx["n_nodes"], cx["n_edges"]
    block = full[nv:nv + ne, nv:nv + ne]
    k = cg.rd_edge_kernel(cx["dirac_mu"], cx["dirac_ue"], nu, kappa, torch.tensor(a, dtype=T64))
    assert np.allclose(k.numpy(), block / np.diag(block).mean(), atol=1e-8)
    assert not torch.allclose(k, km, atol=1e-3)  # the cross-diffusion term changes the edge kernel


def test_flow_split_and_curl_share():
    cfg, cx = _small()
    b1, b2 = cx["b1"].numpy(), cx["b2"].numpy()
    p = cg.curl_projection(b2)
    rng = np.random.default_rng(1)
    curl, grad = b2 @ rng.standard_normal(b2.shape[1]), b1.T @ rng.standard_normal(b1.shape[0])
    assert float(curl @ p @ curl / (curl @ curl)) == pytest.approx(1.0)
    assert float(grad @ p @ grad / (grad @ grad)) == pytest.approx(0.0, abs=1e-12)
    assert cx["curl_share"] == pytest.approx(cfg.curl_weight, abs=1e-9)
    f = cx["flow"].numpy()
    assert float(np.sqrt(np.mean(f ** 2))) == pytest.approx(1.0)
    pure_grad = cg.build_complex(cg.delaunay_complex(12, 3), cg.Config(**{**TINY, "curl_weight": 0.0}), np.random.default_rng(0))
    assert pure_grad["curl_share"] == pytest.approx(0.0, abs=1e-9)


def test_signed_line_graph_laplacian_is_psd_and_orientation_aware():
    edges = [(0, 1), (1, 2)]  # a path 0 -> 1 -> 2: a flow passing through vertex 1
    b1, _ = cg.incidence(3, edges, [])
    lap = cg.line_graph_laplacian(b1)
    assert lap.tolist() == [[1, -1], [-1, 1]]  # the constant flow (1, 1) along the path is smooth
    flipped, _ = cg.incidence(3, [(0, 1), (2, 1)], [])
    assert cg.line_graph_laplacian(flipped).tolist() == [[1, 1], [1, 1]]  # (1, -1) in the flipped orientation is smooth
    _, cx = _small()
    assert float(cx["line_lam"].min()) >= 0


def test_gpytorch_prediction_equals_exact_formula():
    cfg, cx = _small()
    sp = cg.split(cfg, cx, 0)
    res = cg.fit_predict(cfg, "cellular_matern", cx, sp)
    nu, kappa = torch.tensor(res["nu"], dtype=T64), torch.tensor(res["scale"], dtype=T64)
    k = res["outputscale"] * cg.spectral_matern(cx["hodge_lam"], cx["hodge_u"], nu, kappa)
    tr, te = sp["train"], sp["test"]
    mean, var = exact_predict(k[tr][:, tr], k[tr][:, te], torch.diagonal(k)[te], sp["y"][tr], res["noise"])
    y_te = sp["y"][te]
    assert res["rmse"] == pytest.approx(float(torch.sqrt(torch.mean((y_te - mean) ** 2))), rel=1e-4)
    var = var + res["noise"]
    nll = 0.5 * (np.log(2 * np.pi) + torch.log(var) + (y_te - mean) ** 2 / var)
    assert res["nll"] == pytest.approx(float(nll.mean()), rel=1e-3)


def test_config_refuses_bad_values():
    with pytest.raises(ConfigError):
        cg.Config(graph="not_a_graph")
    with pytest.raises(ConfigError):
        cg.Config(curl_weight=1.5)


def test_tiny_run_through_the_spec():
    cfg = cg.Config(**TINY)
    data = cg.prepare(cfg, None)
    for variant in cg.VARIANTS:
        model = cg.train(cfg, data, variant, 0, None)
        m = cg.evaluate(cfg, model, data)
        for name in cg.COMPLEXES:
            assert np.isfinite(m[f"rmse_{name}"]) and np.isfinite(m[f"nll_{name}"])
            assert m[f"curl_share_{name}"] == pytest.approx(cfg.curl_weight, abs=1e-6)

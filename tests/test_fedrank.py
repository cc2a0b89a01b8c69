"""FedRank (ICML 2024): the RankNet pairwise loss and its gradient against a hand computation, the ranker recovering a
known utility ordering (Kendall tau = 1 on a separable case), Oort's utility on a hand example and its selector's
explore-then-exploit behaviour, the device time/energy accounting, the client state features, the censored
rounds-to-target, config errors, and a tiny prepare -> train -> compress -> evaluate run on synthetic images."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import kendalltau

from paperflow.compress.magnitude import sparsity_of
from paperflow.papers import fedrank as P
from paperflow.spec import ConfigError, Resources


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors: one torch thread (two threads on a loaded 2-core machine spin ~100x slower)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_ranknet_loss_and_gradient_hand_case():
    s = torch.tensor([2.0, 0.5, -1.0], requires_grad=True)
    pairs = torch.tensor([[0, 1], [2, 1]])  # 0 over 1 (margin 1.5), 2 over 1 (margin -1.5)
    loss = P.ranknet_loss(s[pairs[:, 0]], s[pairs[:, 1]])
    hand = 0.5 * (math.log(1 + math.exp(-1.5)) + math.log(1 + math.exp(1.5)))
    assert float(loss.detach()) == pytest.approx(hand, rel=1e-6)
    loss.backward()
    sig = lambda z: 1 / (1 + math.exp(-z))  # noqa: E731
    # d/ds_i of -log sigmoid(s_i - s_j) = -(1 - P_ij), d/ds_j = +(1 - P_ij); the mean halves each pair's share
    g0, g2 = -0.5 * (1 - sig(1.5)), -0.5 * (1 - sig(-1.5))
    torch.testing.assert_close(s.grad, torch.tensor([g0, -(g0 + g2), g2]), rtol=1e-6, atol=1e-7)


def test_ranker_recovers_a_known_utility_ordering():
    cfg = P.Config()
    gen = torch.Generator().manual_seed(0)
    feats = torch.randn(25, P.N_FEATURES, generator=gen)
    w = torch.tensor([1.0, -2.0, 0.5, 0.0, 1.5, -1.0])
    util = feats @ w  # a linear utility: separable by a monotone scorer
    order = torch.argsort(-util).tolist()
    pairs = torch.tensor(P.pair_index(order[:1], order[1:]) + [(order[a], order[b]) for a in range(25) for b in range(a + 1, 25)])
    torch.manual_seed(0)
    ranker = P.make_ranker(cfg)
    loss = P.fit_ranker(ranker, feats, pairs, steps=300, lr=0.05)
    with torch.no_grad():
        scores = ranker(feats).squeeze(-1)
    tau = kendalltau(scores.numpy(), util.numpy()).statistic
    assert tau == pytest.approx(1.0) and loss < 0.1


def test_features_and_to_target():
    sizes = np.array([100.0, 200.0, 400.0])
    rms = np.array([1.0, 2.0, 0.0])
    last = np.array([1.0, 3.0, 0.0])  # client 2 never picked
    f = P.features(sizes, rms, last, round_idx=4, exp_dur=np.array([1.0, 2.0, 4.0]), exp_energy=np.array([1.0, 1.0, 4.0]), deadline=2.0)
    assert f.shape == (3, P.N_FEATURES)
    np.testing.assert_allclose(f[:, 1], [math.log(1 / 1.5), math.log(2 / 1.5), 0.0])
    np.testing.assert_allclose(f[:, 2], [1, 1, 0])
    np.testing.assert_allclose(f[:, 3], np.log([0.5, 1.0, 2.0]))
    np.testing.assert_allclose(f[:, 5], np.sqrt(0.1 * math.log(4) / np.array([1.0, 3.0, 1.0])))
    assert abs(f[:, 0].mean()) < 1e-9
    curve = [(50.0, 1.0, 10.0), (71.0, 3.0, 20.0), (80.0, 4.0, 30.0)]
    assert P.to_target(curve, 70.0, 3, deadline=2.0) == (2.0, 3.0, 20.0)
    assert P.to_target(curve, 90.0, 3, deadline=2.0) == (4.0, 6.0, pytest.approx(40.0))  # censored


def test_config_errors_and_spec():
    with pytest.raises(ConfigError):
        P.Config(clients_per_round=30)
    with pytest.raises(ConfigError):
        P.Config(lrs=(0.1, 0.05))
    with pytest.raises(ConfigError):
        P.Config(il_episodes=1)
    rows = P.comparisons(P.Config())
    assert sum(r.role == "headline" for r in rows) == 1
    assert P.SPEC.id == "fedrank" and P.SPEC.variants == P.VARIANTS


def test_tiny_pipeline(tmp_path):
    rng = np.random.RandomState(0)
    path = tmp_path / "fashion.npz"
    np.savez(path, x_train=rng.randint(0, 255, (400, 28, 28), dtype=np.uint8), y_train=rng.randint(0, 10, 400),
             x_test=rng.randint(0, 255, (100, 28, 28), dtype=np.uint8), y_test=rng.randint(0, 10, 100))
    cfg = P.Config(n_train=240, n_val=60, n_test=100, n_reward=30, num_clients=6, clients_per_round=2, rounds=3,
                   min_client_size=5, lrs=(0.05,), il_steps=5, online_steps=2, avg_last=2, hidden=8)
    data = P.prepare(cfg, Resources(str(tmp_path), {"fashion_mnist": str(path)}))
    assert 0.0 <= data["il_agreement"] <= 1.0 and data["lr"] == 0.05
    for v in P.VARIANTS:
        model = P.train(cfg, data, v, 0, None)
        m = P.evaluate(cfg, model, data)
        assert len(model["curve"]) == 3 and m["energy"] > 0 and 0 <= m["late_frac"] <= 1
        comp = P.compress(cfg, model, data, v, 0)
        assert set(comp) == {"0.50", "0.80"}
        st = comp["0.80"]["state"]
        assert sparsity_of({k: st[k] for k in ("1.weight", "3.weight")}) == pytest.approx(0.8, abs=1e-3)
        assert set(P.evaluate(cfg, comp["0.50"], data)) == set(m)

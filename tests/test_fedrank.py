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
from paperflow.federated import local_sgd, selection_tv
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
    rows = []
    for v in P.VARIANTS:
        model = P.train(cfg, data, v, 0, None)
        m = P.evaluate(cfg, model, data)
        assert len(model["curve"]) == 3 and m["energy"] > 0 and 0 <= m["late_frac"] <= 1 and 0 <= m["sel_tv"] <= 1
        comp = P.compress(cfg, model, data, v, 0)
        assert set(comp) == {"0.50", "0.80"}
        st = comp["0.80"]["state"]
        assert sparsity_of({k: st[k] for k in ("1.weight", "3.weight")}) == pytest.approx(0.8, abs=1e-3)
        pruned = P.evaluate(cfg, comp["0.50"], data)
        assert set(pruned) == {k for k in m if not k.endswith("__no_proxy")}  # the ablation is not compressed
        rows.append({"paper": "fedrank", "variant": v, "seed": 0, **{f"dense/{k}": x for k, x in m.items()}})
    assert "acc_avg__no_proxy" in m and "il_agreement" in m
    views = {r["variant"]: r for r in P.derive(cfg, rows)}
    nop = views["fedrank|no_proxy"]
    assert nop["dense/acc_avg"] == rows[-1]["dense/acc_avg__no_proxy"] and nop["dense/il_agreement"] == data["il_agreement"]
    assert nop["dense/grid_edge"] == rows[-1]["dense/grid_edge"] and "dense/acc_avg__no_proxy" not in nop


def _client_data(n=70, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 28, 28, generator=gen)
    return x, torch.randint(0, 10, (n,), generator=gen), torch.arange(3, n, 2)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_client_sgd_is_bit_identical_to_federated_local_sgd(momentum):
    cfg = P.Config(batch_size=8, local_epochs=2, hidden=16, momentum=momentum)
    x, y, idx = _client_data()
    torch.manual_seed(0)
    net = P._net(cfg)
    state = {k: v.clone() for k, v in net.state_dict().items()}
    local_sgd(net, x, y, idx, epochs=2, batch_size=8, make_opt=lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=momentum),
              gen=torch.Generator().manual_seed(5))
    out = P.client_sgd(cfg, state, x, y, idx, 0.1, torch.Generator().manual_seed(5))
    assert all(torch.equal(out[k], v) for k, v in net.state_dict().items())


def test_selection_tv_hand_cases():
    assert selection_tv([6, 6, 6]) == 0.0
    assert selection_tv([10, 10, 0, 0, 0]) == pytest.approx(0.6)  # a fixed 2 of 5 clients: 1 - 2/5
    assert selection_tv([3, 1]) == pytest.approx(0.25)  # 0.5 (|0.75 - 0.5| + |0.25 - 0.5|)


def test_no_proxy_ablation_never_reads_the_labelled_proxy_images(tmp_path):
    """The no-signal ablation: with the proxy images replaced by garbage its run is unchanged, while FedRank's changes."""
    rng = np.random.RandomState(1)
    path = tmp_path / "fashion.npz"
    np.savez(path, x_train=rng.randint(0, 255, (400, 28, 28), dtype=np.uint8), y_train=rng.randint(0, 10, 400),
             x_test=rng.randint(0, 255, (100, 28, 28), dtype=np.uint8), y_test=rng.randint(0, 10, 100))
    cfg = P.Config(n_train=240, n_val=60, n_test=100, n_reward=30, num_clients=6, clients_per_round=2, rounds=4,
                   min_client_size=5, lrs=(0.05,), il_steps=5, online_steps=3, avg_last=2, hidden=8)
    data = P.prepare(cfg, Resources(str(tmp_path), {"fashion_mnist": str(path)}))
    a = P.train(cfg, data, "fedrank", 0, None)
    other = {**data, "x_val": torch.randint(0, 255, data["x_val"].shape, dtype=torch.uint8),
             "y_val": torch.randint(0, 10, data["y_val"].shape)}
    b = P.train(cfg, other, "fedrank", 0, None)
    assert all(torch.equal(a["no_proxy"]["state"][k], b["no_proxy"]["state"][k]) for k in a["state"])
    assert a["no_proxy"]["curve"] == b["no_proxy"]["curve"] or all(
        (x[0] != x[0] and y[0] != y[0]) or x == y for x, y in zip(a["no_proxy"]["curve"], b["no_proxy"]["curve"]))


def test_comparisons_gate_the_headline_on_imitation_and_selection():
    rows = P.comparisons(P.Config())
    head = next(r for r in rows if r.role == "headline")
    mech = head.mechanism_gates
    assert any(g.metric == "il_agreement" and g.above == P.IL_AGREEMENT_MIN for g in mech)
    assert any(g.comparison is not None and g.comparison.metric == "sel_tv" for g in mech) and head.refuted_if
    assert any(r.method == "fedrank|no_proxy" and r.baseline == "random" and r.role == "secondary" for r in rows)

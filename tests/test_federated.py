"""paperflow.federated: FedAvg and HeteroFL averaging on hand cases, the Dirichlet non-iid split, the
communication ledger, local SGD phases, the round loop and client FLOPs; device profiles with the time/energy
ledger, Oort's utility and selector (fedrank); local GD with periodic averaging and the feature-heterogeneity
split (local_steps_fl)."""
from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from paperflow import federated as FL


def test_fedavg_of_identical_models_is_the_model_and_weights_by_size():
    torch.manual_seed(0)
    s = nn.Linear(4, 3).state_dict()
    avg = FL.fedavg([s, OrderedDict((k, v.clone()) for k, v in s.items()), s], [10, 3, 7])
    for k in s:
        torch.testing.assert_close(avg[k], s[k])
    a = {"w": torch.tensor([1.0, 2.0])}
    b = {"w": torch.tensor([4.0, 8.0])}
    torch.testing.assert_close(FL.fedavg([a, b], [1, 2])["w"], torch.tensor([3.0, 6.0]))  # (1*a + 2*b) / 3


def test_heterofl_aggregation_hand_case():
    g = {"w": torch.zeros(3, 4), "b": torch.full((3,), 9.0)}
    # client A holds the 1x2 / 1 corner, client B the 2x3 / 2 corner, nobody holds row 2 or column 3
    A = {"w": torch.full((1, 2), 2.0), "b": torch.tensor([1.0])}
    Bc = {"w": torch.full((2, 3), 6.0), "b": torch.tensor([3.0, 5.0])}
    out = FL.heterofl_aggregate(g, [A, Bc], [1.0, 1.0])
    expected_w = torch.tensor([[4.0, 4.0, 6.0, 0.0],  # (2 + 6) / 2 where both hold, 6 where only B
                               [6.0, 6.0, 6.0, 0.0],
                               [0.0, 0.0, 0.0, 0.0]])  # held by nobody: unchanged
    torch.testing.assert_close(out["w"], expected_w)
    torch.testing.assert_close(out["b"], torch.tensor([2.0, 5.0, 9.0]))
    weighted = FL.heterofl_aggregate(g, [A, Bc], [3.0, 1.0])  # train-size weights: (3*2 + 1*6) / 4 = 3
    assert float(weighted["w"][0, 0]) == pytest.approx(3.0) and float(weighted["w"][1, 0]) == pytest.approx(6.0)
    # the sub-model is the leading slice
    sub = FL.sub_state(out, {"w": (2, 3), "b": (2,)})
    torch.testing.assert_close(sub["w"], expected_w[:2, :3])


def test_heterofl_with_full_width_clients_is_fedavg_and_full_sub_state_is_the_model():
    g = torch.Generator().manual_seed(1)
    glob = {"w": torch.randn(3, 4, generator=g)}
    clients = [{"w": torch.randn(3, 4, generator=g)} for _ in range(3)]
    torch.testing.assert_close(FL.heterofl_aggregate(glob, clients, [1, 2, 3])["w"], FL.fedavg(clients, [1, 2, 3])["w"])
    assert torch.equal(FL.sub_state(glob, {"w": (3, 4)})["w"], glob["w"])


def test_dirichlet_split_partitions_without_overlap_and_test_follows_train():
    rng = np.random.RandomState(0)
    labels = np.repeat(np.arange(10), 60)
    parts, props = FL.dirichlet_split(labels, 6, 0.5, rng, min_size=10)
    allidx = np.concatenate(parts)
    assert sorted(allidx.tolist()) == list(range(len(labels)))  # a partition: every index exactly once
    assert all(len(p) >= 10 for p in parts)
    tlabels = np.repeat(np.arange(10), 20)
    tparts, _ = FL.dirichlet_split(tlabels, 6, 0.5, np.random.RandomState(1), proportions=props)
    assert sorted(np.concatenate(tparts).tolist()) == list(range(len(tlabels)))
    # tiny alpha: each client holds only a few classes, and its test split only classes of its own
    parts, props = FL.dirichlet_split(labels, 5, 0.01, np.random.RandomState(3), min_size=1)
    tparts, _ = FL.dirichlet_split(tlabels, 5, 0.01, np.random.RandomState(4), proportions=props)
    for p, tp in zip(parts, tparts):
        classes = set(labels[p].tolist())
        assert len(classes) <= 5
        assert set(tlabels[tp].tolist()) <= classes
    a, _ = FL.dirichlet_split(labels, 6, 0.5, np.random.RandomState(0))
    b, _ = FL.dirichlet_split(labels, 6, 0.5, np.random.RandomState(0))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_partition_is_seeded_and_splits_every_held_out_set():
    y = torch.from_numpy(np.repeat(np.arange(10), 40))
    yv, yt = torch.from_numpy(np.repeat(np.arange(10), 8)), torch.from_numpy(np.repeat(np.arange(10), 12))
    tr, (va, te) = FL.partition(y, [yv, yt], 4, 0.5, seed=5, min_size=5)
    assert sorted(torch.cat(tr).tolist()) == list(range(400))
    assert sorted(torch.cat(va).tolist()) == list(range(80)) and sorted(torch.cat(te).tolist()) == list(range(120))
    tr2, _ = FL.partition(y, [yv, yt], 4, 0.5, seed=5, min_size=5)
    tr3, _ = FL.partition(y, [yv, yt], 4, 0.5, seed=6, min_size=5)
    assert all(torch.equal(a, b) for a, b in zip(tr, tr2))
    assert not all(torch.equal(a, b) for a, b in zip(tr, tr3))  # another seed, another partition


def test_ledger_counts_numel_both_ways():
    led = FL.CommLedger()
    s = {"a": torch.zeros(3, 4), "b": torch.zeros(5)}
    assert led.send(s) is s and FL.numel(s) == 17
    led.receive({"a": torch.zeros(2)})
    assert (led.download, led.upload, led.total) == (17, 2, 19) and led.as_dict() == {"download": 17, "upload": 2}


def _client_data(n=40):
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 6, generator=g), torch.randint(0, 3, (n,), generator=g)


def test_local_sgd_phases_train_only_their_parameters():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    x, y = _client_data()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    idx = torch.arange(0, 40, 2)  # 20 examples, batch 8 -> 3 steps per epoch (last partial)
    opt = lambda ps: torch.optim.SGD(ps, lr=0.1)  # noqa: E731
    FL.local_sgd(net, x, y, idx, epochs=1, batch_size=8, make_opt=opt, gen=torch.Generator().manual_seed(1), phases=[(["2."], 3)])
    after = net.state_dict()
    assert torch.equal(after["0.weight"], before["0.weight"]) and not torch.equal(after["2.weight"], before["2.weight"])
    assert all(p.requires_grad for p in net.parameters())
    with pytest.raises(ValueError, match="phases cover"):
        FL.local_sgd(net, x, y, idx, epochs=1, batch_size=8, make_opt=opt, gen=torch.Generator(), phases=[(["0."], 2)])


def test_run_rounds_samples_distinct_clients_and_aggregates_each_round():
    seen, aggregated, logged = [], [], []

    def update(k, lr):
        seen.append(k)
        return {"w": torch.tensor([float(k)])}, 1.0, 0.5

    FL.run_rounds(3, 6, 2, torch.Generator().manual_seed(0), update, lambda u, w, p: aggregated.append(sorted(p)),
                  lr_fn=lambda r: 0.1 * (r + 1), on_round=lambda r, m: logged.append(m["train/lr"]))
    assert len(seen) == 6 and len(aggregated) == 3 and all(len(set(p)) == 2 for p in aggregated)
    assert logged == pytest.approx([0.1, 0.2, 0.3])


def test_client_step_flops_counts_forward_and_backward():
    net = nn.Sequential(nn.Flatten(), nn.Linear(12, 4), nn.ReLU(), nn.Linear(4, 2))
    B = 5
    fwd = 2 * B * (12 * 4 + 4 * 2)
    # backward: last layer weight grad + its input grad; first layer weight grad only (its input needs none)
    assert FL.client_step_flops(net, (B, 3, 4)) == pytest.approx(fwd + 2 * B * 4 * 2 * 2 + 2 * B * 12 * 4)
    # only the last layer trains: its weight grad only
    assert FL.client_step_flops(net, (B, 3, 4), phases=[["3."]]) == pytest.approx(fwd + 2 * B * 4 * 2)
    assert all(p.requires_grad for p in net.parameters())


def test_oort_utility_hand_example():
    stat = np.array([1.0, 3.0, 5.0])
    last = np.array([1.0, 2.0, 4.0])
    dur = np.array([1.0, 4.0, 2.0])
    u = FL.oort_utility(stat, last, round_idx=5, durations=dur, deadline=2.0, alpha=2.0)
    bonus = [math.sqrt(0.1 * math.log(5) / L) for L in (1, 2, 4)]
    hand = [(0.0 + bonus[0]) * 1.0, (0.5 + bonus[1]) * (2.0 / 4.0) ** 2, (1.0 + bonus[2]) * 1.0]  # only client 1 is late
    np.testing.assert_allclose(u, hand, rtol=1e-12)


def test_oort_selector_explores_then_exploits():
    sel = FL.OortSelector(10, 3, np.random.RandomState(0), explore=0.9, decay=1.0, explore_min=0.0)
    dur = np.ones(10)
    seen = set()
    for r in range(1, 5):
        picked = sel.select(r, dur, deadline=2.0)
        assert len(picked) == 3 == len(set(picked))
        assert not seen & set(picked) or len(seen) >= 9  # unexplored clients first while eps is high
        seen |= set(picked)
        sel.update(picked, [10.0 * (c == 7) + 1.0 for c in picked], r)
    assert len(seen) >= 10 - 1
    sel.stat[:] = 1.0
    sel.stat[7] = 100.0  # one client with by far the largest statistical utility
    sel.last[:] = 4
    sel.eps = 0.0
    assert all(7 in sel.select(5, dur, deadline=2.0) for _ in range(5))


def test_round_costs_and_system_ledger_sums():
    prof = {"speed": np.array([10.0, 20.0]), "bandwidth": np.array([100.0, 50.0]),
            "compute_power": np.array([2.0, 1.0]), "radio_power": np.array([0.5, 1.0])}
    dur, en = FL.round_costs(prof, [0, 1], sizes=[30, 40], epochs=2, model_numel=50)
    # compute 2*30/10 = 6 s, 2*40/20 = 4 s; radio 2*50/100 = 1 s, 2*50/50 = 2 s
    np.testing.assert_allclose(dur, [7.0, 6.0])
    np.testing.assert_allclose(en, [2.0 * 6 + 0.5 * 1, 1.0 * 4 + 1.0 * 2])
    led = FL.SystemLedger()
    on = led.add_round(dur, en, deadline=6.5)
    assert on.tolist() == [False, True]
    led.add_round(np.array([3.0, 5.0]), np.array([1.0, 2.0]), deadline=6.5)
    d = led.as_dict()
    assert d["time"] == pytest.approx(6.5 + 5.0) and d["energy"] == pytest.approx(12.5 + 6.0 + 3.0)
    assert d["wasted"] == pytest.approx(12.5) and d["late"] == 1 and d["picked"] == 4
    d2, _ = FL.round_costs(prof, [0], [30, 40], 2, 50, rng=np.random.RandomState(0), jitter=0.5)
    assert d2[0] != pytest.approx(7.0)  # run-time variation


def test_average_copies_is_fedavg():
    p = torch.tensor([[1.0, 2.0], [3.0, 6.0]])
    q = p.clone()
    FL.average_copies_([p])
    torch.testing.assert_close(p, torch.tensor([[2.0, 4.0], [2.0, 4.0]]))
    FL.average_copies_([q], weights=[1.0, 3.0])
    torch.testing.assert_close(q, torch.tensor([[2.5, 5.0], [2.5, 5.0]]))


def test_local_gd_interval_matters_and_one_shot_is_average_of_independent_runs():
    gen = torch.Generator().manual_seed(1)
    K, n, d, lr, T = 2, 6, 3, 0.5, 5
    X, y = torch.randn(K, n, d, generator=gen), torch.randint(0, 2, (K, n), generator=gen).float() * 2 - 1
    loss = lambda W: F.softplus(-y * torch.einsum("kd,knd->kn", W, X)).mean(1)  # noqa: E731
    W = torch.nn.Parameter(torch.zeros(K, d))
    FL.local_gd([W], lambda s: loss(W), steps=T, interval=T, lr=lr)  # one-shot
    finals = []
    for k in range(K):  # each client alone, T steps of GD, then the average
        w = torch.zeros(d)
        for _ in range(T):
            w = w + lr * (torch.sigmoid(-y[k] * (X[k] @ w))[:, None] * y[k][:, None] * X[k]).mean(0)
        finals.append(w)
    torch.testing.assert_close(W.data[0], torch.stack(finals).mean(0))


def test_feature_heterogeneity_split_follows_the_official_rule():
    fine = torch.arange(10).repeat_interleave(40)  # 10 fine classes x 40
    labels = fine % 2
    parts = FL.feature_heterogeneity_split(labels, fine, 5, 1.0, torch.Generator().manual_seed(0))
    assert len(parts) == 5 and all(p.numel() == 80 for p in parts)
    assert torch.unique(torch.cat(parts)).numel() == 400  # disjoint
    for k, p in enumerate(parts):  # H = 1: each client gets exactly one fine class per label (sorted pools)
        assert sorted(torch.unique(fine[p]).tolist()) == [2 * k, 2 * k + 1]
    iid = FL.feature_heterogeneity_split(labels, fine, 5, 0.0, torch.Generator().manual_seed(0))
    assert all(torch.unique(fine[p]).numel() >= 8 for p in iid)

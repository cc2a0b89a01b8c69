"""FedLMT (ICML 2024): factorized layers, SVD factors, FedAvg / HeteroFL aggregation, the communication ledger,
the Dirichlet non-iid split, pFedLMT's common/custom split, and a tiny prepare -> train -> compress -> evaluate
run on synthetic images through the spec."""
from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from paperflow.papers import fedlmt as P
from paperflow.spec import ConfigError, Resources


def _g(seed=0):
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------------------------------------- layers


def test_lowrank_linear_has_r_times_m_plus_n_weights_and_is_u_at_v():
    m_out, n_in, r = 7, 11, 3
    layer = P.LowRankLinear(n_in, m_out, r)
    assert layer.u.weight.numel() + layer.v.weight.numel() == r * (m_out + n_in)
    assert sum(p.numel() for p in layer.parameters()) == r * (m_out + n_in) + m_out  # + the output bias
    x = torch.randn(5, n_in, generator=_g())
    W = layer.u.weight @ layer.v.weight  # (m, n) = U V
    torch.testing.assert_close(layer(x), x @ W.T + layer.u.bias)
    assert torch.linalg.matrix_rank(W.detach()) == r


@pytest.mark.parametrize("stride", [1, 2])
def test_lowrank_conv_is_the_conv_of_u_at_v(stride):
    c_in, c_out, r = 4, 6, 2
    layer = P.LowRankConv(c_in, c_out, r, stride=stride)
    # matrix view (3 out) x (3 in): r * (m + n) weights
    assert layer.u.weight.numel() + layer.v.weight.numel() == r * (3 * c_out + 3 * c_in)
    x = torch.randn(2, c_in, 9, 9, generator=_g(1))
    W = P.conv_from_factors(layer.u.weight, layer.v.weight)  # (out, in, 3, 3)
    assert W.shape == (c_out, c_in, 3, 3)
    torch.testing.assert_close(layer(x), F.conv2d(x, W, layer.u.bias, stride=stride, padding=1), rtol=1e-5, atol=1e-5)
    assert torch.linalg.matrix_rank(P.conv_matrix(W).detach()) == r


def test_svd_factors_are_exact_for_low_rank_and_optimal_truncation():
    g = _g(2)
    W = torch.randn(6, 2, generator=g) @ torch.randn(2, 5, generator=g)  # rank 2
    A, B = P._svd_factors(W, 2)
    torch.testing.assert_close(A @ B, W, rtol=1e-5, atol=1e-5)
    kernel = torch.randn(5, 3, 3, 3, generator=g)
    u_w, v_w = P.factors_of_conv(kernel, 2)
    approx = P.conv_matrix(P.conv_from_factors(u_w, v_w))
    S = torch.linalg.svdvals(P.conv_matrix(kernel))
    # Eckart-Young: the error of the best rank-2 approximation is sqrt(sum of the dropped s_i^2)
    assert float(torch.linalg.norm(P.conv_matrix(kernel) - approx)) == pytest.approx(float(S[2:].pow(2).sum().sqrt()), rel=1e-4)
    u_pad, v_pad = P.factors_of_conv(kernel, 12)  # rank > min(15, 9): zero-padded, exact
    torch.testing.assert_close(P.conv_from_factors(u_pad, v_pad), kernel, rtol=1e-4, atol=1e-5)


def test_model_param_counts_and_factorize_state_roundtrip():
    cfg = P.Config()
    full, low = P.make_arch(cfg), P.make_arch(cfg, cfg.rank_ratio, 0)
    c1, c2, c3 = cfg.channels
    h, fc_in = cfg.hidden, c3 * 16
    r = [round(0.25 * c2), round(0.25 * c3), round(0.25 * h)]
    assert low["ranks"] == r and full["ranks"] == [0, 0, 0]
    n_head_tail = (9 * c1 + c1) + (h * 10 + 10)
    expected = n_head_tail + r[0] * 3 * (c1 + c2) + c2 + r[1] * 3 * (c2 + c3) + c3 + r[2] * (fc_in + h) + h
    assert P.count_params(P.Net(low)) == expected
    assert P.count_params(P.Net(full)) == n_head_tail + 9 * c1 * c2 + c2 + 9 * c2 * c3 + c3 + fc_in * h + h
    torch.manual_seed(0)
    net = P.init_model(low, "random")
    again = P.build_model(low, P.factorize_state(net.state_dict(), low))  # already rank r: exact
    x = torch.randn(3, 1, 28, 28, generator=_g(3))
    torch.testing.assert_close(again(x), net(x), rtol=1e-4, atol=1e-4)
    spectral = P.init_model(low, "spectral")
    assert set(spectral.state_dict()) == set(net.state_dict())


# ---------------------------------------------------------------------------------------------- aggregation


def test_fedavg_of_identical_models_is_the_model_and_weights_by_size():
    torch.manual_seed(0)
    s = P.init_model(P.make_arch(P.Config(), 0.25, 0)).state_dict()
    avg = P.fedavg([s, OrderedDict((k, v.clone()) for k, v in s.items()), s], [10, 3, 7])
    for k in s:
        torch.testing.assert_close(avg[k], s[k])
    a = {"w": torch.tensor([1.0, 2.0])}
    b = {"w": torch.tensor([4.0, 8.0])}
    torch.testing.assert_close(P.fedavg([a, b], [1, 2])["w"], torch.tensor([3.0, 6.0]))  # (1*a + 2*b) / 3


def test_heterofl_aggregation_hand_case():
    g = {"w": torch.zeros(3, 4), "b": torch.full((3,), 9.0)}
    # client A holds the 1x2 / 1 corner, client B the 2x3 / 2 corner, nobody holds row 2 or column 3
    A = {"w": torch.full((1, 2), 2.0), "b": torch.tensor([1.0])}
    Bc = {"w": torch.full((2, 3), 6.0), "b": torch.tensor([3.0, 5.0])}
    out = P.heterofl_aggregate(g, [A, Bc], [1.0, 1.0])
    expected_w = torch.tensor([[4.0, 4.0, 6.0, 0.0],  # (2 + 6) / 2 where both hold, 6 where only B
                               [6.0, 6.0, 6.0, 0.0],
                               [0.0, 0.0, 0.0, 0.0]])  # held by nobody: unchanged
    torch.testing.assert_close(out["w"], expected_w)
    torch.testing.assert_close(out["b"], torch.tensor([2.0, 5.0, 9.0]))
    weighted = P.heterofl_aggregate(g, [A, Bc], [3.0, 1.0])  # train-size weights: (3*2 + 1*6) / 4 = 3
    assert float(weighted["w"][0, 0]) == pytest.approx(3.0) and float(weighted["w"][1, 0]) == pytest.approx(6.0)
    # the sub-model is the leading slice
    sub = P.sub_state(out, {"w": (2, 3), "b": (2,)})
    torch.testing.assert_close(sub["w"], expected_w[:2, :3])


def test_heterofl_full_width_submodel_is_the_model_and_matched_width():
    cfg = P.Config()
    torch.manual_seed(0)
    full = P.init_model(P.make_arch(cfg)).state_dict()
    shapes = {k: tuple(v.shape) for k, v in full.items()}
    assert all(torch.equal(P.sub_state(full, shapes)[k], full[k]) for k in full)
    target = P.count_params(P.Net(P.make_arch(cfg, cfg.rank_ratio, 0)))
    rate = P.matched_width(cfg, target)
    n = P.count_params(P.Net(P.make_arch(cfg, width=rate)))
    assert 0 < rate < 1 and abs(n - target) / target < 0.1
    half = P.make_arch(cfg, width=0.5)
    assert half["channels"] == [math.ceil(0.5 * c) for c in cfg.channels] and half["ranks"] == [0, 0, 0]


def test_pfed_common_custom_split_and_phases():
    cfg = P.Config()
    arch = P.make_arch(cfg, 0.25, 2)
    assert arch["ranks"][:2] == [0, 0] and arch["ranks"][2] > 0  # common layers full rank, custom low rank
    state = P.Net(arch).state_dict()
    common = P.common_keys(state, 2)
    assert common == ["head.weight", "head.bias", "body.0.weight", "body.0.bias", "body.1.weight", "body.1.bias"]
    phases = P.pfed_phases(7, 2)
    assert phases[0] == (["body.2.", "tail."], 4) and phases[1] == (["head.", "body.0.", "body.1."], 3)


# ---------------------------------------------------------------------------------------------- data


def test_dirichlet_split_partitions_without_overlap_and_test_follows_train():
    rng = np.random.RandomState(0)
    labels = np.repeat(np.arange(10), 60)
    parts, props = P.dirichlet_split(labels, 6, 0.5, rng, min_size=10)
    allidx = np.concatenate(parts)
    assert sorted(allidx.tolist()) == list(range(len(labels)))  # a partition: every index exactly once
    assert all(len(p) >= 10 for p in parts)
    tlabels = np.repeat(np.arange(10), 20)
    tparts, _ = P.dirichlet_split(tlabels, 6, 0.5, np.random.RandomState(1), proportions=props)
    assert sorted(np.concatenate(tparts).tolist()) == list(range(len(tlabels)))
    # tiny alpha: each client holds only a few classes, and its test split only classes of its own
    parts, props = P.dirichlet_split(labels, 5, 0.01, np.random.RandomState(3), min_size=1)
    tparts, _ = P.dirichlet_split(tlabels, 5, 0.01, np.random.RandomState(4), proportions=props)
    for p, tp in zip(parts, tparts):
        classes = set(labels[p].tolist())
        assert len(classes) <= 5
        assert set(tlabels[tp].tolist()) <= classes
    a, _ = P.dirichlet_split(labels, 6, 0.5, np.random.RandomState(0))
    b, _ = P.dirichlet_split(labels, 6, 0.5, np.random.RandomState(0))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


# ---------------------------------------------------------------------------------------------- config


def test_config_validation_and_comparisons():
    with pytest.raises(ConfigError, match="clients_per_round"):
        P.Config(num_clients=4, clients_per_round=5)
    with pytest.raises(ConfigError, match="rank_ratio"):
        P.Config(rank_ratio=0)
    with pytest.raises(ConfigError, match="init"):
        P.Config(init="svd")
    with pytest.raises(ConfigError, match="unknown key"):
        P.SPEC.make_config({"nope": 1})
    cfg = P.SPEC.make_config({"channels": [4, 8, 8], "pfed_ratios": [0.5, 0.25]})
    assert cfg.channels == (4, 8, 8) and cfg.pfed_ratios == (0.5, 0.25)
    cols = [(r.method, r.baseline, r.column, r.kind) for r in P.comparisons(P.Config())]
    assert ("fedlmt", "fedavg", "dense/acc", "close") in cols
    assert ("fedlmt", "heterofl", "dense/acc", "better") in cols
    assert ("pfedlmt", "fedlmt", "dense/personal_acc", "better") in cols
    assert ("fedlmt", "fedavg", "compressed@svd0.25/acc", "better") in cols


# ---------------------------------------------------------------------------------------------- end to end


def _synthetic_resources(tmp_path):
    rng = np.random.default_rng(0)

    def images(labels):  # class-dependent bright bar + noise
        x = rng.integers(0, 60, (len(labels), 28, 28)).astype(np.uint8)
        for i, y in enumerate(labels):
            x[i, 2 * y : 2 * y + 6, 4:12] = 250
        return x

    ytr, yte = rng.integers(0, 10, 400), rng.integers(0, 10, 200)
    np.savez(tmp_path / "fashion.npz", x_train=images(ytr), y_train=ytr, x_test=images(yte), y_test=yte)
    return Resources(root=str(tmp_path), paths={"fashion_mnist": str(tmp_path / "fashion.npz")})


TINY = {"n_train": 240, "n_test": 120, "num_clients": 4, "clients_per_round": 2, "rounds": 2, "batch_size": 32,
        "channels": [4, 8, 8], "hidden": 16, "eval_every": 1, "eval_subset": 50, "pfed_global_eval": 50,
        "min_client_size": 5}


def test_end_to_end_through_spec_and_communication_ledger(tmp_path):
    spec = P.SPEC
    cfg = spec.make_config(TINY)
    data = spec.prepare(cfg, _synthetic_resources(tmp_path))
    assert data["x_train"].dtype == torch.uint8 and data["x_train"].shape == (240, 28, 28)
    assert sorted(torch.cat(data["client_train"]).tolist()) == list(range(240))
    assert sorted(torch.cat(data["client_test"]).tolist()) == list(range(120))
    rows = {}
    for variant in spec.variants:
        logged = []
        model = spec.train(cfg, data, variant, 0, lambda step, **m: logged.append((step, m)))
        assert [s for s, m in logged if "val/acc" in m] == [0, 1]
        metrics = spec.evaluate(cfg, model, data)
        assert set(metrics) >= {"acc", "personal_acc", "comm_params", "client_flops", "params"}
        assert all(math.isfinite(v) for v in metrics.values())
        rows[variant] = metrics
        # the ledger on a hand case: rounds x clients_per_round x (download + upload) of what crosses the network
        per_client = {"fedavg": P.count_params(P.Net(P.make_arch(cfg))),
                      "fedlmt": P.count_params(P.Net(P.make_arch(cfg, cfg.rank_ratio, 0))),
                      "heterofl": P.count_params(P.Net(model["client_archs"][0])),
                      "pfedlmt": P.numel({k: v for k, v in model.get("common", {}).items()})}[variant]
        assert metrics["comm_params"] == 2 * 2 * 2 * per_client
        levels = spec.compress(cfg, model, data, variant, 0) or {}
        assert (variant in ("fedavg", "fedlmt")) == bool(levels)
        for comp in levels.values():
            cm = spec.evaluate(cfg, comp, data)
            assert cm["params"] < metrics["params"] or variant == "fedlmt"
            assert cm["comm_params"] == metrics["comm_params"]
    assert rows["fedlmt"]["comm_params"] < rows["fedavg"]["comm_params"]
    assert rows["fedlmt"]["client_flops"] < rows["fedavg"]["client_flops"]
    assert rows["pfedlmt"]["comm_params"] < rows["fedlmt"]["comm_params"]
    # pFedLMT: custom parts stay per client, the common part is shared
    torch.manual_seed(0)
    m1 = spec.train(cfg, data, "pfedlmt", 0, lambda step, **m: None)
    assert len(m1["custom"]) == cfg.num_clients and not set(m1["custom"][0]) & set(m1["common"])
    # deterministic given the seed
    m2 = spec.train(cfg, data, "pfedlmt", 0, lambda step, **m: None)
    assert all(torch.equal(m1["common"][k], m2["common"][k]) for k in m1["common"])

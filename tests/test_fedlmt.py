"""FedLMT (ICML 2024): the factorized model's parameter counts and SVD re-factorization, HeteroFL client widths,
the width-matched control, pFedLMT's common/custom split, per-seed partitions, lr tuning on validation, the
communication ledger, and a tiny prepare -> train -> compress -> evaluate run on synthetic images through the spec."""
from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from paperflow.federated import numel, sub_state
from paperflow.papers import fedlmt as P
from paperflow.spec import ConfigError, Resources


def _g(seed=0):
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------------------------------------- model
# (the factorized layers, SVD truncation, FedAvg / HeteroFL averaging and the Dirichlet split are shared:
#  tests/test_lowrank.py and tests/test_federated.py)


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


# ---------------------------------------------------------------------------------------------- clients


def test_heterofl_full_width_submodel_is_the_model_and_matched_width():
    cfg = P.Config()
    torch.manual_seed(0)
    full = P.init_model(P.make_arch(cfg)).state_dict()
    shapes = {k: tuple(v.shape) for k, v in full.items()}
    assert all(torch.equal(sub_state(full, shapes)[k], full[k]) for k in full)
    target = P.count_params(P.Net(P.make_arch(cfg, cfg.rank_ratio, 0)))
    rate = P.matched_width(cfg, target)
    n = P.count_params(P.Net(P.make_arch(cfg, width=rate)))
    assert 0 < rate < 1 and abs(n - target) / target < 0.1
    half = P.make_arch(cfg, width=0.5)
    assert half["channels"] == [math.ceil(0.5 * c) for c in cfg.channels] and half["ranks"] == [0, 0, 0]
    narrow = P.client_archs(cfg, "fedavg_narrow")
    assert len(narrow) == cfg.num_clients and narrow[0] == P.make_arch(cfg, width=rate)


def test_heterofl_clients_get_the_capacity_levels_round_robin_and_nest_in_the_global_model():
    cfg = P.Config()
    archs = P.client_archs(cfg, "heterofl")
    assert [a["hidden"] for a in archs[:5]] == [128, 64, 32, 16, 128]  # levels 1, 1/2, 1/4, 1/8, then again
    assert all(a["ranks"] == [0, 0, 0] for a in archs)
    glob = {k: tuple(v.shape) for k, v in P.Net(P.server_arch(cfg, "heterofl", archs)).state_dict().items()}
    for a in archs[:4]:  # every client tensor is a leading slice of the global one
        for k, shape in P.Net(a).state_dict().items():
            assert all(n <= g for n, g in zip(shape.shape, glob[k]))
    # the budget: mean client size of the levels is within 15% of FedLMT's model (fact rows report both)
    mean_hetero = np.mean([P.count_params(P.Net(a)) for a in archs])
    fedlmt = P.count_params(P.Net(P.make_arch(cfg, cfg.rank_ratio, 0)))
    assert abs(mean_hetero - fedlmt) / fedlmt < 0.15


def test_pfed_common_custom_split_and_phases():
    cfg = P.Config()
    arch = P.make_arch(cfg, 0.25, 2)
    assert arch["ranks"][:2] == [0, 0] and arch["ranks"][2] > 0  # common layers full rank, custom low rank
    state = P.Net(arch).state_dict()
    common = P.common_keys(state, 2)
    assert common == ["head.weight", "head.bias", "body.0.weight", "body.0.bias", "body.1.weight", "body.1.bias"]
    phases = P.pfed_phases(7, 2)
    assert phases[0] == (["body.2.", "tail."], 4) and phases[1] == (["head.", "body.0.", "body.1."], 3)


# ---------------------------------------------------------------------------------------------- config


def test_config_validation_and_comparisons():
    with pytest.raises(ConfigError, match="lrs"):
        P.Config(lrs=(0.1, 0.05))
    with pytest.raises(ConfigError, match="min_lr"):
        P.Config(lrs=(1e-5, 1e-3))
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
    assert ("fedlmt", "fedavg", "compressed:svd0.25/acc", "better") in cols
    rows = P.comparisons(P.Config())
    head = [r for r in rows if r.role == "headline"]
    assert len(head) == 1 and (head[0].method, head[0].baseline) == ("fedlmt", "heterofl")
    assert all(r.role == "fact" for r in rows if r.metric in ("comm_params", "client_flops"))
    edges = [g for g in head[0].gates if g.kind == "grid_edge"]
    assert {g.variant for g in edges} == {"fedlmt", "heterofl"} and all(g.metric == "grid_edge" for g in edges)
    mech = head[0].mechanism_gates
    assert [(g.variant, g.metric, g.above) for g in mech] == [("fedavg", "rank_tail_energy", P.TAIL_MIN)]
    assert head[0].refuted_if and head[0].fidelity == "reconstruction"


def test_rank_tail_energy_by_hand():
    """Share of squared singular values beyond rank round(ratio * out): diagonal layers with known spectra."""
    cfg = P.Config(rank_ratio=0.25)
    state = P.init_model(P.make_arch(cfg)).state_dict()
    c1, c2, c3 = cfg.channels
    # body.0: conv (c2, c1, 3, 3) whose matrix view (3 c2, 3 c1) = (96, 48) has singular values 48..1
    sv = torch.arange(3 * c1, 0, -1).double()
    m0 = torch.zeros(3 * c2, 3 * c1)
    m0[torch.arange(3 * c1), torch.arange(3 * c1)] = sv.float()
    state["body.0.weight"] = m0.reshape(c2, 3, c1, 3).permute(0, 2, 1, 3).contiguous()
    state["body.1.weight"] = torch.zeros_like(state["body.1.weight"])
    state["body.1.weight"].view(c3, -1)[0, 0] = 1.0  # rank 1: no tail
    fc = torch.zeros_like(state["body.2.weight"])
    fc[: cfg.hidden, : cfg.hidden] = torch.eye(cfg.hidden)  # flat spectrum: tail = 1 - r / hidden
    state["body.2.weight"] = fc
    r0, r2 = round(0.25 * c2), round(0.25 * cfg.hidden)
    want0 = float((sv[r0:] ** 2).sum() / (sv ** 2).sum())
    want = (want0 + 0.0 + (1 - r2 / cfg.hidden)) / 3
    assert P.rank_tail_energy(cfg, state) == pytest.approx(want, rel=1e-9)
    low = P.init_model(P.make_arch(cfg, cfg.rank_ratio, 0)).state_dict()  # FedLMT: already rank r
    assert P.rank_tail_energy(cfg, low) < 1e-10


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


TINY = {"n_train": 240, "n_val": 80, "n_test": 120, "num_clients": 4, "clients_per_round": 2, "rounds": 2, "batch_size": 32,
        "channels": [4, 8, 8], "hidden": 16, "eval_every": 1, "pfed_global_eval": 50, "min_client_size": 5,
        "lrs": [0.05], "min_lr": 0.001}


def test_end_to_end_through_spec_and_communication_ledger(tmp_path):
    spec = P.SPEC
    cfg = spec.make_config(TINY)
    data = spec.prepare(cfg, _synthetic_resources(tmp_path))
    assert data["x_train"].dtype == torch.uint8 and data["x_train"].shape == (240, 28, 28) and data["x_val"].shape[0] == 80
    tr, va, te = P.client_parts(cfg, data, 0)
    assert sorted(torch.cat(tr).tolist()) == list(range(240)) and sorted(torch.cat(te).tolist()) == list(range(120))
    assert sorted(torch.cat(va).tolist()) == list(range(80))
    assert not all(torch.equal(a, b) for a, b in zip(tr, P.client_parts(cfg, data, 1)[0]))  # partitions vary with the seed
    rows = {}
    for variant in spec.variants:
        logged = []
        model = spec.train(cfg, data, variant, 0, lambda step, **m: logged.append((step, m)))
        if variant != "pfedlmt":
            assert [s for s, m in logged if "lr0/val/acc" in m] == [0, 1]
        metrics = spec.evaluate(cfg, model, data)
        assert set(metrics) >= {"acc", "personal_acc", "comm_params", "client_flops", "params"}
        assert all(math.isfinite(v) for v in metrics.values())
        rows[variant] = metrics
        assert metrics["tuned_lr"] == 0.05 and metrics["grid_edge"] == 1.0  # a one-value grid has no inside
        # the ledger on a hand case: rounds x clients_per_round x (download + upload) of what crosses the network
        sizes = [P.count_params(P.Net(a)) for a in model["client_archs"]]
        if variant == "heterofl":  # heterogeneous clients: between the smallest and the largest
            assert 2 * 2 * 2 * min(sizes) <= metrics["comm_params"] <= 2 * 2 * 2 * max(sizes) and min(sizes) < max(sizes)
        else:
            per_client = numel(model["common"]) if variant == "pfedlmt" else sizes[0]
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


def test_lr_is_tuned_on_validation_and_a_diverging_lr_is_never_chosen(tmp_path):
    cfg = P.SPEC.make_config({**TINY, "lrs": [0.02, 0.05, 1e4]})
    data = P.SPEC.prepare(cfg, _synthetic_resources(tmp_path))
    model = P.SPEC.train(cfg, data, "fedlmt", 0, lambda step, **m: None)
    info = model["tuning"]
    scores = [info[f"val_score@{i}"] for i in range(3)]
    assert math.isnan(scores[2])  # lr 1e4 diverges (non-finite loss) and scores nan
    best = int(np.nanargmax(scores[:2]))
    assert model["lr"] == info["tuned_lr"] == cfg.lrs[best] and info["grid_edge"] == (1.0 if best == 0 else 0.0)
    assert P.val_score(cfg, model, data) == pytest.approx(scores[best])

"""SpikeZIP-TF (ICML 2024): exact SNN == QANN equivalence on a tiny random ViT after enough steps (the neurons,
quantizer and spike-equivalent operators themselves: tests/test_spiking.py), the early stop of the simulation,
the baseline conversions, and a tiny prepare -> train -> compress -> evaluate -> derive run through the spec."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from paperflow.papers import spikezip as P
from paperflow.spec import ConfigError, Resources


# ---------------------------------------------------------------------------------------------- network


def _tiny_net(seed=0):
    torch.manual_seed(seed)
    arch = {"patch_size": 7, "d_model": 16, "n_layer": 2, "n_head": 2, "mlp_ratio": 2.0, "levels": 8}
    net = P.build_model(arch)
    x = 1.5 * torch.randn(6, 1, 28, 28)
    net.train()
    net(x)  # LSQ init of every step
    return net.double().eval(), x.double()


def test_snn_equals_qann_exactly_after_enough_steps():
    net, x = _tiny_net()
    with torch.no_grad():
        ref = net(x)
    out, ops = P.simulate(net, x, 64, "st_bif")
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-9)
    assert ops > 0
    early, _ = P.simulate(net, x, 1, "st_bif")  # one step is not enough: the equivalence needs time
    assert float((early - ref).abs().max()) > 1e-3
    # simulation leaves the module usable as a QANN again
    with torch.no_grad():
        torch.testing.assert_close(net(x), ref)


@pytest.mark.parametrize("neuron", ["if", "signed_if", "ori_if"])
def test_rate_coded_conversions_are_not_exact(neuron):
    net, x = _tiny_net()
    with torch.no_grad():
        ref = net(x)
    out, _ = P.simulate(net, x, 64, neuron)
    assert float((out - ref).abs().max()) > 1e-3


@pytest.mark.parametrize("neuron", ["st_bif", "signed_if"])
def test_early_stop_when_silent_equals_the_full_simulation(neuron):
    net, x = _tiny_net(1)
    info = {}
    fast = P.simulate_all(net, x, (3, 40), neuron, info)
    P._set_sim(net, neuron)  # reference: every step run, no stop
    with torch.no_grad():
        logits, partial = torch.zeros(x.shape[0], 10, dtype=x.dtype), {}
        for t in range(40):
            logits = logits + P.snn_step(net, x if t == 0 else torch.zeros_like(x), t)
            if t + 1 in (3, 40):
                partial[t + 1] = (logits.clone(), P.sim_synops(net))
    P._set_sim(net, None)
    for T in (3, 40):
        assert torch.equal(fast[T][0], partial[T][0]) and fast[T][1] == partial[T][1]
    assert 1 <= info["settle_steps"] <= 41
    if info["settle_steps"] <= 40:  # the sums stop changing once the net is silent
        s = info["settle_steps"]
        assert torch.equal(P.simulate_all(net, x, (s, 40), neuron)[s][0], fast[40][0])


# ---------------------------------------------------------------------------------------------- spec


def _synthetic(tmp_path):
    rng = np.random.default_rng(0)
    y_tr, y_te = rng.integers(0, 10, 200), rng.integers(0, 10, 40)
    def imgs(y):
        x = rng.integers(0, 60, (len(y), 28, 28))
        for i, c in enumerate(y):
            x[i, 2 * c:2 * c + 6, :] = 250  # a class-dependent band
        return x.astype(np.uint8)
    path = tmp_path / "fashion.npz"
    np.savez(path, x_train=imgs(y_tr), y_train=y_tr, x_test=imgs(y_te), y_test=y_te)
    return Resources(root=str(tmp_path), paths={"fashion_mnist": str(path)})


def test_spec_end_to_end_tiny(tmp_path):
    cfg = P.SPEC.make_config({"n_train": 200, "n_eval": 40, "d_model": 16, "n_layer": 1, "n_head": 2, "levels": 8,
                              "steps": 8, "batch_size": 32, "warmup": 1, "timesteps": [2, 24], "headline_T": 2, "settled_T": 24,
                              "eval_batch": 40})
    data = P.SPEC.prepare(cfg, _synthetic(tmp_path))
    assert data["x_train"].dtype == torch.uint8
    model = P.SPEC.train(cfg, data, "spikezip", 0, lambda step, **m: None)
    again = P.SPEC.train(cfg, data, "spikezip", 0, lambda step, **m: None)
    assert all(torch.equal(t, again["state"][k]) for k, t in model["state"].items())  # deterministic given the seed
    dense = P.SPEC.evaluate(cfg, model, data)
    assert set(P.SPEC.tradeoff) <= set(dense) and dense["timesteps"] == 1.0
    levels = P.SPEC.compress(cfg, model, data, "spikezip", 0)
    assert set(levels) == {"T2", "T24", "signed_if_T2", "signed_if_T24", "ori_if_T2", "ori_if_T24"}
    metrics = {f"dense/{k}": v for k, v in dense.items()}
    for name, level in levels.items():
        metrics.update({f"compressed:{name}/{k}": v for k, v in P.SPEC.evaluate(cfg, level, data).items()})
    assert set(P.SPEC.tradeoff) <= {k.split("/")[1] for k in metrics}
    assert metrics["compressed:T24/gap"] == 0.0 and metrics["compressed:T24/agree"] == 100.0
    assert metrics["compressed:T24/qann_acc"] == pytest.approx(dense["acc"])
    assert metrics["compressed:T24/timesteps"] == 24.0 and metrics["compressed:T24/synops"] > 0
    assert 1 <= metrics["compressed:T24/settle_steps"] <= 25 and metrics["compressed:T2/settle_steps"] == metrics["compressed:T24/settle_steps"]
    rows = P.SPEC.derive(cfg, [{"paper": "spikezip", "variant": "spikezip", "seed": 0, **metrics}])
    views = {r["variant"]: r for r in rows}
    assert set(views) == {"spikezip", "spikezip|signed_if", "spikezip|ori_if", "spikezip|qann"}
    assert views["spikezip|signed_if"]["compressed:T24/gap"] == metrics["compressed:signed_if_T24/gap"]
    assert views["spikezip|qann"]["compressed:T24/synops"] == dense["synops"]
    assert views["spikezip|qann"]["compressed:T2/acc"] == dense["acc"]
    comps = P.SPEC.comparisons(cfg)
    head = comps[0]
    assert [c.role for c in comps].count("headline") == 1 and head.role == "headline" and head.column == "compressed:T2/gap"
    assert head.baseline == "spikezip|signed_if" and head.better == "lower"
    assert [g.column for g in head.mechanism_gates] == ["compressed:T24/exact"]
    zero = [c for c in comps if c.role == "fact" and c.metric == "gap"]
    assert zero and zero[0].column == "compressed:T24/gap"  # zero gap once settled: a fact, not the headline
    for c in comps:
        assert c.method in views and c.baseline in views
        assert c.column in views[c.method]


@pytest.mark.parametrize("bad", [{"levels": 3}, {"headline_T": 7}, {"settled_T": 8}, {"settled_T": 4}, {"timesteps": []}, {"patch_size": 5},
                                 {"d_model": 10, "n_head": 4}, {"gap_tolerance": 0.0}, {"unknown_key": 1}])
def test_config_validation(bad):
    with pytest.raises(ConfigError):
        P.SPEC.make_config(bad)

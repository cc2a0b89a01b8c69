"""SpikeZIP-TF (ICML 2024): the ST-BIF neuron on hand-computed inputs, the rate-coded IF baseline neuron, the
quantizer, exact SNN == QANN equivalence on a tiny random ViT after enough steps, and a tiny prepare -> train ->
compress -> evaluate run through the spec on synthetic images."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from paperflow.papers import spikezip as P
from paperflow.spec import ConfigError, Resources


def _run(neuron, inputs, theta=1.0):
    outs = [float(neuron.step(torch.tensor([x], dtype=torch.float64))) for x in inputs]
    return outs, float(neuron.count)


# ---------------------------------------------------------------------------------------------- neurons


def test_st_bif_hand_computed_sequence():
    # V0 = 0.5; +2.6 -> 3.1: spikes at 3.1, 2.1, 1.1 (V = 0.1), then -3.0 -> -2.9: -1 spikes until V = 0.1
    n = P.STBIFNeuron(torch.tensor(1.0, dtype=torch.float64), lo=-4, hi=3)
    outs, count = _run(n, [2.6, 0, 0, 0, -3.0, 0, 0, 0, 0])
    assert outs == [1, 1, 1, 0, -1, -1, -1, 0, 0]
    assert count == 0 == np.floor(2.6 - 3.0 + 0.5)  # count = clamp(floor(X + 1/2)) of the total input


def test_st_bif_count_bounded_by_quantizer_levels_and_threshold_scaling():
    n = P.STBIFNeuron(torch.tensor(0.5, dtype=torch.float64), lo=0, hi=3)
    outs, count = _run(n, [5.0, 0, 0, 0, 0])
    assert outs == [0.5, 0.5, 0.5, 0, 0]  # one spike (x theta) per step, stops at hi = 3 although V stays high
    assert count == 3
    n = P.STBIFNeuron(torch.tensor(0.5, dtype=torch.float64), lo=-2, hi=1)
    outs, count = _run(n, [-5.0, 0, 0, 0])
    assert outs == [-0.5, -0.5, 0, 0] and count == -2  # negative spikes stop at lo


def test_st_bif_count_equals_quantizer_for_random_sequences():
    gen = torch.Generator().manual_seed(0)
    q = P.Quantizer(8, signed=True)
    q.s.data.fill_(0.3)
    q.initialized.fill_(1.0)
    q.eval()
    x = torch.randn(200, 5, generator=gen, dtype=torch.float64)  # 200 neurons, 5 input steps
    n = P.STBIFNeuron(q.s.detach().double(), q.lo, q.hi)
    total = torch.zeros(200, dtype=torch.float64)
    for t in range(5 + 2 * (q.hi - q.lo) + 2):
        total += n.step(x[:, t] if t < 5 else torch.zeros(200, dtype=torch.float64))
    with torch.no_grad():
        expected = q.double()(x.sum(1))
    torch.testing.assert_close(total, expected, rtol=0, atol=1e-12)


def test_rate_coded_if_neuron_hand_computed():
    # V0 = 0, reset by subtraction, unsigned, unbounded: 2.6 -> two spikes (floor), the -3.0 is never undone
    n = P.IFNeuron(torch.tensor(1.0, dtype=torch.float64))
    outs, count = _run(n, [2.6, 0, 0, 0, -3.0, 0, 0])
    assert outs == [1, 1, 0, 0, 0, 0, 0] and count == 2
    n = P.IFNeuron(torch.tensor(1.0, dtype=torch.float64))
    outs, count = _run(n, [5.0] + [0] * 6)
    assert count == 5  # no upper bound


def test_quantizer_levels_and_init():
    assert P.bounds(16, True) == (-8, 7) and P.bounds(16, False) == (0, 15)
    q = P.Quantizer(8, signed=True)
    x = torch.tensor([-10.0, -0.26, -0.24, 0.0, 0.74, 0.76, 10.0])
    q.train()
    q(torch.ones(4))  # official init: 2 mean|x| / sqrt(hi)
    assert float(q.s.detach()) == pytest.approx(2 / np.sqrt(3))
    q.s.data.fill_(0.5)
    assert q(x).tolist() == [-2.0, -0.5, 0.0, 0.0, 0.5, 1.0, 1.5]  # clamp(floor(x/s + 1/2), -4, 3) * s


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


def test_rate_coded_conversion_is_not_exact():
    net, x = _tiny_net()
    with torch.no_grad():
        ref = net(x)
    out, _ = P.simulate(net, x, 64, "if")
    assert float((out - ref).abs().max()) > 1e-3


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
                              "steps": 8, "batch_size": 32, "warmup": 1, "timesteps": [2, 24], "headline_T": 24,
                              "eval_batch": 40})
    data = P.SPEC.prepare(cfg, _synthetic(tmp_path))
    assert data["x_train"].dtype == torch.uint8
    models = {v: P.SPEC.train(cfg, data, v, 0, lambda step, **m: None) for v in P.SPEC.variants}
    for v in ("rate_coded", "qann"):  # same recipe and seed -> identical QANN
        for k, t in models["spikezip"]["state"].items():
            assert torch.equal(t, models[v]["state"][k])
    dense = P.SPEC.evaluate(cfg, models["spikezip"], data)
    assert set(P.SPEC.tradeoff) <= set(dense) and dense["timesteps"] == 1.0
    comp = {v: P.SPEC.compress(cfg, models[v], data, v, 0) for v in P.SPEC.variants}
    assert set(comp["spikezip"]) == {"T2", "T24"}
    m = P.SPEC.evaluate(cfg, comp["spikezip"]["T24"], data)
    assert set(P.SPEC.tradeoff) <= set(m)
    assert m["gap"] == 0.0 and m["agree"] == 100.0 and m["qann_acc"] == pytest.approx(dense["acc"])
    assert m["timesteps"] == 24.0 and m["synops"] > 0
    r = P.SPEC.evaluate(cfg, comp["rate_coded"]["T24"], data)
    assert {"acc", "gap", "synops"} <= set(r)
    q = P.SPEC.evaluate(cfg, comp["qann"]["T24"], data)
    assert q["acc"] == pytest.approx(dense["acc"])
    for c in P.SPEC.comparisons(cfg):
        assert c.method in P.SPEC.variants and c.baseline in P.SPEC.variants


@pytest.mark.parametrize("bad", [{"levels": 3}, {"headline_T": 7}, {"timesteps": []}, {"patch_size": 5},
                                 {"d_model": 10, "n_head": 4}, {"close_margin": 1.5}, {"unknown_key": 1}])
def test_config_validation(bad):
    with pytest.raises(ConfigError):
        P.SPEC.make_config(bad)

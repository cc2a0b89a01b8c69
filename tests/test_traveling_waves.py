"""Tests of the traveling-waves paper module (papers/traveling_waves.py): the wave lattice (shift-by-one propagation,
open / periodic end boundary, linear and self-attention start boundaries) on hand-made states, the copy-task
generator on a hand-made example, parameter matching, a tiny spec-level run, and Config errors."""
from __future__ import annotations

import math

import pytest
import torch

from paperflow.measure import count_params
from paperflow.papers import traveling_waves as P
from paperflow.spec import ConfigError


def _state():
    # (B=1, C=2, N=5), non-negative so relu keeps it
    return torch.tensor([[[1.0, 2.0, 3.0, 4.0, 5.0], [0.5, 0.0, 7.0, 0.0, 2.0]]])


# ------------------------------------------------------------------------------------------- the wave
def test_zero_input_shift_kernel_translates_one_cell_per_step_open_end():
    net = P.WaveRNN(channels=2, cells=5, boundary="linear")
    h = _state()
    zero = torch.zeros(1, 2, 5)  # V x = 0 (zero input)
    with torch.no_grad():
        h1 = net.step(h, zero)
        h2 = net.step(h1, zero)
    # open end: the last cell leaves, f = 0 at init so cell 0 becomes 0
    assert torch.equal(h1, torch.tensor([[[0.0, 1, 2, 3, 4], [0, 0.5, 0, 7, 0]]]))
    assert torch.equal(h2, torch.tensor([[[0.0, 0, 1, 2, 3], [0, 0, 0.5, 0, 7]]]))


def test_periodic_end_boundary_is_a_roll():
    net = P.WaveRNN(channels=2, cells=5, boundary="linear", end_boundary="periodic")
    h = _state()
    with torch.no_grad():
        out = net.step(h, torch.zeros(1, 2, 5))
    assert torch.equal(out, torch.roll(h, 1, dims=2))


def test_input_enters_at_cell_zero_with_solo_init_and_then_travels():
    net = P.WaveRNN(channels=2, cells=4, boundary="linear")
    x = torch.tensor([[3, 0, 0]])  # a digit, then blanks
    with torch.no_grad():
        logits, _ = net(x)
    # solo init: every one-hot symbol writes 1 into cell 0 of each channel; reconstruct the states by hand
    vx = net.inp(torch.nn.functional.one_hot(x, 10).float()).view(1, 3, 2, 4)
    assert torch.equal(vx[0, 0], torch.tensor([[1.0, 0, 0, 0], [1.0, 0, 0, 0]]))
    h = torch.zeros(1, 2, 4)
    states = []
    for t in range(3):
        h = net.step(h, vx[:, t])
        states.append(h)
    assert torch.equal(states[2][0], torch.tensor([[1.0, 1, 1, 0], [1.0, 1, 1, 0]]))
    assert torch.allclose(logits[0, 2], net.readout(states[2].flatten(1))[0])


def test_linear_boundary_fibonacci_writes_the_sum_of_the_substrate():
    """Karuvally Thm 3.1 example: f(h) = sum of all columns -> the generalised Fibonacci series at cell 0."""
    net = P.WaveRNN(channels=1, cells=3, boundary="linear")
    with torch.no_grad():
        net.w_b.weight.fill_(1.0)  # f(h) = h_0 + h_1 + h_2
        h = torch.tensor([[[1.0, 1.0, 0.0]]])  # newest first
        seq = []
        for _ in range(4):
            h = net.step(h, torch.zeros(1, 1, 3))
            seq.append(float(h[0, 0, 0]))
    # columns (new -> old): [1,1,0] -> [2,1,1] -> [4,2,1] -> [7,4,2] -> [13,7,4] (tribonacci)
    assert seq == [2.0, 4.0, 7.0, 13.0]


def test_attention_boundary_is_softmax_weighted_values_of_the_columns():
    net = P.WaveRNN(channels=2, cells=3, boundary="attention")
    h = torch.tensor([[[1.0, 0.0, 2.0], [0.0, 1.0, 0.0]]])  # columns: (1,0), (0,1), (2,0)
    with torch.no_grad():
        net.w_q.weight.copy_(torch.eye(2))
        net.w_k.weight.copy_(torch.eye(2))
        net.w_v.weight.copy_(torch.eye(2))
        f = net.start_boundary(h)
        out = net.step(h, torch.zeros(1, 2, 3))
    # query = newest column (1,0); scores <q, k_i> / sqrt(2) = (1, 0, 2) / sqrt(2)
    s = torch.tensor([1.0, 0.0, 2.0]) / math.sqrt(2)
    a = torch.softmax(s, 0)
    expect = a[0] * torch.tensor([1.0, 0]) + a[1] * torch.tensor([0.0, 1]) + a[2] * torch.tensor([2.0, 0])
    assert torch.allclose(f[0], expect)
    assert torch.allclose(out[0, :, 0], expect)  # written into cell 0
    assert torch.equal(out[0, :, 1:], h[0, :, :-1])  # the rest still shifts
    # at init (W_v = 0) the attention boundary writes nothing
    fresh = P.WaveRNN(channels=2, cells=3, boundary="attention")
    assert torch.equal(fresh.start_boundary(h), torch.zeros(1, 2))


# ---------------------------------------------------------------------------------------------- task
def test_copy_batch_hand_made():
    x, y = P.copy_batch(torch.tensor([[3, 5]]), delay=4)
    assert x.tolist() == [[3, 5, 0, 9, 0, 0]]
    assert y.tolist() == [[0, 0, 0, 0, 3, 5]]
    with pytest.raises(ValueError):
        P.copy_batch(torch.tensor([[3, 5]]), delay=2)


def test_prepare_is_deterministic_and_in_range():
    cfg = P.Config(n_items=3, delays=(5, 8), n_test=16, grad_batch=8)
    a, b = P.prepare(cfg, None), P.prepare(cfg, None)
    for t in (5, 8):
        assert torch.equal(a["test"][str(t)]["x"], b["test"][str(t)]["x"])
        x = a["test"][str(t)]["x"].long()
        assert x.shape == (16, t + 3) and int(x[:, :3].min()) >= 1 and int(x[:, :3].max()) <= 8
        assert (x[:, t - 1] == 9).all()


def test_matched_parameter_counts():
    cfg = P.Config()
    target = P.wrnn_params(cfg)
    assert count_params(P.build_model(P.arch_of(cfg, "wrnn"))) == target
    rnn, lstm = P.build_model(P.arch_of(cfg, "rnn")), P.build_model(P.arch_of(cfg, "lstm"))
    assert count_params(rnn) == P.rnn_params(rnn.hidden)
    assert count_params(lstm) == P.lstm_params(lstm.hidden)
    assert abs(count_params(rnn) - target) / target < 0.05 and abs(count_params(lstm) - target) / target < 0.05
    assert torch.equal(rnn.rec.weight, torch.eye(rnn.hidden))  # iRNN identity init


# ----------------------------------------------------------------------------------------- spec level
def test_tiny_spec_run():
    cfg = P.Config(n_items=2, delays=(4, 6), n_test=8, channels=2, cells=8, steps=3, batch_size=4, grad_steps=2,
                   grad_batch=4, log_every=1)
    data = P.prepare(cfg, None)
    logged = []
    for variant in P.VARIANTS:
        model = P.train(cfg, data, variant, 0, lambda step, **m: logged.append(m))
        assert P.SPEC.compress is None
        m = P.evaluate(cfg, model, data)
        for t in cfg.delays:
            for key in ("loss", "recall_loss", "recall_acc", "grad_h0", "grad_h0_init", "grad_rec_early"):
                assert math.isfinite(m[f"{key}@{t}"])
        assert m["loss"] == m["loss@6"] and m["params"] > 0
        again = P.train(cfg, data, variant, 0, None)  # deterministic given the seed
        assert all(torch.equal(a, b) for a, b in zip(model["states"]["6"].values(), again["states"]["6"].values()))
    assert any("train/loss_T6" in m for m in logged)
    cols = {c.column for c in P.comparisons(cfg)}
    assert "dense/loss@6" in cols and "dense/loss@4" in cols and "dense/grad_h0_init@6" in cols


@pytest.mark.parametrize("kw", [dict(delays=(5, 3)), dict(n_items=5, delays=(5, 10)), dict(end_boundary="reflect"),
                                dict(rnn_act="gelu"), dict(kernel_size=2), dict(lr=0), dict(grad_steps=0),
                                dict(grad_batch=10_000), dict(cells=1)])
def test_config_errors(kw):
    with pytest.raises(ConfigError):
        P.Config(**kw)

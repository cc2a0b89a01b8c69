"""Tests of the traveling-waves paper module (papers/traveling_waves.py): the wave lattice (shift-by-one propagation,
open / periodic end boundary, linear and self-attention start boundaries) on hand-made states, the fused LBC
recurrence against the convolution steps, the side-by-side lr grid against separate fits, the copy-task generator on
a hand-made example, parameter matching, compression, a tiny spec-level run, and Config errors."""
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
    cfg = P.Config(n_items=3, delays=(5, 8), n_val=8, n_test=16, grad_batch=8)
    a, b = P.prepare(cfg, None), P.prepare(cfg, None)
    for t in (5, 8):
        assert torch.equal(a["test"][str(t)]["x"], b["test"][str(t)]["x"])
        x = a["test"][str(t)]["x"].long()
        assert x.shape == (16, t + 3) and int(x[:, :3].min()) >= 1 and int(x[:, :3].max()) <= 8
        assert (x[:, t - 1] == 9).all()
        assert a["val"][str(t)]["x"].shape == (8, t + 3)
        assert not torch.equal(a["val"][str(t)]["x"][:8], a["test"][str(t)]["x"][:8])  # separate draws


def test_matched_parameter_counts():
    cfg = P.Config()
    target = P.wrnn_params(cfg)
    assert count_params(P.build_model(P.arch_of(cfg, "wrnn"))) == target
    rnn, lstm = P.build_model(P.arch_of(cfg, "rnn")), P.build_model(P.arch_of(cfg, "lstm"))
    assert count_params(rnn) == P.rnn_params(rnn.hidden)
    assert count_params(lstm) == P.lstm_params(lstm.hidden)
    assert abs(count_params(rnn) - target) / target < 0.05 and abs(count_params(lstm) - target) / target < 0.05
    assert torch.equal(rnn.rec.weight, torch.eye(rnn.hidden))  # iRNN identity init


# ------------------------------------------------------------------------------- fused / stacked forms
def _perturb(net, scale=0.3):
    with torch.no_grad():
        for p in net.parameters():
            p.add_(scale * torch.randn_like(p))
    return net


@pytest.mark.parametrize("end", ["open", "periodic"])
def test_fused_linear_boundary_equals_the_convolution_steps(end):
    """The LBC wRNN runs as a relu-RNN with W_hh = sum_j kron(u_j, S_j) + P W_b: the same states as step()."""
    torch.manual_seed(0)
    net = _perturb(P.WaveRNN(channels=3, cells=6, boundary="linear", end_boundary=end), 0.2)
    x = torch.randint(0, 10, (4, 9))
    with torch.no_grad():
        fused, _ = net(x)
        vx = net.inp(torch.nn.functional.one_hot(x, 10).float()).view(4, 9, 3, 6)
        h, states = torch.zeros(4, 3, 6), []
        for t in range(9):
            h = net.step(h, vx[:, t])
            states.append(h.flatten(1))
        loop = net.readout(torch.stack(states, 1))
    torch.testing.assert_close(fused, loop, rtol=1e-4, atol=1e-4)


def test_irnn_and_lstm_equal_their_step_by_step_definitions():
    torch.manual_seed(1)
    x = torch.randint(0, 10, (3, 7))
    xs = torch.nn.functional.one_hot(x, 10).float()
    rnn = _perturb(P.IRNN(6), 0.2)
    h, hs = torch.zeros(3, 6), []
    for t in range(7):
        h = torch.relu(rnn.inp(xs[:, t]) + rnn.rec(h))
        hs.append(h)
    torch.testing.assert_close(rnn(x)[0], rnn.readout(torch.stack(hs, 1)))
    lstm, cell = P.LSTM(5), torch.nn.LSTMCell(10, 5)
    with torch.no_grad():
        for a, b in zip(cell.parameters(), lstm.rnn_weights()):
            a.copy_(b)
    h, c, hs = torch.zeros(3, 5), torch.zeros(3, 5), []
    for t in range(7):
        h, c = cell(xs[:, t], (h, c))
        hs.append(h)
    torch.testing.assert_close(lstm(x)[0], lstm.readout(torch.stack(hs, 1)))


@pytest.mark.parametrize("arch", [
    {"kind": "wave", "channels": 2, "cells": 4, "kernel_size": 3, "end_boundary": "open", "boundary": "linear"},
    {"kind": "wave", "channels": 2, "cells": 4, "kernel_size": 3, "end_boundary": "open", "boundary": "attention"},
    {"kind": "rnn", "act": "relu", "hidden": 7}, {"kind": "rnn", "act": "tanh", "hidden": 7}, {"kind": "lstm", "hidden": 5}])
def test_stacked_forward_equals_each_model_alone(arch):
    torch.manual_seed(2)
    nets = [_perturb(P.build_model(arch), 0.2) for _ in range(3)]
    x = torch.randint(0, 10, (4, 8))
    with torch.no_grad():
        stacked, _ = P.stacked_forward(nets, x)
    assert stacked.shape == (3, 4, 8, 10)
    for k, n in enumerate(nets):
        torch.testing.assert_close(stacked[k], n(x)[0], rtol=1e-5, atol=1e-5)


def test_grad_first_state_matches_the_unrolled_gradient():
    torch.manual_seed(3)
    net = _perturb(P.IRNN(6), 0.2)
    x, y = torch.randint(0, 10, (5, 9)), torch.randint(0, 10, (5, 9))
    wx = net.inp(torch.nn.functional.one_hot(x, 10).float())
    h0 = torch.relu(wx[:, 0]).detach().requires_grad_()
    h, hs = h0, [h0]
    for t in range(1, 9):
        h = torch.relu(wx[:, t] + net.rec(h))
        hs.append(h)
    loss = torch.nn.functional.cross_entropy(net.readout(torch.stack(hs, 1)).reshape(-1, 10), y.reshape(-1))
    (g,) = torch.autograd.grad(loss, h0)
    assert P.grad_first_state(net, x, y) == pytest.approx(float(g.norm()), rel=1e-5)


def test_losses_and_recall_accuracy_by_hand():
    y = torch.tensor([[0, 0, 3, 5]])
    logits = torch.full((1, 4, 10), -10.0)
    logits[0, [0, 1, 2, 3], [0, 0, 3, 4]] = 10.0  # blanks right, first digit right, second wrong
    assert float(P.recall_accuracy(logits, y, 2)) == 0.5
    full, recall = P.sequence_losses(logits, y, 2)
    per_pos = torch.nn.functional.cross_entropy(logits[0], y[0], reduction="none")
    assert float(full) == pytest.approx(float(per_pos.mean())) and float(recall) == pytest.approx(float(per_pos[2:].mean()))
    both = torch.stack([logits, logits])  # (K=2, B=1, L, 10) -> one value per model
    assert P.recall_accuracy(both, y, 2).tolist() == [0.5, 0.5] and P.sequence_losses(both, y, 2)[1].shape == (2,)


# ------------------------------------------------------------------------------------- training, tuning
def _tiny(**kw):
    base = dict(n_items=2, delays=(6,), n_val=16, n_test=16, channels=2, cells=4, steps=4, batch_size=4,
                grad_batch=4, log_every=1, lr_grid=(1e-3, 1e-2, 3e-2), converge_window=2)
    base.update(kw)
    return P.Config(**base)


@pytest.mark.parametrize("variant", P.VARIANTS)
def test_side_by_side_grid_fits_equal_separate_fits(variant):
    """fit_grid trains the lr grid side by side; each member must be the fit it would be alone."""
    cfg = _tiny()
    data = P.prepare(cfg, None)
    arch = P.arch_of(cfg, variant)
    grid = P.fit_grid(cfg, arch, data, 6, 11, 22, None)
    alone = P.fit_grid(_tiny(lr_grid=(1e-2,)), arch, data, 6, 11, 22, None)
    (a, score_a), (b, score_b) = grid[1], alone[0]
    assert a["steps"] == b["steps"] == 4.0 and score_a == pytest.approx(score_b)
    for k in a["state"]:
        torch.testing.assert_close(a["state"][k], b["state"][k], rtol=1e-5, atol=1e-6)
    assert not torch.equal(grid[0][0]["state"]["readout.weight"], grid[2][0]["state"]["readout.weight"])


def test_a_fit_stops_once_converged():
    cfg = _tiny(converge_acc=0.01, converge_window=1, steps=50)  # any batch with one right digit "converges"
    data = P.prepare(cfg, None)
    fits = P.fit_grid(cfg, P.arch_of(cfg, "rnn"), data, 6, 0, 0, None)
    assert all(f["steps"] < 50 for f, _ in fits)


def test_compress_prunes_weight_matrices_at_each_level():
    cfg = _tiny(sparsities=(0.5, 0.8))
    data = P.prepare(cfg, None)
    model = P.train(cfg, data, "wrnn", 0, None)
    levels = P.SPEC.compress(cfg, model, data, "wrnn", 0)
    assert set(levels) == {"0.50", "0.80"}
    for name, s in (("0.50", 0.5), ("0.80", 0.8)):
        state = levels[name]["states"]["6"]
        mats = {k: v for k, v in state.items() if v.dim() >= 2}
        assert sum(int((v == 0).sum()) for v in mats.values()) >= int(s * sum(v.numel() for v in mats.values()))
        assert torch.equal(state["readout.bias"], model["states"]["6"]["readout.bias"])  # biases kept
        m = P.evaluate(cfg, levels[name], data)
        assert m["nonzero_params"] < P.evaluate(cfg, model, data)["nonzero_params"]


# ----------------------------------------------------------------------------------------- spec level
def test_tiny_spec_run():
    cfg = _tiny(delays=(4, 6))
    data = P.prepare(cfg, None)
    logged = []
    for variant in P.VARIANTS:
        model = P.train(cfg, data, variant, 0, lambda step, **m: logged.append(m))
        m = P.evaluate(cfg, model, data)
        for t in cfg.delays:
            for key in ("loss", "recall_loss", "recall_acc", "grad_h0", "grad_h0_init", "tuned_lr",
                        "grid_edge", "steps_run"):
                assert math.isfinite(m[f"{key}@{t}"])
            assert m[f"tuned_lr@{t}"] in cfg.lr_grid and m[f"grid_edge@{t}"] in (0.0, 1.0)
        assert m["recall_acc"] == m["recall_acc@6"] and m["params"] > 0
        again = P.train(cfg, data, variant, 0, None)  # deterministic given the seed
        assert all(torch.equal(a, b) for a, b in zip(model["states"]["6"].values(), again["states"]["6"].values()))
    assert any("train/loss_T6_lr0" in m for m in logged)
    rows = P.comparisons(cfg)
    assert [r.role for r in rows].count("headline") == 1
    cols = {c.column for c in rows}
    assert "dense/recall_acc@6" in cols and "compressed:0.20/recall_acc@6" in cols and "dense/grad_h0_init@6" in cols
    gated = {g.variant for r in rows for g in r.gates}
    assert gated <= set(P.VARIANTS)


@pytest.mark.parametrize("kw", [dict(delays=(5, 3)), dict(n_items=5, delays=(5, 10)), dict(end_boundary="reflect"),
                                dict(rnn_act="gelu"), dict(kernel_size=2), dict(lr_grid=(1e-2, 1e-3)), dict(lr_grid=(0.0,)),
                                dict(grad_batch=10_000), dict(cells=1), dict(boundary="mlp"),
                                dict(sparsities=(1.0,)), dict(converge_acc=0.0)])
def test_config_errors(kw):
    with pytest.raises(ConfigError):
        P.Config(**kw)


# ----------------------------------------------------------------------------------------- contract v3 (issue 25)
def test_wave_stats_by_hand():
    """At Keller's init the lattice is a pure one-cell shift (boundary 0): h_t+1[c, i+1] = h_t[c, i] exactly, so the
    wave correlation is 1; with the kernel set to the identity tap (activity stays put) the standing correlation is 1."""
    torch.manual_seed(0)
    net = P.WaveRNN(3, 5)
    x = P.copy_batch(P.random_digits(8, 2, torch.Generator().manual_seed(1)), 7)[0]
    wave, standing = P.wave_stats(net, x)
    assert wave == pytest.approx(1.0, abs=1e-12) and standing < 0.9
    with torch.no_grad():
        net.kernel.zero_()
        for ch in range(3):
            net.kernel[ch, ch, 1] = 1.0  # centre tap: h_t+1[c, i] = h_t[c, i] + input
    wave2, standing2 = P.wave_stats(net, x)
    assert standing2 > 0.9 and wave2 < wave


def test_plateau_gain_and_step_edge():
    assert P.plateau_gain([0.1] * 10 + [0.3] * 10, 10) == pytest.approx(0.2)
    assert P.plateau_gain([0.5] * 7, 300) == pytest.approx(0.0)  # short run: halves of what there is
    assert P.plateau_gain([0.2], 300) == 0.0
    cfg = _tiny(steps=6, converge_acc=1.0, plateau_window=2)
    data = P.prepare(cfg, None)
    model = P.train(cfg, data, "rnn", 0, None)
    m = P.evaluate(cfg, model, data)
    assert m["steps_run@6"] == 6.0 and m["steps_grid_edge@6"] == float(m["plateau_gain@6"] > P.PLATEAU_GAIN)
    assert "wave_corr@6" not in m
    w = P.evaluate(cfg, P.train(cfg, data, "wrnn", 0, None), data)
    assert -1.0 <= w["wave_corr@6"] <= 1.0 and math.isfinite(w["standing_corr@6"])


def test_headline_gates_v3():
    cfg = P.Config()
    head = [r for r in P.comparisons(cfg) if r.role == "headline"][0]
    assert head.refuted_if and [(g.variant, g.metric) for g in head.mechanism_gates] == [("wrnn", "wave_corr@12")]
    edges = {(g.variant, g.metric) for g in head.gates if g.kind == "grid_edge"}
    assert edges == {("wrnn", "grid_edge@12"), ("rnn", "grid_edge@12"), ("wrnn", "steps_grid_edge@12"), ("rnn", "steps_grid_edge@12")}

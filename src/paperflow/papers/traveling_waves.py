"""Traveling waves: "Hidden Traveling Waves bind Working Memory Variables in Recurrent Neural Networks", Karuvally,
Sejnowski, Siegelmann (ICML 2024; Traveling Wave based Working Memory, TWM, with a Linear (LBC) and a Self-attention
(SBC) Boundary Condition), on the wave-RNN (wRNN) of Keller, Muller, Sejnowski, Welling (ICLR 2024). Abstract: the wave
model "reliably stores external information and enhances the learning process by addressing the diminishing gradient
problem of RNNs"; catalog claim: "wave-RNN learns longer histories". Code: Keller et al., akandykeller/Wave_RNNs
(copy/conv_rnn_model.py::RNN_Cell init='fwd', solo_init='yes'; copy/rnn_model.py, the iRNN; copy/utils.py::get_batch;
copy/copy_task.py). No public code for Karuvally et al.: LBC/SBC follow the text (Sec. 3, Thm 3.1, Sec. 4).

Model: a lattice h_t in R^{C x N} (C channels x N cells), h_{t+1} = relu(u (*) h_t + V x_{t+1} + e_0 f(h_t)); u (*) h
a C -> C convolution over the cells (kernel 3) initialised to a shift by one cell ((u (*) h)[:, i] = h[:, i-1]),
V the input projection with Keller's solo_init (cell 0 of every channel, weight 1), both trainable; end boundary
"open" (TWM: what reaches cell N-1 leaves) or "periodic" (Keller's code); f the start boundary at cell 0: "linear"
LBC f(h) = W_b vec(h) + b_b (Sec. 4.1; Thm 3.1's Fibonacci series is f(h) = sum_i h[:, i]), W_b initialised 0, or
"attention" SBC f(h) = sum_i softmax_i(<W_q h[:, 0], W_k h[:, i]> / sqrt(C)) W_v h[:, i] (Sec. 4.2), W_v = 0 at init.
With the open end and a delay longer than the lattice (T > N, the default) a digit has left the lattice before its
recall unless the learned start boundary re-injects it: the boundary condition is what is tested. The LBC step is
linear before the relu, so it runs as one fused relu-RNN with W_hh = sum_j kron(u[:, :, j], S_j) + P W_b (S_j the
cell shift of tap j, P the cell-0 scatter), equal to the convolution steps (tested); the SBC runs step by step.
Baselines (Keller's): rnn = iRNN h' = relu(W_x x + W_h h + b), W_h = I, W_x ~ N(0, 1e-3); lstm = torch LSTM; both with
a linear readout and hidden sizes matched to the wRNN's parameter count (as the paper compares).

Task (Keller Sec. 4): copy with delay T: M digits 1..8, blanks, the marker 9 at T - 1; targets blank except the last
M positions, the digits. One-hot inputs, cross-entropy over every position (Keller's objective), Adam at a constant
lr, gradient clipping. Claims use the recall accuracy of the M digits (chance 1/8), not the blank-dominated loss.
Equal tuning (paperflow.tuning): every variant fits the same lr grid from the same initialisation on the same batches
(side by side as one stacked recurrent layer, each fit with its own loss, clipping and Adam state: the fit it would be
alone, tested), each until the mean recall accuracy of its last converge_window training batches reaches
converge_acc, or cfg.steps; the lr with the best validation recall accuracy is kept (ties to the smaller).
Contract v3 (issue 25). Step budget: every fit stops at convergence or at cfg.steps; the baselines are usually still
improving at the cap (a probe at 3000 steps, seed 0: iRNN 0.33 -> 0.41, LSTM 0.28 -> 0.39 validation recall between
1200 and 3000 steps, the wRNN converged at 1351), and equal steps to convergence is far beyond the budget. So each
fit records whether it was still improving when the cap stopped it (steps_grid_edge@T = 1: not converged and its mean
training recall over the last plateau_window batches exceeds that of the window before by > PLATEAU_GAIN = 0.02, ~5
sd of that difference at 96 digits a batch); it is a grid-edge gate (the step budget's edge), directional like the
lr edge: a baseline still improving blocks only `reproduced`, the wRNN still improving only `not reproduced`. The
same comparison without that gate is a secondary row that claims only "better at an equal budget of cfg.steps".
Mechanism: the wRNN's hidden state must carry travelling waves after training, measured on the test sequences:
wave_corr@T = Pearson correlation of h_{t+1}[c, i+1] with h_t[c, i] over sequences, steps, channels and cells (1 for
a pure one-cell shift), gate > WAVE_MIN = 0.5; standing_corr@T (h_{t+1}[c, i] with h_t[c, i]) is reported beside it.
Stopped fits leave the stacked forward (their lr is 0 and they get no gradient, so nothing else changes).
Metrics per delay T: recall_acc@T, recall_loss@T (log 8: no memory), loss@T, grad_h0@T (|dL/dh_0|, test loss w.r.t.
the state after the first input; (h, c) for the LSTM), grad_h0_init@T (the same at initialisation: the diminishing-
gradient measure), tuned_lr@T, grid_edge@T, steps_run@T; recall_acc, grid_edge (longest delay), params, nonzero_params.
Compression: global magnitude pruning of every weight matrix (biases kept) at cfg.sparsities (magnitude_levels).
"""
from __future__ import annotations

import copy
import math
from collections import deque
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..compress.magnitude import level_name, magnitude_levels
from ..measure import count_nonzero, count_params
from ..registry import register_paper
from ..spec import Comparison, Gate, PaperSpec, check
from ..tuning import tune

VARIANTS = ("wrnn", "rnn", "lstm")
N_SYMBOLS = 10  # 0 blank, 1..8 digits, 9 marker (copy/utils.py::get_batch)
BLANK, MARKER = 0, 9
ABOVE_CHANCE = 0.2  # gate: a baseline must recall clearly above chance (1/8: digits uniform on 1..8)
WAVE_MIN = 0.5  # mechanism gate: the trained wRNN's hidden activity travels (shifted-cell correlation > 0.5), fixed before v3 runs
PLATEAU_GAIN = 0.02  # a fit that stops at cfg.steps unconverged and gained more than this in training recall accuracy over
#                      its last plateau_window batches (vs the plateau_window before) was still improving: the step budget's edge


@dataclass(frozen=True)
class Config:
    n_items: int = 3  # M digits to remember (Keller: 10)
    delays: tuple = (12,)  # T: lag between seeing digit k and recalling it; one model per delay
    n_val: int = 256  # validation sequences per delay (lr selection)
    n_test: int = 512  # test sequences per delay
    data_seed: int = 0
    channels: int = 6  # C (Keller: n_ch = 6)
    cells: int = 6  # N (Keller: n_hid = 100); delays > cells make the boundary condition matter
    kernel_size: int = 3
    end_boundary: str = "open"  # "open" (TWM) | "periodic" (Keller's circular padding)
    boundary: str = "linear"  # the wRNN's start boundary: "linear" (LBC) | "attention" (SBC)
    rnn_hidden: int = 0  # baselines: 0 = hidden size matched to the wRNN (LBC) parameter count
    lstm_hidden: int = 0
    rnn_act: str = "relu"  # iRNN; "tanh" for a tanh RNN with identity init
    steps: int = 1200  # at most, per lr and delay (Adam, constant lr)
    batch_size: int = 32
    lr_grid: tuple = (3e-3, 1e-2, 3e-2, 1e-1)  # the same grid for every variant
    clip_norm: float = 1.0  # 0 = no clipping
    converge_acc: float = 0.99  # stop a fit once the recent training recall accuracy reaches this
    converge_window: int = 50  # ... averaged over this many training batches
    plateau_window: int = 300  # still improving at the step cap: mean training recall of the last window vs the one before
    grad_batch: int = 128  # test sequences used for grad_h0
    log_every: int = 50
    sparsities: tuple = (0.2, 0.5)  # compress: global magnitude pruning levels (~1k-parameter models: 0.5 is severe)

    def __post_init__(self) -> None:
        for name, kind in (("delays", int), ("lr_grid", float), ("sparsities", float)):
            object.__setattr__(self, name, tuple(kind(v) for v in getattr(self, name)))
        check(self.n_items >= 1 and self.n_val >= 1 and self.n_test >= 1, "n_items, n_val and n_test must be >= 1")
        check(len(self.delays) >= 1 and list(self.delays) == sorted(set(self.delays)) and self.delays[0] > self.n_items,
              f"delays must be strictly increasing and exceed n_items = {self.n_items} (the marker sits at T - 1, after "
              f"the digits); got {self.delays}")
        check(self.channels >= 1 and self.cells >= 2, f"channels must be >= 1 and cells >= 2, got {self.channels}, {self.cells}")
        check(self.kernel_size >= 3 and self.kernel_size % 2 == 1, f"kernel_size must be odd and >= 3, got {self.kernel_size}")
        check(self.end_boundary in ("open", "periodic"), f"end_boundary must be open|periodic, got {self.end_boundary!r}")
        check(self.boundary in ("linear", "attention"), f"boundary must be linear|attention, got {self.boundary!r}")
        check(self.rnn_hidden >= 0 and self.lstm_hidden >= 0, "rnn_hidden and lstm_hidden must be >= 0 (0 = match wRNN params)")
        check(self.rnn_act in ("relu", "tanh"), f"rnn_act must be relu|tanh, got {self.rnn_act!r}")
        check(self.steps >= 1 and self.batch_size >= 1, f"steps and batch_size must be >= 1, got {self.steps}, {self.batch_size}")
        check(len(self.lr_grid) >= 1 and all(lr > 0 for lr in self.lr_grid) and list(self.lr_grid) == sorted(set(self.lr_grid)),
              f"lr_grid must be positive and strictly increasing, got {self.lr_grid}")
        check(self.clip_norm >= 0, f"clip_norm must be >= 0 (0 = no clipping), got {self.clip_norm}")
        check(0 < self.converge_acc <= 1 and self.converge_window >= 1,
              f"converge_acc must be in (0, 1] and converge_window >= 1, got {self.converge_acc}, {self.converge_window}")
        check(self.plateau_window >= 1, f"plateau_window must be >= 1, got {self.plateau_window}")
        check(1 <= self.grad_batch <= self.n_test and self.log_every >= 1,
              f"grad_batch must be in [1, n_test = {self.n_test}] and log_every >= 1, got {self.grad_batch}, {self.log_every}")
        check(len(self.sparsities) >= 1 and all(0 < s < 1 for s in self.sparsities), f"sparsities must be in (0, 1), got {self.sparsities}")


# ------------------------------------------------------------------------------------------------ data
def copy_batch(digits: torch.Tensor, delay: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The copy task (copy/utils.py::get_batch): digits (B, M) in 1..8 -> x (digits, blanks, the marker at T - 1)
    and y (blanks except y[:, T + k] = digit k), both (B, T + M)."""
    b, m = digits.shape
    check(delay > m, f"copy_batch: delay {delay} must exceed the number of digits {m}")
    x, y = torch.full((b, delay + m), BLANK, dtype=torch.long), torch.full((b, delay + m), BLANK, dtype=torch.long)
    x[:, :m], x[:, delay - 1], y[:, delay:] = digits, MARKER, digits
    return x, y


def random_digits(n: int, m: int, generator: torch.Generator) -> torch.Tensor:
    return torch.randint(1, 9, (n, m), generator=generator)


def prepare(cfg: Config, res) -> dict:
    """Synthetic validation and test sets, one of each per delay (fixed by data_seed); no resources."""
    out = {"delays": list(cfg.delays), "val": {}, "test": {}}
    for t in cfg.delays:
        for split, n, salt in (("test", cfg.n_test, 0), ("val", cfg.n_val, 50_021)):
            g = torch.Generator().manual_seed(cfg.data_seed * 100_003 + t + salt)
            x, y = copy_batch(random_digits(n, cfg.n_items, g), t)
            out[split][str(t)] = {"x": x.to(torch.uint8), "y": y.to(torch.uint8)}
    return out


# ----------------------------------------------------------------------------------------------- models
class Fused(nn.Module):
    """A one-layer recurrent model run by a fused torch cell (cell_fn) from rnn_weights() = [W_ih, W_hh, b_ih, b_hh]
    (gates = 4 for the LSTM), with a linear readout of every step's state."""

    gates, fused = 1, True

    def forward(self, x: torch.Tensor, keep_first: bool = False):
        logits, first = stacked_forward([self], x, keep_first)
        return logits[0], first


class WaveRNN(Fused):
    """wRNN on a C x N lattice with a start-boundary function f (see the module docstring)."""

    def __init__(self, channels: int, cells: int, boundary: str = "linear", kernel_size: int = 3, end_boundary: str = "open"):
        super().__init__()
        check(boundary in ("linear", "attention"), f"WaveRNN: boundary must be linear|attention, got {boundary!r}")
        self.c, self.n, self.k, self.hidden = channels, cells, kernel_size, channels * cells
        self.boundary, self.end_boundary, self.fused = boundary, end_boundary, boundary == "linear"
        self.cell_fn = torch.rnn_relu
        self.inp = nn.Linear(N_SYMBOLS, channels * cells)  # V
        self.kernel = nn.Parameter(torch.zeros(channels, channels, kernel_size))  # u
        self.kernel_bias = nn.Parameter(torch.zeros(channels))
        if boundary == "linear":  # LBC: f(h) = W_b vec(h) + b_b
            self.w_b = nn.Linear(channels * cells, channels)
        else:  # SBC: self-attention over the substrate's columns, query = newest column
            self.w_q = nn.Linear(channels, channels, bias=False)
            self.w_k = nn.Linear(channels, channels, bias=False)
            self.w_v = nn.Linear(channels, channels, bias=False)
        self.readout = nn.Linear(channels * cells, N_SYMBOLS)
        # structure of the fused step (not in the state dict): shifts[j][i, i'] = 1 iff tap j of cell i reads cell i'
        p, shifts = kernel_size // 2, torch.zeros(kernel_size, cells, cells)
        for j in range(kernel_size):
            for i in range(cells):
                if end_boundary == "periodic" or 0 <= i + j - p < cells:
                    shifts[j, i, (i + j - p) % cells] = 1.0
        cell0 = torch.zeros(channels * cells, channels)  # P: channel c of f -> cell 0 of channel c
        cell0[torch.arange(channels) * cells, torch.arange(channels)] = 1.0
        for name, buf in (("shifts", shifts), ("cell0", cell0)):
            self.register_buffer(name, buf, persistent=False)
        self.reset_wave()

    @torch.no_grad()
    def reset_wave(self) -> None:
        """Keller's init='fwd' (shift by one cell) and solo_init='yes' (input only into cell 0); f = 0."""
        self.kernel.zero_()
        for ch in range(self.c):
            self.kernel[ch, ch, self.k // 2 - 1] = 1.0  # (u (*) h)[:, i] = h[:, i - 1]: waves move towards cell N-1
        for t in (self.kernel_bias, self.inp.weight, self.inp.bias) + ((self.w_b.weight, self.w_b.bias) if self.fused else (self.w_v.weight,)):
            t.zero_()
        self.inp.weight.view(self.c, self.n, -1)[:, 0] = 1.0

    def propagate(self, h: torch.Tensor) -> torch.Tensor:
        """u (*) h over the cells with the end boundary: h (B, C, N) -> (B, C, N)."""
        p = self.k // 2
        hp = F.pad(h, (p, p), mode="circular" if self.end_boundary == "periodic" else "constant")
        return F.conv1d(hp, self.kernel, self.kernel_bias)

    def start_boundary(self, h: torch.Tensor) -> torch.Tensor:
        """f(h_t) in R^{B x C}, written into cell 0."""
        if self.boundary == "linear":
            return self.w_b(h.flatten(1))
        cols = h.transpose(1, 2)  # (B, N, C): one token per cell
        q = self.w_q(cols[:, 0])  # newest column
        att = torch.softmax(torch.einsum("bc,bnc->bn", q, self.w_k(cols)) / math.sqrt(self.c), dim=-1)
        return torch.einsum("bn,bnc->bc", att, self.w_v(cols))

    def step(self, h: torch.Tensor, vx: torch.Tensor) -> torch.Tensor:
        """One update; h (B, C, N), vx = V x (B, C, N)."""
        pre = self.propagate(h) + vx
        pre = torch.cat([pre[:, :, :1] + self.start_boundary(h)[:, :, None], pre[:, :, 1:]], dim=2)
        return torch.relu(pre)

    def rnn_weights(self) -> list[torch.Tensor]:
        """LBC as a relu-RNN on vec(h) (index c * N + i): [W_ih, W_hh, b_ih, b_hh] with
        W_hh = sum_j kron(u[:, :, j], shifts[j]) + P W_b and b_hh = u_bias (per cell) + P b_b."""
        w = sum(torch.kron(self.kernel[:, :, j], self.shifts[j]) for j in range(self.k))
        b = self.kernel_bias.repeat_interleave(self.n)
        return [self.inp.weight, w + self.cell0 @ self.w_b.weight, self.inp.bias, b + self.cell0 @ self.w_b.bias]

    def forward(self, x: torch.Tensor, keep_first: bool = False):
        if self.fused:
            return super().forward(x, keep_first)
        b, length = x.shape
        vx = self.inp(F.one_hot(x.long(), N_SYMBOLS).float()).view(b, length, self.c, self.n)
        h = torch.zeros(b, self.c, self.n)
        states, first = [], None
        for t in range(length):
            h = self.step(h, vx[:, t])
            if t == 0 and keep_first:
                first = [h]
            states.append(h.flatten(1))
        return self.readout(torch.stack(states, 1)), first


class IRNN(Fused):
    """Keller's RNN baseline (copy/rnn_model.py, init='eye'): h' = act(W_x x + W_h h + b), W_h = I."""

    def __init__(self, hidden: int, act: str = "relu"):
        super().__init__()
        self.cell_fn, self.hidden = torch.rnn_relu if act == "relu" else torch.rnn_tanh, hidden
        self.inp = nn.Linear(N_SYMBOLS, hidden)
        self.rec = nn.Linear(hidden, hidden, bias=False)
        self.readout = nn.Linear(hidden, N_SYMBOLS)
        self.register_buffer("zero_bias", torch.zeros(hidden), persistent=False)
        with torch.no_grad():
            nn.init.normal_(self.inp.weight, 0.0, 0.001)
            self.inp.bias.zero_()
            nn.init.eye_(self.rec.weight)

    def rnn_weights(self) -> list[torch.Tensor]:
        return [self.inp.weight, self.rec.weight, self.inp.bias, self.zero_bias]


class LSTM(Fused):
    """torch LSTM (default init) + linear readout; gates i, f, g, o stacked in the weights' rows."""

    gates, cell_fn = 4, staticmethod(torch.lstm)

    def __init__(self, hidden: int):
        super().__init__()
        self.lstm, self.hidden = nn.LSTM(N_SYMBOLS, hidden, batch_first=True), hidden
        self.readout = nn.Linear(hidden, N_SYMBOLS)

    def rnn_weights(self) -> list[torch.Tensor]:
        return [self.lstm.weight_ih_l0, self.lstm.weight_hh_l0, self.lstm.bias_ih_l0, self.lstm.bias_hh_l0]


def stack_weights(nets: list[nn.Module]) -> list[torch.Tensor]:
    """The fused weights of K independent models of one architecture as ONE recurrent layer of K x hidden units:
    input weights and biases stacked per gate, recurrent weights block-diagonal per gate (no cross-talk)."""
    ws = [n.rnn_weights() for n in nets]
    if len(ws) == 1:
        return ws[0]
    g, h = nets[0].gates, nets[0].hidden
    rows = [torch.cat([w[i].reshape(g, h, -1) for w in ws], 1).reshape(g * len(ws) * h, -1) for i in (0, 2, 3)]
    w_hh = torch.cat([torch.block_diag(*[w[1][q * h:(q + 1) * h] for w in ws]) for q in range(g)])
    return [rows[0], w_hh, rows[1].reshape(-1), rows[2].reshape(-1)]


def stacked_forward(nets: list[nn.Module], x: torch.Tensor, keep_first: bool = False):
    """Logits (K, B, L, 10) of K models of one architecture on the same inputs, computed as one fused recurrent
    layer (identical to running each alone; tests/test_traveling_waves.py). keep_first (K = 1) also returns the
    state after the first input ([h] or [h, c]), which feeds both the first readout and the rest of the sequence."""
    head = nets[0]
    if not head.fused:
        outs = [n(x, keep_first) for n in nets]
        return torch.stack([o[0] for o in outs]), outs[0][1]
    xs = F.one_hot(x.long(), N_SYMBOLS).float()
    params, hidden, lstm = stack_weights(nets), head.hidden * len(nets), head.gates == 4
    zero = torch.zeros(1, xs.shape[0], hidden)

    def run(inputs, hx):
        res = head.cell_fn(inputs, hx, params, True, 1, 0.0, head.training, False, True)
        return res[0], res[2:]  # output (B, L, H); (c_n,) for the LSTM

    if keep_first:
        o1, c1 = run(xs[:, :1], (zero, zero) if lstm else zero)
        h1 = o1.transpose(0, 1)
        rest, _ = run(xs[:, 1:], (h1, c1[0]) if lstm else h1)
        out, first = torch.cat([o1, rest], 1), [o1] + list(c1)
    else:
        out, first = run(xs, (zero, zero) if lstm else zero)[0], None
    chunks = out.split(head.hidden, dim=-1)
    return torch.stack([n.readout(c) for n, c in zip(nets, chunks)]), first


def wrnn_params(cfg: Config) -> int:
    """Parameter count of the LBC wRNN (the size the baselines are matched to): V, u, W_b, readout."""
    c, s = cfg.channels, cfg.channels * cfg.cells
    return (N_SYMBOLS * s + s) + (c * c * cfg.kernel_size + c) + (s * c + c) + (s * N_SYMBOLS + N_SYMBOLS)


def rnn_params(h: int) -> int:
    return (N_SYMBOLS * h + h) + h * h + (h * N_SYMBOLS + N_SYMBOLS)


def lstm_params(h: int) -> int:
    return 4 * h * (N_SYMBOLS + h) + 8 * h + (h * N_SYMBOLS + N_SYMBOLS)


def matched_hidden(count, target: int) -> int:
    """The hidden size whose parameter count count(h) is closest to target."""
    h = 1
    while count(h + 1) <= target:
        h += 1
    return h if abs(count(h) - target) <= abs(count(h + 1) - target) else h + 1


def arch_of(cfg: Config, variant: str) -> dict:
    if variant == "wrnn":  # the SBC (boundary="attention") is the same variant with the other start boundary
        return {"kind": "wave", "channels": cfg.channels, "cells": cfg.cells, "kernel_size": cfg.kernel_size,
                "end_boundary": cfg.end_boundary, "boundary": cfg.boundary}
    if variant == "rnn":
        return {"kind": "rnn", "act": cfg.rnn_act, "hidden": cfg.rnn_hidden or matched_hidden(rnn_params, wrnn_params(cfg))}
    if variant == "lstm":
        return {"kind": "lstm", "hidden": cfg.lstm_hidden or matched_hidden(lstm_params, wrnn_params(cfg))}
    raise ValueError(f"traveling_waves: unknown variant {variant!r}; variants: {', '.join(VARIANTS)}")


def build_model(arch: dict) -> nn.Module:
    if arch["kind"] == "wave":
        return WaveRNN(arch["channels"], arch["cells"], arch["boundary"], arch["kernel_size"], arch["end_boundary"])
    return IRNN(arch["hidden"], arch["act"]) if arch["kind"] == "rnn" else LSTM(arch["hidden"])


# ------------------------------------------------------------------------------------------ train/eval
def sequence_losses(logits: torch.Tensor, y: torch.Tensor, n_items: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(cross-entropy over all positions, over the last n_items recall positions), per model for (K, B, L, 10)
    logits (shape (K,)) or scalars for (B, L, 10)."""
    y = y.long().expand(logits.shape[:-1])
    ce = F.cross_entropy(logits.reshape(-1, N_SYMBOLS), y.reshape(-1), reduction="none").view(y.shape)
    return ce.flatten(-2).mean(-1), ce[..., -n_items:].flatten(-2).mean(-1)


def recall_accuracy(logits: torch.Tensor, y: torch.Tensor, n_items: int) -> torch.Tensor:
    """Share of the n_items recalled digits predicted right (per model for (K, B, L, 10) logits)."""
    hit = logits[..., -n_items:, :].argmax(-1) == y[:, -n_items:].long()
    return hit.float().flatten(-2).mean(-1)


def grad_first_state(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """|| dL / dh_0 ||: the gradient of the mean cross-entropy w.r.t. the state after the first input."""
    with torch.enable_grad():
        logits, first = net(x, keep_first=True)
        loss = F.cross_entropy(logits.reshape(-1, N_SYMBOLS), y.long().reshape(-1))
        grads = torch.autograd.grad(loss, first, allow_unused=True)
    return float(torch.sqrt(sum((g ** 2).sum() for g in grads if g is not None)))


def fit_grid(cfg: Config, arch: dict, data: dict, t: int, init_seed: int, batch_seed: int, log) -> list[tuple[dict, float]]:
    """One fit per lr of cfg.lr_grid, all from the same initialisation on the same batches, trained side by side
    (one stacked forward; each model's loss, clipping and Adam state are its own, so each fit is the fit it would
    be alone). A fit stops (its lr set to 0) once the mean recall accuracy of its last converge_window training
    batches reaches converge_acc, else after cfg.steps. Returns [({state, steps}, validation recall
    accuracy)] in grid order."""
    torch.manual_seed(init_seed)
    base = build_model(arch)  # fits run in train mode throughout (no dropout / norm layers: eval mode is the same)
    nets = [copy.deepcopy(base) for _ in cfg.lr_grid]
    opt = torch.optim.Adam([{"params": list(n.parameters()), "lr": lr} for n, lr in zip(nets, cfg.lr_grid)], fused=True)
    gen = torch.Generator().manual_seed(batch_seed)
    recent = [deque(maxlen=cfg.converge_window) for _ in nets]
    history: list[list[float]] = [[] for _ in nets]  # training recall accuracy per batch (the plateau test)
    stopped: list[int | None] = [None] * len(nets)
    for step in range(cfg.steps):
        x, y = copy_batch(random_digits(cfg.batch_size, cfg.n_items, gen), t)
        active = [k for k in range(len(nets)) if stopped[k] is None]  # stopped fits (lr 0) leave the forward
        logits = stacked_forward([nets[k] for k in active], x)[0]
        losses = sequence_losses(logits, y, cfg.n_items)[0]
        opt.zero_grad(set_to_none=True)
        losses.sum().backward()
        for k in active:
            if cfg.clip_norm:
                torch.nn.utils.clip_grad_norm_(nets[k].parameters(), cfg.clip_norm)
        opt.step()
        accs = recall_accuracy(logits.detach(), y, cfg.n_items).tolist()
        for j, k in enumerate(active):
            recent[k].append(accs[j])
            history[k].append(accs[j])
            if len(recent[k]) == cfg.converge_window and sum(recent[k]) / cfg.converge_window >= cfg.converge_acc:
                stopped[k], opt.param_groups[k]["lr"] = step + 1, 0.0
        if log is not None and step % cfg.log_every == 0:
            log(step, **{f"train/{name}_T{t}_lr{k}": v for j, k in enumerate(active) for name, v in
                         (("loss", float(losses[j].detach())), ("recall_acc", sum(recent[k]) / max(1, len(recent[k]))))})
        if all(s is not None for s in stopped):
            break
    val = data["val"][str(t)]
    with torch.no_grad():
        scores = recall_accuracy(stacked_forward(nets, val["x"])[0], val["y"], cfg.n_items).tolist()
    return [({"state": {key: v.detach().clone() for key, v in n.state_dict().items()}, "steps": float(stopped[k] or step + 1),
              "plateau_gain": 0.0 if stopped[k] else plateau_gain(history[k], cfg.plateau_window)},
             scores[k]) for k, n in enumerate(nets)]


def plateau_gain(history: list[float], window: int) -> float:
    """Mean of the last `window` values minus the mean of the `window` before (fewer when the run is short: the two
    halves of what there is); 0 with fewer than 2 values."""
    w = min(window, len(history) // 2)
    if w < 1:
        return 0.0
    return sum(history[-w:]) / w - sum(history[-2 * w:-w]) / w


@torch.no_grad()
def wave_stats(net: nn.Module, x: torch.Tensor) -> tuple[float, float]:
    """(wave_corr, standing_corr) of a WaveRNN's hidden states on inputs x (B, L): the Pearson correlation over
    sequences, steps, channels and cells of h_{t+1}[c, i+1] with h_t[c, i] (activity moving one cell per step), and
    of h_{t+1}[c, i] with h_t[c, i] (activity staying put). Runs the convolution steps (equal to the fused LBC)."""
    b, length = x.shape
    vx = net.inp(F.one_hot(x.long(), N_SYMBOLS).float()).view(b, length, net.c, net.n)
    h, states = torch.zeros(b, net.c, net.n), []
    for t in range(length):
        h = net.step(h, vx[:, t])
        states.append(h)
    H = torch.stack(states, 1).double()  # (B, L, C, N)

    def corr(a: torch.Tensor, c: torch.Tensor) -> float:
        a, c = a.flatten() - a.mean(), c.flatten() - c.mean()
        den = float(a.norm() * c.norm())
        return float(a @ c) / den if den > 0 else 0.0

    return corr(H[:, :-1, :, :-1], H[:, 1:, :, 1:]), corr(H[:, :-1], H[:, 1:])


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    arch = arch_of(cfg, variant)
    model = {"variant": variant, "arch": arch, "states": {}, "grad_h0_init": {}, "tuning": {}, "steps_run": {}, "plateau_gain": {}}
    for di, t in enumerate(cfg.delays):
        init_seed, batch_seed = seed * 1009 + di, seed * 7919 + t
        torch.manual_seed(init_seed)
        test = data["test"][str(t)]
        model["grad_h0_init"][str(t)] = grad_first_state(build_model(arch), test["x"][: cfg.grad_batch], test["y"][: cfg.grad_batch])
        fits = fit_grid(cfg, arch, data, t, init_seed, batch_seed, log)
        best, info = tune(cfg.lr_grid, lambda lr: fits[cfg.lr_grid.index(lr)], higher=True)
        model["states"][str(t)], model["steps_run"][str(t)], model["tuning"][str(t)] = best["state"], best["steps"], info
        model["plateau_gain"][str(t)] = best["plateau_gain"]
    model["params"] = count_params(build_model(arch))
    return model


def compress(cfg: Config, model: dict, data: dict, variant: str, seed: int) -> dict:
    """Global magnitude pruning of every weight matrix (biases kept) of each delay's model, at cfg.sparsities."""
    per_delay = {t: magnitude_levels(state, cfg.sparsities) for t, state in model["states"].items()}
    return {level_name(s): {**model, "states": {t: per_delay[t][level_name(s)] for t in per_delay}} for s in cfg.sparsities}


def evaluate(cfg: Config, model: dict, data: dict) -> dict[str, float]:
    out: dict[str, float] = {}
    for t in cfg.delays:
        net = build_model(model["arch"])
        net.load_state_dict(model["states"][str(t)])
        net.eval()
        test = data["test"][str(t)]
        with torch.no_grad():
            logits, _ = net(test["x"])
            full, recall = sequence_losses(logits, test["y"], cfg.n_items)
        out[f"loss@{t}"], out[f"recall_loss@{t}"] = float(full), float(recall)
        out[f"recall_acc@{t}"] = float(recall_accuracy(logits, test["y"], cfg.n_items))
        out[f"grad_h0@{t}"] = grad_first_state(net, test["x"][: cfg.grad_batch], test["y"][: cfg.grad_batch])
        out[f"grad_h0_init@{t}"] = float(model["grad_h0_init"][str(t)])
        out[f"steps_run@{t}"] = float(model["steps_run"][str(t)])
        gain = float(model.get("plateau_gain", {}).get(str(t), 0.0))
        out[f"plateau_gain@{t}"] = gain
        out[f"steps_grid_edge@{t}"] = float(out[f"steps_run@{t}"] >= cfg.steps and gain > PLATEAU_GAIN)
        if isinstance(net, WaveRNN):
            out[f"wave_corr@{t}"], out[f"standing_corr@{t}"] = wave_stats(net, test["x"])
        out[f"tuned_lr@{t}"], out[f"grid_edge@{t}"] = (float(model["tuning"][str(t)][k]) for k in ("tuned_lr", "grid_edge"))
    tmax = max(cfg.delays)
    out["recall_acc"], out["grid_edge"] = out[f"recall_acc@{tmax}"], out[f"grid_edge@{tmax}"]
    out["steps_grid_edge"] = out[f"steps_grid_edge@{tmax}"]
    out["params"], out["nonzero_params"] = float(model["params"]), float(count_nonzero(model["states"][str(tmax)]))
    return out


def comparisons(cfg: Config) -> list[Comparison]:
    t = max(cfg.delays)
    acc = f"recall_acc@{t}"

    def above_chance(v: str) -> Gate:
        return Gate(f"{v.upper()} recalls above chance (> {ABOVE_CHANCE}; chance 1/8)", variant=v, metric=acc, above=ABOVE_CHANCE)

    def inside(v: str) -> Gate:
        return Gate(f"{v.upper()}: best lr inside the grid (edge in < half the seeds)", variant=v, metric=f"grid_edge@{t}", below=0.5)

    def improving(v: str) -> Gate:
        return Gate(f"{v.upper()}: not still improving when the {cfg.steps}-step budget stopped it (in < half the seeds; "
                    f"still improving = unconverged and training recall +{PLATEAU_GAIN} over its last {cfg.plateau_window} "
                    f"batches)", variant=v, metric=f"steps_grid_edge@{t}", below=0.5)

    wave = Gate(f"the trained wave-RNN's hidden activity travels: correlation of h_t+1[c, i+1] with h_t[c, i] on the test "
                f"sequences > {WAVE_MIN}", variant="wrnn", metric=f"wave_corr@{t}", above=WAVE_MIN, kind="mechanism")
    where = f"delay T={t} > {cfg.cells} cells" if t > cfg.cells else f"delay T={t}"
    level = level_name(cfg.sparsities[0])
    return [
        Comparison(acc, "wrnn", "rnn", better="higher", role="headline",
                   gates=(above_chance("rnn"), inside("wrnn"), inside("rnn"), improving("wrnn"), improving("rnn"), wave),
                   text=f"wave-RNN (linear boundary) recalls the copy-task digits more accurately than the iRNN at "
                        f"{where}: it learns longer histories",
                   refuted_if=f"the paired 95% interval of recall accuracy at T={t} (wRNN - iRNN) lies below 0: the iRNN "
                              f"recalls better, with the wRNN's hidden state measured travelling (wave_corr > {WAVE_MIN}) and "
                              f"the wRNN neither on its lr grid's edge nor still improving at the step cap (the iRNN on "
                              f"either edge cannot block this verdict)"),
        Comparison(acc, "wrnn", "rnn", better="higher", role="secondary",
                   gates=(above_chance("rnn"), inside("wrnn"), inside("rnn"), wave),
                   text=f"at an equal budget of {cfg.steps} Adam steps (each fit stops earlier only at convergence), the "
                        f"wave-RNN recalls more accurately than the iRNN at {where}: it learns faster"),
        Comparison(acc, "wrnn", "lstm", better="higher", role="secondary",
                   gates=(above_chance("lstm"), inside("wrnn"), inside("lstm"), improving("wrnn"), improving("lstm")),
                   text=f"wave-RNN recalls more accurately than the LSTM at {where}"),
        Comparison(f"grad_h0_init@{t}", "wrnn", "rnn", better="higher", role="secondary",
                   text=f"at initialisation the loss gradient reaching the first hidden state (T={t}) is larger for the "
                        f"wave-RNN than for the iRNN (no diminishing gradient)"),
        Comparison(acc, "wrnn", "rnn", better="higher", role="control", stage="compressed", level=level,
                   gates=(above_chance("rnn"),),
                   text=f"after {float(level):.0%} global magnitude pruning the wave-RNN still recalls more accurately "
                        f"than the pruned iRNN (T={t})"),
        Comparison(f"wave_corr@{t}", "wrnn", "", role="fact",
                   text=f"travelling-wave correlation of the trained wave-RNN's hidden states (h_t+1[c, i+1] vs h_t[c, i]; "
                        f"1 = a pure one-cell shift), T={t}"),
        Comparison(f"standing_corr@{t}", "wrnn", "", role="fact",
                   text=f"standing correlation of the same states (h_t+1[c, i] vs h_t[c, i]), T={t}"),
        Comparison("params", "wrnn", "rnn", role="fact", text="parameters: wave-RNN vs iRNN (matched by construction)"),
        Comparison("params", "wrnn", "lstm", role="fact", text="parameters: wave-RNN vs LSTM (matched by construction)"),
    ]


SPEC = register_paper(PaperSpec(
    id="traveling_waves",
    title="Hidden Traveling Waves bind Working Memory Variables in Recurrent Neural Networks (TWM linear boundary "
          "condition on the wave-RNN of Traveling Waves Encode the Recent Past and Enhance Sequence Learning)",
    claim="wave-RNN learns longer histories",
    Config=Config, variants=VARIANTS, prepare=prepare, train=train, compress=compress, evaluate=evaluate, comparisons=comparisons,
    resources=(),
    data="synthetic by nature: the copy task (M random digits 1..8, a marker at T-1, recall of the digits after a lag of "
         "T steps), one fixed validation and test set per delay, fresh training batches per step",
    substitutions="M = 3 digits (paper 10); one delay T = 12, twice the 6-cell lattice, with the open end (TWM), so a "
                  "digit survives only if the learned linear start boundary re-injects it (paper T up to 500 on 100 "
                  "cells, Keller's code periodic); 6 channels (~1.1k params; paper 6 x 100, ~12.7k); iRNN / LSTM hidden "
                  "sizes matched to the wRNN's parameter count; every model fits the same 4-value lr grid (clip 1 for "
                  "all; Keller also sweeps clip) until its training recall accuracy converges or 1200 Adam steps "
                  "(paper 60k; a fit still improving at the cap is a directional step-budget edge gate), lr chosen on a "
                  "validation set; the "
                  "self-attention boundary is implemented (Config.boundary) but not run by default (the abstract "
                  "makes no performance claim for it, and its step-by-step loop costs ~5x the fused models); no "
                  "history-dependent dynamical-system or sequential-image tasks, no GRU",
    compression="global magnitude pruning of every weight matrix (input, recurrent/kernel/boundary, readout) at cfg.sparsities",
    fidelity="paper-text", weight=1,
))

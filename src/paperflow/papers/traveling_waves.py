"""Traveling waves: "Traveling Waves Encode the Recent Past and Enhance Sequence Learning", T. Anderson Keller,
Lyle Muller, Terrence Sejnowski, Max Welling (ICLR 2024; the wave-RNN, wRNN), together with the boundary-condition
view of the catalog entry's paper "Hidden Traveling Waves bind Working Memory Variables in Recurrent Neural
Networks", Arjun Karuvally, Terrence Sejnowski, Hava Siegelmann (ICML 2024; Traveling Wave based Working Memory,
TWM, with a Linear Boundary Condition LBC and a Self-attention Boundary Condition SBC). The catalog id
`traveling_waves` names the ICML paper's claim ("wave-RNN learns longer histories"; "linear and attention-driven
boundary conditions"); the lead's brief names Keller et al.'s wRNN. Both are implemented as one lattice model.
Official code: Keller et al., https://github.com/akandykeller/Wave_RNNs (copy/conv_rnn_model.py::RNN_Cell with
init='fwd', solo_init='yes'; copy/rnn_model.py::RNN_Cell for the iRNN; copy/utils.py::get_batch for the copy
task; copy/copy_task.py for the loss and optimiser; copy/copy_sweep_*.yml for sizes). No public code was found
for Karuvally et al.; the LBC/SBC boundary functions follow the paper's text (Sec. 3, Thm 3.1, Sec. 4).

What is implemented.
Hidden state: a 1-D lattice h_t in R^{C x N} (C channels x N cells; Keller: n_ch x n_hid). One step (Keller's
wRNN, Eq. 2 of the ICLR paper / RNN_Cell.forward):
    h_{t+1} = relu( u (*) h_t + V x_{t+1} + e_0 f(h_t) )
  - u (*) h: a C -> C 1-D convolution over the cells, kernel size k = 3, initialised to a shift by exactly one
    cell (Keller's init='fwd': a Dirac kernel rolled by one tap; here the tap is the left neighbour, so waves move
    from cell 0 towards cell N-1: (u (*) h)[:, i] = h[:, i-1]); trainable, bias initialised 0.
  - V x: input projection n_in -> C*N, Keller's solo_init: zero except the cell-0 rows of every channel, which are
    1 (the input is injected at the start boundary; V stays trainable and may write anywhere later).
  - end boundary (Config.end_boundary): "open" (Karuvally's TWM: what reaches cell N-1 leaves the lattice, zero
    padding) or "periodic" (Keller's circular padding: it re-enters at cell 0).
  - start boundary f (added at cell 0 only; e_0 is the indicator of cell 0), the two TWM cases:
      wrnn       LBC  f(h) = W_b vec(h) + b_b       a linear operator of the whole substrate (Karuvally Sec. 4.1;
                                                    e.g. the generalised Fibonacci series of Thm 3.1 is
                                                    f(h) = sum_i h[:, i]), W_b initialised 0.
      wrnn_attn  SBC  f(h) = sum_i softmax_i( <W_q h[:, 0], W_k h[:, i]> / sqrt(C) ) W_v h[:, i]
                                                    self-attention whose query is the newest column and whose
                                                    keys/values are all columns of the substrate (Karuvally
                                                    Sec. 4.2: the autoregressive loop of an attention-only
                                                    transformer with the substrate as context), W_v initialised 0.
    With f = 0 (both at initialisation) and zero input the lattice is a pure delay line: a non-negative state
    translates by exactly one cell per step (tests/test_traveling_waves.py).
Baselines (Keller's copy-task baselines):
  - rnn:  iRNN, h_{t+1} = relu(W_x x + W_h h + b), W_h = I (Le et al. 2015; Keller's init='eye'), W_x ~ N(0, 1e-3)
          as rnn_model.py (Config.rnn_act = "tanh" gives a tanh RNN with the same identity init).
  - lstm: torch LSTMCell (default init) + linear readout.
Sizes: the paper compares at (roughly) matched parameter counts (its iRNN with n_hid=100 vs the wRNN with
n_hid=100, n_ch=6; it also reports a neuron-matched iRNN, n_hid=625). Here rnn and lstm hidden sizes are chosen
so that their parameter count matches the wRNN (LBC)'s (Config.rnn_hidden / lstm_hidden = 0: auto); the
parameter count of every model is reported ("params").

Task (Keller Sec. 4 / copy/utils.py::get_batch): the copy task with delay T. A sequence of length T + M: M digits
in 1..8 at positions 0..M-1, blanks (0), the marker 9 at position T - 1; the target is 0 everywhere except the last
M positions, which must reproduce the digits (lag exactly T). Inputs one-hot (10 symbols), 10 output classes,
cross-entropy over every position (Keller's objective, only_last=False; we drop the code's extra division by the
batch size), Adam, constant lr, gradient-norm clipping (Keller sweeps clip in {0, 1, 10}). One model per delay T
(as the paper trains one model per T). Data are synthetic by nature (generated digits); the test set of each delay
is fixed by data_seed, training batches are drawn from the run's seed.

Metrics (evaluate, per delay T in cfg.delays): loss@T (test cross-entropy over all positions), recall_loss@T
(over the M recall positions; log 8 = 2.08 means no memory of the digits), recall_acc@T, grad_h0@T (the norm of
dL/dh_0, the gradient of the test loss w.r.t. the hidden state after the first input; for the LSTM the state is
(h, c)) of the trained model, grad_h0_init@T (the same at initialisation: the "diminishing gradient" measure),
grad_rec_early@T (mean norm of the recurrent weights' gradient -- conv kernel + boundary for the wRNNs, W_h for
the iRNN, weight_hh for the LSTM -- over the first grad_steps training steps, before clipping); loss = loss at the
longest delay; params.

Substitutions for laptop scale (all recorded in PaperSpec.substitutions): M = 5 digits instead of 10; delays
T in {10, 20, 40} instead of {10, 20, 50, 100, 500}; a 4 x 48 lattice (C x N) instead of 6 x 100 (~4.9k
parameters instead of ~12.7k); a few hundred Adam steps per delay instead of 60k and one shared lr (no per-model
lr/clip sweep as the paper's grid); open end boundary by default (Karuvally's TWM; Keller's code is periodic,
available as end_boundary="periodic"); Karuvally's history-dependent dynamical-system tasks and the sequential
image tasks are not run; no GRU baseline.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..loop import train_loop
from ..measure import count_params
from ..registry import register_paper
from ..spec import Comparison, PaperSpec, check

VARIANTS = ("wrnn", "wrnn_attn", "rnn", "lstm")
N_SYMBOLS = 10  # 0 blank, 1..8 digits, 9 marker (copy/utils.py::get_batch)
BLANK, MARKER = 0, 9


@dataclass(frozen=True)
class Config:
    # task
    n_items: int = 5  # M digits to remember (Keller: 10)
    delays: tuple = (10, 20, 40)  # T: lag between seeing digit k and recalling it; one model per delay
    n_test: int = 512  # test sequences per delay (fixed by data_seed)
    data_seed: int = 0
    # wave lattice
    channels: int = 4  # C (Keller: n_ch = 6)
    cells: int = 48  # N (Keller: n_hid = 100)
    kernel_size: int = 3
    end_boundary: str = "open"  # "open" (TWM) | "periodic" (Keller's circular padding)
    # baselines: 0 = hidden size matched to the wRNN (LBC) parameter count
    rnn_hidden: int = 0
    lstm_hidden: int = 0
    rnn_act: str = "relu"  # iRNN (relu + identity init); "tanh" for a tanh RNN with identity init
    # optimisation (Adam, constant lr, shared by all variants)
    steps: int = 400  # per delay
    batch_size: int = 64
    lr: float = 3e-3
    clip_norm: float = 1.0  # 0 = no clipping
    grad_steps: int = 20  # first steps averaged for grad_rec_early
    grad_batch: int = 128  # test sequences used for grad_h0
    log_every: int = 20

    def __post_init__(self) -> None:
        object.__setattr__(self, "delays", tuple(int(t) for t in self.delays))
        check(self.n_items >= 1, f"n_items must be >= 1, got {self.n_items}")
        check(len(self.delays) >= 1, "delays must list at least one delay T")
        check(list(self.delays) == sorted(set(self.delays)), f"delays must be strictly increasing, got {self.delays}")
        check(min(self.delays) > self.n_items,
              f"every delay must exceed n_items = {self.n_items} (the marker sits at T - 1, after the digits); "
              f"got delays {self.delays}")
        check(self.n_test >= 1, f"n_test must be >= 1, got {self.n_test}")
        check(self.channels >= 1 and self.cells >= 2, f"channels must be >= 1 and cells >= 2, got {self.channels}, {self.cells}")
        check(self.kernel_size >= 3 and self.kernel_size % 2 == 1, f"kernel_size must be odd and >= 3, got {self.kernel_size}")
        check(self.end_boundary in ("open", "periodic"), f"end_boundary must be open|periodic, got {self.end_boundary!r}")
        check(self.rnn_hidden >= 0 and self.lstm_hidden >= 0, "rnn_hidden and lstm_hidden must be >= 0 (0 = match wRNN params)")
        check(self.rnn_act in ("relu", "tanh"), f"rnn_act must be relu|tanh, got {self.rnn_act!r}")
        check(self.steps >= 1 and self.batch_size >= 1, f"steps and batch_size must be >= 1, got {self.steps}, {self.batch_size}")
        check(self.lr > 0, f"lr must be > 0, got {self.lr}")
        check(self.clip_norm >= 0, f"clip_norm must be >= 0 (0 = no clipping), got {self.clip_norm}")
        check(1 <= self.grad_steps <= self.steps, f"grad_steps must be in [1, steps = {self.steps}], got {self.grad_steps}")
        check(1 <= self.grad_batch <= self.n_test, f"grad_batch must be in [1, n_test = {self.n_test}], got {self.grad_batch}")
        check(self.log_every >= 1, f"log_every must be >= 1, got {self.log_every}")


# ------------------------------------------------------------------------------------------------ data
def copy_batch(digits: torch.Tensor, delay: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The copy task (copy/utils.py::get_batch): digits (B, M) in 1..8 -> inputs x, targets y, both (B, T + M).

    x: digits at 0..M-1, blanks, the marker at T - 1; y: blanks except y[:, T + k] = digit k (lag T)."""
    b, m = digits.shape
    if delay <= m:
        raise ValueError(f"copy_batch: delay {delay} must exceed the number of digits {m}")
    x = torch.full((b, delay + m), BLANK, dtype=torch.long)
    x[:, :m] = digits
    x[:, delay - 1] = MARKER
    y = torch.full((b, delay + m), BLANK, dtype=torch.long)
    y[:, delay:] = digits
    return x, y


def random_digits(n: int, m: int, generator: torch.Generator) -> torch.Tensor:
    return torch.randint(1, 9, (n, m), generator=generator)


def prepare(cfg: Config, res) -> dict:
    """Synthetic test sets, one per delay (fixed by data_seed); no resources."""
    out = {"delays": list(cfg.delays), "test": {}}
    for t in cfg.delays:
        g = torch.Generator().manual_seed(cfg.data_seed * 100_003 + t)
        x, y = copy_batch(random_digits(cfg.n_test, cfg.n_items, g), t)
        out["test"][str(t)] = {"x": x.to(torch.uint8), "y": y.to(torch.uint8)}
    return out


# ----------------------------------------------------------------------------------------------- models
class WaveRNN(nn.Module):
    """wRNN on a C x N lattice with a start-boundary function f (see the module docstring)."""

    def __init__(self, channels: int, cells: int, boundary: str = "linear", kernel_size: int = 3,
                 end_boundary: str = "open", n_in: int = N_SYMBOLS, n_out: int = N_SYMBOLS):
        super().__init__()
        if boundary not in ("linear", "attention"):
            raise ValueError(f"WaveRNN: boundary must be linear|attention, got {boundary!r}")
        self.c, self.n, self.k = channels, cells, kernel_size
        self.boundary, self.end_boundary = boundary, end_boundary
        self.inp = nn.Linear(n_in, channels * cells)  # V
        self.kernel = nn.Parameter(torch.zeros(channels, channels, kernel_size))  # u
        self.kernel_bias = nn.Parameter(torch.zeros(channels))
        if boundary == "linear":  # LBC: f(h) = W_b vec(h) + b_b
            self.w_b = nn.Linear(channels * cells, channels)
        else:  # SBC: self-attention over the substrate's columns, query = newest column
            self.w_q = nn.Linear(channels, channels, bias=False)
            self.w_k = nn.Linear(channels, channels, bias=False)
            self.w_v = nn.Linear(channels, channels, bias=False)
        self.readout = nn.Linear(channels * cells, n_out)
        self.reset_wave()

    @torch.no_grad()
    def reset_wave(self) -> None:
        """Keller's init='fwd' (shift by one cell) and solo_init='yes' (input only into cell 0); f = 0."""
        self.kernel.zero_()
        mid = self.k // 2
        for ch in range(self.c):
            self.kernel[ch, ch, mid - 1] = 1.0  # (u (*) h)[:, i] = h[:, i - 1]: waves move towards cell N-1
        self.kernel_bias.zero_()
        self.inp.weight.zero_()
        self.inp.bias.zero_()
        self.inp.weight.view(self.c, self.n, -1)[:, 0] = 1.0
        if self.boundary == "linear":
            self.w_b.weight.zero_()
            self.w_b.bias.zero_()
        else:
            self.w_v.weight.zero_()

    def recurrent_parameters(self) -> list[nn.Parameter]:
        extra = [self.w_b.weight] if self.boundary == "linear" else [self.w_q.weight, self.w_k.weight, self.w_v.weight]
        return [self.kernel] + extra

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
        f = self.start_boundary(h)
        pre = torch.cat([pre[:, :, :1] + f[:, :, None], pre[:, :, 1:]], dim=2)
        return torch.relu(pre)

    def forward(self, x: torch.Tensor, keep_first: bool = False):
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


class IRNN(nn.Module):
    """Keller's RNN baseline (copy/rnn_model.py, init='eye'): h' = act(W_x x + W_h h + b), W_h = I."""

    def __init__(self, hidden: int, act: str = "relu", n_in: int = N_SYMBOLS, n_out: int = N_SYMBOLS):
        super().__init__()
        self.act = torch.relu if act == "relu" else torch.tanh
        self.inp = nn.Linear(n_in, hidden)
        self.rec = nn.Linear(hidden, hidden, bias=False)
        self.readout = nn.Linear(hidden, n_out)
        self.hidden = hidden
        with torch.no_grad():
            nn.init.normal_(self.inp.weight, 0.0, 0.001)
            self.inp.bias.zero_()
            nn.init.eye_(self.rec.weight)

    def recurrent_parameters(self) -> list[nn.Parameter]:
        return [self.rec.weight]

    def forward(self, x: torch.Tensor, keep_first: bool = False):
        b, length = x.shape
        wx = self.inp(F.one_hot(x.long(), N_SYMBOLS).float())
        h = torch.zeros(b, self.hidden)
        states, first = [], None
        for t in range(length):
            h = self.act(wx[:, t] + self.rec(h))
            if t == 0 and keep_first:
                first = [h]
            states.append(h)
        return self.readout(torch.stack(states, 1)), first


class LSTM(nn.Module):
    def __init__(self, hidden: int, n_in: int = N_SYMBOLS, n_out: int = N_SYMBOLS):
        super().__init__()
        self.cell = nn.LSTMCell(n_in, hidden)
        self.readout = nn.Linear(hidden, n_out)
        self.hidden = hidden

    def recurrent_parameters(self) -> list[nn.Parameter]:
        return [self.cell.weight_hh]

    def forward(self, x: torch.Tensor, keep_first: bool = False):
        b, length = x.shape
        xs = F.one_hot(x.long(), N_SYMBOLS).float()
        h, c = torch.zeros(b, self.hidden), torch.zeros(b, self.hidden)
        states, first = [], None
        for t in range(length):
            h, c = self.cell(xs[:, t], (h, c))
            if t == 0 and keep_first:
                first = [h, c]
            states.append(h)
        return self.readout(torch.stack(states, 1)), first


def wrnn_params(cfg: Config) -> int:
    """Parameter count of the LBC wRNN (the size the baselines are matched to)."""
    s = cfg.channels * cfg.cells
    return (N_SYMBOLS * s + s) + (cfg.channels ** 2 * cfg.kernel_size + cfg.channels) + (s * cfg.channels + cfg.channels) \
        + (s * N_SYMBOLS + N_SYMBOLS)


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
    if variant in ("wrnn", "wrnn_attn"):
        return {"kind": "wave", "channels": cfg.channels, "cells": cfg.cells, "kernel_size": cfg.kernel_size,
                "end_boundary": cfg.end_boundary, "boundary": "linear" if variant == "wrnn" else "attention"}
    if variant == "rnn":
        return {"kind": "rnn", "act": cfg.rnn_act, "hidden": cfg.rnn_hidden or matched_hidden(rnn_params, wrnn_params(cfg))}
    if variant == "lstm":
        return {"kind": "lstm", "hidden": cfg.lstm_hidden or matched_hidden(lstm_params, wrnn_params(cfg))}
    raise ValueError(f"traveling_waves: unknown variant {variant!r}; variants: {', '.join(VARIANTS)}")


def build_model(arch: dict) -> nn.Module:
    if arch["kind"] == "wave":
        return WaveRNN(arch["channels"], arch["cells"], arch["boundary"], arch["kernel_size"], arch["end_boundary"])
    if arch["kind"] == "rnn":
        return IRNN(arch["hidden"], arch["act"])
    return LSTM(arch["hidden"])


# ------------------------------------------------------------------------------------------ train/eval
def sequence_losses(logits: torch.Tensor, y: torch.Tensor, n_items: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(cross-entropy over all positions, over the last n_items recall positions)."""
    y = y.long()
    full = F.cross_entropy(logits.reshape(-1, N_SYMBOLS), y.reshape(-1))
    recall = F.cross_entropy(logits[:, -n_items:].reshape(-1, N_SYMBOLS), y[:, -n_items:].reshape(-1))
    return full, recall


def grad_first_state(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """|| dL / dh_0 ||: the gradient of the mean cross-entropy w.r.t. the state after the first input."""
    with torch.enable_grad():
        logits, first = net(x, keep_first=True)
        loss = F.cross_entropy(logits.reshape(-1, N_SYMBOLS), y.long().reshape(-1))
        grads = torch.autograd.grad(loss, first, allow_unused=True)
    return float(torch.sqrt(sum((g ** 2).sum() for g in grads if g is not None)))


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    arch = arch_of(cfg, variant)
    model = {"variant": variant, "arch": arch, "states": {}, "grad_h0_init": {}, "grad_rec_early": {}}
    for di, t in enumerate(cfg.delays):
        torch.manual_seed(seed * 1009 + di)
        net = build_model(arch)
        test = data["test"][str(t)]
        gx, gy = test["x"][: cfg.grad_batch], test["y"][: cfg.grad_batch]
        model["grad_h0_init"][str(t)] = grad_first_state(net, gx, gy)
        rec_norms: list[float] = []
        for p in net.recurrent_parameters():  # squared norm of each recurrent tensor's raw gradient
            p.register_hook(lambda g: rec_norms.append(float((g ** 2).sum())) or None)
        n_rec = len(net.recurrent_parameters())
        gen = torch.Generator().manual_seed(seed * 7919 + t)

        def batch_fn(step: int):
            return copy_batch(random_digits(cfg.batch_size, cfg.n_items, gen), t)

        def loss_fn(batch):
            x, y = batch
            logits, _ = net(x)
            return sequence_losses(logits, y, cfg.n_items)[0]

        def log_t(step: int, **metrics: float) -> None:
            if log is not None:
                log(step, **{f"{k}_T{t}": v for k, v in metrics.items()})

        opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
        train_loop(list(net.parameters()), batch_fn, loss_fn, opt, cfg.steps, log=log_t, log_every=cfg.log_every,
                   clip_norm=cfg.clip_norm or None, modules=[net])
        per_step = [math.sqrt(sum(rec_norms[i : i + n_rec])) for i in range(0, n_rec * cfg.grad_steps, n_rec)]
        model["grad_rec_early"][str(t)] = float(sum(per_step) / len(per_step))
        model["states"][str(t)] = {k: v.detach().clone() for k, v in net.state_dict().items()}
    model["params"] = count_params(net)
    return model


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
            acc = (logits[:, -cfg.n_items:].argmax(-1) == test["y"][:, -cfg.n_items:].long()).float().mean()
        out[f"loss@{t}"] = float(full)
        out[f"recall_loss@{t}"] = float(recall)
        out[f"recall_acc@{t}"] = float(acc)
        out[f"grad_h0@{t}"] = grad_first_state(net, test["x"][: cfg.grad_batch], test["y"][: cfg.grad_batch])
        out[f"grad_h0_init@{t}"] = float(model["grad_h0_init"][str(t)])
        out[f"grad_rec_early@{t}"] = float(model["grad_rec_early"][str(t)])
    out["loss"] = out[f"loss@{max(cfg.delays)}"]
    out["params"] = float(model["params"])
    return out


def comparisons(cfg: Config) -> list[Comparison]:
    tmax = max(cfg.delays)
    rows = [Comparison(f"loss@{tmax}", "wrnn", b, better="lower",
                       text=f"wRNN (linear boundary) has lower copy-task test loss than the {b.upper()} at the longest delay T={tmax}")
            for b in ("rnn", "lstm")]
    rows += [Comparison(f"loss@{tmax}", "wrnn_attn", b, better="lower",
                        text=f"wRNN (attention boundary) has lower copy-task test loss than the {b.upper()} at T={tmax}")
             for b in ("rnn", "lstm")]
    for t in cfg.delays[:-1]:
        rows += [Comparison(f"loss@{t}", "wrnn", b, better="lower",
                            text=f"wRNN (linear boundary) has lower copy-task test loss than the {b.upper()} at T={t}")
                 for b in ("rnn", "lstm")]
    rows += [Comparison(f"grad_h0_init@{tmax}", "wrnn", b, better="higher",
                        text=f"at initialisation the loss gradient reaching the first hidden state (T={tmax}) is larger "
                             f"for the wRNN than for the {b.upper()} (less diminishing gradient)")
             for b in ("rnn", "lstm")]
    return rows


SPEC = register_paper(PaperSpec(
    id="traveling_waves",
    title="Traveling Waves Encode the Recent Past and Enhance Sequence Learning (wave-RNN; with the TWM linear and "
          "self-attention boundary conditions of Hidden Traveling Waves bind Working Memory Variables in RNNs)",
    claim="wave-RNN learns longer histories",
    Config=Config,
    variants=VARIANTS,
    prepare=prepare, train=train, compress=None, evaluate=evaluate, comparisons=comparisons,
    resources=(),
    data="synthetic by nature: the copy task generated here (M random digits 1..8, a marker at T-1, recall of the "
         "digits after a lag of T steps), one fixed test set per delay T, fresh training batches per step",
    substitutions="M = 5 digits (paper 10), delays T in {10, 20, 40} (paper up to 500), a 4-channel x 48-cell lattice "
                  "(~4.9k params; paper 6 x 100, ~12.7k), iRNN / LSTM hidden sizes matched to the wRNN's parameter "
                  "count; a few hundred Adam steps per delay (paper 60k) with one shared lr and clip 1.0 (no per-model "
                  "sweep); open end boundary (TWM) instead of Keller's circular padding; the linear and self-attention "
                  "start boundaries follow Karuvally et al.'s text (no public code); no history-dependent "
                  "dynamical-system or sequential-image tasks, no GRU",
    compression="none (the paper has no compression stage)",
    weight=1,
))

"""Spiking building blocks shared by the spiking papers (SpikeZIP-TF, STATA).

Two families:

1. Trained SNNs with surrogate gradients (STATA; Spikformer-shaped):
   * multi-step LIF neuron (spikingjelly's LIFNode, decay_input=True, v_reset=0, detach_reset=True):
         H_t = V_{t-1} + (X_t - V_{t-1}) / tau,   S_t = Theta(H_t - V_th),   V_t = H_t (1 - S_t)   (hard reset)
     with the sigmoid surrogate dS/dH = a sig(a (H - V_th)) (1 - sig(a (H - V_th)));
   * SpikeLinear: Linear (no bias) + BatchNorm applied to spikes (T, B, N, D), counting synaptic ops;
   * SpikformerBlock: spiking self-attention (Spikformer, Zhou et al. ICLR 2023, Eq. 9-12) with the LIF at the
     start of each branch (membrane shortcut, as Spike-driven Transformer / Spikformer-V2):
         s = LIF(x); Q, K, V = LIF(BN(s W_q)), LIF(BN(s W_k)), LIF(BN(s W_v))          (binary)
         SSA = LIF_{attn_v_th}(Q K^T V * scale)  (no softmax; computed as Q (K^T V), O(N d^2))
         x <- x + BN(SSA W_o);  x <- x + BN(LIF(BN(LIF(x) W_1)) W_2)
   * SynOpCounter: synaptic operations (input spikes x fan-out) and tokens, counted when switched on.

2. ANN-to-SNN conversion by spike-equivalent neurons (SpikeZIP-TF, official spike_quan_layer.py):
   * Quantizer (MyQuan, LSQ): Q(x) = clamp(floor(x/s + 1/2), lo, hi) * s with a learnable step s, straight-
     through floor, gradient scale 1/sqrt(hi numel), init s = 2 mean|x| / sqrt(hi); signed [lo, hi] =
     [-L/2, L/2 - 1], unsigned [0, L - 1] (`bounds`);
   * neurons, one `step(x)` per time step, output spike * theta, spike count S in `.count`:
       STBIFNeuron   (official IFNeuron, "ST-BIF"): V_0 = theta/2; +1 if V >= theta and S < hi, -1 if V < 0 and
                     S > lo; reset by subtraction. Once its summed input X stops changing,
                     S = clamp(floor(X/theta + 1/2), lo, hi) = Q(X)/theta: the spike count equals the quantized
                     activation (a negative spike as soon as V < 0 retracts an earlier over-estimate: tracing);
       SignedIFNeuron  conventional rate-coded signed IF (signed neuron of Kim et al. 2020, without imbalance):
                     V_0 = 0 (membrane at rest), +1 if V >= theta, -1 if V <= -theta, reset by subtraction, count
                     bounded to the quantizer's [lo, hi] as the official neuron. It converges to trunc(X/theta)
                     (rounding toward zero) and retracts a spike only after a full theta of deficit;
       IFNeuron      standard unsigned IF: +1 if V >= theta, unbounded; v0 = 0.5 is the official ORIIFNeuron
                     (V_0 = theta/2), v0 = 0 the textbook neuron. Cannot represent negative values;
   * SimState: running sums for the spike-equivalent operators, `through` (LN / softmax of the accumulated input,
     minus the previous step's value: official Spiking_LayerNorm, spiking_softmax) and `step_product` (the
     official multi / multi1: A_t b_t + a_t B_t - a_t b_t = A_t B_t - A_{t-1} B_{t-1}, so the summed outputs are
     the product of the summed inputs).
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn


# ------------------------------------------------------------------------------------------ LIF (trained SNNs)
class _SigmoidSpike(torch.autograd.Function):
    """Heaviside forward, sigmoid-surrogate backward: d/dx = a sig(a x)(1 - sig(a x))."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, alpha: float) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.alpha = alpha
        return (x >= 0).to(x.dtype)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (x,) = ctx.saved_tensors
        sg = torch.sigmoid(ctx.alpha * x)
        return grad * ctx.alpha * sg * (1 - sg), None


def spike_fn(x: torch.Tensor, alpha: float = 4.0) -> torch.Tensor:
    return _SigmoidSpike.apply(x, alpha)


def lif_multistep(x: torch.Tensor, tau: float = 2.0, v_th: float = 1.0, alpha: float = 4.0, return_v: bool = False):
    """Multi-step LIF over the leading time axis of x (T, ...): H_t = V + (X_t - V)/tau, S_t = Theta(H_t - v_th),
    V_t = H_t (1 - S_t) (hard reset to 0, reset detached). Returns spikes (T, ...) [and the post-reset V_t]."""
    v = torch.zeros_like(x[0])
    spikes, vs = [], []
    for t in range(x.shape[0]):
        h = v + (x[t] - v) / tau
        s = spike_fn(h - v_th, alpha)
        v = h * (1.0 - s.detach())
        spikes.append(s)
        vs.append(v)
    out = torch.stack(spikes)
    return (out, torch.stack(vs)) if return_v else out


class LIF(nn.Module):
    def __init__(self, tau: float, v_th: float, alpha: float) -> None:
        super().__init__()
        self.tau, self.v_th, self.alpha = tau, v_th, alpha

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return lif_multistep(x, self.tau, self.v_th, self.alpha)


class SynOpCounter:
    """Synaptic-op and token counters filled during evaluation (`on`), off while training."""

    def __init__(self) -> None:
        self.on = False
        self.reset()

    def reset(self) -> None:
        self.synops = 0.0
        self.token_sum = 0.0  # sum over sub-layers of tokens processed (per sample)
        self.sublayers = 0

    def add_synops(self, value: torch.Tensor | float) -> None:
        if self.on:
            self.synops += float(value)


class SpikeLinear(nn.Module):
    """Linear (no bias) + BatchNorm over the feature axis, applied to spikes (T, B, N, Din); counts
    (input spikes) x fan-out as synaptic operations."""

    def __init__(self, din: int, dout: int, counter: SynOpCounter) -> None:
        super().__init__()
        self.fc = nn.Linear(din, dout, bias=False)
        self.bn = nn.BatchNorm1d(dout)
        self.counter = counter

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        if self.counter.on:
            self.counter.add_synops(s.detach().sum() * self.fc.out_features)
        shape = s.shape
        return self.bn(self.fc(s.reshape(-1, shape[-1]))).view(*shape[:-1], -1)


class SpikformerBlock(nn.Module):
    """Spiking self-attention + spiking MLP on the residual stream x (T, B, N, D) (module docstring)."""

    def __init__(self, d: int, n_head: int, hidden: int, tau: float, v_th: float, attn_v_th: float, alpha: float,
                 scale: float, counter: SynOpCounter) -> None:
        super().__init__()
        self.n_head, self.hd, self.scale = n_head, d // n_head, scale
        lif = lambda th=v_th: LIF(tau, th, alpha)  # noqa: E731
        self.lif_in, self.lif_q, self.lif_k, self.lif_v = lif(), lif(), lif(), lif()
        self.lif_attn = lif(attn_v_th)
        self.q, self.k, self.v, self.o = (SpikeLinear(d, d, counter) for _ in range(4))
        self.lif_mlp_in, self.lif_hidden = lif(), lif()
        self.fc1 = SpikeLinear(d, hidden, counter)
        self.fc2 = SpikeLinear(hidden, d, counter)
        self.counter = counter

    def heads(self, z: torch.Tensor) -> torch.Tensor:
        T, B, N, D = z.shape
        return z.view(T, B, N, self.n_head, self.hd).transpose(2, 3)  # (T, B, H, N, hd)

    def attention(self, x: torch.Tensor):
        """Returns (x + SSA branch, Q, K) with Q, K (T, B, H, N, hd) binary spikes (for attention maps Q K^T)."""
        s = self.lif_in(x)
        q, k, v = (self.heads(lif(lin(s))) for lin, lif in ((self.q, self.lif_q), (self.k, self.lif_k), (self.v, self.lif_v)))
        y = (q @ (k.transpose(-2, -1) @ v)) * self.scale  # = (Q K^T) V * scale, no softmax
        if self.counter.on:  # K^T V and Q (K^T V) accumulate: nnz(K) hd + nnz(Q) hd
            self.counter.add_synops((k.detach().sum() + q.detach().sum()) * self.hd)
        T, B, H, N, hd = y.shape
        y = self.lif_attn(y.transpose(2, 3).reshape(T, B, N, H * hd))
        return x + self.o(y), q, k

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(self.lif_hidden(self.fc1(self.lif_mlp_in(x))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.attention(x)[0])


# ------------------------------------------------------------------------------------------ conversion (QANN -> SNN)
def bounds(levels: int, signed: bool) -> tuple[int, int]:
    """Integer range of the quantizer / spike count (MyQuan.__init__, IFNeuron.__init__)."""
    return (-(levels // 2), levels // 2 - 1) if signed else (0, levels - 1)


def _grad_scale(x: torch.Tensor, scale: float) -> torch.Tensor:
    """Value x, gradient x * scale (LSQ; official grad_scale)."""
    return (x - x * scale).detach() + x * scale


def _floor_pass(x: torch.Tensor) -> torch.Tensor:
    """floor with a straight-through gradient (official floor_pass)."""
    return (x.floor() - x).detach() + x


class Quantizer(nn.Module):
    """MyQuan: Q(x) = clamp(floor(x/s + 1/2), lo, hi) * s with a learnable step s (LSQ).
    In SNN simulation (`self.neuron` set) the module runs the neuron that replaces it (threshold s)."""

    def __init__(self, levels: int, signed: bool) -> None:
        super().__init__()
        self.signed = signed
        self.lo, self.hi = bounds(levels, signed)
        self.s = nn.Parameter(torch.tensor(1.0))
        self.register_buffer("initialized", torch.tensor(0.0))
        self.neuron = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.neuron is not None:
            return self.neuron.step(x)
        if self.training and float(self.initialized) == 0.0:  # official init: 2 mean|x| / sqrt(hi)
            self.s.data.fill_(float(2 * x.detach().abs().mean() / math.sqrt(self.hi)))
            self.initialized.fill_(1.0)
        s = _grad_scale(self.s, 1.0 / math.sqrt(self.hi * x.numel()))
        return torch.clamp(_floor_pass(x / s + 0.5), self.lo, self.hi) * s


class _Neuron:
    """Membrane v (in units of theta), spike count, |spikes| emitted; subclasses define `fire(v, count)`."""

    v0 = 0.0

    def __init__(self, theta: torch.Tensor, lo: int = 0, hi: int = 0) -> None:
        self.theta, self.lo, self.hi = theta, lo, hi
        self.v = None
        self.count = None
        self.spikes = 0

    def step(self, x: torch.Tensor) -> torch.Tensor:
        u = x / self.theta
        if self.v is None:
            self.v = torch.full_like(u, self.v0)
            self.count = torch.zeros_like(u)
        self.v = self.v + u
        pos, neg = self.fire(self.v, self.count)
        spike = pos.to(u.dtype) - neg.to(u.dtype)
        self.count = self.count + spike
        self.v = self.v - spike
        self.spikes += int(pos.sum()) + int(neg.sum())
        return spike * self.theta


class STBIFNeuron(_Neuron):
    """SpikeZIP-TF's spike-equivalent signed neuron (official IFNeuron)."""

    v0 = 0.5

    def fire(self, v, count):
        return (v >= 1.0) & (count < self.hi), (v < 0.0) & (count > self.lo)


class SignedIFNeuron(_Neuron):
    """Conventional rate-coded signed IF, bounded to [lo, hi], membrane starting at rest (v0 = 0)."""

    def fire(self, v, count):
        return (v >= 1.0) & (count < self.hi), (v <= -1.0) & (count > self.lo)


class IFNeuron(_Neuron):
    """Unsigned, unbounded IF; v0 = 0.5 is the official ORIIFNeuron."""

    def __init__(self, theta: torch.Tensor, lo: int = 0, hi: int = 0, v0: float = 0.0) -> None:
        super().__init__(theta, lo, hi)
        self.v0 = v0

    def fire(self, v, count):
        return v >= 1.0, torch.zeros_like(v, dtype=torch.bool)


NEURONS = {"st_bif": STBIFNeuron, "signed_if": SignedIFNeuron, "if": IFNeuron,
           "ori_if": lambda theta, lo, hi: IFNeuron(theta, lo, hi, v0=0.5)}


def make_neuron(kind: str, quan: Quantizer):
    """The neuron of kind `kind` replacing quantizer `quan` (threshold = its step s, bounds = its range)."""
    if kind not in NEURONS:
        raise ValueError(f"unknown neuron {kind!r}; known: {', '.join(NEURONS)}")
    return NEURONS[kind](quan.s.detach(), quan.lo, quan.hi)


class SimState:
    """Per-module simulation state of a converted network: step counter, running sums, synaptic-op counter."""

    def __init__(self) -> None:
        self.t = 0
        self.acc: dict[str, torch.Tensor] = {}
        self.synops = 0

    def add(self, key: str, x: torch.Tensor) -> torch.Tensor:
        """Running sum of x under key (including this step), returned."""
        self.acc[key] = self.acc[key] + x if key in self.acc else x
        return self.acc[key]

    def diff(self, key: str, y: torch.Tensor) -> torch.Tensor:
        """y - (its value at the previous step, 0 at the first)."""
        prev = self.acc.get(key)
        self.acc[key] = y
        return y if prev is None else y - prev

    def through(self, key: str, fn, x: torch.Tensor) -> torch.Tensor:
        """Spike-equivalent non-linearity: fn(sum_{<=t} x) - fn(sum_{<t} x); the outputs sum to fn(sum x)."""
        return self.diff(key + ".out", fn(self.add(key + ".in", x)))


def step_product(a_sum: torch.Tensor, a: torch.Tensor, b_sum: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Spike-equivalent matrix product (official multi / multi1): with running sums A_t = sum_{<=t} a and
    B_t = sum_{<=t} b (this step included), A_t b + a B_t - a b = A_t B_t - A_{t-1} B_{t-1}."""
    return a_sum @ b + a @ b_sum - a @ b

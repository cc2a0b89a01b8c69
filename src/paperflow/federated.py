"""Federated learning simulation: clients, non-iid splits, rounds, aggregation, communication counting.

Shared by the federated papers (FedLMT first). Everything runs in one process: a "client" is an index
into a partition of the training examples, a "model" crossing the network is a state dict, and every
tensor sent or received is counted by a `CommLedger` (numel, downloads and uploads apart).

  dirichlet_split / partition   per-class Dirichlet(alpha) label split over clients (FedLMT's official
                                datasets/datasets_utils.py::non_iid_2, with its balancing rule), and the
                                held-out splits (validation, test) cut with the SAME per-class proportions,
                                so each client's local evaluation data follows its training distribution;
  sample_clients                uniform sampling without replacement of the clients of one round;
  local_sgd                     `epochs` epochs of shuffled mini-batch SGD of one client (paperflow.loop),
                                optionally in phases that each train only some parameters;
  run_rounds                    the round loop: sample, local updates, aggregation;
  fedavg                        sum_k n_k w_k / sum_k n_k, key by key (FedAvg, McMahan et al. 2017);
  sub_state / heterofl_aggregate  HeteroFL (Diao et al. 2021): a client of width rate p holds the leading
                                slice of every global tensor; each global entry is averaged over the
                                clients that hold it (entries nobody holds keep their value);
  CommLedger / client_step_flops  scalars sent and received; FLOPs of one local step (measured by torch).
"""
from __future__ import annotations

import math
from collections import OrderedDict
from typing import Callable, Mapping, Sequence

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .loop import train_loop
from .measure import forward_backward_flops

State = Mapping[str, torch.Tensor]


# ------------------------------------------------------------------------------------------ data
def dirichlet_split(labels: np.ndarray, num_clients: int, alpha: float, rng: np.random.RandomState,
                    min_size: int = 10, proportions: list | None = None, max_tries: int = 1000):
    """Split example indices over clients by a per-class Dirichlet(alpha) draw.

    Per class k (in order 0..K-1): shuffle its indices, draw p ~ Dir(alpha * 1) (or reuse
    `proportions[k]`), zero the share of every client that already holds >= N / num_clients examples
    (the official "balance"), renormalize and cut. Redraw everything until each client has >= min_size
    examples (only when proportions are drawn here). Returns (list of index arrays, proportions used)."""
    N, K = len(labels), int(labels.max()) + 1
    for _ in range(max_tries):
        props_used, batch = [], [[] for _ in range(num_clients)]
        for k in range(K):
            idx_k = np.where(labels == k)[0]
            rng.shuffle(idx_k)
            p = rng.dirichlet(np.repeat(alpha, num_clients)) if proportions is None else np.asarray(proportions[k])
            props_used.append(p)
            p = np.array([pj * (len(b) < N / num_clients) for pj, b in zip(p, batch)])
            p = p / p.sum() if p.sum() > 0 else np.full(num_clients, 1.0 / num_clients)
            cuts = (np.cumsum(p) * len(idx_k)).astype(int)[:-1]
            batch = [b + part.tolist() for b, part in zip(batch, np.split(idx_k, cuts))]
        if proportions is not None or min(len(b) for b in batch) >= min_size:
            return [np.array(sorted(b), dtype=np.int64) for b in batch], props_used
    raise ValueError(f"dirichlet_split: no split with >= {min_size} examples per client after {max_tries} draws; "
                     f"lower min_client_size or num_clients, or raise dirichlet_alpha")


def partition(train_labels: torch.Tensor, held_out: Sequence[torch.Tensor], num_clients: int, alpha: float,
              seed: int, min_size: int = 10) -> tuple[list[torch.Tensor], list[list[torch.Tensor]]]:
    """Dirichlet split of the training labels, then each held-out label set (validation, test) split with the
    same per-class proportions. Deterministic in `seed`. Returns (train parts, [parts of each held-out set])."""
    rng = np.random.RandomState(seed)
    parts, props = dirichlet_split(train_labels.numpy(), num_clients, alpha, rng, min_size)
    others = [dirichlet_split(y.numpy(), num_clients, alpha, rng, proportions=props)[0] for y in held_out]
    as_t = lambda ps: [torch.from_numpy(p) for p in ps]  # noqa: E731
    return as_t(parts), [as_t(o) for o in others]


def sample_clients(num_clients: int, per_round: int, gen: torch.Generator) -> list[int]:
    """`per_round` distinct clients drawn uniformly (the server's sampling of one round)."""
    return torch.randperm(num_clients, generator=gen)[:per_round].tolist()


# ------------------------------------------------------------------------------------------ aggregation
def numel(state: State) -> int:
    return int(sum(t.numel() for t in state.values()))


def fedavg(states: Sequence[State], weights: Sequence[float]) -> "OrderedDict[str, torch.Tensor]":
    """sum_k w_k state_k / sum_k w_k, key by key, accumulated in float64 (train-size weights in FedAvg)."""
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    return OrderedDict((k, sum(float(wk) * s[k].double() for wk, s in zip(w, states)).to(states[0][k].dtype))
                       for k in states[0])


def sub_state(global_state: State, sub_shapes: Mapping[str, tuple]) -> "OrderedDict[str, torch.Tensor]":
    """HeteroFL sub-model: the leading slice [:d0, :d1, ...] of every global tensor (first channels/units)."""
    return OrderedDict((k, global_state[k][tuple(slice(0, n) for n in shape)].clone()) for k, shape in sub_shapes.items())


def heterofl_aggregate(global_state: State, client_states: Sequence[State], weights: Sequence[float]) -> "OrderedDict[str, torch.Tensor]":
    """HeteroFL aggregation: each entry of each global tensor is the weighted mean over the clients whose
    sub-model holds it (leading slices); entries held by no client keep their global value. With every
    client at full width this is fedavg."""
    out = OrderedDict()
    for k, g in global_state.items():
        num = torch.zeros_like(g, dtype=torch.float64)
        den = torch.zeros_like(g, dtype=torch.float64)
        for s, w in zip(client_states, weights):
            if k not in s:
                continue
            sl = tuple(slice(0, n) for n in s[k].shape)
            num[sl] += float(w) * s[k].double()
            den[sl] += float(w)
        held = den > 0
        new = g.clone().double()
        new[held] = num[held] / den[held]
        out[k] = new.to(g.dtype)
    return out


class CommLedger:
    """Scalars crossing the network: `download` (server -> client) and `upload` (client -> server)."""

    def __init__(self) -> None:
        self.download = 0
        self.upload = 0

    def send(self, state: State) -> State:
        self.download += numel(state)
        return state

    def receive(self, state: State) -> State:
        self.upload += numel(state)
        return state

    @property
    def total(self) -> int:
        return self.download + self.upload

    def as_dict(self) -> dict:
        return {"download": self.download, "upload": self.upload}


# ------------------------------------------------------------------------------------------ training
def local_sgd(net: nn.Module, x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor, *, epochs: int, batch_size: int,
              make_opt: Callable[[list], torch.optim.Optimizer], gen: torch.Generator,
              transform: Callable[[torch.Tensor], torch.Tensor] = lambda t: t,
              phases: Sequence[tuple[Sequence[str], int]] | None = None) -> float:
    """`epochs` epochs of shuffled mini-batch SGD (cross-entropy) on the client's examples x[idx], y[idx],
    the last partial batch of each epoch kept, a fresh optimizer from make_opt(params) (per round, as the
    official clients). `phases` = [(trainable name prefixes, steps), ...] runs consecutive train_loop calls
    that each update and back-propagate into only the parameters whose name starts with a prefix (pFedLMT's
    body/tail split); None trains everything for all the steps. Returns the mean final loss of the phases."""
    n = idx.numel()
    per_epoch = math.ceil(n / batch_size)
    total = epochs * per_epoch
    order = torch.cat([idx[torch.randperm(n, generator=gen)] for _ in range(epochs)])
    starts = [e * n + b * batch_size for e in range(epochs) for b in range(per_epoch)]
    offset, losses = 0, []
    named = list(net.named_parameters())
    for prefixes, steps in (phases if phases is not None else [([""], total)]):
        if steps <= 0:
            continue
        for name, p in named:
            p.requires_grad_(any(name.startswith(pre) for pre in prefixes))
        params = [p for _, p in named if p.requires_grad]

        def batch_fn(step: int, first=offset):
            a = starts[first + step]
            sel = order[a:min(a + batch_size, (a // n + 1) * n)]
            return transform(x[sel]), y[sel]

        res = train_loop(params, batch_fn, lambda b: F.cross_entropy(net(b[0]), b[1]), make_opt(params), steps, modules=[net])
        losses.append(res.final_loss)
        offset += steps
    for _, p in named:
        p.requires_grad_(True)
    if offset != total:
        raise ValueError(f"local_sgd: phases cover {offset} steps, the client has {total}")
    return float(np.mean(losses))


def run_rounds(rounds: int, num_clients: int, clients_per_round: int, gen: torch.Generator,
               client_update: Callable[[int, float], tuple[State, float, float]],
               aggregate: Callable[[list, list, list], None], lr_fn: Callable[[int], float],
               on_round: Callable[[int, dict], None] | None = None) -> None:
    """The round loop: lr = lr_fn(round); sample clients; client_update(k, lr) -> (uploaded state, weight,
    local loss) for each; aggregate(uploads, weights, picked); on_round(round, {"train/loss", "train/lr"})."""
    from .progress import Progress

    progress = Progress("federated", rounds, unit="round")
    for rnd in range(rounds):
        lr = lr_fn(rnd)
        picked = sample_clients(num_clients, clients_per_round, gen)
        results = [client_update(k, lr) for k in picked]
        aggregate([r[0] for r in results], [r[1] for r in results], picked)
        loss = float(np.mean([r[2] for r in results]))
        progress.update(rnd + 1, loss=loss)
        if on_round is not None:
            on_round(rnd, {"train/loss": loss, "train/lr": lr})


def client_step_flops(net: nn.Module, input_shape: Sequence[int], phases: Sequence[Sequence[str]] | None = None) -> float:
    """Forward + backward FLOPs of one local cross-entropy step on a batch of `input_shape` (torch's
    FlopCounterMode via paperflow.measure); with phases (lists of trainable name prefixes), the mean over the
    phases, each back-propagating only into what it trains (frozen weights need no weight gradient)."""
    xb = torch.zeros(*input_shape)
    yb = torch.zeros(input_shape[0], dtype=torch.long)
    totals = []
    for prefixes in phases or [[""]]:
        for name, p in net.named_parameters():
            p.requires_grad_(any(name.startswith(pre) for pre in prefixes))
        fwd, bwd = forward_backward_flops(lambda: F.cross_entropy(net(xb), yb))
        totals.append(fwd + bwd)
    for p in net.parameters():
        p.requires_grad_(True)
    return float(np.mean(totals))

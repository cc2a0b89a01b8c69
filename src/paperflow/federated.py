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


# ------------------------------------------------------------------------------------------ system heterogeneity
# (added for FedRank: simulated device profiles, per-round time and energy, Oort's analytic selector)
def client_profiles(num_clients: int, rng: np.random.RandomState, speed_median: float = 100.0, speed_sigma: float = 0.8,
                    bandwidth_median: float = 1e5, bandwidth_sigma: float = 0.8, compute_power: tuple = (1.0, 3.0),
                    radio_power: tuple = (0.5, 1.5)) -> dict[str, np.ndarray]:
    """Simulated device profiles, one entry per client: speed (training samples per second) and bandwidth (model
    scalars per second) log-normal around their medians (sigma of the log), compute and radio power (W) uniform
    in the given ranges. Deterministic in rng."""
    return {"speed": speed_median * np.exp(speed_sigma * rng.randn(num_clients)),
            "bandwidth": bandwidth_median * np.exp(bandwidth_sigma * rng.randn(num_clients)),
            "compute_power": rng.uniform(*compute_power, size=num_clients),
            "radio_power": rng.uniform(*radio_power, size=num_clients)}


def round_costs(profiles: Mapping[str, np.ndarray], clients: Sequence[int], sizes: Sequence[int], epochs: int,
                model_numel: int, rng: np.random.RandomState | None = None, jitter: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(duration s, energy J) of each client in `clients` for one round: compute time epochs * n_k / speed_k,
    communication time 2 * model_numel / bandwidth_k (download + upload), energy = compute_power * compute time +
    radio_power * communication time. With rng and jitter > 0, speed and bandwidth of this round are multiplied
    by independent exp(jitter * N(0, 1)) factors (run-time variation the server cannot predict)."""
    c = np.asarray(clients, dtype=np.int64)
    speed, bw = profiles["speed"][c].astype(np.float64), profiles["bandwidth"][c].astype(np.float64)
    if rng is not None and jitter > 0:
        speed = speed * np.exp(jitter * rng.randn(len(c)))
        bw = bw * np.exp(jitter * rng.randn(len(c)))
    t_comp = epochs * np.asarray(sizes, dtype=np.float64)[c] / speed
    t_comm = 2.0 * model_numel / bw
    return t_comp + t_comm, profiles["compute_power"][c] * t_comp + profiles["radio_power"][c] * t_comm


class SystemLedger:
    """Simulated wall clock and energy of the rounds. A round with a deadline D lasts D when any picked client is
    late (the server waits until the deadline, then drops the stragglers' updates), else until its slowest client
    reports; every picked client's energy counts, a late client's as `wasted` too."""

    def __init__(self) -> None:
        self.time = 0.0
        self.energy = 0.0
        self.wasted = 0.0
        self.picked = 0
        self.late = 0

    def add_round(self, durations: np.ndarray, energies: np.ndarray, deadline: float = math.inf) -> np.ndarray:
        """Account one round; returns the on-time mask (duration <= deadline)."""
        durations, energies = np.asarray(durations, dtype=np.float64), np.asarray(energies, dtype=np.float64)
        on_time = durations <= deadline
        self.time += float(deadline if (~on_time).any() else durations.max(initial=0.0))
        self.energy += float(energies.sum())
        self.wasted += float(energies[~on_time].sum())
        self.picked += len(durations)
        self.late += int((~on_time).sum())
        return on_time

    def as_dict(self) -> dict:
        return {"time": self.time, "energy": self.energy, "wasted": self.wasted, "picked": self.picked, "late": self.late}


def oort_utility(stat_util: np.ndarray, last_round: np.ndarray, round_idx: int, durations: np.ndarray,
                 deadline: float, alpha: float = 2.0, staleness: float = 0.1) -> np.ndarray:
    """Oort's client utility (Lai et al., OSDI'21, Alg. 1 and its selector code): the statistical utility
    |B_i| sqrt(mean_{k in B_i} loss_k^2) min-max normalized over the given clients, plus the staleness bonus
    sqrt(staleness * log(R) / L_i) (L_i = the last round, 1-based, the client took part; R = this round), times
    the system penalty (deadline / t_i)^alpha for a client whose duration t_i exceeds the deadline."""
    s = np.asarray(stat_util, dtype=np.float64)
    span = s.max() - s.min() if s.size else 0.0
    norm = (s - s.min()) / span if span > 0 else np.zeros_like(s)
    bonus = np.sqrt(staleness * math.log(max(round_idx, 1)) / np.maximum(np.asarray(last_round, dtype=np.float64), 1.0))
    t = np.asarray(durations, dtype=np.float64)
    penalty = np.where(t > deadline, (deadline / t) ** alpha, 1.0)
    return (norm + bonus) * penalty


class OortSelector:
    """Oort's participant selection with its defaults (exploration 0.9, decay 0.98, floor 0.3, straggler penalty
    alpha 2, cut-off 0.95): each round (1 - eps) K explored clients are exploited, sampled with probability
    proportional to oort_utility among those above cutoff x the ((1 - eps) K)-th best utility, and eps K unexplored
    clients are explored, sampled with probability proportional to their speed (1 / expected duration); eps decays
    by `decay` per round down to `explore_min`. Oort's pacer (adapting the preferred duration) and blacklist are
    left out: the deadline is the fixed preferred round duration T."""

    def __init__(self, num_clients: int, per_round: int, rng: np.random.RandomState, explore: float = 0.9,
                 decay: float = 0.98, explore_min: float = 0.3, alpha: float = 2.0, cutoff: float = 0.95) -> None:
        self.n, self.k, self.rng = num_clients, per_round, rng
        self.eps, self.decay, self.eps_min, self.alpha, self.cutoff = explore, decay, explore_min, alpha, cutoff
        self.stat = np.zeros(num_clients)  # |B_i| sqrt(mean loss^2), last observed
        self.last = np.zeros(num_clients)  # last round (1-based) the client took part; 0 = unexplored

    def utilities(self, round_idx: int, durations: np.ndarray, deadline: float) -> np.ndarray:
        """oort_utility of every client (unexplored ones: 0)."""
        seen = self.last > 0
        u = np.zeros(self.n)
        if seen.any():
            u[seen] = oort_utility(self.stat[seen], self.last[seen], round_idx, np.asarray(durations)[seen], deadline, self.alpha)
        return u

    def _sample(self, pool: np.ndarray, weights: np.ndarray, m: int) -> list[int]:
        m = min(m, len(pool))
        if m <= 0:
            return []
        w = np.maximum(weights, 1e-12)
        return [int(i) for i in self.rng.choice(pool, size=m, replace=False, p=w / w.sum())]

    def select(self, round_idx: int, durations: np.ndarray, deadline: float) -> list[int]:
        """The clients of round `round_idx` (1-based) given every client's expected duration."""
        seen = np.flatnonzero(self.last > 0)
        unseen = np.flatnonzero(self.last == 0)
        n_explore = min(len(unseen), max(int(round(self.eps * self.k)), self.k - len(seen)))
        n_exploit = self.k - n_explore
        picked: list[int] = []
        if n_exploit > 0:
            u = self.utilities(round_idx, durations, deadline)[seen]
            order = np.argsort(-u, kind="stable")
            cut = self.cutoff * u[order[min(n_exploit, len(order)) - 1]]
            pool = seen[u >= cut]
            picked += self._sample(pool, u[u >= cut], n_exploit)
        speed = 1.0 / np.asarray(durations, dtype=np.float64)
        picked += self._sample(unseen, speed[unseen], n_explore)
        rest = np.setdiff1d(np.arange(self.n), picked)
        picked += self._sample(rest, speed[rest], self.k - len(picked))  # fill (never needed once all are seen)
        self.eps = max(self.eps * self.decay, self.eps_min)
        return picked

    def update(self, clients: Sequence[int], stat_util: Sequence[float], round_idx: int) -> None:
        """Feedback of the clients that reported this round: their statistical utility and participation round."""
        for c, s in zip(clients, stat_util):
            self.stat[c] = float(s)
            self.last[c] = round_idx


# ------------------------------------------------------------------------------------------ local GD on stacked copies
# (added for local_steps_fl: K client copies of the model stacked along dim 0 of every parameter, so all clients
#  take their local step in one batched forward/backward; averaging is FedAvg of the copies)
def average_copies_(params: Sequence[torch.Tensor], weights: Sequence[float] | None = None) -> None:
    """In place: every client copy (index k of dim 0) of every tensor becomes sum_k w_k copy_k / sum_k w_k
    (uniform when weights is None); the server's averaging followed by the broadcast."""
    with torch.no_grad():
        for p in params:
            if weights is None:
                mean = p.mean(0, keepdim=True)
            else:
                w = torch.as_tensor(weights, dtype=p.dtype).view(-1, *([1] * (p.dim() - 1)))
                mean = (w * p).sum(0, keepdim=True) / w.sum()
            p.copy_(mean.expand_as(p))


def local_gd(params: Sequence[torch.nn.Parameter], client_losses: Callable[[int], torch.Tensor], *, steps: int,
             interval: int, lr: float, weights: Sequence[float] | None = None, log: Callable[..., None] | None = None,
             log_every: int = 10):
    """Local (S)GD with periodic averaging on stacked client copies (paperflow.loop.train_loop, plain SGD).

    `params` hold K copies along dim 0 (all equal at the start); client_losses(step) returns the (K,) vector of
    the clients' losses (full batch: GD; a minibatch per client: SGD), copy k depending only on client k's data,
    so back-propagating their sum gives every copy its own client's gradient. Every `interval` steps (and after
    the last step) the copies are averaged (average_copies_). Every step costs K client gradient evaluations
    whatever the interval, so the variants below use equal gradient evaluations:
      interval = 1       parallel (minibatch) GD with global updates: averaging K one-step updates taken from the
                         same point is one step along the averaged gradient;
      1 < interval       Local GD / Local SGD (FedAvg with full participation), steps / interval rounds;
      interval >= steps  one-shot averaging (local training to the end, one average).
    Returns train_loop's LoopResult (raises FloatingPointError on a non-finite loss)."""
    params = list(params)
    if not params or len({int(p.shape[0]) for p in params}) != 1:
        raise ValueError("local_gd: params must share the leading client dimension K")
    if steps < 1 or interval < 1:
        raise ValueError(f"local_gd: steps and interval must be >= 1, got {steps}, {interval}")

    def batch_fn(step: int) -> int:
        if step > 0 and step % interval == 0:
            average_copies_(params, weights)
        return step

    result = train_loop(params, batch_fn, client_losses, torch.optim.SGD(params, lr=lr), steps, log=log, log_every=log_every)
    average_copies_(params, weights)
    return result


def feature_heterogeneity_split(labels: torch.Tensor, groups: torch.Tensor, num_clients: int, heterogeneity: float,
                                gen: torch.Generator) -> list[torch.Tensor]:
    """Feature-heterogeneous split of example indices (Bao et al. 2024's official FeatureCIFAR partition,
    data_loader.py::feature_heterogeneity_partition): a random `heterogeneity` fraction of the examples forms the
    non-iid pool, the rest the iid pool; the non-iid pool is split by label and each label's part sorted by its
    `groups` value (the original fine class behind a coarse label), then every client takes an equal contiguous
    share of each sorted part and an equal share of the iid pool. So clients see the same labels, each with
    different fine classes (features) behind them. Every client gets the same number of examples (remainders
    dropped). Deterministic in gen."""
    if not 0.0 <= heterogeneity <= 1.0 or num_clients < 1:
        raise ValueError(f"feature_heterogeneity_split: heterogeneity in [0, 1] and num_clients >= 1, got {heterogeneity}, {num_clients}")
    n = labels.numel()
    perm = torch.randperm(n, generator=gen)
    cut = round(heterogeneity * n)
    noniid, iid = perm[:cut], perm[cut:]
    pools = []
    for c in torch.unique(labels).tolist():
        part = noniid[labels[noniid] == c]
        pools.append(part[torch.sort(groups[part], stable=True).indices])
    share_iid = iid.numel() // num_clients
    shares = [p.numel() // num_clients for p in pools]
    size = share_iid + sum(shares)
    out = []
    for k in range(num_clients):
        idx = [iid[k * share_iid:(k + 1) * share_iid]] + [p[k * s:(k + 1) * s] for p, s in zip(pools, shares)]
        out.append(torch.cat(idx))
    assert all(o.numel() == size for o in out)
    return out


def local_gd_batched(W0: torch.Tensor, client_losses: Callable[[torch.Tensor], torch.Tensor], *, steps: int,
                     intervals: Sequence[int], lrs: Sequence[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """Many independent full-batch Local GD runs at once (added for local_steps_fl's equal-budget lr grids).

    W0 (C, K, ...): C runs, each with K client copies (all equal at the start); client_losses(W) returns the
    (C, K) losses, copy (c, k) depending only on W[c, k] and client k's data. Run c takes `steps` plain GD steps
    W[c] -= lrs[c] * grad and averages its K copies every intervals[c] steps and after the last step, i.e. run c is
    exactly `local_gd` with interval intervals[c] and lr lrs[c] (1: parallel GD; >= steps: one-shot averaging).
    A run whose loss turns non-finite stops there (marked diverged, its weights set to nan); the others go on.
    Returns (final global weights (C, ...), diverged (C,) bool)."""
    C, K = int(W0.shape[0]), int(W0.shape[1])
    if len(intervals) != C or len(lrs) != C or steps < 1 or min(intervals) < 1:
        raise ValueError(f"local_gd_batched: need {C} intervals >= 1 and {C} lrs and steps >= 1")
    shape = (C,) + (1,) * (W0.dim() - 1)
    lr = torch.as_tensor(list(lrs), dtype=W0.dtype).view(shape)
    W = W0.detach().clone()
    alive = torch.ones(C, dtype=torch.bool)
    for step in range(steps):
        due = [c for c in range(C) if step > 0 and step % intervals[c] == 0]
        if due:
            W[due] = W[due].mean(1, keepdim=True).expand(len(due), *W.shape[1:]).clone()
        Wg = W.requires_grad_(True)
        losses = client_losses(Wg)
        bad = ~torch.isfinite(losses).all(1)
        (grad,) = torch.autograd.grad(losses[~bad].sum() if bool(bad.any()) else losses.sum(), Wg)
        with torch.no_grad():
            alive &= ~bad
            W = (Wg - torch.where(alive.view(shape), lr, torch.zeros_like(lr)) * torch.nan_to_num(grad)).detach()
    W = W.mean(1)
    W[~alive] = float("nan")
    return W, ~alive


def selection_tv(counts: Sequence[float]) -> float:
    """Total-variation distance between a run's client-selection frequencies and uniform, 0.5 sum_i |c_i/C - 1/N|
    (added for FedRank's mechanism gate): 0 when every client is picked equally often; a fixed set of K of the N
    clients picked every round gives 1 - K/N."""
    c = np.asarray(counts, dtype=np.float64)
    return float(0.5 * np.abs(c / c.sum() - 1.0 / len(c)).sum())

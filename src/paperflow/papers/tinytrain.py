"""TinyTrain: "TinyTrain: Resource-Aware Task-Adaptive Sparse Training of DNNs at the Data-Scarce Edge"
(Young D. Kwon, Rui Li, Stylianos I. Venieris, Jagmohan Chauhan, Nicholas D. Lane, Cecilia Mascolo), ICML 2024.
Official code: https://github.com/theyoungkwon/TinyTrain (the stored copy holds only READMEs and figures, no
source), so everything below follows the paper's Sec. 3.2 text; where the text leaves a detail open, the
choice made here is stated.

What is implemented (online stage, paper Sec. 3.2 "Task-adaptive sparse update"):
  - Fisher potential of output channel o of layer l on the target task's support set (N examples), the
    Fisher-pruning importance of Theis et al. (2018) that the paper uses:
        Delta_o = 1/(2N) * sum_n ( sum_{h,w} a_n(o,h,w) * g_n(o,h,w) )^2                       (Fisher potential)
    a = the layer's output activation, g = dL/da of the per-example loss (sum-reduced cross entropy, so the
    gradient of example n is that of its own loss).  a is taken before the ReLU: since relu' masks exactly the
    positions where relu(a) = 0, pre-ReLU a*g equals post-ReLU a*g position by position, so the choice does
    not matter.  Layer importance Delta_l = sum_o Delta_o.
  - Multi-objective criterion (paper Eq. in Sec. 3.2), importance per normalised memory and compute:
        s_l = Delta_l / ( (M_l / max_k M_k) * (A_l / max_k A_k) )                                  (criterion)
    M_l, A_l = the memory and compute of updating layer l (all its channels), taken from a device profile that
    is MEASURED in this runtime (measure_update below, on a batch of the support set's size; it depends on
    shapes only): the bytes / backward FLOPs of an update step of {layer l + classifier} minus those of the
    classifier alone. So M_l includes what the backward from the loss down to l must keep (ReLU outputs,
    max-pool indices, the layer's input), which in fp32 PyTorch is what makes early layers expensive; A_l
    includes the input-gradient convolutions of the layers above l. (Caveat: no copy of the paper's equation
    could be retrieved from the reference index; s_l's form - Fisher importance over the product of the
    max-normalised memory and MACs - is the paper's Sec. 3.2 criterion as recalled, exponents 1. How the
    paper's MCU profile obtains M_l and A_l is not reproduced; the measured profile is the substitute.)
  - Dynamic layer/channel selection: layers are visited in decreasing s_l; within a layer the top-k output
    channels by Delta_o are updated (k = ceil(channel_ratio * C_out)); a layer is added when the measured
    bytes of updating exactly the chosen set (k channels each, plus the classifier) stays within the memory
    budget = mem_budget x the measured bytes of full fine-tuning; a layer that does not fit is skipped.
    Decided per task on the support set, before fine-tuning. The new classifier is always updated (as in
    the paper and in SparseUpdate).
  - Channel-sparse update, done exactly: a selected conv layer is split into a trainable slice
    W[sel] (and b[sel]) and a frozen rest W[rest]; y = cat(conv(x, W[sel]), conv(x, W[rest]))[:, inverse
    perm]. Only the selected rows ever receive a gradient (the "gradient mask"), and FlopCounterMode counts
    the weight-gradient convolution of the selected channels only; forward FLOPs are unchanged.

Baselines: full_ft (every weight), last_layer (classifier only), static_sparse (SparseUpdate-like, Lin et
al. 2022 "On-device training under 256KB memory": a fixed, task-independent set - the last backbone layers,
top down, their FIRST k channels, as many layers as the same memory budget allows, stopping at the first
that does not fit). Every variant starts from the same prototype-initialised classifier (W_c = 2 mu_c,
b_c = -|mu_c|^2: the ProtoNet head written as a linear layer, Triantafillou et al. 2020) and runs the same
number of full-batch Adam steps on the support set.

Measured costs (evaluate): one update step with exactly the variant's trainable tensors, on the episode's
support set:  bwd_flops = backward FLOPs from paperflow.measure.forward_backward_flops; bwd_bytes =
paperflow.measure.nbytes of (the updated weights + their gradients + every activation autograd saved for
the backward, captured with torch.autograd.graph.saved_tensors_hooks, deduplicated by storage, model
weights excluded). Also bwd_act_bytes (saved activations only) and bwd_param_bytes (weights + grads).

Substitutions for laptop scale: the paper meta-trains MCUNet / MobileNetV2 / ProxylessNAS on
MiniImageNet and adapts to nine Meta-Dataset domains; here a 4-conv CNN (~60k parameters, no BN) is
pretrained with plain cross entropy (not ProtoNet meta-training) on Fashion-MNIST classes 0-4, once, with
a fixed seed in prepare() (treated as the given pretrained model), and is adapted 5-shot to (a) the five
unseen Fashion-MNIST classes 5-9 (5-way) and (b) all ten MNIST digits (10-way, cross-domain) from a
10k-image MNIST pool; a few episodes per target and seed (the seed draws the support and query sets).
Memory is fp32 PyTorch bytes (not int8 MCU bytes), only a memory budget is used (the paper also has a
compute budget), and the selection pass itself (one forward/backward on the support set) is not counted
in the backward costs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..data.images import accuracy, few_shot, load_fashion, load_mnist10k, select_classes, subset, to_float
from ..loop import cosine_lr, train_loop
from ..measure import forward_backward_flops, nbytes
from ..registry import register_paper
from ..spec import Comparison, PaperSpec, check

VARIANTS = ("tinytrain", "full_ft", "last_layer", "static_sparse")
LAYERS = ("conv1", "conv2", "conv3", "conv4")  # the backbone layers the selection chooses among
POOL_AFTER = ("conv1", "conv2")  # 28 -> 14 -> 7
TARGETS = ("fmnist5", "mnist")


@dataclass(frozen=True)
class Config:
    source_classes: tuple = (0, 1, 2, 3, 4)  # Fashion-MNIST pretraining classes; the other 5 are the target
    mnist_classes: tuple = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9)  # cross-domain target: 10-way MNIST
    channels: tuple = (16, 32, 64, 64)  # conv1..conv4 widths
    pretrain_n: int = 30000  # source training images used for pretraining
    pretrain_steps: int = 1000
    pretrain_batch: int = 128
    pretrain_lr: float = 2e-3
    pretrain_seed: int = 0  # fixed: the pretrained backbone is shared by every variant and seed
    pool_per_class: int = 200  # support pool per target class (support sets are drawn from it)
    query_per_class: int = 100  # query images per class per episode (drawn from a disjoint pool)
    shots: int = 5
    episodes: int = 5  # episodes per target per seed
    ft_steps: int = 40  # full-batch Adam steps on the support set (same for every variant)
    ft_lr: float = 1e-3
    mem_budget: float = 0.3  # fraction of the estimated memory of updating every backbone layer fully
    channel_ratio: float = 0.5  # fraction of a selected layer's output channels that are updated
    eval_batch: int = 1000
    log_every: int = 10

    def __post_init__(self) -> None:
        for name in ("source_classes", "mnist_classes", "channels"):
            object.__setattr__(self, name, tuple(int(v) for v in getattr(self, name)))
        src = self.source_classes
        check(len(src) >= 2 and len(set(src)) == len(src) and all(0 <= c < 10 for c in src) and len(src) <= 8,
              f"source_classes must be 2..8 distinct Fashion-MNIST classes in 0..9, got {src}")
        mc = self.mnist_classes
        check(len(mc) >= 2 and len(set(mc)) == len(mc) and all(0 <= c < 10 for c in mc),
              f"mnist_classes must be >= 2 distinct digits in 0..9, got {mc}")
        check(len(self.channels) == len(LAYERS) and all(c > 0 for c in self.channels),
              f"channels must be {len(LAYERS)} positive ints (conv1..conv4), got {self.channels}")
        check(self.pretrain_n > 0 and self.pretrain_steps > 0 and self.pretrain_batch > 0,
              "pretrain_n, pretrain_steps and pretrain_batch must be > 0")
        check(self.pretrain_lr > 0 and self.ft_lr > 0, f"pretrain_lr and ft_lr must be > 0, got {self.pretrain_lr}, {self.ft_lr}")
        check(self.shots > 0 and self.pool_per_class >= self.shots,
              f"shots must be > 0 and pool_per_class >= shots, got shots={self.shots}, pool_per_class={self.pool_per_class}")
        check(self.query_per_class > 0, f"query_per_class must be > 0, got {self.query_per_class}")
        check(self.episodes > 0 and self.ft_steps > 0, f"episodes and ft_steps must be > 0, got {self.episodes}, {self.ft_steps}")
        check(0 < self.mem_budget <= 1, f"mem_budget must be in (0, 1] (fraction of the full-update memory), got {self.mem_budget}")
        check(0 < self.channel_ratio <= 1, f"channel_ratio must be in (0, 1], got {self.channel_ratio}")
        check(self.eval_batch > 0 and self.log_every > 0, "eval_batch and log_every must be > 0")


# ----------------------------------------------------------------------------------------------------
# The CNN, written functionally over a dict of tensors so that a layer can be split into a trainable
# channel slice and a frozen rest.


def init_state(channels, n_classes: int, seed: int) -> dict:
    """Fresh weights (PyTorch's default Conv2d/Linear init) for conv1..conv4 (3x3, pad 1) and fc."""
    torch.manual_seed(seed)
    state, c_in = {}, 1
    for name, c in zip(LAYERS, channels):
        conv = nn.Conv2d(c_in, c, 3, padding=1)
        state[f"{name}.weight"], state[f"{name}.bias"] = conv.weight.detach().clone(), conv.bias.detach().clone()
        c_in = c
    fc = nn.Linear(c_in, n_classes)
    state["fc.weight"], state["fc.bias"] = fc.weight.detach().clone(), fc.bias.detach().clone()
    return state


def _conv(p: dict, name: str, h: torch.Tensor) -> torch.Tensor:
    if f"{name}.sel" not in p:
        return F.conv2d(h, p[f"{name}.weight"], p[f"{name}.bias"], padding=1)
    # channel-sparse layer: trainable slice + frozen rest, re-interleaved to the original channel order
    y_sel = F.conv2d(h, p[f"{name}.weight_sel"], p[f"{name}.bias_sel"], padding=1)
    if p[f"{name}.weight_rest"].shape[0] == 0:
        return y_sel.index_select(1, p[f"{name}.inverse"])
    y_rest = F.conv2d(h, p[f"{name}.weight_rest"], p[f"{name}.bias_rest"], padding=1)
    return torch.cat([y_sel, y_rest], 1).index_select(1, p[f"{name}.inverse"])


def features(p: dict, x: torch.Tensor, probe: dict | None = None) -> torch.Tensor:
    """(B, 1, 28, 28) float -> (B, C4) pooled features; probe[name] = layer output (pre-ReLU)."""
    h = x
    for name in LAYERS:
        h = _conv(p, name, h)
        if probe is not None:
            probe[name] = h
        h = F.relu(h)
        if name in POOL_AFTER:
            h = F.max_pool2d(h, 2)
    return h.mean((2, 3))


def logits(p: dict, x: torch.Tensor, probe: dict | None = None) -> torch.Tensor:
    return F.linear(features(p, x, probe), p["fc.weight"], p["fc.bias"])


class Net(nn.Module):
    """A plain module around a state dict, for paperflow.data.images.accuracy."""

    def __init__(self, state: dict):
        super().__init__()
        self.state = state

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return logits(self.state, x)


# ----------------------------------------------------------------------------------------------------
# TinyTrain's criterion (Sec. 3.2)


def fisher_potential(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Delta_o = 1/(2N) sum_n (sum_{h,w} a_n,o,h,w g_n,o,h,w)^2 for activations/gradients (N, C, H, W) -> (C,)."""
    n = a.shape[0]
    return (a * g).sum((2, 3)).pow(2).sum(0) / (2 * n)


def channel_fisher(state: dict, x: torch.Tensor, y: torch.Tensor) -> dict:
    """{layer: (C,) Fisher potential of its output channels} from one forward/backward on (x, y)."""
    p = {k: v.detach() for k, v in state.items()}
    x = x.clone().requires_grad_(True)  # so the frozen network builds a graph to the activations
    probe: dict = {}
    loss = F.cross_entropy(logits(p, x, probe), y, reduction="sum")  # per-example gradients g_n
    grads = torch.autograd.grad(loss, [probe[n] for n in LAYERS])
    return {n: fisher_potential(probe[n].detach(), g) for n, g in zip(LAYERS, grads)}


def multi_objective_scores(importance: dict, memory: dict, macs: dict) -> dict:
    """s_l = Delta_l / ((M_l / max M) * (A_l / max A))  (paper Sec. 3.2, multi-objective criterion)."""
    m_max, a_max = max(memory.values()), max(macs.values())
    return {l: float(importance[l]) / ((memory[l] / m_max) * (macs[l] / a_max)) for l in importance}


def greedy_select(order, set_cost, budget: float, stop_at_first_miss: bool = False) -> list:
    """Visit layers in `order` (best first) and keep each one while set_cost(chosen + [layer]) <= budget;
    a layer that does not fit is skipped (or, with stop_at_first_miss, ends the selection)."""
    chosen: list = []
    for layer in order:
        if set_cost(chosen + [layer]) <= budget:
            chosen.append(layer)
        elif stop_at_first_miss:
            break
    return chosen


def n_channels(c: int, ratio: float) -> int:
    return max(1, min(c, math.ceil(ratio * c)))


def update_costs(state: dict, plan: dict, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """(bytes, backward FLOPs) of one update step with `plan`, measured (see measure_update)."""
    m = measure_update(state, plan, x, y)
    return m["bwd_bytes"], m["bwd_flops"]


def plan_update(cfg: Config, variant: str, state: dict, xs: torch.Tensor, ys: torch.Tensor) -> dict:
    """{layer: "full" | LongTensor of updated output channels} (layers absent are frozen); fc is always
    updated. tinytrain decides on the support set (xs, ys); static_sparse is task-independent.

    Costs are the device profile of this runtime, measured with measure_update on a batch of the support
    set's size (they depend on shapes only): M_l, A_l = bytes / backward FLOPs of updating layer l (all its
    channels) on top of the classifier, minus those of the classifier alone; the budget is mem_budget x the
    measured bytes of full fine-tuning, and a candidate set of layers fits when the measured bytes of updating
    exactly that set (k channels each, plus the classifier) is within it."""
    head = {"fc": "full"}
    if variant == "full_ft":
        return {**{l: "full" for l in LAYERS}, **head}
    if variant == "last_layer":
        return dict(head)
    if variant not in ("static_sparse", "tinytrain"):
        raise ValueError(f"tinytrain: unknown variant {variant!r}")
    budget = cfg.mem_budget * update_costs(state, {**{l: "full" for l in LAYERS}, **head}, xs, ys)[0]
    ks = {l: n_channels(state[f"{l}.weight"].shape[0], cfg.channel_ratio) for l in LAYERS}
    if variant == "static_sparse":  # SparseUpdate-like: last layers, first k channels, task-independent
        channels = {l: torch.arange(ks[l]) for l in LAYERS}
        order, stop = list(reversed(LAYERS)), True
    else:  # TinyTrain: Fisher potential on the support set + multi-objective criterion
        fisher = channel_fisher(state, xs, ys)
        channels = {l: torch.sort(torch.topk(fisher[l], ks[l]).indices).values for l in LAYERS}
        m0, a0 = update_costs(state, head, xs, ys)
        mem, macs = {}, {}
        for l in LAYERS:
            m, a = update_costs(state, {l: "full", **head}, xs, ys)
            mem[l], macs[l] = m - m0, (a - a0) / 2  # FLOPs -> MACs (a constant factor; cancels in s_l)
        scores = multi_objective_scores({l: float(f.sum()) for l, f in fisher.items()}, mem, macs)
        order, stop = sorted(LAYERS, key=lambda l: -scores[l]), False

    def set_cost(layers):  # measured bytes of updating exactly these layers (k channels each) + the classifier
        return update_costs(state, {**{l: channels[l] for l in layers}, **head}, xs, ys)[0]

    chosen = greedy_select(order, set_cost, budget, stop_at_first_miss=stop)
    return {**{l: channels[l] for l in chosen}, **head}


# ----------------------------------------------------------------------------------------------------
# Sparse update: trainable tensors for a plan, and back to a plain state


def make_update(state: dict, plan: dict) -> tuple[dict, list]:
    """(p, trainable): p is the forward's tensor dict, trainable the tensors that get gradients."""
    p, trainable = {}, []
    for name in LAYERS + ("fc",):
        w, b = state[f"{name}.weight"].detach().clone(), state[f"{name}.bias"].detach().clone()
        how = plan.get(name)
        if how is None:
            p[f"{name}.weight"], p[f"{name}.bias"] = w, b
        elif isinstance(how, str) or how.numel() == w.shape[0]:
            p[f"{name}.weight"], p[f"{name}.bias"] = w.requires_grad_(True), b.requires_grad_(True)
            trainable += [p[f"{name}.weight"], p[f"{name}.bias"]]
        else:
            sel = how.long()
            rest = torch.tensor([c for c in range(w.shape[0]) if c not in set(sel.tolist())], dtype=torch.long)
            p[f"{name}.sel"], p[f"{name}.rest"] = sel, rest
            p[f"{name}.inverse"] = torch.argsort(torch.cat([sel, rest]))
            p[f"{name}.weight_sel"] = w[sel].clone().requires_grad_(True)
            p[f"{name}.bias_sel"] = b[sel].clone().requires_grad_(True)
            p[f"{name}.weight_rest"], p[f"{name}.bias_rest"] = w[rest].clone(), b[rest].clone()
            trainable += [p[f"{name}.weight_sel"], p[f"{name}.bias_sel"]]
    return p, trainable


def merge_update(p: dict) -> dict:
    """The plain state dict (conv1..conv4, fc) of an update dict."""
    state = {}
    for name in LAYERS + ("fc",):
        if f"{name}.sel" in p:
            ws, wr = p[f"{name}.weight_sel"].detach(), p[f"{name}.weight_rest"].detach()
            bs, br = p[f"{name}.bias_sel"].detach(), p[f"{name}.bias_rest"].detach()
            c = ws.shape[0] + wr.shape[0]
            w, b = torch.empty((c,) + tuple(ws.shape[1:])), torch.empty(c)
            w[p[f"{name}.sel"]], w[p[f"{name}.rest"]] = ws, wr
            b[p[f"{name}.sel"]], b[p[f"{name}.rest"]] = bs, br
            state[f"{name}.weight"], state[f"{name}.bias"] = w, b
        else:
            state[f"{name}.weight"] = p[f"{name}.weight"].detach().clone()
            state[f"{name}.bias"] = p[f"{name}.bias"].detach().clone()
    return state


def prototype_head(state: dict, x: torch.Tensor, y: torch.Tensor, n_way: int) -> dict:
    """Backbone + ProtoNet-as-linear classifier: W_c = 2 mu_c, b_c = -|mu_c|^2 on the support features."""
    with torch.no_grad():
        f = features(state, x)
        mu = torch.stack([f[y == c].mean(0) for c in range(n_way)])
    out = {k: v.clone() for k, v in state.items() if not k.startswith("fc.")}
    out["fc.weight"], out["fc.bias"] = 2 * mu, -(mu * mu).sum(1)
    return out


# ----------------------------------------------------------------------------------------------------
# Measurement of one update step


def measure_update(state: dict, plan: dict, x: torch.Tensor, y: torch.Tensor) -> dict:
    """Backward FLOPs and bytes of one update step with exactly the plan's trainable tensors.

    Saved activations are what autograd keeps for the backward (saved_tensors_hooks), deduplicated by
    storage, excluding the model's own weight tensors; updated weights and their gradients are added."""
    p, trainable = make_update(state, plan)
    model_ptrs = {t.untyped_storage().data_ptr() for t in p.values()}  # weights and channel index tensors
    saved: dict = {}

    def pack(t: torch.Tensor):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in model_ptrs:  # activations, ReLU outputs, max-pool indices, the input if it is needed
            saved.setdefault(ptr, {})[(t.storage_offset(), tuple(t.shape))] = t
        return t

    def loss_fn():
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            return F.cross_entropy(logits(p, x), y)

    _, bwd_flops = forward_backward_flops(loss_fn)
    # one storage may be saved through several views; count the largest view of each storage
    acts = [max(views.values(), key=lambda t: t.numel()) for views in saved.values()]
    grads = [t.grad for t in trainable if t.grad is not None]
    act_bytes, param_bytes = nbytes(acts), nbytes(trainable) + nbytes(grads)
    return {"bwd_flops": float(bwd_flops), "bwd_bytes": float(act_bytes + param_bytes),
            "bwd_act_bytes": float(act_bytes), "bwd_param_bytes": float(param_bytes),
            "updated_params": float(sum(t.numel() for t in trainable))}


# ----------------------------------------------------------------------------------------------------
# Data and pretraining


def _split_pool(x, y, classes, pool_per_class: int, query_pool_per_class: int, seed: int):
    """Per class: a support pool and a disjoint query pool (labels remapped to 0..len(classes)-1)."""
    xc, yc = select_classes(x, y, classes)
    gen = torch.Generator().manual_seed(seed)
    sup, qry = [], []
    for c in range(len(classes)):
        idx = torch.nonzero(yc == c).flatten()
        idx = idx[torch.randperm(idx.numel(), generator=gen)]
        sup.append(idx[:pool_per_class])
        qry.append(idx[pool_per_class : pool_per_class + query_pool_per_class])
    sup, qry = torch.cat(sup), torch.cat(qry)
    return xc[sup].clone(), yc[sup].clone(), xc[qry].clone(), yc[qry].clone()


def prepare(cfg: Config, res) -> dict:
    """Pretrain the backbone on the source Fashion-MNIST classes once (fixed seed), build the targets."""
    fashion = load_fashion(res["fashion_mnist"])
    mnist = load_mnist10k(res["mnist10k"])
    src = list(cfg.source_classes)
    tgt = [c for c in range(10) if c not in src]
    xs, ys = select_classes(fashion["x_train"], fashion["y_train"].long(), src)
    xs, ys = subset(xs, ys, cfg.pretrain_n, cfg.pretrain_seed)
    state = init_state(cfg.channels, len(src), cfg.pretrain_seed)
    p = {k: v.requires_grad_(True) for k, v in state.items()}
    gen = torch.Generator().manual_seed(cfg.pretrain_seed)

    def batch_fn(step):
        idx = torch.randint(0, xs.shape[0], (cfg.pretrain_batch,), generator=gen)
        return to_float(xs[idx]), ys[idx]

    params = list(p.values())
    opt = torch.optim.Adam(params, lr=cfg.pretrain_lr)
    train_loop(params, batch_fn, lambda b: F.cross_entropy(logits(p, b[0]), b[1]), opt, cfg.pretrain_steps,
               lr_fn=lambda s: cosine_lr(s, cfg.pretrain_steps, cfg.pretrain_lr, warmup=min(50, cfg.pretrain_steps // 10)))
    backbone = {k: v.detach().clone() for k, v in p.items()}
    xt, yt = select_classes(fashion["x_test"], fashion["y_test"].long(), src)
    source_acc = accuracy(Net(backbone), xt, yt, cfg.eval_batch)
    # target 1: unseen Fashion-MNIST classes; support pool from the train split, query pool from test
    fx, fy = select_classes(fashion["x_train"], fashion["y_train"].long(), tgt)
    fx, fy, _, _ = _split_pool(fx, fy, list(range(len(tgt))), cfg.pool_per_class, 0, cfg.pretrain_seed + 1)
    fqx, fqy = select_classes(fashion["x_test"], fashion["y_test"].long(), tgt)
    # target 2: MNIST digits (cross-domain); disjoint support / query pools from the 10k pool
    mx, my, mqx, mqy = _split_pool(mnist["x"], mnist["y"].long(), list(cfg.mnist_classes), cfg.pool_per_class,
                                   max(cfg.query_per_class, 10000 // 10 - cfg.pool_per_class), cfg.pretrain_seed + 2)
    return {"backbone": backbone, "source_acc": float(source_acc),
            "fmnist5": {"x_pool": fx, "y_pool": fy, "x_query": fqx, "y_query": fqy, "n_way": len(tgt)},
            "mnist": {"x_pool": mx, "y_pool": my, "x_query": mqx, "y_query": mqy, "n_way": len(cfg.mnist_classes)}}


# ----------------------------------------------------------------------------------------------------
# Train (= few-shot adaptation episodes) / evaluate


def episode_seed(seed: int, target: str, episode: int) -> int:
    return 1000 * seed + 100 * TARGETS.index(target) + episode


def _plan_to_lists(plan: dict) -> dict:
    return {l: (v if isinstance(v, str) else [int(c) for c in v]) for l, v in plan.items()}


def _plan_from_lists(plan: dict) -> dict:
    return {l: (v if isinstance(v, str) else torch.tensor(v, dtype=torch.long)) for l, v in plan.items()}


def adapt(cfg: Config, backbone: dict, variant: str, xs_u8: torch.Tensor, ys: torch.Tensor, n_way: int,
          log=None, step_offset: int = 0) -> tuple[dict, dict]:
    """One few-shot adaptation: prototype head, plan (selection), ft_steps of full-batch Adam."""
    xs = to_float(xs_u8)
    start = prototype_head(backbone, xs, ys, n_way)
    plan = plan_update(cfg, variant, start, xs, ys)
    p, trainable = make_update(start, plan)
    opt = torch.optim.Adam(trainable, lr=cfg.ft_lr)
    log_fn = (lambda step, **m: log(step + step_offset, **m)) if log is not None else None
    train_loop(trainable, lambda step: (xs, ys), lambda b: F.cross_entropy(logits(p, b[0]), b[1]), opt,
               cfg.ft_steps, log=log_fn, log_every=cfg.log_every)
    return merge_update(p), plan


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    """Few-shot episodes on both targets; the seed draws each episode's support and query sets."""
    if variant not in VARIANTS:
        raise ValueError(f"tinytrain: unknown variant {variant!r}; known: {VARIANTS}")
    episodes, offset = [], 0
    for target in TARGETS:
        d = data[target]
        for e in range(cfg.episodes):
            es = episode_seed(seed, target, e)
            sup = few_shot(d["y_pool"], cfg.shots, es)
            qry = few_shot(d["y_query"], min(cfg.query_per_class, int(torch.bincount(d["y_query"]).min())), es)
            state, plan = adapt(cfg, data["backbone"], variant, d["x_pool"][sup], d["y_pool"][sup], d["n_way"], log, offset)
            offset += cfg.ft_steps
            episodes.append({"target": target, "episode": e, "support": sup, "query": qry,
                             "plan": _plan_to_lists(plan), "state": state})
    return {"variant": variant, "seed": seed, "episodes": episodes}


def evaluate(cfg: Config, model: dict, data: dict) -> dict:
    """Query accuracy (%) per target (mean over episodes), acc = mean of the two targets, and the measured
    backward cost of one update step (mean over all episodes)."""
    accs = {t: [] for t in TARGETS}
    costs: dict = {}
    n_sel: list = []
    for ep in model["episodes"]:
        d = data[ep["target"]]
        accs[ep["target"]].append(accuracy(Net(ep["state"]), d["x_query"][ep["query"]], d["y_query"][ep["query"]], cfg.eval_batch))
        xs, ys = to_float(d["x_pool"][ep["support"]]), d["y_pool"][ep["support"]]
        for k, v in measure_update(ep["state"], _plan_from_lists(ep["plan"]), xs, ys).items():
            costs.setdefault(k, []).append(v)
        n_sel.append(sum(1 for l in LAYERS if l in ep["plan"]))
    out = {f"acc_{t}": sum(v) / len(v) for t, v in accs.items()}
    out["acc"] = sum(out[f"acc_{t}"] for t in TARGETS) / len(TARGETS)
    out.update({k: sum(v) / len(v) for k, v in costs.items()})
    out["layers_updated"] = sum(n_sel) / len(n_sel)
    out["source_acc"] = float(data.get("source_acc", float("nan")))
    return out


ACC_MARGIN = 0.01  # "close": within 1% (relative) of full fine-tuning's accuracy, fixed up front


def comparisons(cfg: Config) -> list[Comparison]:
    rows = [Comparison(metric=m, method="tinytrain", baseline="full_ft", better="higher", kind="close", margin=ACC_MARGIN,
                       text=f"TinyTrain's few-shot accuracy ({what}) is at least full fine-tuning's (within 1%)")
            for m, what in (("acc", "mean of both targets"), ("acc_fmnist5", "5 unseen Fashion classes"),
                            ("acc_mnist", "10-way MNIST, cross-domain"))]
    rows += [Comparison(metric="bwd_bytes", method="tinytrain", baseline="full_ft", better="lower",
                        text="TinyTrain needs less backward memory (updated weights + grads + saved activations) than full FT"),
             Comparison(metric="bwd_flops", method="tinytrain", baseline="full_ft", better="lower",
                        text="TinyTrain needs fewer backward FLOPs than full FT"),
             Comparison(metric="acc", method="tinytrain", baseline="static_sparse", better="higher",
                        text="TinyTrain's task-adaptive selection beats the static sparse update at the same memory budget"),
             Comparison(metric="acc", method="tinytrain", baseline="last_layer", better="higher",
                        text="TinyTrain beats last-layer fine-tuning")]
    return rows


SPEC = register_paper(PaperSpec(
    id="tinytrain",
    title="TinyTrain: Resource-Aware Task-Adaptive Sparse Training of DNNs at the Data-Scarce Edge",
    claim="accuracy >= full FT at far lower memory/compute",
    Config=Config,
    variants=VARIANTS,
    prepare=prepare, train=train, compress=None, evaluate=evaluate, comparisons=comparisons,
    resources=("fashion_mnist", "mnist10k"),
    data="Fashion-MNIST classes 0-4 pretrain a 4-conv CNN once (fixed seed); 5-shot adaptation to the 5 unseen "
         "Fashion-MNIST classes 5-9 (5-way, query from the test split) and to the 10 MNIST digits (10-way, cross-domain, "
         "disjoint support/query pools of the 10k pool); a few episodes per target and seed",
    substitutions="Paper: MCUNet/MobileNetV2/ProxylessNAS meta-trained on MiniImageNet, 9 Meta-Dataset target domains, "
                  "int8 MCU memory, memory+compute budgets. Here: a ~60k-parameter 4-conv CNN pretrained with cross "
                  "entropy (no meta-training) on 5 Fashion classes; targets 5 unseen Fashion classes and MNIST; fp32 bytes; "
                  "memory budget only; Fisher-potential importance over max-normalised measured memory x compute (our reading of "
                  "Sec. 3.2: the paper's exact equation was not retrieved) with dynamic layer+channel selection; "
                  "static sparse = last layers' first channels at the same budget; all variants share the prototype-initialised "
                  "head and the same full-batch Adam steps",
    compression="none: the sparse update itself is the saving; evaluate measures backward FLOPs (FlopCounterMode) and "
                "bytes (updated weights + grads + autograd-saved activations) of one update step of each variant",
    tradeoff=("bwd_bytes", "acc"),
    weight=1,
))

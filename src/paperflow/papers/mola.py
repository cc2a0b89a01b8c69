"""MoLA: "Exploring Training on Heterogeneous Data with Mixture of Low-rank Adapters" (Yuhang Zhou, Zihua Zhao,
Haolin Li, Siyuan Du, Jiangchao Yao, Ya Zhang, Yanfeng Wang), ICML 2024.
Official code: https://github.com/MediaBrain-SJTU/MoLA (read for the math; nothing copied).

Setting (paper Sec. 3-4): one backbone is trained jointly on heterogeneous data (several domains / tasks, each
with its own classification head); every adapted layer carries E low-rank adapters (LoRA experts)

    y = x W^T + b + sum_e w_e(x) * s * (x A_e^T) B_e^T,      A_e (r, in), B_e (out, r), s = alpha / r,

A_e Kaiming-uniform(a=sqrt(5)), B_e = 0 (peft/loralib init, as the code's reset_lora_parameters). The backbone W,
the adapters and the heads are ALL trained (code: benchmarks/*.py::get_optim = AdamW(model.parameters(), wd 1e-4)
with a cosine schedule to 0), the heads selected by the sample's task id for every variant (code:
optim/basic_balancer.py::compute_losses_*multidomain, decoders[task] applied to the samples of that task; the
task losses are summed).

  * MoLA-Grad (target-aware; code models/*.py::ResNet50_LoraGrad with peft/lora_fast.py::MultiLoraConv2dV2, the
    one-hot task vector passed as `alphas`): E = number of tasks and w(x) = onehot(task(x)), so a sample goes
    through its own task's adapter only and each adapter gets gradient from its own task only ("explicit gradient
    separation"); the shared W gets every task's gradient.
  * MoLA-Router (target-agnostic; code layers/moe_layer.py::SoftLoraConv, models/*.py::ResNet_SoftRouter,
    layers/router.py::Router, train.py): a separate router network on the input image gives scores z(x) (B, E);
    w(x) = softmax(z(x)) and the SAME weights are used by every adapted layer (MoEBase.set_score broadcasts one
    router's scores to all layers). Task-wise Decorrelation loss (code scl_loss.py::moe_cl_loss, used in
    basic_balancer.py::compute_losses_soft_multidomain as 0.1 * moe_cl_loss(map_to_high_dim(z), task)):
    h = normalize(P z) with P a Linear(E, 32) ("map_to_high_dim", on the raw scores, before the softmax),
    S_ji = exp(h_j . h_i / tau), tau = 1, and

        L_TwD = mean over pairs (i, j), j != i, task_j = task_i  of  -log( S_ji / sum_{k != i} S_ki )

    (a supervised-contrastive loss with tasks as classes; the code averages over all positive PAIRS, not per
    anchor, and we do the same). Total loss = sum_t CE_t + twd_weight * L_TwD, twd_weight = 0.1 (code).

Baselines: "lora" = one shared LoRA (E = 1, w = 1) of the same per-expert rank r on the same layers (the paper's
single-LoRA baseline); "lora_wide" = one shared LoRA of rank E*r (MoLA-Grad's total adapter parameters: MoLA's
gain is not just more adapter parameters); "full" = joint full fine-tuning with no adapter (the paper's other
baseline). Every variant trains the backbone (as the code), and every adapter has the same scale s = alpha / r
(lora_wide's alpha is E x lora_alpha, so its update is not scaled down E-fold).
"stl" = per-task adapters: per task, the pretrained backbone + one LoRA (rank r, same s) + the head trained on that
task alone (same per-task batch and steps; one job trains the three models). MoLA claims to remove the
heterogeneity conflict of joint training, which exists here only if the naive shared adapter is worse than
per-task adapters (negative transfer, stl > lora): that is the Gate of every MoLA row (failing: "not testable"),
and stl vs lora is also shown as a control row.

Compress stage: shared magnitude pruning (compress.magnitude.magnitude_levels, scope "layer": every tensor to the
same sparsity) of the backbone's base Linears, its LoRA A/B tensors (an expert stack as one tensor) and the heads,
at the two `sparsities`; MoLA-Router's router and all biases stay dense.

Experiment (laptop-scale): three heterogeneous 10-way image tasks, one head each: fashion = Fashion-MNIST items,
mnist = MNIST digits (10k pool), mnist_inv = other MNIST digits with inverted intensities (255 - x). Backbone: MLP
784 -> 256 -> 256 (ReLU) with the experts on both hidden Linears, pre-trained once in prepare() on other
Fashion-MNIST train images (the role of ImageNet pre-training); every variant and seed starts from it. Balanced
batches (batch_per_task images of each task), AdamW lr 1e-3 (the code's 1e-4 under-trains this MLP in the step
budget; the same untuned lr for every variant), wd 1e-4, cosine to 0. Router: MLP 784 -> 64 -> E (code: a small
ResNet). A seed varies adapter/head/router initialisation and the batch order (data and backbone fixed).
Metrics: test accuracy per task and their mean (the headline), parameter counts, MoLA-Router's routing purity.

Contract v3 (issue 25). Mechanism gates measured in the runs (evaluate), thresholds fixed in code:
  - MoLA-Grad (headline and its secondary rows): swap_drop = mean accuracy with each task's own expert minus mean
    accuracy with each task's test images routed through the NEXT task's expert (task head unchanged), in points;
    gate swap_drop > SWAP_DROP = 1. If the experts were interchangeable (the shared, trained backbone carrying every
    task), MoLA-Grad would be a single LoRA with three copies and the headline would test nothing of MoLA.
  - MoLA-Router (its secondary row): route_tv = mean over tasks of the total-variation distance between the task's
    mean softmax expert weights and the mean over tasks (0: the router ignores the task; at most 1 - 1/T); gate
    route_tv > ROUTE_TV = 0.1.
  - The negative-transfer precondition (stl beats lora) stays on every MoLA row.
The isolating ablation is lora_wide (one shared LoRA with MoLA-Grad's total adapter parameters). Refuted
(`not reproduced`) when the paired interval of MoLA-Grad minus LoRA mean accuracy lies below 0 with the gates
passing. No knob is tuned (one fixed lr for every variant), so no grid-edge gates. Facts: parameter counts (equal
adapter budgets of lora_wide and MoLA-Grad by construction).
Fidelity: the MoLA layers, TwD loss, gating and optimizer follow the authors' code; the MLP backbone, MLP router,
tasks and budgets are ours.
Substitutions are listed in SPEC.substitutions (no mfeat offline; three separate-input tasks instead of the
Multi-Fashion+MNIST overlays; an MLP instead of ImageNet ResNets; adapters on every hidden layer).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..compress.magnitude import level_name, magnitude_levels
from ..loop import adamw, cosine_lr, train_loop
from ..registry import register_paper
from ..spec import Comparison, Gate, PaperSpec, check

TASKS = ("fashion", "mnist", "mnist_inv")
N_CLASSES = 10
MTL_VARIANTS = ("mola_grad", "mola_router", "lora", "lora_wide", "full")
VARIANTS = MTL_VARIANTS + ("stl",)  # stl: per-task adapters, one model per task trained alone (the gate)
IN_DIM = 28 * 28


@dataclass(frozen=True)
class Config:
    n_train: int = 3500  # training images per task
    n_test: int = 1500  # test images per task
    n_pretrain: int = 20000  # Fashion-MNIST train images used (only) for backbone pre-training
    pretrain_steps: int = 600  # Adam steps of pre-training (in prepare, once)
    data_seed: int = 0  # subsets, splits and pre-training (same for every variant and seed)
    hidden: tuple = (256, 256)  # backbone MLP widths; every hidden Linear gets the adapters
    rank: int = 4  # per-expert LoRA rank r (lora: r, lora_wide: n_tasks * r)
    lora_alpha: float = 16.0  # LoRA scale s = alpha / r
    n_router_experts: int = 3  # E for MoLA-Router (MoLA-Grad always has one expert per task)
    router_hidden: int = 64  # MLP router width
    twd_weight: float = 0.1  # weight of the TwD loss (code: 0.1)
    twd_tau: float = 1.0  # TwD temperature (code default tau = 1)
    twd_dim: int = 32  # map_to_high_dim output size (code: 32)
    steps: int = 450
    batch_per_task: int = 32  # images of each task per step
    lr: float = 1e-3  # AdamW, cosine to 0
    weight_decay: float = 1e-4  # code: AdamW weight_decay 1e-4
    pretrain_lr: float = 1e-3
    eval_batch: int = 2000
    log_every: int = 50
    sparsities: tuple = (0.5, 0.8)  # compress stage: magnitude pruning levels (per tensor)

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        object.__setattr__(self, "sparsities", tuple(float(v) for v in self.sparsities))
        check(len(self.sparsities) >= 1 and all(0 < v < 1 for v in self.sparsities),
              f"sparsities must be values in (0, 1), got {self.sparsities}")
        check(self.n_train > 0 and self.n_test > 0, f"n_train and n_test must be > 0, got {self.n_train}, {self.n_test}")
        check(2 * (self.n_train + self.n_test) <= 10000,
              f"2 * (n_train + n_test) must be <= 10000 (mnist and mnist_inv use disjoint images of the 10k MNIST pool), "
              f"got {2 * (self.n_train + self.n_test)}")
        check(self.n_pretrain > 0 and self.n_pretrain + self.n_train <= 60000,
              f"n_pretrain must be > 0 and n_pretrain + n_train <= 60000 (disjoint Fashion-MNIST train images), "
              f"got {self.n_pretrain} + {self.n_train}")
        check(self.pretrain_steps >= 0 and len(self.hidden) >= 1 and all(h > 0 for h in self.hidden),
              f"pretrain_steps must be >= 0 and hidden positive widths, got {self.pretrain_steps}, {self.hidden}")
        check(self.rank >= 1 and self.lora_alpha > 0, f"rank must be >= 1 and lora_alpha > 0, got {self.rank}, {self.lora_alpha}")
        check(self.n_router_experts >= 2, f"n_router_experts must be >= 2 (a mixture), got {self.n_router_experts}")
        check(self.router_hidden > 0 and self.twd_dim > 0 and self.twd_weight >= 0 and self.twd_tau > 0,
              "router_hidden, twd_dim and twd_tau must be > 0, twd_weight >= 0")
        check(self.steps > 0 and self.batch_per_task >= 2,
              f"steps must be > 0 and batch_per_task >= 2 (TwD needs two samples of a task), got {self.steps}, {self.batch_per_task}")
        check(self.lr > 0 and self.pretrain_lr > 0 and self.weight_decay >= 0, "lr, pretrain_lr must be > 0, weight_decay >= 0")
        check(self.eval_batch > 0 and self.log_every > 0, "eval_batch and log_every must be > 0")


# ----------------------------------------------------------------------------------------------------
# Data


def _split(n: int, sizes: list[int], seed: int) -> list[torch.Tensor]:
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    out, start = [], 0
    for s in sizes:
        out.append(perm[start : start + s])
        start += s
    return out


def prepare(cfg: Config, res) -> dict:
    """Three tasks of uint8 (N, 28, 28) images + a backbone pre-trained on other Fashion-MNIST images."""
    fashion = np.load(res["fashion_mnist"])
    mnist = np.load(res["mnist10k"])
    fx, fy = torch.from_numpy(fashion["x_train"]), torch.from_numpy(fashion["y_train"]).long()
    fxt, fyt = torch.from_numpy(fashion["x_test"]), torch.from_numpy(fashion["y_test"]).long()
    mx, my = torch.from_numpy(mnist["x"]), torch.from_numpy(mnist["y"]).long()
    s = cfg.data_seed
    f_pre, f_tr = _split(fx.shape[0], [cfg.n_pretrain, cfg.n_train], s)
    (f_te,) = _split(fxt.shape[0], [min(cfg.n_test, fxt.shape[0])], s + 1)
    m_tr, m_te, i_tr, i_te = _split(mx.shape[0], [cfg.n_train, cfg.n_test, cfg.n_train, cfg.n_test], s + 2)
    inv = lambda x: (255 - x).contiguous()  # mnist_inv: the same digits' domain with inverted intensities
    data = {
        "fashion": {"x_train": fx[f_tr], "y_train": fy[f_tr], "x_test": fxt[f_te], "y_test": fyt[f_te]},
        "mnist": {"x_train": mx[m_tr], "y_train": my[m_tr], "x_test": mx[m_te], "y_test": my[m_te]},
        "mnist_inv": {"x_train": inv(mx[i_tr]), "y_train": my[i_tr], "x_test": inv(mx[i_te]), "y_test": my[i_te]},
    }
    data["pretrained"] = pretrain_backbone(cfg, fx[f_pre], fy[f_pre])
    return data


def _inputs(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(x.shape[0], -1).float() / 255.0  # (B, 784) in [0, 1]


# ----------------------------------------------------------------------------------------------------
# Model


class MoLALinear(nn.Module):
    """A TRAINABLE nn.Linear plus E LoRA experts mixed per sample by weights w (B, E):
    y = x W^T + b + sum_e w_e s (x A_e^T) B_e^T (moe_layer.py::SoftLoraConv / lora_fast.py::MultiLoraConv2dV2 for
    a linear layer). E = 1 with w = 1 is plain LoRA on a trainable base. The shared nn/adapters.py LoRALinear
    freezes its base and has one expert, so it does not fit MoLA (backbone trained jointly)."""

    def __init__(self, base: nn.Linear, n_experts: int, r: int, alpha: float):
        super().__init__()
        self.base, self.n_experts, self.r, self.scale = base, n_experts, r, alpha / r
        self.lora_A = nn.Parameter(torch.empty(n_experts, r, base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(n_experts, base.out_features, r))
        for e in range(n_experts):  # each expert as peft's LoraLayer.reset_lora_parameters
            nn.init.kaiming_uniform_(self.lora_A.data[e], a=math.sqrt(5))

    def forward(self, x: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
        y = self.base(x)
        z = torch.einsum("bi,eri->ber", x, self.lora_A)  # (B, E, r)
        d = torch.einsum("ber,eor->beo", z, self.lora_B)  # (B, E, out)
        if weights is None:
            if self.n_experts != 1:
                raise ValueError("MoLALinear: weights (B, E) are required with more than one expert")
            return y + self.scale * d[:, 0]
        return y + self.scale * (weights[:, :, None] * d).sum(1)


class Backbone(nn.Module):
    """MLP 784 -> hidden... (ReLU); each hidden Linear optionally a MoLALinear with E experts."""

    def __init__(self, hidden: tuple, n_experts: int = 0, r: int = 4, alpha: float = 16.0):
        super().__init__()
        dims = (IN_DIM,) + tuple(hidden)
        layers = []
        for a, b in zip(dims[:-1], dims[1:]):
            lin = nn.Linear(a, b)
            layers.append(MoLALinear(lin, n_experts, r, alpha) if n_experts else lin)
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
        for layer in self.layers:
            x = F.relu(layer(x, weights) if isinstance(layer, MoLALinear) else layer(x))
        return x


class Router(nn.Module):
    """Scores z(x) (B, E) from the image (layers/router.py::Router, a small net on the input) and the TwD
    projection P: Linear(E, twd_dim) (models/*.py::ResNet_SoftRouter.map_to_high_dim)."""

    def __init__(self, n_experts: int, hidden: int, twd_dim: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(IN_DIM, hidden), nn.ReLU(), nn.Linear(hidden, n_experts))
        self.map_to_high_dim = nn.Linear(n_experts, twd_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class MoLANet(nn.Module):
    """Backbone + per-task heads (+ router for MoLA-Router). forward(x, task) -> logits of each sample's head."""

    def __init__(self, arch: dict):
        super().__init__()
        self.kind = arch["kind"]  # "grad" | "router" | "lora" | "full"
        self.n_tasks = len(arch["tasks"])
        self.backbone = Backbone(tuple(arch["hidden"]), arch["n_experts"], arch["rank"], arch["lora_alpha"])
        self.heads = nn.ModuleList(nn.Linear(arch["hidden"][-1], N_CLASSES) for _ in range(self.n_tasks))
        self.router = Router(arch["n_experts"], arch["router_hidden"], arch["twd_dim"]) if self.kind == "router" else None

    def gate(self, x: torch.Tensor, task: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(expert weights (B, E) or None, router scores or None)."""
        if self.kind == "grad":
            return F.one_hot(task, self.n_tasks).to(x.dtype), None
        if self.kind == "router":
            scores = self.router(x)
            return F.softmax(scores, dim=1), scores  # SoftLoraConv: gate = softmax(scores)
        return None, None

    def forward(self, x: torch.Tensor, task: torch.Tensor, return_scores: bool = False):
        weights, scores = self.gate(x, task)
        h = self.backbone(x, weights)
        logits = torch.stack([head(h) for head in self.heads], dim=1)  # (B, T, C)
        out = logits[torch.arange(x.shape[0]), task]  # each sample's own task head
        return (out, scores) if return_scores else out


def twd_loss(features: torch.Tensor, labels: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
    """Task-wise Decorrelation loss (scl_loss.py::moe_cl_loss), vectorised: h = normalize(features),
    logit_ki = h_k . h_i / tau, for every positive pair (i, j) (j != i, same task) the term
    -log(exp(logit_ji) / sum_{k != i} exp(logit_ki)); the mean over all positive pairs."""
    h = F.normalize(features, dim=1)
    logits = h @ h.t() / tau  # symmetric (B, B)
    n = logits.shape[0]
    eye = torch.eye(n, dtype=torch.bool, device=logits.device)
    denom = torch.logsumexp(logits.masked_fill(eye, float("-inf")), dim=0)  # (B,): log sum_{k != i} exp(logit_ki)
    pos = (labels[:, None] == labels[None, :]) & ~eye  # pos[j, i]
    if not bool(pos.any()):
        raise ValueError("twd_loss: no two samples share a task in this batch")
    return (denom[None, :] - logits)[pos].mean()


def arch_of(cfg: Config, variant: str, task: str = "") -> dict:
    """The architecture of a variant; for "stl", the per-task model of `task` (a LoRA model on that task alone).
    Every adapter has rank r and alpha = lora_alpha * r / cfg.rank, so the scale alpha / r is the same for all."""
    check(variant in VARIANTS, f"mola: unknown variant {variant!r}; known {VARIANTS}")
    T = len(TASKS)
    kind, E, r = {"mola_grad": ("grad", T, cfg.rank), "mola_router": ("router", cfg.n_router_experts, cfg.rank),
                  "lora": ("lora", 1, cfg.rank), "lora_wide": ("lora", 1, T * cfg.rank), "full": ("full", 0, cfg.rank),
                  "stl": ("lora", 1, cfg.rank)}[variant]
    check(variant != "stl" or task in TASKS, f"mola: stl needs a task in {TASKS}, got {task!r}")
    return {"kind": kind, "n_experts": E, "rank": r, "lora_alpha": cfg.lora_alpha * r / cfg.rank, "hidden": list(cfg.hidden),
            "tasks": [task] if variant == "stl" else list(TASKS), "router_hidden": cfg.router_hidden, "twd_dim": cfg.twd_dim}


def load_pretrained(net: MoLANet, pretrained: dict) -> None:
    """Copy the pre-trained backbone Linear weights into net's backbone (into .base of a MoLALinear)."""
    for i, layer in enumerate(net.backbone.layers):
        lin = layer.base if isinstance(layer, MoLALinear) else layer
        with torch.no_grad():
            lin.weight.copy_(pretrained[f"{i}.weight"])
            lin.bias.copy_(pretrained[f"{i}.bias"])


def pretrain_backbone(cfg: Config, x: torch.Tensor, y: torch.Tensor) -> dict:
    """Plain MLP + head trained on the pre-training images (Adam, cosine); returns {"<i>.weight", "<i>.bias"}."""
    torch.manual_seed(cfg.data_seed)
    backbone, head = Backbone(cfg.hidden), nn.Linear(cfg.hidden[-1], N_CLASSES)
    if cfg.pretrain_steps:
        gen = torch.Generator().manual_seed(cfg.data_seed)
        params = list(backbone.parameters()) + list(head.parameters())
        idx = lambda: torch.randint(0, x.shape[0], (128,), generator=gen)  # noqa: E731
        train_loop(params, lambda step: (lambda i: (_inputs(x[i]), y[i]))(idx()),
                   lambda b: F.cross_entropy(head(backbone(b[0])), b[1]), torch.optim.Adam(params, lr=cfg.pretrain_lr),
                   cfg.pretrain_steps, modules=[backbone, head],
                   lr_fn=lambda s: cosine_lr(s, cfg.pretrain_steps, cfg.pretrain_lr, min_ratio=0.0))
    return {k.replace("layers.", ""): v.detach().clone() for k, v in backbone.state_dict().items()}


# ----------------------------------------------------------------------------------------------------
# Train / evaluate


def build(arch: dict, state: dict | None = None) -> MoLANet:
    net = MoLANet(arch)
    if state is not None:
        net.load_state_dict(state)
    return net


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    """One jointly trained model, or for "stl" one model per task trained alone ({"per_task": [...]}; logged
    steps of task k are offset by k * steps)."""
    if variant != "stl":
        return _fit(cfg, data, arch_of(cfg, variant), variant, seed, log)
    per_task = []
    for k, t in enumerate(TASKS):
        log_k = (lambda step, _o=k * cfg.steps, **m: log(step + _o, **m)) if log is not None else None
        per_task.append(_fit(cfg, data, arch_of(cfg, variant, t), variant, seed, log_k))
    return {"variant": variant, "per_task": per_task}


def _fit(cfg: Config, data: dict, arch: dict, variant: str, seed: int, log) -> dict:
    torch.manual_seed(seed)  # adapters, heads, router init
    net = build(arch)
    load_pretrained(net, data["pretrained"])
    gen = torch.Generator().manual_seed(seed)
    tasks = arch["tasks"]  # all three for the joint variants, one for a per-task (stl) model
    xs = [data[t]["x_train"] for t in tasks]
    ys = [data[t]["y_train"] for t in tasks]
    b = cfg.batch_per_task
    task_ids = torch.arange(len(tasks)).repeat_interleave(b)

    def batch_fn(step: int):
        idx = [torch.randint(0, x.shape[0], (b,), generator=gen) for x in xs]
        x = torch.cat([_inputs(xt[i]) for xt, i in zip(xs, idx)])
        y = torch.cat([yt[i] for yt, i in zip(ys, idx)])
        return x, y, task_ids

    def loss_fn(batch):
        x, y, task = batch
        logits, scores = net(x, task, return_scores=True)
        ce = F.cross_entropy(logits, y, reduction="none")
        losses = [ce[task == t].mean() for t in range(len(tasks))]  # per-task CE means, summed (the balancer)
        if net.kind == "router" and cfg.twd_weight > 0:
            losses.append(cfg.twd_weight * twd_loss(net.router.map_to_high_dim(scores), task, cfg.twd_tau))
        return torch.stack(losses)  # (T,) or (T + 1,) with the weighted TwD last; train_loop sums them

    opt = adamw(net, cfg.lr, cfg.weight_decay)  # decay on matrices only (dim >= 2)
    train_loop(net.parameters(), batch_fn, loss_fn, opt, cfg.steps, log=log, log_every=cfg.log_every, modules=[net],
               lr_fn=lambda s: cosine_lr(s, cfg.steps, cfg.lr, min_ratio=0.0))
    return {"state": {k: v.detach().clone() for k, v in net.state_dict().items()}, "arch": arch, "variant": variant}


def count_trainable(net: MoLANet) -> dict[str, float]:
    adapter = sum(p.numel() for n, p in net.named_parameters() if "lora_" in n)
    router = sum(p.numel() for p in net.router.parameters()) if net.router is not None else 0
    total = sum(p.numel() for p in net.parameters())
    return {"trainable_params": float(total), "adapter_params": float(adapter), "router_params": float(router)}


def compress(cfg: Config, model: dict, data: dict, variant: str, seed: int) -> dict:
    """{level: pruned model}: every weight tensor (dim >= 2) of the backbone (base Linears, LoRA A and B) and of the
    heads pruned to each sparsity by |w| within the tensor (magnitude_levels, scope "layer"); router stays dense."""
    if "per_task" in model:
        pruned = [compress(cfg, m, data, variant, seed) for m in model["per_task"]]
        return {lv: {"variant": variant, "per_task": [p[lv] for p in pruned]} for lv in pruned[0]}
    levels = magnitude_levels(model["state"], cfg.sparsities, include=("backbone.", "heads."), scope="layer")
    return {lv: {**model, "state": state} for lv, state in levels.items()}


@torch.no_grad()
def evaluate(cfg: Config, model: dict, data: dict) -> dict[str, float]:
    """Test accuracy (%) per task (acc_<task>) and their mean acc_mean; parameter counts; for MoLA-Router the
    routing purity: the share of test images whose argmax expert is their task's most common argmax expert.
    For "stl" the per-task models' accuracies and their summed parameter counts."""
    if "per_task" in model:
        parts = [evaluate(cfg, m, data) for m in model["per_task"]]
        metrics = {k: v for p in parts for k, v in p.items() if k.startswith("acc_")}
        metrics["acc_mean"] = float(np.mean([metrics[f"acc_{t}"] for t in TASKS]))
        metrics.update({k: float(sum(p[k] for p in parts)) for k in ("trainable_params", "adapter_params", "router_params")})
        return metrics
    net = build(model["arch"], model["state"])
    net.eval()
    metrics, purity_hits, n_all = {}, 0, 0
    tasks = model["arch"]["tasks"]
    swapped, mean_weights = [], []
    for t, name in enumerate(tasks):
        x_all, y_all = data[name]["x_test"], data[name]["y_test"]
        correct, correct_swap, argmax, wsum = 0, 0, [], 0.0
        for a in range(0, x_all.shape[0], cfg.eval_batch):
            x = _inputs(x_all[a : a + cfg.eval_batch])
            y = y_all[a : a + cfg.eval_batch]
            task = torch.full((x.shape[0],), t, dtype=torch.long)
            logits, scores = net(x, task, return_scores=True)
            correct += int((logits.argmax(1) == y).sum())
            if net.kind == "grad":  # the same images through the NEXT task's expert (own head): expert swap
                correct_swap += int((swap_logits(net, x, t).argmax(1) == y).sum())
            if scores is not None:
                argmax.append(scores.argmax(1))
                wsum = wsum + F.softmax(scores, dim=1).sum(0)
        metrics[f"acc_{name}"] = 100.0 * correct / max(1, x_all.shape[0])
        swapped.append(100.0 * correct_swap / max(1, x_all.shape[0]))
        if argmax:
            am = torch.cat(argmax)
            purity_hits += int(torch.bincount(am).max())
            n_all += am.numel()
            mean_weights.append(wsum / am.numel())
    if len(tasks) == len(TASKS):
        metrics["acc_mean"] = float(np.mean([metrics[f"acc_{t}"] for t in TASKS]))
        if net.kind == "grad":
            metrics["swap_drop"] = metrics["acc_mean"] - float(np.mean(swapped))
    if n_all:
        metrics["route_purity"] = 100.0 * purity_hits / n_all
        metrics["route_tv"] = route_tv(torch.stack(mean_weights))
    metrics.update(count_trainable(net))
    return metrics


def swap_logits(net: MoLANet, x: torch.Tensor, t: int) -> torch.Tensor:
    """MoLA-Grad logits of task-t images routed through expert (t + 1) mod E instead of expert t (task t's head):
    how much the accuracy depends on WHICH expert a task uses (0 if the experts are interchangeable)."""
    weights = F.one_hot(torch.full((x.shape[0],), (t + 1) % net.n_tasks, dtype=torch.long), net.n_tasks).to(x.dtype)
    return net.heads[t](net.backbone(x, weights))


def route_tv(mean_weights: torch.Tensor) -> float:
    """How differently the router treats the tasks: the mean over tasks of the total-variation distance between a
    task's mean routing weights (T, E) (softmax, averaged over its test images) and the mean over tasks; 0 when the
    router gives every task the same expert mixture, 1 - 1/T at most (tasks sent to disjoint experts)."""
    overall = mean_weights.mean(0, keepdim=True)
    return float(0.5 * (mean_weights - overall).abs().sum(1).mean())


SWAP_DROP = 1.0  # points of mean accuracy: MoLA-Grad's experts must be task-specific by at least this much
ROUTE_TV = 0.1  # MoLA-Router: task-to-expert total-variation distance the router must reach


def comparisons(cfg: Config) -> list[Comparison]:
    conflict = Gate("negative transfer exists: per-task adapters (stl) beat the naive shared LoRA (lora) on mean accuracy",
                    comparison=Comparison("acc_mean", "stl", "lora", better="higher"))
    specific = Gate(f"MoLA-Grad's experts are task-specific: routing each task's test images through the next task's "
                    f"expert (swap_drop) costs more than {SWAP_DROP:g} point(s) of mean accuracy",
                    variant="mola_grad", metric="swap_drop", above=SWAP_DROP, kind="mechanism")
    routed = Gate(f"MoLA-Router routes tasks differently: mean total-variation distance of each task's mean expert "
                  f"weights from the overall mean (route_tv) above {ROUTE_TV:g}",
                  variant="mola_router", metric="route_tv", above=ROUTE_TV, kind="mechanism")
    level = level_name(cfg.sparsities[0])
    row = lambda m, b, role, text, **kw: Comparison("acc_mean", m, b, better="higher", role=role, text=text, **kw)  # noqa: E731
    return [
        row("mola_grad", "lora", "headline", gates=(conflict, specific),
            text="MoLA-Grad (one LoRA expert per task, task-id routing) has higher mean accuracy over the 3 tasks than a "
                 "single shared LoRA of the same rank and alpha / r",
            refuted_if="the 95% interval of MoLA-Grad minus shared-LoRA mean test accuracy (paired by seed) lies below 0, "
                       "with negative transfer present (stl beats lora) and MoLA-Grad's experts task-specific "
                       f"(swap_drop > {SWAP_DROP:g})"),
        row("mola_router", "lora", "secondary", gates=(conflict, routed),
            text="MoLA-Router (learned router + TwD loss, no task id at inference) higher mean accuracy than the shared LoRA"),
        row("mola_grad", "lora_wide", "secondary", gates=(conflict, specific),
            text="MoLA-Grad higher mean accuracy than one shared LoRA with the same total adapter parameters (rank E x r, "
                 "same alpha / r): the isolating ablation (the gain is not just more adapter parameters)"),
        row("mola_grad", "full", "secondary", gates=(conflict, specific),
            text="MoLA-Grad higher mean accuracy than joint full fine-tuning (no adapters)"),
        row("mola_grad", "lora", "secondary", gates=(conflict, specific), stage="compressed", level=level,
            text=f"after magnitude pruning of every backbone / adapter / head tensor to {float(level):.0%}, MoLA-Grad still "
                 "beats the pruned shared LoRA"),
        row("stl", "lora", "control",
            text="negative transfer: per-task adapters trained alone beat the shared LoRA trained jointly (the MoLA rows' gate)"),
        Comparison("adapter_params", "lora_wide", "mola_grad", role="fact",
                   text="adapter parameters: the wide shared LoRA (rank E x r) vs MoLA-Grad (E experts of rank r): equal by "
                        "construction"),
        Comparison("trainable_params", "mola_grad", "lora", role="fact", text="trainable parameters, MoLA-Grad vs the shared LoRA"),
    ]


SPEC = register_paper(PaperSpec(
    id="mola",
    title="Exploring Training on Heterogeneous Data with Mixture of Low-rank Adapters (MoLA)",
    claim="MoLA variants beat single LoRA",
    Config=Config,
    variants=VARIANTS,
    prepare=prepare, train=train, compress=compress, evaluate=evaluate,
    comparisons=comparisons,
    resources=("fashion_mnist", "mnist10k"),
    data="three heterogeneous 10-way tasks trained jointly, one head each: Fashion-MNIST items, MNIST digits, and "
         "intensity-inverted MNIST digits (disjoint images of the 10k MNIST pool); the backbone is pre-trained once on "
         "other Fashion-MNIST train images",
    substitutions="Paper: VLCS / OfficeHome / RadImageNet / MedMNIST / NYUv2 (and Multi-Fashion+MNIST, mfeat) with "
                  "ImageNet-pretrained ResNets. Here: mfeat is not available offline (not used); 3 tasks "
                  "(fashion, mnist, inverted mnist), 3500 train / 1500 test images each; a 784-256-256 MLP backbone "
                  "pre-trained on 20k other Fashion-MNIST images, then trained jointly with LoRA experts (r=4, "
                  "alpha/r=4 for every adapter) on both hidden layers and per-task heads, AdamW 1e-3 (wd 1e-4, cosine) for "
                  "450 balanced steps of 3x32, 8 seeds; MoLA-Router's router is a 784-64-E MLP on the image (code: a small "
                  "ResNet); TwD exactly as the code (0.1 x SupCon over tasks on Linear(E,32) of the router scores, tau=1). "
                  "Single-LoRA baselines at the same per-expert rank (lora) and the same total rank E x r (lora_wide); "
                  "per-task adapters trained alone (stl) as the negative-transfer precondition",
    compression="shared magnitude pruning (uniform per tensor) of the backbone's base and LoRA tensors and the heads at "
                "the Config's sparsities (router dense), the same for every variant; catalog compress_stage: none",
    tradeoff=("trainable_params", "acc_mean"),
    fidelity="official-code",
    weight=1,
))

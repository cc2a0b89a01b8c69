"""FairGrad: "Fair Resource Allocation in Multi-Task Learning" (Hao Ban, Kaiyi Ji), ICML 2024.

Official code: https://github.com/OptMN-Lab/fairgrad (methods/weight_methods.py::FairGrad).

Method: each step, the shared parameters move along d = sum_k w_k g_k where the task weights w > 0 solve
the alpha-fair optimality condition (G G^T) w = w^(-1/alpha) (alpha = 2, as in their run scripts), so the
loss decreases g_k^T d are allocated alpha-fairly (alpha = 0: LS-like sum, alpha = 1: proportional
fairness / Nash-MTL, alpha -> inf: max-min fairness / MGDA-like). The combiners live in paperflow.mtl
(shared with the other MTL papers); see its docstring for the official-code details implemented:
direction multiplied by K, shared gradient clipped to norm 1.0 for FairGrad and PCGrad, effectively no
clipping for LS / MGDA / STL (their clip call runs before backward), Adam at a constant learning rate.

Experiment here (laptop-scale substitute for the paper's CelebA / NYU-v2 / Cityscapes / QM9 runs):
Multi-Fashion+MNIST (paperflow.data.multimnist) built from real Fashion-MNIST and a 10k-image MNIST
pool: task A = fashion class, task B = digit; a LeNet-style shared trunk (conv-conv-fc, as in the
MultiMNIST experiments of MGDA-UB / Pareto MTL) with one linear head per task. Variants: fairgrad, ls,
mgda, pcgrad (all through train_loop's combine hook) and the single-task models stl_a, stl_b (same
architecture, one task) that Delta-m% is measured against. Metric: test accuracy per task and
Delta-m% = -(1/K) sum_k (acc_k - acc_stl,k) / acc_stl,k * 100 (lower is better).

Equal tuning (paperflow.tuning): every variant, single-task models included, gets the same lr grid
(cfg.lr_grid, 3 values around the official 1e-3); in prepare() each (variant, lr) is trained once with a
tuning seed that is not an evaluation seed, for cfg.tune_steps steps (a cheaper proxy of the full run,
the same for every variant), and the lr with the best score on a validation set is kept
(multi-task: mean validation accuracy of the two tasks; single-task: its task's accuracy; ties to the
smaller lr). The validation overlays are built from images held out of both training pools (Fashion-MNIST
train images and MNIST pool digits), the test overlays are untouched. FairGrad's alpha stays at the
paper's 2 (not tuned, so that no method gets a larger grid). The headline compares FairGrad with the
best baseline, chosen on validation: the baseline (LS, MGDA, PCGrad) with the lowest validation Delta-m%
at its tuned lr against the tuned single-task models (derive() adds it as the view "ref|best_baseline").

Contract v3 (issue 25): every multi-task run counts, per step, whether the two task gradients on the shared trunk
conflict (g_a . g_b < 0; mtl_bench.ConflictCounter wraps the combiner, as mmpareto's counter) and logs conflict_frac,
mean_cos and grad_norm_ratio. FairGrad's alpha-fair weights differ from LS's equal weights only when the gradients
conflict or differ in size, so the headline's mechanism gate asks that FairGrad's own gradients conflicted on more
than CONFLICT_MIN = 10% of its steps (threshold fixed before the v3 runs); LS is the ablation it reduces to (a
secondary row). Grid-edge gates are directional: FairGrad on its lr grid's edge blocks only `not reproduced`, the
best baseline on its edge only `reproduced`.

Compression: global magnitude pruning of the shared trunk's weight tensors (one threshold over
conv1/conv2/fc weights; heads and biases untouched) at cfg.sparsities, no fine-tuning; Delta-m% of a
pruned model is measured against the single-task models pruned at the same level.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..data.multimnist import build_overlay_set, split_pool
from ..loop import train_loop
from ..mtl import make_combiner
from ..mtl_bench import best_baseline as shared_best_baseline, delta_m_comparisons, derive_delta_m
from ..mtl_bench import (N_CLASSES, TASKS, ConflictCounter, MultiLeNet, _images, _stages, accuracies, build_model,  # noqa: F401
                         compress, delta_m, level_name)
from ..registry import register_paper
from ..spec import Comparison, Gate, PaperSpec, check
from ..tuning import tune

MTL_VARIANTS = ("fairgrad", "ls", "mgda", "pcgrad")
BASELINES = ("ls", "mgda", "pcgrad")
BEST = "ref|best_baseline"  # derive(): per seed, the rows of the baseline with the best validation Delta-m%
REFS = {"a": "stl_a", "b": "stl_b"}  # task -> the single-task variant whose accuracy is that task's Delta-m% reference
STL_VARIANTS = {"stl_a": 0, "stl_b": 1}  # single-task variant -> index of its task


@dataclass(frozen=True)
class Config:
    n_train: int = 30000  # training overlays (Fashion train images x MNIST train-pool digits)
    n_test: int = 5000  # test overlays (Fashion test images x held-out MNIST digits)
    mnist_test: int = 2000  # images of the 10k MNIST pool held out for the test overlays
    n_val: int = 3000  # validation overlays (lr selection), from images held out of both training pools
    fashion_val: int = 6000  # Fashion-MNIST train images held out for the validation overlays
    mnist_val: int = 1000  # MNIST pool digits held out for the validation overlays
    canvas: int = 36  # overlay canvas side (image B offset = canvas - 28)
    image_size: int = 28  # canvas resized to this side
    data_seed: int = 0  # pairing and MNIST split (same data for every variant and seed)
    channels: tuple = (10, 20)  # trunk conv widths (MultiLeNet)
    hidden: int = 50  # trunk fc width = representation size fed to the heads
    steps: int = 1500  # optimiser steps
    batch_size: int = 128
    lr_grid: tuple = (3e-4, 1e-3, 3e-3)  # Adam, constant lr; every variant picks one on validation (official: 1e-3)
    tune_steps: int = 375  # steps of each tuning run (a cheaper proxy of the full run, the same for every variant)
    tune_seed: int = 1000  # seed of the tuning runs (not an evaluation seed)
    alpha: float = 2.0  # FairGrad alpha (official run scripts)
    max_norm: float = 1.0  # shared-gradient clip for fairgrad and pcgrad (official max_norm)
    sparsities: tuple = (0.5, 0.7, 0.9)  # trunk pruning levels
    compare_level: float = 0.7  # level of the compressed fairgrad-vs-ls claim row
    eval_batch: int = 1000
    log_every: int = 50

    def __post_init__(self) -> None:
        for name in ("channels", "sparsities", "lr_grid"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        check(self.n_train > 0 and self.n_test > 0, f"n_train and n_test must be > 0, got {self.n_train}, {self.n_test}")
        check(0 < self.mnist_test < 10000, f"mnist_test must be in (0, 10000), got {self.mnist_test}")
        check(self.canvas >= 28, f"canvas must be >= 28, got {self.canvas}")
        check(self.image_size >= 16, f"image_size must be >= 16 (two 5x5 convs + pools), got {self.image_size}")
        check(len(self.channels) == 2 and all(c > 0 for c in self.channels), f"channels must be 2 positive ints, got {self.channels}")
        check(self.hidden > 0, f"hidden must be > 0, got {self.hidden}")
        check(self.steps > 0 and self.batch_size > 0, f"steps and batch_size must be > 0, got {self.steps}, {self.batch_size}")
        check(len(self.lr_grid) >= 1 and all(lr > 0 for lr in self.lr_grid) and list(self.lr_grid) == sorted(self.lr_grid),
              f"lr_grid must be positive and ascending, got {self.lr_grid}")
        check(self.tune_steps > 0, f"tune_steps must be > 0, got {self.tune_steps}")
        check(self.n_val > 0 and 0 < self.fashion_val < 60000, f"n_val > 0 and fashion_val in (0, 60000), got {self.n_val}, {self.fashion_val}")
        check(0 < self.mnist_val < 10000 - self.mnist_test, f"mnist_val must be in (0, 10000 - mnist_test), got {self.mnist_val}")
        check(self.alpha > 0, f"alpha must be > 0, got {self.alpha}")
        check(self.max_norm >= 0, f"max_norm must be >= 0 (0 = no clipping), got {self.max_norm}")
        check(all(0 <= s < 1 for s in self.sparsities), f"sparsities must be in [0, 1), got {self.sparsities}")
        check(self.compare_level in self.sparsities, f"compare_level must be one of sparsities {self.sparsities}, got {self.compare_level}")
        check(self.eval_batch > 0 and self.log_every > 0, "eval_batch and log_every must be > 0")


# ----------------------------------------------------------------------------------------------------
# Data


def prepare(cfg: Config, res) -> dict:
    """Overlays of real Fashion-MNIST (task A) and MNIST (task B) images, uint8 (N, S, S): train, validation
    (from images held out of both training pools) and test; then the lr of every variant (tune_lrs)."""
    fashion = np.load(res["fashion_mnist"])
    mnist = np.load(res["mnist10k"])
    mx, my = torch.from_numpy(mnist["x"]), torch.from_numpy(mnist["y"]).long()
    m_pool, m_test = split_pool(mx.shape[0], cfg.mnist_test, cfg.data_seed)
    m_tr, m_va = (m_pool[i] for i in split_pool(len(m_pool), cfg.mnist_val, cfg.data_seed + 2))
    fx_tr, fy_tr = torch.from_numpy(fashion["x_train"]), torch.from_numpy(fashion["y_train"]).long()
    f_tr, f_va = split_pool(fx_tr.shape[0], cfg.fashion_val, cfg.data_seed + 3)
    fx_te, fy_te = torch.from_numpy(fashion["x_test"]), torch.from_numpy(fashion["y_test"]).long()
    kw = dict(canvas=cfg.canvas, size=cfg.image_size)
    train = build_overlay_set(fx_tr[f_tr], fy_tr[f_tr], mx[m_tr], my[m_tr], cfg.n_train, cfg.data_seed, **kw)
    val = build_overlay_set(fx_tr[f_va], fy_tr[f_va], mx[m_va], my[m_va], cfg.n_val, cfg.data_seed + 4, **kw)
    test = build_overlay_set(fx_te, fy_te, mx[m_test], my[m_test], cfg.n_test, cfg.data_seed + 1, **kw)
    data = {"x_train": train["x"], "ya_train": train["y_a"], "yb_train": train["y_b"],
            "x_val": val["x"], "ya_val": val["y_a"], "yb_val": val["y_b"],
            "x_test": test["x"], "ya_test": test["y_a"], "yb_test": test["y_b"]}
    data["tuning"] = tune_lrs(cfg, data)
    return data


def tune_lrs(cfg: Config, data: dict) -> dict:
    """Equal tuning: for every variant, each lr of cfg.lr_grid trained once (seed cfg.tune_seed) and scored
    on the validation overlays (mean accuracy of the trained tasks); the best lr (ties: smaller) is kept.
    Returns {variant: {"tuned_lr", "tuned_lr_index", "grid_edge", "val_score@i", "val_acc_<task>"}}."""
    out = {}
    for variant in MTL_VARIANTS + tuple(STL_VARIANTS):
        def fit(lr: float, variant: str = variant) -> tuple[dict, float]:
            torch.manual_seed(cfg.tune_seed)  # the same initialisation stream for every (variant, lr)
            model = fit_model(cfg, data, variant, cfg.tune_seed, lr, cfg.tune_steps, None)
            acc = accuracies(cfg, model, data["x_val"], {"a": data["ya_val"], "b": data["yb_val"]})
            return acc, float(np.mean(list(acc.values())))

        acc, info = tune(cfg.lr_grid, fit, higher=True, name="lr")
        out[variant] = {**info, **{f"val_acc_{t}": v for t, v in acc.items()}}
    return out


# ----------------------------------------------------------------------------------------------------
# Model


# ----------------------------------------------------------------------------------------------------
# Train / evaluate


def fit_model(cfg: Config, data: dict, variant: str, seed: int, lr: float, steps: int, log) -> dict:
    """Train one variant at one lr for `steps` steps on the training overlays; returns {"state", "arch"}."""
    if variant not in MTL_VARIANTS and variant not in STL_VARIANTS:
        raise ValueError(f"fairgrad: unknown variant {variant!r}")
    arch = {"channels": list(cfg.channels), "hidden": cfg.hidden, "image_size": cfg.image_size,
            "tasks": list(TASKS) if variant in MTL_VARIANTS else [TASKS[STL_VARIANTS[variant]]]}
    model = build_model(arch)
    x, ys = data["x_train"], (data["ya_train"], data["yb_train"])
    gen = torch.Generator().manual_seed(seed)

    def batch_fn(step: int):
        idx = torch.randint(0, x.shape[0], (cfg.batch_size,), generator=gen)
        return _images(x[idx]), [y[idx] for y in ys]

    if variant in MTL_VARIANTS:
        options = {"fairgrad": {"alpha": cfg.alpha, "max_norm": cfg.max_norm},
                   "pcgrad": {"seed": seed, "max_norm": cfg.max_norm}}.get(variant, {})
        combine, params = ConflictCounter(make_combiner(variant, **options)), list(model.parameters())

        def loss_fn(batch):
            xb, yb = batch
            return torch.stack([F.cross_entropy(o, y) for o, y in zip(model(xb), yb)])  # (K,)
    else:
        k = STL_VARIANTS[variant]
        combine, params = None, list(model.trunk.parameters()) + list(model.heads[k].parameters())

        def loss_fn(batch):
            xb, yb = batch
            return F.cross_entropy(model.heads[k](model.trunk(xb)), yb[k])  # scalar

    optimizer = torch.optim.Adam(params, lr=lr)
    train_loop(params, batch_fn, loss_fn, optimizer, steps, log=log, log_every=cfg.log_every,
               combine=combine, shared_params=list(model.trunk.parameters()) if combine else None,
               modules=[model])
    stats = combine.stats() if combine is not None else {}
    return {"state": {k: v.detach().clone() for k, v in model.state_dict().items()}, "arch": arch, "stats": stats}


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    """The variant at the lr prepare() chose for it on validation (the choice travels with the model)."""
    tuning = data["tuning"][variant]
    model = fit_model(cfg, data, variant, seed, tuning["tuned_lr"], cfg.steps, log)
    return {**model, "tuning": {k: float(v) for k, v in tuning.items()}}


def evaluate(cfg: Config, model: dict, data: dict) -> dict:
    """Test accuracy (%) of each trained task: acc_a, acc_b (and acc_mean) for multi-task models; only
    the trained task's accuracy for a single-task model (its other head is untrained, not reported);
    plus the tuning record (tuned_lr, grid_edge, validation accuracies at the tuned lr)."""
    acc = accuracies(cfg, model, data["x_test"], {"a": data["ya_test"], "b": data["yb_test"]})
    metrics = {f"acc_{t}": v for t, v in acc.items()}
    if len(metrics) > 1:
        metrics["acc_mean"] = float(np.mean(list(metrics.values())))
    metrics.update({k: v for k, v in model.get("tuning", {}).items() if k in ("tuned_lr", "grid_edge") or k.startswith("val_acc_")})
    metrics.update({k: float(v) for k, v in model.get("stats", {}).items()})
    return metrics


# ----------------------------------------------------------------------------------------------------
# Delta-m% and the claims


def derive(cfg: Config, rows: list[dict]) -> list[dict]:
    """"<stage>/delta_m" on each multi-task row against stl_a (acc_a) and stl_b (acc_b) of the same seed and stage,
    then the view BEST (mtl_bench.derive_delta_m)."""
    return derive_delta_m(rows, MTL_VARIANTS, BASELINES, REFS, BEST)


def best_baseline(rows: list[dict]) -> str | None:
    """The baseline (LS, MGDA, PCGrad) with the lowest validation Delta-m% (mtl_bench.best_baseline)."""
    return shared_best_baseline(rows, BASELINES, REFS)


CONFLICT_MIN = 0.10  # mechanism gate: FairGrad's task gradients conflict (g_a . g_b < 0) on > 10% of its steps (fixed before v3 runs)


def comparisons(cfg: Config) -> list[Comparison]:
    """mtl_bench's Delta-m% rows (headline vs the validation-chosen best baseline, one secondary per baseline, among
    them LS, the ablation FairGrad reduces to when the tasks' gradients neither conflict nor differ in size; the
    compressed control); the headline gets the mechanism gate (measured gradient conflict in FairGrad's own training)
    and refuted_if; facts report the conflict share and the mean cosine. Grid-edge gates are directional
    (spec.Gate, report.claims.gate_blocks)."""
    rows = delta_m_comparisons("fairgrad", "FairGrad", BASELINES, "LS/MGDA/PCGrad", BEST, cfg.compare_level)
    mechanism = Gate(f"the tasks' gradients conflict in FairGrad's training: g_a . g_b < 0 on the shared trunk on > "
                     f"{CONFLICT_MIN:.0%} of its steps", variant="fairgrad", metric="conflict_frac", above=CONFLICT_MIN,
                     kind="mechanism")
    head = dataclasses.replace(rows[0], gates=rows[0].gates + (mechanism,), refuted_if=(
        "the paired 95% interval of Delta-m% (FairGrad - best baseline) lies above 0: FairGrad is worse than the "
        "validation-chosen best baseline, with its task gradients measured conflicting on > "
        f"{CONFLICT_MIN:.0%} of steps and its own lr inside the grid (a baseline on its grid edge cannot block this verdict)"))
    facts = [Comparison("conflict_frac", "fairgrad", "ls", role="fact",
                        text="share of training steps whose task gradients conflict on the shared trunk (g_a . g_b < 0): "
                             "FairGrad vs LS"),
             Comparison("mean_cos", "fairgrad", "ls", role="fact",
                        text="mean cosine of the two task gradients on the shared trunk over training: FairGrad vs LS"),
             Comparison("grad_norm_ratio", "fairgrad", "ls", role="fact",
                        text="mean ratio of the larger to the smaller task-gradient norm over training: FairGrad vs LS")]
    return [head] + rows[1:] + facts


SPEC = register_paper(PaperSpec(
    id="fairgrad",
    title="Fair Resource Allocation in Multi-Task Learning",
    claim="lower Delta-m than the baselines",
    Config=Config,
    variants=MTL_VARIANTS + tuple(STL_VARIANTS),
    prepare=prepare, train=train, compress=compress, evaluate=evaluate,
    comparisons=comparisons, derive=derive, fidelity="official-code",
    resources=("fashion_mnist", "mnist10k"),
    data="Multi-Fashion+MNIST built here: a real Fashion-MNIST item (top-left) and a real MNIST digit "
         "(bottom-right) on a 36x36 canvas, pixel-wise max, resized to 28x28; task A = fashion class, task B = digit",
    substitutions="Paper: CelebA (40 tasks), NYU-v2, Cityscapes, QM9 with large CNNs/GNNs, many epochs. Here: "
                  "two-task Multi-Fashion+MNIST (MNIST from a 10k-image pool, fixed overlay offsets), a ~21k-parameter "
                  "LeNet trunk with linear heads, a few thousand Adam steps; every variant's lr picked from the same 3-value grid "
                  "on held-out validation overlays with one tuning seed; same FairGrad solver (least squares, "
                  "alpha=2, x K, clip 1.0) and baselines as the official code",
    compression="global magnitude pruning of the shared trunk's weight tensors at each level (heads untouched, no "
                "fine-tuning); compressed Delta-m% is against single-task models pruned at the same level",
    figure="sparsity",
    weight=1,
))

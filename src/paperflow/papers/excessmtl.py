"""ExcessMTL: "Robust Multi-Task Learning with Excess Risks" (He, Zhou, Zhang, Yun, Xu, Zeng, Chilimbi, Zhao),
ICML 2024. Official code: https://github.com/yifei-he/ExcessMTL (LibMTL/LibMTL/weighting/ExcessMTL.py).

Method (paper Sec. 3-4, Algorithm 1): min_theta max_{lambda in simplex} sum_k lambda_k (L_k(theta) - L_k*), the
task weights following the excess risks E_k = L_k(theta) - L_k* instead of the losses (a noisy task has a large
Bayes error L_k*, so loss-based weighting over-weights it). E_k is estimated by a second-order Taylor expansion
with a diagonal empirical-Fisher Hessian, E_k ~ g_k^T diag(H_k)^-1 g_k / 2, which the official code computes with
an AdaGrad-style accumulator a_k += g_k^2 as w_k = g_k^T diag(1/sqrt(a_k + 1e-7)) g_k; each w_k is divided by its
value at the first step (the paper's scale normalisation across tasks) and lambda is updated by exponentiated
gradient, lambda_k <- lambda_k exp(eta w_k / w_k,first), renormalised to sum K (the code's convention; the paper
writes the simplex). Code details followed: the first step only stores the reference values (weights stay 1);
eta = robust_step_size = 1e-2 (the code's default), the same value for the GroupDRO baseline, not tuned.
The combiner is paperflow.mtl.ExcessMTLCombiner (stateful; one instance per run). Deviation: the official
code weights the losses, so the task heads also get lambda_k-weighted gradients; here train_loop gives the heads
the gradient of the summed losses (each head only sees its own task; Adam makes the per-head scale nearly moot).

Experiment (laptop-scale stand-in for the paper's MultiMNIST / Office-Home / NYUv2 noise experiments):
Multi-Fashion+MNIST (paperflow.data.multimnist.multi_fashion_mnist, the construction fairgrad uses), task a =
Fashion item (clean), task b = MNIST digit with symmetric label noise injected into a fraction `noise` of the
TRAINING labels (a uniformly random class, as the official create_dataset does; a fresh noise pattern per seed);
validation and test labels are clean. Model: fairgrad's MultiLeNet (shared conv-conv-fc trunk, linear heads).
Variants, all through train_loop's combine hook: excessmtl; ls (sum of losses); dwa (Dynamic Weight Average,
Liu et al. 2019, T = 2, an "epoch" = one pass over the training set in steps); groupdro (exponentiated gradient
on the losses); dwa_clean (DWA trained on noise-free labels: the gate that noise hurts loss-based weighting).
Equal tuning: every variant gets the same lr grid (Adam), chosen in prepare() on the clean validation overlays
(mean accuracy of both tasks) after tune_steps steps with a tuning seed (paperflow.tuning; ties to the smaller lr).
Headline: clean-task (a) test accuracy, ExcessMTL above DWA under noise. Compression: fairgrad's global magnitude
pruning of the shared trunk (no fine-tuning).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..data.multimnist import multi_fashion_mnist, symmetric_label_noise
from ..loop import train_loop
from ..mtl import make_combiner
from ..registry import register_paper
from ..spec import Comparison, Gate, PaperSpec, check
from ..mtl_bench import N_CLASSES, _images, accuracies, build_model, check_bench_config, level_name
from ..mtl_bench import compress as trunk_magnitude_compress
from ..mtl_bench import tune_lrs as shared_tune_lrs

VARIANTS = ("excessmtl", "ls", "dwa", "groupdro", "dwa_clean")
COMBINER_OF = {"excessmtl": "excessmtl", "ls": "ls", "dwa": "dwa", "groupdro": "groupdro", "dwa_clean": "dwa"}
TASKS = ("a", "b")


@dataclass(frozen=True)
class Config:
    n_train: int = 3200  # training overlays
    n_val: int = 1000  # clean validation overlays (lr selection)
    n_test: int = 2000  # clean test overlays
    mnist_test: int = 2000  # MNIST pool digits held out for the test overlays
    mnist_val: int = 1000  # MNIST pool digits held out for the validation overlays
    fashion_val: int = 6000  # Fashion-MNIST train images held out for the validation overlays
    canvas: int = 36
    image_size: int = 28
    data_seed: int = 0
    noise: float = 0.6  # fraction of task-b training labels replaced by a uniform random class (README: flip 0.6)
    noise_seed: int = 500  # noise pattern of seed s uses noise_seed + s
    channels: tuple = (10, 20)
    hidden: int = 50
    steps: int = 300
    batch_size: int = 64
    lr_grid: tuple = (0.001, 0.003, 0.01, 0.03)  # Adam; the same 4-value grid for every variant
    tune_steps: int = 150
    tune_seed: int = 1000
    step_size: float = 0.01  # robust_step_size of ExcessMTL and GroupDRO (official default)
    dwa_temperature: float = 2.0
    sparsities: tuple = (0.5, 0.8)
    compare_level: float = 0.5
    eval_batch: int = 1000
    log_every: int = 50

    def __post_init__(self) -> None:
        check_bench_config(self)
        check(0.0 <= self.noise < 1.0, f"noise must be in [0, 1), got {self.noise}")
        check(len(self.channels) == 2 and self.hidden > 0, "channels must be two conv widths and hidden > 0")
        check(self.steps > 0 and self.batch_size > 0 and self.tune_steps > 0, "steps, batch_size, tune_steps must be > 0")
        check(self.batch_size <= self.n_train, f"batch_size {self.batch_size} exceeds n_train {self.n_train}")
        check(self.step_size > 0 and self.dwa_temperature > 0, "step_size and dwa_temperature must be > 0")

    @property
    def epoch_steps(self) -> int:
        """DWA's epoch: one pass over the training set, in steps."""
        return max(1, self.n_train // self.batch_size)


def prepare(cfg: Config, res) -> dict:
    """Multi-Fashion+MNIST train/val/test overlays (clean labels; noise is injected per seed in train) and the
    tuned lr of every variant."""
    data = multi_fashion_mnist(np.load(res["fashion_mnist"]), np.load(res["mnist10k"]), cfg.n_train, cfg.n_val, cfg.n_test,
                               cfg.mnist_test, cfg.mnist_val, cfg.fashion_val, cfg.data_seed, cfg.canvas, cfg.image_size)
    data["tuning"] = tune_lrs(cfg, data)
    return data


def tune_lrs(cfg: Config, data: dict) -> dict:
    """Equal tuning (mtl_bench.tune_lrs): every entry of VARIANTS, the same lr grid, scored on validation accuracy."""
    return shared_tune_lrs(cfg, data, VARIANTS, fit_model)


def fit_model(cfg: Config, data: dict, variant: str, seed: int, lr: float, steps: int, log) -> dict:
    """One run of `variant` (noisy task-b labels unless dwa_clean) at one lr; returns {"state", "arch", "weights"}."""
    if variant not in VARIANTS:
        raise ValueError(f"excessmtl: unknown variant {variant!r}; known: {VARIANTS}")
    torch.manual_seed(seed)
    arch = {"channels": list(cfg.channels), "hidden": cfg.hidden, "image_size": cfg.image_size, "tasks": list(TASKS)}
    model = build_model(arch)
    x, ya, yb = data["x_train"], data["ya_train"], data["yb_train"]
    if variant != "dwa_clean" and cfg.noise > 0:
        yb, _ = symmetric_label_noise(yb, cfg.noise, N_CLASSES, cfg.noise_seed + seed)
    gen = torch.Generator().manual_seed(seed)

    def batch_fn(step: int):
        idx = torch.randint(0, x.shape[0], (cfg.batch_size,), generator=gen)
        return _images(x[idx]), ya[idx], yb[idx]

    def loss_fn(batch):
        xb, a, b = batch
        out = model(xb)
        return torch.stack([F.cross_entropy(out[0], a), F.cross_entropy(out[1], b)])  # (K,)

    name = COMBINER_OF[variant]
    options = {"excessmtl": {"step_size": cfg.step_size}, "groupdro": {"step_size": cfg.step_size},
               "dwa": {"period": cfg.epoch_steps, "temperature": cfg.dwa_temperature}}.get(name, {})
    combine = make_combiner(name, **options)
    params = list(model.parameters())
    train_loop(params, batch_fn, loss_fn, torch.optim.Adam(params, lr=lr), steps, log=log, log_every=cfg.log_every,
               combine=combine, shared_params=list(model.trunk.parameters()), modules=[model])
    weights = getattr(combine, "weights", None)
    if weights is None:
        weights = getattr(combine, "last_weights", None)
    weights = [1.0, 1.0] if weights is None else [float(w) for w in weights]
    return {"state": {k: v.detach().clone() for k, v in model.state_dict().items()}, "arch": arch, "weights": weights}


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    tuning = data["tuning"][variant]
    model = fit_model(cfg, data, variant, seed, tuning["tuned_lr"], cfg.steps, log)
    return {**model, "tuning": {k: float(v) for k, v in tuning.items()}}


def evaluate(cfg: Config, model: dict, data: dict) -> dict:
    """Clean test accuracy (%) per task and their mean, the final task weights (weight_b: the noisy task's
    share of sum K) and the tuning record."""
    acc = accuracies(cfg, model, data["x_test"], {"a": data["ya_test"], "b": data["yb_test"]})
    metrics = {f"acc_{t}": v for t, v in acc.items()}
    metrics["acc_mean"] = float(np.mean(list(acc.values())))
    if "weights" in model:
        metrics["weight_b"] = float(model["weights"][1])
    metrics.update({k: v for k, v in model.get("tuning", {}).items() if k in ("tuned_lr", "grid_edge") or k.startswith("val_acc_")})
    return metrics


def compress(cfg: Config, model: dict, data: dict, variant: str, seed: int) -> dict:
    """Global magnitude pruning of the shared trunk's weights at each level (fairgrad's compress)."""
    return {name: {**m, "weights": model.get("weights", [1.0, 1.0])}
            for name, m in trunk_magnitude_compress(cfg, model, data, variant, seed).items()}


def comparisons(cfg: Config) -> list[Comparison]:
    def lr_gates(*variants: str) -> tuple[Gate, ...]:
        return tuple(Gate(f"{v}: tuned lr inside the grid", variant=v, metric="grid_edge", below=0.5) for v in variants)

    noise_hurts = Gate("label noise on task b hurts DWA's clean task a (noise-free DWA above noisy DWA)",
                       comparison=Comparison("acc_a", "dwa_clean", "dwa", better="higher", role="control"))
    rows = [Comparison("acc_a", "excessmtl", "dwa", better="higher", role="headline", gates=(noise_hurts,) + lr_gates("excessmtl", "dwa"),
                       text="under label noise on task b, ExcessMTL keeps the clean task a more accurate than DWA (loss-based weighting)")]
    rows += [Comparison("acc_a", "excessmtl", b, better="higher", role="secondary", gates=lr_gates("excessmtl", b),
                        text=f"clean-task accuracy: ExcessMTL above {b.upper()} under noise") for b in ("groupdro", "ls")]
    rows.append(Comparison("acc_mean", "excessmtl", "dwa", better="higher", role="secondary", gates=lr_gates("excessmtl", "dwa"),
                           text="mean clean-test accuracy of both tasks: ExcessMTL above DWA under noise"))
    rows.append(Comparison("acc_a", "dwa_clean", "dwa", better="higher", role="control",
                           text="premise: noise on task b lowers DWA's clean-task accuracy (noise-free DWA vs noisy DWA)"))
    rows.append(Comparison("weight_b", "excessmtl", "groupdro", better="lower", role="control",
                           text="final weight of the noisy task: ExcessMTL below GroupDRO (loss-based weighting up-weights it)"))
    level = level_name(cfg.compare_level)
    rows.append(Comparison("acc_a", "excessmtl", "dwa", better="higher", stage="compressed", level=level, role="control",
                           text=f"clean-task accuracy with the trunk pruned to {level}: ExcessMTL above DWA"))
    return rows


SPEC = register_paper(PaperSpec(
    id="excessmtl",
    title="Robust Multi-Task Learning with Excess Risks",
    claim="ExcessMTL keeps clean tasks accurate where loss-based weighting degrades",
    Config=Config,
    variants=VARIANTS,
    prepare=prepare, train=train, compress=compress, evaluate=evaluate, comparisons=comparisons,
    fidelity="official-code",
    resources=("fashion_mnist", "mnist10k"),
    data="Multi-Fashion+MNIST (real Fashion-MNIST item top-left, real MNIST digit bottom-right, 28x28), task b's "
         "training labels with symmetric noise (a fraction replaced by a uniform random class); clean validation and test",
    substitutions="Paper: MultiMNIST, Office-Home, NYUv2 with a CNN/ResNet and many epochs. Here: two-task Multi-Fashion+MNIST, "
                  "a few thousand training overlays, a ~21k-parameter LeNet trunk, a few hundred Adam steps; one noise level; "
                  "every variant's lr from the same 4-value grid on clean validation data; eta = 1e-2 for ExcessMTL and GroupDRO "
                  "(code default, not tuned); heads get the unweighted gradient (train_loop), the official code weights them too",
    compression="global magnitude pruning of the shared trunk's weight tensors at each level (heads untouched, no fine-tuning)",
    figure="sparsity",
    weight=1,
))

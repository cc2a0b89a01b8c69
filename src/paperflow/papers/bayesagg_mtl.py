"""BayesAgg-MTL: "Bayesian Uncertainty for Gradient Aggregation in Multi-Task Learning" (Achituve, Diamant, Netzer,
Chechik, Fetaya), ICML 2024. Official code: https://github.com/ssi-research/BayesAgg_MTL (BayesAgg_MTL/BayesAggMTL.py).

Method (paper Sec. 3): each task's last layer theta_k = [W_k, b_k] gets a Gaussian posterior given the shared
representation h; this induces a distribution over the task's gradient with respect to h. For a multi-class task
(Sec. 3.3) the posterior is the Taylor (Laplace / GGN) approximation: precision = sum_m J_m^T H_m J_m + prior
precision, mean = theta - precision^-1 (grad of the summed batch loss + prior term) (one Newton step from the
current head), and the moments of dL_m/dh_m = W^T (softmax(W h_m + b) - y_m) are estimated by Monte Carlo.
Aggregation (Eq. 5, GaussianAgg.aggregate): per example m and dimension d, d_md = sum_k Lambda_kmd mu_kmd /
sum_k Lambda_kmd with Lambda = 1 / Var^p, divided by the batch size (the official code's normalisation); d is
backpropagated from h through the shared trunk; the heads get the gradient of the summed task losses. The math is
in paperflow.mtl (laplace_multiclass_posterior, mc_grad_moments_multiclass, bayesagg_aggregate). Code details
followed: the batch posterior's prior is the "full data" posterior (prior N(0, gamma I), Laplace around the current
heads) computed at the start of each epoch from the representations and labels collected during the previous
epoch; the first ls_epochs epochs train with linear scalarisation; gamma = 0.005 and sqrt_power p = 0.1 as their
UTKFace run (its multi-class tasks). Deviations: 64 MC samples (official 1024) for CPU cost; no clipping of the
heads' gradients at norm 50; Adam at a constant lr (no step schedule).
Regression tasks (the closed-form posterior of Sec. 3.2) are not exercised: the setting here is the catalog's
Multi-Fashion+MNIST, two 10-class classification tasks (the paper's classification path, CIFAR-MTL/ChestX-ray).

Experiment: Multi-Fashion+MNIST (paperflow.data.multimnist.multi_fashion_mnist; fairgrad's construction and
MultiLeNet). Variants: bayesagg; ls, mgda, nashmtl (paperflow.mtl combiners; Nash-MTL's bargaining solve by scipy
least squares because cvxpy is not installed); stl (both single-task models, trained in one job). Metric:
Delta-m% against the same seed's single-task models (lower is better). Equal tuning: every method and each
single-task model gets the same lr grid, chosen in prepare() on validation overlays; the best baseline of the
headline is the one with the lowest VALIDATION Delta-m% (as fairgrad does). Compression: fairgrad's global
magnitude pruning of the shared trunk, Delta-m% against the single-task models pruned at the same level.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..data.multimnist import multi_fashion_mnist
from ..loop import train_loop
from ..mtl import bayesagg_aggregate, laplace_multiclass_posterior, make_combiner, mc_grad_moments_multiclass
from ..registry import register_paper
from ..spec import Comparison, PaperSpec, check
from ..mtl_bench import _images, accuracies, build_model, check_bench_config
from ..mtl_bench import compress as trunk_magnitude_compress
from ..mtl_bench import best_baseline as shared_best_baseline, delta_m_comparisons, derive_delta_m
from ..mtl_bench import tune_lrs as shared_tune_lrs

MTL_VARIANTS = ("bayesagg", "ls", "mgda", "nashmtl")
BASELINES = ("ls", "mgda", "nashmtl")
VARIANTS = MTL_VARIANTS + ("stl",)
STL = {"stl_a": 0, "stl_b": 1}  # single-task models (tuned separately, trained in the "stl" job)
TUNED = MTL_VARIANTS + tuple(STL)
TASKS = ("a", "b")
BEST = "ref|best_baseline"
REFS = {"a": "stl", "b": "stl"}  # task -> the single-task variant whose accuracy is that task's Delta-m% reference


@dataclass(frozen=True)
class Config:
    n_train: int = 3200
    n_val: int = 1000
    n_test: int = 2000
    mnist_test: int = 2000
    mnist_val: int = 1000
    fashion_val: int = 6000
    canvas: int = 36
    image_size: int = 28
    data_seed: int = 0
    channels: tuple = (10, 20)
    hidden: int = 50
    steps: int = 250
    batch_size: int = 64
    lr_grid: tuple = (0.001, 0.003, 0.01, 0.03)  # Adam; the same 4-value grid for every variant
    tune_steps: int = 100
    tune_seed: int = 1000
    gamma: float = 0.005  # prior variance of the heads (official UTKFace value)
    sqrt_power: float = 0.1  # variances raised to this power before weighting (official multi-class value)
    mc_samples: int = 64
    ls_epochs: int = 1  # linear-scalarisation warm-up epochs (an epoch = n_train // batch_size steps)
    nash_max_norm: float = 1.0
    sparsities: tuple = (0.5, 0.8)
    compare_level: float = 0.5
    eval_batch: int = 1000
    log_every: int = 50

    def __post_init__(self) -> None:
        check_bench_config(self)
        check(len(self.channels) == 2 and self.hidden > 0, "channels must be two conv widths and hidden > 0")
        check(self.steps > 0 and self.tune_steps > 0 and 0 < self.batch_size <= self.n_train, "steps, tune_steps > 0, batch_size in (0, n_train]")
        check(self.gamma > 0 and self.sqrt_power > 0 and self.mc_samples >= 2, "gamma > 0, sqrt_power > 0, mc_samples >= 2")
        check(self.ls_epochs >= 1, f"ls_epochs must be >= 1 (the first posterior needs an epoch of features), got {self.ls_epochs}")
        check(self.nash_max_norm >= 0, "nash_max_norm must be >= 0")

    @property
    def epoch_steps(self) -> int:
        return max(1, self.n_train // self.batch_size)


def prepare(cfg: Config, res) -> dict:
    data = multi_fashion_mnist(np.load(res["fashion_mnist"]), np.load(res["mnist10k"]), cfg.n_train, cfg.n_val, cfg.n_test,
                               cfg.mnist_test, cfg.mnist_val, cfg.fashion_val, cfg.data_seed, cfg.canvas, cfg.image_size)
    data["tuning"] = tune_lrs(cfg, data)
    return data


def tune_lrs(cfg: Config, data: dict) -> dict:
    """Equal tuning (mtl_bench.tune_lrs): every entry of TUNED, the same lr grid, scored on validation accuracy."""
    return shared_tune_lrs(cfg, data, TUNED, fit_one)


class BayesAggObjective:
    """loss_fn for train_loop: returns a scalar whose value is sum_k L_k and whose gradient is the summed-loss
    gradient for the heads and the BayesAgg direction (backpropagated from h) for the trunk."""

    def __init__(self, cfg: Config, model, seed: int):
        self.cfg, self.model, self.step = cfg, model, 0
        self.gen = torch.Generator().manual_seed(seed + 7919)
        self.feats: list[torch.Tensor] = []
        self.labels: list[list[torch.Tensor]] = [[] for _ in TASKS]
        self.prior: list[tuple[torch.Tensor, torch.Tensor]] | None = None

    def head_theta(self, k: int) -> torch.Tensor:
        head = self.model.heads[k]
        return torch.cat([head.weight, head.bias[:, None]], 1).detach().double()  # (C, D+1)

    def full_posteriors(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per task: Laplace posterior on the previous epoch's representations, prior N(0, gamma I), around the
        current head -> (mean, precision) used as the prior of every batch posterior of this epoch."""
        h = torch.cat(self.feats).double()
        out = []
        for k in range(len(TASKS)):
            theta = self.head_theta(k)
            n = theta.numel()
            prec0 = torch.eye(n, dtype=torch.float64) / self.cfg.gamma
            mean, L = laplace_multiclass_posterior(h, torch.cat(self.labels[k]), theta, torch.zeros(n, dtype=torch.float64), prec0)
            out.append((mean, L @ L.T))
        return out

    def __call__(self, batch) -> torch.Tensor:
        xb, ys = batch
        epoch = self.cfg.epoch_steps
        if self.step > 0 and self.step % epoch == 0:
            if self.step >= self.cfg.ls_epochs * epoch:
                self.prior = self.full_posteriors()
            self.feats, self.labels = [], [[] for _ in TASKS]
        z = self.model.trunk(xb)  # (B, D)
        zd = z.detach()
        self.feats.append(zd)
        for k, y in enumerate(ys):
            self.labels[k].append(y)
        warmup = self.step < self.cfg.ls_epochs * epoch
        self.step += 1
        if warmup:  # linear scalarisation
            return sum(F.cross_entropy(head(z), y) for head, y in zip(self.model.heads, ys))
        head_loss = sum(F.cross_entropy(head(zd), y) for head, y in zip(self.model.heads, ys))
        mus, variances = [], []
        for k, y in enumerate(ys):
            mean, L = laplace_multiclass_posterior(zd.double(), y, self.head_theta(k), *self.prior[k])
            mu, var = mc_grad_moments_multiclass(zd.double(), y, mean, L, self.cfg.mc_samples, self.gen)
            mus.append(mu)
            variances.append(var)
        d = bayesagg_aggregate(torch.stack(mus), torch.stack(variances), self.cfg.sqrt_power).to(z.dtype)  # (B, D)
        surrogate = (z * d).sum()
        return head_loss + surrogate - surrogate.detach()


def fit_one(cfg: Config, data: dict, name: str, seed: int, lr: float, steps: int, log) -> dict:
    """One run of a method (TUNED name) at one lr; returns {"state", "arch"}."""
    if name not in TUNED:
        raise ValueError(f"bayesagg_mtl: unknown method {name!r}; known: {TUNED}")
    torch.manual_seed(seed)
    tasks = list(TASKS) if name in MTL_VARIANTS else [TASKS[STL[name]]]
    arch = {"channels": list(cfg.channels), "hidden": cfg.hidden, "image_size": cfg.image_size, "tasks": tasks}
    model = build_model(arch)
    x, ys = data["x_train"], (data["ya_train"], data["yb_train"])
    gen = torch.Generator().manual_seed(seed)

    def batch_fn(step: int):
        idx = torch.randint(0, x.shape[0], (cfg.batch_size,), generator=gen)
        return _images(x[idx]), [y[idx] for y in ys]

    combine, shared = None, None
    params = list(model.parameters())
    if name == "bayesagg":
        loss_fn = BayesAggObjective(cfg, model, seed)
    elif name in MTL_VARIANTS:
        combine = make_combiner(name, **({"max_norm": cfg.nash_max_norm} if name == "nashmtl" else {}))
        shared = list(model.trunk.parameters())

        def loss_fn(batch):
            xb, yb = batch
            return torch.stack([F.cross_entropy(o, y) for o, y in zip(model(xb), yb)])  # (K,)
    else:
        k = STL[name]
        params = list(model.trunk.parameters()) + list(model.heads[k].parameters())

        def loss_fn(batch):
            xb, yb = batch
            return F.cross_entropy(model.heads[k](model.trunk(xb)), yb[k])

    train_loop(params, batch_fn, loss_fn, torch.optim.Adam(params, lr=lr), steps, log=log, log_every=cfg.log_every,
               combine=combine, shared_params=shared, modules=[model])
    return {"state": {k: v.detach().clone() for k, v in model.state_dict().items()}, "arch": arch}


def _tuning(record: dict) -> dict:
    return {k: float(v) for k, v in record.items()}


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    """A method at its tuned lr; "stl" trains both single-task models (each at its own tuned lr)."""
    if variant == "stl":
        return {name: {**fit_one(cfg, data, name, seed, data["tuning"][name]["tuned_lr"], cfg.steps, log),
                       "tuning": _tuning(data["tuning"][name])} for name in STL}
    model = fit_one(cfg, data, variant, seed, data["tuning"][variant]["tuned_lr"], cfg.steps, log)
    return {**model, "tuning": _tuning(data["tuning"][variant])}


def evaluate(cfg: Config, model: dict, data: dict) -> dict:
    """Test accuracy (%) per task (for "stl": each task from its single-task model), their mean, and the tuning
    record (tuned_lr, grid_edge; for "stl" per model)."""
    ys = {"a": data["ya_test"], "b": data["yb_test"]}
    def keep(rec: dict) -> dict:
        return {k: v for k, v in rec.items() if k in ("tuned_lr", "grid_edge") or k.startswith("val_acc_")}

    if "stl_a" in model:
        metrics = {}
        for name, t in zip(STL, TASKS):
            metrics[f"acc_{t}"] = accuracies(cfg, model[name], data["x_test"], ys)[t]
            rec = keep(model[name].get("tuning", {}))
            metrics.update({(k if k.startswith("val_acc_") else f"{k}_{t}"): v for k, v in rec.items()})
        if "grid_edge_a" in metrics:
            metrics["grid_edge"] = max(metrics["grid_edge_a"], metrics["grid_edge_b"])
    else:
        metrics = {f"acc_{t}": v for t, v in accuracies(cfg, model, data["x_test"], ys).items()}
        metrics.update(keep(model.get("tuning", {})))
    metrics["acc_mean"] = float(np.mean([metrics["acc_a"], metrics["acc_b"]]))
    return metrics


def compress(cfg: Config, model: dict, data: dict, variant: str, seed: int) -> dict:
    """Global magnitude pruning of the shared trunk at each level (fairgrad's compress; each STL model alike)."""
    if "stl_a" in model:
        parts = {name: trunk_magnitude_compress(cfg, model[name], data, variant, seed) for name in STL}
        return {lvl: {name: parts[name][lvl] for name in STL} for lvl in parts["stl_a"]}
    return trunk_magnitude_compress(cfg, model, data, variant, seed)


def best_baseline(rows: list[dict]) -> str | None:
    """The baseline with the lowest validation Delta-m% against the tuned STL models (mtl_bench.best_baseline)."""
    return shared_best_baseline(rows, BASELINES, REFS)


def derive(cfg: Config, rows: list[dict]) -> list[dict]:
    """"<stage>/delta_m" for every multi-task row against the same seed's "stl" row (it trains both tasks) at the
    same stage, then the view BEST (mtl_bench.derive_delta_m)."""
    return derive_delta_m(rows, MTL_VARIANTS, BASELINES, REFS, BEST)


def comparisons(cfg: Config) -> list[Comparison]:
    return delta_m_comparisons("bayesagg", "BayesAgg-MTL", BASELINES, "LS/MGDA/Nash-MTL", BEST, cfg.compare_level)


SPEC = register_paper(PaperSpec(
    id="bayesagg_mtl",
    title="Bayesian Uncertainty for Gradient Aggregation in Multi-Task Learning",
    claim="lower Delta-m than the baselines",
    Config=Config,
    variants=VARIANTS,
    prepare=prepare, train=train, compress=compress, evaluate=evaluate, comparisons=comparisons, derive=derive,
    fidelity="official-code",
    resources=("fashion_mnist", "mnist10k"),
    data="Multi-Fashion+MNIST (real Fashion-MNIST item top-left, real MNIST digit bottom-right, 28x28): two 10-class tasks",
    substitutions="Paper: CIFAR-MTL (20 binary tasks), ChestX-ray14, UTKFace (regression + classification), QM9 with larger "
                  "networks and many epochs. Here: two multi-class tasks on Multi-Fashion+MNIST (the classification path "
                  "only), a ~21k-parameter LeNet trunk, a few hundred Adam steps, 64 MC samples (official 1024); Nash-MTL "
                  "solved with scipy least squares (cvxpy not installed); every method's and single-task model's lr from "
                  "the same 4-value grid on validation overlays",
    compression="global magnitude pruning of the shared trunk's weight tensors at each level (heads untouched, no "
                "fine-tuning); compressed Delta-m% is against the single-task models pruned at the same level",
    figure="sparsity",
    weight=1,
))

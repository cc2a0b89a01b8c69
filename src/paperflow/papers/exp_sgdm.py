"""Exp-SGDM: "Random Scaling and Momentum for Non-smooth Non-convex Optimization" (Qinzi Zhang, Ashok Cutkosky),
ICML 2024 (arXiv 2405.09742).

Method (paper text; no official code is public; only the abstract and summaries of Sections 3-4 were retrievable
offline, which state the algorithm, "scale the update at each time point by an exponentially distributed random
scalar", gradients evaluated at the iterates themselves): the Exponentiated online-to-non-convex conversion
with online gradient descent as the online learner is SGD with momentum whose update is scaled, at every step, by
one random scalar s_n ~ Exp(1):  x_n = x_{n-1} + s_n Delta_n,  g_n = grad f(x_n, z_n),  Delta_{n+1} = beta Delta_n
- eta g_n (heavy-ball momentum, the gradient taken at the randomly scaled iterate itself). The optimizer is
paperflow.optim.ExpSGDM (scale=1 is torch.optim.SGD bit for bit, tests/test_optim.py). Two parts of the theory
are not used in the experiment, as in the paper's own CIFAR-10 experiment: the clip of Delta to a ball of
radius D (ExpSGDM.max_delta_norm=None) and the output rule that averages iterates over windows (we evaluate the
last iterate, as practice does). The paper's guarantee is for (c, eps)-stationary points of non-smooth
non-convex losses; its experiment (ResNet-18 / CIFAR-10) shows random scaling costs nothing against SGDM.

Experiment here: the two networks the catalog names, both non-smooth (ReLU, max-pooling), on real Fashion-MNIST:
a ReLU MLP (784-128-10) and a small CNN (two stride-2 3x3 convolutions with ReLU, 2x2 max-pool, linear head),
trained with mini-batch SGDM (momentum 0.9, dampening 0) and with Exp-SGDM for the same number of steps.
Equal tuning (paperflow.tuning): each (optimizer, network) picks its lr from the same 3-value grid by
validation accuracy (images held out of the training subset), trained once with a tuning seed in prepare().
Metrics (evaluate): final training loss on a fixed subset of the training images, test accuracy, and the norm
of the full gradient on a fixed probe set of training images; the gradient-norm curve is logged along
training (val/grad_norm_<net>). Headline: the final training loss (mean of the two networks) of Exp-SGDM is
within 5% of SGDM's or lower (kind "close", margin fixed in the config before any run).

Compression: global magnitude pruning of each network's weight matrices/kernels (biases kept) at cfg.sparsities,
no fine-tuning; a control row compares Exp-SGDM with SGDM at cfg.compare_level.

Tuning history (disclosed): the lr grid grew from 3 to 4 values (0.003 ... 0.1) for both optimizers after a pilot
put Exp-SGDM's MLP choice on the lower edge (validation accuracy, never test).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..compress.magnitude import level_name, magnitude_levels
from ..data.images import batches, load_fashion, subset, to_float
from ..loop import train_loop
from ..optim import ExpSGDM
from ..registry import register_paper
from ..spec import Comparison, Gate, PaperSpec, check
from ..tuning import tune

VARIANTS = ("exp_sgdm", "sgdm")
NETS = ("mlp", "cnn")


@dataclass(frozen=True)
class Config:
    n_train: int = 10000  # Fashion-MNIST training images (a fixed subset)
    n_val: int = 2000  # held out of the training images, for lr selection
    n_test: int = 5000  # Fashion-MNIST test images (a fixed subset)
    n_train_eval: int = 5000  # training images on which the final training loss is measured
    n_probe: int = 1000  # training images of the gradient-norm probe
    data_seed: int = 0
    mlp_hidden: int = 128
    cnn_channels: tuple = (8, 16)
    steps: int = 500  # optimizer steps per network
    batch_size: int = 64
    momentum: float = 0.9
    lr_grid: tuple = (0.003, 0.01, 0.03, 0.1)  # every (optimizer, network) picks one on validation
    tune_steps: int = 500
    tune_seed: int = 1000
    margin: float = 0.05  # headline "close": at most 5% above SGDM's training loss
    acc_margin: float = 0.02  # test accuracy rows: at most 2% (relative) below SGDM
    sparsities: tuple = (0.5, 0.8)
    compare_level: float = 0.5
    probe_every: int = 50  # gradient-norm curve resolution (steps)
    log_every: int = 50
    eval_batch: int = 1000

    def __post_init__(self) -> None:
        for name in ("cnn_channels", "lr_grid", "sparsities"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        check(self.n_train > self.n_val > 0, f"need n_train > n_val > 0, got {self.n_train}, {self.n_val}")
        check(0 < self.n_train_eval <= self.n_train - self.n_val, "n_train_eval must be in (0, n_train - n_val]")
        check(0 < self.n_probe <= self.n_train - self.n_val, "n_probe must be in (0, n_train - n_val]")
        check(self.n_test > 0 and self.mlp_hidden > 0, "n_test and mlp_hidden must be > 0")
        check(len(self.cnn_channels) == 2 and all(c > 0 for c in self.cnn_channels), f"cnn_channels: 2 positive ints, got {self.cnn_channels}")
        check(self.steps > 0 and self.tune_steps > 0 and self.batch_size > 0, "steps, tune_steps, batch_size must be > 0")
        check(0 <= self.momentum < 1, f"momentum must be in [0, 1), got {self.momentum}")
        check(len(self.lr_grid) >= 1 and all(lr > 0 for lr in self.lr_grid) and list(self.lr_grid) == sorted(self.lr_grid),
              f"lr_grid must be positive and ascending, got {self.lr_grid}")
        check(self.margin >= 0 and self.acc_margin >= 0, "margins must be >= 0")
        check(all(0 <= s < 1 for s in self.sparsities), f"sparsities must be in [0, 1), got {self.sparsities}")
        check(self.compare_level in self.sparsities, f"compare_level must be one of sparsities {self.sparsities}")
        check(self.probe_every > 0 and self.log_every > 0 and self.eval_batch > 0, "probe_every, log_every, eval_batch must be > 0")


# ---------------------------------------------------------------------------------------------------- data, nets


def prepare(cfg: Config, res) -> dict:
    """Fixed Fashion-MNIST subsets (uint8): train (with the validation images held out), validation, test;
    then every (optimizer, network)'s lr chosen on validation (tune_lrs)."""
    d = load_fashion(res["fashion_mnist"])
    x, y = subset(d["x_train"], d["y_train"].long(), cfg.n_train, cfg.data_seed)
    xt, yt = subset(d["x_test"], d["y_test"].long(), cfg.n_test, cfg.data_seed + 1)
    data = {"x_train": x[cfg.n_val:].contiguous(), "y_train": y[cfg.n_val:].contiguous(),
            "x_val": x[:cfg.n_val].contiguous(), "y_val": y[:cfg.n_val].contiguous(),
            "x_test": xt.contiguous(), "y_test": yt.contiguous()}
    data["tuning"] = tune_lrs(cfg, data)
    return data


def tune_lrs(cfg: Config, data: dict) -> dict:
    """{variant: {net: tuning record}}: each lr of cfg.lr_grid trained for tune_steps with tune_seed, validation
    accuracy kept (ties to the smaller lr); the same grid, steps and rule for both optimizers."""
    out: dict = {}
    for variant in VARIANTS:
        out[variant] = {}
        for net in NETS:
            def fit(lr: float, variant: str = variant, net: str = net):
                torch.manual_seed(cfg.tune_seed)
                state = fit_net(cfg, data, variant, net, cfg.tune_seed, lr, cfg.tune_steps, None)
                return None, accuracy(cfg, net, state, data["x_val"], data["y_val"])

            _, info = tune(cfg.lr_grid, fit, higher=True, name="lr")
            out[variant][net] = info
    return out


def build_net(net: str, cfg: Config) -> nn.Module:
    if net == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, cfg.mlp_hidden), nn.ReLU(), nn.Linear(cfg.mlp_hidden, 10))
    if net == "cnn":
        c1, c2 = cfg.cnn_channels  # 28 -> 14 -> 7 -> max-pool 3
        return nn.Sequential(nn.Conv2d(1, c1, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(c1, c2, 3, stride=2, padding=1),
                             nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(c2 * 9, 10))
    raise ValueError(f"exp_sgdm: unknown network {net!r}; known: {NETS}")


def _load(cfg: Config, net: str, state: dict) -> nn.Module:
    m = build_net(net, cfg)
    m.load_state_dict(state)
    return m.eval()


def make_optimizer(variant: str, params, lr: float, cfg: Config, seed: int) -> torch.optim.Optimizer:
    """Exp-SGDM (an Exp(1) draw per step from a generator of the run's seed) or SGDM (the same class, scale 1)."""
    if variant not in VARIANTS:
        raise ValueError(f"exp_sgdm: unknown variant {variant!r}; known: {VARIANTS}")
    return ExpSGDM(params, lr=lr, momentum=cfg.momentum, scale="exp" if variant == "exp_sgdm" else 1.0, seed=seed + 7919)


def full_grad_norm(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """(loss, ||grad||_2) of the mean cross-entropy over the images x (uint8) with labels y."""
    params = [p for p in model.parameters()]
    with torch.enable_grad():
        loss = F.cross_entropy(model(to_float(x)), y)
        grads = torch.autograd.grad(loss, params)
    return float(loss.detach()), float(torch.sqrt(sum((g * g).sum() for g in grads)))


def fit_net(cfg: Config, data: dict, variant: str, net: str, seed: int, lr: float, steps: int, log) -> dict:
    """Train one network with one optimizer; returns its state dict. Batches come from a generator of `seed`;
    with a log callback, the loss and the probe gradient norm are logged as "<net>/..." curves."""
    model = build_net(net, cfg)
    x, y = data["x_train"], data["y_train"]
    gen = torch.Generator().manual_seed(seed)
    probe = (x[: cfg.n_probe], y[: cfg.n_probe])

    def batch_fn(step: int):
        idx = torch.randint(0, x.shape[0], (cfg.batch_size,), generator=gen)
        return to_float(x[idx]), y[idx]

    def loss_fn(batch):
        return F.cross_entropy(model(batch[0]), batch[1])

    def probe_fn():
        loss, gnorm = full_grad_norm(model, *probe)
        return {"grad_norm": gnorm, "loss": loss}

    net_log = None if log is None else (lambda step, **m: log(step, **{f"{net}/{k}": v for k, v in m.items()}))
    opt = make_optimizer(variant, model.parameters(), lr, cfg, seed)
    train_loop(model.parameters(), batch_fn, loss_fn, opt, steps, log=net_log, log_every=cfg.log_every,
               eval_fn=probe_fn if log is not None else None, eval_every=cfg.probe_every, modules=[model])
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    """Both networks, each at the lr prepare() chose for (variant, network)."""
    out: dict = {"tuning": {}}
    for net in NETS:
        rec = data["tuning"][variant][net]
        out[net] = fit_net(cfg, data, variant, net, seed, rec["tuned_lr"], cfg.steps, log)
        out["tuning"][net] = {k: float(v) for k, v in rec.items()}
    return out


# ---------------------------------------------------------------------------------------------------- evaluate


@torch.no_grad()
def accuracy(cfg: Config, net: str, state: dict, x: torch.Tensor, y: torch.Tensor) -> float:
    m = _load(cfg, net, state)
    correct = sum(int((m(to_float(x[a:b])).argmax(-1) == y[a:b]).sum()) for a, b in batches(x.shape[0], cfg.eval_batch))
    return 100.0 * correct / x.shape[0]


@torch.no_grad()
def mean_loss(cfg: Config, net: str, state: dict, x: torch.Tensor, y: torch.Tensor) -> float:
    m = _load(cfg, net, state)
    total = sum(float(F.cross_entropy(m(to_float(x[a:b])), y[a:b], reduction="sum")) for a, b in batches(x.shape[0], cfg.eval_batch))
    return total / x.shape[0]


def evaluate(cfg: Config, model: dict, data: dict) -> dict:
    """Per network: final training loss (fixed training subset), test accuracy (%), full-gradient norm on the
    probe set; their means over the two networks; the tuned lr of each network and grid_edge (1 if any network's
    lr is on the grid's edge)."""
    xe, ye = data["x_train"][: cfg.n_train_eval], data["y_train"][: cfg.n_train_eval]
    out: dict = {}
    for net in NETS:
        out[f"train_loss_{net}"] = mean_loss(cfg, net, model[net], xe, ye)
        out[f"test_acc_{net}"] = accuracy(cfg, net, model[net], data["x_test"], data["y_test"])
        out[f"grad_norm_{net}"] = full_grad_norm(_load(cfg, net, model[net]), data["x_train"][: cfg.n_probe], data["y_train"][: cfg.n_probe])[1]
    for key in ("train_loss", "test_acc", "grad_norm"):
        out[key] = sum(out[f"{key}_{net}"] for net in NETS) / len(NETS)
    for net, rec in model.get("tuning", {}).items():
        out[f"tuned_lr_{net}"] = rec["tuned_lr"]
    if model.get("tuning"):
        out["grid_edge"] = max(rec["grid_edge"] for rec in model["tuning"].values())
    return out


def compress(cfg: Config, model: dict, data: dict, variant: str, seed: int) -> dict:
    """Global magnitude pruning of each network's weight matrices and kernels (biases kept), per network."""
    levels = {net: magnitude_levels(model[net], cfg.sparsities, exclude=("bias",)) for net in NETS}
    return {level_name(s): {net: levels[net][level_name(s)] for net in NETS} for s in cfg.sparsities}


# ---------------------------------------------------------------------------------------------------- claims


def comparisons(cfg: Config) -> list[Comparison]:
    gates = (Gate("SGDM learns (test accuracy above chance)", variant="sgdm", metric="test_acc", above=30.0),
             Gate("exp_sgdm: tuned lr inside the grid", variant="exp_sgdm", metric="grid_edge", below=0.5),
             Gate("sgdm: tuned lr inside the grid", variant="sgdm", metric="grid_edge", below=0.5))
    m = cfg.margin
    rows = [Comparison("train_loss", "exp_sgdm", "sgdm", better="lower", kind="close", margin=m, role="headline", gates=gates,
                       text=f"Exp-SGDM's final training loss (mean of ReLU MLP and CNN) is within {m:.0%} of SGDM's or lower")]
    rows += [Comparison(f"train_loss_{net}", "exp_sgdm", "sgdm", better="lower", kind="close", margin=m, role="secondary", gates=gates,
                        text=f"{net.upper()}: Exp-SGDM's final training loss within {m:.0%} of SGDM's or lower") for net in NETS]
    rows.append(Comparison("test_acc", "exp_sgdm", "sgdm", better="higher", kind="close", margin=cfg.acc_margin, role="secondary",
                           gates=gates, text=f"Exp-SGDM's test accuracy within {cfg.acc_margin:.0%} of SGDM's or higher"))
    rows.append(Comparison("grad_norm", "exp_sgdm", "sgdm", better="lower", kind="better", role="control",
                           text="final full-gradient norm (probe set): Exp-SGDM vs SGDM (diagnostic, two-sided)"))
    level = level_name(cfg.compare_level)
    rows.append(Comparison("test_acc", "exp_sgdm", "sgdm", better="higher", kind="close", margin=cfg.acc_margin, stage="compressed",
                           level=level, role="control",
                           text=f"with weights magnitude-pruned to {level} (no fine-tuning), Exp-SGDM's test accuracy within "
                                f"{cfg.acc_margin:.0%} of SGDM's"))
    return rows


SPEC = register_paper(PaperSpec(
    id="exp_sgdm",
    title="Random Scaling and Momentum for Non-smooth Non-convex Optimization",
    claim="matches or beats SGDM with guarantees",
    Config=Config,
    variants=VARIANTS,
    prepare=prepare, train=train, compress=compress, evaluate=evaluate, comparisons=comparisons,
    fidelity="paper-text",
    resources=("fashion_mnist",),
    data="real Fashion-MNIST: a fixed 10k-image training subset (2k held out for lr selection), 5k test images",
    substitutions="Paper: ResNet-18 on CIFAR-10 (and theory for non-smooth non-convex losses). Here: a ReLU MLP "
                  "(784-128-10) and a small ReLU/max-pool CNN on Fashion-MNIST, 500 mini-batch steps each; lr of both "
                  "optimizers chosen from the same 4-value grid on validation (one tuning seed); no Delta clipping and "
                  "last-iterate evaluation, as in the paper's experiment",
    compression="global magnitude pruning of each network's weights (biases kept) at 50% and 80%, no fine-tuning",
    figure="sparsity",
    tradeoff=None,
    weight=1,
))

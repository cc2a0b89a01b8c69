"""MOOSF: "Two Fists, One Heart: Multi-Objective Optimization Based Strategy Fusion for Long-tailed Learning"
(Zhao, Wang, Wen, Xu, Song, Zhang, Wang), ICML 2024.

Fidelity: reconstruction. The paper text beyond its abstract was not retrievable here (searched: the title with
"Algorithm", "strategy fusion", "conflict", "PLA"). The authors' code was found in this revision
(https://github.com/DataLab-atom/torch-MOOSF, README "LSF --- pytorch", main.py, MultiBackward/MBACK.py,
models/net.py, utils/config.py) and read; what follows it and what does not:
  - follows the code: several long-tail strategies trained together as objectives of one model with a shared
    encoder, fused by a gradient-level multi-objective step; the fused strategies include plain CE next to a
    tail-favouring one (the README's first command fuses CE and balanced softmax); SGD with momentum.
  - differs from the code: the code gives each strategy its own linear head on the shared encoder (models/net.py)
    and, under its MOOSF/LSF flag, fuses with PCGrad (GradFun/pcgrad.py, mean reduction) plus "PLA" loss weights
    from per-group training accuracies (MBACK.Pla) and an accuracy-weighted ensemble of the heads at test
    (out_cut); MGDA and Chebyshev are options. Here one classifier f(x) is shared by every strategy (no per-strategy
    heads, no PLA, no head ensemble) and the fusion is CAGrad (our reading of the abstract's "resolves conflicts",
    kept from v2): the review's probe and the code disagree with it, so the headline speaks for a CAGrad fusion of
    strategies, not for the released MOOSF.
Method here:
  - objectives: three long-tail strategies on the same classifier f(x) (every parameter shared):
      L_ce = plain cross-entropy (head-favouring);
      L_rw = re-weighted CE: sum_i w_{y_i} CE(f(x_i), y_i) / sum_i w_{y_i}, w_c = C (1/n_c) / sum_j (1/n_j);
      L_bs = balanced softmax (Ren et al. 2020): CE(f(x) + log n, y). Prediction: argmax f.
  - combination: CAGrad (Liu et al. 2021; paperflow.mtl.make_cagrad, official CAGrad code: c = 0.5, rescale
    1/(1 + c^2), x K): d = g0 + c ||g0|| g_w / ||g_w||, the direction that maximises the worst strategy's decrease
    within a ball around the average gradient g0. With c = 0 it is the equal-weight sum: the ablation sum3. The dual
    weights w are those of the official code's problem, solved exactly over the simplex's faces
    (cagrad_weights_exact; the official code and v2 used SLSQP, which the tests show it never does worse than).
Variants: moosf (the fusion); sum3 (the isolating ablation: L_ce + L_rw + L_bs, equal weights, one backward pass);
each single strategy alone (ce, rw, bs).

Mechanism (contract v3): the fusion differs from sum3 only through how the strategies' gradients disagree. Every
moosf run logs, per IR, conflict_frac_<ir> (fraction of steps where some pair of strategy gradients has a negative
inner product) and fused_angle_<ir> (mean angle, degrees, between CAGrad's direction and the mean gradient g0; at
most asin(c) = 30 degrees). The headline and the row against sum3 are judged only when the strategy gradients
conflict on more than 10% of MOOSF's steps at the headline IR (threshold fixed before any run of this revision:
the paper's mechanism is resolving conflicts between strategies; below one step in ten the fusion is a fixed
tilt of the average and the row would not test it). Otherwise they read `not testable` with the measured value.

Harder setting (this revision, chosen on training quantities only): v2 fused RW, LA (tau 0.5) and BS, three
tail-favouring strategies; their gradients conflicted on 0.25% of steps (the review) and on 0-1.3% in our probes
(moosf at IR 100, lr 0.003-0.03, probe seed 500, training batches), pairwise cosines 0.49-0.85; batch 32, IR 200,
n_max 500 and tau 1.5 kept it at 0-6.5%. Fusing CE (head-favouring, as the authors' README does) with RW and BS
gave conflicts on 37-45% of steps at lr 0.003, 12-23% at 0.01 and 1-6% at 0.03 (probe seeds 500-502). So the
strategies are (CE, RW, BS) and LA (with its tau) is gone. At the lr the validation picks for moosf at IR 100 in our
prepare() (0.01), two probe seeds gave 11.7% and 15.5% (IR 10: 0%); the tuned runs measure whether 10% is reached.

Data (substitution for CIFAR-10/100-LT, ImageNet-LT, iNaturalist): real Fashion-MNIST made long-tailed with the
exponential profile of Cao et al. 2019: n_c = int(n_max * IR^(-c / (C - 1))), class 0 the head, at IR = 100
(headline) and IR = 10 (secondary); one job trains both. Validation: a balanced split held out of the training
images (n_val_per_class per class), used for lr selection and for choosing the best single strategy. Test: a
balanced set of n_test images (n_test / 10 per class) drawn with cfg.test_seed from the Fashion-MNIST training
images that neither the long-tailed training sets (the first n_max of each class pool) nor validation use; tuning
and validation never read test_seed. Many / medium / few-shot groups: with 10 classes the usual >100 / 20-100 /
<20 image thresholds leave groups empty at this size, so the classes are split by frequency rank into cfg.groups
(3 head, 4 medium, 3 tail). Model: an MLP (784-128-64-10), SGD momentum 0.9, weight decay 5e-4, cosine lr.

Equal tuning: each variant and IR gets the same 5-value lr grid (0.003, 0.01, 0.03, 0.1, 0.3); each (variant, IR,
lr) is trained once in prepare() with a tuning seed for the full run length and the best balanced-validation
accuracy wins (ties: smaller lr); runs that diverge score NaN and never win. The headline's reference
"ref|best_single_ir100" is, per seed, the single strategy (ce, rw, bs) with the best validation accuracy.
Compression: global magnitude pruning of the weight matrices at two levels, no fine-tuning; per-group accuracy
is re-measured after pruning.

Tuning and test history (disclosed; each change applied to every variant): the first default run tuned for 150
steps and picked lr 0.1 (top edge) for the baselines, and RW then collapsed on some seeds in the 400-step run;
tuning was set to the full run length and the grid widened to 0.01-0.3. MOOSF then picked 0.01 (bottom edge; the
gate made the headline not testable, its test delta already +0.95 [0.58, 1.33]); 0.003 was added and the chosen
lr did not change. That widening came after a test-split number of the headline was seen, so in this revision
(contract v3) the grid is frozen at those 5 values and the test data are re-drawn: v1-v2 tested on the official
Fashion-MNIST test split (all 10000 images); from this revision on the test images come from training-split images
no run has evaluated, drawn with test_seed = 2024 (a key no tuning step reads).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..compress.magnitude import level_name, magnitude_levels
from ..data.images import to_float
from ..loop import cosine_lr, train_loop
from ..mtl import cagrad_weights, make_cagrad
from ..registry import register_paper
from ..spec import Comparison, Gate, PaperSpec, check
from ..tuning import tune

SINGLES = ("ce", "rw", "bs")  # the fused strategies, each also a baseline
VARIANTS = ("moosf", "sum3") + SINGLES
CONFLICT_MIN = 0.10  # mechanism gate: strategy gradients conflict on > 10% of MOOSF's steps (headline IR)
N_CLASSES = 10
GROUPS = ("many", "medium", "few")


@dataclass(frozen=True)
class Config:
    n_max: int = 2000  # images of the head class
    imbalances: tuple = (100, 10)  # imbalance ratios n_max / n_min; the first is the headline's
    n_val_per_class: int = 100  # balanced validation split held out of the training images
    n_test: int = 10000  # balanced test images (n_test / 10 per class), from training images no run uses
    data_seed: int = 0  # validation split, long-tailed training sets
    test_seed: int = 2024  # the test draw only (never read by tuning); v1-v2 used the official test split
    groups: tuple = (3, 4, 3)  # many / medium / few-shot classes, by frequency rank
    hidden: tuple = (128, 64)
    steps: int = 400
    batch_size: int = 128
    lr_grid: tuple = (0.003, 0.01, 0.03, 0.1, 0.3)
    momentum: float = 0.9
    weight_decay: float = 5e-4
    tune_steps: int = 400  # = steps: a shorter proxy picked lrs that were unstable over the full run
    tune_seed: int = 1000
    cagrad_c: float = 0.5  # CAGrad's c (official default alpha = 0.5)
    sparsities: tuple = (0.5, 0.8)
    compare_level: float = 0.5
    eval_batch: int = 2500
    log_every: int = 50

    def __post_init__(self) -> None:
        for name in ("imbalances", "groups", "hidden", "lr_grid", "sparsities"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        check(self.n_max > 0 and self.n_max + self.n_val_per_class + self.n_test // N_CLASSES <= 6000,
              f"n_max > 0 and n_max + n_val_per_class + n_test / {N_CLASSES} <= 6000 (images per class), got {self.n_max}, "
              f"{self.n_val_per_class}, {self.n_test}")
        check(len(self.imbalances) >= 1 and all(r >= 1 for r in self.imbalances), f"imbalances must be >= 1, got {self.imbalances}")
        check(self.n_max / max(self.imbalances) >= 1, f"n_max / max(imbalances) must be >= 1 image, got {self.n_max}, {self.imbalances}")
        check(self.n_val_per_class > 0 and self.n_test > 0 and self.n_test % N_CLASSES == 0,
              f"n_val_per_class > 0 and n_test a positive multiple of {N_CLASSES} (balanced), got {self.n_val_per_class}, {self.n_test}")
        check(len(self.groups) == 3 and sum(self.groups) == N_CLASSES and min(self.groups) > 0,
              f"groups must be 3 positive counts summing to {N_CLASSES}, got {self.groups}")
        check(len(self.hidden) >= 1 and all(h > 0 for h in self.hidden), f"hidden must be positive widths, got {self.hidden}")
        check(self.steps > 0 and self.batch_size > 0 and self.tune_steps > 0, "steps, batch_size, tune_steps must be > 0")
        check(len(self.lr_grid) >= 1 and all(v > 0 for v in self.lr_grid) and list(self.lr_grid) == sorted(self.lr_grid),
              f"lr_grid must be positive and ascending, got {self.lr_grid}")
        check(0 <= self.momentum < 1 and self.weight_decay >= 0, "momentum in [0, 1), weight_decay >= 0")
        check(self.cagrad_c >= 0, f"cagrad_c must be >= 0, got {self.cagrad_c}")
        check(all(0 <= s < 1 for s in self.sparsities), f"sparsities must be in [0, 1), got {self.sparsities}")
        check(self.compare_level in self.sparsities, f"compare_level must be one of {self.sparsities}, got {self.compare_level}")
        check(self.eval_batch > 0 and self.log_every > 0, "eval_batch and log_every must be > 0")


def tag(ir) -> str:
    return f"ir{int(ir)}"


# ----------------------------------------------------------------------------------------------------
# Long-tailed data


def longtail_counts(n_max: int, n_classes: int, imbalance: float) -> list[int]:
    """Exponential profile (Cao et al. 2019, IMBALANCECIFAR10.get_img_num_per_cls): int(n_max * IR^(-c/(C-1)))."""
    return [int(n_max * (1.0 / imbalance) ** (c / (n_classes - 1.0))) for c in range(n_classes)]


def prepare(cfg: Config, res) -> dict:
    """Balanced validation split and one long-tailed training set per imbalance ratio (uint8 images), the
    balanced test set (drawn with test_seed from training images no training set or validation uses), the class
    counts, then the tuned lr of every (variant, IR)."""
    arrays = np.load(res["fashion_mnist"])
    x, y = torch.from_numpy(arrays["x_train"]), torch.from_numpy(arrays["y_train"]).long()
    gen = torch.Generator().manual_seed(cfg.data_seed)
    test_gen = torch.Generator().manual_seed(cfg.test_seed)
    val_idx, pools, test_idx = [], [], []
    for c in range(N_CLASSES):
        idx = torch.nonzero(y == c).flatten()
        idx = idx[torch.randperm(idx.numel(), generator=gen)]
        val_idx.append(idx[: cfg.n_val_per_class])
        pools.append(idx[cfg.n_val_per_class :])
        unused = pools[c][cfg.n_max :]  # every training set takes pools[c][:n_c] with n_c <= n_max
        test_idx.append(unused[torch.randperm(unused.numel(), generator=test_gen)[: cfg.n_test // N_CLASSES]])
    val_idx, test_idx = torch.cat(val_idx), torch.cat(test_idx)
    data = {"x_val": x[val_idx], "y_val": y[val_idx], "x_test": x[test_idx], "y_test": y[test_idx]}
    for ir in cfg.imbalances:
        counts = longtail_counts(cfg.n_max, N_CLASSES, ir)
        idx = torch.cat([pools[c][:n] for c, n in enumerate(counts)])
        data[f"x_{tag(ir)}"], data[f"y_{tag(ir)}"] = x[idx], y[idx]
        data[f"counts_{tag(ir)}"] = torch.tensor(counts, dtype=torch.float64)
    data["tuning"] = tune_lrs(cfg, data)
    return data


def tune_lrs(cfg: Config, data: dict) -> dict:
    """{variant: {tag: tuning record}}: the lr with the best balanced-validation accuracy per (variant, IR)."""
    out = {v: {} for v in VARIANTS}
    for variant in VARIANTS:
        for ir in cfg.imbalances:
            def fit(lr: float, variant: str = variant, ir=ir):
                try:
                    state, _ = fit_model(cfg, data, variant, ir, cfg.tune_seed, lr, cfg.tune_steps, None)
                except FloatingPointError:  # diverged at this lr: a non-finite score never wins (tuning.best_index)
                    return math.nan, math.nan
                acc = group_accuracies(cfg, state, data["x_val"], data["y_val"])["acc"]
                return acc, acc

            acc, info = tune(cfg.lr_grid, fit, higher=True, name="lr")
            out[variant][tag(ir)] = {**info, "val_acc": acc}
    return out


# ----------------------------------------------------------------------------------------------------
# Losses (the strategies)


def strategy_loss(name: str, logits: torch.Tensor, y: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """ce | rw | bs on logits (B, C) with the training class counts (C,)."""
    counts = counts.to(logits.dtype)
    if name == "ce":
        return F.cross_entropy(logits, y)
    if name == "rw":
        inv = 1.0 / counts
        return F.cross_entropy(logits, y, weight=inv * len(counts) / inv.sum())
    if name == "bs":
        return F.cross_entropy(logits + torch.log(counts), y)
    raise ValueError(f"moosf: unknown strategy {name!r}")


def cagrad_weights_exact(A: np.ndarray, alpha: float) -> np.ndarray:
    """The same dual as paperflow.mtl.cagrad_weights (argmin over the simplex of w^T A b + c sqrt(w^T A w), b = 1/K,
    c = alpha sqrt(mean A)), solved exactly by enumerating the simplex's faces: on the face with support S the
    stationary point is w_S = t M (lambda 1 - u_S), M = A_SS^-1, u = A b, where (lambda 1 - u_S)^T M (lambda 1 - u_S)
    = c^2 and t (lambda 1^T M 1 - 1^T M u_S) = 1; the convex objective's minimum is the best feasible candidate
    (vertices included). Cheaper than scipy's SLSQP per call and never above its objective (tests); falls back to
    it when A is not finite or a face's A_SS is ill-conditioned."""
    if not np.isfinite(A).all():  # a diverging run: SLSQP's answer, as before (the loop then stops on the loss)
        return cagrad_weights(A, alpha)
    K = A.shape[0]
    u = A @ (np.ones(K) / K)
    c = alpha * np.sqrt(A.mean() + 1e-8) + 1e-8

    def f(w: np.ndarray) -> float:
        return float(w @ u + c * np.sqrt(w @ A @ w + 1e-8))

    candidates = [np.eye(K)[k] for k in range(K)]
    for size in range(2, K + 1):
        for S in itertools.combinations(range(K), size):
            S = list(S)
            sub = A[np.ix_(S, S)]
            if np.linalg.cond(sub) > 1e10:
                return cagrad_weights(A, alpha)
            M1, Mu = np.linalg.solve(sub, np.ones(size)), np.linalg.solve(sub, u[S])
            a, beta, gamma = M1.sum(), Mu.sum(), float(u[S] @ Mu)
            disc = beta * beta - a * (gamma - c * c)
            if disc <= 0:
                continue
            lam = (beta + np.sqrt(disc)) / a  # the root with t = 1 / sqrt(disc) > 0
            w_s = (lam * M1 - Mu) / np.sqrt(disc)
            if w_s.min() >= -1e-12:
                w = np.zeros(K)
                w[S] = np.clip(w_s, 0.0, None)
                candidates.append(w / w.sum())
    return min(candidates, key=f)


class FusionMonitor:
    """Wraps a combiner and measures its mechanism per step: `conflicts` counts the steps where some pair of
    strategy gradients has a negative inner product; `angle_sum` adds the angle (degrees) between the combined
    direction and the mean gradient g0 (0 when the fusion is the plain average)."""

    def __init__(self, combine):
        self.combine, self.steps, self.conflicts, self.angle_sum = combine, 0, 0, 0.0

    def __call__(self, G: torch.Tensor, losses: torch.Tensor) -> torch.Tensor:
        A = G @ G.T
        self.conflicts += int(bool((A < 0).any()))
        direction = self.combine(G, losses)
        # cos(d, g0) with g0 = mean_k g_k: d.g0 = mean(G d), ||g0||^2 = mean(A) (no pass over G for g0)
        cos = float((G @ direction).mean() / (direction.norm() * A.mean().clamp_min(1e-30).sqrt() + 1e-30))
        self.angle_sum += math.degrees(math.acos(max(-1.0, min(1.0, cos))))
        self.steps += 1
        return direction

    def stats(self, t: str) -> dict:
        n = max(self.steps, 1)
        return {f"conflict_frac_{t}": self.conflicts / n, f"fused_angle_{t}": self.angle_sum / n}


# ----------------------------------------------------------------------------------------------------
# Model, train, evaluate


def build_model(arch: dict) -> nn.Sequential:
    layers, d = [nn.Flatten()], 28 * 28
    for h in arch["hidden"]:
        layers += [nn.Linear(d, h), nn.ReLU()]
        d = h
    return nn.Sequential(*layers, nn.Linear(d, N_CLASSES))


def fit_model(cfg: Config, data: dict, variant: str, ir, seed: int, lr: float, steps: int, log) -> tuple[dict, dict]:
    if variant not in VARIANTS:
        raise ValueError(f"moosf: unknown variant {variant!r}; known: {VARIANTS}")
    torch.manual_seed(seed)
    net = build_model({"hidden": list(cfg.hidden)})
    x, y, counts = data[f"x_{tag(ir)}"], data[f"y_{tag(ir)}"], data[f"counts_{tag(ir)}"]
    gen = torch.Generator().manual_seed(seed)

    def batch_fn(step: int):
        idx = torch.randint(0, y.shape[0], (cfg.batch_size,), generator=gen)
        return to_float(x[idx]), y[idx]

    if variant in ("moosf", "sum3"):
        def loss_fn(batch):  # (K,) strategy losses; sum3 sums them (train_loop: a vector loss without combine)
            logits = net(batch[0])
            return torch.stack([strategy_loss(s, logits, batch[1], counts) for s in SINGLES])
        combine = FusionMonitor(make_cagrad(alpha=cfg.cagrad_c, solver=cagrad_weights_exact)) if variant == "moosf" else None
    else:
        def loss_fn(batch):
            return strategy_loss(variant, net(batch[0]), batch[1], counts)
        combine = None
    params = list(net.parameters())
    opt = torch.optim.SGD(params, lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    train_loop(params, batch_fn, loss_fn, opt, steps, log=log, log_every=cfg.log_every,
               lr_fn=lambda s: cosine_lr(s, steps, lr), combine=combine,
               shared_params=params if combine else None, modules=[net])
    stats = combine.stats(tag(ir)) if combine else {}
    return {k: v.detach().clone() for k, v in net.state_dict().items()}, stats


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    """One model per imbalance ratio, each at the lr prepare() chose for (variant, IR)."""
    states, stats, tuning = {}, {}, {}
    for ir in cfg.imbalances:
        rec = data["tuning"][variant][tag(ir)]
        sub_log = (lambda step, t=tag(ir), **m: log(step, **{f"{t}/{k}": v for k, v in m.items()})) if log else None
        states[tag(ir)], st = fit_model(cfg, data, variant, ir, seed, rec["tuned_lr"], cfg.steps, sub_log)
        stats.update(st)
        tuning.update({f"tuned_lr_{tag(ir)}": rec["tuned_lr"], f"grid_edge_{tag(ir)}": rec["grid_edge"],
                       f"val_acc_{tag(ir)}": rec["val_acc"]})
    return {"arch": {"hidden": list(cfg.hidden)}, "states": states, "stats": stats, "tuning": tuning,
            "counts": {tag(ir): data[f"counts_{tag(ir)}"] for ir in cfg.imbalances}}


@torch.no_grad()
def group_accuracies(cfg: Config, state: dict, x: torch.Tensor, y: torch.Tensor) -> dict:
    """Overall accuracy (%) and mean per-class accuracy of each frequency group (classes in count order)."""
    net = build_model({"hidden": list(cfg.hidden)})
    net.load_state_dict(state)
    net.eval()
    pred = torch.cat([net(to_float(x[a : a + cfg.eval_batch])).argmax(1) for a in range(0, x.shape[0], cfg.eval_batch)])
    per_class = [100.0 * float((pred[y == c] == c).float().mean()) if (y == c).any() else math.nan for c in range(N_CLASSES)]
    out, start = {"acc": 100.0 * float((pred == y).float().mean())}, 0
    for name, n in zip(GROUPS, cfg.groups):
        out[f"acc_{name}"] = float(np.nanmean(per_class[start : start + n]))
        start += n
    return out


def evaluate(cfg: Config, model: dict, data: dict) -> dict:
    """Per IR: acc, acc_many / acc_medium / acc_few, head_tail_gap = many - few (test set), class-count facts,
    the tuning record and, for moosf, the mechanism measured in training (conflict_frac_<ir>, fused_angle_<ir>)."""
    m = {}
    for ir in cfg.imbalances:
        t = tag(ir)
        acc = group_accuracies(cfg, model["states"][t], data["x_test"], data["y_test"])
        m.update({f"{k}_{t}": v for k, v in acc.items()})
        m[f"head_tail_gap_{t}"] = acc["acc_many"] - acc["acc_few"]
        counts = data[f"counts_{t}"]
        m[f"n_train_{t}"], m[f"n_min_{t}"] = float(counts.sum()), float(counts.min())
    m.update(model.get("stats", {}))
    m.update(model.get("tuning", {}))
    return m


def compress(cfg: Config, model: dict, data: dict, variant: str, seed: int) -> dict:
    """Global magnitude pruning of each model's weight matrices (one threshold per model) at each level."""
    per_ir = {t: magnitude_levels(state, cfg.sparsities) for t, state in model["states"].items()}
    return {level_name(s): {**model, "states": {t: per_ir[t][level_name(s)] for t in per_ir}} for s in cfg.sparsities}


# ----------------------------------------------------------------------------------------------------
# The best single strategy (validation) and the claims


def best_single(rows: list[dict], t: str) -> str | None:
    """The single strategy with the best balanced-validation accuracy at its tuned lr (ties: SINGLES order)."""
    first = {}
    for r in rows:
        first.setdefault(r["variant"], r)
    try:
        scores = {s: float(first[s][f"dense/val_acc_{t}"]) for s in SINGLES}
    except (KeyError, TypeError):
        return None
    return max(SINGLES, key=lambda s: (scores[s], -SINGLES.index(s)))


def derive(cfg: Config, rows: list[dict]) -> list[dict]:
    """Add, per IR, the view "ref|best_single_<ir>": a copy of the rows of the chosen single strategy."""
    out = [dict(r) for r in rows]
    for ir in cfg.imbalances:
        best = best_single(rows, tag(ir))
        if best is not None:
            out += [{**r, "variant": f"ref|best_single_{tag(ir)}", f"dense/best_single_{tag(ir)}": float(SINGLES.index(best))}
                    for r in rows if r["variant"] == best]
    return out


def comparisons(cfg: Config) -> list[Comparison]:
    h, rest = tag(cfg.imbalances[0]), [tag(ir) for ir in cfg.imbalances[1:]]
    best = f"ref|best_single_{h}"

    def lr_gates(t, *variants):
        return tuple(Gate(f"{v}: tuned lr inside the grid ({t})", variant=v, metric=f"grid_edge_{t}", below=0.5) for v in variants)

    premise = (Gate(f"plain CE above chance ({h})", variant="ce", metric=f"acc_{h}", above=20.0),
               Gate(f"the long tail shows: CE many-shot minus few-shot accuracy > 10 points ({h})", variant="ce",
                    metric=f"head_tail_gap_{h}", above=10.0))
    mechanism = (Gate(f"the strategies conflict: some pair of strategy gradients has a negative inner product on more than "
                      f"{CONFLICT_MIN:.0%} of MOOSF's steps ({h})", variant="moosf", metric=f"conflict_frac_{h}",
                      above=CONFLICT_MIN, kind="mechanism"),)
    level = level_name(cfg.compare_level)
    rows = [Comparison(f"acc_{h}", "moosf", best, better="higher", role="headline",
                       gates=premise + mechanism + lr_gates(h, "moosf", best),
                       text=f"MOOSF (CAGrad fusion of CE, RW-CE, BS) beats the best single strategy (chosen on validation) at {h}",
                       refuted_if=f"MOOSF's balanced test accuracy at {h} is below the validation-chosen best single strategy's "
                                  "(paired 95% interval of the difference entirely below 0) while the strategy gradients conflict "
                                  f"on more than {CONFLICT_MIN:.0%} of MOOSF's steps and MOOSF's tuned lr is inside the grid")]
    rows += [Comparison(f"acc_{h}", "moosf", "sum3", better="higher", role="secondary",
                        gates=mechanism + lr_gates(h, "moosf", "sum3"),
                        text=f"the fusion itself: MOOSF beats the equal-weight sum of the same three losses (sum3, the isolating "
                             f"ablation) at {h}")]
    rows += [Comparison(f"acc_{t}", "moosf", f"ref|best_single_{t}", better="higher", role="secondary",
                        gates=lr_gates(t, "moosf", f"ref|best_single_{t}"),
                        text=f"MOOSF beats the best single strategy at {t}") for t in rest]
    rows += [Comparison(f"acc_{h}", "moosf", "ce", better="higher", role="secondary", gates=lr_gates(h, "moosf", "ce"),
                        text=f"MOOSF beats plain CE at {h}"),
             Comparison(f"acc_few_{h}", "moosf", best, better="higher", role="secondary", gates=lr_gates(h, "moosf", best),
                        text=f"MOOSF's few-shot accuracy beats the best single strategy's at {h}")]
    rows += [Comparison(f"acc_{g}_{h}", "moosf", best, better="higher", role="control", gates=lr_gates(h, "moosf", best),
                        text=f"{g}-shot accuracy, MOOSF vs the best single strategy at {h}") for g in ("many", "medium")]
    rows += [Comparison(f"acc_{h}", "moosf", best, better="higher", role="control", stage="compressed", level=level,
                        gates=lr_gates(h, "moosf", best),
                        text=f"MOOSF keeps its advantage over the best single strategy at {h} with {level} of the weights pruned"),
             Comparison(f"acc_few_{h}", "moosf", best, better="higher", role="control", stage="compressed", level=level,
                        gates=lr_gates(h, "moosf", best),
                        text=f"few-shot accuracy after pruning to {level}, MOOSF vs the best single strategy at {h}"),
             Comparison(f"n_train_{h}", "moosf", "ce", role="fact",
                        text=f"long-tailed training images at {h} (Cao et al. profile; the same set for every variant)"),
             Comparison(f"fused_angle_{h}", "moosf", "", role="fact",
                        text=f"mean angle (degrees) between CAGrad's direction and the mean strategy gradient in MOOSF's training "
                             f"at {h} (0 = the plain average; at most 30 for c = 0.5)")]
    return rows


SPEC = register_paper(PaperSpec(
    id="moosf",
    title="Two Fists, One Heart: Multi-Objective Optimization Based Strategy Fusion for Long-tailed Learning",
    claim="fusion beats each single strategy",
    Config=Config,
    variants=VARIANTS,
    prepare=prepare, train=train, compress=compress, evaluate=evaluate, comparisons=comparisons, derive=derive,
    fidelity="reconstruction",
    resources=("fashion_mnist",),
    data="real Fashion-MNIST made long-tailed (Cao et al. exponential profile, head class n_max images) at imbalance "
         "100 and 10; balanced validation split held out of the training images; balanced test set drawn (test_seed) from "
         "training-split images no run trains or validates on (v1-v2 used the official test split)",
    substitutions="Paper: CIFAR-10/100-LT, ImageNet-LT, iNaturalist with ResNets. Here: long-tailed Fashion-MNIST, a "
                  "small MLP, SGD with cosine lr for a few hundred steps. Method: CAGrad over the CE, RW-CE and BS losses of "
                  "one shared classifier (our reconstruction from the abstract; the authors' released code, read in this "
                  "revision, fuses with PCGrad plus PLA loss weights over one head per strategy and ensembles the heads at "
                  "test); groups are frequency-rank thirds (3/4/3 classes); every variant's lr tuned per IR on the same "
                  "5-value grid, frozen",
    compression="global magnitude pruning of the MLP's weight matrices at each level (no fine-tuning); per-group "
                "accuracy re-measured after pruning",
    figure="sparsity",
    weight=1,
))

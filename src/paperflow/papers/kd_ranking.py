"""KD ranking: "Revisit the Essence of Distilling Knowledge through Calibration", Wen-Shu Fan, Su Lu,
Xin-Chun Li, De-Chuan Zhan, Le Gan, ICML 2024 (PMLR 235). Official code: none found in the public index
(searched the code / issues / pages corpora); everything below is written from the paper's abstract and
the standard definitions it builds on, and the ranking loss is our explicit choice (see below).

The paper's argument. "Capacity mismatch": a larger, more accurate teacher can give a worse student under
Hinton KD. The paper attributes it to calibration: larger teachers are more over-confident (higher ECE),
and the KL divergence between temperature-softened distributions is sensitive to the teacher's
calibration, so student accuracy under KL correlates with teacher calibration. It recommends replacing
KL by a calibration-insensitive, ranking-based loss, which lets large badly calibrated teachers teach better.

What is implemented (all losses on a batch of B examples, K = 10 classes, s = student logits, t = teacher logits):
  - none: L = CE(s, y).
  - kl (Hinton et al. 2015):  L = (1 - alpha) CE(s, y) + alpha T^2 KL(softmax(t/T) || softmax(s/T)),  (KD)
        KL averaged over the batch ("batchmean"); T = cfg.temperature, alpha = cfg.alpha.
  - rank: L = (1 - alpha) CE(s, y) + alpha L_rank(s, t), with the same alpha, where L_rank is ListMLE
        (Xia et al. 2008, "Listwise approach to learning to rank"), the negative Plackett-Luce
        log-likelihood of the TEACHER's class ordering pi (pi(1) = argmax t, ...) under the student scores:
            L_rank(s, t) = sum_{j=1..k} [ log sum_{m=j..K} exp(s_{pi(m)}) - s_{pi(j)} ]          (ListMLE)
        with k = cfg.rank_topk (default K: the full list; the j = K term is identically 0).
    Why this formulation: the paper's claim rests on the loss depending on the teacher only through the
    ORDER of its class scores. ListMLE does so exactly: pi is unchanged by any strictly increasing map of
    t, in particular by temperature scaling t -> t / tau (the usual calibration fix), so
    L_rank(s, t) == L_rank(s, t / tau) for every tau > 0 while the KD term changes (tests check both).
    Its first term is the cross-entropy towards the teacher's top-1 class, and its minimiser over a fixed
    set of student scores is the teacher's order (the PL mode), so it is a proper "order as the teacher
    does" objective. A pairwise margin loss would also be order-only but adds a margin hyper-parameter;
    Kendall/Spearman surrogates need a smoothing temperature. The paper's exact ranking loss could not be
    retrieved here, so this is a documented substitution of one member of the family it recommends.
  - ECE (Guo et al. 2017) with 15 equal-width confidence bins (0, 1/15], ..., (14/15, 1]:
        ECE = sum_b |B_b| / n * | acc(B_b) - conf(B_b) |,  conf = max softmax probability.        (ECE)

Experiment (laptop-scale substitute for the paper's CIFAR-100 ResNet/WRN teachers and students):
  prepare() trains ONCE, with the fixed seed cfg.teacher_seed, MLP teachers of growing width
  cfg.teacher_widths (cfg.teacher_depth hidden ReLU layers) on the same n_train-image subset of real
  Fashion-MNIST, all with the same recipe (Adam, cfg.teacher_steps steps, plain CE, no regularisation);
  they are treated as given pretrained teachers. Nothing is done to make them over-confident: larger
  nets just memorise the small train set faster, and their test ECE is measured and reported. The
  teachers' logits on the train subset (what the student distils) and on the test set are stored.
  train(variant, seed) trains the small student (an MLP with cfg.student_hidden) once per teacher with that
  variant's loss ("none": once, it does not see a teacher), same init and batch order per seed across
  teachers and variants, so every comparison is paired.

Compression. Distillation into the student IS the compression stage: the dense model is the teacher
(dense/* metrics: the largest teacher, plus acc_/ece_/params_<teacher> of every teacher), and
compress() returns one level per teacher, named by the teacher ("w<width>"): the student distilled from
it (for "none" the same CE-only student at every level). evaluate() on a level reports the student's
acc (%), ece and measured params, and that teacher's acc / ece / params.
derive() adds per row: compressed@<level>/drop = (best student acc over teachers) - (student acc at level),
so compressed@<largest>/drop is the capacity-mismatch drop; dense/corr_acc_ece = Pearson correlation over
teachers of the student acc with the teacher ECE (the paper's "KD performance correlates with teacher
calibration"; undefined, so absent, for "none").

Substitutions (laptop scale): Fashion-MNIST (n_train-image subset, full 10k test) instead of CIFAR-100 /
ImageNet; MLP teachers and student instead of ResNets/WRNs; teachers of several widths trained with one
recipe instead of the paper's zoo; ListMLE as the ranking loss (the paper's exact ranking loss not
retrieved); a few thousand Adam steps; 3 seeds for the students, one fixed teacher set.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..data.images import load_fashion, subset, to_float
from ..loop import cosine_lr, train_loop
from ..measure import count_params
from ..registry import register_paper
from ..spec import Comparison, PaperSpec, check

VARIANTS = ("none", "kl", "rank")
N_CLASSES = 10
N_PIXELS = 28 * 28


@dataclass(frozen=True)
class Config:
    n_train: int = 5000  # Fashion-MNIST train images the teachers AND the student learn from
    n_test: int = 10000  # test images (all of the official test split)
    data_seed: int = 0  # which train subset
    teacher_widths: tuple = (32, 128, 512, 1024)  # teacher MLP hidden widths, growing size
    teacher_depth: int = 2  # hidden layers of every teacher
    teacher_steps: int = 1500  # same recipe for every teacher
    teacher_lr: float = 1e-3
    teacher_seed: int = 0  # fixed: the teachers are given, shared by every variant and seed
    student_hidden: tuple = (16,)  # the small student MLP
    student_steps: int = 1500
    student_lr: float = 3e-3
    batch_size: int = 128
    warmup: int = 0  # cosine schedule warm-up steps (student)
    temperature: float = 4.0  # KD temperature T (kl only; rank is invariant to it by construction)
    alpha: float = 0.9  # weight of the distillation term; CE gets 1 - alpha (kl and rank alike)
    rank_topk: int = 10  # ListMLE over the teacher's top-k positions (10 = full list)
    ece_bins: int = 15
    eval_batch: int = 2000
    log_every: int = 50

    def __post_init__(self) -> None:
        for name in ("teacher_widths", "student_hidden"):
            object.__setattr__(self, name, tuple(int(v) for v in getattr(self, name)))
        check(self.n_train > 0 and self.n_test > 0, f"n_train and n_test must be > 0, got {self.n_train}, {self.n_test}")
        check(len(self.teacher_widths) >= 2 and all(w > 0 for w in self.teacher_widths),
              f"teacher_widths needs >= 2 positive widths (teachers of several sizes), got {self.teacher_widths}")
        check(list(self.teacher_widths) == sorted(set(self.teacher_widths)),
              f"teacher_widths must be strictly increasing (the last is the largest teacher), got {self.teacher_widths}")
        check(self.teacher_depth >= 1, f"teacher_depth must be >= 1, got {self.teacher_depth}")
        check(len(self.student_hidden) >= 1 and all(h > 0 for h in self.student_hidden),
              f"student_hidden must be >= 1 positive widths, got {self.student_hidden}")
        check(self.teacher_steps > 0 and self.student_steps > 0,
              f"teacher_steps and student_steps must be > 0, got {self.teacher_steps}, {self.student_steps}")
        check(self.teacher_lr > 0 and self.student_lr > 0, f"teacher_lr and student_lr must be > 0, got {self.teacher_lr}, {self.student_lr}")
        check(self.batch_size > 0, f"batch_size must be > 0, got {self.batch_size}")
        check(0 <= self.warmup < self.student_steps, f"warmup must be in [0, student_steps), got {self.warmup}")
        check(self.temperature > 0, f"temperature must be > 0, got {self.temperature}")
        check(0 <= self.alpha <= 1, f"alpha must be in [0, 1], got {self.alpha}")
        check(2 <= self.rank_topk <= N_CLASSES, f"rank_topk must be in [2, {N_CLASSES}], got {self.rank_topk}")
        check(self.ece_bins >= 1, f"ece_bins must be >= 1, got {self.ece_bins}")
        check(self.eval_batch > 0 and self.log_every > 0, "eval_batch and log_every must be > 0")

    @property
    def teacher_names(self) -> tuple:
        return tuple(teacher_name(w) for w in self.teacher_widths)


def teacher_name(width: int) -> str:
    return f"w{width}"


# ----------------------------------------------------------------------------------------------------
# Losses and calibration


def kd_kl_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Hinton KD term: T^2 * KL(softmax(t/T) || softmax(s/T)), averaged over the batch (Eq. KD)."""
    T = float(temperature)
    log_p_s = F.log_softmax(student_logits / T, dim=1)
    log_p_t = F.log_softmax(teacher_logits / T, dim=1)
    return (T * T) * F.kl_div(log_p_s, log_p_t, reduction="batchmean", log_target=True)


def listmle_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, topk: int | None = None) -> torch.Tensor:
    """ListMLE (Eq. ListMLE): -log P_PL(pi_teacher | student scores), summed over the first topk positions
    of the teacher's descending class order, averaged over the batch. Depends on the teacher only through
    argsort(t), hence invariant to temperature scaling / any increasing transform of the teacher logits."""
    order = torch.argsort(teacher_logits.detach(), dim=1, descending=True)
    s = student_logits.gather(1, order)  # student scores in the teacher's order
    tail_lse = torch.logcumsumexp(s.flip(1), dim=1).flip(1)  # [:, j] = logsumexp(s[:, j:])
    terms = tail_lse - s
    if topk is not None:
        terms = terms[:, :topk]
    return terms.sum(1).mean()


def expected_calibration_error(probs: torch.Tensor, labels: torch.Tensor, n_bins: int = 15) -> float:
    """Eq. ECE: equal-width bins on the max-probability confidence, bin b = (b/n_bins, (b+1)/n_bins]."""
    conf, pred = probs.max(dim=1)
    correct = (pred == labels).double()
    conf = conf.double()
    idx = (torch.ceil(conf * n_bins).long() - 1).clamp(0, n_bins - 1)
    n = conf.shape[0]
    ece = 0.0
    for b in range(n_bins):
        mask = idx == b
        cnt = int(mask.sum())
        if cnt:
            ece += cnt / n * abs(float(correct[mask].mean()) - float(conf[mask].mean()))
    return float(ece)


def pearson(x: list[float], y: list[float]) -> float:
    """Pearson correlation; nan when either side is constant."""
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    a, b = a - a.mean(), b - b.mean()
    den = math.sqrt(float((a * a).sum() * (b * b).sum()))
    return float((a * b).sum() / den) if den > 1e-12 else float("nan")


# ----------------------------------------------------------------------------------------------------
# Models and data


class MLP(nn.Module):
    """784 -> hidden... (ReLU) -> 10 on standardized, flattened Fashion-MNIST images."""

    def __init__(self, hidden):
        super().__init__()
        layers, d = [], N_PIXELS
        for h in hidden:
            layers += [nn.Linear(d, int(h)), nn.ReLU()]
            d = int(h)
        layers.append(nn.Linear(d, N_CLASSES))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def build(arch: dict) -> MLP:
    return MLP(arch["hidden"])


def _flat(x: torch.Tensor) -> torch.Tensor:
    return to_float(x).flatten(1)  # uint8 (N, 28, 28) -> (N, 784) standardized


@torch.no_grad()
def _logits(net: nn.Module, x: torch.Tensor, batch: int) -> torch.Tensor:
    net.eval()
    return torch.cat([net(_flat(x[a : a + batch])) for a in range(0, x.shape[0], batch)])


def _state(net: nn.Module) -> dict:
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


def prepare(cfg: Config, res) -> dict:
    """Fashion-MNIST subset (uint8) + the given teachers, trained once here with cfg.teacher_seed, and their
    logits on the train subset (distillation targets) and on the test set (teacher acc / ECE)."""
    raw = load_fashion(res["fashion_mnist"])
    x_tr, y_tr = subset(raw["x_train"], raw["y_train"].long(), cfg.n_train, cfg.data_seed)
    x_te, y_te = subset(raw["x_test"], raw["y_test"].long(), cfg.n_test, cfg.data_seed + 1)
    data = {"x_train": x_tr.contiguous(), "y_train": y_tr.contiguous(), "x_test": x_te.contiguous(),
            "y_test": y_te.contiguous(), "teachers": {}}
    xf = _flat(x_tr)
    for width in cfg.teacher_widths:
        arch = {"hidden": [width] * cfg.teacher_depth}
        torch.manual_seed(cfg.teacher_seed)
        net = build(arch)
        gen = torch.Generator().manual_seed(cfg.teacher_seed)

        def batch_fn(step: int, gen=gen):
            idx = torch.randint(0, xf.shape[0], (cfg.batch_size,), generator=gen)
            return xf[idx], y_tr[idx]

        def loss_fn(batch, net=net):
            xb, yb = batch
            return F.cross_entropy(net(xb), yb)

        opt = torch.optim.Adam(net.parameters(), lr=cfg.teacher_lr)
        train_loop(list(net.parameters()), batch_fn, loss_fn, opt, cfg.teacher_steps, modules=[net])
        data["teachers"][teacher_name(width)] = {
            "arch": arch, "state": _state(net),
            "train_logits": _logits(net, x_tr, cfg.eval_batch), "test_logits": _logits(net, x_te, cfg.eval_batch),
        }
    return data


# ----------------------------------------------------------------------------------------------------
# Train / compress / evaluate


def _train_student(cfg: Config, data: dict, variant: str, seed: int, teacher_logits: torch.Tensor | None, log) -> dict:
    arch = {"hidden": list(cfg.student_hidden)}
    torch.manual_seed(seed)
    net = build(arch)  # same init for every teacher and variant at this seed
    xf, y = _flat(data["x_train"]), data["y_train"]
    gen = torch.Generator().manual_seed(seed)  # same batch order too

    def batch_fn(step: int):
        idx = torch.randint(0, xf.shape[0], (cfg.batch_size,), generator=gen)
        return xf[idx], y[idx], (teacher_logits[idx] if teacher_logits is not None else None)

    def loss_fn(batch):
        xb, yb, tb = batch
        s = net(xb)
        ce = F.cross_entropy(s, yb)
        if variant == "none":
            return ce
        if variant == "kl":
            distill = kd_kl_loss(s, tb, cfg.temperature)
        else:
            distill = listmle_loss(s, tb, cfg.rank_topk)
        return (1 - cfg.alpha) * ce + cfg.alpha * distill

    opt = torch.optim.Adam(net.parameters(), lr=cfg.student_lr)
    lr_fn = lambda step: cosine_lr(step, cfg.student_steps, cfg.student_lr, cfg.warmup)  # noqa: E731
    train_loop(list(net.parameters()), batch_fn, loss_fn, opt, cfg.student_steps, log=log,
               log_every=cfg.log_every, lr_fn=lr_fn, modules=[net])
    return {"arch": arch, "state": _state(net)}


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    """One student per teacher (kl, rank) or one CE-only student (none); curves logged per teacher."""
    if variant not in VARIANTS:
        raise ValueError(f"kd_ranking: unknown variant {variant!r}; variants: {VARIANTS}")
    students = {}
    names = cfg.teacher_names if variant != "none" else ("none",)
    for name in names:
        tlog = None
        if log is not None:
            prefix = "train/" if variant == "none" or name == names[-1] else f"train_{name}/"

            def tlog(step, _p=prefix, **m):  # the largest teacher's student gets the plain train/ keys
                log(step, **{(_p + k.split("/", 1)[1]) if k.startswith("train/") else k: v for k, v in m.items()})

        tl = data["teachers"][name]["train_logits"] if variant != "none" else None
        students[name] = _train_student(cfg, data, variant, seed, tl, tlog)
    return {"kind": "teachers", "variant": variant, "students": students}


def compress(cfg: Config, model: dict, data: dict, variant: str, seed: int) -> dict:
    """Distillation is the compression: one level per teacher, the student distilled from it."""
    out = {}
    for name in cfg.teacher_names:
        student = model["students"]["none" if model["variant"] == "none" else name]
        out[name] = {"kind": "student", "teacher": name, "arch": student["arch"], "state": student["state"]}
    return out


def _teacher_metrics(cfg: Config, data: dict, name: str) -> dict:
    t = data["teachers"][name]
    logits = t["test_logits"]
    acc = 100.0 * float((logits.argmax(1) == data["y_test"]).double().mean())
    ece = expected_calibration_error(F.softmax(logits, 1), data["y_test"], cfg.ece_bins)
    return {"acc": acc, "ece": ece, "params": float(count_params(t["state"]))}


@torch.no_grad()
def evaluate(cfg: Config, model: dict, data: dict) -> dict:
    """Dense: the teachers (acc %, 15-bin ECE, measured params; the unsuffixed keys are the largest
    teacher's). A level: the student's acc / ece / params and its teacher's teacher_acc / _ece / _params."""
    if model["kind"] == "teachers":
        out = {}
        for name in cfg.teacher_names:
            m = _teacher_metrics(cfg, data, name)
            out.update({f"{k}_{name}": v for k, v in m.items()})
        out.update(_teacher_metrics(cfg, data, cfg.teacher_names[-1]))
        return out
    net = build(model["arch"])
    net.load_state_dict(model["state"])
    logits = _logits(net, data["x_test"], cfg.eval_batch)
    acc = 100.0 * float((logits.argmax(1) == data["y_test"]).double().mean())
    out = {"acc": acc, "ece": expected_calibration_error(F.softmax(logits, 1), data["y_test"], cfg.ece_bins),
           "params": float(count_params(net))}
    out.update({f"teacher_{k}": v for k, v in _teacher_metrics(cfg, data, model["teacher"]).items()})
    return out


# ----------------------------------------------------------------------------------------------------
# Derived metrics and the claims


def derive(cfg: Config, rows: list[dict]) -> list[dict]:
    """Per row: compressed@<t>/drop = max_t' acc(t') - acc(t) (best-teacher student minus this one) and
    dense/corr_acc_ece = Pearson(student acc, teacher ECE) over the teachers (nan -> absent)."""
    out = []
    for row in rows:
        row = dict(row)
        accs = [row.get(f"compressed@{n}/acc") for n in cfg.teacher_names]
        eces = [row.get(f"compressed@{n}/teacher_ece") for n in cfg.teacher_names]
        if None not in accs:
            best = max(accs)
            for n, a in zip(cfg.teacher_names, accs):
                row[f"compressed@{n}/drop"] = best - a
            if None not in eces:
                r = pearson(accs, eces)
                if not math.isnan(r):
                    row["dense/corr_acc_ece"] = r
        out.append(row)
    return out


def comparisons(cfg: Config) -> list[Comparison]:
    big = cfg.teacher_names[-1]
    return [
        Comparison("acc", "rank", "kl", better="higher", stage="compressed", level=big,
                   text=f"ranking loss gives a more accurate student than KL with the largest teacher ({big})"),
        Comparison("drop", "rank", "kl", better="lower", stage="compressed", level=big,
                   text="ranking loss removes the drop with larger teachers (best-teacher acc - largest-teacher acc)"),
        Comparison("acc", "rank", "none", better="higher", stage="compressed", level=big,
                   text=f"ranking-loss student beats the no-distillation student with the largest teacher ({big})"),
        Comparison("acc", "kl", "none", better="higher", stage="compressed", level=big,
                   text=f"KL-distilled student beats the no-distillation student with the largest teacher ({big})"),
    ]


SPEC = register_paper(PaperSpec(
    id="kd_ranking",
    title="Revisit the Essence of Distilling Knowledge through Calibration",
    claim="ranking loss removes the drop with larger teachers",
    Config=Config,
    variants=VARIANTS,
    prepare=prepare, train=train, compress=compress, evaluate=evaluate,
    comparisons=comparisons, derive=derive,
    resources=("fashion_mnist",),
    data="Fashion-MNIST: an n_train-image subset of the official train split (teachers and student learn from "
         "the same images), the official 10k test split for accuracy and 15-bin ECE",
    substitutions="Paper: CIFAR-100 / ImageNet with ResNet/WRN teacher zoos and students. Here: MLP teachers of "
                  "growing width (trained once in prepare with a fixed seed and one recipe, treated as given; "
                  "their ECE is measured, not forced) and a small MLP student; Hinton KD (T, T^2, alpha) vs "
                  "ListMLE on the teacher's class order (our choice of calibration-insensitive ranking loss; the "
                  "paper's exact ranking loss was not retrieved) vs CE only; a few thousand Adam steps, 3 seeds",
    compression="distillation: each level is the small student distilled from one teacher (level = teacher "
                "name w<width>); dense = the teachers. 'none' has the same CE-only student at every level",
    tradeoff=("params", "acc"),
    weight=1,
))

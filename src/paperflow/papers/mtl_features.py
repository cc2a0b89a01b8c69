"""mtl_features: "Provable Multi-Task Representation Learning by Two-Layer ReLU Neural Networks" (Collins, Hassani,
Soltanolkotabi, Mokhtari, Shakkottai), ICML 2024.

Claim: a two-layer ReLU network trained by a simple gradient-based multi-task algorithm on many binary tasks whose
labels depend on an r-dim projection B^T x of d-dim inputs (d >> r) recovers that subspace in its first-layer
weights (the task heads, updated before each representation step, induce a pseudo-contrastive loss); a single task
drawn from the same family cannot guarantee all r directions.

Fidelity "reconstruction": no code was released, and the `pages` corpus (queried for the title with "Algorithm 1",
"Section 2 data model", "Appendix F numerical simulations") returns the abstract and summaries only (alternating SGD,
heads per task before the representation step, Fig. 1: recovery error falls with the number of tasks), not the
paper's task distribution. Setting (our reconstruction): x ~ N(0, I_d); B in R^{d x r} with orthonormal columns
(drawn per seed); task t: y_t = sign(a_t^T B^T x), a_t uniform on the unit sphere of R^r (drawn per seed).
Network: f_t(x) = c_t^T relu(W x), W in R^{h x d} shared, heads c_t per task.
Algorithm (the paper's alternating scheme, "mtl"): each step draws a fresh batch (the same inputs x labelled by
every task), splits it in two; (1) heads: each task's head is the ridge least-squares fit of its labels on
relu(W x) on the first half (closed form: "heads updated before representation learning"); (2) representation:
one SGD step on W of the mean over tasks of the squared loss of the second half with those heads (train_loop).
Baseline "single_all" (contract v3; it replaced "single", the first linear-threshold task alone, which depends on
ONE direction of span(B) and so could not reveal the subspace by information, whatever the learner: 85-90 degrees,
as at init): one task that depends on all r directions, y = sign(|B^T x|^2 - median of chi^2_r) (balanced), W and
its head (c, c0) trained jointly by SGD on the whole batch (the ordinary single-task learner; Damian, Lee &
Soltanolkotabi 2022 show such a learner can find the subspace of a target with a non-degenerate Hessian). Same W
initialisation, inputs, steps and lr grid.
Metrics: principal angles (scipy.linalg.subspace_angles) between the span of W's top-r right singular vectors and
span(B): the largest angle in degrees, at the end (max_angle) and at init (max_angle_init, ~87), and the mean
sin^2; the fraction of W's energy in span(B) (||W B||_F^2 / ||W||_F^2; r/d at random init); w_shift =
||W - W0||_F / ||W0||_F; downstream: ridge linear probes on relu(W x) fitted on cfg.n_probe examples of each of
cfg.probe_tasks new linear-threshold tasks, accuracy on fresh inputs.
Headline (absolute threshold, fixed before the v3 run): mtl's largest principal angle is below 30 degrees (every
true direction within 30 degrees of W's top-r subspace), paired per seed against the constant view "mtl|recovered";
refuted when its 95% interval lies above 30. Mechanism gate: w_shift of mtl above 0.2 (feature learning, not the
random-features regime; measured in the runs). The comparison with single_all is a secondary row; a control checks
that single_all's features move towards span(B) (it is not a strawman).
Equal tuning: both variants pick the SGD lr from the same 5-value grid in prepare() by their own validation
accuracy (ridge read-out of their own task(s) on held-out inputs; tuning seed != evaluation seeds); a diverging lr
scores nan (never chosen).
Compression: magnitude pruning of the first layer W at cfg.sparsities (does the learned subspace survive?).

Tuning history (disclosed): the first default run used a 3-value lr grid scored on 1,000 validation inputs; the
single-task net landed on the grid's lower edge with validation scores within noise (0.924, 0.916, 0.895). The grid
was widened to 5 values (0.03 ... 3) and validation raised to 10,000 inputs for BOTH variants; test results were
the same in both runs (about 9 vs 87 degrees). v3 (issue 24) kept mtl's setting and grid unchanged, replaced the
baseline and made the 30-degree threshold the headline, after those v2 results (mtl about 9 degrees) were known.
Probe on the tuning seed (training/validation only): single_all's validation accuracy by lr 0.563, 0.876, then
divergence at 0.3-3 (chosen 0.1, inside the grid), max angle 40 degrees there; mtl's w_shift 0.88 at its chosen lr.
While measuring cost, evaluation seeds 0 and 1 of the old draw were printed (mtl 8.7 and 10.8 degrees, single_all 35
and 65) after the threshold was fixed. Because the threshold was chosen knowing v2's results, every evaluation seed's
subspace, tasks and inputs are re-drawn (Config.draw = 1: seed s uses the streams of s + DRAW_STRIDE; tuning keeps
its own seed and never reads them): the registered verdict comes from draws no one had seen.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

from ..compress.magnitude import layer_magnitude_mask
from ..loop import train_loop
from ..registry import register_paper
from ..spec import Comparison, Gate, PaperSpec, check, edge_gate
from ..tuning import tune

VARIANTS = ("mtl", "single_all")
DRAW_STRIDE = 1_000_003  # evaluation seed s of draw k uses the random streams of s + k * DRAW_STRIDE (tuning never does)
RECOVERED_DEG = 30.0  # "recovers the subspace": every true direction within 30 degrees of W's top-r subspace (fixed a priori)


@dataclass(frozen=True)
class Config:
    d: int = 64  # input dimension
    r: int = 4  # dimension of the label-relevant subspace
    width: int = 64  # hidden ReLU units h
    n_tasks: int = 40  # training tasks of the multi-task variant
    batch: int = 256  # inputs per step (half fit the heads, half the representation step)
    steps: int = 300
    lr_grid: tuple = (0.03, 0.1, 0.3, 1.0, 3.0)  # SGD lr, chosen per variant on validation inputs
    tune_steps: int = 300
    tune_seed: int = 1000
    draw: int = 1  # which draw of the evaluation seeds' subspaces, tasks and inputs (v2 was draw 0; see the history)
    ridge: float = 1e-2  # head / probe ridge (times the number of examples)
    n_val: int = 10000  # validation inputs (lr selection; 1000 left the single-task scores within noise)
    probe_tasks: int = 20
    n_probe: int = 32  # labelled examples per downstream task (< d: only a low-dim representation helps)
    n_probe_test: int = 1000
    sparsities: tuple = (0.5, 0.8)
    log_every: int = 50

    def __post_init__(self) -> None:
        for name in ("lr_grid", "sparsities"):
            object.__setattr__(self, name, tuple(float(v) for v in getattr(self, name)))
        check(1 <= self.r < self.d, f"need 1 <= r < d, got r={self.r}, d={self.d}")
        check(self.width >= self.r, f"width must be >= r, got {self.width}")
        check(self.n_tasks >= 2, f"n_tasks must be >= 2 (multi-task), got {self.n_tasks}")
        check(self.batch >= 4 and self.steps >= 1 and self.tune_steps >= 1, "batch >= 4, steps and tune_steps >= 1")
        check(len(self.lr_grid) >= 1 and all(v > 0 for v in self.lr_grid) and list(self.lr_grid) == sorted(self.lr_grid),
              f"lr_grid must be positive and ascending, got {self.lr_grid}")
        check(self.ridge > 0 and min(self.n_val, self.probe_tasks, self.n_probe, self.n_probe_test) >= 1,
              "ridge > 0 and n_val, probe_tasks, n_probe, n_probe_test >= 1")
        check(all(0 <= s < 1 for s in self.sparsities), f"sparsities must be in [0, 1), got {self.sparsities}")


def level_name(s: float) -> str:
    return f"{s:.2f}"


# ----------------------------------------------------------------------------------------------------
# Ground truth, features, heads


def ground_truth(cfg: Config, seed: int) -> dict:
    """B (d, r) orthonormal, training task vectors A (n_tasks, r) and probe task vectors (probe_tasks, r)."""
    g = torch.Generator().manual_seed(seed)
    B, _ = torch.linalg.qr(torch.randn(cfg.d, cfg.r, generator=g, dtype=torch.float64))
    unit = lambda n: torch.nn.functional.normalize(torch.randn(n, cfg.r, generator=g, dtype=torch.float64), dim=1)
    return {"B": B.float(), "A": unit(cfg.n_tasks).float(), "A_probe": unit(cfg.probe_tasks).float()}


def labels(x: torch.Tensor, B: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
    """(n, d) inputs -> (n, T) labels in {-1, +1}: sign(a_t^T B^T x)."""
    z = x @ B @ A.T
    return torch.where(z >= 0, 1.0, -1.0)


def features(W: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ W.T)


def ridge_heads(phi: torch.Tensor, y: torch.Tensor, ridge: float) -> torch.Tensor:
    """argmin_C ||phi C - y||^2 + ridge * n ||C||^2 with a bias column: phi (n, h), y (n, T) -> C (h + 1, T)."""
    phi1 = torch.cat([phi, torch.ones(phi.shape[0], 1, dtype=phi.dtype)], 1)
    G = phi1.T @ phi1 + ridge * phi.shape[0] * torch.eye(phi1.shape[1], dtype=phi.dtype)
    return torch.linalg.solve(G, phi1.T @ y)


def predict(phi: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    return torch.cat([phi, torch.ones(phi.shape[0], 1, dtype=phi.dtype)], 1) @ C


def principal_angles(W: torch.Tensor, B: torch.Tensor, r: int) -> np.ndarray:
    """Principal angles (radians, descending) between span of W's top-r right singular vectors and span(B)."""
    from scipy.linalg import subspace_angles

    _, _, Vt = np.linalg.svd(W.double().numpy(), full_matrices=False)
    return subspace_angles(Vt[:r].T, B.double().numpy())


# ----------------------------------------------------------------------------------------------------
# Training


def radial_labels(x: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """(n, d) -> (n, 1) labels of the single_all task: sign(|B^T x|^2 - m_r), m_r the median of chi^2_r (balanced
    classes). It depends on all r directions of span(B) (and only on them), so one task CAN reveal the subspace."""
    z = (x @ B).pow(2).sum(1, keepdim=True)
    return torch.where(z >= chi2_median(B.shape[1]), 1.0, -1.0)


@functools.lru_cache(maxsize=None)
def chi2_median(r: int) -> float:
    from scipy.stats import chi2

    return float(chi2.median(r))


def task_labels(variant: str, x: torch.Tensor, gt: dict) -> torch.Tensor:
    return labels(x, gt["B"], gt["A"]) if variant == "mtl" else radial_labels(x, gt["B"])


def fit(cfg: Config, variant: str, seed: int, lr: float, steps: int, log=None) -> dict:
    """mtl: the paper's alternating scheme (ridge heads on the first half of the batch, then one SGD step on W on the
    second half); single_all: one task depending on all r directions, W and its head (c, c0) trained jointly by SGD on
    the whole batch (the ordinary single-task learner). The same W initialisation, inputs, steps and lr grid."""
    if variant not in VARIANTS:
        raise ValueError(f"mtl_features: unknown variant {variant!r}")
    gt = ground_truth(cfg, seed)
    torch.manual_seed(seed)
    W = (torch.randn(cfg.width, cfg.d) / cfg.d**0.5).requires_grad_()
    W0 = W.detach().clone()
    head = torch.cat([torch.randn(cfg.width, 1) / cfg.width**0.5, torch.zeros(1, 1)]).requires_grad_()  # single_all's (c, c0)
    gen = torch.Generator().manual_seed(seed + 7919)
    half = cfg.batch // 2

    def batch_fn(step: int):
        x = torch.randn(cfg.batch, cfg.d, generator=gen)
        return x, task_labels(variant, x, gt)

    def loss_fn(batch):
        x, y = batch
        if variant != "mtl":
            return ((predict(features(W, x), head) - y) ** 2).mean()
        with torch.no_grad():  # (1) heads first, on the first half, with the current representation
            C = ridge_heads(features(W, x[:half]), y[:half], cfg.ridge)
        return ((predict(features(W, x[half:]), C) - y[half:]) ** 2).mean()  # (2) representation loss

    params = [W] if variant == "mtl" else [W, head]
    train_loop(params, batch_fn, loss_fn, torch.optim.SGD(params, lr=lr), steps, log=log, log_every=cfg.log_every)
    W = W.detach().clone()
    gv = torch.Generator().manual_seed(seed + 104729)
    xs = [torch.randn(cfg.n_val, cfg.d, generator=gv) for _ in range(2)]
    C = ridge_heads(features(W, xs[0]), task_labels(variant, xs[0], gt), cfg.ridge)
    val = float((torch.sign(predict(features(W, xs[1]), C)) == task_labels(variant, xs[1], gt)).float().mean())
    return {"W": W, "W0": W0, "seed": seed, "val_acc": val}


def _val_score(cfg: Config, variant: str, lr: float) -> tuple[None, float]:
    """Validation accuracy of one tuning run; a diverging lr scores nan (never chosen)."""
    try:
        return None, fit(cfg, variant, cfg.tune_seed, lr, cfg.tune_steps)["val_acc"]
    except FloatingPointError:
        return None, float("nan")


def prepare(cfg: Config, res) -> dict:
    """Equal tuning of the SGD lr for both variants (tuning seed, validation accuracy of the trained tasks)."""
    return {"tuning": {v: tune(cfg.lr_grid, lambda lr, v=v: _val_score(cfg, v, lr), higher=True, name="lr")[1] for v in VARIANTS}}


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    """The tuned lr; if it diverges on this seed, the next smaller grid value (lr_fallbacks counts the steps down,
    reported in the metrics)."""
    info = {k: float(v) for k, v in data["tuning"][variant].items()}
    i = cfg.lr_grid.index(info["tuned_lr"])
    for down in range(i + 1):
        try:
            out = fit(cfg, variant, seed + cfg.draw * DRAW_STRIDE, cfg.lr_grid[i - down], cfg.steps, log)
        except FloatingPointError:
            if down == i:
                raise
            continue
        return {**out, "tuning": {**info, "lr_fallbacks": float(down)}}
    raise AssertionError("unreachable")


def compress(cfg: Config, model: dict, data: dict, variant: str, seed: int) -> dict:
    """Magnitude pruning of the first layer W (the learned representation) at each level."""
    return {level_name(s): {**model, "W": model["W"] * layer_magnitude_mask(model["W"], s)} for s in cfg.sparsities}


def probe_accuracy(cfg: Config, W: torch.Tensor, gt: dict, seed: int) -> float:
    """Mean test accuracy of ridge linear probes on relu(W x), n_probe examples per new task."""
    g = torch.Generator().manual_seed(seed + 15485863)
    x_tr, x_te = torch.randn(cfg.n_probe, cfg.d, generator=g), torch.randn(cfg.n_probe_test, cfg.d, generator=g)
    C = ridge_heads(features(W, x_tr), labels(x_tr, gt["B"], gt["A_probe"]), cfg.ridge)
    return float((torch.sign(predict(features(W, x_te), C)) == labels(x_te, gt["B"], gt["A_probe"])).float().mean())


def evaluate(cfg: Config, model: dict, data: dict) -> dict:
    """Angles to span(B) after training and at init (max_angle, max_angle_init, their difference angle_drop), mean
    sin^2, the energy share in span(B), how far W moved from its init (w_shift = ||W - W0||_F / ||W0||_F, the
    mechanism: feature learning, not the random-features regime), downstream probes and the tuning record."""
    seed = int(model["seed"])
    gt = ground_truth(cfg, seed)
    W, W0, B = model["W"], model["W0"], gt["B"]
    ang = principal_angles(W, B, cfg.r)
    init = float(np.degrees(principal_angles(W0, B, cfg.r).max()))
    out = {"max_angle": float(np.degrees(ang.max())), "mean_sin2": float(np.mean(np.sin(ang) ** 2)),
           "energy_in_subspace": float((W @ B).pow(2).sum() / W.pow(2).sum()), "max_angle_init": init,
           "angle_drop": init - float(np.degrees(ang.max())), "w_shift": float((W - W0).norm() / W0.norm()),
           "probe_acc": probe_accuracy(cfg, W, gt, seed), "val_acc": float(model["val_acc"])}
    out.update({k: v for k, v in model.get("tuning", {}).items() if k in ("tuned_lr", "grid_edge", "lr_fallbacks")})
    return out


def derive(cfg: Config, rows: list[dict]) -> list[dict]:
    """Reference views per seed: "<v>|init" (dense/max_angle := the same run's max_angle_init, W before training) and
    "mtl|recovered" (dense/max_angle := RECOVERED_DEG, the absolute threshold of the headline)."""
    out = list(rows)
    for r in rows:
        if r["variant"] not in VARIANTS or r.get("dense/max_angle_init") is None:
            continue
        key = {k: v for k, v in r.items() if "/" not in k and k != "variant"}
        out.append({**key, "variant": f"{r['variant']}|init", "dense/max_angle": r["dense/max_angle_init"]})
        if r["variant"] == "mtl":
            out.append({**key, "variant": "mtl|recovered", "dense/max_angle": RECOVERED_DEG})
    return out


def comparisons(cfg: Config) -> list[Comparison]:
    edge = {v: edge_gate(v) for v in VARIANTS}
    lr_gates = tuple(edge.values())
    moved = Gate("feature learning, not random features: the first layer moved from its init by more than 20% of its norm "
                 "(||W - W0||_F / ||W0||_F)", variant="mtl", metric="w_shift", above=0.2, kind="mechanism")
    fits = Gate("the single-task net learns its own task (validation accuracy above 0.75)", variant="single_all",
                metric="val_acc", above=0.75)
    lv = level_name(cfg.sparsities[0])
    return [
        Comparison("max_angle", "mtl", "mtl|recovered", better="lower", role="headline", gates=(edge["mtl"], moved),
                   text=f"multi-task training ({cfg.n_tasks} tasks) recovers the r={cfg.r} subspace of R^{cfg.d}: the largest "
                        f"principal angle between W's top-r subspace and the true one ends below {RECOVERED_DEG:.0f} degrees",
                   refuted_if=f"the 95% interval of the mean largest principal angle over seeds lies above {RECOVERED_DEG:.0f} "
                              "degrees (the subspace is not recovered)"),
        Comparison("max_angle", "mtl", "single_all", better="lower", role="secondary", gates=lr_gates + (fits,),
                   text="the multi-task subspace is closer to the true one than after training on one task that depends on "
                        "all r directions (|B^T x|^2 thresholded; W and head by SGD, same inputs, steps and lr grid)"),
        Comparison("probe_acc", "mtl", "single_all", better="higher", role="secondary", gates=lr_gates,
                   text=f"downstream: linear probes on the multi-task features ({cfg.n_probe} examples per new task) are more "
                        "accurate than on the single-task features"),
        Comparison("max_angle", "single_all", "single_all|init", better="lower", role="control", gates=(edge["single_all"],),
                   text="the single-task baseline is not a strawman: its features move towards span(B) (max angle below init)"),
        Comparison("energy_in_subspace", "mtl", "single_all", better="higher", role="control",
                   text="share of the first layer's energy inside span(B) (r/d at init) is larger after multi-task training"),
        Comparison("max_angle", "mtl", "single_all", better="lower", role="control", stage="compressed", level=lv,
                   text=f"after {float(lv):.0%} magnitude pruning of W the multi-task subspace is still closer to the true one"),
    ]


SPEC = register_paper(PaperSpec(
    id="mtl_features",
    title="Provable Multi-Task Representation Learning by Two-Layer ReLU Neural Networks",
    claim="multi-task training recovers the r-dim label subspace (largest principal angle below 30 degrees)",
    Config=Config,
    variants=VARIANTS,
    prepare=prepare, train=train, compress=compress, evaluate=evaluate, derive=derive,
    comparisons=comparisons, fidelity="reconstruction",
    data="synthetic by design of the theorem: x ~ N(0, I_64), labels sign(a_t^T B^T x) with B a random 4-dim subspace "
         "and a_t random unit vectors (single_all: sign(|B^T x|^2 - median)); each seed draws B, the tasks, the "
         "initialisation and the inputs",
    substitutions="paper: theory with generic T tasks and sample sizes; here d=64, r=4, 64 ReLU units, 40 training tasks, "
                  "300 SGD steps of 256 fresh inputs; heads by closed-form ridge before each representation step; linear "
                  "threshold tasks in the r-dim space (our reconstruction of the task family); the single-task baseline is a "
                  "task on all r directions (a single linear-threshold task would reveal one direction only)",
    compression="magnitude pruning of the first-layer weights W at 50% and 80% (no fine-tuning); angles and probes re-measured",
    figure="sparsity",
))

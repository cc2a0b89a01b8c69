"""The two-task Multi-Fashion+MNIST benchmark shared by the multi-task papers (fairgrad, excessmtl, bayesagg_mtl):
the MultiLeNet model (shared conv trunk, one linear head per task), per-task accuracy, Delta-m% and the trunk's
magnitude pruning. Moved out of papers/fairgrad.py when a second paper needed them (a paper module never imports
another paper's module: its DVC stage and Snakemake jobs would rerun when the other paper changes).

`cfg` arguments are duck-typed: accuracies() reads cfg.eval_batch, compress() reads cfg.sparsities.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn

from .compress.magnitude import apply_masks, global_magnitude_masks, prunable_weights

TASKS = ("a", "b")  # a = Fashion-MNIST item (top-left), b = MNIST digit (bottom-right)
N_CLASSES = 10


def check_bench_config(cfg) -> None:
    """Config checks shared by the Multi-Fashion+MNIST papers (excessmtl, bayesagg_mtl): the overlay set sizes and
    the held-out pools they draw from (n_train/n_val/n_test overlays; mnist_test + mnist_val of the 10k MNIST pool;
    fashion_val of the 60k Fashion-MNIST training images), the lr grid, the pruning levels and the eval settings."""
    from .spec import check

    check(cfg.n_train > 0 and cfg.n_val > 0 and cfg.n_test > 0, "n_train, n_val, n_test must be > 0")
    check(0 < cfg.mnist_test and 0 < cfg.mnist_val < 10000 - cfg.mnist_test, "mnist_test, mnist_val must split the 10k MNIST pool")
    check(0 < cfg.fashion_val < 60000, f"fashion_val must be in (0, 60000), got {cfg.fashion_val}")
    check(len(cfg.lr_grid) >= 1 and all(lr > 0 for lr in cfg.lr_grid) and list(cfg.lr_grid) == sorted(cfg.lr_grid),
          f"lr_grid must be positive and ascending, got {cfg.lr_grid}")
    check(all(0 <= s < 1 for s in cfg.sparsities) and cfg.compare_level in cfg.sparsities,
          f"sparsities in [0, 1) and compare_level among them, got {cfg.sparsities}, {cfg.compare_level}")
    check(cfg.eval_batch > 0 and cfg.log_every > 0, "eval_batch and log_every must be > 0")


def delta_m_comparisons(method: str, name: str, baselines, baselines_text: str, best: str, compare_level: float) -> list:
    """The rows of a Delta-m% paper (fairgrad, bayesagg_mtl): headline vs the validation-chosen best baseline, one
    secondary per baseline, a control at the compressed level; each row gated on its variants' lr not on the grid
    edge (the single-task references only rescale each task's term of a paired difference: tuned, not gated)."""
    from .spec import Comparison, Gate

    def lr_gates(*variants: str) -> tuple:
        return tuple(Gate(f"{v}: tuned lr inside the grid", variant=v, metric="grid_edge", below=0.5) for v in variants)

    rows = [Comparison("delta_m", method, best, better="lower", role="headline", gates=lr_gates(method, best),
                       text=f"{name} has lower Delta-m% than the best baseline ({baselines_text}, chosen on validation)")]
    rows += [Comparison("delta_m", method, b, better="lower", role="secondary", gates=lr_gates(method, b),
                        text=f"{name} has lower Delta-m% than {b.upper()}") for b in baselines]
    level = level_name(compare_level)
    rows.append(Comparison("delta_m", method, "ls", better="lower", stage="compressed", level=level, role="control",
                           text=f"{name} keeps a lower Delta-m% than LS with the trunk pruned to {level} (no fine-tuning)"))
    return rows


class ConflictCounter:
    """Wraps a train_loop combine hook and measures gradient conflict on the shared parameters (added for fairgrad's
    contract-v3 mechanism gate, as mmpareto's counter; other papers are unaffected unless they wrap their combiner):
    per step, the pairwise cosines of the task gradients G (K, P); a step conflicts when some pair has g_i . g_j < 0.
    stats(): conflict_frac (share of steps that conflict), mean_cos (mean over steps of the mean pairwise cosine) and
    norm_ratio (mean over steps of max_k ||g_k|| / min_k ||g_k||, the imbalance a fair allocation also reacts to)."""

    def __init__(self, combine) -> None:
        self.combine, self.steps, self.conflicts, self.cos_sum, self.ratio_sum = combine, 0, 0, 0.0, 0.0

    def __call__(self, G: torch.Tensor, losses: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            norms = G.norm(dim=1)
            gram = G @ G.T
            k = G.shape[0]
            iu = torch.triu_indices(k, k, offset=1)
            dots = gram[iu[0], iu[1]]
            cos = dots / (norms[iu[0]] * norms[iu[1]]).clamp_min(1e-30)
            self.conflicts += int(bool((dots < 0).any()))
            self.cos_sum += float(cos.mean()) if cos.numel() else 1.0
            self.ratio_sum += float(norms.max() / norms.min().clamp_min(1e-30))
            self.steps += 1
        return self.combine(G, losses)

    def stats(self) -> dict:
        n = max(1, self.steps)
        return {"conflict_frac": self.conflicts / n, "mean_cos": self.cos_sum / n, "grad_norm_ratio": self.ratio_sum / n}


def level_name(sparsity: float) -> str:
    return f"{sparsity:.2f}"


def _images(x: torch.Tensor) -> torch.Tensor:
    return (x.float() / 255.0)[:, None]  # (B, 1, S, S) in [0, 1]


class MultiLeNet(nn.Module):
    """Shared trunk conv(5)-pool-relu-conv(5)-pool-relu-fc-relu, one linear head per task. activation="elu" makes
    the representation's activation (after fc) an ELU, as BayesAgg-MTL's official models (bayesagg_mtl)."""

    def __init__(self, channels=(10, 20), hidden: int = 50, image_size: int = 28, n_tasks: int = 2, activation: str = "relu"):
        super().__init__()
        if activation not in ("relu", "elu"):
            raise ValueError(f"MultiLeNet: activation must be relu or elu, got {activation!r}")
        c1, c2 = channels
        side = ((image_size - 4) // 2 - 4) // 2  # after two (conv5, pool2)
        self.trunk = nn.Sequential(OrderedDict(
            conv1=nn.Conv2d(1, c1, 5), pool1=nn.MaxPool2d(2), act1=nn.ReLU(),
            conv2=nn.Conv2d(c1, c2, 5), pool2=nn.MaxPool2d(2), act2=nn.ReLU(),
            flat=nn.Flatten(), fc=nn.Linear(c2 * side * side, hidden), act3=nn.ELU() if activation == "elu" else nn.ReLU(),
        ))
        self.heads = nn.ModuleList(nn.Linear(hidden, N_CLASSES) for _ in range(n_tasks))

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        z = self.trunk(x)  # (B, hidden)
        return [head(z) for head in self.heads]  # K x (B, 10)


def build_model(arch: dict) -> MultiLeNet:
    return MultiLeNet(tuple(arch["channels"]), arch["hidden"], arch["image_size"], len(TASKS), arch.get("activation", "relu"))


@torch.no_grad()
def accuracies(cfg: Config, model: dict, x: torch.Tensor, ys: dict) -> dict:
    """Accuracy (%) of each trained task of the model on images x with labels ys {"a": ..., "b": ...}."""
    net = build_model(model["arch"])
    net.load_state_dict(model["state"])
    net.eval()
    correct = {t: 0 for t in model["arch"]["tasks"]}
    for start in range(0, x.shape[0], cfg.eval_batch):
        outs = net(_images(x[start : start + cfg.eval_batch]))
        for t in correct:
            pred = outs[TASKS.index(t)].argmax(1)
            correct[t] += int((pred == ys[t][start : start + cfg.eval_batch]).sum())
    return {t: 100.0 * c / x.shape[0] for t, c in correct.items()}


def compress(cfg: Config, model: dict, data: dict, variant: str, seed: int) -> dict:
    """Global magnitude pruning of the shared trunk's weights at each level; heads untouched."""
    trunk = prunable_weights(model["state"], include=("trunk.",))  # conv1/conv2/fc weights
    out = {}
    for s in cfg.sparsities:
        masks = global_magnitude_masks(trunk, s)
        out[level_name(s)] = {"state": apply_masks(model["state"], masks), "arch": model["arch"]}
    return out


def delta_m(metrics: list[float], reference: list[float], higher_better: list[bool]) -> float:
    """Delta-m% = (1/K) sum_k (-1)^delta_k (M_k - M_ref,k) / M_ref,k * 100, delta_k = 1 if higher is
    better (Maninis et al. 2019; the FairGrad paper's metric). Lower is better."""
    terms = [(-1.0 if hb else 1.0) * (m - r) / r for m, r, hb in zip(metrics, reference, higher_better)]
    return 100.0 * sum(terms) / len(terms)


def _stages(row: dict) -> set[str]:
    return {col.rsplit("/", 1)[0] for col in row if "/" in col}


def tune_lrs(cfg, data: dict, names, fit_fn) -> dict:
    """Equal tuning shared by excessmtl and bayesagg_mtl: for every name (variant or single-task model), each lr of
    cfg.lr_grid is trained for cfg.tune_steps steps with seed cfg.tune_seed by fit_fn(cfg, data, name, seed, lr,
    steps, log) and scored by the mean validation accuracy of its trained tasks; the best lr is kept (ties: the
    smaller; a diverging lr scores nan and never wins). Returns {name: tuning info + val_acc_<task>}."""
    from .tuning import tune

    out = {}
    for name in names:
        def fit(lr: float, name: str = name):
            try:
                model = fit_fn(cfg, data, name, cfg.tune_seed, lr, cfg.tune_steps, None)
            except FloatingPointError:
                return {}, float("nan")
            acc = accuracies(cfg, model, data["x_val"], {"a": data["ya_val"], "b": data["yb_val"]})
            return acc, float(np.mean(list(acc.values())))

        acc, info = tune(cfg.lr_grid, fit, higher=True, name="lr")
        out[name] = {**info, **{f"val_acc_{t}": v for t, v in acc.items()}}
    return out


def best_baseline(rows: list[dict], baselines, refs: dict) -> str | None:
    """The baseline with the lowest VALIDATION Delta-m%: its tuned lr's validation accuracies (the tuning record in
    the rows, the same for every seed) against the tuned single-task reference(s); refs = {"a": variant giving
    task a's reference, "b": ...}. Ties go to the order of `baselines`; None without tuning records."""
    first: dict = {}
    for r in rows:
        first.setdefault(r["variant"], r)
    try:
        ref = [first[refs["a"]]["dense/val_acc_a"], first[refs["b"]]["dense/val_acc_b"]]
        scores = {b: delta_m([first[b]["dense/val_acc_a"], first[b]["dense/val_acc_b"]], ref, [True, True]) for b in baselines}
    except (KeyError, TypeError):  # no tuning record in the rows (older runs, partial tables)
        return None
    return min(baselines, key=lambda b: (scores[b], list(baselines).index(b)))


def derive_delta_m(rows: list[dict], mtl_variants, baselines, refs: dict, best_view: str) -> list[dict]:
    """Add "<stage>/delta_m" to each multi-task row against the same seed's references at the same stage ("dense"
    or "compressed:<level>"; refs as in best_baseline), then the view `best_view`: per seed, a copy of the rows of
    the baseline best_baseline() picks, with "dense/best_baseline" = its index. Rows without references are kept
    unchanged."""
    by = {(r["variant"], r["seed"]): r for r in rows}
    out = []
    for row in rows:
        row = dict(row)
        ra, rb = by.get((refs["a"], row["seed"])), by.get((refs["b"], row["seed"]))
        if row["variant"] in mtl_variants and ra is not None and rb is not None:
            for stage in sorted(_stages(row)):
                m = [row.get(f"{stage}/acc_a"), row.get(f"{stage}/acc_b")]
                ref = [ra.get(f"{stage}/acc_a"), rb.get(f"{stage}/acc_b")]
                if None not in m and None not in ref:
                    row[f"{stage}/delta_m"] = delta_m(m, ref, [True, True])
        out.append(row)
    best = best_baseline(rows, baselines, refs)
    if best is not None:
        out += [{**r, "variant": best_view, "dense/best_baseline": float(list(baselines).index(best))}
                for r in out if r["variant"] == best]
    return out

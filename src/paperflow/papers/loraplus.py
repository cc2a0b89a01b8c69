"""LoRA+: "LoRA+: Efficient Low Rank Adaptation of Large Models", Soufiane Hayou, Nikhil Ghosh, Bin Yu,
ICML 2024. Official code: https://github.com/nikhil-ghosh-berkeley/loraplus (lora_plus.py::
create_loraplus_optimizer; also shipped as peft.optimizers.create_loraplus_optimizer).

What is implemented. LoRA (paperflow.nn.adapters.LoRALinear): a frozen linear W (out, in) plus
W' = W + (alpha/r) B A with A (r, in) Kaiming-uniform and B (out, r) = 0 (peft's init), r = 8, alpha = 16.
LoRA+ (paper Sec. 4, "Proposition 2 / Eq. (5)": lr_B = lambda lr_A with lambda >> 1): the SAME model trained
with Adam where the B matrices get lr_B = ratio * lr_A, ratio = 16 (the paper's recommended 2^4). Param groups
exactly as create_loraplus_optimizer: "lora_B" parameters AND every trainable 1-D parameter (biases, norm
scales; here the classification head's bias) at lr * ratio; every other trainable parameter (the A matrices,
the head weight) at lr; no LoRA embedding layers exist here (the code's fixed embedding lr is unused);
weight decay (0 by default) on the decayed groups only. Baselines: LoRA (ratio 1, the same groups at one lr)
and full fine-tuning of the same top layers (every weight of the adapted layers + the final norm + the head
at one lr).

Task (paperflow.finetune, shared with the ETHER paper): SmolLM2-135M-Instruct classifies 32-token passages of
the six Jane Austen novels by novel (6 classes); train/val/test passages come from disjoint position regions
of each book (first 70% / next 10% / last 20% of each novel's windows). The bottom 29 decoder layers are frozen
and their activations cached once in prepare(); adapters go on all seven linears (q/k/v/o/gate/up/down) of the
TOP decoder layer, with a linear head on the last token. AdamW, cosine schedule with linear warm-up applied to
every group as a multiple of its own lr (so LoRA+'s ratio holds at every step), batch 16.

Learning rates. The paper compares methods at their best learning rate (its Fig. 3/4: test accuracy vs lr_A for
LoRA and LoRA+). Each method runs at every lr of a grid (`lrs` for LoRA and LoRA+ lr_A, `full_lrs` for full
fine-tuning); the variant "<method>_lr<i>" is the method at the i-th lr. derive() builds, per seed, the view
"<method>|best" = the run whose VALIDATION accuracy is highest (test numbers are then reported), so the headline
comparison is best LoRA+ vs best LoRA, paired by seed.

Metrics (evaluate): test accuracy `acc` and cross-entropy `loss` after N = steps steps, validation accuracy/loss,
the validation learning curve val_loss@<step> (every eval_every steps), trainable-parameter counts, the lr.
Steps to target (derive): per seed, target = the LARGEST of the three methods' best validation losses (each
method's "|best" run's minimum over its curve), so every method reaches it; steps_to_target = the first evaluated
step whose validation loss is <= target (the same target for every variant of that seed; a run that never gets
there is censored at steps + eval_every).

Compress stage: the LoRA update is merged into the weights (W <- W + (alpha/r) B A) and the merged plain model is
evaluated again; `merge_err` = max |logit difference| merged vs unmerged on the validation passages. For full
fine-tuning the merge is the identity.

Substitutions for laptop scale (recorded in `substitutions`): SmolLM2-135M (fp32 from the 4-bit Q4_1 GGUF)
instead of GPT-2/RoBERTa/Llama-7B; a 6-way Austen novel-attribution task built here instead of GLUE/MNLI;
only the top decoder layer adapted (bottom 29 frozen and cached in float16); 32-token passages, 250 train passages per novel; 300 steps;
lr grids of 3 values instead of the paper's wide sweeps; no dropout on the LoRA branch (code default 0.1).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch.nn as nn

from .. import finetune as ft
from ..nn.adapters import LoRALinear
from ..registry import register_paper
from ..spec import Comparison, PaperSpec, check

N_LR, N_FULL_LR = 3, 3
METHODS = ("lora", "loraplus", "full")
VARIANTS = ft.lr_grid_variants(("lora", "loraplus"), N_LR) + ft.lr_grid_variants(("full",), N_FULL_LR)


@dataclass(frozen=True)
class Config(ft.TaskConfig):
    lrs: tuple = (2e-4, 6e-4, 2e-3)  # lr (LoRA) = lr_A (LoRA+), one per variant index
    full_lrs: tuple = (2e-5, 6e-5, 2e-4)  # full fine-tuning
    ratio: float = 16.0  # LoRA+ lr_B / lr_A (paper: 2^4)
    headline_lr: int = 1  # index of the lr at which the same-lr comparison is reported

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "lrs", tuple(float(x) for x in self.lrs))
        object.__setattr__(self, "full_lrs", tuple(float(x) for x in self.full_lrs))
        check(len(self.lrs) == N_LR and all(x > 0 for x in self.lrs),
              f"lrs must be {N_LR} positive learning rates (variants lora_lr0..{N_LR - 1}), got {self.lrs}")
        check(len(self.full_lrs) == N_FULL_LR and all(x > 0 for x in self.full_lrs),
              f"full_lrs must be {N_FULL_LR} positive learning rates (variants full_lr0..), got {self.full_lrs}")
        check(self.ratio >= 1, f"ratio (LoRA+ lr_B / lr_A) must be >= 1, got {self.ratio}")
        check(0 <= self.headline_lr < N_LR, f"headline_lr must index lrs (0..{N_LR - 1}), got {self.headline_lr}")


def parse_variant(variant: str) -> tuple[str, int]:
    return ft.parse_lr_variant(variant, VARIANTS)


def loraplus_groups(model: nn.Module, lr: float, ratio: float, weight_decay: float = 0.0) -> list[dict]:
    """create_loraplus_optimizer's groups: A-group (lr) = every trainable non-B matrix; B-group (lr * ratio)
    = LoRA B matrices and every trainable 1-D parameter, split into decayed / not decayed (biases and norm
    scales are never decayed, as the code's get_parameter_names(ALL_LAYERNORM_LAYERS) minus "bias")."""
    b_ids = {id(m.lora_B) for m in model.modules() if isinstance(m, LoRALinear)}
    group_a, group_b, group_b_nd = [], [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if id(p) in b_ids or p.ndim == 1:
            (group_b_nd if p.ndim == 1 else group_b).append(p)
        else:
            group_a.append(p)
    return [
        {"params": group_a, "lr": lr, "weight_decay": weight_decay, "name": "A"},
        {"params": group_b, "lr": lr * ratio, "weight_decay": weight_decay, "name": "B"},
        {"params": group_b_nd, "lr": lr * ratio, "weight_decay": 0.0, "name": "B_no_decay"},
    ]


def variant_lr(cfg: Config, variant: str) -> float:
    method, i = parse_variant(variant)
    return cfg.full_lrs[i] if method == "full" else cfg.lrs[i]


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    method, _ = parse_variant(variant)
    lr = variant_lr(cfg, variant)
    ratio = cfg.ratio if method == "loraplus" else 1.0
    # LoRA uses the same grouping with ratio 1 (= one lr), so the two differ ONLY in lr_B
    groups = (lambda m, r: loraplus_groups(m, r, ratio, cfg.weight_decay)) if method != "full" else None
    model = ft.finetune(cfg, data, "full" if method == "full" else "lora", lr, seed, log, groups=groups)
    model.update({"variant": variant, "ratio": float(ratio)})
    return model


def _method(variant: str) -> str | None:
    return ft.method_of(variant, VARIANTS)


def derive(cfg: Config, rows: list[dict]) -> list[dict]:
    """Per seed: "<method>|best" views (the lr with the best validation accuracy), the shared loss target and
    every row's steps_to_target."""
    out = [dict(r) for r in rows]
    censored = float(cfg.steps + cfg.eval_every)
    for seed in sorted({r["seed"] for r in rows}):
        runs = [r for r in out if r["seed"] == seed and _method(r["variant"])]
        best = {}
        for m in METHODS:
            cands = [r for r in runs if _method(r["variant"]) == m and r.get("dense/val_acc") is not None]
            if cands:  # ties broken by the lower validation loss
                best[m] = max(cands, key=lambda r: (r["dense/val_acc"], -r["dense/val_loss"]))
        curves = {m: ft.curve_of(r) for m, r in best.items()}
        if not curves or not all(c[1] for c in curves.values()):
            continue
        target = max(min(losses) for _, losses in curves.values())
        for r in runs:
            steps, losses = ft.curve_of(r)
            s = ft.steps_to_target(steps, losses, target)
            r["dense/steps_to_target"] = s if s != float("inf") else censored
            r["dense/loss_target"] = target
        for m, r in best.items():
            out.append({**r, "variant": f"{m}|best", "dense/best_lr_index": float(parse_variant(r["variant"])[1])})
    return out


def comparisons(cfg: Config) -> list[Comparison]:
    i = cfg.headline_lr
    lr = f"{cfg.lrs[i]:g}"
    return [
        Comparison("acc", "loraplus|best", "lora|best", better="higher",
                   text="LoRA+ (lr_B = 16 lr_A) more accurate than LoRA after N steps, each at its best lr (val-selected)"),
        Comparison("loss", "loraplus|best", "lora|best", better="lower",
                   text="LoRA+ lower test loss than LoRA after N steps, each at its best lr"),
        Comparison("steps_to_target", "loraplus|best", "lora|best", better="lower",
                   text="LoRA+ reaches the shared validation-loss target in fewer steps than LoRA (best lrs)"),
        Comparison("loss", f"loraplus_lr{i}", f"lora_lr{i}", better="lower",
                   text=f"LoRA+ lower test loss than LoRA after N steps at the same lr_A = {lr}"),
        Comparison("steps_to_target", f"loraplus_lr{i}", f"lora_lr{i}", better="lower",
                   text=f"LoRA+ reaches the target in fewer steps than LoRA at the same lr_A = {lr}"),
        Comparison("acc", "loraplus|best", "full|best", better="higher", kind="close", margin=0.02,
                   text="LoRA+ within 2% of (or above) full fine-tuning of the same layers (best lrs)"),
        Comparison("acc", "loraplus|best", "lora|best", better="higher", stage="compressed", level="merged",
                   text="after merging B A into the weights: LoRA+ still more accurate than LoRA (best lrs)"),
    ]


SPEC = register_paper(PaperSpec(
    id="loraplus",
    title="LoRA+: Efficient Low Rank Adaptation of Large Models",
    claim="faster convergence and 1-2% better",
    Config=Config,
    variants=VARIANTS,
    prepare=ft.prepare_task, train=train, compress=ft.compress_merge, evaluate=ft.metrics,
    comparisons=comparisons, derive=derive,
    resources=("smollm2", "austen"),
    data=("pretrained SmolLM2-135M-Instruct (resources/smollm2-135m) fine-tuned to attribute 32-token passages to "
          "one of the six Jane Austen novels (resources/austen.json); train/val/test passages from disjoint "
          "position regions of each novel (first 70% / next 10% / last 20%)"),
    substitutions=("SmolLM2-135M (fp32 from the 4-bit Q4_1 GGUF) instead of GPT-2/RoBERTa/Llama-7B; a 6-way Austen "
                   "novel-attribution task instead of GLUE/MNLI; only the TOP decoder layer adapted (LoRA r=8, "
                   "alpha=16 on q/k/v/o/gate/up/down), the bottom 29 frozen with their activations cached once in "
                   "float16; last-token linear head; 32-token passages, 250 train passages per novel, 300 AdamW "
                   "steps of 16; 3-point lr grids per method, best lr picked on validation accuracy per seed; "
                   "no LoRA dropout; steps-to-target on the validation curve sampled every 10 steps"),
    compression=("merge: each LoRA update folded into its weight (W + (alpha/r) B A) and the plain merged model "
                 "evaluated again (merge_err = max |logit| difference); identity for full fine-tuning"),
    tradeoff=("trainable_params", "acc"),
    weight=1,
))

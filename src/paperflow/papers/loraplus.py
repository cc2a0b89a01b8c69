"""LoRA+: "LoRA+: Efficient Low Rank Adaptation of Large Models", Soufiane Hayou, Nikhil Ghosh, Bin Yu,
ICML 2024. Official code: https://github.com/nikhil-ghosh-berkeley/loraplus (lora_plus.py::
create_loraplus_optimizer; also shipped as peft.optimizers.create_loraplus_optimizer).

What is implemented. LoRA (paperflow.nn.adapters.LoRALinear): a frozen linear W (out, in) plus
W' = W + (alpha/r) B A with A (r, in) Kaiming-uniform and B (out, r) = 0 (peft's init), r = 8, alpha = 16.
LoRA+ (paper Sec. 4, "Proposition 2 / Eq. (5)": lr_B = lambda lr_A with lambda >> 1): the SAME model trained
with Adam where the B matrices get lr_B = ratio * lr_A, ratio = 16 (the paper's recommended 2^4). Param groups
exactly as create_loraplus_optimizer (read in the authors' lora_plus.py): "lora_B" parameters AND every
trainable 1-D parameter at lr * ratio, every other trainable parameter (the A matrices, the head weight) at lr
with weight decay; the lr * ratio parameters are split by the code's decay rule, get_parameter_names(model,
ALL_LAYERNORM_LAYERS) minus names containing "bias": a parameter inside a norm layer or named "bias" gets no
weight decay, every other one (the B matrices, a 1-D parameter that is neither a bias nor a norm scale) gets
it. No LoRA embedding layers exist here (the code's fixed embedding lr is unused). Baseline: LoRA = the same
groups with ratio 1 (one lr), so the two differ ONLY in lr_B.

Task (paperflow.finetune, shared with the ETHER paper, data artifact computed once for both papers): SmolLM2-
135M-Instruct classifies 32-token passages of the six Jane Austen novels by novel (6 classes); train/val/test
passages come from disjoint position regions of each book (first 70% / next 10% / last 20% of each novel's
windows). The bottom 29 decoder layers are frozen and their activations cached once; adapters go on all seven
linears (q/k/v/o/gate/up/down) of the TOP decoder layer, with a linear head on the last token. AdamW, cosine
schedule with linear warm-up applied to every group as a multiple of its own lr (so LoRA+'s ratio holds at
every step), batch 16.

Learning rates (equal tuning, paperflow.tuning, inside each job). The paper compares methods at their best
learning rate (its Fig. 3/4: test accuracy vs lr_A for LoRA and LoRA+). Each job (one per method and seed) fine-
tunes at every lr of ONE grid `lrs` (lr for LoRA, lr_A for LoRA+; the same size and values for both, up to 2e-2
so LoRA's optimum is bracketed) with finetune.finetune_grid and keeps the run with the best final VALIDATION
accuracy (ties to the smaller lr); the metrics record tuned_lr, grid_edge (1 when the chosen lr is the first or
last of the grid) and every lr's test accuracy/loss (acc@lr<i>, loss@lr<i>). Grid-edge gates are directional
(contract v3, issue 25 item 12): LoRA+ at its grid edge blocks only `not reproduced` (an under-tuned method can
only look worse), LoRA or head-only at theirs only `reproduced`.

Mechanism gates of the headline (issue 25), measured on the chosen runs (finetune.adapter_stats):
  - the lr ratio changes what is learned: lora_ba_ratio = mean ||B||_F / mean ||A - A_0||_F (B_0 = 0; A_0 rebuilt
    from the run's seed) is higher for LoRA+ than for LoRA (paired 95% CI). If it is not, lr_B = ratio x lr_A had no
    effect on the adapter and the two variants are the same method.
  - the adapted layer matters: LoRA beats head-only (variant "head": finetune's head-only run, its head lr tuned on
    validation over its own wide grid `head_lrs`, on frozen features computed once). The head is trained in every
    run; if it carried the accuracy the adapters would be interchangeable. The gate is on the baseline (LoRA), so it
    never blocks a refutation (LoRA+ below a LoRA that adapts).
  weight_shift (mean ||W_eff - W||_F / ||W||_F, "feature learning") is a control row, not a gate: at tuned lrs it
  may go either way without saying anything about the claim.
Refuted (`not reproduced`) when the paired interval of LoRA+ minus LoRA accuracy lies below 0 with both gates
passing. Cost: the head-only jobs are paid by reading the chosen run's test/validation numbers from the grid
evaluation and its curve instead of evaluating twice (finetune.metrics), and by sampling the validation curve
every 20 steps instead of 10 (steps to target at 20-step resolution; the headline does not use the curve).

Fidelity: the optimizer groups follow the authors' code (create_loraplus_optimizer), LoRA follows peft's init;
the task, the top-layer choice, the lr grids, the head-only reference and the step budget are ours.

Metrics (evaluate): test accuracy `acc` and cross-entropy `loss` of the chosen run after N = steps steps,
validation accuracy/loss, the validation learning curve val_loss@<step> (every eval_every steps), trainable-
parameter counts, the lr; the run at the fixed lr_A = lrs[same_lr] gives loss@lr<same_lr> and its curve
same_lr_val_loss@<step> (the secondary same-lr rows).
Steps to target (derive): per seed, target = the LARGER of the two methods' best validation losses (each
chosen run's minimum over its curve), so both reach it; steps_to_target = the first evaluated step whose
validation loss is <= target (both runs reach it by construction; censoring at steps + eval_every is only a
guard); the same with the same-lr curves gives steps_to_target_same_lr.

Compress stage (finetune.compress_merge_prune): "merged" = every LoRA update folded into its weight
(W <- W + (alpha/r) B A), equal to the dense model by construction (merge_err = max |logit difference| on the
validation passages, reported as a fact); "0.50" = that merged model with each adapted linear magnitude-pruned
to 50% (`sparsities`): does LoRA+'s gain survive pruning of the layer it changed?

Substitutions for laptop scale (recorded in `substitutions`): SmolLM2-135M (fp32 from the 4-bit Q4_1 GGUF)
instead of GPT-2/RoBERTa/Llama-7B; a 6-way Austen novel-attribution task built here instead of GLUE/MNLI;
only the top decoder layer adapted (bottom 29 frozen and cached in float16); 32-token passages, 250 train
passages per novel; 300 steps; a 5-point lr grid instead of the paper's wide sweeps; no dropout on the LoRA
branch (code default 0.1); full fine-tuning (a catalog baseline, not an abstract claim) is not run, to keep the
equal-size lr grid within the CPU budget.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch.nn as nn

from .. import finetune as ft
from ..nn.adapters import LoRALinear
from ..registry import register_paper
from ..spec import Comparison, Gate, PaperSpec, check

N_LR = 5
METHODS = ("lora", "loraplus")
VARIANTS = METHODS + ("head",)  # head: finetune's head-only run (nothing adapted), the mechanism gate's reference


@dataclass(frozen=True)
class Config(ft.TaskConfig):
    lrs: tuple = (2e-4, 6e-4, 2e-3, 6e-3, 2e-2)  # the lr grid: lr (LoRA) = lr_A (LoRA+)
    ratio: float = 16.0  # LoRA+ lr_B / lr_A (paper: 2^4)
    same_lr: int = 1  # index of the lr at which the (secondary) same-lr comparisons are reported
    # head-only: its only knob is the head's lr, tuned on validation over this wide grid (cheap: the frozen
    # features are computed once), so the reference LoRA must beat is not an under-tuned head
    head_lrs: tuple = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1)
    eval_every: int = 20  # the validation curve (steps to target) every 20 steps (v2: 10; pays for the head-only jobs)

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "lrs", tuple(float(x) for x in self.lrs))
        check(len(self.lrs) == N_LR and all(x > 0 for x in self.lrs) and list(self.lrs) == sorted(set(self.lrs)),
              f"lrs must be {N_LR} increasing positive learning rates (the common grid), got {self.lrs}")
        check(self.ratio >= 1, f"ratio (LoRA+ lr_B / lr_A) must be >= 1, got {self.ratio}")
        check(0 <= self.same_lr < N_LR, f"same_lr must index lrs (0..{N_LR - 1}), got {self.same_lr}")
        object.__setattr__(self, "head_lrs", tuple(float(x) for x in self.head_lrs))
        check(len(self.head_lrs) >= 3 and all(x > 0 for x in self.head_lrs) and list(self.head_lrs) == sorted(set(self.head_lrs)),
              f"head_lrs must be >= 3 increasing positive learning rates (the head-only grid), got {self.head_lrs}")


def _is_norm(module: nn.Module) -> bool:
    """transformers' ALL_LAYERNORM_LAYERS (nn.LayerNorm; the Llama code appends LlamaRMSNorm) and nn.RMSNorm."""
    return isinstance(module, (nn.LayerNorm, nn.RMSNorm)) or type(module).__name__.endswith(("RMSNorm", "LayerNorm"))


def decay_names(model: nn.Module) -> set[str]:
    """The code's decay_parameters: every parameter name outside a norm layer (get_parameter_names(model,
    ALL_LAYERNORM_LAYERS)), minus the names containing "bias"."""
    in_norm = {f"{mn}.{pn}" if mn else pn for mn, m in model.named_modules() if _is_norm(m)
               for pn, _ in m.named_parameters(recurse=False)}
    return {n for n, _ in model.named_parameters() if n not in in_norm and "bias" not in n}


def loraplus_groups(model: nn.Module, lr: float, ratio: float, weight_decay: float = 0.0) -> list[dict]:
    """create_loraplus_optimizer's groups: "A" (lr, decayed) = every trainable parameter that is neither a LoRA
    B matrix nor 1-D; "B" (lr * ratio, decayed) = B matrices and 1-D parameters in decay_names; "B_no_decay"
    (lr * ratio, no decay) = the rest of them (biases, norm scales)."""
    b_ids = {id(m.lora_B) for m in model.modules() if isinstance(m, LoRALinear)}
    decayed = decay_names(model)
    group_a, group_b, group_b_nd = [], [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if id(p) in b_ids or p.ndim == 1:
            (group_b if name in decayed else group_b_nd).append(p)
        else:
            group_a.append(p)
    return [
        {"params": group_a, "lr": lr, "weight_decay": weight_decay, "name": "A"},
        {"params": group_b, "lr": lr * ratio, "weight_decay": weight_decay, "name": "B"},
        {"params": group_b_nd, "lr": lr * ratio, "weight_decay": 0.0, "name": "B_no_decay"},
    ]


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    check(variant in VARIANTS, f"variant must be one of {VARIANTS}, got {variant!r}")
    if variant == "head":  # only the head trains (one lr for weight and bias): its lr is the knob, tuned over head_lrs
        model = ft.finetune_grid(cfg, data, "head", cfg.head_lrs, seed, log)
        model.update({"variant": variant, "ratio": 1.0})
        return model
    ratio = cfg.ratio if variant == "loraplus" else 1.0
    # LoRA uses the same grouping with ratio 1 (= one lr), so the two differ ONLY in lr_B
    model = ft.finetune_grid(cfg, data, "lora", cfg.lrs, seed, log,
                             groups=lambda m, r: loraplus_groups(m, r, ratio, cfg.weight_decay))
    model.update({"variant": variant, "ratio": float(ratio)})
    return model


def evaluate(cfg: Config, model: dict, data: dict) -> dict[str, float]:
    """finetune.metrics plus the validation curve of the run at lr_A = lrs[same_lr] (same_lr_val_loss@<step>)."""
    out = ft.metrics(cfg, model, data)
    if "grid" in model and model.get("variant") != "head":
        curve = model["grid"][cfg.same_lr]["curve"]
        out.update({f"same_lr_val_loss@{s}": float(l) for s, l in zip(curve["step"], curve["val_loss"])})
    return out


def derive(cfg: Config, rows: list[dict]) -> list[dict]:
    """Per seed: the shared validation-loss target of the chosen runs and every row's steps_to_target; the same
    on the same-lr curves (steps_to_target_same_lr)."""
    out = [dict(r) for r in rows]
    censored = float(cfg.steps + cfg.eval_every)
    for seed in sorted({r["seed"] for r in out}):
        runs = [r for r in out if r["seed"] == seed and r["variant"] in METHODS]
        for prefix, name in (("dense/val_loss@", "steps_to_target"), ("dense/same_lr_val_loss@", "steps_to_target_same_lr")):
            curves = [ft.curve_of(r, prefix=prefix) for r in runs]
            if len(runs) < len(METHODS) or not all(c[1] for c in curves):
                continue
            target = max(min(losses) for _, losses in curves)
            for r, (steps, losses) in zip(runs, curves):
                s = ft.steps_to_target(steps, losses, target)
                r[f"dense/{name}"] = s if s != float("inf") else censored
                r[f"dense/{name}_target"] = target
    return out


def comparisons(cfg: Config) -> list[Comparison]:
    i = cfg.same_lr
    lr = f"{cfg.lrs[i]:g}"
    grid = ", ".join(f"{x:g}" for x in cfg.lrs)
    # directional (spec.Gate, claims.gate_blocks): LoRA+ on its edge blocks only `not reproduced`, LoRA or head-only
    # on theirs only `reproduced`
    inside = (Gate("LoRA's best lr inside the grid", variant="lora", metric="grid_edge", below=0.5),
              Gate("LoRA+'s best lr_A inside the grid", variant="loraplus", metric="grid_edge", below=0.5))
    head_inside = Gate("head-only's best head lr inside its grid", variant="head", metric="grid_edge", below=0.5)
    ratio_active = Gate(
        f"LoRA+'s lr_B = {cfg.ratio:g} lr_A changes what is learned: B moved further relative to A than under LoRA "
        "(lora_ba_ratio = mean ||B||_F / mean ||A - A_0||_F of the chosen run, B_0 = 0; paired 95% CI)",
        comparison=Comparison("lora_ba_ratio", "loraplus", "lora", better="higher"), kind="mechanism")
    adapted = Gate("the adapted layer matters: LoRA beats head-only (best head lr), so the adapters are not "
                   "interchangeable behind a head that carries the accuracy (paired 95% CI)",
                   comparison=Comparison("acc", "lora", "head", better="higher"), kind="mechanism")
    mech = inside + (head_inside, ratio_active, adapted)
    level = ft.level_names(cfg)[0]
    return [
        Comparison("acc", "loraplus", "lora", better="higher", role="headline", gates=mech,
                   text=f"LoRA+ (lr_B = {cfg.ratio:g} lr_A) more accurate than LoRA after N steps, each at its best "
                        f"lr on validation (grid {grid})",
                   refuted_if="the 95% interval of LoRA+ minus LoRA test accuracy (paired by seed, each at its best "
                              "validation lr) lies below 0, with the lr ratio measurably changing B's movement and "
                              "LoRA beating head-only"),
        Comparison("steps_to_target", "loraplus", "lora", better="lower", role="secondary", gates=inside,
                   text="LoRA+ reaches the shared validation-loss target in fewer steps than LoRA (best lrs)"),
        Comparison("loss", "loraplus", "lora", better="lower", role="secondary", gates=inside,
                   text="LoRA+ lower test loss than LoRA after N steps (best lrs)"),
        Comparison(f"loss@lr{i}", "loraplus", "lora", better="lower", role="secondary",
                   text=f"LoRA+ lower test loss than LoRA after N steps at the same lr_A = {lr}"),
        Comparison("steps_to_target_same_lr", "loraplus", "lora", better="lower", role="secondary",
                   text=f"LoRA+ reaches the (same-lr) validation-loss target in fewer steps than LoRA at lr_A = {lr}"),
        Comparison("weight_shift", "loraplus", "lora", better="higher", role="control", gates=inside,
                   text="feature learning: LoRA+'s adapted linears moved further from W than LoRA's (mean "
                        "||W_eff - W||_F / ||W||_F of the chosen runs)"),
        Comparison("acc", "loraplus", "head", better="higher", role="control",
                   gates=(inside[1], head_inside),
                   text="LoRA+ (best lr) more accurate than head-only (best head lr)"),
        Comparison("acc", "loraplus", "lora", better="higher", stage="compressed", level=level, role="control",
                   gates=inside,
                   text=f"after merging and magnitude-pruning the adapted layer to {cfg.sparsities[0]:.0%}: LoRA+ "
                        f"still more accurate than LoRA (best lrs)"),
        Comparison("trainable_params", "loraplus", "lora", role="fact",
                   text="trainable parameters, LoRA+ / LoRA (the same cost: only lr_B differs)"),
        Comparison("merge_err", "loraplus", "lora", stage="compressed", level="merged", role="fact",
                   text="max |logit| difference merged vs unmerged (merging B A into W is exact)"),
    ]


SPEC = register_paper(PaperSpec(
    id="loraplus",
    title="LoRA+: Efficient Low Rank Adaptation of Large Models",
    claim="faster convergence and 1-2% better",
    Config=Config,
    variants=VARIANTS,
    prepare=ft.prepare_task_shared, train=train, compress=ft.compress_merge_prune, evaluate=evaluate,
    comparisons=comparisons, derive=derive,
    resources=("smollm2", "austen"),
    data=("pretrained SmolLM2-135M-Instruct (resources/smollm2-135m) fine-tuned to attribute 32-token passages to "
          "one of the six Jane Austen novels (resources/austen.json); train/val/test passages from disjoint "
          "position regions of each novel (first 70% / next 10% / last 20%)"),
    substitutions=("SmolLM2-135M (fp32 from the 4-bit Q4_1 GGUF) instead of GPT-2/RoBERTa/Llama-7B; a 6-way Austen "
                   "novel-attribution task instead of GLUE/MNLI; only the TOP decoder layer adapted (LoRA r=8, "
                   "alpha=16 on q/k/v/o/gate/up/down), the bottom 29 frozen with their activations cached once in "
                   "float16; last-token linear head; 32-token passages, 250 train passages per novel, 300 AdamW "
                   "steps of 16; one 5-point lr grid (2e-4..2e-2) for both methods, best lr picked on validation "
                   "accuracy per seed; no LoRA dropout; steps-to-target on the validation curve sampled every 20 "
                   "steps; full fine-tuning not run (budget); a head-only reference (head lr tuned over "
                   "1e-4..1e-1 on validation, frozen features) for the mechanism gate"),
    compression=("merge: each LoRA update folded into its weight (W + (alpha/r) B A; merged == unmerged by "
                 "construction, a fact), then the merged adapted linears magnitude-pruned per matrix at "
                 "`sparsities` (the frozen cached layers stay dense)"),
    tradeoff=("trainable_params", "acc"),
    fidelity="official-code",
    weight=1,
))

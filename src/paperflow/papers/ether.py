"""ETHER: "ETHER: Efficient Finetuning of Large-Scale Models with Hyperplane Reflections", Massimo Bini,
Karsten Roth, Zeynep Akata, Anna Khoreva, ICML 2024. Official code: https://github.com/mwbini/ether
(ether-instruct/lit_gpt/ether.py::ETHERLinear: ether(), etherplus(), oft(), forward(), merge();
ether-instruct/finetune/ether.py for the training setup).

What is implemented (paperflow.nn.adapters; W (out, in) a frozen pretrained weight, y = x W^T):
  - ETHER (paper Eq. 2): W' = W H, H = blockdiag(H_1..H_n), H_i = I - 2 u_i u_i^T / (u_i^T u_i), a Householder
    reflection per block (orthogonal, det -1, ||H_i - I||_F = 2 for every u_i: bounded distance from the
    pretrained weights, the paper's argument for learning-rate robustness). One vector per block: `in`
    parameters per linear whatever n. u ~ Kaiming-uniform as the code (so H != I at init).
  - ETHER+ (paper Eq. 4, code Htype 'etherplusHH', the paper's ETHER+): H+_i = I - u u^T/|u|^2 + v v^T/|v|^2,
    v initialised to -u (H+ = I at init), applied on both sides: W' = H+_out W H+_in.
  - OFT (Qiu et al. 2023, as the code's 'oft'): W' = W blockdiag(Q_i), Q_i = (I + S)(I - S)^{-1}, S the skew part
    of R_i = 0 at init (counted as b(b-1)/2 free parameters per block).
  - LoRA (r = 8, alpha = 16; peft init) as the additive baseline.
Block-diagonal form: the paper's blockdiag(H_i) on consecutive feature blocks. The authors' code, for n > 1 without
flip_side, reshapes W row-major to (n, out, in/n) before multiplying, which is not that block-diagonal product;
we implement the paper's form (n = 1 agrees). n = 4 blocks (144-dim blocks of the 576-dim model, close to the
128-dim blocks of the authors' best Llama2-7B setting, 4096/32). Forward applies the transform to the activations
(x H^T, O(in) per token for a reflection), the same map as the merged weight (unit-tested).

Task (paperflow.finetune, shared with LoRA+): SmolLM2-135M-Instruct classifies 32-token passages of the six
Austen novels by novel; bottom 29 layers frozen and cached, every method on all seven linears (q/k/v/o/gate/up/
down) of the top decoder layer, last-token linear head; AdamW, cosine schedule with warm-up, 300 steps of 16.

The learning-rate sweep (equal tuning, paperflow.tuning, inside each job). Every method runs at every lr of ONE
common absolute grid `lrs` (the same size and values for every method), the paper's robustness protocol: one job
per method and seed fine-tunes at each lr (finetune.finetune_grid: same seed, so the same initialisation and batch
order at every lr) and keeps the run with the best final VALIDATION accuracy (ties to the smaller lr). The
classification head, which every method needs, is trained at the fixed `head_lr` in every run, so the sweep moves
only the adapter's lr. The metrics record tuned_lr, grid_edge, every lr's test accuracy (acc@lr<i>) and the
robustness numbers over the grid: acc_worst = min over the grid of TEST accuracy (the robustness claim is judged
on it: per seed, the method's worst vs the baseline's worst) and acc_spread = max - min.
The "similar accuracy" rows compare best vs best with directional grid-edge gates (contract v3): LoRA at its
grid edge blocks only `reproduced` (an under-tuned baseline favours the method), ETHER/ETHER+
at its edge blocks only `not reproduced` (an under-tuned method can only look worse). Parameter counts are
deterministic: facts (LoRA r=8 / ETHER = 16.3 on this layer), no verdict.

Head-only reference and the mechanism gate (issue 25). The head is trained in every run, and on a 6-way task over
frozen cached layers the head alone might carry the accuracy, so that "within 5% of LoRA" would hold for any
adapter, even none. Variant "head" is finetune's head-only run (nothing adapted) trained exactly as the head of
every adapter run (fixed head_lr, same steps, schedule, batches and head init): the isolating ablation, an adapter
run with its adapter removed (cheap: the frozen features are computed once). derive adds
the view "head|margin" = acc_head / (1 - close_margin), and every "within the margin of LoRA" row carries the
mechanism gate "LoRA beats head|margin" (paired 95% CI): head-only lies more than the margin below LoRA, so a
method within the margin has adapted the layer. Failing, the row is `not testable` with the measured difference.
A control row checks ETHER+ against head-only directly. Refuted (`not reproduced`) when ETHER+'s paired interval
lies below -5% of LoRA's mean with that gate passing. The validation curve is not used by this paper, so it is
sampled every eval_every = 50 steps (was 10), which pays for the head-only jobs (cost: docs in the report).
The chosen run's test/validation numbers are read from the grid evaluation and its curve (finetune.metrics), not
evaluated twice.

Fidelity. Follows the authors' code (ether-instruct/lit_gpt/ether.py): the Householder and ETHER+ transforms
(etherplusHH, v initialised to -u, both sides), Kaiming-uniform u, OFT as the code's 'oft', merging. Follows the
paper's text, not the code: the block-diagonal arrangement for n > 1 (see above). Ours (reconstruction of the
protocol at laptop scale): the task, the layer choice, the head-only reference, the lr grids and step budget.

Compress stage (finetune.compress_merge_prune): "merged" = every adapter folded into its weight (W + s B A,
W H, H_out W H_in, W Q), equal to the dense model by construction (merge_err = max |logit| difference on the
validation passages, a fact); "0.50" = the merged model with each adapted linear magnitude-pruned to 50%
(`sparsities`); a control row compares ETHER+ and LoRA there.

Substitutions for laptop scale: SmolLM2-135M (fp32 from the Q4_1 GGUF) instead of Llama2-7B / Phi-1.5 / Stable
Diffusion; a 6-way Austen novel-attribution task instead of instruction tuning (Alpaca -> MMLU/ARC/TruthfulQA)
and controllable image synthesis; only the top decoder layer adapted (the bottom 29 frozen with activations cached
in float16, computed once and shared with the LoRA+ paper); 32-token passages, 250 train passages per novel, 300
steps; a 3-point lr grid; no dropout.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch.nn as nn

from .. import finetune as ft
from ..nn.adapters import Adapter
from ..registry import register_paper
from ..spec import Comparison, Gate, PaperSpec, check

N_LR = 3
METHODS = ("ether", "ether_plus", "lora", "oft")
VARIANTS = METHODS + ("head",)  # head: finetune's head-only run (nothing adapted), the premise's reference
HEAD_MARGIN = "head|margin"  # derived view: head-only accuracy / (1 - close_margin) (the mechanism gate)


@dataclass(frozen=True)
class Config(ft.TaskConfig):
    lrs: tuple = (1e-4, 1e-3, 1e-2)  # the common absolute lr grid of the sweep (adapter parameters)
    head_lr: float = 1e-3  # the classification head, fixed across the sweep
    close_margin: float = 0.05  # "similar accuracy": within 5% (relative) of LoRA at the best lr
    eval_every: int = 50  # ETHER uses no learning curve (only the final validation accuracy picks the lr)

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "lrs", tuple(float(x) for x in self.lrs))
        check(len(self.lrs) == N_LR and all(x > 0 for x in self.lrs) and list(self.lrs) == sorted(set(self.lrs)),
              f"lrs must be {N_LR} increasing positive learning rates (the common grid), got {self.lrs}")
        check(self.head_lr > 0, f"head_lr must be > 0, got {self.head_lr}")
        check(0 <= self.close_margin < 1, f"close_margin must be in [0, 1), got {self.close_margin}")


def sweep_groups(model: nn.Module, lr: float, head_lr: float) -> list[dict]:
    """Adapter parameters at the swept lr, the head at the fixed head_lr (no weight decay, as the ETHER runs)."""
    adapter = [p for m in model.modules() if isinstance(m, Adapter) for p in m.adapter_parameters() if p.requires_grad]
    head = [p for p in model.head.parameters() if p.requires_grad]
    return [{"params": adapter, "lr": lr, "weight_decay": 0.0, "name": "adapter"},
            {"params": head, "lr": head_lr, "weight_decay": 0.0, "name": "head"}]


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    check(variant in VARIANTS, f"variant must be one of {VARIANTS}, got {variant!r}")
    if variant == "head":  # the exact ablation: every adapter run with its adapter removed (head at head_lr)
        model = ft.finetune_grid(cfg, data, "head", (cfg.head_lr,), seed, log)
        model.update({"variant": variant, "head_lr": float(cfg.head_lr)})
        return model
    model = ft.finetune_grid(cfg, data, variant, cfg.lrs, seed, log,
                             groups=lambda m, r: sweep_groups(m, r, cfg.head_lr))
    model.update({"variant": variant, "head_lr": float(cfg.head_lr)})
    return model


def derive(cfg: Config, rows: list[dict]) -> list[dict]:
    """The mechanism gate's reference: per seed, a view HEAD_MARGIN of the head-only run whose accuracy is
    acc_head / (1 - close_margin), so "LoRA beats it" (paired 95% CI) says head-only lies more than the headline's
    margin below LoRA: within-margin-of-LoRA is then not reachable without adapting the layer."""
    out = [dict(r) for r in rows]
    for r in rows:
        if r["variant"] == "head" and r.get("dense/acc") is not None:
            out.append({"paper": r.get("paper", "ether"), "variant": HEAD_MARGIN, "seed": r["seed"],
                        "dense/acc": float(r["dense/acc"]) / (1.0 - cfg.close_margin)})
    return out


def comparisons(cfg: Config) -> list[Comparison]:
    grid = ", ".join(f"{x:g}" for x in cfg.lrs)
    m = cfg.close_margin
    inside = lambda v, name: Gate(f"{name}'s best lr inside the grid", variant=v, metric="grid_edge", below=0.5)  # noqa: E731
    adapted = Gate(f"the adapted layer matters: LoRA beats head-only by more than the {m:.0%} margin (acc_lora > "
                   f"acc_head / (1 - {m:g}), paired 95% CI), so a method within {m:.0%} of LoRA is not merely the head",
                   comparison=Comparison("acc", "lora", HEAD_MARGIN, better="higher"), kind="mechanism")
    close = lambda method, name: (inside("lora", "LoRA"), inside(method, name), adapted)  # noqa: E731
    level = ft.level_names(cfg)[0]
    return [
        Comparison("acc", "ether_plus", "lora", better="higher", kind="close", margin=m, role="headline",
                   gates=close("ether_plus", "ETHER+"),
                   text=f"ETHER+ at its best lr within {m:.0%} of (or above) LoRA r={cfg.lora_r} at its best lr, with "
                        f"fewer parameters (the parameter ratios are facts below), where LoRA beats head-only by more "
                        f"than the margin",
                   refuted_if=f"the 95% interval of ETHER+ minus LoRA test accuracy (paired by seed, each at its best "
                              f"validation lr) lies below -{m:.0%} of LoRA's mean, with LoRA beating head-only by more "
                              f"than the margin"),
        Comparison("acc", "ether", "lora", better="higher", kind="close", margin=m, role="secondary",
                   gates=close("ether", "ETHER"),
                   text=f"ETHER at its best lr within {m:.0%} of (or above) LoRA at its best lr"),
        Comparison("acc_worst", "ether_plus", "lora", better="higher", role="secondary",
                   text=f"robust to the lr: ETHER+'s worst test accuracy over the lr grid ({grid}) above LoRA's"),
        Comparison("acc_worst", "ether", "lora", better="higher", role="secondary",
                   text=f"robust to the lr: ETHER's worst test accuracy over the lr grid ({grid}) above LoRA's"),
        Comparison("acc_worst", "ether_plus", "oft", better="higher", role="secondary",
                   text=f"robust to the lr: ETHER+'s worst test accuracy over the lr grid ({grid}) above OFT's"),
        Comparison("acc", "ether_plus", "head", better="higher", role="control",
                   gates=(inside("ether_plus", "ETHER+"),),
                   text="ETHER+ (best lr) more accurate than head-only (the same run without the adapter): the "
                        "reflections adapt the layer"),
        Comparison("acc", "ether_plus", "lora", better="higher", kind="close", margin=m,
                   stage="compressed", level=level, role="control", gates=close("ether_plus", "ETHER+"),
                   text=f"after merging and magnitude-pruning the adapted layer to {cfg.sparsities[0]:.0%}: ETHER+ "
                        f"within {m:.0%} of LoRA (best lrs)"),
        Comparison("params", "lora", "ether", role="fact",
                   text="trainable adapter parameters, LoRA r=8 / ETHER (paper: 10-100x)"),
        Comparison("params", "lora", "ether_plus", role="fact",
                   text="trainable adapter parameters, LoRA r=8 / ETHER+ (two-sided)"),
        Comparison("params", "oft", "ether_plus", role="fact",
                   text="trainable adapter parameters, OFT (skew part) / ETHER+"),
        Comparison("merge_err", "ether_plus", "lora", stage="compressed", level="merged", role="fact",
                   text="max |logit| difference merged vs unmerged, ETHER+ and LoRA (merging is exact)"),
    ]


SPEC = register_paper(PaperSpec(
    id="ether",
    title="ETHER: Efficient Finetuning of Large-Scale Models with Hyperplane Reflections",
    claim="10-100x fewer params at similar accuracy, robust to lr",
    Config=Config,
    variants=VARIANTS,
    prepare=ft.prepare_task_shared, train=train, compress=ft.compress_merge_prune, evaluate=ft.metrics,
    comparisons=comparisons, derive=derive,
    resources=("smollm2", "austen"),
    data=("pretrained SmolLM2-135M-Instruct (resources/smollm2-135m) fine-tuned to attribute 32-token passages to "
          "one of the six Jane Austen novels (resources/austen.json); train/val/test passages from disjoint "
          "position regions of each novel (first 70% / next 10% / last 20%)"),
    substitutions=("SmolLM2-135M (fp32 from the 4-bit Q4_1 GGUF) instead of Llama2-7B/Phi-1.5/Stable Diffusion; a "
                   "6-way Austen novel-attribution task instead of instruction tuning and image synthesis; only "
                   "the TOP decoder layer adapted (q/k/v/o/gate/up/down), bottom 29 frozen with activations cached "
                   "once in float16; last-token head trained at a fixed lr in every run; n=4 diagonal blocks; "
                   "32-token passages, 250 train passages per novel, 300 AdamW steps of 16; a 3-point common lr "
                   "grid; the paper's block-diagonal form rather than the code's row-major reshape (n>1); no "
                   "dropout; a head-only ablation (every adapter run with its adapter removed) for the mechanism "
                   "gate; the validation curve sampled every 50 steps (unused here)"),
    compression=("merge: each adapter folded into its weight (LoRA W + sBA, ETHER W H, ETHER+ H_out W H_in, OFT W Q; "
                 "merged == unmerged by construction, a fact), then the merged adapted linears magnitude-pruned per "
                 "matrix at `sparsities` (the frozen cached layers stay dense)"),
    tradeoff=("params", "acc"),
    fidelity="official-code",
    weight=1,
))

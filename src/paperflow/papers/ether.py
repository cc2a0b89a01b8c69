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

The learning-rate sweep. Every method runs at every lr of ONE common absolute grid `lrs` (variants
"<method>_lr<i>"), the paper's robustness protocol (same lrs for all methods). The classification head, which
every method needs, is trained at the fixed `head_lr` in every run, so the sweep moves only the adapter's lr.
derive() builds per seed: "<method>|best" (the lr with the best VALIDATION accuracy; test accuracy reported),
with dense/acc_spread = max - min TEST accuracy over the grid (the robustness claim: lower spread),
dense/acc_worst = min over the grid, and dense/lora_over_params, dense/oft_over_params = LoRA's (OFT's) adapter
parameter count / the method's; "ref|10x" carries 10 for both ratios (the "10-100x fewer parameters" claim).

Compress stage: every adapter merged into its weight (W + s B A, W H, H_out W H_in, W Q) and the plain merged model
evaluated again; merge_err = max |logit| difference merged vs unmerged on the validation passages.

Substitutions for laptop scale: SmolLM2-135M (fp32 from the Q4_1 GGUF) instead of Llama2-7B / Phi-1.5 / Stable
Diffusion; a 6-way Austen novel-attribution task instead of instruction tuning (Alpaca -> MMLU/ARC/TruthfulQA)
and controllable image synthesis; only the top decoder layer adapted (the bottom 29 frozen with activations cached
in float16); 32-token passages, 250 train passages per novel, 300 steps; a 3-point lr grid; no dropout.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch.nn as nn

from .. import finetune as ft
from ..nn.adapters import Adapter
from ..registry import register_paper
from ..spec import Comparison, PaperSpec, check

N_LR = 3
METHODS = ("ether", "ether_plus", "lora", "oft")
VARIANTS = ft.lr_grid_variants(METHODS, N_LR)


@dataclass(frozen=True)
class Config(ft.TaskConfig):
    lrs: tuple = (1e-4, 1e-3, 1e-2)  # the common absolute lr grid of the sweep (adapter parameters)
    head_lr: float = 1e-3  # the classification head, fixed across the sweep
    close_margin: float = 0.05  # "similar accuracy": within 5% (relative) of LoRA at the best lr

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "lrs", tuple(float(x) for x in self.lrs))
        check(len(self.lrs) == N_LR and all(x > 0 for x in self.lrs),
              f"lrs must be {N_LR} positive learning rates (variants <method>_lr0..{N_LR - 1}), got {self.lrs}")
        check(self.head_lr > 0, f"head_lr must be > 0, got {self.head_lr}")
        check(0 <= self.close_margin < 1, f"close_margin must be in [0, 1), got {self.close_margin}")


def parse_variant(variant: str) -> tuple[str, int]:
    return ft.parse_lr_variant(variant, VARIANTS)


def sweep_groups(model: nn.Module, lr: float, head_lr: float) -> list[dict]:
    """Adapter parameters at the swept lr, the head at the fixed head_lr (no weight decay, as the ETHER runs)."""
    adapter = [p for m in model.modules() if isinstance(m, Adapter) for p in m.adapter_parameters() if p.requires_grad]
    head = [p for p in model.head.parameters() if p.requires_grad]
    return [{"params": adapter, "lr": lr, "weight_decay": 0.0, "name": "adapter"},
            {"params": head, "lr": head_lr, "weight_decay": 0.0, "name": "head"}]


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    method, i = parse_variant(variant)
    model = ft.finetune(cfg, data, method, cfg.lrs[i], seed, log,
                        groups=lambda m, r: sweep_groups(m, r, cfg.head_lr))
    model.update({"variant": variant, "head_lr": float(cfg.head_lr)})
    return model


def _method(variant: str) -> str | None:
    return ft.method_of(variant, VARIANTS)


def derive(cfg: Config, rows: list[dict]) -> list[dict]:
    """Per seed: "<method>|best" with the lr-sweep spread and the parameter ratios; "ref|10x"."""
    out = [dict(r) for r in rows]
    for seed in sorted({r["seed"] for r in rows}):
        runs = [r for r in rows if r["seed"] == seed and _method(r["variant"]) and r.get("dense/acc") is not None]
        by = {m: [r for r in runs if _method(r["variant"]) == m] for m in METHODS}
        params = {m: rs[0]["dense/params"] for m, rs in by.items() if rs}
        for m, rs in by.items():
            if not rs:
                continue
            best = max(rs, key=lambda r: (r["dense/val_acc"], -r["dense/val_loss"]))
            accs = [r["dense/acc"] for r in rs]
            view = {**best, "variant": f"{m}|best", "dense/acc_spread": max(accs) - min(accs),
                    "dense/acc_worst": min(accs), "dense/best_lr": best["dense/lr"]}
            for ref in ("lora", "oft"):
                if ref in params and params[m] > 0:
                    view[f"dense/{ref}_over_params"] = params[ref] / params[m]
            out.append(view)
        if runs:
            out.append({"paper": runs[0]["paper"], "variant": "ref|10x", "seed": seed,
                        "dense/lora_over_params": 10.0, "dense/oft_over_params": 10.0})
    return out


def comparisons(cfg: Config) -> list[Comparison]:
    grid = ", ".join(f"{x:g}" for x in cfg.lrs)
    m = cfg.close_margin
    return [
        Comparison("acc_spread", "ether_plus|best", "lora|best", better="lower",
                   text=f"ETHER+ accuracy varies less than LoRA's over the lr sweep ({grid})"),
        Comparison("acc_spread", "ether|best", "lora|best", better="lower",
                   text=f"ETHER accuracy varies less than LoRA's over the lr sweep ({grid})"),
        Comparison("acc_spread", "ether_plus|best", "oft|best", better="lower",
                   text=f"ETHER+ accuracy varies less than OFT's over the lr sweep ({grid})"),
        Comparison("acc", "ether_plus|best", "lora|best", better="higher", kind="close", margin=m,
                   text=f"ETHER+ at its best lr within {m:.0%} of (or above) LoRA at its best lr"),
        Comparison("acc", "ether|best", "lora|best", better="higher", kind="close", margin=m,
                   text=f"ETHER at its best lr within {m:.0%} of (or above) LoRA at its best lr"),
        Comparison("lora_over_params", "ether|best", "ref|10x", better="higher",
                   text="ETHER trains >10x fewer parameters than LoRA r=8 (measured counts)"),
        Comparison("lora_over_params", "ether_plus|best", "ref|10x", better="higher",
                   text="ETHER+ (two-sided) trains >10x fewer parameters than LoRA r=8 (measured counts)"),
        Comparison("oft_over_params", "ether_plus|best", "ref|10x", better="higher",
                   text="ETHER+ trains >10x fewer parameters than OFT (measured counts)"),
        Comparison("acc", "ether_plus|best", "lora|best", better="higher", kind="close", margin=m,
                   stage="compressed", level="merged",
                   text=f"after merging the reflections into the weights: ETHER+ within {m:.0%} of merged LoRA"),
    ]


SPEC = register_paper(PaperSpec(
    id="ether",
    title="ETHER: Efficient Finetuning of Large-Scale Models with Hyperplane Reflections",
    claim="10-100x fewer params at similar accuracy, robust to lr",
    Config=Config,
    variants=VARIANTS,
    prepare=ft.prepare_task, train=train, compress=ft.compress_merge, evaluate=ft.metrics,
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
                   "grid; the paper's block-diagonal form rather than the code's row-major reshape (n>1); no dropout"),
    compression=("merge: each adapter folded into its weight (LoRA W + sBA, ETHER W H, ETHER+ H_out W H_in, OFT W Q) "
                 "and the plain merged model evaluated again (merge_err = max |logit| difference)"),
    tradeoff=("params", "acc"),
    weight=1,
))

"""PLATON (Zhang et al., ICML 2022): pruning during fine-tuning with an uncertainty-weighted sensitivity
score and a cubic schedule, as in the ID-guided pruning paper's official code (Nofear18/ID_VL_Pruning
ID_pruner.py::Pruner, which follows QingruZhang/PLATON).

Schedule (ID_pruner.py::schedule_threshold_comb): remaining ratio 1 for the first `warmup` steps, then
    r = r_f + (1 - r_f) (1 - progress)^3,   progress = (step - warmup) / (total - warmup - final),
masks applied every delta_t steps, and every step over the last `final` steps at the target r_f.
Score (update_ipt_with_local_window, beta2 in (0, 1) branch):
    I_t = |W * dL/dW| (averaged over a local window of delta_t steps),
    Ibar = b1 Ibar + (1 - b1) I,   U = b2 U + (1 - b2) |I - Ibar|,   S = Ibar * U.
Masks from the scores: one threshold over all pruned matrices (mask_with_threshold); the scores are
non-negative, so paperflow.compress.magnitude.global_magnitude_masks applied to them is that threshold.
"""
from __future__ import annotations

import torch


def remaining_ratio(step: int, target: float, total: int, warmup: int, final: int, delta_t: int = 1) -> tuple[float, bool]:
    """(remaining ratio, mask now?) at `step` for a final sparsity `target` over `total` steps."""
    r_f = 1.0 - target
    if step <= warmup:
        return 1.0, False
    if step > total - final:
        return r_f, True
    mul = 1.0 - (step - warmup) / (total - warmup - final)
    return r_f + (1.0 - r_f) * mul ** 3, step % delta_t == 0


class PlatonScore:
    """PLATON importance with a local window (update(step, params, grads) once per optimizer step)."""

    def __init__(self, params: dict[str, torch.Tensor], beta1: float, beta2: float, delta_t: int):
        self.b1, self.b2, self.dt = beta1, beta2, delta_t
        self.ipt = {n: torch.zeros_like(p) for n, p in params.items()}
        self.avg = {n: torch.zeros_like(p) for n, p in params.items()}
        self.unc = {n: torch.zeros_like(p) for n, p in params.items()}

    def update(self, step: int, params: dict[str, torch.Tensor], grads: dict[str, torch.Tensor]) -> None:
        local = step % self.dt
        for n, p in params.items():
            s = (p.detach() * grads[n]).abs()
            if local == 0:
                self.avg[n] = self.b1 * self.avg[n] + (1 - self.b1) * self.ipt[n]
                self.unc[n] = self.b2 * self.unc[n] + (1 - self.b2) * (self.ipt[n] - self.avg[n]).abs()
                self.ipt[n] = s
            else:
                self.ipt[n] = (self.ipt[n] * local + s) / (local + 1)

    def scores(self) -> dict[str, torch.Tensor]:
        return {n: self.avg[n] * self.unc[n] for n in self.avg}

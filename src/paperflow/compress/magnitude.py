"""Magnitude pruning: the shared default compression stage.

`global_magnitude_masks` ranks |w| over all given tensors together (one threshold);
`layer_magnitude_mask` ranks within one matrix (uniform per-layer sparsity, the baseline of Wanda/OWL).
Masks are bool tensors, True = keep.
"""
from __future__ import annotations

from typing import Mapping

import torch


def layer_magnitude_mask(weight: torch.Tensor, sparsity: float) -> torch.Tensor:
    """Keep the largest-|w| (1 - sparsity) fraction of `weight` (exactly int(numel * sparsity) pruned)."""
    _check_sparsity(sparsity)
    n_prune = int(weight.numel() * sparsity)
    mask = torch.ones(weight.numel(), dtype=torch.bool)
    if n_prune:
        idx = torch.argsort(weight.detach().abs().reshape(-1), stable=True)[:n_prune]
        mask[idx] = False
    return mask.view_as(weight)


def global_magnitude_masks(weights: Mapping[str, torch.Tensor], sparsity: float) -> dict[str, torch.Tensor]:
    """One threshold over all tensors: prunes exactly int(total * sparsity) weights of smallest |w|."""
    _check_sparsity(sparsity)
    names = list(weights)
    flat = torch.cat([weights[n].detach().abs().reshape(-1) for n in names])
    keep = torch.ones(flat.numel(), dtype=torch.bool)
    n_prune = int(flat.numel() * sparsity)
    if n_prune:
        keep[torch.argsort(flat, stable=True)[:n_prune]] = False
    masks, offset = {}, 0
    for n in names:
        numel = weights[n].numel()
        masks[n] = keep[offset : offset + numel].view_as(weights[n])
        offset += numel
    return masks


def apply_masks(state: Mapping[str, torch.Tensor], masks: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A copy of `state` with masked-out entries set to zero."""
    out = dict(state)
    for name, mask in masks.items():
        out[name] = state[name] * mask.to(state[name].dtype)
    return out


def prunable_weights(state: Mapping[str, torch.Tensor], include: tuple[str, ...] = ("",), exclude: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
    """Weight matrices (dim >= 2) whose name contains one of `include` and none of `exclude`."""
    return {
        n: t
        for n, t in state.items()
        if t.dim() >= 2 and t.is_floating_point() and any(s in n for s in include) and not any(s in n for s in exclude)
    }


def sparsity_of(tensors: Mapping[str, torch.Tensor]) -> float:
    total = sum(t.numel() for t in tensors.values())
    zeros = sum(int((t == 0).sum()) for t in tensors.values())
    return zeros / max(1, total)


def _check_sparsity(sparsity: float) -> None:
    if not 0.0 <= sparsity < 1.0:
        raise ValueError(f"sparsity must be in [0, 1), got {sparsity}")

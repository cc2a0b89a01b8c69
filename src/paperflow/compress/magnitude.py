"""Magnitude pruning: the shared default compression stage.

`global_magnitude_masks` ranks |w| over all given tensors together (one threshold);
`layer_magnitude_mask` ranks within one matrix (uniform per-layer sparsity, the baseline of Wanda/OWL).
Masks are bool tensors, True = keep.
"""
from __future__ import annotations

from typing import Mapping

import torch


def keep_mask_lowest(scores: torch.Tensor, n_prune: int) -> torch.Tensor:
    """Keep mask of a (rows, n) score matrix with the n_prune lowest scores of each row pruned.

    Same result as pruning the first n_prune entries of a stable sort (ties go to the lower index),
    but O(n) per row: the n_prune-th smallest value is found with kthvalue, every score below it is
    pruned, and ties at it are pruned in index order until the row has exactly n_prune.
    """
    rows, n = scores.shape
    if n_prune <= 0:
        return torch.ones_like(scores, dtype=torch.bool)
    if n_prune >= n:
        return torch.zeros_like(scores, dtype=torch.bool)
    thr = torch.kthvalue(scores, n_prune, dim=1, keepdim=True).values  # (rows, 1)
    below = scores < thr
    tie = scores == thr
    need = n_prune - below.sum(1, keepdim=True)  # ties to prune per row, >= 1
    prune = below | (tie & (torch.cumsum(tie, dim=1) <= need))
    return ~prune


def layer_magnitude_mask(weight: torch.Tensor, sparsity: float) -> torch.Tensor:
    """Keep the largest-|w| (1 - sparsity) fraction of `weight` (exactly int(numel * sparsity) pruned)."""
    _check_sparsity(sparsity)
    n_prune = int(weight.numel() * sparsity)
    return keep_mask_lowest(weight.detach().abs().reshape(1, -1), n_prune).view_as(weight)


def global_magnitude_masks(weights: Mapping[str, torch.Tensor], sparsity: float) -> dict[str, torch.Tensor]:
    """One threshold over all tensors: prunes exactly int(total * sparsity) weights of smallest |w|."""
    _check_sparsity(sparsity)
    names = list(weights)
    flat = torch.cat([weights[n].detach().abs().reshape(-1) for n in names])
    keep = keep_mask_lowest(flat.view(1, -1), int(flat.numel() * sparsity)).view(-1)
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


def level_name(sparsity: float) -> str:
    """The compression level of a sparsity, as it appears in metric columns: 0.5 -> "0.50"."""
    return f"{sparsity:.2f}"


def magnitude_levels(state: Mapping[str, torch.Tensor], sparsities, include: tuple[str, ...] = ("",),
                     exclude: tuple[str, ...] = (), scope: str = "global") -> dict[str, dict[str, torch.Tensor]]:
    """The shared compress stage of a small trained model: {level_name(s): pruned copy of state} for each
    sparsity s, pruning the weight matrices selected by prunable_weights(include, exclude) either with one
    global threshold (scope="global") or per matrix (scope="layer", uniform per-layer sparsity)."""
    if scope not in ("global", "layer"):
        raise ValueError(f"magnitude_levels: scope must be global|layer, got {scope!r}")
    weights = prunable_weights(state, include, exclude)
    if not weights:
        raise ValueError(f"magnitude_levels: no weight matrix matches include={include} exclude={exclude}")
    out = {}
    for s in sparsities:
        masks = (global_magnitude_masks(weights, s) if scope == "global"
                 else {n: layer_magnitude_mask(w, s) for n, w in weights.items()})
        out[level_name(s)] = apply_masks(state, masks)
    return out


def magnitude_models(model: Mapping, sparsities, key: str = "state", **which) -> dict[str, dict]:
    """magnitude_levels for a model record {key: state dict, ...}: {level_name(s): the record with its state pruned}
    (every other entry of the record shared, not copied); `which` = include / exclude / scope of magnitude_levels."""
    return {name: {**model, key: state} for name, state in magnitude_levels(model[key], sparsities, **which).items()}

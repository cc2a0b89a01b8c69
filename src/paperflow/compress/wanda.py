"""Wanda: pruning by weights and activations (Sun et al., 2023; locuslab/wanda lib/prune.py).

For a linear layer y = x W^T with W (out, in), the score of weight W_ij is

    S_ij = |W_ij| * ||X_j||_2                                   (Wanda, Eq. 1)

where ||X_j||^2 is estimated as `scaler_row_j`, the running average over calibration samples of the
squared input-feature norm (as in Wanda's `WrappedGPT.add_batch`: each sample contributes the sum over
its tokens of x_tj^2). The comparison group is one output row: every row i loses exactly
int(in * sparsity) weights of lowest score (stable sort, ties broken by column index).

All functions are pure: the caller (compress/calibration.py) carries the running state.
Masks are bool tensors, True = keep (same convention as compress/magnitude.py).
"""
from __future__ import annotations

import torch

from .magnitude import keep_mask_lowest


def update_scaler_row(scaler_row: torch.Tensor, n_samples: int, x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """One WrappedGPT.add_batch step: fold a batch of inputs into the running average.

    scaler_row (in,) float32, n_samples = samples seen so far; x (B, T, in) or (T, in) is the layer input.
    Returns (new scaler_row, new n_samples) with
        scaler_row = (1 / N) * sum_{n <= N} sum_t x_{n,t,:}^2        # (in,)
    """
    if x.dim() == 2:
        x = x.unsqueeze(0)
    batch = x.shape[0]
    x = x.reshape(-1, x.shape[-1]).to(torch.float32)  # (B*T, in)
    total = n_samples + batch
    new = scaler_row * (n_samples / total) + x.pow(2).sum(dim=0) / total
    return new, total


def wanda_score(weight: torch.Tensor, scaler_row: torch.Tensor) -> torch.Tensor:
    """S = |W| * sqrt(scaler_row) broadcast over output rows: (out, in) x (in,) -> (out, in)."""
    if scaler_row.shape != (weight.shape[1],):
        raise ValueError(f"scaler_row has shape {tuple(scaler_row.shape)}, expected ({weight.shape[1]},)")
    return weight.detach().abs().to(torch.float32) * torch.sqrt(scaler_row.to(torch.float32)).unsqueeze(0)


def row_prune_mask(score: torch.Tensor, sparsity: float) -> torch.Tensor:
    """Keep mask (out, in): in each row the int(in * sparsity) lowest scores are pruned (False)."""
    if not 0.0 <= sparsity < 1.0:
        raise ValueError(f"sparsity must be in [0, 1), got {sparsity}")
    # Wanda sorts each row (stable) and prunes the first int(in * s): keep_mask_lowest gives the same mask in O(in)
    return keep_mask_lowest(score, int(score.shape[1] * sparsity))


def wanda_mask(weight: torch.Tensor, scaler_row: torch.Tensor, sparsity: float) -> torch.Tensor:
    """Wanda's unstructured per-output-row mask for one linear layer."""
    return row_prune_mask(wanda_score(weight, scaler_row), sparsity)

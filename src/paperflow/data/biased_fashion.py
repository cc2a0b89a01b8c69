"""Colored Fashion-MNIST with two injected shortcuts (multi-bias benchmark built from real images).

The construction follows the Multi-Color MNIST of the multi-bias literature (Li et al. 2022, "Discover and
Cure"; used by Kim et al., ICML 2024, with skews 0.01 / 0.05) with Fashion-MNIST items in place of digits
and a position cue in place of the second colour:
  bias 1, colour:   the grey item is tinted with one of 10 colours (foreground pixel value x RGB colour);
  bias 2, position: a bright 4x4 patch is stamped at one of 10 border positions of the 28x28 canvas.
Each attribute takes 10 values. In a *biased* split the attribute equals the class with probability
p_align ("bias-aligned", a shortcut) and is otherwise drawn uniformly from the other 9 values
("bias-conflicting"); an *uncorrelated* split (p_align=None) draws it uniformly from all 10 values,
independently of the class (validation and test sets).

Groups: for D=2 biases every example is aligned or conflicting w.r.t. each bias, giving 2^D = 4 group
types; `group_type` = 2 * (colour conflicting) + (position conflicting): 0 = both aligned ("gg"),
1 = colour aligned / position conflicting ("gc"), 2 = colour conflicting / position aligned ("cg"),
3 = both conflicting ("cc"); `class_group` = 4 * y + group_type (40 groups, the official MultiMNIST layout).
Pure functions on tensors; `build_biased_set` is deterministic given its seed.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

N_VALUES = 10
GROUP_TYPES = ("gg", "gc", "cg", "cc")
# 10 well-separated RGB colours (tab10-like), in [0, 1]
PALETTE = torch.tensor([
    [1.00, 0.10, 0.10], [0.10, 1.00, 0.10], [0.15, 0.35, 1.00], [1.00, 1.00, 0.10], [1.00, 0.10, 1.00],
    [0.10, 1.00, 1.00], [1.00, 0.55, 0.00], [0.55, 0.10, 1.00], [0.60, 0.60, 0.60], [0.55, 1.00, 0.55],
])
PATCH = 4  # patch side (pixels of the 28x28 canvas)
# top-left corners of the 10 patch positions: five along the top edge, five along the bottom edge
PATCH_POSITIONS = tuple((r, c) for r in (0, 24) for c in (0, 6, 12, 18, 24))


def draw_attribute(y: torch.Tensor, p_align: float | None, gen: torch.Generator, n_values: int = N_VALUES) -> torch.Tensor:
    """Attribute per example: == y with probability p_align, else uniform over the other n_values - 1
    values; p_align=None: uniform over all n_values, independent of y."""
    n = y.shape[0]
    if p_align is None:
        return torch.randint(0, n_values, (n,), generator=gen)
    if not 0.0 <= p_align <= 1.0:
        raise ValueError(f"draw_attribute: p_align must be in [0, 1] or None, got {p_align}")
    aligned = torch.rand(n, generator=gen) < p_align
    other = (y + torch.randint(1, n_values, (n,), generator=gen)) % n_values  # uniform over values != y
    return torch.where(aligned, y, other)


def colorize(x: torch.Tensor, color: torch.Tensor) -> torch.Tensor:
    """(N, H, W) uint8 grey images, (N,) colour indices -> (N, 3, H, W) uint8: pixel x PALETTE[color]."""
    rgb = PALETTE[color]  # (N, 3)
    out = x.float()[:, None] * rgb[:, :, None, None]
    return out.round().clamp(0, 255).to(torch.uint8)


def stamp_patch(x: torch.Tensor, position: torch.Tensor, value: int = 255) -> torch.Tensor:
    """(N, C, 28, 28) uint8 images, (N,) position indices -> a copy with a value-filled PATCH x PATCH
    square at PATCH_POSITIONS[position] in every channel."""
    out = x.clone()
    for k, (r, c) in enumerate(PATCH_POSITIONS):
        idx = torch.nonzero(position == k).flatten()
        if idx.numel():
            out[idx, :, r : r + PATCH, c : c + PATCH] = value
    return out


def group_type(y: torch.Tensor, color: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
    """0 gg, 1 gc, 2 cg, 3 cc (g = bias-aligned, c = bias-conflicting; colour first, position second)."""
    return 2 * (color != y).long() + (position != y).long()


def correlation_rate(y: torch.Tensor, attribute: torch.Tensor) -> float:
    """Fraction of examples whose attribute equals their class (the bias-aligned rate)."""
    return float((attribute == y).float().mean())


def downsample(x: torch.Tensor, factor: int) -> torch.Tensor:
    """(N, C, H, W) uint8 -> (N, C, H/factor, W/factor) uint8 by average pooling (factor 1: unchanged)."""
    if factor == 1:
        return x
    return F.avg_pool2d(x.float(), factor).round().clamp(0, 255).to(torch.uint8)


def build_biased_set(x: torch.Tensor, y: torch.Tensor, p_color: float | None, p_position: float | None,
                     seed: int, factor: int = 1) -> dict[str, torch.Tensor]:
    """Colour + position biased copy of grey images x (N, 28, 28) uint8 with labels y (N,).

    Returns {x (N, 3, 28/factor, 28/factor) uint8, y, color, position, group_type (0..3),
    class_group (4 y + group_type)}; p_color / p_position are the bias-aligned probabilities
    (None = uncorrelated)."""
    if x.dim() != 3 or x.shape[1:] != (28, 28):
        raise ValueError(f"build_biased_set: x must be (N, 28, 28), got {tuple(x.shape)}")
    y = y.long()
    gen = torch.Generator().manual_seed(seed)
    color = draw_attribute(y, p_color, gen)
    position = draw_attribute(y, p_position, gen)
    images = downsample(stamp_patch(colorize(x, color), position), factor)
    gt = group_type(y, color, position)
    return {"x": images.contiguous(), "y": y, "color": color, "position": position, "group_type": gt,
            "class_group": 4 * y + gt}

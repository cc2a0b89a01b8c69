"""Tiny stand-ins for Fashion-MNIST in end-to-end tests: noise images whose class is a bright horizontal bar."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def striped_images(rng: np.random.Generator, labels: np.ndarray, top: int = 2) -> np.ndarray:
    """uint8 (N, 28, 28): pixel noise in [0, 40) and, for class c, a bar of value 230 on rows top + 2c .. top + 2c + 3."""
    x = rng.integers(0, 40, (len(labels), 28, 28)).astype(np.uint8)
    for i, c in enumerate(labels):
        x[i, top + 2 * c : top + 4 + 2 * c, 6:22] = 230
    return x


def fake_fashion(path: Path, rng: np.random.Generator, y_train: np.ndarray, y_test: np.ndarray, top: int = 2) -> str:
    """An .npz with Fashion-MNIST's keys (x_train, y_train, x_test, y_test) of striped images; train images drawn
    first, then test, from rng. Returns the path as a string (for Resources.paths)."""
    np.savez(path, x_train=striped_images(rng, y_train, top), y_train=y_train, x_test=striped_images(rng, y_test, top),
             y_test=y_test)
    return str(path)

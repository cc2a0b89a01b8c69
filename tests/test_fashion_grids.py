"""Fashion-MNIST grids (paperflow.data.fashion_grids): label vectors, skew, co-occurrence, layouts, pixels."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from paperflow.data import fashion_grids as fgr


def _pool(n_per_class=5, K=10):
    """Items whose pixels encode their class (value 10 * (k + 1)) and their index in the pool."""
    y = np.repeat(np.arange(K), n_per_class)
    x = torch.zeros(len(y), 28, 28, dtype=torch.uint8)
    for i, k in enumerate(y):
        x[i] = 10 * (k + 1)
    return x, torch.from_numpy(y)


def test_labels_from_cells_hand_example():
    cells = np.array([[3, -1, 3, 0], [-1, -1, -1, -1], [9, 1, 2, 5]])
    Y = fgr.labels_from_cells(cells, 10)
    assert Y.tolist()[0] == [1, 0, 0, 1, 0, 0, 0, 0, 0, 0]  # {0, 3}: a repeated class counts once
    assert Y[1].sum() == 0
    assert np.flatnonzero(Y[2]).tolist() == [1, 2, 5, 9]


def test_compose_grids_places_items_of_the_cell_class():
    x, y = _pool()
    cells = np.array([[0, -1, 4, 9], [2, 2, -1, -1]])
    img = fgr.compose_grids(x, y, cells, rows=2, cols=2, cell_size=14, seed=0)
    assert img.shape == (2, 28, 28) and img.dtype == torch.uint8
    assert int(img[0, 0, 0]) == 10 and int(img[0, 0, 14]) == 0  # top-left class 0, top-right blank
    assert int(img[0, 20, 5]) == 50 and int(img[0, 20, 20]) == 100  # bottom row: classes 4 and 9
    assert int(img[1, 5, 5]) == int(img[1, 5, 20]) == 30 and int(img[1, 20:, :].sum()) == 0
    one_row = fgr.compose_grids(x, y, cells[:, :2], rows=1, cols=2, cell_size=28)
    assert one_row.shape == (2, 28, 56)
    with pytest.raises(ValueError, match="cells"):
        fgr.compose_grids(x, y, cells, rows=1, cols=2)


def test_downsample_is_average_pooling():
    x = torch.arange(16, dtype=torch.float32).view(1, 4, 4).to(torch.uint8)
    assert fgr.downsample(x, 2).tolist() == [[[2, 4], [10, 12]]]  # means 2.5->2 (round half even), 4.5->4, ...


def test_skew_and_cooccurrence_rates():
    freqs = fgr.skewed_freqs(5, 0.4, 0.05)
    np.testing.assert_allclose(freqs[[0, -1]], [0.4, 0.05])
    np.testing.assert_allclose(freqs[1:] / freqs[:-1], (0.05 / 0.4) ** 0.25)  # geometric
    Y = fgr.sample_label_sets(40000, freqs, cooccur=[(4, 1, 0.8)], seed=0)
    # follower 1: P(y1) = 0.8 * P(y4) + 0.2 * f1; P(y1 | y4) = 0.8 + 0.2 f1 (copy or independent draw)
    f1, f4 = freqs[1], freqs[4]
    assert Y[:, 4].mean() == pytest.approx(f4, abs=0.005)
    assert Y[:, 1].mean() == pytest.approx(0.8 * f4 + 0.2 * f1, abs=0.01)
    assert Y[Y[:, 4], 1].mean() == pytest.approx(0.8 + 0.2 * f1, abs=0.03)
    assert Y[:, 0].mean() == pytest.approx(freqs[0], abs=0.01)
    capped = fgr.sample_label_sets(2000, [0.9] * 6, max_labels=4, seed=1)
    assert capped.sum(1).max() <= 4
    again = fgr.sample_label_sets(2000, [0.9] * 6, max_labels=4, seed=1)
    assert np.array_equal(capped, again)
    with pytest.raises(ValueError, match="coupling"):
        fgr.sample_label_sets(10, freqs, cooccur=[(1, 1, 0.5)])


def test_balanced_sets_and_layouts():
    Y = fgr.balanced_label_sets(4, n_single=2, n_pair=3)
    assert Y.shape == (4 * 2 + 6 * 3, 4)
    assert (Y.sum(1) == 1).sum() == 8 and (Y.sum(1) == 2).sum() == 18
    cells = fgr.layout_cells(Y, 2, fill="repeat", seed=0)
    assert (cells >= 0).all()  # repeat: every cell holds an item
    assert np.array_equal(fgr.labels_from_cells(cells, 4), Y.astype(np.uint8))
    blank = fgr.layout_cells(Y, 4, fill="blank", seed=0)
    assert np.array_equal((blank >= 0).sum(1), Y.sum(1))  # one cell per present class
    assert np.array_equal(fgr.labels_from_cells(blank, 4), Y.astype(np.uint8))


def test_build_grid_set_label_vectors_match_pixels():
    x, y = _pool()
    Y = fgr.sample_label_sets(50, fgr.skewed_freqs(10, 0.4, 0.05), max_labels=4, seed=3)
    s = fgr.build_grid_set(x, y, Y, rows=2, cols=2, cell_size=14, seed=3)
    assert s["x"].shape == (50, 28, 28) and s["y"].shape == (50, 10)
    assert np.array_equal(s["y"].numpy(), Y.astype(np.uint8))
    for i in range(50):  # the classes read back from the cells' pixel values are the label set
        seen = {int(s["x"][i, r, c]) // 10 - 1 for r in (0, 14) for c in (0, 14) if int(s["x"][i, r, c])}
        assert seen == set(np.flatnonzero(Y[i]).tolist())
    kept, held = fgr.split_indices(10, 3, seed=0)
    assert sorted(np.concatenate([kept, held]).tolist()) == list(range(10)) and len(held) == 3

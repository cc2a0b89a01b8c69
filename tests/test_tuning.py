"""Shared tuning (validation-selected grids with a grid-edge flag), interleaved timing and the shared
magnitude compress stage."""
from __future__ import annotations

import time

import pytest
import torch

from paperflow.compress.magnitude import magnitude_levels
from paperflow.measure import interleaved_times
from paperflow.tuning import best_index, best_views, grid_edge, tune


def test_grid_edge_and_ties():
    assert [grid_edge(i, 5) for i in range(5)] == [1.0, 0.0, 0.0, 0.0, 1.0]
    assert grid_edge(0, 2) == 1.0 and grid_edge(1, 2) == 1.0  # no inside
    # a flat validation curve: the edge wins by 0.1% < flat_rtol 0.5%, so it is not an edge; by 3% it is
    flat, steep = [0.5164, 0.5160, 0.5158, 0.5152], [0.53, 0.52, 0.51, 0.495]
    assert grid_edge(3, 4, flat, flat_rtol=0.005) == 0.0 and grid_edge(3, 4, flat) == 1.0
    assert grid_edge(3, 4, steep, flat_rtol=0.005) == 1.0
    assert grid_edge(1, 4, steep, flat_rtol=0.005) == 0.0 and grid_edge(0, 2, flat[:2], flat_rtol=0.5) == 1.0
    assert best_index([0.5, 0.7, 0.7]) == 1  # ties to the smaller index
    assert best_index([3.0, float("nan"), 1.0], higher=False) == 2
    with pytest.raises(ValueError):
        best_index([float("nan")])


def test_tune_picks_the_validation_optimum_of_a_quadratic():
    # validation score -(lr - 0.01)^2 over a log grid: the optimum 0.01 is inside, index 2
    grid = [1e-3, 3e-3, 1e-2, 3e-2, 1e-1]
    result, info = tune(grid, lambda lr: (f"model@{lr}", -(lr - 0.01) ** 2))
    assert result == "model@0.01" and info["tuned_lr"] == 0.01 and info["grid_edge"] == 0.0
    _, info = tune(grid, lambda lr: (None, lr))  # score grows with lr: the edge is flagged
    assert info["tuned_lr_index"] == 4 and info["grid_edge"] == 1.0


def test_best_views_per_seed():
    rows = [{"variant": f"a_lr{i}", "seed": s, "dense/val_acc": acc} for s, accs in ((0, (1, 3, 2)), (1, (5, 1, 1)))
            for i, acc in enumerate(accs)] + [{"variant": "other", "seed": 0, "dense/val_acc": 9}]
    views = best_views(rows, lambda v: v.split("_lr")[0] if "_lr" in v else None, lambda v: int(v.split("_lr")[1]),
                       3, "dense/val_acc")
    assert [(v["variant"], v["seed"], v["dense/best_index"], v["dense/grid_edge"]) for v in views] == [
        ("a|best", 0, 1.0, 0.0), ("a|best", 1, 0.0, 1.0)]


def test_interleaved_times_rank_a_slower_function():
    times = interleaved_times({"fast": lambda: None, "slow": lambda: time.sleep(0.002)}, rounds=2, repeats=3, warmup=1)
    assert times["slow"] > times["fast"] and times["slow"] >= 0.002


@pytest.mark.parametrize("scope", ["global", "layer"])
def test_magnitude_levels_hit_each_sparsity(scope):
    torch.manual_seed(0)
    # a: 80 weights, b: 20 weights at 3x the scale, a bias that is never pruned
    state = {"a.weight": torch.randn(8, 10), "b.weight": torch.randn(4, 5) * 3, "a.bias": torch.randn(8)}
    levels = magnitude_levels(state, [0.5, 0.8], scope=scope)
    assert list(levels) == ["0.50", "0.80"]
    for name, s in (("0.50", 0.5), ("0.80", 0.8)):
        zeros = {n: int((levels[name][n] == 0).sum()) for n in ("a.weight", "b.weight")}
        assert sum(zeros.values()) == int(100 * s) or scope == "layer"
        if scope == "layer":  # exactly int(numel * s) per matrix
            assert zeros == {"a.weight": int(80 * s), "b.weight": int(20 * s)}
        assert torch.equal(levels[name]["a.bias"], state["a.bias"])
    if scope == "global":  # one threshold: the larger-scale matrix b keeps a larger share of its entries
        g = levels["0.50"]
        assert (g["b.weight"] != 0).float().mean() > (g["a.weight"] != 0).float().mean()


def test_magnitude_models_prune_the_record_state_only():
    from paperflow.compress.magnitude import magnitude_models

    torch.manual_seed(0)
    record = {"state": {"a.weight": torch.randn(8, 10), "a.bias": torch.randn(8)}, "arch": {"hidden": 8}}
    out = magnitude_models(record, [0.5], scope="layer")
    assert list(out) == ["0.50"] and out["0.50"]["arch"] is record["arch"]
    assert int((out["0.50"]["state"]["a.weight"] == 0).sum()) == 40 and int((record["state"]["a.weight"] == 0).sum()) == 0

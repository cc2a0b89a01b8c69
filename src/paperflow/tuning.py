"""Equal tuning (DESIGN.md "Honesty"): every variant whose result depends on a learning rate (or the paper's
one key knob) gets the same size of grid, chosen on validation data by the rule fixed here, before any
test result is seen. The chosen value and a `grid_edge` flag go into the metrics, so a claims row can gate
on "the best value is inside the grid" (Gate(metric="grid_edge", below=0.5)).

Two ways a paper uses it:
  in-job   `tune(grid, fit)` fits each grid value inside one train job and keeps the best on validation;
  variants one variant per grid value ("<method>_lr<i>"), and derive() adds the per-seed "<method>|best"
           view with `best_views(rows, ...)`.
Selection rule: the best validation score, ties to the smaller grid index (grids are sorted ascending, so
the more conservative value wins a tie).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence


def grid_edge(index: int, n: int, scores: Sequence[float] | None = None, flat_rtol: float = 0.0) -> float:
    """1.0 when the chosen index is the first or the last of a grid of >= 3 values (the optimum may lie
    outside the grid), else 0.0. A grid of 1-2 values has no inside, so every choice is an edge.

    With `scores` (the validation scores of the grid, in order) and flat_rtol > 0, an edge choice whose
    score is within flat_rtol (relative) of the best inside score is not an edge: the knob barely moves the
    validation score there, so a value beyond the grid could not move it by more than that either (a
    converged convex fit, where every lr reaches the same optimum). A paper ties flat_rtol to its claim's
    margin, fixed in the code, never to an observed gap."""
    if n < 3 or index not in (0, n - 1):
        return 1.0 if n < 3 else 0.0
    if scores is not None and flat_rtol > 0:
        if len(scores) != n:
            raise ValueError(f"grid_edge: {len(scores)} scores for a grid of {n}")
        inside = [s for s in scores[1:-1] if s is not None and math.isfinite(s)]
        edge = scores[index]
        if inside and math.isfinite(edge):
            gap = min(abs(edge - s) for s in inside)
            if gap <= flat_rtol * abs(edge):
                return 0.0
    return 1.0


def best_index(scores: Sequence[float], higher: bool = True) -> int:
    """Index of the best finite score (ties to the smaller index); a non-finite score never wins."""
    best, best_i = None, -1
    for i, s in enumerate(scores):
        if s is None or not math.isfinite(s):
            continue
        key = s if higher else -s
        if best is None or key > best:
            best, best_i = key, i
    if best_i < 0:
        raise ValueError(f"tuning: no finite validation score in {list(scores)}")
    return best_i


def tune(grid: Sequence[float], fit: Callable[[float], tuple[Any, float]], higher: bool = True,
         name: str = "lr") -> tuple[Any, dict[str, float]]:
    """Fit every value of `grid` (fit(value) -> (result, validation score)) and keep the best.
    Returns (best result, {"tuned_<name>": value, "tuned_<name>_index": i, "grid_edge": 0/1,
    "val_score@<i>": score for each i})."""
    if not grid:
        raise ValueError("tuning: empty grid")
    results, scores = [], []
    for value in grid:
        result, score = fit(value)
        results.append(result)
        scores.append(float(score))
    i = best_index(scores, higher)
    info = {f"tuned_{name}": float(grid[i]), f"tuned_{name}_index": float(i), "grid_edge": grid_edge(i, len(grid))}
    info.update({f"val_score@{j}": s for j, s in enumerate(scores)})
    return results[i], info


def best_views(rows: list[dict], method_of: Callable[[str], str | None], index_of: Callable[[str], int],
               n_grid: int, score: str, higher: bool = True, view: str = "best") -> list[dict]:
    """derive() helper for grid variants: per seed and method, a copy of the row with the best `score`
    column (validation) renamed "<method>|<view>", with dense/best_index and dense/grid_edge added.
    `method_of(variant)` is None for rows outside the grid; `index_of(variant)` gives the grid index."""
    out = []
    for seed in sorted({r["seed"] for r in rows}):
        by_method: dict[str, list[dict]] = {}
        for r in rows:
            m = method_of(r["variant"]) if r["seed"] == seed else None
            if m is not None and r.get(score) is not None:
                by_method.setdefault(m, []).append(r)
        for m, cands in sorted(by_method.items()):
            cands = sorted(cands, key=lambda r: index_of(r["variant"]))
            k = best_index([float(r[score]) for r in cands], higher)
            i = index_of(cands[k]["variant"])
            out.append({**cands[k], "variant": f"{m}|{view}", "dense/best_index": float(i),
                        "dense/grid_edge": grid_edge(i, n_grid)})
    return out

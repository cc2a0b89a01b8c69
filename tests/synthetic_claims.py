"""Synthetic metrics tables for a paper's headline (tests/test_contract_v3.py): the method loses, wins, or its
mechanism is off, with every other gate of the row passing. Built from the Comparison itself, so a headline
whose verdict cannot follow such a table (a fact in disguise, a gate that contradicts the claim) shows up.

Values: one base value per (variant, column), plus a small jitter per seed that differs between variants
(so paired differences have a non-zero sd); effects are 50x the jitter.
"""
from __future__ import annotations

import math
from collections import defaultdict

import polars as pl

from paperflow.spec import Comparison, Gate

N_SEEDS = 10
EFFECT = 5.0


class Unbuildable(ValueError):
    """The constraints of a row's gates and its claim cannot be met by one table (the test names the paper)."""


class _Table:
    def __init__(self) -> None:
        self.bounds: dict[tuple[str, str], list[float]] = defaultdict(lambda: [-math.inf, math.inf])
        self.values: dict[tuple[str, str], float] = {}

    def bound(self, key: tuple[str, str], above: float | None, below: float | None) -> None:
        lo, hi = self.bounds[key]
        self.bounds[key] = [max(lo, above) if above is not None else lo, min(hi, below) if below is not None else hi]

    def pick(self, key: tuple[str, str], prefer: float) -> float:
        """A value inside the key's bounds, as close to `prefer` as the bounds allow (1 unit inside an edge)."""
        lo, hi = self.bounds[key]
        if lo > hi:
            raise Unbuildable(f"empty interval for {key}")
        span = hi - lo
        pad = min(1.0, span / 4) if math.isfinite(span) else 1.0
        value = max(prefer, lo + pad) if math.isfinite(lo) else prefer
        return min(value, hi - pad) if math.isfinite(hi) else value

    def set(self, key: tuple[str, str], value: float) -> None:
        if key in self.values and abs(self.values[key] - value) > 1e-9:
            raise Unbuildable(f"{key} needs two values ({self.values[key]} and {value})")
        lo, hi = self.bounds[key]
        if not lo < value < hi:
            raise Unbuildable(f"{key} = {value} is outside its gate bounds ({lo}, {hi})")
        self.values[key] = value

    def frame(self) -> pl.DataFrame:
        variants = sorted({v for v, _ in self.values})
        columns = sorted({c for _, c in self.values})
        rows = []
        for vi, variant in enumerate(variants):
            for seed in range(N_SEEDS):
                row = {"paper": "synthetic", "variant": variant, "seed": seed}
                for column in columns:
                    base = self.values.get((variant, column))
                    jitter = 0.02 * (((seed * 7 + vi * 3) % 5) - 2) if base is not None else 0.0
                    row[column] = None if base is None else base + jitter
                rows.append(row)
        return pl.DataFrame(rows)


def _place(t: _Table, comp: Comparison, outcome: str) -> None:
    """Set the row's method/baseline values so the row comes out `outcome` ("win" or "lose")."""
    column = comp.column
    sign = 1.0 if comp.better == "higher" else -1.0
    mkey = (comp.method, column)
    if comp.kind == "matches":
        tol = comp.tolerance
        t.set(mkey, t.pick(mkey, comp.target) if outcome == "win" else comp.target + 10 * tol if
              t.bounds[mkey][1] > comp.target + 10 * tol else comp.target - 10 * tol)
        if outcome == "win" and abs(t.values[mkey] - comp.target) > tol / 4:
            raise Unbuildable(f"{mkey} cannot sit on its target {comp.target} inside its gate bounds")
        return
    bkey = (comp.baseline, column)
    if bkey in t.values and mkey in t.values:
        return
    if mkey in t.values:  # the method's value is fixed by an earlier row: place the baseline around it
        m = t.values[mkey]
        extra = abs(comp.margin * m) * 1.5 if comp.kind == "close" else 0.0
        gain = EFFECT if outcome == "win" else -(extra + EFFECT)
        t.set(bkey, m - sign * gain)
        return
    base = t.values.get(bkey, t.pick(bkey, 10.0))
    t.set(bkey, base)
    extra = abs(comp.margin * base) if comp.kind == "close" else 0.0
    gain = EFFECT if outcome == "win" else -(extra + EFFECT)
    t.set(mkey, base + sign * gain)


def _gate_bounds(t: _Table, gate: Gate, satisfied: bool) -> None:
    if gate.comparison is not None:
        return
    key = (gate.variant, gate.column)
    if satisfied:
        t.bound(key, gate.above, gate.below)
    else:  # violate: put the value beyond the first threshold
        if gate.above is not None:
            t.bound(key, None, gate.above)
        else:
            t.bound(key, gate.below, None)


def build(comp: Comparison, outcome: str) -> pl.DataFrame:
    """outcome: "lose" (method worse, every gate passes), "win" (method better, every gate passes) or
    "mechanism_off" (method better, every mechanism gate fails, the others pass)."""
    t = _Table()
    off = outcome == "mechanism_off"
    for gate in comp.gates:
        _gate_bounds(t, gate, satisfied=not (off and gate.kind == "mechanism"))
    _place(t, comp, "lose" if outcome == "lose" else "win")
    for gate in comp.gates:
        if gate.comparison is not None:
            fail = off and gate.kind == "mechanism"
            _place(t, gate.comparison, "lose" if fail else "win")
    for gate in comp.gates:  # threshold gates on columns the claim did not set
        if gate.comparison is None and (gate.variant, gate.column) not in t.values:
            t.set((gate.variant, gate.column), t.pick((gate.variant, gate.column), 0.0))
    return t.frame()

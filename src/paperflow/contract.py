"""Contract v3 checks on a paper's claims rows (DESIGN.md "Honesty"): what a reviewer checks first, in code.

`contract_problems(spec, cfg)` lists, one line each:
  - a headline without a mechanism gate (a quantity measured in the runs that shows the paper's mechanism is
    active here), or without `refuted_if` (what result would make it `not reproduced`);
  - a headline that is a fact in disguise is caught by tests/test_contract_v3.py (a synthetic table where the
    method loses must give `not reproduced`), not here;
  - a mechanism gate that reads a config value: its metric is a Config field name (a value the runs did not
    measure). `logged_problems` adds, once a run exists, a mechanism gate whose column is absent from the
    paper's metrics.csv (the metric is not logged at all);
  - a gate on a "...grid_edge..." metric that is not a grid-edge gate (spec.Gate makes it one).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterable

from .spec import Comparison, Gate, PaperSpec


def _gates(comp: Comparison) -> Iterable[Gate]:
    for gate in comp.gates:
        yield gate
        if gate.comparison is not None:
            yield from _gates(gate.comparison)


def _metric_names(gate: Gate) -> list[str]:
    if gate.comparison is not None:
        return [gate.comparison.metric]
    return [gate.metric.split("/", 1)[-1]]


def contract_problems(spec: PaperSpec, cfg: Any) -> list[str]:
    fields = {f.name for f in dataclasses.fields(cfg)} if dataclasses.is_dataclass(cfg) else set(cfg or {})
    out = []
    for comp in spec.comparisons(cfg):
        name = comp.text or f"{comp.metric}: {comp.method} vs {comp.baseline}"
        if comp.role == "headline":
            if not comp.mechanism_gates:
                out.append(f"{spec.id}: headline {name!r} has no mechanism gate (Gate(kind='mechanism') on a metric the runs log)")
            if not comp.refuted_if:
                out.append(f"{spec.id}: headline {name!r} does not say what would refute it (Comparison.refuted_if)")
        for gate in _gates(comp):
            if gate.kind == "mechanism":
                for metric in _metric_names(gate):
                    if metric in fields:
                        out.append(f"{spec.id}: mechanism gate {gate.text!r} reads {metric!r}, a Config value, not a "
                                   "quantity measured in the runs")
            if "grid_edge" in gate.metric and gate.kind != "grid_edge":
                out.append(f"{spec.id}: gate {gate.text!r} is on a grid edge but is not directional (kind='grid_edge')")
    return out


def logged_problems(spec: PaperSpec, cfg: Any, columns: Iterable[str]) -> list[str]:
    """Mechanism gates whose metric column is missing from a run's metrics.csv (not logged by train/evaluate)."""
    have = set(columns)
    out = []
    for comp in spec.comparisons(cfg):
        for gate in _gates(comp):
            if gate.kind != "mechanism":
                continue
            cols = [gate.comparison.column] if gate.comparison is not None else [gate.column]
            out += [f"{spec.id}: mechanism gate {gate.text!r}: column {c!r} is not in metrics.csv" for c in cols if c not in have]
    return out

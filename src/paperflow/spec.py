"""The stage contract every paper implements (see DESIGN.md, "The stage contract").

A paper is a `PaperSpec` registered under its catalog id. The workflow calls, in order:

    data  = spec.prepare(cfg, res)                    # once per paper
    model = spec.train(cfg, data, variant, seed, log) # per (variant, seed)
    comp  = spec.compress(cfg, model, data, variant, seed)  # {level: compressed model} or None
    m     = spec.evaluate(cfg, model, data)           # flat dict of floats, dense and each level

`cfg` is the paper's frozen `Config` dataclass built from params.yaml `papers.<id>` merged with the
profile's size overrides; an unknown key raises. Objects returned by prepare/train/compress are
saved with `torch.save` (tensors, dicts, state dicts; no pickled classes) and loaded with
`weights_only=True`, so they must be made of tensors, numbers, strings, lists and dicts.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

# log(step, **metrics): per-step metrics from train (loss curves); the stage sends them to MLflow
# and to curves.json so the report does not depend on the tracking store.
LogFn = Callable[..., None]


class ConfigError(ValueError):
    """A params.yaml value the paper cannot run with; the message names the key and the fix."""


def check(condition: bool, message: str) -> None:
    """Raise ConfigError(message) unless condition; used in Config.__post_init__."""
    if not condition:
        raise ConfigError(message)


ROLES = ("headline", "secondary", "control", "fact")
# Gate kinds (DESIGN.md "Honesty", contract v3):
#   "precondition" the setting can test the row (a baseline above chance, a plateau to escape): blocks every verdict;
#   "mechanism"    the paper's mechanism is active in our runs, measured from what training/evaluation logged
#                  (conflict fraction, how far learned weights moved, the noise's measured harm), never a config
#                  value; every headline needs one, and the report shows its measured value beside the verdict;
#   "grid_edge"    a variant's tuned value sits on its grid's edge; directional: on the row's method it blocks only
#                  `not reproduced` (an under-tuned method can only look worse), on any other variant (the
#                  baseline) only `reproduced` (an under-tuned baseline can only flatter the method).
GATE_KINDS = ("precondition", "mechanism", "grid_edge")
KINDS = ("better", "close", "matches")
FIDELITIES = ("official-code", "paper-text", "reconstruction")


@dataclass(frozen=True)
class Gate:
    """A precondition of a claims row, measured on the same runs (DESIGN.md "Honesty").

    When it fails, the row's verdict is `not testable` with `text` and the measured value as the
    reason, never `inconclusive`: the setting cannot test the claim (a baseline at chance, the best lr
    on the grid's edge, no plateau to escape, no negative transfer to remove).
    Either a threshold on the mean over seeds of one variant's `metric` (a column name such as
    "dense/acc" or a bare metric, read as dense/<metric>): passes when mean > above and/or mean < below;
    or a paired `comparison` that must come out `reproduced` (e.g. "multi-task is worse than single-task").
    `kind` (GATE_KINDS above): what a failure blocks. A gate on a metric named "...grid_edge..." is a
    grid-edge gate whatever kind it was given, so no paper can make one block both directions.
    """

    text: str
    variant: str = ""
    metric: str = ""
    above: float | None = None
    below: float | None = None
    comparison: "Comparison | None" = None
    kind: str = "precondition"

    def __post_init__(self) -> None:
        check(bool(self.text), "Gate.text must say what has to hold")
        check(self.kind in GATE_KINDS, f"Gate {self.text!r}: kind must be one of {GATE_KINDS}, got {self.kind!r}")
        if "grid_edge" in self.metric and self.kind == "precondition":
            object.__setattr__(self, "kind", "grid_edge")
        check(self.kind != "grid_edge" or self.comparison is None, f"Gate {self.text!r}: a grid-edge gate names a variant")
        if self.comparison is None:
            check(bool(self.variant and self.metric), f"Gate {self.text!r}: give variant and metric, or a comparison")
            check(self.above is not None or self.below is not None, f"Gate {self.text!r}: give above and/or below")
        else:
            check(not (self.variant or self.metric or self.above is not None or self.below is not None),
                  f"Gate {self.text!r}: a comparison gate takes no variant/metric/threshold")

    @property
    def column(self) -> str:
        return self.metric if "/" in self.metric else f"dense/{self.metric}"


def edge_gate(variant: str, what: str = "tuned lr", grid: str = "the grid") -> Gate:
    """The directional grid-edge gate of one variant (GATE_KINDS): "<variant>: <what> inside <grid>", passing when
    the variant's logged grid_edge (paperflow.tuning.grid_edge, mean over seeds) is below 0.5."""
    return Gate(f"{variant}: {what} inside {grid}", variant=variant, metric="grid_edge", below=0.5)


@dataclass(frozen=True)
class Comparison:
    """One row of the claims table: `method` against `baseline` on `metric`.

    role (what the row is for; DESIGN.md "Honesty"):
      "headline"  the abstract's claim: exactly one per paper (two only where the abstract makes two
                  independent claims), judged alone;
      "secondary" further claims of the paper, judged with a Holm step over the paper's secondary rows;
      "control"   diagnostics and sanity checks, judged but never counted as the paper's result;
      "fact"      a deterministic quantity (a count, bytes, FLOPs, a bound check): reported with its
                  value (and ratio to the baseline), never a verdict.
    kind (how a judged row is decided from the paired 95% interval over seeds):
      "better":  method beats baseline (lower or higher is better);
      "close":   method is within `margin` (relative to the baseline mean) of baseline or better;
      "matches": a fitted quantity of `method` (e.g. a rate exponent, one value per seed) equals
                 `target` within `tolerance` (absolute); `baseline` is unused ("").
    stage="dense" reads the metric of the trained model, stage="compressed" the metric of the
    compressed model at `level` (e.g. "0.70" for 70% sparsity).
    gates: preconditions; one failing makes the verdict `not testable`. not_testable: a reason, declared
    up front, why this setting cannot test the row (its values are still reported).
    fidelity overrides the paper's for this row (e.g. a variant that follows the authors' code).
    refuted_if: what measured result would make the row `not reproduced`, in words (required on headlines:
    a headline that no result could refute is a fact in disguise; tests/test_falsifiable.py feeds each
    headline a table where the method loses and checks the verdict says so).
    """

    metric: str
    method: str
    baseline: str
    better: str = "lower"  # "lower" | "higher"
    kind: str = "better"  # "better" | "close" | "matches"
    margin: float = 0.0
    stage: str = "dense"  # "dense" | "compressed"
    level: str | None = None
    text: str = ""
    role: str = ""  # headline | secondary | control | fact (tests/test_registry.py: every row names one)
    gates: tuple[Gate, ...] = ()
    not_testable: str = ""
    target: float | None = None  # kind "matches"
    tolerance: float = 0.0  # kind "matches": |fitted - target| <= tolerance
    fidelity: str = ""
    refuted_if: str = ""

    def __post_init__(self) -> None:
        check(self.better in ("lower", "higher"), f"Comparison.better must be lower|higher, got {self.better!r}")
        check(self.kind in KINDS, f"Comparison.kind must be one of {KINDS}, got {self.kind!r}")
        check(self.stage in ("dense", "compressed"), f"Comparison.stage must be dense|compressed, got {self.stage!r}")
        check(self.role in ROLES or self.role == "", f"Comparison.role must be one of {ROLES}, got {self.role!r}")
        check(self.fidelity in FIDELITIES or self.fidelity == "", f"Comparison.fidelity must be one of {FIDELITIES}, got {self.fidelity!r}")
        if self.kind == "matches":
            check(self.target is not None and self.tolerance > 0,
                  f"Comparison {self.text or self.metric!r}: kind 'matches' needs a target and a tolerance > 0")
        else:
            check(bool(self.baseline) or self.role == "fact", f"Comparison {self.text or self.metric!r}: needs a baseline")
        object.__setattr__(self, "gates", tuple(self.gates))

    @property
    def mechanism_gates(self) -> tuple[Gate, ...]:
        return tuple(g for g in self.gates if g.kind == "mechanism")

    @property
    def column(self) -> str:
        """Name of the metric column in results/<paper>/metrics.csv."""
        if self.stage == "dense":
            return f"dense/{self.metric}"
        return f"compressed:{self.level}/{self.metric}"


# A job gets 2 threads when its measured 2-thread speedup is at least this (two 1-thread jobs give 2.0 x):
# the 5% throughput given up buys a shorter critical path for the longest jobs.
THREADS_RULE = 1.8


@dataclass(frozen=True)
class PaperSpec:
    id: str
    title: str
    claim: str  # the catalog's headline claim, in words
    Config: type
    variants: Sequence[str]
    prepare: Callable[[Any, "Resources"], Any]
    train: Callable[[Any, Any, str, int, LogFn], Any]
    evaluate: Callable[[Any, Any, Any], Mapping[str, float]]
    comparisons: Callable[[Any], Sequence[Comparison]]  # cfg -> rows of the claims table
    compress: Callable[[Any, Any, Any, str, int], Mapping[str, Any] | None] | None = None
    # Metrics that need several variants at once (e.g. Delta-m% against single-task models):
    # derive(cfg, rows) -> rows, where rows is a list of dicts with paper/variant/seed/metric columns.
    # Derived rows may name a view of a variant "<variant>|<view>" (a Comparison may then use that name).
    derive: Callable[[Any, list[dict]], list[dict]] | None = None
    resources: Sequence[str] = ()  # names in paperflow.data.resources.RESOURCES
    data: str = ""  # what data the report says was used
    substitutions: str = ""  # what differs from the paper, shown in the report
    compression: str = ""  # what the compress stage does, in words (with compress=None: why there is none)
    # A paper whose variants have weights but no compress stage must say why here (LoCoCo: the KV-cache
    # policy is the paper's compression); tests/test_workflow_smoke.py fails a paper with weights, no
    # compress and no reason.
    compression_exempt: str = ""
    figure: str = "sparsity"  # "sparsity" (metric vs level) or "layer_profile" (per-layer sparsity)
    # (cost metric, quality metric), e.g. ("flops", "acc"): the report plots quality against the measured
    # cost of every variant, dense and at every compression level (the "saving vs metric" figure).
    tradeoff: tuple[str, str] | None = None
    # Relative memory and run-time weight of one job (2 = a 135M LM): the SLURM profile's mem/time requests.
    weight: int = 1
    # Measured speedup of the paper's main job at 2 torch threads over 1 on an idle 2-CPU machine
    # (benchmarks/bench_efficiency.py --scaling; 0 = not measured). Threads per job follow it, not the weight:
    # 2 threads only where they give >= THREADS_RULE x, since two 1-thread jobs side by side give 2.0 x.
    thread_speedup: float = 0.0
    # How we know the method (the report's `fidelity` column): "official-code" (the authors' code was read
    # and followed), "paper-text" (the paper's equations, no code), "reconstruction" (our formulation where
    # neither was retrievable; the docstring says which parts).
    fidelity: str = ""
    # Headline rows: one, or two where the abstract makes two independent claims (each row's text says which).
    headlines: int = 1
    module: str = ""  # source file, filled in by register_paper

    def __post_init__(self) -> None:
        check(self.fidelity in FIDELITIES or self.fidelity == "", f"PaperSpec {self.id}: fidelity must be one of {FIDELITIES}")

    def job_threads(self) -> int:
        """Torch threads of one job on a machine with >= 2 CPUs (workflow/rules/common.smk, thread policy)."""
        return 2 if self.thread_speedup >= THREADS_RULE else 1

    def make_config(self, section: Mapping[str, Any]) -> Any:
        """Config(**section), turning an unknown key or bad value into a ConfigError naming the paper."""
        known = {f.name for f in dataclasses.fields(self.Config)}
        unknown = sorted(set(section) - known)
        if unknown:
            raise ConfigError(
                f"params.yaml papers.{self.id}: unknown key(s) {unknown}; known keys are {sorted(known)}"
            )
        for f in dataclasses.fields(self.Config):
            if f.name in section:
                problem = _type_problem(f, section[f.name])
                if problem:
                    raise ConfigError(f"params.yaml papers.{self.id}.{f.name}: {problem}")
        try:
            return self.Config(**section)
        except ConfigError as err:
            raise ConfigError(f"params.yaml papers.{self.id}: {err}") from None
        except TypeError as err:
            raise ConfigError(f"params.yaml papers.{self.id}: {err}") from None


def _type_problem(f: dataclasses.Field, value: Any) -> str:
    """Why `value` cannot be the Config field `f` (typed by its default value), or "" if it can. Catches what a
    comparison in __post_init__ would report as "'>' not supported between 'str' and 'int'" or silently accept
    (steps: 20.5)."""
    default = f.default if f.default is not dataclasses.MISSING else None
    if default is None or value is None:
        return ""
    shown = f"{value!r} ({type(value).__name__})"
    if isinstance(default, bool):
        return "" if isinstance(value, bool) else f"expected true or false, got {shown}"
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            return f"expected a whole number, got {shown}"
        return ""
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"expected a number, got {shown}"
        return ""
    if isinstance(default, str):
        return "" if isinstance(value, str) else f"expected a string, got {shown}"
    if isinstance(default, (tuple, list)):
        return "" if isinstance(value, (tuple, list)) else f"expected a list, got {shown}"
    return ""


@dataclass(frozen=True)
class Resources:
    """Paths of the prepared data resources (resources/*), passed to prepare()."""

    root: str
    paths: Mapping[str, str] = field(default_factory=dict)

    def __getitem__(self, name: str) -> str:
        if name not in self.paths:
            raise KeyError(f"resource {name!r} was not declared in the paper's PaperSpec.resources")
        return self.paths[name]

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


@dataclass(frozen=True)
class Comparison:
    """One row of the claims table: `method` against `baseline` on `metric`.

    kind="better": the claim is that method beats baseline (lower or higher is better).
    kind="close":  the claim is that method is within `margin` (relative to the baseline mean) of
                   baseline or better, e.g. "DCMHA close to the 2x-compute MHA".
    stage="dense" reads the metric of the trained model, stage="compressed" the metric of the
    compressed model at `level` (e.g. "0.70" for 70% sparsity).
    """

    metric: str
    method: str
    baseline: str
    better: str = "lower"  # "lower" | "higher"
    kind: str = "better"  # "better" | "close"
    margin: float = 0.0
    stage: str = "dense"  # "dense" | "compressed"
    level: str | None = None
    text: str = ""

    def __post_init__(self) -> None:
        check(self.better in ("lower", "higher"), f"Comparison.better must be lower|higher, got {self.better!r}")
        check(self.kind in ("better", "close"), f"Comparison.kind must be better|close, got {self.kind!r}")
        check(self.stage in ("dense", "compressed"), f"Comparison.stage must be dense|compressed, got {self.stage!r}")

    @property
    def column(self) -> str:
        """Name of the metric column in results/<paper>/metrics.csv."""
        if self.stage == "dense":
            return f"dense/{self.metric}"
        return f"compressed@{self.level}/{self.metric}"


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
    compression: str = ""  # what the compress stage does, in words
    figure: str = "sparsity"  # "sparsity" (metric vs level) or "layer_profile" (per-layer sparsity)
    # (cost metric, quality metric), e.g. ("flops", "acc"): the report plots quality against the measured
    # cost of every variant, dense and at every compression level (the "saving vs metric" figure).
    tradeoff: tuple[str, str] | None = None
    # Relative CPU weight of one train job: heavy jobs get more threads (workflow/rules/common.smk).
    weight: int = 1
    module: str = ""  # source file, filled in by register_paper

    def make_config(self, section: Mapping[str, Any]) -> Any:
        """Config(**section), turning an unknown key or bad value into a ConfigError naming the paper."""
        known = {f.name for f in dataclasses.fields(self.Config)}
        unknown = sorted(set(section) - known)
        if unknown:
            raise ConfigError(
                f"params.yaml papers.{self.id}: unknown key(s) {unknown}; known keys are {sorted(known)}"
            )
        try:
            return self.Config(**section)
        except ConfigError as err:
            raise ConfigError(f"params.yaml papers.{self.id}: {err}") from None
        except TypeError as err:
            raise ConfigError(f"params.yaml papers.{self.id}: {err}") from None


@dataclass(frozen=True)
class Resources:
    """Paths of the prepared data resources (resources/*), passed to prepare()."""

    root: str
    paths: Mapping[str, str] = field(default_factory=dict)

    def __getitem__(self, name: str) -> str:
        if name not in self.paths:
            raise KeyError(f"resource {name!r} was not declared in the paper's PaperSpec.resources")
        return self.paths[name]

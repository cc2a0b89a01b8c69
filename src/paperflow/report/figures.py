"""Report figures (matplotlib, Agg): learning curves and the compression figure of each paper.

Each PNG carries, in a text chunk, a digest of what it was drawn from (the data, the arguments, this module's code and
matplotlib's version); a figure whose digest matches is not drawn again. Drawing is most of a report's cost (about 0.5 s
of CPU per figure, 150 figures for 75 papers), and a rerun of one paper changes only that paper's figures."""
from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import polars as pl  # noqa: E402


KEY = "paperflow-key"  # the PNG text chunk holding the digest


def _digest(*parts: object) -> str:
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(matplotlib.__version__.encode())
    for part in parts:
        h.update(b"\0")
        h.update(part if isinstance(part, bytes) else json.dumps(part, sort_keys=True, default=str).encode())
    return h.hexdigest()[:32]


def _table_bytes(table: pl.DataFrame) -> bytes:
    return table.write_csv().encode()


def _up_to_date(out: Path, key: str) -> bool:
    """The PNG at `out` was drawn from the same inputs (its text chunk holds `key`)."""
    if not out.is_file():
        return False
    from PIL import Image

    try:
        with Image.open(out) as image:
            return getattr(image, "text", {}).get(KEY) == key
    except OSError:  # a truncated or foreign file: draw it again
        return False


def _save(fig, out: Path, key: str) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110, metadata={KEY: key})
    plt.close(fig)
    return out


def _mean_curve(curves: list[list[list[float]]]) -> tuple[list[float], list[float]]:
    """Mean over seeds of step-aligned curves [[step, value], ...] (steps common to all seeds)."""
    by_step: dict[float, list[float]] = {}
    for curve in curves:
        for step, value in curve:
            by_step.setdefault(step, []).append(value)
    steps = sorted(s for s, v in by_step.items() if len(v) == len(curves))
    return steps, [sum(by_step[s]) / len(by_step[s]) for s in steps]


def learning_curves(results: Path, paper: str, variants: Sequence[str], seeds: Sequence[int], out: Path) -> Path | None:
    loaded = {}
    for v in variants:
        runs = []
        for s in seeds:
            path = results / paper / v / f"seed{s}" / "curves.json"
            if path.exists():
                runs.append(json.loads(path.read_text()))
        if runs:
            loaded[v] = runs
    # a curve needs two points: a single logged step (a smoke run) would draw an empty chart
    keys = sorted({k for runs in loaded.values() for run in runs for k in run if len(run[k]) >= 2})
    if not keys:
        return None
    shown = [k for k in ("train/loss", "val/loss") if k in keys] or keys[:2]
    digest = _digest("curves", paper, shown, loaded)
    if _up_to_date(out, digest):
        return out
    fig, axes = plt.subplots(1, len(shown), figsize=(5.2 * len(shown), 3.6), squeeze=False)
    for ax, key in zip(axes[0], shown):
        n_runs = 1
        for v, runs in loaded.items():
            curves = [r[key] for r in runs if key in r]
            steps, values = _mean_curve(curves)
            if len(steps) >= 2:
                ax.plot(steps, values, label=v, lw=1.4)
                n_runs = max(n_runs, len(curves))
        ax.set_title(f"{paper}: {key}" + (f" (mean of {n_runs} seeds)" if n_runs > 1 else " (one seed)"))
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, out, digest)


def compression_figure(table: pl.DataFrame, paper: str, metric: str, out: Path, log_y: bool = False) -> Path | None:
    """Metric vs compression level (numeric levels; the dense model at level 0), mean over seeds."""
    pattern = re.compile(rf"^compressed:([0-9.]+)/{re.escape(metric)}$")
    levels = sorted((float(m.group(1)), c) for c in table.columns if (m := pattern.match(c)))
    if not levels:
        return None
    key = _digest("compression", paper, metric, log_y, _table_bytes(table))
    if _up_to_date(out, key):
        return out
    fig, ax = plt.subplots(figsize=(5.6, 3.8))
    for variant in table["variant"].unique(maintain_order=True):
        sub = table.filter(pl.col("variant") == variant)
        xs, ys = [], []
        if f"dense/{metric}" in table.columns:
            xs.append(0.0)
            ys.append(sub[f"dense/{metric}"].mean())
        for level, col in levels:
            xs.append(level)
            ys.append(sub[col].mean())
        ax.plot(xs, ys, marker="o", label=variant)
    if log_y or _spans_decades(table, [c for _, c in levels]):
        ax.set_yscale("log")
    ax.set_xlabel("sparsity (0 = dense)")
    ax.set_ylabel(metric)
    ax.set_title(f"{paper}: {metric} vs compression")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, out, key)


def layer_profile_figure(table: pl.DataFrame, paper: str, level: str, out: Path) -> Path | None:
    """Per-layer sparsity at one level (columns compressed:<level>/layer_sparsity_<i>), mean over seeds."""
    pattern = re.compile(rf"^compressed:{re.escape(level)}/layer_sparsity_(\d+)$")
    cols = sorted((int(m.group(1)), c) for c in table.columns if (m := pattern.match(c)))
    if not cols:
        return None
    key = _digest("layers", paper, level, _table_bytes(table))
    if _up_to_date(out, key):
        return out
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for variant in table["variant"].unique(maintain_order=True):
        sub = table.filter(pl.col("variant") == variant)
        ax.plot([i for i, _ in cols], [sub[c].mean() for _, c in cols], marker=".", label=variant)
    ax.set_xlabel("layer (decoder block)")
    ax.set_ylabel("sparsity")
    ax.set_title(f"{paper}: per-layer sparsity at target {level}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, out, key)


def _spans_decades(table: pl.DataFrame, cols: list[str]) -> bool:
    values = [v for c in cols for v in table[c].drop_nulls().to_list() if v and v > 0 and math.isfinite(v)]
    return bool(values) and max(values) / min(values) > 30


def tradeoff_figure(table: pl.DataFrame, paper: str, cost: str, quality: str, out: Path) -> Path | None:
    """Quality vs measured cost: one point per variant and stage (dense, compressed:level), mean over seeds.

    Reads columns "<stage>/<cost>" and "<stage>/<quality>"; the x axis is logarithmic when the costs
    span more than a decade (e.g. bytes of a full vs a fixed-size cache)."""
    stages = sorted({c.rsplit("/", 1)[0] for c in table.columns if c.endswith(f"/{cost}")} &
                    {c.rsplit("/", 1)[0] for c in table.columns if c.endswith(f"/{quality}")})
    if not stages:
        return None
    key = _digest("tradeoff", paper, cost, quality, _table_bytes(table))
    if _up_to_date(out, key):
        return out
    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    xs_all = []
    for variant in table["variant"].unique(maintain_order=True):
        sub = table.filter(pl.col("variant") == variant)
        points = []
        for stage in stages:
            x, y = sub[f"{stage}/{cost}"].mean(), sub[f"{stage}/{quality}"].mean()
            if x is not None and y is not None and math.isfinite(x) and math.isfinite(y):
                points.append((x, y, stage))
        if not points:
            continue
        points.sort()
        xs_all += [p[0] for p in points]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=variant, lw=1.0)
        for x, y, stage in points:
            if stage != "dense":
                ax.annotate(stage.split(":", 1)[-1], (x, y), fontsize=6, xytext=(2, 2), textcoords="offset points")
    if not xs_all:
        plt.close(fig)
        return None
    positive = [x for x in xs_all if x > 0]
    if positive and len(positive) == len(xs_all) and max(positive) / min(positive) > 10:
        ax.set_xscale("log")
    ax.set_xlabel(f"{cost} (measured)")
    ax.set_ylabel(quality)
    ax.set_title(f"{paper}: {quality} vs {cost}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, out, key)

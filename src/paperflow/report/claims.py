"""The claims table (DESIGN.md "Honesty"): each claim computed from the per-seed metrics.

For every Comparison of a paper: paired differences d_s = method_s - baseline_s over the seeds both
share, their mean and a two-sided 95% Student-t interval. Let "gain" be d for higher-is-better and
-d for lower-is-better. Verdicts:
  kind "better": reproduced if the gain interval lies above 0, not reproduced if below 0,
                 inconclusive if it contains 0 (or fewer than 2 seeds);
  kind "close":  with m = margin * |baseline mean|: reproduced if the gain interval lies above -m
                 (method at most m worse), not reproduced if it lies below -m, else inconclusive.
Nothing is hard-coded: change the data and the verdict changes.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import polars as pl

from ..spec import Comparison, PaperSpec

COLUMNS = [
    "paper", "claim", "comparison", "metric", "better", "kind", "margin", "stage", "level", "method", "baseline",
    "method_mean", "method_std", "baseline_mean", "baseline_std", "delta", "ci_low", "ci_high", "n_seeds",
    "verdict", "reason", "compressed_level", "compressed_method_mean", "compressed_baseline_mean",
    "data", "substitutions", "profile",
]


def t_quantile(n: int, confidence: float = 0.95) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.5 + confidence / 2, df=n - 1))


def paired_stats(method: Sequence[float], baseline: Sequence[float]) -> dict[str, float]:
    """Mean paired difference method - baseline with a 95% t interval (nan interval for n < 2)."""
    diffs = [m - b for m, b in zip(method, baseline)]
    n = len(diffs)
    mean = sum(diffs) / n if n else float("nan")
    if n < 2:
        return {"delta": mean, "ci_low": float("nan"), "ci_high": float("nan"), "n": n}
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    half = t_quantile(n) * sd / math.sqrt(n)
    return {"delta": mean, "ci_low": mean - half, "ci_high": mean + half, "n": n}


def verdict(comp: Comparison, stats: Mapping[str, float], baseline_mean: float) -> tuple[str, str]:
    n, lo, hi = stats["n"], stats["ci_low"], stats["ci_high"]
    if n < 2 or math.isnan(lo):
        return "inconclusive", f"{n} paired seed(s): no confidence interval"
    sign = 1.0 if comp.better == "higher" else -1.0
    gain_lo, gain_hi = sorted((sign * lo, sign * hi))
    threshold = 0.0 if comp.kind == "better" else -abs(comp.margin * baseline_mean)
    span = f"paired delta {stats['delta']:+.4g}, 95% CI [{lo:+.4g}, {hi:+.4g}] over {n} seeds"
    if comp.kind == "close":
        span += f"; margin {comp.margin:.3g} x |baseline| = {abs(comp.margin * baseline_mean):.4g}"
    if gain_lo > threshold:
        return "reproduced", f"{span}: the interval lies on the claimed side"
    if gain_hi < threshold:
        return "not reproduced", f"{span}: the interval lies on the opposite side"
    return "inconclusive", f"{span}: the interval straddles the threshold (seed noise at this scale)"


def _compressed_level(table: pl.DataFrame, metric: str) -> str | None:
    """The highest numeric compression level with this metric (else the first level), for the summary."""
    levels = [c.split("/")[0][len("compressed@"):] for c in table.columns if c.startswith("compressed@") and c.endswith(f"/{metric}")]
    numeric = sorted((float(lv), lv) for lv in levels if _is_number(lv))
    if numeric:
        return numeric[-1][1]
    return levels[0] if levels else None


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _values(table: pl.DataFrame, variant: str, column: str) -> dict[int, float]:
    if column not in table.columns:
        return {}
    rows = table.filter(pl.col("variant") == variant).select("seed", column).drop_nulls()
    return {int(s): float(v) for s, v in rows.iter_rows() if not math.isnan(float(v))}


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    n = len(values)
    if not n:
        return float("nan"), float("nan")
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return mean, std


def claims_rows(spec: PaperSpec, cfg: Any, table: pl.DataFrame, profile: str) -> list[dict[str, Any]]:
    rows = []
    for comp in spec.comparisons(cfg):
        method = _values(table, comp.method, comp.column)
        baseline = _values(table, comp.baseline, comp.column)
        seeds = sorted(set(method) & set(baseline))
        stats = paired_stats([method[s] for s in seeds], [baseline[s] for s in seeds])
        m_mean, m_std = _mean_std([method[s] for s in seeds])
        b_mean, b_std = _mean_std([baseline[s] for s in seeds])
        if not seeds:
            v, reason = "inconclusive", f"no metric {comp.column!r} for both {comp.method} and {comp.baseline}"
        else:
            v, reason = verdict(comp, stats, b_mean)
        level = comp.level if comp.stage == "compressed" else _compressed_level(table, comp.metric)
        c_method = _mean_std(list(_values(table, comp.method, f"compressed@{level}/{comp.metric}").values()))[0] if level else float("nan")
        c_base = _mean_std(list(_values(table, comp.baseline, f"compressed@{level}/{comp.metric}").values()))[0] if level else float("nan")
        rows.append({
            "paper": spec.id, "claim": spec.claim, "comparison": comp.text or f"{comp.method} vs {comp.baseline}",
            "metric": comp.column, "better": comp.better, "kind": comp.kind, "margin": comp.margin,
            "stage": comp.stage, "level": comp.level or "", "method": comp.method, "baseline": comp.baseline,
            "method_mean": m_mean, "method_std": m_std, "baseline_mean": b_mean, "baseline_std": b_std,
            "delta": stats["delta"], "ci_low": stats["ci_low"], "ci_high": stats["ci_high"], "n_seeds": stats["n"],
            "verdict": v, "reason": reason, "compressed_level": level or "",
            "compressed_method_mean": c_method, "compressed_baseline_mean": c_base,
            "data": spec.data, "substitutions": spec.substitutions, "profile": profile,
        })
    return rows


def claims_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    schema = {c: (pl.Float64 if c in _FLOATS else pl.Int64 if c == "n_seeds" else pl.Utf8) for c in COLUMNS}
    return pl.DataFrame([{c: r.get(c) for c in COLUMNS} for r in rows], schema=schema)


_FLOATS = {"margin", "method_mean", "method_std", "baseline_mean", "baseline_std", "delta", "ci_low", "ci_high",
           "compressed_method_mean", "compressed_baseline_mean"}

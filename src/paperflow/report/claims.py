"""The claims table (DESIGN.md "Honesty"): each claim computed from the per-seed metrics.

For every Comparison of a paper, over the seeds both variants share:
  paired differences d_s = method_s - baseline_s, their mean and a two-sided 95% Student-t interval.
  Let "gain" be d for higher-is-better and -d for lower-is-better.
Verdicts of a judged row (roles headline, secondary, control):
  kind "better":  reproduced if the gain interval lies above 0, not reproduced if below 0, else inconclusive;
  kind "close":   with m = margin * |baseline mean|: reproduced if the gain interval lies above -m (method
                  at most m worse), not reproduced if it lies below -m, else inconclusive;
  kind "matches": x_s = method_s - target (a fitted quantity per seed, e.g. a rate exponent): reproduced if
                  the interval of x lies inside [-tolerance, +tolerance], not reproduced if it lies wholly
                  outside, else inconclusive;
  fewer than 2 seeds: inconclusive (no interval).
Each decision is the same as a one-sided t-test at 0.025 (the interval's side) and is written as one:
`p_value` is the one-sided p of the claimed side (for "matches" the larger of the two TOST p-values).
Secondary rows of a paper are one family: their verdict is taken from Holm-adjusted p-values (claimed side
and opposite side each adjusted over the family), `verdict_raw` keeps the unadjusted one. Headline rows
(one, or the declared two) and controls are judged alone.
Gates: a row whose precondition or mechanism gate fails (Gate) is `not testable`, with the measured value; so
is a row the paper declares untestable up front (Comparison.not_testable). Grid-edge gates are directional
(gate_blocks): the method on its grid's edge blocks only `not reproduced`, a baseline only `reproduced`.
Every row carries what its mechanism gates measured (`mechanism`), pass or fail. Facts (deterministic
quantities) carry their value and ratio, and no verdict.
`mde`: the smallest paired effect these seeds could detect with 80% power at the 0.025 one-sided level,
(t_{0.975, n-1} + t_{0.80, n-1}) * sd(d) / sqrt(n), from the observed sd of the paired differences.
Nothing is hard-coded: change the data and the verdict changes.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import polars as pl

from ..spec import Comparison, Gate, PaperSpec

ALPHA = 0.025  # one-sided level of each side; the same decisions as a two-sided 95% interval
JUDGED_ROLES = ("headline", "secondary", "control")
VERDICTS = ("reproduced", "inconclusive", "not reproduced", "not testable")

COLUMNS = [
    "paper", "claim", "role", "comparison", "metric", "better", "kind", "margin", "target", "tolerance", "stage", "level",
    "method", "baseline", "method_mean", "method_std", "baseline_mean", "baseline_std", "ratio", "delta", "ci_low",
    "ci_high", "n_seeds", "mde", "p_value", "p_holm", "verdict", "verdict_raw", "reason", "fidelity",
    "compressed_level", "compressed_method_mean", "compressed_baseline_mean", "data", "substitutions", "profile",
    "mechanism", "refuted_if", "registration",
]
_FLOATS = {"margin", "target", "tolerance", "method_mean", "method_std", "baseline_mean", "baseline_std", "ratio", "delta",
           "ci_low", "ci_high", "mde", "p_value", "p_holm", "compressed_method_mean", "compressed_baseline_mean"}


# ------------------------------------------------------------------ statistics
def t_quantile(n: int, confidence: float = 0.95) -> float:
    """Two-sided quantile t_{(1+confidence)/2, n-1}."""
    from scipy import stats

    return float(stats.t.ppf(0.5 + confidence / 2, df=n - 1))


def _t_cdf(t: float, df: int) -> float:
    from scipy import stats

    return float(stats.t.cdf(t, df=df))


def paired_stats(method: Sequence[float], baseline: Sequence[float]) -> dict[str, float]:
    """Mean paired difference method - baseline with a 95% t interval and the sd (nan interval for n < 2)."""
    return one_sample_stats([m - b for m, b in zip(method, baseline)])


def one_sample_stats(values: Sequence[float]) -> dict[str, float]:
    n = len(values)
    mean = sum(values) / n if n else float("nan")
    if n < 2:
        return {"delta": mean, "ci_low": float("nan"), "ci_high": float("nan"), "n": n, "sd": float("nan")}
    sd = math.sqrt(sum((d - mean) ** 2 for d in values) / (n - 1))
    half = t_quantile(n) * sd / math.sqrt(n)
    return {"delta": mean, "ci_low": mean - half, "ci_high": mean + half, "n": n, "sd": sd}


def one_sided_p(mean: float, sd: float, n: int, threshold: float, greater: bool = True) -> float:
    """p-value of the one-sample t-test of H1: mean > threshold (greater) or mean < threshold.
    A zero sd (identical differences) gives 0 or 1 (0.5 exactly at the threshold)."""
    if n < 2 or math.isnan(sd):
        return float("nan")
    se = sd / math.sqrt(n)
    diff = mean - threshold if greater else threshold - mean
    if se == 0:
        return 0.0 if diff > 0 else 1.0 if diff < 0 else 0.5
    return 1.0 - _t_cdf(diff / se, n - 1)


def min_detectable_effect(sd: float, n: int, power: float = 0.8) -> float:
    """(t_{1-ALPHA, n-1} + t_{power, n-1}) * sd / sqrt(n): the paired effect detected with `power`."""
    if n < 2 or math.isnan(sd):
        return float("nan")
    from scipy import stats

    return float((stats.t.ppf(1 - ALPHA, n - 1) + stats.t.ppf(power, n - 1)) * sd / math.sqrt(n))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values (nan stays nan and is not counted in the family):
    with the m finite p sorted ascending p_(1) <= ... <= p_(m), adj_(i) = max_{j <= i} min(1, (m - j + 1) p_(j))."""
    finite = sorted((p, i) for i, p in enumerate(pvalues) if not math.isnan(p))
    m = len(finite)
    out = [float("nan")] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(finite):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


# ------------------------------------------------------------------ one row
def _threshold(comp: Comparison, baseline_mean: float) -> float:
    return 0.0 if comp.kind == "better" else -abs(comp.margin * baseline_mean)


def side_pvalues(comp: Comparison, stats: Mapping[str, float], baseline_mean: float) -> tuple[float, float]:
    """(p of the claimed side, p of the opposite side), one-sided, from the row's paired statistics.
    For "matches", stats are of x = method - target: claimed = TOST max(p(x > -tol), p(x < tol)),
    opposite = min(p(x > tol), p(x < -tol))."""
    n, mean, sd = int(stats["n"]), stats["delta"], stats.get("sd", float("nan"))
    if comp.kind == "matches":
        tol = comp.tolerance
        claim = max(one_sided_p(mean, sd, n, -tol, True), one_sided_p(mean, sd, n, tol, False))
        opp = min(one_sided_p(mean, sd, n, tol, True), one_sided_p(mean, sd, n, -tol, False))
        return claim, opp
    sign = 1.0 if comp.better == "higher" else -1.0
    thr = _threshold(comp, baseline_mean)
    return one_sided_p(sign * mean, sd, n, thr, True), one_sided_p(sign * mean, sd, n, thr, False)


def verdict(comp: Comparison, stats: Mapping[str, float], baseline_mean: float) -> tuple[str, str]:
    """Unadjusted verdict of a judged row from its 95% interval (module docstring)."""
    n, lo, hi = stats["n"], stats["ci_low"], stats["ci_high"]
    if n < 2 or math.isnan(lo):
        return "inconclusive", f"{n} paired seed(s): no confidence interval"
    if comp.kind == "matches":
        tol = comp.tolerance
        span = (f"fitted {stats['delta'] + comp.target:.4g} vs target {comp.target:.4g}: difference "
                f"{stats['delta']:+.4g}, 95% CI [{lo:+.4g}, {hi:+.4g}] over {n} seeds; tolerance {tol:.3g}")
        if -tol < lo and hi < tol:
            return "reproduced", f"{span}: the interval lies inside the tolerance"
        if lo > tol or hi < -tol:
            return "not reproduced", f"{span}: the interval lies outside the tolerance"
        return "inconclusive", f"{span}: the interval crosses the tolerance's edge"
    sign = 1.0 if comp.better == "higher" else -1.0
    gain_lo, gain_hi = sorted((sign * lo, sign * hi))
    threshold = _threshold(comp, baseline_mean)
    span = f"paired delta {stats['delta']:+.4g}, 95% CI [{lo:+.4g}, {hi:+.4g}] over {n} seeds"
    if comp.kind == "close":
        span += f"; margin {comp.margin:.3g} x |baseline| = {abs(comp.margin * baseline_mean):.4g}"
    if gain_lo > threshold:
        return "reproduced", f"{span}: the interval lies on the claimed side"
    if gain_hi < threshold:
        return "not reproduced", f"{span}: the interval lies on the opposite side"
    return "inconclusive", f"{span}: the interval straddles the threshold (seed noise at this scale)"


def check_gate(gate: Gate, table: pl.DataFrame) -> tuple[bool, str]:
    """(passed, what was measured) for one precondition on the paper's metrics table."""
    if gate.comparison is not None:
        row = _judge(gate.comparison, table)
        return row["verdict_raw"] == "reproduced", f"{gate.text}: {row['verdict_raw']} ({row['reason']})"
    values = list(_values(table, gate.variant, gate.column).values())
    if not values:
        return False, f"{gate.text}: no {gate.column!r} for {gate.variant}"
    mean = sum(values) / len(values)
    ok = (gate.above is None or mean > gate.above) and (gate.below is None or mean < gate.below)
    bounds = " and ".join(b for b in (f"> {gate.above:.4g}" if gate.above is not None else "",
                                      f"< {gate.below:.4g}" if gate.below is not None else "") if b)
    return ok, f"{gate.text}: {gate.variant} {gate.column} mean {mean:.4g} over {len(values)} seeds (needs {bounds})"


def _judge(comp: Comparison, table: pl.DataFrame) -> dict[str, Any]:
    """Statistics and the unadjusted verdict of one row (no gates, no Holm)."""
    method = _values(table, comp.method, comp.column)
    if comp.kind == "matches":
        seeds = sorted(method)
        baseline: dict[int, float] = {}
        stats = one_sample_stats([method[s] - comp.target for s in seeds])
    else:
        baseline = _values(table, comp.baseline, comp.column) if comp.baseline else {}
        seeds = sorted(set(method) & set(baseline)) if comp.baseline else sorted(method)
        stats = (paired_stats([method[s] for s in seeds], [baseline[s] for s in seeds]) if comp.baseline
                 else one_sample_stats([method[s] for s in seeds]))
    m_mean, m_std = _mean_std([method[s] for s in seeds])
    b_mean, b_std = _mean_std([baseline[s] for s in seeds]) if baseline else (float("nan"), float("nan"))
    row: dict[str, Any] = {"method_mean": m_mean, "method_std": m_std, "baseline_mean": b_mean, "baseline_std": b_std,
                           "delta": stats["delta"], "ci_low": stats["ci_low"], "ci_high": stats["ci_high"],
                           "n_seeds": stats["n"], "mde": min_detectable_effect(stats.get("sd", float("nan")), stats["n"]),
                           "ratio": m_mean / b_mean if baseline and b_mean else float("nan")}
    if not seeds:
        row.update(verdict_raw="inconclusive", reason=f"no metric {comp.column!r} for {comp.method}"
                   + (f" and {comp.baseline}" if comp.baseline else ""), p_claim=float("nan"), p_opp=float("nan"))
        return row
    v, reason = verdict(comp, stats, b_mean)
    p_claim, p_opp = side_pvalues(comp, stats, b_mean)
    row.update(verdict_raw=v, reason=reason, p_claim=p_claim, p_opp=p_opp)
    return row


# ------------------------------------------------------------------ the table
def _compressed_level(table: pl.DataFrame, metric: str) -> str | None:
    """The highest numeric compression level with this metric (else the first level), for the summary."""
    levels = [c.split("/")[0][len("compressed:"):] for c in table.columns if c.startswith("compressed:") and c.endswith(f"/{metric}")]
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


def gate_blocks(gate: Gate, comp: Comparison) -> tuple[str, ...]:
    """The verdicts a failed gate turns into `not testable` (spec.GATE_KINDS). Grid-edge gates are directional:
    the row's method on its grid's edge can only have been under-tuned against itself, so it blocks only
    `not reproduced`; any other variant (the baseline, or a variant a derived view picks from) on its edge can
    only flatter the method, so it blocks only `reproduced`. Every other gate blocks every verdict."""
    if gate.kind != "grid_edge":
        return VERDICTS
    heads = {comp.method, comp.method.split("|", 1)[0]}
    return ("not reproduced",) if gate.variant in heads else ("reproduced",)


def mechanism_text(comp: Comparison, table: pl.DataFrame) -> str:
    """What the mechanism gates measured in these runs, pass or fail (the report prints it beside the verdict)."""
    parts = []
    for gate in comp.mechanism_gates:
        ok, what = check_gate(gate, table)
        parts.append(f"{what} [{'active' if ok else 'NOT ACTIVE'}]")
    return "; ".join(parts)


def claims_rows(spec: PaperSpec, cfg: Any, table: pl.DataFrame, profile: str) -> list[dict[str, Any]]:
    rows = []
    for comp in spec.comparisons(cfg):
        judged = _judge(comp, table)
        role = comp.role or "secondary"
        v, reason = judged["verdict_raw"], judged["reason"]
        blocks: list[tuple[tuple[str, ...], str]] = []  # failed gates: (verdicts each blocks, what was measured)
        if role == "fact":
            v = ""
            reason = f"fact: {comp.method} {_num(judged['method_mean'])}" + (
                f", {comp.baseline} {_num(judged['baseline_mean'])}, ratio {_num(judged['ratio'])}" if comp.baseline else "")
        elif comp.not_testable:
            v, reason = "not testable", f"declared not testable here: {comp.not_testable}"
        else:
            blocks = [(gate_blocks(g, comp), why) for g, (ok, why) in ((g, check_gate(g, table)) for g in comp.gates) if not ok]
            v, reason = _gated(v, reason, blocks)
        level = comp.level if comp.stage == "compressed" else _compressed_level(table, comp.metric)
        c_method = _mean_std(list(_values(table, comp.method, f"compressed:{level}/{comp.metric}").values()))[0] if level else float("nan")
        c_base = (_mean_std(list(_values(table, comp.baseline, f"compressed:{level}/{comp.metric}").values()))[0]
                  if level and comp.baseline else float("nan"))
        rows.append({
            "paper": spec.id, "claim": spec.claim, "role": role,
            "comparison": comp.text or f"{comp.method} vs {comp.baseline}",
            "metric": comp.column, "better": comp.better, "kind": comp.kind, "margin": comp.margin,
            "target": comp.target if comp.target is not None else float("nan"),
            "tolerance": comp.tolerance if comp.kind == "matches" else float("nan"),
            "stage": comp.stage, "level": comp.level or "", "method": comp.method, "baseline": comp.baseline,
            **{k: judged[k] for k in ("method_mean", "method_std", "baseline_mean", "baseline_std", "ratio", "delta",
                                      "ci_low", "ci_high", "n_seeds", "mde")},
            "p_value": judged["p_claim"] if role != "fact" else float("nan"), "p_holm": float("nan"),
            "_p_opp": judged["p_opp"], "_blocks": blocks, "verdict": v,
            "verdict_raw": judged["verdict_raw"] if role != "fact" else "",
            "reason": reason, "fidelity": comp.fidelity or spec.fidelity,
            "mechanism": mechanism_text(comp, table) if role != "fact" else "",
            "refuted_if": comp.refuted_if,
            "compressed_level": level or "", "compressed_method_mean": c_method, "compressed_baseline_mean": c_base,
            "data": spec.data, "substitutions": spec.substitutions, "profile": profile,
        })
    _holm_secondary(rows)
    for r in rows:
        r.pop("_p_opp", None)
        r.pop("_blocks", None)
    return rows


def _gated(v: str, reason: str, blocks: Sequence[tuple[tuple[str, ...], str]]) -> tuple[str, str]:
    """A verdict after its failed gates: `not testable` if any failed gate blocks it, else unchanged with the
    failed directional gates named (they could only have pushed the verdict the other way)."""
    if not blocks:
        return v, reason
    blocking = [why for verdicts, why in blocks if v in verdicts]
    if blocking:
        return "not testable", "gate failed: " + "; ".join(blocking)
    spared = "; ".join(f"{why} (blocks only {' / '.join(repr(x) for x in verdicts)})" for verdicts, why in blocks)
    return v, f"{reason}; grid-edge gate failed but cannot have produced this verdict: {spared}"


def _holm_secondary(rows: list[dict[str, Any]]) -> None:
    """Secondary rows that were tested (not gated out, an interval exists) form one Holm family per paper;
    their verdict becomes the adjusted one (claimed and opposite sides each adjusted). A directional gate that
    failed is applied again to the adjusted verdict."""
    family = [r for r in rows if r["role"] == "secondary" and r["verdict"] in ("reproduced", "inconclusive", "not reproduced")
              and not math.isnan(r["p_value"])]
    if not family:
        return
    adj_claim = holm([r["p_value"] for r in family])
    adj_opp = holm([r["_p_opp"] for r in family])
    for r, pc, po in zip(family, adj_claim, adj_opp):
        r["p_holm"] = pc
        v = "reproduced" if pc < ALPHA else "not reproduced" if po < ALPHA else "inconclusive"
        if v != r["verdict"]:
            r["reason"] += f"; Holm over {len(family)} secondary rows: adjusted p {pc:.3g} -> {v}"
            blocking = [why for verdicts, why in r["_blocks"] if v in verdicts]
            if blocking:
                v, r["reason"] = "not testable", "gate failed: " + "; ".join(blocking)
        r["verdict"] = v


def _num(x: float) -> str:
    return "n/a" if isinstance(x, float) and math.isnan(x) else f"{x:.4g}"


def headline_rows(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in rows if r["role"] == "headline"]


def claims_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    schema = {c: (pl.Float64 if c in _FLOATS else pl.Int64 if c == "n_seeds" else pl.Utf8) for c in COLUMNS}
    return pl.DataFrame([{c: r.get(c) for c in COLUMNS} for r in rows], schema=schema)

"""Verdicts from paired differences over seeds, on hand-computed cases."""
from __future__ import annotations

import math

import polars as pl
import pytest

from paperflow.report.claims import claims_frame, claims_rows, paired_stats, verdict
from paperflow.spec import Comparison, PaperSpec


def test_paired_interval_by_hand():
    # d = [-1, -2, -3]: mean -2, sd 1, t(0.975, 2) = 4.302653 -> half width 4.302653 / sqrt(3)
    s = paired_stats([1.0, 2.0, 3.0], [2.0, 4.0, 6.0])
    half = 4.302652729911275 / math.sqrt(3)
    assert s["delta"] == pytest.approx(-2.0)
    assert s["ci_low"] == pytest.approx(-2.0 - half) and s["ci_high"] == pytest.approx(-2.0 + half)
    assert s["n"] == 3


def test_verdicts_follow_the_interval():
    lower = Comparison("loss", "m", "b", better="lower")
    higher = Comparison("acc", "m", "b", better="higher")
    tight_negative = {"delta": -1.0, "ci_low": -1.2, "ci_high": -0.8, "n": 3}
    assert verdict(lower, tight_negative, 10.0)[0] == "reproduced"
    assert verdict(higher, tight_negative, 10.0)[0] == "not reproduced"
    straddle = {"delta": -0.1, "ci_low": -0.5, "ci_high": 0.3, "n": 3}
    assert verdict(lower, straddle, 10.0)[0] == "inconclusive"
    assert verdict(lower, {"delta": -1.0, "ci_low": math.nan, "ci_high": math.nan, "n": 1}, 10.0)[0] == "inconclusive"


def test_close_claim_uses_relative_margin():
    close = Comparison("loss", "m", "b", better="lower", kind="close", margin=0.05)  # 5% of 10 = 0.5
    assert verdict(close, {"delta": 0.2, "ci_low": 0.1, "ci_high": 0.3, "n": 3}, 10.0)[0] == "reproduced"
    assert verdict(close, {"delta": 0.8, "ci_low": 0.6, "ci_high": 1.0, "n": 3}, 10.0)[0] == "not reproduced"
    assert verdict(close, {"delta": 0.5, "ci_low": 0.3, "ci_high": 0.7, "n": 3}, 10.0)[0] == "inconclusive"


def test_claims_rows_pair_by_seed():
    table = pl.DataFrame({
        "variant": ["m", "m", "m", "b", "b", "b"], "seed": [0, 1, 2, 0, 1, 2],
        "dense/loss": [1.0, 1.1, 0.9, 1.5, 1.6, 1.4], "compressed:0.50/loss": [2.0, 2.0, 2.0, 3.0, 3.0, 3.0],
    })
    spec = PaperSpec(id="demo", title="t", claim="m below b", Config=dict, variants=("m", "b"), prepare=None, train=None,
                     evaluate=None, comparisons=lambda cfg: [Comparison("loss", "m", "b")])
    (row,) = claims_rows(spec, None, table, "smoke")
    assert row["delta"] == pytest.approx(-0.5) and row["ci_high"] == pytest.approx(-0.5)  # identical paired differences
    assert row["verdict"] == "reproduced" and row["n_seeds"] == 3
    assert row["compressed_method_mean"] == pytest.approx(2.0) and row["compressed_baseline_mean"] == pytest.approx(3.0)
    assert claims_frame([row]).height == 1


# ------------------------------------------------------------------ roles, gates, Holm, "matches" (verdicts v2)
from paperflow.report.claims import VERDICTS, holm, min_detectable_effect, one_sided_p, side_pvalues  # noqa: E402
from paperflow.spec import Gate  # noqa: E402


def _spec(comps):
    return PaperSpec(id="demo", title="t", claim="c", Config=dict, variants=("m", "b"), prepare=None, train=None,
                     evaluate=None, comparisons=lambda cfg: comps)


def _table(m, b, column="dense/acc"):
    n = len(m)
    return pl.DataFrame({"variant": ["m"] * n + ["b"] * n, "seed": list(range(n)) * 2, column: list(m) + list(b)})


def test_holm_by_hand():
    # family of 4, sorted: 0.01*4 = 0.04, 0.02*3 = 0.06, 0.04*2 = 0.08, 0.5*1 = 0.5 (already monotone)
    assert holm([0.04, 0.01, 0.5, 0.02]) == pytest.approx([0.08, 0.04, 0.5, 0.06])
    # monotone: a later raw product below an earlier one is raised to it; nan is outside the family
    assert holm([0.03, 0.011, math.nan]) == pytest.approx([0.03, 0.022, math.nan], nan_ok=True)
    assert holm([0.9, 0.2, 0.1])[0] == pytest.approx(0.9)


def test_one_sided_p_matches_the_interval():
    # d = [1, 2, 3]: mean 2, sd 1, se 1/sqrt(3); t = 2 sqrt(3) = 3.4641, df 2 -> p = 0.03709
    assert one_sided_p(2.0, 1.0, 3, 0.0) == pytest.approx(0.037089, abs=1e-5)
    # the 95% interval's lower end is above 0 exactly when p < 0.025
    s = paired_stats([3.0, 4.0, 5.0, 6.0, 7.0], [1.0, 1.5, 2.5, 4.0, 4.5])
    comp = Comparison("acc", "m", "b", better="higher", role="secondary")
    p_claim, _ = side_pvalues(comp, s, 1.0)
    assert (s["ci_low"] > 0) == (p_claim < 0.025)
    assert one_sided_p(1.0, 0.0, 3, 0.0) == 0.0 and one_sided_p(-1.0, 0.0, 3, 0.0) == 1.0


def test_min_detectable_effect_by_hand():
    # n = 4, sd 2: (t_{0.975,3} + t_{0.8,3}) * 2 / 2 = 3.182446 + 0.978472
    assert min_detectable_effect(2.0, 4) == pytest.approx(3.182446 + 0.978472, abs=1e-5)
    assert math.isnan(min_detectable_effect(1.0, 1))


def test_a_fact_never_gets_a_verdict():
    comp = Comparison("params", "m", "b", role="fact", text="params")
    (row,) = claims_rows(_spec([comp]), None, _table([10.0, 10.0, 10.0], [5.0, 5.0, 5.0], "dense/params"), "t")
    assert row["verdict"] == "" and row["verdict_raw"] == ""
    assert row["ratio"] == pytest.approx(2.0) and row["method_mean"] == pytest.approx(10.0)
    assert math.isnan(row["p_value"])


def test_a_failed_gate_gives_not_testable():
    at_chance = Gate("baseline above chance", variant="b", metric="acc", above=0.2)
    comp = Comparison("acc", "m", "b", better="higher", role="headline", gates=(at_chance,))
    (row,) = claims_rows(_spec([comp]), None, _table([0.5, 0.6, 0.55], [0.12, 0.13, 0.11]), "t")
    assert row["verdict"] == "not testable" and "baseline above chance" in row["reason"]
    assert row["verdict_raw"] == "reproduced"  # the interval alone would have said reproduced
    (row,) = claims_rows(_spec([comp]), None, _table([0.5, 0.6, 0.55], [0.32, 0.33, 0.31]), "t")
    assert row["verdict"] == "reproduced"
    # a comparison gate: passes only when its own interval is on the claimed side
    premise = Gate("b is worse than m", comparison=Comparison("acc", "m", "b", better="higher"))
    comp2 = Comparison("acc", "b", "m", better="lower", role="control", gates=(premise,))
    (row,) = claims_rows(_spec([comp2]), None, _table([0.5, 0.5, 0.5], [0.5, 0.51, 0.49]), "t")
    assert row["verdict"] == "not testable"


def test_declared_not_testable_keeps_values():
    comp = Comparison("acc", "m", "b", better="higher", role="headline", not_testable="needs 70B agents")
    (row,) = claims_rows(_spec([comp]), None, _table([0.5, 0.6, 0.55], [0.1, 0.1, 0.1]), "t")
    assert row["verdict"] == "not testable" and "70B" in row["reason"] and row["method_mean"] == pytest.approx(0.55)


def test_matches_kind_judges_a_fitted_quantity():
    near = Comparison("slope", "m", "", kind="matches", target=1.0, tolerance=0.1, role="headline")
    (row,) = claims_rows(_spec([near]), None, _table([0.98, 1.01, 1.0, 0.99], [0, 0, 0, 0], "dense/slope"), "t")
    assert row["verdict"] == "reproduced" and row["delta"] == pytest.approx(-0.005)
    (row,) = claims_rows(_spec([near]), None, _table([1.5, 1.52, 1.49, 1.5], [0, 0, 0, 0], "dense/slope"), "t")
    assert row["verdict"] == "not reproduced"
    (row,) = claims_rows(_spec([near]), None, _table([0.8, 1.2, 1.0, 1.05], [0, 0, 0, 0], "dense/slope"), "t")
    assert row["verdict"] == "inconclusive"


def test_secondary_rows_are_holm_adjusted():
    # two secondary rows each just inside the unadjusted 0.025 level: Holm over the family of two needs p < 0.0125
    m = [1.0, 1.2, 0.9, 1.1, 1.0]
    b = [0.0, 0.6, 0.5, 0.0, 0.9]  # d = [1, .6, .4, 1.1, .1]
    comps = [Comparison("acc", "m", "b", better="higher", role="secondary", text="one"),
             Comparison("acc", "m", "b", better="higher", role="secondary", text="two")]
    rows = claims_rows(_spec(comps), None, _table(m, b), "t")
    raw_p = rows[0]["p_value"]
    assert 0.0125 < raw_p < 0.025
    assert [r["verdict_raw"] for r in rows] == ["reproduced", "reproduced"]
    assert [r["verdict"] for r in rows] == ["inconclusive", "inconclusive"]
    assert rows[0]["p_holm"] == pytest.approx(2 * raw_p)
    # a headline row with the same data is judged alone
    (row,) = claims_rows(_spec([Comparison("acc", "m", "b", better="higher", role="headline")]), None, _table(m, b), "t")
    assert row["verdict"] == "reproduced" and math.isnan(row["p_holm"])
    assert set(r["verdict"] for r in rows) <= set(VERDICTS)

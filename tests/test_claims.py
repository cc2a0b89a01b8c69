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
        "dense/loss": [1.0, 1.1, 0.9, 1.5, 1.6, 1.4], "compressed@0.50/loss": [2.0, 2.0, 2.0, 3.0, 3.0, 3.0],
    })
    spec = PaperSpec(id="demo", title="t", claim="m below b", Config=dict, variants=("m", "b"), prepare=None, train=None,
                     evaluate=None, comparisons=lambda cfg: [Comparison("loss", "m", "b")])
    (row,) = claims_rows(spec, None, table, "smoke")
    assert row["delta"] == pytest.approx(-0.5) and row["ci_high"] == pytest.approx(-0.5)  # identical paired differences
    assert row["verdict"] == "reproduced" and row["n_seeds"] == 3
    assert row["compressed_method_mean"] == pytest.approx(2.0) and row["compressed_baseline_mean"] == pytest.approx(3.0)
    assert claims_frame([row]).height == 1

"""Report rendering details (issue 26 item 17): no "± 0" at one seed, the reason beside a not-testable headline,
no empty chart from single-point curves."""
from __future__ import annotations

import json

from paperflow.report import _headline_verdict, _mean_sd, figures


def test_one_seed_has_no_spread_to_show():
    assert _mean_sd(3.0, 0.0, 1) == "3 (1 seed)"
    assert _mean_sd(3.0, 0.5, 4) == "3 ± 0.5"


def test_a_not_testable_headline_says_why():
    row = {"verdict": "not testable", "reason": "gate failed: conflicts on 1% of steps"}
    assert "conflicts on 1% of steps" in _headline_verdict(row)
    assert _headline_verdict({"verdict": "reproduced", "reason": "x"}) == "reproduced"


def test_single_point_curves_make_no_chart(tmp_path):
    run = tmp_path / "results" / "p" / "a" / "seed0"
    run.mkdir(parents=True)
    (run / "curves.json").write_text(json.dumps({"train/loss": [[0, 1.0]]}))
    assert figures.learning_curves(tmp_path / "results", "p", ["a"], [0], tmp_path / "f.png") is None
    (run / "curves.json").write_text(json.dumps({"train/loss": [[0, 1.0], [1, 0.5]]}))
    assert figures.learning_curves(tmp_path / "results", "p", ["a"], [0], tmp_path / "f.png") is not None

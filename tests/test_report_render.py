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


def test_results_are_judged_with_the_settings_of_the_profile_that_made_them():
    """A smoke table under a default-profile report: judged with the smoke config and marked; a table mixing
    profiles is refused (issue 26)."""
    import polars as pl

    from conftest import ROOT
    from paperflow import config
    from paperflow.report import _made_by
    from paperflow.stages import config_hash

    settings = config.load(ROOT / "params.yaml", profile="default", only=["metalearn_seq"])
    smoke = config.load(ROOT / "params.yaml", profile="smoke", only=["metalearn_seq"])
    h = config_hash(smoke.config("metalearn_seq"), smoke.seeds("metalearn_seq"))
    table = pl.DataFrame({"variant": ["a"], "seed": [0], "profile": ["smoke"], "config_hash": [h]})
    made = _made_by(ROOT, settings, "metalearn_seq", table)
    assert made["profile"] == "smoke" and made["cfg"] == smoke.config("metalearn_seq") and not made["problem"]
    assert "profile 'smoke'" in made["note"] and "other settings" not in made["note"]
    stale = _made_by(ROOT, settings, "metalearn_seq", table.with_columns(pl.lit("0000").alias("config_hash")))
    assert "other settings" in stale["note"]
    mixed = pl.DataFrame({"variant": ["a", "a"], "seed": [0, 1], "profile": ["smoke", "default"], "config_hash": [h, h]})
    assert "mix profiles" in _made_by(ROOT, settings, "metalearn_seq", mixed)["problem"]


def test_a_figure_is_drawn_again_only_when_its_inputs_change(tmp_path, monkeypatch):
    """The PNG's text chunk holds a digest of its inputs: a second report with the same data draws nothing; a changed
    curve, table or a deleted file is drawn again."""
    import polars as pl

    run = tmp_path / "results" / "p" / "a" / "seed0"
    run.mkdir(parents=True)
    (run / "curves.json").write_text(json.dumps({"train/loss": [[0, 1.0], [1, 0.5]]}))
    table = pl.DataFrame({"variant": ["a", "b"], "dense/acc": [0.9, 0.8], "compressed:0.50/acc": [0.85, 0.7]})
    draws = []
    real_save = figures._save
    monkeypatch.setattr(figures, "_save", lambda fig, out, key: draws.append(out.name) or real_save(fig, out, key))

    def both():
        curve = figures.learning_curves(tmp_path / "results", "p", ["a"], [0], tmp_path / "c.png")
        comp = figures.compression_figure(table, "p", "acc", tmp_path / "k.png")
        return curve, comp

    assert both() == (tmp_path / "c.png", tmp_path / "k.png") and draws == ["c.png", "k.png"]
    assert both() == (tmp_path / "c.png", tmp_path / "k.png") and draws == ["c.png", "k.png"]  # nothing drawn again
    (run / "curves.json").write_text(json.dumps({"train/loss": [[0, 1.0], [1, 0.4]]}))
    table = table.with_columns(pl.col("compressed:0.50/acc") * 0.5)
    both()
    assert draws[2:] == ["c.png", "k.png"]
    (tmp_path / "k.png").unlink()
    both()
    assert draws[4:] == ["k.png"]
    (tmp_path / "c.png").write_bytes(b"not a png")
    both()
    assert draws[5:] == ["c.png"]

"""Progress lines in job logs, and the claim note a (variant, seed) parent run shows first in MLflow."""
from __future__ import annotations

import torch

from paperflow import progress
from paperflow.loop import train_loop
from paperflow.registry import get_paper
from paperflow.stages import claim_note


def test_progress_prints_first_and_last_and_throttles(capsys, monkeypatch):
    monkeypatch.setenv("PAPERFLOW_PROGRESS_S", "3600")
    progress.set_label("demo/v/seed0")
    bar = progress.Progress("train", 50)
    printed = [bar.update(i, loss=1.0 / i) for i in range(1, 51)]
    assert printed[0] and printed[-1] and sum(printed) == 2  # nothing in between within the hour
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("[progress] demo/v/seed0 train: step 1/50 (2%)") and "loss=1" in err[0]
    assert "step 50/50 (100%)" in err[1] and "ETA 0 s" in err[1]
    progress.set_label("")


def test_train_loop_reports_steps_out_of_total(capsys, monkeypatch):
    monkeypatch.setenv("PAPERFLOW_PROGRESS_S", "0")  # every step
    net = torch.nn.Linear(2, 1)
    x, y = torch.randn(8, 2), torch.randn(8, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    train_loop(list(net.parameters()), lambda s: (x, y), lambda b: torch.nn.functional.mse_loss(net(b[0]), b[1]), opt, 5)
    lines = [l for l in capsys.readouterr().err.splitlines() if l.startswith("[progress]")]
    assert len(lines) == 5 and "step 5/5 (100%)" in lines[-1]


def test_claim_note_names_the_headline_metric():
    spec = get_paper("fairgrad")
    cfg = spec.Config()
    claim, column, note = claim_note(spec, cfg, "fairgrad", {"dense/acc_a": 90.0})
    assert column == "dense/delta_m" and "derived across runs" in note and "method of the headline" in note
    spec = get_paper("iffn_agelu")
    cfg = spec.Config()
    head = next(c for c in spec.comparisons(cfg) if c.role == "headline")
    col = f"dense/{head.metric}" if head.stage == "dense" else f"compressed:{head.level}/{head.metric}"
    claim, column, note = claim_note(spec, cfg, head.baseline or head.method, {col: 12.5})
    assert column == col and "**12.5**" in note and claim

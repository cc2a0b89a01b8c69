"""Progress lines a person can follow in a job log (logs/<paper>/<variant>/seed<k>/run.log).

tqdm's carriage-return bar turns into one very long line in a log file, so long loops print plain lines
instead, at most one every PAPERFLOW_PROGRESS_S seconds (10 by default) per process, whoever prints:
    [progress] fairgrad/ls/seed0 train: step 400/1500 (27%) 12.1 s, ETA 33 s, train/loss=0.53
train_loop (steps), the federated round loop (rounds) and the stage runner's step logger use it; any loop can
(`Progress("calibration", total=n)` then `.update(i + 1, loss=...)`). The first and last update always print.
"""
from __future__ import annotations

import os
import sys
import time

_state = {"last": 0.0, "label": ""}


def every_s() -> float:
    try:
        return float(os.environ.get("PAPERFLOW_PROGRESS_S", "10"))
    except ValueError:
        return 10.0


def set_label(label: str) -> None:
    """Prefix of every line of this process (the stage runner sets "<paper>/<variant>/seed<k> <stage>")."""
    _state["label"] = label


def _due(force: bool) -> bool:
    now = time.monotonic()
    if force or now - _state["last"] >= every_s():
        _state["last"] = now
        return True
    return False


def _fmt(values: dict) -> str:
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items())


def note(what: str, force: bool = False, **values: float) -> bool:
    """One throttled line without a total (a loop whose length is unknown here); True if printed."""
    if not _due(force):
        return False
    label = f"{_state['label']}: " if _state["label"] else ""
    extra = f" {_fmt(values)}" if values else ""
    print(f"[progress] {label}{what}{extra}", file=sys.stderr, flush=True)
    return True


class Progress:
    """done/total with elapsed time and a linear ETA, throttled with every other progress line."""

    def __init__(self, what: str, total: int, unit: str = "step"):
        self.what, self.total, self.unit = what, max(1, int(total)), unit
        self.start = time.monotonic()

    def line(self, done: int, **values: float) -> str:
        elapsed = time.monotonic() - self.start
        eta = elapsed / done * (self.total - done) if done else float("nan")
        label = f"{_state['label']} " if _state["label"] else ""
        extra = f", {_fmt(values)}" if values else ""
        return (f"[progress] {label}{self.what}: {self.unit} {done}/{self.total} ({100 * done / self.total:.0f}%) "
                f"{elapsed:.1f} s, ETA {eta:.0f} s{extra}")

    def update(self, done: int, **values: float) -> bool:
        if not _due(force=done in (1, self.total)):
            return False
        print(self.line(done, **values), file=sys.stderr, flush=True)
        return True

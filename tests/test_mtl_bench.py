"""paperflow.mtl_bench (shared by fairgrad, excessmtl, bayesagg_mtl): Delta-m% on hand cases, the validation-chosen best
baseline and its derived view, the shared overlay-size checks, and the tuning rule on a fake fit."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from paperflow import mtl_bench as MB
from paperflow.spec import ConfigError


def test_delta_m_hand_cases():
    assert MB.delta_m([0.9, 0.8], [0.9, 0.8], [True, True]) == 0.0
    # +10% on task a, -10% on task b (both higher-better): the mean of -10 and +10 is 0
    assert MB.delta_m([0.99, 0.72], [0.9, 0.8], [True, True]) == pytest.approx(0.0)
    # one lower-better task 20% above its reference: +20 / 2 = +10 (worse)
    assert MB.delta_m([0.9, 1.2], [0.9, 1.0], [True, False]) == pytest.approx(10.0)


def rows():
    """Two seeds; single-task references stl_a / stl_b; baselines ls and mgda with tuning records (validation)."""
    out = []
    for seed in (0, 1):
        out += [
            {"variant": "stl_a", "seed": seed, "dense/acc_a": 0.90, "dense/val_acc_a": 0.90, "dense/val_acc_b": 0.0},
            {"variant": "stl_b", "seed": seed, "dense/acc_b": 0.80, "dense/val_acc_a": 0.0, "dense/val_acc_b": 0.80},
            # ls is better on test but worse on validation than mgda: the rule must follow validation
            {"variant": "ls", "seed": seed, "dense/acc_a": 0.90, "dense/acc_b": 0.80, "dense/val_acc_a": 0.81, "dense/val_acc_b": 0.72},
            {"variant": "mgda", "seed": seed, "dense/acc_a": 0.81, "dense/acc_b": 0.72, "dense/val_acc_a": 0.90, "dense/val_acc_b": 0.80},
        ]
    return out


def test_best_baseline_is_chosen_on_validation_not_test():
    assert MB.best_baseline(rows(), ("ls", "mgda"), {"a": "stl_a", "b": "stl_b"}) == "mgda"
    assert MB.best_baseline([{"variant": "ls", "seed": 0}], ("ls",), {"a": "stl_a", "b": "stl_b"}) is None


def test_derive_delta_m_adds_columns_and_the_best_baseline_view():
    out = MB.derive_delta_m(rows(), ("ls", "mgda"), ("ls", "mgda"), {"a": "stl_a", "b": "stl_b"}, "ref|best")
    ls0 = next(r for r in out if r["variant"] == "ls" and r["seed"] == 0)
    assert ls0["dense/delta_m"] == pytest.approx(0.0)
    best = [r for r in out if r["variant"] == "ref|best"]
    assert len(best) == 2 and all(r["dense/best_baseline"] == 1.0 for r in best)  # index of mgda
    assert best[0]["dense/delta_m"] == pytest.approx(10.0)  # mgda: -10% on both tasks


def test_bench_config_checks():
    ok = dict(n_train=10, n_val=5, n_test=5, mnist_test=2000, mnist_val=1000, fashion_val=6000, lr_grid=(0.01, 0.1),
              sparsities=(0.5, 0.8), compare_level=0.5, eval_batch=100, log_every=10)
    MB.check_bench_config(SimpleNamespace(**ok))
    for bad in ({"n_val": 0}, {"mnist_val": 8000}, {"fashion_val": 60000}, {"lr_grid": (0.1, 0.01)}, {"compare_level": 0.3},
                {"eval_batch": 0}):
        with pytest.raises(ConfigError):
            MB.check_bench_config(SimpleNamespace(**{**ok, **bad}))


def test_tune_lrs_keeps_the_best_validation_lr_and_skips_a_diverging_one(monkeypatch):
    cfg = SimpleNamespace(lr_grid=(0.01, 0.1, 1.0), tune_seed=7, tune_steps=3)
    score = {0.01: 0.5, 0.1: 0.8, 1.0: None}  # 1.0 diverges

    def fit(cfg, data, name, seed, lr, steps, log):
        assert seed == 7 and steps == 3
        if score[lr] is None:
            raise FloatingPointError
        return {"acc": score[lr]}

    monkeypatch.setattr(MB, "accuracies", lambda cfg, model, x, ys: {"a": model["acc"], "b": model["acc"]})
    out = MB.tune_lrs(cfg, {"x_val": None, "ya_val": None, "yb_val": None}, ["ls"], fit)
    assert out["ls"]["tuned_lr"] == 0.1 and out["ls"]["val_acc_a"] == 0.8

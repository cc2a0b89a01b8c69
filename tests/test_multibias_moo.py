"""multibias_moo (ICML 2024): the official MOO weight update and GroupDRO against closed forms, the group
losses and accuracies on hand examples, and a tiny prepare -> train -> compress -> evaluate -> derive run."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from paperflow.papers import multibias_moo as mb
from paperflow.spec import ConfigError, Resources


def test_groupdro_moves_weight_to_worst_group_on_simplex():
    q = torch.full((4,), 0.25)
    L = torch.tensor([0.1, 2.0, 0.5, 0.3])
    new = mb.groupdro_step(q, L, eta=0.5)
    expected = torch.exp(0.5 * L) / torch.exp(0.5 * L).sum()  # q exp(eta L) / Z from uniform
    torch.testing.assert_close(new, expected)
    assert float(new.sum()) == pytest.approx(1.0) and bool((new > 0).all())
    assert int(new.argmax()) == 1 and float(new[1]) > 0.25
    for _ in range(200):  # repeated steps concentrate on the worst group
        new = mb.groupdro_step(new, L, eta=0.5)
    assert float(new[1]) > 0.99 and float(new.sum()) == pytest.approx(1.0)


def test_moo_weight_step_matches_closed_form_gradient():
    gen = torch.Generator().manual_seed(0)
    alpha = torch.randn(4, generator=gen, dtype=torch.float64)
    L = torch.rand(4, generator=gen, dtype=torch.float64)
    G = torch.randn(4, 9, generator=gen, dtype=torch.float64)
    lam, lr = 0.7, 0.05
    new_alpha, new_lam = mb.moo_weight_step(alpha, lam, L, G, lr)
    w = torch.softmax(alpha, 0)
    d = w @ G
    dF_dw = L + 2 * lam * (G @ d)  # d/dw [w.L + lam ||G^T w||^2]
    dF_dalpha = w * (dF_dw - (w * dF_dw).sum())  # softmax Jacobian
    torch.testing.assert_close(new_alpha, alpha - lr * dF_dalpha)
    assert new_lam == pytest.approx(lam + lr * float(d @ d))  # ascent on the multiplier
    assert float(torch.softmax(new_alpha, 0).sum()) == pytest.approx(1.0)


def test_moo_weight_step_directions():
    # lambda = 0: the official descent step lowers the weight of the group whose loss is above the mean
    L = torch.tensor([0.2, 0.2, 0.2, 1.0], dtype=torch.float64)
    G = torch.zeros(4, 3, dtype=torch.float64)
    a, lam = mb.moo_weight_step(torch.zeros(4, dtype=torch.float64), 0.0, L, G, 1.0)
    w = torch.softmax(a, 0)
    assert float(w[3]) < 0.25 and lam == 0.0
    # large lambda: the step lowers ||sum_i w_i g_i|| (toward the Pareto-stationary min-norm combination)
    G = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 3.0], [0.0, -1.0]], dtype=torch.float64)
    alpha = torch.zeros(4, dtype=torch.float64)
    before = float((torch.softmax(alpha, 0) @ G).norm())
    for _ in range(50):
        alpha, _ = mb.moo_weight_step(alpha, 10.0, torch.zeros(4, dtype=torch.float64), G, 0.05)
    assert float((torch.softmax(alpha, 0) @ G).norm()) < 0.2 * before


def test_type_losses_average_classes_hand_example():
    per = torch.tensor([1.0, 3.0, 2.0, 4.0, 10.0])
    y = torch.tensor([0, 0, 1, 1, 2])
    gt = torch.tensor([0, 0, 0, 3, 3])
    out = mb.type_losses(per, y, gt)
    # type 0: classes 0 (mean 2) and 1 (mean 2) -> 2; type 3: classes 1 (4) and 2 (10) -> 7; types 1, 2 empty -> 0
    torch.testing.assert_close(out, torch.tensor([2.0, 0.0, 0.0, 7.0]), atol=1e-6, rtol=1e-6)


def test_group_accuracies_hand_example():
    class Fixed(torch.nn.Module):
        def __init__(self, pred):
            super().__init__()
            self.pred = pred

        def forward(self, x):
            return torch.nn.functional.one_hot(self.pred[: x.shape[0]], 10).float()

    y = torch.tensor([0, 0, 1, 1, 0, 1])
    gt = torch.tensor([0, 0, 0, 0, 3, 3])
    pred = torch.tensor([0, 1, 1, 1, 5, 1])  # type 0: class 0 50%, class 1 100%; type 3: class 0 0%, class 1 100%
    acc = mb.group_accuracies(mb.Config(eval_batch=10), Fixed(pred), torch.zeros(6, 3, 2, 2, dtype=torch.uint8), y, gt)
    assert acc["acc_gg"] == pytest.approx(75.0) and acc["acc_cc"] == pytest.approx(50.0)
    assert acc["worst_acc"] == pytest.approx(50.0)
    assert acc["unbiased_acc"] == pytest.approx(62.5) and acc["avg_acc"] == pytest.approx(400 / 6)


def test_config_and_comparisons():
    with pytest.raises(ConfigError, match="compare_level"):
        mb.Config(compare_level=0.3)
    with pytest.raises(ConfigError, match="lr_grid"):
        mb.Config(lr_grid=(1e-2, 1e-3))
    cfg = mb.SPEC.make_config({"sparsities": [0.5, 0.8], "hidden": [16]})
    assert cfg.hidden == (16,)
    rows = mb.comparisons(cfg)
    assert sum(r.role == "headline" for r in rows) == 1 and rows[0].baseline == mb.BEST
    assert {g.variant for g in rows[0].gates} == {"erm", "moo", mb.BEST}


def test_best_baseline_uses_validation():
    rows = [{"variant": v, "seed": s, "dense/worst_acc": 10.0 * i + s, "dense/val_worst_acc": val}
            for s in (0, 1) for i, (v, val) in enumerate([("erm", 20.0), ("gdro", 45.0), ("gdro_color", 40.0), ("moo", 50.0)])]
    assert mb.best_baseline(rows) == "gdro"
    out = mb.derive(mb.Config(), rows)
    best = [r for r in out if r["variant"] == mb.BEST]
    assert [r["dense/worst_acc"] for r in best] == [10.0, 11.0]  # gdro's test values per seed


def test_end_to_end_through_spec(tmp_path):
    rng = np.random.default_rng(0)
    y_tr, y_te = rng.integers(0, 10, 600), rng.integers(0, 10, 200)

    def images(labels):
        x = rng.integers(0, 40, (len(labels), 28, 28)).astype(np.uint8)
        for i, c in enumerate(labels):
            x[i, 8 + c : 12 + c, 8:20] = 230
        return x

    np.savez(tmp_path / "f.npz", x_train=images(y_tr), y_train=y_tr, x_test=images(y_te), y_test=y_te)
    res = Resources(root=str(tmp_path), paths={"fashion_mnist": str(tmp_path / "f.npz")})
    spec = mb.SPEC
    cfg = spec.make_config({"n_train": 500, "fashion_val": 100, "n_test": 200, "hidden": [16], "steps": 6, "tune_steps": 3,
                            "batch_size": 32, "eval_every": 3, "alpha_step": 2, "lr_grid": [1e-3, 3e-3, 1e-2]})
    data = spec.prepare(cfg, res)
    assert data["x_train"].shape == (500, 3, 14, 14) and data["x_train"].dtype == torch.uint8
    assert set(data["tuning"]) == set(spec.variants)
    rows = []
    for v in spec.variants:
        model = spec.train(cfg, data, v, 0, lambda step, **m: None)
        row = {"variant": v, "seed": 0, **{f"dense/{k}": x for k, x in spec.evaluate(cfg, model, data).items()}}
        for lv, comp in spec.compress(cfg, model, data, v, 0).items():
            w = comp["state"]["0.weight"]
            assert float((w == 0).float().mean()) >= float(lv) - 0.05 or lv == "0.50"
            row.update({f"compressed:{lv}/{k}": x for k, x in spec.evaluate(cfg, comp, data).items()})
        rows.append(row)
    assert all(math.isfinite(r["dense/worst_acc"]) and r["dense/worst_acc"] <= r["dense/unbiased_acc"] + 1e-9 for r in rows)
    assert "dense/moo_w_cc" in rows[0] and rows[0]["dense/moo_lambda"] >= 0
    out = spec.derive(cfg, rows)
    assert sum(r["variant"] == mb.BEST for r in out) == 1
    a = spec.train(cfg, data, "moo", 1, lambda step, **m: None)
    b = spec.train(cfg, data, "moo", 1, lambda step, **m: None)
    assert all(torch.equal(a["state"][k], b["state"][k]) for k in a["state"])

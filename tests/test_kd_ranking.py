"""KD ranking (ICML 2024, Fan et al.): 15-bin ECE by hand, ListMLE order/temperature invariance vs KL,
Hinton KD with T^2 by hand, and a tiny prepare -> train -> compress -> evaluate -> derive on synthetic data."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from paperflow.papers import kd_ranking as P
from paperflow.spec import ConfigError, Resources


# ---------------------------------------------------------------------------------------------- ECE


def test_ece_all_confident_correct_is_zero():
    probs = torch.eye(4)[[0, 1, 2, 3, 0]]
    assert P.expected_calibration_error(probs, torch.tensor([0, 1, 2, 3, 0]), 15) == 0.0


def test_ece_two_bin_hand_example():
    # bins (0, .5], (.5, 1]; conf 0.9 x2 (1 right, 1 wrong) -> |0.5 - 0.9| ; conf 0.4 x2 both right -> |1 - 0.4|
    probs = torch.tensor([[0.9, 0.1, 0.0], [0.9, 0.1, 0.0], [0.4, 0.3, 0.3], [0.4, 0.35, 0.25]])
    y = torch.tensor([0, 1, 0, 0])
    assert P.expected_calibration_error(probs, y, 2) == pytest.approx(0.5 * 0.4 + 0.5 * 0.6)
    # with 15 bins 0.9 -> bin (13/15, 14/15], 0.4 -> bin (5/15, 6/15]: same groups, same value
    assert P.expected_calibration_error(probs, y, 15) == pytest.approx(0.5)
    # a confidence exactly on an edge belongs to the lower bin: 0.5 in (0, .5]
    probs2 = torch.tensor([[0.5, 0.5], [1.0, 0.0]])
    assert P.expected_calibration_error(probs2, torch.tensor([1, 0]), 2) == pytest.approx(0.5 * 0.5 + 0.5 * 0.0)


# ---------------------------------------------------------------------------------------------- losses


def test_listmle_minimal_at_teacher_order_and_zero_in_the_limit():
    teacher = torch.tensor([[3.0, -1.0, 0.5, 2.0, -2.0]])
    values = torch.tensor([2.0, 1.1, 0.3, -0.4, -1.5])  # descending student scores
    order = torch.argsort(teacher[0], descending=True)
    matched = torch.empty(5)
    matched[order] = values  # student ranks classes as the teacher does
    best = float(P.listmle_loss(matched[None], teacher))
    for perm in itertools.permutations(range(5)):
        other = values[list(perm)][None]
        assert float(P.listmle_loss(other, teacher)) >= best - 1e-6  # the PL mode is the sorted order
    assert float(P.listmle_loss(100 * matched[None], teacher)) < 1e-10  # -> 0 as the margins grow
    # hand value for K = 2: log(e^a + e^b) - a (+ the last term, 0)
    s, t = torch.tensor([[0.2, 1.0]]), torch.tensor([[5.0, 1.0]])
    assert float(P.listmle_loss(s, t)) == pytest.approx(math.log(math.exp(0.2) + math.exp(1.0)) - 0.2)


def test_listmle_is_invariant_to_teacher_temperature_but_kl_is_not():
    g = torch.Generator().manual_seed(0)
    s, t = torch.randn(8, 10, generator=g), 3 * torch.randn(8, 10, generator=g)
    rank = P.listmle_loss(s, t)
    for tau in (0.1, 0.5, 2.0, 10.0):
        torch.testing.assert_close(P.listmle_loss(s, t / tau), rank)  # temperature scaling of the teacher
    torch.testing.assert_close(P.listmle_loss(s, torch.exp(t) + 7.0), rank)  # any increasing map
    kl = P.kd_kl_loss(s, t, 4.0)
    assert abs(float(P.kd_kl_loss(s, t / 3.0, 4.0)) - float(kl)) > 1e-3  # KL sees teacher calibration
    torch.testing.assert_close(P.listmle_loss(s, t, topk=3),
                               (torch.logcumsumexp(s.gather(1, t.argsort(1, descending=True)).flip(1), 1).flip(1)
                                - s.gather(1, t.argsort(1, descending=True)))[:, :3].sum(1).mean())


def test_kd_kl_hand_case_with_t_squared():
    T = 4.0
    teacher = T * torch.log(torch.tensor([[2.0, 1.0, 1.0]]))  # softmax(t / T) = (1/2, 1/4, 1/4)
    student = torch.zeros(1, 3)  # uniform
    expected = T * T * (0.5 * math.log(0.5 / (1 / 3)) + 2 * 0.25 * math.log(0.25 / (1 / 3)))
    assert float(P.kd_kl_loss(student, teacher, T)) == pytest.approx(expected, rel=1e-6)
    assert float(P.kd_kl_loss(teacher, teacher, T)) == pytest.approx(0.0, abs=1e-7)


def test_pearson():
    assert P.pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert P.pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(P.pearson([1, 1, 1], [1, 2, 3]))


# ---------------------------------------------------------------------------------------------- config


def test_config_validation_and_comparisons():
    with pytest.raises(ConfigError, match="teacher_widths"):
        P.Config(teacher_widths=(64,))
    with pytest.raises(ConfigError, match="teacher_widths"):
        P.Config(teacher_widths=(64, 32))
    with pytest.raises(ConfigError, match="alpha"):
        P.Config(alpha=1.5)
    with pytest.raises(ConfigError, match="unknown key"):
        P.SPEC.make_config({"nope": 1})
    cfg = P.SPEC.make_config({"teacher_widths": [8, 16, 32]})
    assert cfg.teacher_widths == (8, 16, 32) and cfg.teacher_names == ("w8", "w16", "w32")
    with pytest.raises(ConfigError, match="prune_level"):
        P.Config(sparsities=(0.5, 0.8), prune_level=0.7)
    comps = P.comparisons(cfg)
    cols = [(c.method, c.baseline, c.column) for c in comps]
    assert cols[0] == ("kd|rank", "kd|kl", "compressed:w32/acc") and ("kd|rank", "kd|kl", "compressed:w32/drop") in cols
    head = comps[0]
    assert head.role == "headline" and head.refuted_if and [g.kind for g in head.gates] == ["mechanism", "mechanism"]
    assert head.gates[0].column == "dense/ece_gap" and head.gates[0].above == P.ECE_GAP_MIN
    assert head.gates[1].comparison.column == "dense/student_acc_largest"
    assert (head.gates[1].comparison.method, head.gates[1].comparison.baseline) == ("kd|rank", "kd|none")
    drop = next(c for c in comps if c.metric == "drop")
    assert drop.role == "secondary" and drop.gates[0].comparison.column == "compressed:w32/drop"


# ---------------------------------------------------------------------------------------------- end to end


def _synthetic_resources(tmp_path):
    rng = np.random.default_rng(0)

    def images(labels):
        x = rng.integers(0, 60, (len(labels), 28, 28)).astype(np.uint8)
        for i, y in enumerate(labels):
            x[i, 2 * y : 2 * y + 6, 4:10] = 250
        return x

    ytr, yte = rng.integers(0, 10, 200), rng.integers(0, 10, 100)
    np.savez(tmp_path / "f.npz", x_train=images(ytr), y_train=ytr, x_test=images(yte), y_test=yte)
    return Resources(root=str(tmp_path), paths={"fashion_mnist": str(tmp_path / "f.npz")})


def test_end_to_end_through_spec(tmp_path):
    spec = P.SPEC
    cfg = spec.make_config({"n_train": 140, "n_val": 20, "n_test": 80, "teacher_widths": [8, 24], "teacher_steps": 6,
                            "student_hidden": [4], "student_steps": 5, "batch_size": 32, "log_every": 2})
    data = spec.prepare(cfg, _synthetic_resources(tmp_path))
    assert data["x_train"].dtype == torch.uint8 and data["x_train"].shape[0] == 140 and data["x_val"].shape[0] == 20
    assert spec.variants == ("kd",)
    logged = []
    model = spec.train(cfg, data, "kd", 0, lambda step, **m: logged.append((step, m)))
    keys = {k for _, m in logged for k in m}
    assert {"train/loss", "student_kl/loss", "student_rank/loss", "student_none/loss"} <= keys
    again = spec.train(cfg, data, "kd", 0, None)  # deterministic given the seed
    other = spec.train(cfg, data, "kd", 1, None)  # the teachers vary with the seed
    for k, t in model["teachers"]["w24"]["state"].items():
        assert torch.equal(t, again["teachers"]["w24"]["state"][k])
    assert any(not torch.equal(t, other["teachers"]["w24"]["state"][k]) for k, t in model["teachers"]["w24"]["state"].items())
    for k, t in model["students"]["kl"]["w8"]["state"].items():
        assert torch.equal(t, again["students"]["kl"]["w8"]["state"][k])
    torch.save(model, tmp_path / "m.pt")
    model = torch.load(tmp_path / "m.pt", weights_only=True)
    levels = spec.compress(cfg, model, data, "kd", 0)
    assert set(levels) == {f"{loss}_{lv}" for loss in P.LOSSES for lv in ("w8", "w24", "pruned0.50", "pruned0.80")}
    dense = spec.evaluate(cfg, model, data)
    assert {"acc", "ece", "params", "acc_w8", "ece_w24", "params_w24"} <= set(dense)
    assert dense["params"] == dense["params_w24"] > dense["params_w8"]
    row = {"paper": "kd_ranking", "variant": "kd", "seed": 0, **{f"dense/{k}": v for k, v in dense.items()}}
    for name, lv in levels.items():
        m = spec.evaluate(cfg, lv, data)
        assert 0 <= m["acc"] <= 100 and 0 <= m["ece"] <= 1 and 0 <= m["val_acc"] <= 100 and m["params"] < dense["params_w8"]
        row.update({f"compressed:{name}/{k}": v for k, v in m.items()})
    n_student = row["compressed:kl_w24/params"]
    assert row["compressed:kl_pruned0.50/params"] <= n_student - 0.5 * (4 * 784 + 10 * 4) + 1  # half the weights gone
    # same init and batches: the student without a teacher is the same at every level
    assert row["compressed:none_w8/acc"] == row["compressed:none_w24/acc"]
    out = {r["variant"]: r for r in spec.derive(cfg, [row])}
    for loss in P.LOSSES:
        r = out[f"kd|{loss}"]
        accs = [r["compressed:w8/acc"], r["compressed:w24/acc"]]
        vals = [r["compressed:w8/val_acc"], r["compressed:w24/val_acc"]]
        best = 1 if vals[1] > vals[0] else 0  # validation picks the teacher, ties to the smaller one
        assert r["dense/best_teacher"] == best
        assert r["compressed:w24/drop"] == pytest.approx(accs[best] - accs[1])
        assert r["compressed:w24/teacher_ece"] == dense["ece_w24"]
        assert r["compressed:pruned0.50/acc"] == row[f"compressed:{loss}_pruned0.50/acc"]
    assert out["kd|none"]["compressed:w24/drop"] == 0.0  # one student for every teacher
    for loss in P.LOSSES:  # width-independent mechanism columns
        assert out[f"kd|{loss}"]["dense/student_acc_largest"] == row[f"compressed:{loss}_w24/acc"]
        assert out[f"kd|{loss}"]["dense/ece_gap"] == pytest.approx(dense["ece_w24"] - dense["ece_w8"])
    assert "dense/corr_acc_ece" not in out["kd|none"]  # none: constant accuracy, no correlation
    for c in spec.comparisons(cfg):
        assert c.column in out[c.method] and c.column in out[c.baseline], c.text
        for g in c.gates:
            cols = [g.comparison.column] if g.comparison is not None else [g.column]
            assert all(col in out[g.comparison.method if g.comparison is not None else g.variant] for col in cols), g.text

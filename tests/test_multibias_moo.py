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


def test_moo_weight_step_matches_the_official_autograd_step():
    """The official code differentiates F = softmax(alpha).L + lam ||G^T softmax(alpha)||^2 by autograd and takes an
    SGD step on alpha, an ascent step on lambda; the closed form (Gram matrix) must give the same step."""
    gen = torch.Generator().manual_seed(0)
    alpha = torch.randn(4, generator=gen, dtype=torch.float64)
    L = torch.rand(4, generator=gen, dtype=torch.float64)
    G = torch.randn(4, 9, generator=gen, dtype=torch.float64)
    lam, lr = 0.7, 0.05
    new_alpha, new_lam = mb.moo_weight_step(alpha, lam, L, G, lr)
    a = alpha.clone().requires_grad_(True)
    w = torch.softmax(a, 0)
    norm2 = (w @ G).pow(2).sum()
    (grad,) = torch.autograd.grad((w * L).sum() + lam * norm2, a)
    torch.testing.assert_close(new_alpha, alpha - lr * grad)
    assert new_lam == pytest.approx(lam + lr * float(norm2.detach()))  # ascent on the multiplier
    assert float(torch.softmax(new_alpha, 0).sum()) == pytest.approx(1.0)


def test_per_type_gradients_in_one_pass_equal_separate_autograd():
    torch.manual_seed(0)
    net = mb.build_mlp(12, (7, 5)).double()
    x = torch.rand(40, 12, dtype=torch.float64)
    y = torch.randint(0, 10, (40,))
    g = torch.randint(0, 3, (40,))  # type 3 ("cc") absent from the batch: zero loss, zero gradient
    losses, G = mb.type_losses_and_grads(net, x, y, g)
    ref = mb.type_losses(torch.nn.functional.cross_entropy(net(x), y, reduction="none"), y, g)
    params = list(net.parameters())
    rows = []
    for t in range(4):
        grads = torch.autograd.grad(ref[t], params, retain_graph=True, allow_unused=True)
        rows.append(torch.cat([(d if d is not None else torch.zeros_like(p)).reshape(-1) for d, p in zip(grads, params)]))
    torch.testing.assert_close(losses, ref.detach())
    torch.testing.assert_close(G, torch.stack(rows), atol=1e-12, rtol=1e-9)
    assert float(G[3].abs().max()) == 0.0 and float(losses[3]) == 0.0


def test_with_gradient_writes_the_given_direction():
    net = mb.build_mlp(3, (2,))
    params = list(net.parameters())
    direction = torch.arange(sum(p.numel() for p in params), dtype=torch.float32)
    out = mb.with_gradient(torch.tensor(2.5), params, direction)
    out.backward()
    assert float(out.detach()) == 2.5
    assert torch.equal(torch.cat([p.grad.reshape(-1) for p in params]), direction)


def test_weight_tv_and_the_kept_checkpoint_average():
    assert mb.weight_tv(torch.tensor([0.4, 0.2, 0.2, 0.2])) == pytest.approx(0.15)  # 1/2 (0.15 + 3 x 0.05)
    assert mb.weight_tv(torch.full((4,), 0.25)) == 0.0
    state = mb.MOOWeights(4, alpha_lr=0.0, alpha_step=1)
    state.tv = [0.0, 0.1, 0.2, 0.3]
    out = state.summary(kept_step=2)
    assert out["moo_weight_tv"] == pytest.approx(0.05) and out["moo_weight_tv_all"] == pytest.approx(0.15)
    assert out["moo_weight_tv_end"] == 0.0 and out["moo_w_gg"] == pytest.approx(0.25)


def test_alpha_lr_zero_keeps_uniform_weights():
    state = mb.MOOWeights(4, alpha_lr=0.0, alpha_step=1)
    state.update(torch.tensor([0.1, 2.0, 0.5, 0.3]), torch.randn(4, 6))
    torch.testing.assert_close(state.weights(), torch.full((4,), 0.25))


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
    (moved,) = rows[0].mechanism_gates
    assert (moved.variant, moved.metric, moved.above) == ("moo", "moo_weight_tv", mb.TV_MIN) and rows[0].refuted_if
    ablation = [r for r in rows if r.baseline == mb.ABLATION]
    assert len(ablation) == 1 and ablation[0].role == "secondary" and ablation[0].method == "moo"


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
    assert "dense/moo_w_cc" in rows[0] and rows[0]["dense/moo_lambda"] >= 0 and rows[0]["dense/moo_weight_tv"] >= 0
    fixed = rows[spec.variants.index(mb.ABLATION)]
    assert fixed["dense/moo_weight_tv_all"] == 0.0 and fixed["dense/moo_lambda"] == 0.0
    assert data["tuning"][mb.ABLATION] == data["tuning"][mb.METHOD]  # the ablation takes MOO's tuned lr
    out = spec.derive(cfg, rows)
    assert sum(r["variant"] == mb.BEST for r in out) == 1
    a = spec.train(cfg, data, "moo", 1, lambda step, **m: None)
    b = spec.train(cfg, data, "moo", 1, lambda step, **m: None)
    assert all(torch.equal(a["state"][k], b["state"][k]) for k in a["state"])


def test_the_ablation_is_the_method_in_the_limit_of_no_weight_learning(tmp_path):
    """MOO with a vanishing alpha_lr trains the same model as moo_fixed (alpha_lr = 0): the one-pass per-type
    gradients and the given-gradient model step reproduce the plain backward of the uniformly weighted loss."""
    gen = torch.Generator().manual_seed(0)
    n = 300
    data = {"x_train": torch.randint(0, 255, (n, 3, 4, 4), dtype=torch.uint8), "y_train": torch.randint(0, 10, (n,), generator=gen),
            "group_type_train": torch.randint(0, 4, (n,), generator=gen), "color_train": torch.randint(0, 10, (n,), generator=gen)}
    data["class_group_train"] = 4 * data["y_train"] + data["group_type_train"]
    for k in ("x", "y", "group_type"):
        data[f"{k}_val"] = data[f"{k}_train"][:50]
    cfg = mb.Config(hidden=(8,), batch_size=32, alpha_lr=1e-12, eval_every=5, tune_steps=1)
    a = mb.fit_model(cfg, data, "moo", 0, 1e-2, 10, None)
    b = mb.fit_model(cfg, data, "moo_fixed", 0, 1e-2, 10, None)
    for k in a["state"]:
        torch.testing.assert_close(a["state"][k], b["state"][k], atol=1e-5, rtol=1e-4)
    assert a["final"]["moo_weight_tv_all"] < 1e-9 and a["final"]["moo_lambda"] > 0

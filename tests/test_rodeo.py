"""rodeo (ICML 2024): PGD against the closed-form optimum of a linear score over the eps-ball and the [0, 1] box, AUROC
against a brute-force pair count, the anomaly scores on hand examples, the outlier generators' properties, the lr
schedule, and a tiny prepare -> train -> compress -> evaluate run through the spec (test sets never read by tuning)."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from paperflow.papers import rodeo
from paperflow.spec import ConfigError, Resources
from synthetic_images import fake_fashion


@pytest.mark.parametrize("direction", [1.0, -1.0])
def test_pgd_reaches_the_closed_form_optimum_of_a_linear_score(direction):
    """max_{|d|_inf <= eps, x0 + d in [0,1]} direction * (w . (x0 + d) + b) is attained at clip(x0 + eps sign(direction w), 0, 1)
    (the problem separates per coordinate); PGD with alpha * steps >= 2 eps reaches it from any random start."""
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(5, 28, 28, generator=gen)
    x0 = torch.rand(5, 28, 28, generator=gen)
    x0[:, :3] = 0.0  # on the box's edge: the clip binds
    x0[:, 3:6] = 1.0
    eps, steps = 0.05, 3
    alpha = 2.5 * eps / steps

    def objective(xa):
        return direction * ((w * xa).sum() + 1.0)

    xa = rodeo.pgd(objective, x0, eps, alpha, steps, gen)
    best = (x0 + eps * torch.sign(direction * w)).clamp(0, 1)
    assert (xa - x0).abs().max() <= eps + 1e-6 and xa.min() >= 0 and xa.max() <= 1
    assert torch.allclose(xa, best, atol=1e-6)
    assert float(objective(xa)) > float(objective(x0))
    # no random point of the feasible set does better
    for _ in range(20):
        d = (torch.rand(x0.shape, generator=gen) * 2 - 1) * eps
        assert float(objective((x0 + d).clamp(0, 1))) <= float(objective(xa)) + 1e-4


def test_pgd_stays_in_the_ball_on_a_network_and_increases_the_score():
    torch.manual_seed(0)
    det = rodeo.Detector((4, 8), 16, 4)
    gen = torch.Generator().manual_seed(1)
    x = torch.rand(16, 28, 28, generator=gen)
    eps = 8 / 255
    with torch.no_grad():
        before = rodeo.anomaly_score(det(x), True).sum()
    xa = rodeo.pgd(lambda z: rodeo.anomaly_score(det(z), True).sum(), x, eps, 2.5 * eps / 5, 5, gen)
    assert (xa - x).abs().max() <= eps + 1e-6 and 0 <= xa.min() and xa.max() <= 1
    with torch.no_grad():
        assert float(rodeo.anomaly_score(det(xa), True).sum()) > float(before)
    assert all(p.grad is None for p in det.parameters())  # the attack leaves the model's gradients alone


def test_auroc_matches_the_brute_force_pair_count():
    rng = np.random.default_rng(0)
    a = np.round(rng.normal(size=37), 1)  # rounding makes ties
    b = np.round(rng.normal(0.7, 1, size=23), 1)
    pairs = [(1.0 if o > i else 0.5 if o == i else 0.0) for i, o in itertools.product(a, b)]
    assert rodeo.auroc(a, b) == pytest.approx(np.mean(pairs), abs=1e-12)
    assert rodeo.auroc(np.array([0.0, 1.0]), np.array([2.0, 3.0])) == 1.0
    assert rodeo.auroc(np.array([2.0, 3.0]), np.array([0.0, 1.0])) == 0.0
    assert rodeo.auroc(np.array([1.0, 1.0]), np.array([1.0])) == 0.5


def test_anomaly_scores_by_hand():
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 3.0]])
    lse = [math.log(math.exp(2) + 2), math.log(2 + math.exp(3))]
    oe = rodeo.anomaly_score(logits, True)  # log p of the last (outlier) class
    assert oe.tolist() == pytest.approx([0 - lse[0], 3 - lse[1]])
    msp = rodeo.anomaly_score(logits, False)  # - max log p
    assert msp.tolist() == pytest.approx([-(2 - lse[0]), -(3 - lse[1])])


def test_adaptive_generator_is_near_diverse_and_breaks_the_image():
    gen = torch.Generator().manual_seed(0)
    n = 600
    y = torch.arange(n) % 6
    x = torch.rand(n, 28, 28, generator=gen) * 0.5 + 0.25  # no background: every transform changes the image
    out, kind = rodeo.generate_adaptive(x, y, gen)
    assert out.shape == x.shape and out.min() >= 0 and out.max() <= 1
    assert set(kind.tolist()) == set(range(len(rodeo.TRANSFORMS)))  # every transform is used (diversity)
    changed = (out - x).abs().reshape(n, -1)
    assert bool((changed.max(1).values > 0.1).all())
    frac = (changed > 1e-6).float().mean(1)
    for k, name in enumerate(rodeo.TRANSFORMS):  # near: the local edits keep most of the image
        if name in ("hole", "scratch"):
            assert float(frac[kind == k].mean()) < 0.5, name
    # composites join two images of different classes: constant images valued by class show two values
    xc = (y.float()[:, None, None] + 1) / 10 * torch.ones(n, 28, 28)
    out_c, kind_c = rodeo.generate_adaptive(xc, y, torch.Generator().manual_seed(3))
    comp = torch.nonzero(kind_c == rodeo.TRANSFORMS.index("composite")).flatten()
    for i in comp.tolist():
        vals = torch.unique(torch.round(out_c[i] * 10))
        assert len(vals) == 2 and round(float(xc[i, 0, 0]) * 10) in vals.tolist()


def test_random_outliers_and_nearness():
    gen = torch.Generator().manual_seed(0)
    x = torch.zeros(200, 28, 28)
    x[:, 8:20, 8:20] = 1.0
    r = rodeo.generate_random(300, x, gen)
    assert r.shape == (300, 28, 28) and r.min() >= 0 and r.max() <= 1
    permuted = torch.nonzero((r.reshape(300, -1).sort(1).values == x[0].reshape(-1).sort().values).all(1)).flatten()
    assert permuted.numel() > 50  # a third are pixel permutations of pool images (same histogram)
    held = x[:50] + 0.01
    assert rodeo.nn_ratio(held, x, held, gen) == pytest.approx(1.0)
    assert rodeo.nn_ratio(r, x, held, gen) > 10


def test_lr_schedule_is_the_notebooks_piecewise_linear_one():
    steps, lr = 300, 1e-2
    assert rodeo.lr_schedule(99, steps, lr) == pytest.approx(lr / 10)
    assert rodeo.lr_schedule(199, steps, lr) == pytest.approx(lr / 100)
    assert rodeo.lr_schedule(299, steps, lr) == 0.0
    assert rodeo.lr_schedule(49, steps, lr) == pytest.approx((lr + lr / 10) / 2)


def test_exposure_augment_flips_and_shifts():
    gen = torch.Generator().manual_seed(0)
    x = torch.zeros(64, 28, 28)
    x[:, 10, 5] = 1.0
    out = rodeo.exposure_augment(x, 2, gen)
    pos = torch.nonzero(out == 1.0)
    assert pos.shape[0] == 64
    cols = pos[:, 2]
    assert set(cols.tolist()) <= set(range(3, 8)) | set(range(20, 25))  # col 5 (+-2) or flipped 22 (+-2)
    assert torch.equal(rodeo.exposure_augment(x, 0, torch.Generator().manual_seed(1)).sum((1, 2)), x.sum((1, 2)))


def test_config_rejects_bad_values():
    with pytest.raises(ConfigError):
        rodeo.SPEC.make_config({"eps": 0.0})
    with pytest.raises(ConfigError):
        rodeo.SPEC.make_config({"compare_level": 0.3})
    cfg = rodeo.SPEC.make_config({})
    heads = [c for c in rodeo.comparisons(cfg) if c.role == "headline"]
    assert len(heads) == 1 and heads[0].mechanism_gates


def _resources(tmp_path):
    rng = np.random.default_rng(0)

    yf, yt = rng.integers(0, 10, 900), rng.integers(0, 10, 400)
    fake_fashion(tmp_path / "f.npz", rng, yf, yt, top=4)
    np.savez(tmp_path / "m.npz", x=rng.integers(0, 255, (300, 28, 28)).astype(np.uint8), y=rng.integers(0, 10, 300))
    return Resources(root=str(tmp_path), paths={"fashion_mnist": str(tmp_path / "f.npz"), "mnist10k": str(tmp_path / "m.npz")})


TINY = {"n_train": 200, "n_val": 60, "n_test": 50, "channels": [2, 4], "hidden": 8, "steps": 3, "tune_steps": 2,
        "batch_size": 16, "lr_grid": [1e-3, 1e-2], "train_pgd_steps": 1, "attack_steps": 2, "eval_batch": 40}


def test_end_to_end_through_spec(tmp_path):
    res = _resources(tmp_path)
    spec = rodeo.SPEC
    cfg = spec.make_config(TINY)
    data = spec.prepare(cfg, res)
    assert set(data["tuning"]) == set(rodeo.VARIANTS)
    assert data["pool_gen"].dtype == torch.uint8 and data["pool_gen"].shape == (200, 28, 28)
    for v in spec.variants:
        model = spec.train(cfg, data, v, 0, lambda step, **m: None)
        m = spec.evaluate(cfg, model, data)
        for key in ("auroc", "adv_auroc", "auroc_near", "adv_auroc_far", "id_acc"):
            assert 0 <= m[key] <= 100, key
        assert m["attack_drop"] == pytest.approx(m["auroc"] - m["adv_auroc"])
        assert m["grid_edge"] == 1.0  # a 2-value grid has no inside
        assert ("outlier_nn_ratio" in m) == (v != "at")
        comp = spec.compress(cfg, model, data, v, 0)
        mats = [t for t in comp["0.50"]["state"].values() if t.dim() >= 2]
        assert sum(int((t == 0).sum()) for t in mats) >= 0.5 * sum(t.numel() for t in mats) - 1
        assert math.isfinite(spec.evaluate(cfg, comp["0.50"], data)["adv_auroc"])
    again = spec.train(cfg, data, "rodeo", 0, None)
    first = spec.train(cfg, data, "rodeo", 0, None)
    assert all(torch.equal(first["state"][k], again["state"][k]) for k in first["state"])


def test_tuning_and_training_data_do_not_depend_on_test_seed(tmp_path):
    res = _resources(tmp_path)
    a = rodeo.prepare(rodeo.SPEC.make_config(TINY), res)
    b = rodeo.prepare(rodeo.SPEC.make_config({**TINY, "test_seed": 5}), res)
    for key in ("x_train", "x_val", "pool_gen", "pool_random", "val_gen", "val_random"):
        assert torch.equal(a[key], b[key]), key
    assert a["tuning"] == b["tuning"]
    assert not torch.equal(a["x_near"], b["x_near"])


def test_attack_lowers_an_undefended_detectors_auroc(tmp_path):
    """The mechanism gate's quantity on a tiny case: a clean-trained detector loses AUROC under the attack."""
    res = _resources(tmp_path)
    cfg = rodeo.SPEC.make_config({**TINY, "steps": 60, "channels": [4, 8], "hidden": 16, "eps": 0.1, "attack_steps": 5})
    data = rodeo.prepare(cfg, res)
    model = rodeo.train(cfg, data, "oe_clean", 0, None)
    m = rodeo.evaluate(cfg, model, data)
    assert m["adv_auroc"] < m["auroc"] - 5

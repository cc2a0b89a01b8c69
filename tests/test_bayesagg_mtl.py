"""BayesAgg-MTL (ICML 2024): the training objective (value = summed losses, heads get summed-loss gradients, the
trunk gets the precision-weighted representation gradient), Delta-m% / best-baseline derive, config/spec, and a
tiny run through the spec. Posterior and moment math: test_mtl_extra.py."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from paperflow import mtl
from paperflow.papers import bayesagg_mtl as ba
from paperflow.spec import ConfigError

from test_excessmtl import synthetic_resources


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _tiny_cfg(**kw):
    base = dict(n_train=64, n_val=16, n_test=16, batch_size=16, steps=8, tune_steps=2, channels=(2, 4), hidden=6, mc_samples=16)
    return ba.Config(**{**base, **kw})


def test_objective_gradients_follow_bayesagg():
    cfg = _tiny_cfg()
    torch.manual_seed(0)
    model = ba.build_model({"channels": [2, 4], "hidden": 6, "image_size": 28, "tasks": ["a", "b"]})
    group = {"clip": 0.0}
    obj = ba.BayesAggObjective(cfg, model, seed=0, ls_steps=4, trunk_group=group)
    g = torch.Generator().manual_seed(0)
    batches = [(torch.rand(16, 1, 28, 28, generator=g), [torch.randint(0, 10, (16,), generator=g) for _ in range(2)]) for _ in range(5)]
    for b in batches[:4]:  # 4 LS warm-up steps collect the features (an epoch: 64 // 16 = 4 batches)
        obj(b)
    assert obj.prior is None and obj.mechanism()["bayesagg_steps"] == 0.0 and group["clip"] == 0.0
    xb, ys = batches[4]
    torch.manual_seed(1)
    obj.gen.manual_seed(5)
    model.zero_grad()
    out = obj((xb, ys))  # step 4: the full-data posteriors are built from the 4 buffered batches, then BayesAgg
    assert obj.prior is not None and len(obj.buffer) == 4 and obj.mechanism()["bayesagg_steps"] == 1.0
    assert group["clip"] == cfg.shared_clip  # the trunk is clipped from the end of the warm-up on (official trainer)
    with torch.no_grad():
        z = model.trunk(xb)
        losses = [F.cross_entropy(h(z), y) for h, y in zip(model.heads, ys)]
    assert float(out.detach()) == pytest.approx(float(sum(losses)), rel=1e-5)
    out.backward()
    # heads: gradient of the summed losses
    zd = z.detach()
    head_loss = sum(F.cross_entropy(h(zd), y) for h, y in zip(model.heads, ys))
    head_grads = torch.autograd.grad(head_loss, [model.heads[0].weight, model.heads[1].bias])
    torch.testing.assert_close(model.heads[0].weight.grad, head_grads[0])
    torch.testing.assert_close(model.heads[1].bias.grad, head_grads[1])
    # trunk: J^T d with d recomputed from the same posterior and MC stream
    obj.gen.manual_seed(5)
    mus, vs = [], []
    for k, y in enumerate(ys):
        mean, L = mtl.laplace_multiclass_posterior(zd.double(), y, obj.head_theta(k), *obj.prior[k])
        mu, var = mtl.mc_grad_moments_multiclass(zd.double(), y, mean, L, cfg.mc_samples, obj.gen)
        mus.append(mu)
        vs.append(var)
    d = mtl.bayesagg_aggregate(torch.stack(mus), torch.stack(vs), cfg.sqrt_power).float()
    zz = model.trunk(xb)
    (expected,) = torch.autograd.grad((zz * d).sum(), [model.trunk.fc.weight])
    torch.testing.assert_close(model.trunk.fc.weight.grad, expected, rtol=1e-4, atol=1e-6)


def test_derive_delta_m_and_best_baseline_on_validation():
    stl = {"variant": "stl", "dense/acc_a": 100.0, "dense/acc_b": 80.0, "dense/val_acc_a": 90.0, "dense/val_acc_b": 80.0,
           "compressed:0.50/acc_a": 50.0, "compressed:0.50/acc_b": 40.0}
    val = {"bayesagg": (90.0, 80.0), "ls": (81.0, 80.0), "mgda": (90.0, 76.0), "nashmtl": (72.0, 88.0)}  # val dm: 5, 2.5, 5
    rows = [{**stl, "seed": s} for s in (0, 1)]
    rows += [{"variant": v, "seed": s, "dense/acc_a": 90.0, "dense/acc_b": 80.0, "compressed:0.50/acc_a": 50.0,
              "compressed:0.50/acc_b": 44.0, "dense/val_acc_a": a, "dense/val_acc_b": b} for s in (0, 1) for v, (a, b) in val.items()]
    assert ba.best_baseline(rows) == "mgda"
    out = ba.derive(ba.Config(), rows)
    ls0 = next(r for r in out if r["variant"] == "ls" and r["seed"] == 0)
    assert ls0["dense/delta_m"] == pytest.approx(5.0) and ls0["compressed:0.50/delta_m"] == pytest.approx(-5.0)
    best = [r for r in out if r["variant"] == ba.BEST]
    assert [r["seed"] for r in best] == [0, 1] and all(r["dense/best_baseline"] == 1.0 for r in best)
    assert ba.best_baseline([r for r in rows if r["variant"] != "stl"]) is None


def test_config_and_rows():
    with pytest.raises(ConfigError, match="ls_fraction"):
        ba.Config(ls_fraction=0.0)
    with pytest.raises(ConfigError, match="activation"):
        ba.Config(activation="tanh")
    with pytest.raises(ConfigError, match="lr_grid"):
        ba.Config(lr_grid=(0.0, 0.1))
    rows = ba.comparisons(ba.SPEC.make_config({}))
    assert [(r.baseline, r.role) for r in rows] == [(ba.BEST, "headline"), ("ls", "secondary"), ("mgda", "secondary"),
                                                     ("nashmtl", "secondary"), ("ls", "control"), ("", "fact"), ("", "fact")]
    head = rows[0]
    (mech,) = head.mechanism_gates
    assert (mech.variant, mech.column, mech.above) == ("bayesagg", "dense/agg_weight_spread", ba.SPREAD_MIN) and head.refuted_if
    assert {g.variant for g in head.gates if g.kind == "grid_edge"} == {"bayesagg", ba.BEST}


def test_weight_stats_by_hand():
    """K=2, one example, D=2, p=0.1: var_a = (1, 1), var_b = (1, 2^10) -> Lambda_b = (1, 1/2), w_a = (1/2, 2/3),
    w_b = (1/2, 1/3): spread = mean(0, 1/3) = 1/6; mu_a = (1, 2), mu_b = (3, 4): d = (2, 8/3), uniform (2, 3),
    distance = (1/3) / sqrt(13)."""
    mu = torch.tensor([[[1.0, 2.0]], [[3.0, 4.0]]], dtype=torch.float64)
    var = torch.tensor([[[1.0, 1.0]], [[1.0, 2.0 ** 10]]], dtype=torch.float64)
    w = ba.aggregation_weights(var, 0.1)
    torch.testing.assert_close(w[:, 0], torch.tensor([[0.5, 2 / 3], [0.5, 1 / 3]], dtype=torch.float64))
    torch.testing.assert_close((w * mu).sum(0), mtl.bayesagg_aggregate(mu, var, 0.1))  # B = 1
    spread, dist = ba.weight_stats(mu, var, 0.1)
    assert spread == pytest.approx(1 / 6) and dist == pytest.approx((1 / 3) / math.sqrt(13))
    equal = ba.weight_stats(mu, torch.ones_like(var), 0.1)  # equal variances: BayesAgg is the plain mean
    assert equal == pytest.approx((0.0, 0.0))


def test_recipe_pieces():
    """Warm-up = ls_fraction of the steps; MultiStepLR at 60%/80%; ClipAdam clips each group at its own norm."""
    cfg = ba.Config()
    assert cfg.ls_steps(250) == 25 and cfg.ls_steps(12) == 1 and cfg.ls_steps(100) == 10
    sched = ba.lr_schedule(cfg, 1.0, 100)
    assert [sched(s) for s in (0, 59, 60, 79, 80, 99)] == pytest.approx([1, 1, 0.1, 0.1, 0.01, 0.01])
    a, b = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2))
    opt = ba.ClipAdam([{"params": [a], "clip": 1.0}, {"params": [b], "clip": 0.0}], lr=0.1)
    a.grad, b.grad = torch.tensor([3.0, 4.0]), torch.tensor([3.0, 4.0])
    opt.step()
    assert float(a.grad.norm()) == pytest.approx(1.0) and float(b.grad.norm()) == pytest.approx(5.0)


def test_end_to_end_through_spec(tmp_path):
    spec = ba.SPEC
    cfg = spec.make_config({"n_train": 64, "n_val": 32, "n_test": 48, "mnist_test": 200, "mnist_val": 100, "fashion_val": 100,
                            "steps": 6, "tune_steps": 5, "batch_size": 16, "channels": [2, 4], "hidden": 8, "mc_samples": 8})
    data = spec.prepare(cfg, synthetic_resources(tmp_path))
    assert set(data["tuning"]) == set(ba.TUNED)
    rows = []
    for variant in spec.variants:
        model = spec.train(cfg, data, variant, 0, lambda step, **m: None)
        row = {"variant": variant, "seed": 0, **{f"dense/{k}": v for k, v in spec.evaluate(cfg, model, data).items()}}
        for level, comp in spec.compress(cfg, model, data, variant, 0).items():
            row.update({f"compressed:{level}/{k}": v for k, v in spec.evaluate(cfg, comp, data).items()})
        rows.append(row)
    stl = rows[spec.variants.index("stl")]
    assert {"dense/acc_a", "dense/acc_b", "dense/val_acc_a", "dense/val_acc_b", "dense/grid_edge", "compressed:0.80/acc_b"} <= set(stl)
    agg = rows[spec.variants.index("bayesagg")]
    assert 0.0 <= agg["dense/agg_weight_spread"] <= 1.0 and agg["dense/bayesagg_steps"] == cfg.steps - cfg.ls_steps(cfg.steps)
    out = spec.derive(cfg, rows)
    assert sum(r["variant"] == ba.BEST for r in out) == 1
    for r in out:
        if r["variant"] in ba.MTL_VARIANTS:
            assert all(math.isfinite(r[f"{s}/delta_m"]) for s in ("dense", "compressed:0.50", "compressed:0.80"))

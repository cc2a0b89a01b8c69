"""Exp-SGDM (ICML 2024): the paper's optimizer inside the experiment (the optimizer itself is tested against
torch.optim.SGD and its expectation in tests/test_optim.py), the U[0, 2] ablation's draws, the identity behind the
mechanism (E_s[f(x + s Delta) - f(x)] = E_s[<grad f(x + s Delta), Delta>] for s ~ Exp(1), a ReLU hand case and a network
by quadrature), StepMeter's statistics on a hand case and its weights-unchanged guarantee, evaluation against direct
computation, and a tiny prepare -> train -> compress -> evaluate run through the spec on synthetic images."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from paperflow.data.images import to_float
from paperflow.optim import ExpSGDM
from paperflow.papers import exp_sgdm as es
from paperflow.contract import contract_problems
from paperflow.spec import ConfigError, Resources

TINY = {"n_train": 300, "n_val": 60, "n_test": 80, "n_train_eval": 100, "n_probe": 50, "steps": 6, "tune_steps": 3,
        "batch_size": 16, "lr_grid": [0.01, 0.03, 0.1], "mlp_hidden": 16, "cnn_channels": [4, 8], "probe_every": 3, "log_every": 3}


def _resources(tmp_path):
    rng = np.random.default_rng(0)

    def images(labels):  # class-dependent bright bar + noise
        x = rng.integers(0, 60, (len(labels), 28, 28)).astype(np.uint8)
        for i, y in enumerate(labels):
            x[i, 2 * y: 2 * y + 5, 3:20] = 250
        return x

    ytr, yte = rng.integers(0, 10, 400), rng.integers(0, 10, 120)
    np.savez(tmp_path / "f.npz", x_train=images(ytr), y_train=ytr, x_test=images(yte), y_test=yte)
    return Resources(root=str(tmp_path), paths={"fashion_mnist": str(tmp_path / "f.npz")})


def test_config_and_spec_load():
    cfg = es.SPEC.make_config({"lr_grid": [0.01, 0.1], "sparsities": [0.5, 0.9], "compare_level": 0.9})
    assert cfg.lr_grid == (0.01, 0.1)
    rows = es.comparisons(cfg)
    assert [r.role for r in rows].count("headline") == 1
    assert rows[0].kind == "close" and rows[0].margin == cfg.margin and rows[0].better == "lower" and rows[0].refuted_if
    mech = rows[0].mechanism_gates
    assert [(g.variant, g.metric, g.above) for g in mech if g.comparison is None] == [("sgdm", "lin_gap", cfg.min_lin_gap)]
    assert [(g.comparison.metric, g.comparison.method, g.comparison.baseline) for g in mech if g.comparison] == [
        ("fo_resid", "exp_sgdm", "sgdm")]
    assert {g.kind for g in rows[0].gates if g.metric == "grid_edge"} == {"grid_edge"}  # directional
    assert any(r.method == "exp_sgdm" and r.baseline == "unif_sgdm" and r.role == "secondary" for r in rows)
    assert contract_problems(es.SPEC, cfg) == []
    with pytest.raises(ConfigError, match="lr_grid"):
        es.Config(lr_grid=(0.1, 0.01))
    with pytest.raises(ConfigError, match="compare_level"):
        es.Config(compare_level=0.3)
    with pytest.raises(ConfigError, match="n_train"):
        es.Config(n_train=10, n_val=20)


def test_variants_use_the_papers_optimizer():
    cfg = es.Config()
    p = [torch.nn.Parameter(torch.zeros(2))]
    exp, plain = es.make_optimizer("exp_sgdm", p, 0.1, cfg, 0), es.make_optimizer("sgdm", p, 0.1, cfg, 0)
    assert isinstance(exp, ExpSGDM) and exp.scale == "exp" and plain.scale == 1.0
    assert exp.param_groups[0]["momentum"] == plain.param_groups[0]["momentum"] == cfg.momentum
    with pytest.raises(ValueError, match="variant"):
        es.make_optimizer("adam", p, 0.1, cfg, 0)


def test_uniform_ablation_draws_u02():
    opt = ExpSGDM([torch.nn.Parameter(torch.zeros(1))], lr=0.1, scale="uniform", seed=3)
    draws = torch.tensor([opt.draw() for _ in range(20000)], dtype=torch.float64)
    assert 0 <= float(draws.min()) and float(draws.max()) <= 2
    assert float(draws.mean()) == pytest.approx(1.0, abs=4 * math.sqrt(1 / 3 / 20000))  # U[0, 2]: mean 1, var 1/3
    assert float(draws.var()) == pytest.approx(1 / 3, rel=0.03)
    assert es.make_optimizer("unif_sgdm", [torch.nn.Parameter(torch.zeros(1))], 0.1, es.Config(), 0).scale == "uniform"
    with pytest.raises(ValueError, match="scale"):
        ExpSGDM([torch.nn.Parameter(torch.zeros(1))], lr=0.1, scale="gauss")


def _expect(h, law, top=60.0, n=600001):
    """E[h(s)] by the trapezoid rule on [0, top] (Exp(1)) or [0, 2] (U[0, 2])."""
    s = np.linspace(0, top if law == "exp" else 2.0, n)
    w = np.exp(-s) if law == "exp" else np.full_like(s, 0.5)
    return float(np.trapezoid(w * h(s), s))


def test_exponential_scaling_makes_the_first_order_model_unbiased_hand_case():
    """f = relu on a line, x = -0.5, Delta = 1 (the kink inside the step). SGDM (s = 1): f(0.5) - f(-0.5) = 0.5 but
    <f'(0.5), Delta> = 1, a first-order bias of 0.5. Exp(1): E[(s - 0.5)+] = e^-0.5 = P(s > 0.5) = E[<f'(x + s), Delta>].
    U[0, 2]: E[(s - 0.5)+] = 0.5625 but P(s > 0.5) = 0.75: only the exponential law removes the bias, wherever the kink."""
    df = lambda s: np.maximum(s - 0.5, 0.0)
    slope = lambda s: (s > 0.5).astype(float)
    assert df(np.array([1.0]))[0] - slope(np.array([1.0]))[0] == pytest.approx(-0.5)
    assert _expect(df, "exp") == pytest.approx(math.exp(-0.5), abs=1e-4)
    assert _expect(slope, "exp") == pytest.approx(math.exp(-0.5), abs=1e-4)
    assert _expect(df, "uniform") == pytest.approx(0.5625, abs=1e-4) and _expect(slope, "uniform") == pytest.approx(0.75, abs=1e-4)
    for x0 in (-0.1, -2.5, 0.7):  # any kink position along the step (0.7: no kink, f linear, trivially unbiased)
        assert _expect(lambda s: np.maximum(x0 + s, 0.0) - max(x0, 0.0), "exp") == pytest.approx(
            _expect(lambda s: (x0 + s > 0).astype(float), "exp"), abs=1e-4)


def test_identity_on_a_relu_network_by_quadrature():
    """The same identity for a ReLU MLP's cross-entropy along a random direction (Exp(1) weights on a grid of s),
    while the plain first-order model of a unit step is off: the mechanism the meter measures."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)).double()
    x, y = torch.randn(8, 6, dtype=torch.float64), torch.randint(0, 3, (8,))
    base = {k: v.detach() for k, v in net.named_parameters()}
    delta = {k: 0.5 * torch.randn_like(v) for k, v in base.items()}
    f0 = float(F.cross_entropy(torch.func.functional_call(net, base, (x,)), y))
    grid = np.linspace(0, 25, 501)
    df, slope = [], []
    for s in grid:
        ps = {k: (base[k] + float(s) * delta[k]).requires_grad_(True) for k in base}
        loss = F.cross_entropy(torch.func.functional_call(net, ps, (x,)), y)
        grads = torch.autograd.grad(loss, list(ps.values()))
        df.append(float(loss.detach()) - f0)
        slope.append(sum(float((g * delta[k]).sum()) for g, k in zip(grads, ps)))
    w = np.exp(-grid)
    e_df, e_slope = np.trapezoid(w * np.array(df), grid), np.trapezoid(w * np.array(slope), grid)
    assert e_df == pytest.approx(e_slope, rel=1e-2, abs=1e-6)
    assert abs(df[20] - slope[20]) > 0.05 * abs(df[20])  # s = 1: the unscaled step's first-order model is biased


class _Scalar(torch.nn.Module):
    def __init__(self, w0: float):
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([w0]))

    def forward(self, x):
        return self.w * x


def test_step_meter_hand_case():
    """f(w) = w^2 / 2, w0 = 1, lr 0.1, no momentum, fixed scale 2: w1 = 0.8. At step 1: df = 0.32 - 0.5 = -0.18,
    g1 = 0.8, x1 - x0 = -0.2, lin = -0.16, <g1, Delta> = -0.08; lin_gap = 0.02/0.18, fo_resid = 0.10/0.18."""
    model = _Scalar(1.0)
    opt = ExpSGDM(model.parameters(), lr=0.1, momentum=0.0, scale=2.0)
    meter = es.StepMeter(opt, model, lambda out, y: (out ** 2).mean() / 2, every=1)
    batch = (torch.ones(1), torch.zeros(1))
    for _ in range(2):
        meter.zero_grad()
        meter.loss(batch).backward()
        meter.step()
    assert meter.df == pytest.approx([-0.18], abs=1e-6) and meter.lin == pytest.approx([-0.16], abs=1e-6)
    assert meter.lin_delta == pytest.approx([-0.08], abs=1e-6)
    st = meter.summary()
    assert st["lin_gap"] == pytest.approx(0.02 / 0.18, rel=1e-4) and st["fo_resid"] == pytest.approx(0.10 / 0.18, rel=1e-4)
    assert st["gap_steps"] == 1


def test_meter_leaves_the_weights_unchanged(tmp_path):
    cfg = es.SPEC.make_config(dict(TINY, steps=12, gap_every=2))
    d = es.load_fashion(_resources(tmp_path)["fashion_mnist"])
    data = {"x_train": d["x_train"][:200], "y_train": d["y_train"][:200].long()}  # no tuning needed here
    for variant in es.VARIANTS:
        stats = {}
        torch.manual_seed(5)  # the network's init comes from the global generator (the stage seeds it per job)
        plain = es.fit_net(cfg, data, variant, "cnn", 3, 0.05, cfg.steps, None)
        torch.manual_seed(5)
        metered = es.fit_net(cfg, data, variant, "cnn", 3, 0.05, cfg.steps, lambda step, **m: None, stats=stats)
        assert all(torch.equal(plain[k], metered[k]) for k in plain)
        assert stats["gap_steps"] == 5 and stats["lin_gap"] >= 0  # steps 2, 4, ..., 10 of 0..11
        if variant == "sgdm":
            assert stats["fo_resid"] == pytest.approx(stats["lin_gap"])  # s = 1: the two models coincide


def test_end_to_end_through_spec(tmp_path):
    spec = es.SPEC
    cfg = spec.make_config(dict(TINY))
    data = spec.prepare(cfg, _resources(tmp_path))
    assert data["x_train"].shape == (240, 28, 28) and data["x_val"].shape == (60, 28, 28)
    assert set(data["tuning"]) == set(es.TUNED)  # the ablation shares Exp-SGDM's lr
    for variant in es.TUNED:
        for net in es.NETS:
            rec = data["tuning"][variant][net]
            scores = [rec[f"val_score@{i}"] for i in range(3)]
            assert scores.index(max(scores)) == rec["tuned_lr_index"] and rec["tuned_lr"] == cfg.lr_grid[int(rec["tuned_lr_index"])]
    logged = []
    models = {}
    for variant in es.VARIANTS:
        torch.manual_seed(0)
        models[variant] = spec.train(cfg, data, variant, 0, lambda step, **m: logged.append(m))
        m = spec.evaluate(cfg, models[variant], data)
        assert m["train_loss"] == pytest.approx((m["train_loss_mlp"] + m["train_loss_cnn"]) / 2)
        tuned = "exp_sgdm" if variant == "unif_sgdm" else variant
        assert m["grid_edge"] == max(data["tuning"][tuned][n]["grid_edge"] for n in es.NETS)
        assert m["lin_gap"] == pytest.approx((m["lin_gap_mlp"] + m["lin_gap_cnn"]) / 2) and m["fo_resid"] >= 0
        if variant == "sgdm":
            assert m["fo_resid"] == pytest.approx(m["lin_gap"])
        # the training loss is the mean cross-entropy on the first n_train_eval training images
        net = es._load(cfg, "cnn", models[variant]["cnn"])
        x, y = data["x_train"][: cfg.n_train_eval], data["y_train"][: cfg.n_train_eval]
        with torch.no_grad():
            assert m["train_loss_cnn"] == pytest.approx(float(F.cross_entropy(net(to_float(x)), y)), rel=1e-5)
        levels = spec.compress(cfg, models[variant], data, variant, 0)
        if variant == "unif_sgdm":
            assert levels == {}
            continue
        assert set(levels) == {"0.50", "0.80"}
        for lv, comp in levels.items():
            w = [t for n in es.NETS for t in comp[n].values() if t.dim() >= 2]
            assert sum(int((t == 0).sum()) for t in w) >= float(lv) * sum(t.numel() for t in w) - 1
            cm = spec.evaluate(cfg, comp, data)
            assert "train_loss" in cm and "grad_norm" not in cm and "lin_gap" not in cm
    assert any("mlp/val/grad_norm" in m for m in logged) and any("cnn/train/loss" in m for m in logged)
    assert not torch.equal(models["exp_sgdm"]["mlp"]["1.weight"], models["sgdm"]["mlp"]["1.weight"])
    torch.manual_seed(0)
    again = spec.train(cfg, data, "exp_sgdm", 0, lambda step, **m: None)
    assert all(torch.equal(again["cnn"][k], models["exp_sgdm"]["cnn"][k]) for k in again["cnn"])  # deterministic per seed

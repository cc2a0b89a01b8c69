"""Exp-SGDM (ICML 2024): the paper's optimizer inside the experiment (the optimizer itself is tested against
torch.optim.SGD and its expectation in tests/test_optim.py), evaluation against direct computation, and a tiny
prepare -> train -> compress -> evaluate run through the spec on synthetic images."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from paperflow.data.images import to_float
from paperflow.optim import ExpSGDM
from paperflow.papers import exp_sgdm as es
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
    assert rows[0].kind == "close" and rows[0].margin == cfg.margin and rows[0].better == "lower"
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


def test_end_to_end_through_spec(tmp_path):
    spec = es.SPEC
    cfg = spec.make_config(dict(TINY))
    data = spec.prepare(cfg, _resources(tmp_path))
    assert data["x_train"].shape == (240, 28, 28) and data["x_val"].shape == (60, 28, 28)
    for variant in es.VARIANTS:
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
        assert m["grid_edge"] == max(data["tuning"][variant][n]["grid_edge"] for n in es.NETS)
        # the training loss is the mean cross-entropy on the first n_train_eval training images
        net = es._load(cfg, "cnn", models[variant]["cnn"])
        x, y = data["x_train"][: cfg.n_train_eval], data["y_train"][: cfg.n_train_eval]
        with torch.no_grad():
            assert m["train_loss_cnn"] == pytest.approx(float(F.cross_entropy(net(to_float(x)), y)), rel=1e-5)
        levels = spec.compress(cfg, models[variant], data, variant, 0)
        assert set(levels) == {"0.50", "0.80"}
        for lv, comp in levels.items():
            w = [t for n in es.NETS for t in comp[n].values() if t.dim() >= 2]
            assert sum(int((t == 0).sum()) for t in w) >= float(lv) * sum(t.numel() for t in w) - 1
            assert "train_loss" in spec.evaluate(cfg, comp, data)
    assert any("mlp/val/grad_norm" in m for m in logged) and any("cnn/train/loss" in m for m in logged)
    assert not torch.equal(models["exp_sgdm"]["mlp"]["1.weight"], models["sgdm"]["mlp"]["1.weight"])
    torch.manual_seed(0)
    again = spec.train(cfg, data, "exp_sgdm", 0, lambda step, **m: None)
    assert all(torch.equal(again["cnn"][k], models["exp_sgdm"]["cnn"][k]) for k in again["cnn"])  # deterministic per seed

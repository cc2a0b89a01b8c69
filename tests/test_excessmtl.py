"""ExcessMTL (ICML 2024): label-noise injection, the shared Multi-Fashion+MNIST builder, config/spec, and a tiny
prepare -> train -> compress -> evaluate run through the spec on synthetic images. Combiner math: test_mtl_extra.py."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from paperflow import mtl
from paperflow.data.multimnist import multi_fashion_mnist, symmetric_label_noise
from paperflow.papers import excessmtl as ex
from paperflow.spec import ConfigError, Resources


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models on a shared 2-core machine: extra intra-op threads only contend (restored after each test)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def synthetic_resources(tmp_path):
    rng = np.random.default_rng(0)

    def images(n, labels):
        x = rng.integers(0, 60, (n, 28, 28)).astype(np.uint8)
        for i, y in enumerate(labels):
            x[i, 2 * y : 2 * y + 6, 4:10] = 250
        return x

    yf, yt, ym = rng.integers(0, 10, 300), rng.integers(0, 10, 100), rng.integers(0, 10, 1000)
    np.savez(tmp_path / "fashion.npz", x_train=images(300, yf), y_train=yf, x_test=images(100, yt), y_test=yt)
    np.savez(tmp_path / "mnist.npz", x=images(1000, ym), y=ym)
    return Resources(root=str(tmp_path), paths={"fashion_mnist": str(tmp_path / "fashion.npz"), "mnist10k": str(tmp_path / "mnist.npz")})


def test_symmetric_label_noise_rate_and_determinism():
    y = torch.arange(10).repeat(2000)  # 20000 labels
    noisy, mask = symmetric_label_noise(y, 0.6, 10, seed=3)
    assert int(mask.sum()) == 12000 and torch.equal(noisy[~mask], y[~mask])
    changed = float((noisy != y).float().mean())
    assert changed == pytest.approx(0.6 * 0.9, abs=0.01)  # a uniform draw keeps the true class 1/10 of the time
    assert torch.equal(symmetric_label_noise(y, 0.6, 10, seed=3)[0], noisy)
    assert not torch.equal(symmetric_label_noise(y, 0.6, 10, seed=4)[0], noisy)
    with pytest.raises(ValueError):
        symmetric_label_noise(y, 1.5, 10, 0)


def test_multi_fashion_mnist_splits_are_disjoint_sources(tmp_path):
    res = synthetic_resources(tmp_path)
    f, m = np.load(res["fashion_mnist"]), np.load(res["mnist10k"])
    d = multi_fashion_mnist(f, m, 64, 32, 48, mnist_test=200, mnist_val=100, fashion_val=100, data_seed=0)
    assert d["x_train"].shape == (64, 28, 28) and d["x_val"].shape == (32, 28, 28) and d["x_test"].shape == (48, 28, 28)
    again = multi_fashion_mnist(f, m, 64, 32, 48, mnist_test=200, mnist_val=100, fashion_val=100, data_seed=0)
    assert all(torch.equal(d[k], again[k]) for k in d)


def test_config_validation_and_rows():
    with pytest.raises(ConfigError, match="noise"):
        ex.Config(noise=1.0)
    with pytest.raises(ConfigError, match="lr_grid"):
        ex.Config(lr_grid=(0.01, 0.001))
    cfg = ex.SPEC.make_config({"n_train": 640, "batch_size": 64})
    assert cfg.epoch_steps == 10
    rows = ex.comparisons(cfg)
    assert sum(r.role == "headline" for r in rows) == 1
    head = rows[0]
    assert (head.metric, head.method, head.baseline, head.better) == ("acc_a", "excessmtl", "dwa", "higher")
    assert head.gates[0].comparison.method == "dwa_clean"  # the noise-hurts gate


def test_end_to_end_through_spec(tmp_path):
    spec = ex.SPEC
    cfg = spec.make_config({"n_train": 128, "n_val": 32, "n_test": 64, "mnist_test": 200, "mnist_val": 100, "fashion_val": 100,
                            "steps": 6, "tune_steps": 3, "batch_size": 32, "channels": [4, 8], "hidden": 16})
    data = spec.prepare(cfg, synthetic_resources(tmp_path))
    assert set(data["tuning"]) == set(ex.VARIANTS)
    for variant in spec.variants:
        logged = []
        model = spec.train(cfg, data, variant, 0, lambda step, **m: logged.append(m))
        metrics = spec.evaluate(cfg, model, data)
        assert {"acc_a", "acc_b", "acc_mean", "weight_b", "tuned_lr", "grid_edge"} <= set(metrics)
        assert metrics["tuned_lr"] == data["tuning"][variant]["tuned_lr"]
        comp = spec.compress(cfg, model, data, variant, 0)
        assert set(comp) == {"0.50", "0.80"} and "acc_a" in spec.evaluate(cfg, comp["0.80"], data)
        assert logged
    first = spec.train(cfg, data, "excessmtl", 1, None)
    again = spec.train(cfg, data, "excessmtl", 1, None)
    assert all(torch.equal(first["state"][k], again["state"][k]) for k in first["state"])
    assert sum(first["weights"]) == pytest.approx(2.0)


def test_noise_is_applied_only_to_noisy_variants(monkeypatch, tmp_path):
    seen = []
    real = ex.symmetric_label_noise
    monkeypatch.setattr(ex, "symmetric_label_noise", lambda *a, **k: seen.append(a[3]) or real(*a, **k))
    cfg = ex.Config(n_train=64, n_val=16, n_test=16, steps=1, tune_steps=1, batch_size=32, channels=(2, 2), hidden=4)
    data = {"x_train": torch.zeros(64, 28, 28, dtype=torch.uint8), "ya_train": torch.zeros(64, dtype=torch.long),
            "yb_train": torch.zeros(64, dtype=torch.long)}
    ex.fit_model(cfg, data, "dwa_clean", 0, 1e-3, 1, None)
    assert seen == []
    ex.fit_model(cfg, data, "dwa", 2, 1e-3, 1, None)
    assert seen == [cfg.noise_seed + 2]
    assert isinstance(mtl.make_combiner("dwa", period=cfg.epoch_steps), mtl.DWACombiner)

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
    assert (head.metric, head.method, head.baseline, head.better) == ("acc_a", "excessmtl", ex.BEST, "higher") and head.refuted_if
    (down,) = head.mechanism_gates
    assert (down.variant, down.metric, down.below) == ("excessmtl", "weight_b", 1.0)
    premise = [g for g in head.gates if g.comparison is not None]
    assert len(premise) == 1 and (premise[0].comparison.method, premise[0].comparison.baseline) == (ex.CLEAN, ex.BEST)


def test_flipped_labels_are_redrawn_at_every_access():
    """The official loader: a fixed flipped subset, each flipped label a fresh uniform class at every access."""
    n = 1000
    mask = ex.flip_subset(n, 0.6, torch.Generator().manual_seed(0))
    assert int(mask.sum()) == 600  # floor(0.6 n), without replacement
    assert torch.equal(mask, ex.flip_subset(n, 0.6, torch.Generator().manual_seed(0)))
    y = torch.arange(10).repeat(n // 10)
    gen = torch.Generator().manual_seed(1)
    first, second = ex.noisy_labels(y, mask, gen), ex.noisy_labels(y, mask, gen)
    assert torch.equal(first[~mask], y[~mask]) and torch.equal(second[~mask], y[~mask])  # clean examples keep their label
    assert float((first[mask] != second[mask]).float().mean()) > 0.8  # re-drawn: two accesses differ ~90% of the time
    draws = torch.stack([ex.noisy_labels(y, mask, gen)[mask] for _ in range(50)])
    counts = torch.bincount(draws.reshape(-1), minlength=10).float()
    assert float((counts / counts.sum() - 0.1).abs().max()) < 0.01  # uniform over all 10 classes, the true one included
    assert not bool(ex.flip_subset(n, 0.0, gen).any())


def test_epoch_batches_are_shuffled_passes_with_the_last_partial_batch_dropped():
    b = ex.epoch_batches(10, 3, 7, torch.Generator().manual_seed(0))
    assert b.shape == (7, 3)
    for start in (0, 3):  # passes of 3 batches (9 of the 10 examples, no repeats)
        one_pass = b[start : start + 3].reshape(-1)
        assert len(set(one_pass.tolist())) == 9
    assert not torch.equal(b[0:3], b[3:6])


def test_best_loss_based_baseline_and_view_use_validation():
    assert ex.best_loss_based({"groupdro": 71.0, "dwa": 73.0}) == "dwa"
    assert ex.best_loss_based({"groupdro": 73.0, "dwa": 73.0}) == "groupdro"  # ties: LOSS_BASED order
    rows = [{"variant": v, "seed": s, "dense/acc_a": 10.0 * i + s, "dense/val_acc_a": val}
            for s in (0, 1) for i, (v, val) in enumerate([("excessmtl", 80.0), ("groupdro", 75.0), ("dwa", 70.0), ("ls", 90.0)])]
    best = [r for r in ex.derive(ex.Config(), rows) if r["variant"] == ex.BEST]
    assert [r["dense/acc_a"] for r in best] == [10.0, 11.0] and best[0]["dense/best_baseline"] == 0.0  # GroupDRO's test rows
    assert ex.derive(ex.Config(), [{"variant": "dwa", "seed": 0}]) == [{"variant": "dwa", "seed": 0}]


def test_end_to_end_through_spec(tmp_path):
    spec = ex.SPEC
    cfg = spec.make_config({"n_train": 128, "n_val": 32, "n_test": 64, "mnist_test": 200, "mnist_val": 100, "fashion_val": 100,
                            "steps": 6, "tune_steps": 3, "batch_size": 32, "channels": [4, 8], "hidden": 16})
    data = spec.prepare(cfg, synthetic_resources(tmp_path))
    assert set(data["tuning"]) == set(ex.VARIANTS)
    chosen = ex.best_loss_based({b: data["tuning"][b]["val_acc_a"] for b in ex.LOSS_BASED})
    assert data["tuning"][ex.CLEAN] == data["tuning"][chosen]
    rows = []
    for variant in spec.variants:
        logged = []
        model = spec.train(cfg, data, variant, 0, lambda step, **m: logged.append(m))
        metrics = spec.evaluate(cfg, model, data)
        assert {"acc_a", "acc_b", "acc_mean", "weight_b", "weight_b_mean", "tuned_lr", "grid_edge"} <= set(metrics)
        assert metrics["tuned_lr"] == data["tuning"][variant]["tuned_lr"]
        comp = spec.compress(cfg, model, data, variant, 0)
        assert set(comp) == {"0.50", "0.80"} and "acc_a" in spec.evaluate(cfg, comp["0.80"], data)
        assert logged
        rows.append({"variant": variant, "seed": 0, **{f"dense/{k}": v for k, v in metrics.items()}})
    assert rows[-1]["dense/clean_of"] == float(ex.LOSS_BASED.index(chosen))
    assert sum(r["variant"] == ex.BEST for r in spec.derive(cfg, rows)) == 1
    first = spec.train(cfg, data, "excessmtl", 1, None)
    again = spec.train(cfg, data, "excessmtl", 1, None)
    assert all(torch.equal(first["state"][k], again["state"][k]) for k in first["state"])
    assert sum(first["weights"]) == pytest.approx(2.0)


def test_noise_is_applied_only_to_noisy_runs(monkeypatch):
    seen = []
    real = ex.noisy_labels
    monkeypatch.setattr(ex, "noisy_labels", lambda y, flipped, gen: seen.append((y.clone(), flipped.clone())) or real(y, flipped, gen))
    cfg = ex.Config(n_train=64, n_val=16, n_test=16, steps=2, tune_steps=1, batch_size=32, channels=(2, 2), hidden=4)
    data = {"x_train": torch.zeros(64, 28, 28, dtype=torch.uint8), "ya_train": torch.zeros(64, dtype=torch.long),
            "yb_train": torch.zeros(64, dtype=torch.long)}
    ex.fit_model(cfg, data, "dwa", 0, 1e-3, 2, None, clean=True)
    assert len(seen) == 2 and not any(bool(f.any()) for _, f in seen)
    seen.clear()
    ex.fit_model(cfg, data, "dwa", 2, 1e-3, 2, None)
    assert len(seen) == 2 and all(int(f.sum()) > 0 for _, f in seen)
    with pytest.raises(ValueError, match="unknown variant"):
        ex.fit_model(cfg, data, ex.CLEAN, 0, 1e-3, 1, None)
    assert isinstance(mtl.make_combiner("dwa", period=cfg.epoch_steps), mtl.DWACombiner)

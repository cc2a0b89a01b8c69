"""pedestrian_attr (ICML 2024): mA by hand, the co-occurrence argument (image-level vs feature-bank re-sampling) on a
hand example, GOAT's flooded loss, the banks, and a tiny prepare -> train -> compress -> evaluate -> derive run."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from paperflow.papers import pedestrian_attr as pa
from paperflow.spec import ConfigError, Resources


def test_ma_and_f1_hand_example():
    y = np.array([[1, 0], [1, 1], [0, 0], [0, 1]])
    p = np.array([[1, 0], [0, 1], [0, 1], [0, 1]])
    # attr 0: TPR 1/2, TNR 2/2 -> 0.75; attr 1: TPR 2/2, TNR 1/2 -> 0.75; mA = 75 %
    m = pa.pedestrian_metrics(y, p)
    assert m["ma"] == pytest.approx(75.0)
    assert m["tpr"] == pytest.approx(75.0) and m["tnr"] == pytest.approx(75.0)
    # instance F1: 2*1/(1+1)=1, 2*1/(2+1)=2/3, 2*0/(0+1)=0, 2*1/(1+1)=1 -> mean 2/3
    assert m["f1"] == pytest.approx(100 * (1 + 2 / 3 + 0 + 1) / 4)
    perfect = pa.pedestrian_metrics(y, y)
    assert perfect["ma"] == pytest.approx(100.0) and perfect["f1"] == pytest.approx(100.0)


def _hand_labels():
    """8 samples, 3 attributes: a0 rare (2/8) and always with a1; a1 common (4/8); a2 independent-ish (4/8)."""
    return np.array([[1, 1, 0], [1, 1, 1], [0, 1, 0], [0, 1, 1], [0, 0, 0], [0, 0, 1], [0, 0, 0], [0, 0, 1]])


def test_image_level_oversampling_biases_co_occurring_attributes():
    Y = _hand_labels()
    # by hand: attribute a0 side 1 -> rows {0,1}: a1 mean 1, a2 1/2; side 0 -> rows {2..7}: a0 0, a1 2/6, a2 1/2
    #          a1 side 1 -> rows {0..3}: a0 1/2, a2 1/2; side 0 -> rows {4..7}: a0 0, a2 1/2
    #          a2 side 1 -> rows {1,3,5,7}: a0 1/4, a1 1/2; side 0 -> rows {0,2,4,6}: a0 1/4, a1 1/2
    expect = np.array([(0.5 * (1 + 0) + 0.5 * (0.5 + 0) + 0.5 * (0.25 + 0.25)) / 3,
                       (0.5 * (1 + 2 / 6) + 0.5 * (1 + 0) + 0.5 * (0.5 + 0.5)) / 3,
                       0.5])
    pri = pa.image_sampler_priors(Y)
    np.testing.assert_allclose(pri, expect)
    assert pri[0] < 0.5 and pri[1] > 0.5  # neither balanced: a1 is over-sampled because it rides along with a0
    # the sampler itself (Monte Carlo) has these priors
    gen = torch.Generator().manual_seed(0)
    idx = pa.balanced_image_indices(pa.side_groups(torch.from_numpy(Y)), 20000, gen)
    np.testing.assert_allclose(Y[idx.numpy()].mean(0), expect, atol=0.01)


def test_feature_banks_balance_each_attribute_and_keep_co_occurrence():
    Y = torch.from_numpy(_hand_labels())
    # feature of sample i for every attribute = i, so a popped feature tells which sample it came from
    feats = torch.arange(8.0)[:, None, None].expand(8, 3, 1)
    banks = pa.FeatureBanks(3, 1, size=16, gen=torch.Generator().manual_seed(0))
    banks.push(feats, Y)
    assert banks.count.tolist() == [[6, 2], [4, 4], [4, 4]]
    x, lab = banks.pop(40000)
    np.testing.assert_allclose(lab.mean(0).numpy(), [0.5, 0.5, 0.5], atol=0.01)  # every attribute balanced exactly
    src = x[..., 0].long()
    assert torch.equal(Y[src, torch.arange(3)[None, :].expand_as(src)].float(), lab)  # a popped feature has its label
    # within a0's positive bank, a1 co-occurs as in the data (P(a1 | a0) = 1) and a2 keeps P(a2 | a0) = 1/2
    pos0 = src[:, 0][lab[:, 0] == 1]
    assert set(pos0.tolist()) == {0, 1}
    assert Y[pos0, 1].float().mean() == 1.0 and Y[pos0, 2].float().mean() == pytest.approx(0.5, abs=0.03)
    banks.push(feats + 100, Y)  # ring buffer: a full bank keeps the newest `size` features
    assert banks.count[0, 0] == 12 and banks.bank[1, 1, :8, 0].tolist() == [0, 1, 2, 3, 100, 101, 102, 103]


def test_flooded_loss_ascends_below_the_level():
    loss = torch.tensor([0.2, 0.8], requires_grad=True)
    level = torch.tensor([0.5, 0.5])
    out = pa.flooded(loss, level)
    assert out.tolist() == pytest.approx([0.8, 0.8])
    out.sum().backward()
    assert loss.grad.tolist() == [-1.0, 1.0]  # gradient descent on it raises the loss below b, lowers it above


def test_config_and_comparisons():
    with pytest.raises(ConfigError, match="head_lr_grid"):
        pa.Config(head_lr_grid=(1e-3, 3e-3))
    with pytest.raises(ConfigError, match="cooccur"):
        pa.Config(cooccur=((1, 1, 0.5),))
    cfg = pa.SPEC.make_config({"cooccur": [[9, 2, 0.8]], "sparsities": [0.5, 0.9]})
    assert cfg.cooccur == ((9, 2, 0.8),) and cfg.sparsities == (0.5, 0.9)
    rows = pa.comparisons(cfg)
    assert [r.role for r in rows].count("headline") == 1
    assert rows[0].baseline == pa.BEST and rows[0].column == "dense/ma"


def _resources(tmp_path):
    rng = np.random.default_rng(0)

    def images(labels):  # class-coded bright bar + noise
        x = rng.integers(0, 40, (len(labels), 28, 28)).astype(np.uint8)
        for i, k in enumerate(labels):
            x[i, 2 * k : 2 * k + 6, 8:20] = 250
        return x

    ytr, yte = np.tile(np.arange(10), 40), np.tile(np.arange(10), 20)
    np.savez(tmp_path / "f.npz", x_train=images(ytr), y_train=ytr, x_test=images(yte), y_test=yte)
    return Resources(root=str(tmp_path), paths={"fashion_mnist": str(tmp_path / "f.npz")})


@pytest.fixture
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # conv layers on a busy 2-core machine: one thread is ~5x faster than two
    yield
    torch.set_num_threads(n)


def test_end_to_end_through_spec(tmp_path, one_thread):
    spec = pa.SPEC
    cfg = spec.make_config({"n_train": 128, "n_val": 64, "n_test": 64, "fashion_val": 100, "channels": [4, 4, 8], "epochs": 1,
                            "batch_size": 32, "stage2_epochs": 2, "warm_epochs": 1, "tune_epochs": 1, "reset_every": 2, "bank_size": 16})
    data = spec.prepare(cfg, _resources(tmp_path))
    assert data["x_train"].shape == (128, 28, 28) and data["y_train"].shape == (128, 10)
    assert set(data["tuning"]) == set(pa.VARIANTS) and data["tuning"]["frdl_goat"]["stage1_lr"] == data["tuning"]["bce"]["tuned_lr"]
    rows = []
    for variant in spec.variants:
        model = spec.train(cfg, data, variant, 0, lambda step, **m: None)
        row = {"paper": spec.id, "variant": variant, "seed": 0, **{f"dense/{k}": v for k, v in spec.evaluate(cfg, model, data).items()}}
        for level, comp in spec.compress(cfg, model, data, variant, 0).items():
            row.update({f"compressed:{level}/{k}": v for k, v in spec.evaluate(cfg, comp, data).items()})
        rows.append(row)
    bce, frdl = rows[1], rows[0]
    assert 0 <= frdl["dense/ma"] <= 100 and "compressed:0.80/ma" in frdl
    # frdl_goat's stage #1 is the bce model of the same seed: its backbone is the bce backbone
    m_bce = spec.train(cfg, data, "bce", 0, lambda step, **m: None)
    m_frdl = spec.train(cfg, data, "frdl_goat", 0, lambda step, **m: None)
    assert torch.equal(m_bce["state"]["backbone.conv1.weight"], m_frdl["state"]["backbone.conv1.weight"])
    out = spec.derive(cfg, rows)
    assert sum(r["variant"] == pa.BEST for r in out) == 1

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


def test_logit_correction_and_heads_by_hand():
    """log-odds of the training prior; tau = 1 thresholds each attribute at its prior's log-odds."""
    y = torch.tensor([[1, 0], [0, 0], [0, 0], [0, 1]])  # priors 1/4, 1/4
    odds = pa.log_prior_odds(y)
    assert odds.tolist() == pytest.approx([np.log(1 / 3)] * 2)
    feats = torch.tensor([[[1.0, -2.0], [0.5, 0.0]]])  # one sample, A = 2, c = 2
    w, b = torch.tensor([[2.0, 5.0], [1.0, 1.0]]), torch.tensor([0.5, -1.0])
    logits = pa.head_logits(feats, w, b)  # relu: (1, 0) and (0.5, 0) -> 2 + 0.5, 0.5 - 1
    assert logits[0].tolist() == pytest.approx([2.5, -0.5])
    assert (logits > odds).tolist() == [[True, True]] and (logits > 0).tolist() == [[True, False]]


def test_stage2_without_goat_keeps_the_backbone_and_reads_the_cached_features():
    """No walk: the stage-#1 backbone + separte stay exactly, and the heads train on cached features (the same run
    from features recomputed by stage1_features gives the same heads)."""
    cfg = pa.Config(n_train=64, channels=(2, 2, 4), batch_size=16, stage2_epochs=2, warm_epochs=1, bank_size=8)
    g = torch.Generator().manual_seed(0)
    data = {"x_train": torch.randint(0, 255, (64, 28, 28), generator=g, dtype=torch.uint8),
            "y_train": (torch.rand(64, 10, generator=g) < 0.3).to(torch.uint8)}
    torch.manual_seed(0)
    stage1 = {"state": pa._state(pa._net(cfg))}
    a = pa.fit_stage2(cfg, data, stage1, 0.01, 2, seed=3, goat=False)
    b = pa.fit_stage2(cfg, data, stage1, 0.01, 2, seed=3, goat=False, feats=pa.stage1_features(cfg, stage1["state"], data["x_train"]))
    for k, v in stage1["state"].items():
        if k not in ("w_ft", "b_ft"):
            assert torch.equal(a["state"][k], v), k
    assert not torch.equal(a["state"]["w_ft"], stage1["state"]["w_ft"])
    torch.testing.assert_close(a["state"]["w_ft"], b["state"]["w_ft"])
    assert int(a["bank_fill"].sum()) > 0


def test_derive_views_and_best():
    rows = [{"paper": "pedestrian_attr", "variant": v, "seed": 0, "dense/ma": m, "dense/grid_edge": 0.0,
             "dense/val_score@0": vs, **extra} for v, m, vs, extra in (
                ("bce", 80.0, 70.0, {"dense/la_ma": 84.0, "dense/la_grid_edge": 1.0}),
                ("oversample", 81.0, 72.0, {}),
                ("frdl_goat", 85.0, 75.0, {"dense/nogoat_ma": 83.0, "dense/nogoat_grid_edge": 0.0}))]
    out = {r["variant"]: r for r in pa.derive(pa.Config(), rows)}
    assert out["bce|logit_adj"]["dense/ma"] == 84.0 and out["bce|logit_adj"]["dense/grid_edge"] == 1.0
    assert out["frdl_goat|no_goat"]["dense/ma"] == 83.0
    assert out[pa.BEST]["dense/ma"] == 81.0 and out[pa.BEST]["dense/best_baseline"] == 1.0  # oversample: higher val mA


def test_config_and_comparisons():
    with pytest.raises(ConfigError, match="head_lr_grid"):
        pa.Config(head_lr_grid=(1e-3, 3e-3))
    with pytest.raises(ConfigError, match="tau_grid"):
        pa.Config(tau_grid=(1.0, 2.0))
    with pytest.raises(ConfigError, match="cooccur"):
        pa.Config(cooccur=((1, 1, 0.5),))
    cfg = pa.SPEC.make_config({"cooccur": [[9, 2, 0.8]], "sparsities": [0.5, 0.9]})
    assert cfg.cooccur == ((9, 2, 0.8),) and cfg.sparsities == (0.5, 0.9)
    rows = pa.comparisons(cfg)
    assert [r.role for r in rows].count("headline") == 1
    head = rows[0]
    assert head.baseline == pa.BEST and head.column == "dense/ma" and head.refuted_if
    assert {(g.variant, g.column) for g in head.mechanism_gates} == {("frdl_goat", "dense/val_imbalance_gap_stage1"),
                                                                      ("frdl_goat", "dense/val_rare_tpr_gain")}
    for r in rows:  # grid-edge gates on every tuned variant of a judged "better" row, the method included
        if r.role in ("headline", "secondary"):
            assert {g.variant for g in r.gates if g.kind == "grid_edge"} == {"frdl_goat", r.baseline}, r.text
    assert {r.baseline for r in rows if r.role == "secondary"} == {"bce", "oversample", "bce|logit_adj", "frdl_goat|no_goat"}


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
    assert set(data["tuning"]) == set(pa.VARIANTS) | {"no_goat", "logit_adj"}
    assert all(data["tuning"][k]["stage1_lr"] == data["tuning"]["bce"]["tuned_lr"] for k in ("frdl_goat", "no_goat", "logit_adj"))
    rows = []
    for variant in spec.variants:
        model = spec.train(cfg, data, variant, 0, lambda step, **m: None)
        row = {"paper": spec.id, "variant": variant, "seed": 0, **{f"dense/{k}": v for k, v in spec.evaluate(cfg, model, data).items()}}
        for level, comp in spec.compress(cfg, model, data, variant, 0).items():
            row.update({f"compressed:{level}/{k}": v for k, v in spec.evaluate(cfg, comp, data).items()})
        rows.append(row)
    bce, frdl = rows[1], rows[0]
    assert 0 <= frdl["dense/ma"] <= 100 and "compressed:0.80/ma" in frdl
    assert {"dense/nogoat_ma", "dense/val_imbalance_gap_stage1", "dense/val_rare_tpr_gain", "dense/val_goat_rare_tpr_gain"} <= set(frdl)
    assert "compressed:0.50/nogoat_ma" not in frdl and "compressed:0.50/val_rare_tpr_gain" not in frdl
    assert {"dense/la_ma", "dense/la_grid_edge", "dense/la_tuned_tau"} <= set(bce)
    assert frdl["dense/grid_edge"] == max(data["tuning"]["frdl_goat"]["grid_edge"], data["tuning"]["bce"]["grid_edge"])
    # frdl_goat's stage #1 is the bce model of the same seed: its backbone is the bce backbone
    m_bce = spec.train(cfg, data, "bce", 0, lambda step, **m: None)
    m_frdl = spec.train(cfg, data, "frdl_goat", 0, lambda step, **m: None)
    assert torch.equal(m_bce["state"]["backbone.conv1.weight"], m_frdl["state"]["backbone.conv1.weight"])
    out = spec.derive(cfg, rows)
    assert sum(r["variant"] == pa.BEST for r in out) == 1
    assert {r["variant"] for r in out} >= {"bce|logit_adj", "frdl_goat|no_goat"}


def test_test_grids_come_from_test_seed(tmp_path, one_thread, monkeypatch):
    """The test grids depend on test_seed only; train and validation grids (all that tuning reads) do not."""
    monkeypatch.setattr(pa, "tune_all", lambda cfg, data: {})
    small = {"n_train": 64, "n_val": 32, "n_test": 32, "fashion_val": 100}
    res = _resources(tmp_path)
    a = pa.prepare(pa.SPEC.make_config(small), res)
    b = pa.prepare(pa.SPEC.make_config({**small, "test_seed": 7}), res)
    assert torch.equal(a["x_train"], b["x_train"]) and torch.equal(a["x_val"], b["x_val"]) and torch.equal(a["y_val"], b["y_val"])
    assert not torch.equal(a["y_test"], b["y_test"])


def test_vectorised_push_equals_the_per_bank_loop():
    """FeatureBanks.push (one vectorised write) leaves exactly the banks, pointers and counts of the per-bank loop,
    through wrap-around and batches with more rows of a bank than it holds."""
    g = torch.Generator().manual_seed(0)
    fast = pa.FeatureBanks(3, 2, size=5, gen=torch.Generator().manual_seed(1))
    slow = pa.FeatureBanks(3, 2, size=5, gen=torch.Generator().manual_seed(1))
    for n in (4, 7, 1, 12, 3, 9):
        feats = torch.randn(n, 3, 2, generator=g)
        y = (torch.rand(n, 3, generator=g) < torch.tensor([0.2, 0.5, 0.9])).long()
        fast.push(feats, y)
        slow.push_loop(feats, y)
        assert torch.equal(fast.bank, slow.bank) and torch.equal(fast.ptr, slow.ptr) and torch.equal(fast.count, slow.count)

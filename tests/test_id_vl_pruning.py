"""ID-guided VL pruning (ICML 2024): TwoNN on data of known intrinsic dimension, the PLATON schedule,
exact per-modality sparsity of every criterion, and a tiny prepare -> train -> compress -> evaluate ->
derive run on synthetic images through the spec."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from paperflow.papers import id_vl_pruning as P
from paperflow.spec import ConfigError, Resources


def test_twonn_recovers_linear_subspace_dimension():
    gen = torch.Generator().manual_seed(0)
    basis, _ = torch.linalg.qr(torch.randn(50, 5, generator=gen, dtype=torch.float64))  # 5-dim subspace of R^50
    x = torch.randn(2000, 5, generator=gen, dtype=torch.float64) @ basis.T
    d = P.twonn_id(x, blocks=20, seed=0)
    assert abs(d - 5.0) < 0.75, d  # mean over n..n/20 subsamples (small subsets bias TwoNN slightly low)


def test_twonn_fit_is_slope_through_origin_without_two_largest_ratios():
    # 1-D points: r2/r1 known in closed form; the fit must use all but the two largest sorted ratios
    pts = np.array([0.0, 1.0, 3.0, 7.0, 15.0, 31.0, 40.0])
    dist = np.abs(pts[:, None] - pts[None, :])
    Y = np.sort(dist, axis=1)
    mu = np.sort(Y[:, 2] / Y[:, 1])
    n = mu.size
    x, y = np.log(mu[:-2]), -np.log(1 - np.arange(1, n + 1)[:-2] / n)
    assert P.twonn_fit(dist) == pytest.approx(float(x @ y / (x @ x)))


def test_twonn_drops_duplicates_and_handles_tiny_sets():
    x = torch.randn(300, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    x = torch.cat([x, x[:20]])  # duplicates: r1 = 0, dropped
    assert 2.0 < P.twonn_id(x, blocks=5) < 4.0
    assert math.isnan(P.twonn_fit(np.abs(np.arange(3.0)[:, None] - np.arange(3.0)[None, :])))


def test_platon_schedule_cubic():
    cfg = P.Config(ft_steps=40, ft_warmup=10, ft_final=10)
    assert P.remaining_ratio(10, cfg, 0.7) == (1.0, False)
    assert P.remaining_ratio(31, cfg, 0.7) == (pytest.approx(0.3), True)
    r, _ = P.remaining_ratio(20, cfg, 0.7)
    assert r == pytest.approx(0.3 + 0.7 * (1 - 10 / 20) ** 3)


@pytest.mark.parametrize("variant", P.VARIANTS)
def test_criterion_masks_hit_target(variant):
    gen = torch.Generator().manual_seed(0)
    params = {"a": torch.randn(8, 16, generator=gen), "b": torch.randn(32, 8, generator=gen)}
    platon = P.PlatonScore(params, 0.85, 0.95, 1)
    for step in range(4):
        platon.update(step, params, {n: torch.randn(p.shape, generator=gen) for n, p in params.items()})
    ids = {"a": 2.0, "b": 10.0}
    masks = P.criterion_masks(variant, params, platon, ids, 0.6)
    total = sum(m.numel() for m in masks.values())
    if variant == "uniform_magnitude":  # int(numel * s) pruned in every matrix
        assert all(int((~m).sum()) == int(m.numel() * 0.6) for m in masks.values())
    else:  # one threshold: exactly int(total * s) pruned over all matrices, unevenly
        assert sum(int((~m).sum()) for m in masks.values()) == int(total * 0.6)
    if variant == "id_weighted":  # ID 5x larger for b -> b keeps a larger share than without ID
        plain = P.criterion_masks("importance", params, platon, ids, 0.6)
        assert masks["b"].float().mean() >= plain["b"].float().mean()


def _synthetic_res(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {"x_train": rng.integers(0, 256, (300, 28, 28), dtype=np.uint8), "y_train": np.arange(300) % 10,
              "x_test": rng.integers(0, 256, (60, 28, 28), dtype=np.uint8), "y_test": np.arange(60) % 10}
    np.savez(tmp_path / "fm.npz", **arrays)
    return Resources(root=str(tmp_path), paths={"fashion_mnist": str(tmp_path / "fm.npz")})


def test_pipeline_through_spec_hits_sparsity_per_modality(tmp_path):
    torch.set_num_threads(1)
    cfg = P.SPEC.make_config(dict(n_train=200, n_test=60, n_calib=40, n_calib_text=40, id_blocks=4, steps=3,
                                  batch_size=16, d_vision=16, d_text=16, vision_layers=1, text_layers=1,
                                  embed_dim=16, sparsities=[0.5], compare_level=0.5, stress_level=0, ft_steps=4,
                                  ft_warmup=1, ft_final=1, eval_batch=32, log_every=1))
    data = P.SPEC.prepare(cfg, _synthetic_res(tmp_path))
    assert data["x_train"].dtype == torch.uint8
    rows = []
    for variant in P.SPEC.variants:
        logs = []
        model = P.SPEC.train(cfg, data, variant, 0, lambda step, **m: logs.append(m))
        assert logs and all(math.isfinite(m["train/loss"]) for m in logs)
        dense = P.SPEC.evaluate(cfg, model, data)
        assert 0 <= dense["acc"] <= 100 and dense["sparsity_v"] == 0 and dense["sparsity_t"] == 0
        comp = P.SPEC.compress(cfg, model, data, variant, 0)
        assert set(comp) == {"0.50", "v0.50", "t0.50"}
        m = {lv: P.SPEC.evaluate(cfg, c, data) for lv, c in comp.items()}
        assert m["v0.50"]["sparsity_v"] == pytest.approx(0.5, abs=1e-3) and m["v0.50"]["sparsity_t"] == 0
        assert m["t0.50"]["sparsity_t"] == pytest.approx(0.5, abs=1e-3) and m["t0.50"]["sparsity_v"] == 0
        # joint: 50% over both towers' prunable matrices together
        st = comp["0.50"]["state"]
        w = P.prunable_weights(st, include=P.PRUNED)
        assert sum(int((t == 0).sum()) for t in w.values()) == pytest.approx(0.5 * sum(t.numel() for t in w.values()), abs=2)
        assert m["0.50"]["nonzero_params"] < dense["nonzero_params"]
        row = {"paper": "id_vl_pruning", "variant": variant, "seed": 0, **{f"dense/{k}": v for k, v in dense.items()}}
        for lv, mm in m.items():
            row.update({f"compressed@{lv}/{k}": v for k, v in mm.items()})
        rows.append(row)
    torch.save(model, tmp_path / "m.pt")
    torch.load(tmp_path / "m.pt", weights_only=True)
    derived = P.SPEC.derive(cfg, rows)
    vis = next(r for r in derived if r["variant"] == "id_weighted|vision_only")
    assert vis["compressed@0.50/acc"] == rows[0]["compressed@v0.50/acc"]
    assert {c.method for c in P.SPEC.comparisons(cfg)} <= {r["variant"] for r in derived}


def test_descriptions_split_and_tokens():
    desc = P.descriptions()
    assert len(desc) == 720 and sum(h for _, _, h in desc) == 180
    ids, vocab = P.tokenize([d[0] for d in desc], 14)
    assert ids.shape == (720, 14) and vocab[0] == "<pad>"


@pytest.mark.parametrize("bad", [dict(compare_level=0.4), dict(sparsities=(1.2,)), dict(n_calib=10),
                                 dict(ft_warmup=30, ft_final=20), dict(patch_size=5), dict(n_calib_text=1000)])
def test_config_validation(bad):
    with pytest.raises(ConfigError):
        P.SPEC.make_config(bad)

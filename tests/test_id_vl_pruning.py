"""ID-guided VL pruning (ICML 2024): the PLATON schedule, exact sparsity of every criterion, equal absolute
counts for the single-tower levels, and a tiny prepare -> train -> compress -> evaluate -> derive run on
synthetic images through the spec (the TwoNN estimator is tested in tests/test_twonn.py)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from paperflow.papers import id_vl_pruning as P
from paperflow.spec import ConfigError, Resources


def test_platon_schedule_cubic():
    assert P.remaining_ratio(10, 0.7, 40, 10, 10) == (1.0, False)
    assert P.remaining_ratio(31, 0.7, 40, 10, 10) == (pytest.approx(0.3), True)
    r, _ = P.remaining_ratio(20, 0.7, 40, 10, 10)
    assert r == pytest.approx(0.3 + 0.7 * (1 - 10 / 20) ** 3)


@pytest.mark.parametrize("variant", P.CRITERIA)
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


def test_equal_count_sparsities_remove_the_same_number_of_weights():
    state = {"vision.blocks.0.ffn.fc1.weight": torch.zeros(30, 10), "text.blocks.0.ffn.fc1.weight": torch.zeros(10, 10),
             "vision.head.weight": torch.zeros(5, 5)}  # not prunable (not in PRUNED)
    s = P.equal_count_sparsities(state, 0.8)
    assert s["text"] == pytest.approx(0.8) and s["vision"] == pytest.approx(0.8 * 100 / 300)
    assert s["vision"] * 300 == pytest.approx(s["text"] * 100)


def test_pipeline_through_spec_hits_sparsity_per_modality(tmp_path):
    torch.set_num_threads(1)
    cfg = P.SPEC.make_config(dict(n_train=200, n_test=60, n_calib=40, n_calib_text=40, id_blocks=4, steps=3,
                                  batch_size=16, d_vision=16, d_text=16, vision_layers=1, text_layers=1,
                                  embed_dim=16, sparsities=[0.5], compare_level=0.5, stress_level=0, ft_steps=4,
                                  ft_warmup=1, ft_final=1, eval_batch=32, log_every=1))
    data = P.SPEC.prepare(cfg, _synthetic_res(tmp_path))
    assert data["x_train"].dtype == torch.uint8
    assert P.SPEC.variants == ("dual",)
    with pytest.raises(ValueError):
        P.SPEC.train(cfg, data, "id_weighted", 0, None)
    logs = []
    model = P.SPEC.train(cfg, data, "dual", 0, lambda step, **m: logs.append(m))
    assert logs and all(math.isfinite(m["train/loss"]) for m in logs)
    dense = P.SPEC.evaluate(cfg, model, data)
    assert 0 <= dense["acc"] <= 100 and dense["sparsity_v"] == 0 and dense["sparsity_t"] == 0
    comp = P.SPEC.compress(cfg, model, data, "dual", 0)
    assert set(comp) == {f"{c}_0.50" for c in P.CRITERIA} | {"vision_equal", "text_equal"}
    m = {lv: P.SPEC.evaluate(cfg, c, data) for lv, c in comp.items()}
    for crit in P.CRITERIA:  # joint: 50% over both towers' prunable matrices together
        st = comp[f"{crit}_0.50"]["state"]
        w = P.prunable_weights(st, include=P.PRUNED)
        assert sum(int((t == 0).sum()) for t in w.values()) == pytest.approx(0.5 * sum(t.numel() for t in w.values()), abs=2)
        assert m[f"{crit}_0.50"]["nonzero_params"] < dense["nonzero_params"]
        assert m[f"{crit}_0.50"]["sparsity_gap"] == pytest.approx(m[f"{crit}_0.50"]["sparsity_t"] - m[f"{crit}_0.50"]["sparsity_v"])
    assert m["uniform_magnitude_0.50"]["sparsity_gap"] == pytest.approx(0.0, abs=1e-3)  # same sparsity everywhere
    assert m["vision_equal"]["sparsity_t"] == 0 and m["text_equal"]["sparsity_v"] == 0
    assert m["text_equal"]["sparsity_t"] == pytest.approx(0.5, abs=1e-3)
    assert m["vision_equal"]["pruned_params"] == pytest.approx(m["text_equal"]["pruned_params"], abs=8)  # equal counts
    row = {"paper": "id_vl_pruning", "variant": "dual", "seed": 0, **{f"dense/{k}": v for k, v in dense.items()}}
    for lv, mm in m.items():
        row.update({f"compressed:{lv}/{k}": v for k, v in mm.items()})
    torch.save(model, tmp_path / "m.pt")
    torch.load(tmp_path / "m.pt", weights_only=True)
    derived = P.SPEC.derive(cfg, [row])
    by = {r["variant"]: r for r in derived}
    assert by["dual|vision_only"]["compressed:equal/acc"] == row["compressed:vision_equal/acc"]
    assert by["dual|importance"]["compressed:0.50/acc"] == row["compressed:importance_0.50/acc"]
    assert by["dual|id_weighted"]["dense/acc"] == dense["acc"]
    assert "compressed:0.50/acc" not in by["dual|text_only"]
    for c in P.SPEC.comparisons(cfg):
        assert c.method in by and c.baseline in by and c.column in by[c.method] and c.column in by[c.baseline], c.text


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


def test_id_spread_hand_computed():
    """id_cv = population std / mean, id_max_ratio = max / min over every pruned matrix of both towers."""
    out = P.id_spread({"vision": {"a": 2.0, "b": 4.0}, "text": {"c": 6.0}})
    assert out["id_cv"] == pytest.approx(math.sqrt(8 / 3) / 4.0)  # mean 4, var (4 + 0 + 4) / 3
    assert out["id_max_ratio"] == pytest.approx(3.0)
    assert P.id_spread({"vision": {"a": 5.0, "b": 5.0}})["id_cv"] == 0.0


def test_equal_ids_make_id_weighting_the_plain_importance():
    """The mechanism gate's premise: with one global threshold only the ratios of the layer IDs matter."""
    gen = torch.Generator().manual_seed(1)
    params = {"a": torch.randn(8, 16, generator=gen), "b": torch.randn(32, 8, generator=gen)}
    platon = P.PlatonScore(params, 0.85, 0.95, 1)
    for step in range(3):
        platon.update(step, params, {n: torch.randn(p.shape, generator=gen) for n, p in params.items()})
    same = P.criterion_masks("id_weighted", params, platon, {"a": 7.0, "b": 7.0}, 0.5)
    plain = P.criterion_masks("importance", params, platon, {}, 0.5)
    assert all(torch.equal(same[n], plain[n]) for n in params)


def test_headline_is_id_weighted_vs_importance_with_the_id_spread_gate():
    cfg = P.SPEC.make_config({})
    head = [c for c in P.comparisons(cfg) if c.role == "headline"]
    assert len(head) == 1 and head[0].method == "dual|id_weighted" and head[0].baseline == "dual|importance"
    gate = head[0].mechanism_gates[0]
    assert gate.column == "compressed:0.80/id_cv" and gate.above == P.ID_CV_MIN

"""Tests of the OWL paper module (papers/owl.py), Wanda (compress/wanda.py) and the shared sequential
calibration pass (compress/calibration.py). Synthetic data and tiny random models only."""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from paperflow.compress.calibration import (
    hf_llama_inputs,
    linear_sublayers,
    sequential_pass,
    transformer_lm_inputs,
)
from paperflow.compress.wanda import row_prune_mask, update_scaler_row, wanda_mask, wanda_score
from paperflow.nn.transformer import TransformerConfig, TransformerLM
from paperflow.papers import owl
from paperflow.registry import get_paper
from tiny_llama import tiny_llama, tiny_resources

transformers = pytest.importorskip("transformers")


# -------------------------------------------------------------------------------------------- Wanda
def test_scaler_row_is_wrappedgpt_running_average():
    # two samples of one token each: scaler_row = mean over samples of x^2 = ((1+9)/2, (4+0)/2, (0+4)/2)
    s, n = torch.zeros(3), 0
    s, n = update_scaler_row(s, n, torch.tensor([[[1.0, 2.0, 0.0]]]))
    s, n = update_scaler_row(s, n, torch.tensor([[[3.0, 0.0, 2.0]]]))
    assert n == 2
    assert torch.allclose(s, torch.tensor([5.0, 2.0, 2.0]))
    # a batch of both at once gives the same running average
    b, nb = update_scaler_row(torch.zeros(3), 0, torch.tensor([[[1.0, 2.0, 0.0]], [[3.0, 0.0, 2.0]]]))
    assert nb == 2 and torch.allclose(b, s)
    # within one sample the tokens are summed (WrappedGPT's ||X_j||^2 over the sample's tokens)
    t, _ = update_scaler_row(torch.zeros(3), 0, torch.tensor([[[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]]))
    assert torch.allclose(t, torch.tensor([2.0, 0.0, 0.0]))


def test_wanda_score_hand_computed_2x3():
    w = torch.tensor([[1.0, -2.0, 3.0], [-4.0, 5.0, -6.0]])
    scaler = torch.tensor([5.0, 2.0, 2.0])
    r5, r2 = math.sqrt(5), math.sqrt(2)
    expected = torch.tensor([[r5, 2 * r2, 3 * r2], [4 * r5, 5 * r2, 6 * r2]])
    assert torch.allclose(wanda_score(w, scaler), expected)
    # 1/3 sparsity prunes int(3 / 3) = 1 weight per row: the lowest score of each row (column 0 in
    # row 0: sqrt5 = 2.24 < 2.83; column 0 in row 1: 4 sqrt5 = 8.94 > 5 sqrt2 = 7.07 -> column 1)
    mask = wanda_mask(w, scaler, 1 / 3 + 1e-9)
    assert mask.tolist() == [[False, True, True], [True, False, True]]


@pytest.mark.parametrize("sparsity", [0.0, 0.3, 0.5, 0.7, 0.75])
def test_row_prune_mask_exact_count_per_row(sparsity):
    score = torch.rand(7, 10, generator=torch.Generator().manual_seed(0))
    mask = row_prune_mask(score, sparsity)
    assert ((~mask).sum(dim=1) == int(10 * sparsity)).all()
    for row, keep in zip(score, mask):  # the pruned scores are the row's lowest
        if (~keep).any() and keep.any():
            assert row[~keep].max() <= row[keep].min()


@pytest.mark.parametrize("sparsity", [0.0, 0.3, 0.5, 0.7, 0.99])
def test_fast_masks_equal_the_shared_ones_bit_for_bit(sparsity):
    """owl's fast_keep_mask_lowest (np.partition, tie-break only where needed) = compress.magnitude.keep_mask_lowest,
    with unique scores, with many ties (a 4-level grid, like the Q4_1 weights) and for both mask kinds of owl."""
    from paperflow.compress.magnitude import keep_mask_lowest, layer_magnitude_mask

    g = torch.Generator().manual_seed(1)
    unique = torch.rand(37, 53, generator=g)
    ties = torch.randint(0, 4, (37, 53), generator=g).float() / 4
    for scores in (unique, ties, unique.double()):
        for n_prune in {0, 1, int(53 * sparsity), 52, 53}:
            assert torch.equal(owl.fast_keep_mask_lowest(scores, n_prune), keep_mask_lowest(scores, n_prune))
    weight = torch.randint(-8, 8, (24, 40), generator=g).float() * 0.01  # ties in |w|
    scaler = torch.rand(40, generator=g)
    assert torch.equal(owl.magnitude_mask(weight, sparsity), layer_magnitude_mask(weight, sparsity))
    assert torch.equal(owl.wanda_mask(weight, scaler, sparsity), wanda_mask(weight, scaler, sparsity))


# ---------------------------------------------------------------------------------------------- OWL
def test_outlier_ratio_pools_the_block():
    # pooled mean = (7 * 1 + 13) / 8 = 2.5, threshold 5 * 2.5 = 12.5: one of 8 scores -> 12.5 %.
    # (a per-linear mean, 4 for the second tensor, would give threshold 20 and 0 %.)
    scores = [torch.ones(2, 2), torch.tensor([[1.0, 1.0], [1.0, 13.0]])]
    assert owl.outlier_ratio(scores, 5.0) == pytest.approx(12.5)


def test_owl_formula_hand_computed():
    # D = [0, 1, 2]: r = [0, .08, .16], mean .08 -> density [.22, .30, .38] -> sparsity [.78, .70, .62]
    assert owl.owl_layer_sparsities([0.0, 1.0, 2.0], 0.7, 0.08) == pytest.approx([0.78, 0.70, 0.62])
    # skewed D = [1, 2, 3, 6]: r = [0, .032, .064, .16], mean .064 -> code: [.764, .732, .700, .604]
    code = owl.owl_layer_sparsities([1.0, 2.0, 3.0, 6.0], 0.7, 0.08, enforce_bound=False)
    assert code == pytest.approx([0.764, 0.732, 0.700, 0.604])
    # max |dev| = .096 > lambda: deviations shrunk by .08 / .096
    bounded = owl.owl_layer_sparsities([1.0, 2.0, 3.0, 6.0], 0.7, 0.08)
    assert bounded == pytest.approx([0.7 + 0.064 * 5 / 6, 0.7 + 0.032 * 5 / 6, 0.7, 0.62])


def test_outlier_spread_hand_computed_and_the_normalisation_it_guards():
    # D = [1.0, 1.1, 1.3] %: spread 0.3 points, mean 1.133 -> relative 0.265
    out = owl.outlier_spread([1.0, 1.1, 1.3])
    assert out["outlier_spread"] == pytest.approx(0.3) and out["outlier_rel_spread"] == pytest.approx(0.3 / (3.4 / 3))
    # why the gate is on the absolute spread: a 1000x smaller spread gives the same block sparsities
    tiny = owl.owl_layer_sparsities([1.0, 1.0001, 1.0003], 0.7, 0.08)
    assert tiny == pytest.approx(owl.owl_layer_sparsities([1.0, 1.1, 1.3], 0.7, 0.08))
    assert owl.outlier_spread([1.0, 1.0001, 1.0003])["outlier_spread"] < owl.OUTLIER_SPREAD_MIN


def test_headline_mechanism_gate_and_fidelity():
    cfg = get_paper("owl").make_config({})
    head = [r for r in owl.comparisons(cfg) if r.role == "headline"][0]
    gate = head.mechanism_gates[0]
    assert (gate.variant, gate.column, gate.above) == ("owl", "compressed:0.70/outlier_spread", owl.OUTLIER_SPREAD_MIN)
    assert head.fidelity == "reconstruction" and head.refuted_if


@pytest.mark.parametrize("seed", range(5))
def test_owl_sparsities_mean_bound_monotone(seed):
    rng = np.random.default_rng(seed)
    d = rng.exponential(size=30) * 3  # skewed outlier ratios (%)
    target, lam = 0.7, 0.08
    s = np.array(owl.owl_layer_sparsities(list(d), target, lam))
    assert s.mean() == pytest.approx(target)
    assert np.abs(s - target).max() <= lam + 1e-12
    order = np.argsort(d)
    assert np.all(np.diff(s[order]) <= 1e-12)  # more outliers -> lower sparsity
    assert owl.owl_layer_sparsities([2.0, 2.0], 0.6, 0.08) == [0.6, 0.6]  # no spread: uniform


# -------------------------------------------------------------------------------------- calibration
def _zero_block(_i, block, _stats):
    if _i == 0:
        for lin in linear_sublayers(block).values():
            lin.weight.zero_()


def test_sequential_pass_feeds_pruned_outputs_paperflow_block():
    torch.manual_seed(0)
    lm = TransformerLM(TransformerConfig(vocab_size=17, block_size=8, n_layer=2, n_head=2, d_model=16)).eval()
    idx = torch.randint(0, 17, (3, 8))
    inp = transformer_lm_inputs(lm, idx)
    dense_copy = copy.deepcopy(lm)
    seen, seen_dense = {}, {}

    def record(i, block, stats):
        seen[i] = {k: v.clone() for k, v in stats.items()}
        _zero_block(i, block, stats)

    sequential_pass(inp.blocks, inp.hidden, inp.kwargs, record, chunk=2)
    # block 0 has all-zero linears -> output = residual = its input; block 1's qkv sees norm1(embeddings)
    expected = lm.blocks[1].norm1(inp.hidden).pow(2).sum(dim=1).mean(dim=0)  # (D,)
    assert set(seen[1]) == {"attn.qkv", "attn.proj", "mlp.0", "mlp.2"}
    assert torch.allclose(seen[1]["attn.qkv"], expected, atol=1e-5)
    # without pruning block 1 is calibrated on block 0's dense outputs instead
    sequential_pass(list(dense_copy.blocks), inp.hidden, {}, lambda i, b, st: seen_dense.setdefault(i, st))
    assert not torch.allclose(seen_dense[1]["attn.qkv"], expected, atol=1e-3)


def test_hf_adapter_matches_model_and_is_sequential():
    lm = tiny_llama(max_positions=64)
    ids = torch.randint(0, 32, (5, 12))
    inp = hf_llama_inputs(lm, ids)
    with torch.no_grad():
        ref = lm.model(ids).last_hidden_state
        out = sequential_pass(inp.blocks, inp.hidden, inp.kwargs, lambda *a: None, chunk=2, rerun=False)
        assert torch.allclose(lm.model.norm(out), ref, atol=1e-5)
        seen = {}

        def record(i, block, stats):
            seen[i] = stats
            _zero_block(i, block, stats)

        sequential_pass(inp.blocks, inp.hidden, inp.kwargs, record, chunk=2)
        h = lm.model.layers[1].input_layernorm(inp.hidden)  # block 0 pruned to zero -> residual only
    assert set(seen[0]) == {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                            "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}
    assert torch.allclose(seen[1]["self_attn.q_proj"], h.pow(2).sum(dim=1).mean(dim=0), atol=1e-5)


# ------------------------------------------------------------------------------------- smoke path
def test_owl_spec_smoke_path_tiny_llama(tmp_path):
    spec = get_paper("owl")
    cfg = spec.make_config({"calib_samples": 4, "calib_len": 16, "eval_windows": 2, "eval_len": 16, "batch": 2,
                            "sparsegpt_blocksize": 8})
    data = spec.prepare(cfg, tiny_resources(tmp_path, max_positions=64))
    assert data["eval_book"] == "Persuasion" and data["eval_tokens"].dim() == 1
    assert torch.equal(owl.calibration_windows(data, cfg, 1), owl.calibration_windows(data, cfg, 1))
    # the seed draws the evaluation windows too: non-overlapping windows of the held-out novel
    w0, w1 = owl.eval_windows(data, cfg, 0), owl.eval_windows(data, cfg, 1)
    assert w0.shape == (2, 16) and torch.equal(w0, owl.eval_windows(data, cfg, 0)) and not torch.equal(w0, w1)
    starts = [int(torch.nonzero((data["eval_tokens"].unfold(0, 16, 16) == w).all(1))[0]) for w in w0]
    assert len(set(starts)) == 2
    results = {}
    for variant in spec.variants:
        model = spec.train(cfg, data, variant, 0, lambda *a, **k: None)
        comp = spec.compress(cfg, model, data, variant, 0)
        assert list(comp) == ["0.50", "0.60", "0.70"]
        dense = spec.evaluate(cfg, model, data)
        assert math.isfinite(dense["ppl"]) and dense["sparsity"] < 0.01
        for level, entry in comp.items():
            s = float(level)
            for name, packed in entry["masks"].items():
                assert packed.dtype == torch.uint8
                keep = owl._unpack(packed, entry["shapes"][name])
                block = int(name.split(".")[2])
                if variant == "magnitude":  # whole matrix: exactly int(numel * s) pruned
                    assert int((~keep).sum()) == int(keep.numel() * s)
                elif variant == "sparsegpt":  # exactly int(rows * cols * s) per block of 8 columns
                    assert int((~keep[:, :8]).sum()) == int(keep.shape[0] * 8 * s)
                    assert entry["values"][name].shape == (int(keep.sum()),)
                else:  # Wanda: exactly int(in * s_l) per output row
                    assert ((~keep).sum(dim=1) == int(keep.shape[1] * entry["block_sparsity"][block])).all()
            if variant in ("owl", "owl_code"):
                assert np.mean(entry["block_sparsity"]) == pytest.approx(s)
                assert len(entry["outlier_ratio"]) == 2
                code = owl.owl_layer_sparsities(entry["outlier_ratio"], s, cfg.owl_lambda, enforce_bound=False)
                if variant == "owl":
                    assert max(abs(b - s) for b in entry["block_sparsity"]) <= cfg.owl_lambda + 1e-9
                else:
                    assert entry["block_sparsity"] == pytest.approx(code)
            m = spec.evaluate(cfg, entry, data)
            assert math.isfinite(m["ppl"]) and abs(m["sparsity"] - s) < 0.05
            assert m["max_dev"] == pytest.approx(max(abs(b - s) for b in entry["block_sparsity"]))
            if variant in ("owl", "owl_code"):  # the mechanism gate's quantity, from the run's own D
                d = entry["outlier_ratio"]
                assert m["outlier_spread"] == pytest.approx(max(d) - min(d))
            else:
                assert "outlier_spread" not in m
            results[(variant, level)] = m
    # SparseGPT's stored fp16 values rebuild the model it pruned in memory (up to fp16 rounding)
    lm, _ = owl.dense_lm(data["model_dir"])
    calib = owl.calibration_windows(data, cfg, 0)
    owl.sparsegpt_prune_lm(lm, calib, [0.7, 0.7], cfg)
    direct = owl.perplexity(lm, owl.eval_windows(data, cfg, 0), cfg.batch)
    assert results[("sparsegpt", "0.70")]["ppl"] == pytest.approx(direct, rel=1e-3)
    rows = spec.comparisons(cfg)
    assert [r.role for r in rows].count("headline") == 1
    assert {c.column for c in rows} == {"compressed:0.70/ppl", "compressed:0.70/max_dev", "compressed:0.70/sparsity"}
    from paperflow.contract import logged_problems
    columns = {f"compressed:{lv}/{k}" for (v, lv), m in results.items() for k in m}
    assert logged_problems(spec, cfg, columns) == []  # every mechanism gate's column is logged

"""Tests of the LoCoCo paper module (papers/lococo.py): cache-policy math on analytic cases, the chunked
forward against an unchunked Hugging Face forward, and the spec path on a tiny random Llama (no resources)."""
from __future__ import annotations

import math

import pytest
import torch

from paperflow.papers import lococo as P
from paperflow.spec import ConfigError
from tiny_llama import tiny_llama, tiny_resources

transformers = pytest.importorskip("transformers")


def _cfg(**kw):
    base = dict(cache_size=8, chunk=4, sink_grid=(1, 2, 3), recent_grid=(2, 3, 4), local_len=2, kernel_size=3, train_steps=2,
                train_len=20, train_batch=2, warmup=0, context_lens=(16, 32), eval_passages=2, eval_batch=2, log_every=1,
                val_len=16)
    return P.Config(**{**base, **kw})


# ------------------------------------------------------------------------------------- LoCoCo math
def test_mixing_weights_are_convex_and_fusing_identical_tokens_returns_the_token():
    torch.manual_seed(0)
    comp = P.Compressor(head_dim=4, n_slots=3, kernel_size=3)
    k, v = torch.randn(2, 2, 7, 4), torch.randn(2, 2, 7, 4)
    w = comp.mixing_weights(k, v)
    assert w.shape == (2, 2, 3, 7)
    assert (w >= 0).all() and torch.allclose(w.sum(-1), torch.ones(2, 2, 3), atol=1e-6)
    # rows of W' = (1 - lambda) R + lambda W also sum to 1 (for any lambda), so 10 copies of one token fuse
    # back into that token, in every slot
    tok_k, tok_v = torch.randn(4), torch.randn(4)
    kk, vv = tok_k.expand(1, 1, 10, 4).clone(), tok_v.expand(1, 1, 10, 4).clone()
    score = torch.rand(1, 1, 10)
    with torch.no_grad():
        comp.normalizer.fill_(1.7)
        k2, v2 = P.lococo_compress(kk, vv, score, comp, size=5)
    assert k2.shape == (1, 1, 5, 4)
    assert torch.allclose(k2, tok_k.expand(1, 1, 5, 4), atol=1e-5)
    assert torch.allclose(v2, tok_v.expand(1, 1, 5, 4), atol=1e-5)


def test_residual_weights_one_hot_top_scores_in_position_order():
    score = torch.tensor([[[0.1, 0.9, 0.3, 0.8, 0.0]]])
    r = P.residual_weights(score, 2)
    assert r.tolist() == [[[[0, 1, 0, 0, 0], [0, 0, 0, 1, 0]]]]


def test_lococo_compress_keeps_heavy_hitters_and_lambda_zero_is_pure_selection():
    torch.manual_seed(1)
    comp = P.Compressor(head_dim=2, n_slots=2, kernel_size=3)
    k, v = torch.randn(1, 1, 6, 2), torch.randn(1, 1, 6, 2)
    score = torch.tensor([[[5.0, 0.1, 4.0, 3.0, 0.2, 2.0]]])
    with torch.no_grad():
        comp.normalizer.zero_()
        k2, v2 = P.lococo_compress(k, v, score, comp, size=4)
    # keep = 4 - 2 = 2 heavy hitters (tokens 0, 2), then the one-hot fusion picks the top-2 of the rest (3, 5)
    assert torch.allclose(k2[0, 0], k[0, 0, [0, 2, 3, 5]]) and torch.allclose(v2[0, 0], v[0, 0, [0, 2, 3, 5]])


def test_lococo_compressor_receives_gradient():
    comp = P.Compressor(head_dim=2, n_slots=2, kernel_size=3)
    k, v, score = torch.randn(1, 2, 6, 2), torch.randn(1, 2, 6, 2), torch.rand(1, 2, 6)
    k2, v2 = P.lococo_compress(k, v, score, comp, size=3)
    (k2.square().sum() + v2.sum()).backward()
    assert comp.conv.weight.grad is not None and comp.normalizer.grad is not None
    assert comp.normalizer.grad.abs().item() > 0


# -------------------------------------------------------------------------------- eviction baselines
def test_sink_window_keeps_exactly_sinks_and_last_tokens():
    assert P.sink_window_index(12, 5, 2).tolist() == [0, 1, 9, 10, 11]
    assert P.sink_window_index(4, 5, 2).tolist() == [0, 1, 2, 3]
    assert P.sink_window_index(12, 5, 0).tolist() == [7, 8, 9, 10, 11]


def test_h2o_keeps_highest_scores_plus_recent():
    score = torch.tensor([[[0.5, 9.0, 0.1, 7.0, 0.2, 0.3, 0.0, 0.0]]])
    # recent = 2 -> tokens 6, 7; heavy hitters: top 2 of tokens 0..5 -> 1 and 3
    assert P.h2o_index(score, 4, 2).tolist() == [[[1, 3, 6, 7]]]
    assert P.h2o_index(score, 3, 0).tolist() == [[[0, 1, 3]]]


@pytest.mark.parametrize("policy", ["sink_window", "h2o", "lococo"])
def test_cache_stays_at_fixed_size_after_any_number_of_chunks(policy):
    lm, cfg = tiny_llama(frozen=True), _cfg()
    comps = P.build_compressors(lm, cfg, 0)
    cache = P.KVCache(lm.config.num_hidden_layers, policy, cfg, comps, knob={"sink_window": 2, "h2o": 3}.get(policy, 0))
    ids = torch.randint(0, 32, (2, 40))
    with torch.no_grad():
        for c in range(10):
            P.chunk_forward(lm, ids[:, 4 * c : 4 * c + 4], cache)
            for layer in range(2):  # what the next chunk sees: exactly M slots once M is exceeded
                k, v, _ = cache.past(layer)
                assert k.shape[2] == min(cfg.cache_size, 4 * (c + 1)) and v.shape == k.shape
    # measured peak: [M ; C] per layer, 2 layers, K and V, 2 KV heads of 8 dims, fp32, batch 2
    assert cache.peak_bytes == 2 * 2 * 2 * (8 + 4) * 2 * 8 * 4


# ------------------------------------------------------------------------------ chunked forward
def test_chunked_full_cache_equals_unchunked_causal_attention():
    lm = tiny_llama(frozen=True)
    ids = torch.randint(0, 32, (2, 23))
    with torch.no_grad():
        ref = torch.log_softmax(lm(ids).logits, -1)
        for chunk in (1, 5, 23):
            cache = P.KVCache(2, "full", _cfg(chunk=chunk, train_len=40), None)
            out = torch.cat([P.chunk_forward(lm, ids[:, s : s + chunk], cache) for s in range(0, 23, chunk)], 1)
            assert torch.allclose(torch.log_softmax(out, -1), ref, atol=1e-5)
            assert cache.k[0].shape[2] == 23


def test_streaming_nll_and_fixed_policies_equal_full_before_overflow():
    lm = tiny_llama(frozen=True)
    ids = torch.randint(0, 32, (2, 12))
    cfg = _cfg(cache_size=8, chunk=4)
    full, _ = P.streaming_nll(lm, ids, "full", cfg)
    sink, _ = P.streaming_nll(lm, ids, "sink_window", cfg, knob=2)
    # chunks 0 and 1 see <= 8 held tokens: identical; chunk 2 sees 8 of 8 -> still identical
    assert torch.allclose(full, sink, atol=1e-6)
    long = torch.randint(0, 32, (2, 24))
    full, _ = P.streaming_nll(lm, long, "full", cfg)
    sink, _ = P.streaming_nll(lm, long, "sink_window", cfg, knob=2)
    assert torch.allclose(full[:, :11], sink[:, :11], atol=1e-6) and not torch.allclose(full, sink)


# ---------------------------------------------------------------------------------- spec path
def test_lococo_spec_path_tiny_llama(tmp_path):
    spec = P.SPEC
    cfg = spec.make_config(dict(cache_size=8, chunk=4, sink_grid=[1, 2, 4], recent_grid=[2, 3, 5], local_len=2, kernel_size=3,
                                train_steps=3, train_len=20, train_batch=2, warmup=0, context_lens=[16, 32], eval_passages=2,
                                val_len=24, eval_batch=1, log_every=1, lr_grid=[0.001, 0.01, 0.1]))
    data = spec.prepare(cfg, tiny_resources(tmp_path))
    assert data["eval_book"] == "Persuasion" and data["eval_windows"].shape[1] == 32
    # validation and test passages of a seed are disjoint windows
    test, val = P.passages(data, cfg, 0), P.passages(data, cfg, 0, "val")
    assert val.shape == (1, 24) and not any(torch.equal(val[0], t[:24]) for t in test)
    metrics = {}
    for variant in spec.variants:
        logged = []
        model = spec.train(cfg, data, variant, 0, lambda step, **m: logged.append(m))
        assert spec.compress is None and spec.compression_exempt  # the cache policy is the compression
        metrics[variant] = spec.evaluate(cfg, model, data)
        assert all(math.isfinite(v) for v in metrics[variant].values())
        if variant not in ("full", "lococo_init"):  # every fixed-size policy tuned its knob on a 3-value grid
            scores = [metrics[variant][f"val_score@{i}"] for i in range(3)]
            assert scores.index(min(scores)) == metrics[variant][[k for k in metrics[variant] if k.endswith("_index")][0]]
            assert "grid_edge" in metrics[variant]
        if variant == "lococo":
            # the lr was tuned once in prepare (on the reserved windows); the seed trains train_steps at it
            assert metrics[variant]["tuned_lr"] == data["lococo_tuning"]["tuned_lr"]
            assert logged and "state" in model and max(len(logged), 1) >= 1
            got = metrics[variant]
            assert got["train_gain"] == pytest.approx((got["val_ppl_init"] - got["val_ppl_trained"]) / got["val_ppl_init"])
            assert got["comp_moved"] > 0  # training moved the compressors from their init
            init = P.build_compressors(P.frozen_smollm2(data["model_dir"]), cfg, 0)
            assert P.val_ppl(P.frozen_smollm2(data["model_dir"]), data, cfg, 0, "lococo", init) == pytest.approx(got["val_ppl_init"])
            again = spec.train(cfg, data, variant, 0, lambda *a, **k: None)  # deterministic given the seed
            assert all(torch.equal(model["state"][k], again["state"][k]) for k in model["state"])
        if variant == "sink_window":  # the chosen sink count reproduces its validation perplexity
            lm = P.frozen_smollm2(data["model_dir"])
            assert P.val_ppl(lm, data, cfg, 0, "sink_window", knob=model["knob"]) == pytest.approx(min(scores))
    # the untrained control: the same init as LoCoCo's seed, the same cache policy
    assert metrics["lococo_init"]["kv_peak_bytes"] == metrics["lococo"]["kv_peak_bytes"]
    # the reserved tuning windows are never a seed's test or validation passage
    tune_win = P.passages(data, cfg, 0, "tune")
    for seed in range(3):
        for split in ("test", "val"):
            assert not any(torch.equal(w[: tune_win.shape[1]], tune_win[0]) for w in P.passages(data, cfg, seed, split))
    for variant in ("sink_window", "h2o", "lococo", "lococo_init"):
        assert metrics[variant]["kv_growth"] == 1.0
        assert metrics[variant]["kv_peak_bytes"] == metrics["sink_window"]["kv_peak_bytes"]
    assert metrics["full"]["kv_growth"] == 2.0  # 32 vs 16 held tokens
    rows = [{"variant": v, "seed": 0, **{f"dense/{k}": x for k, x in m.items()}} for v, m in metrics.items()]
    view = [r for r in spec.derive(cfg, rows) if r["variant"] == "ref|best_eviction"]
    assert len(view) == 1 and view[0]["dense/ppl"] == min(metrics["sink_window"]["ppl"], metrics["h2o"]["ppl"])
    for c in spec.comparisons(cfg):
        assert c.metric in metrics["lococo"]
    assert "train_gain" in metrics["lococo"] and "grid_edge" in metrics["h2o"] and "grid_edge" in metrics["sink_window"]


def test_config_validation():
    with pytest.raises(ConfigError, match="sink_grid"):
        P.Config(sink_grid=(1, 64))
    with pytest.raises(ConfigError, match="lr_grid"):
        P.Config(lr_grid=(0.1, 0.01))
    with pytest.raises(ConfigError, match="train_len"):
        P.Config(train_len=100)
    with pytest.raises(ConfigError, match="kernel_size"):
        P.Config(kernel_size=4)
    with pytest.raises(ConfigError, match="context_lens"):
        P.Config(context_lens=(512, 256))
    with pytest.raises(ConfigError, match="unknown"):
        P.SPEC.make_config({"cache": 3})


def test_lococo_local_len_keeps_recent_tokens_among_heavy_hitters():
    comp = P.Compressor(head_dim=2, n_slots=2, kernel_size=3)
    k, v = torch.randn(1, 1, 6, 2), torch.randn(1, 1, 6, 2)
    score = torch.tensor([[[5.0, 0.1, 4.0, 3.0, 0.2, 0.0]]])
    with torch.no_grad():
        comp.normalizer.zero_()
        k2, _ = P.lococo_compress(k, v, score, comp, size=4, local_len=1)
    # heavy hitters: the last token (5) + the top-1 of tokens 0..4 (0); fused = top-2 of the rest (2, 3)
    assert torch.allclose(k2[0, 0], k[0, 0, [0, 5, 2, 3]])

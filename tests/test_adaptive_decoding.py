"""Tests of the adaptive-decoding paper module (papers/adaptive_decoding.py): the confidence-increment set on a
hand-made distribution (entropies computed by hand, and the official closed form), the baseline candidate sets,
the diversity metrics on hand-made texts, and the spec path on a tiny random Llama (no real resources)."""
from __future__ import annotations

import math

import pytest
import torch

from paperflow.papers import adaptive_decoding as P
from paperflow.spec import ConfigError
from tiny_llama import tiny_resources

PROBS = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)  # already sorted, V = 4
LOGITS = PROBS.log()[None]  # (1, 4)


def entropy_after(k: int, p: torch.Tensor) -> float:
    """H_k by hand: the top k kept, the rest spread uniformly over the other V - k tokens."""
    v = len(p)
    head = -sum(float(x) * math.log(float(x)) for x in p[:k])
    rest = 1.0 - float(p[:k].sum())
    return head - (rest * math.log(rest / (v - k)) if rest > 0 else 0.0)


def test_confidence_increments_equal_the_entropy_drops_by_hand():
    delta, order = P.confidence_increments(LOGITS)
    assert order.tolist() == [[0, 1, 2, 3]]
    h = [math.log(4)] + [entropy_after(k, PROBS) for k in range(1, 5)]
    want = [(h[k - 1] - h[k]) / math.log2(4) for k in range(1, 5)]
    assert delta[0].tolist() == pytest.approx(want, abs=1e-12)
    # the first increment: H_0 - H_1 = log 4 + 0.5 log 0.5 + 0.5 log(0.5 / 3)
    assert float(delta[0, 0]) == pytest.approx((math.log(4) + 0.5 * math.log(0.5) + 0.5 * math.log(0.5 / 3)) / 2)
    assert bool((delta >= -1e-15).all())  # adding the next most probable token never lowers the confidence


def test_confidence_increments_match_the_official_closed_form():
    """adaptive.py: dConf_k = [p_k log(p_k (V - k) / (1 - S_k)) + (1 - S_k + p_k) log(C / D)] / log2 V."""
    v, s = len(PROBS), PROBS.cumsum(0)
    want = []
    for k in range(1, v):  # k = V is the code's NaN -> 0
        p, sk = float(PROBS[k - 1]), float(s[k - 1])
        c, d = (1 - sk) / (v - k), (1 - sk + p) / (v + 1 - k)
        want.append((p * math.log(p * (v - k) / (1 - sk)) + (1 - sk + p) * math.log(c / d)) / math.log2(v))
    delta, _ = P.confidence_increments(LOGITS)
    assert delta[0, :-1].tolist() == pytest.approx(want, abs=1e-12)


def test_adaptive_set_size_follows_epsilon():
    delta = P.confidence_increments(LOGITS)[0][0]
    # thresholds between consecutive increments give sets of size 1, 2, 3 (the top-1 is always kept)
    assert P.adaptive_set(LOGITS, float(delta[0]) + 1.0)[0].tolist() == [True, False, False, False]
    assert P.adaptive_set(LOGITS, (float(delta[1]) + float(delta[2])) / 2)[0].tolist() == [True, True, False, False]
    assert P.adaptive_set(LOGITS, (float(delta[2]) + float(delta[3])) / 2)[0].tolist() == [True, True, True, False]
    # V = 1000: three equally likely tokens (+ a tail of 1% mass) -> exactly those three; one token of 99% -> it
    # alone (the tail tokens add no confidence: their increments are ~0)
    v = 1000
    three = torch.full((v,), 0.01 / (v - 3)).index_fill(0, torch.arange(3), 0.33)
    one = torch.full((v,), 0.01 / (v - 1)).index_fill(0, torch.tensor([0]), 0.99)
    assert int(P.adaptive_set(three.log()[None], 0.001).sum()) == 3
    assert int(P.adaptive_set(one.log()[None], 0.001).sum()) == 1
    # unsorted logits: the set is expressed in vocabulary order
    shuffled = LOGITS[:, [2, 0, 3, 1]]
    assert P.adaptive_set(shuffled, (float(delta[1]) + float(delta[2])) / 2)[0].tolist() == [False, True, False, True]


def test_baseline_sets_on_the_hand_made_distribution():
    assert P.greedy_set(LOGITS)[0].tolist() == [True, False, False, False]
    assert P.top_k_set(LOGITS, 2)[0].tolist() == [True, True, False, False]
    assert P.top_p_set(LOGITS, 0.79)[0].tolist() == [True, True, False, False]  # 0.5 + 0.3 reaches 0.79
    assert P.top_p_set(LOGITS, 0.81)[0].tolist() == [True, True, True, False]
    # typical: H = 1.1437 nats; |-log p - H| = 0.45, 0.06, 0.75, 1.85 -> order 0.3, 0.5, 0.15, 0.05
    assert P.typical_set(LOGITS, 0.3)[0].tolist() == [False, True, False, False]
    assert P.typical_set(LOGITS, 0.7)[0].tolist() == [True, True, False, False]


def test_text_metrics_by_hand():
    m = P.text_metrics(["a b a b a", "c d e f g"])
    # text 1 bigrams: ab ba ab ba -> 2 unique of 4 -> rep-2 = 0.5; text 2 none repeated; mean 0.25
    assert m["rep_2"] == pytest.approx(0.25)
    # trigrams of text 1: aba bab aba -> rep-3 = 1/3; 4-grams: abab baba -> 0
    assert m["rep_3"] == pytest.approx((1 / 3) / 2)
    assert m["rep_4"] == pytest.approx(0.0)
    assert m["diversity"] == pytest.approx(0.75 * (1 - 1 / 6) * 1.0)
    assert m["distinct_1"] == pytest.approx(7 / 10)  # a b c d e f g over 10 words
    assert m["distinct_2"] == pytest.approx(6 / 8)  # ab ba (text 1) + cd de ef fg


def test_config_validation():
    with pytest.raises(ConfigError):
        P.Config(top_p=0.0)
    with pytest.raises(ConfigError):
        P.Config(sources=("wikipedia",))
    with pytest.raises(ConfigError):
        P.Config(n_prompts=5)  # not a multiple of the two sources
    with pytest.raises(ConfigError):
        P.Config(gen_tokens=3)


def test_spec_path_on_a_tiny_llama(tmp_path):
    res = tiny_resources(tmp_path)
    cfg = P.Config(sources=("austen",), pieces_per_source=6, piece_chars=200, prompt_tokens=6, gen_tokens=8,
                   n_prompts=4, batch=3, embed_batch=3)
    data = P.prepare(cfg, res)
    assert data["windows_austen"].shape[1] == 14
    logged = []
    rows = {}
    for v in P.VARIANTS:
        model = P.train(cfg, data, v, 0, lambda step, **kw: logged.append(kw))
        assert model["generated"].shape == (4, 8)
        assert bool((model["set_sizes"] >= 1).all())
        rows[v] = P.evaluate(cfg, model, data)
        # the NLLs recorded while generating are the terms of a separate forward's perplexity (KV cache = full pass)
        lm = P.frozen_smollm2(data["model_dir"])
        prompts = model["windows"][:, : cfg.prompt_tokens]
        assert rows[v]["ppl"] == pytest.approx(P.continuation_ppl(lm, prompts, model["generated"], 3), rel=1e-4)
    assert rows["greedy"]["set_size"] == 1.0
    assert rows["top_k"]["set_size"] == min(cfg.top_k, 32)  # the tiny vocabulary is smaller than k
    for m in rows.values():
        assert 0 <= m["diversity"] <= 1 and -1 <= m["coherence"] <= 1 and m["ppl"] > 0
    # the same seed gives the same prompts and samples (paired comparisons); another seed other prompts
    again = P.train(cfg, data, "adaptive", 0, lambda *a, **k: None)
    assert torch.equal(again["generated"], P.train(cfg, data, "adaptive", 0, lambda *a, **k: None)["generated"])
    assert not torch.equal(P.seed_prompts(cfg, data, 0), P.seed_prompts(cfg, data, 1))
    assert logged and "set_size" in logged[0]
    assert {c.method for c in P.comparisons(cfg)} == {"adaptive"}

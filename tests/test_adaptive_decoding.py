"""Tests of the adaptive-decoding paper module (papers/adaptive_decoding.py): the confidence-increment set on a
hand-made distribution (entropies computed by hand, and the official closed form), the exact top-K shortcut of the adaptive set
(against the full sort, and the bound dConf_k <= p_k ln 2 it rests on), the baseline candidate sets, the diversity
metrics on hand-made texts, the pre-declared Pareto statistic by hand, the int8 kernel layer, and the spec path
(int8 stage and derive included) on a tiny random Llama (no real resources)."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from paperflow.papers import adaptive_decoding as P
from paperflow.spec import ConfigError
from tiny_llama import tiny_resources

PROBS = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)  # already sorted, V = 4
LOGITS = PROBS.log()[None]  # (1, 4)


@torch.no_grad()
def continuation_ppl(lm, prompts: torch.Tensor, conts: torch.Tensor, batch: int) -> float:
    """exp(mean NLL of the continuation tokens given the prompt) by a second full forward (checks the recorded NLLs)."""
    nll = []
    for i in range(0, prompts.shape[0], batch):
        ids = torch.cat([prompts[i : i + batch], conts[i : i + batch]], 1)
        lg = lm(input_ids=ids).logits[:, prompts.shape[1] - 1 : -1].float()
        nll.append(F.cross_entropy(lg.reshape(-1, lg.shape[-1]), conts[i : i + batch].reshape(-1), reduction="none"))
    return float(torch.exp(torch.cat(nll).mean()))


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
    assert P.top_p_set(LOGITS, 0.79)[0].tolist() == [True, True, False, False]  # 0.5 + 0.3 reaches 0.79
    assert P.top_p_set(LOGITS, 0.81)[0].tolist() == [True, True, True, False]
    # typical: H = 1.1437 nats; |-log p - H| = 0.45, 0.06, 0.75, 1.85 -> order 0.3, 0.5, 0.15, 0.05
    assert P.typical_set(LOGITS, 0.3)[0].tolist() == [False, True, False, False]
    assert P.typical_set(LOGITS, 0.7)[0].tolist() == [True, True, False, False]


def _random_logits(n=24, v=5000, seed=0):
    """Peaked, flat and in-between rows over a vocabulary of v (temperatures 0.3 .. 3)."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(n, v, generator=g, dtype=torch.float64) * 3
    return base / torch.linspace(0.3, 3.0, n, dtype=torch.float64)[:, None]


def test_confidence_increment_is_bounded_by_p_ln2():
    """The bound behind the top-K shortcut: dConf_k <= p_k ln 2 for every sorted position."""
    logits = torch.cat([_random_logits(), LOGITS.expand(1, 4).repeat(1, 1250)], 0)
    delta, order = P.confidence_increments(logits)
    p = logits.softmax(-1).gather(-1, order)
    assert bool((delta <= p * math.log(2) + 1e-12).all())


@pytest.mark.parametrize("eps", [0.001, 0.0003, 0.01, 0.05])
def test_adaptive_top_k_shortcut_equals_the_full_sort(eps):
    logits = _random_logits(v=5000, seed=1)
    k = P.adaptive_top(eps, 5000)
    assert k == min(5000, int(math.log(2) / eps) + 1)
    full_delta, _ = P.confidence_increments(logits)
    fast_delta, _ = P.confidence_increments(logits, k)
    assert torch.allclose(fast_delta, full_delta[:, :k], rtol=0, atol=1e-12)
    assert torch.equal(P.adaptive_set(logits, eps), P.adaptive_set(logits, eps, top=5000))
    assert P.adaptive_top(0.0, 5000) == 5000


@pytest.mark.parametrize("top", [20, 300, 5000])
def test_top_p_and_typical_partial_sort_equal_the_full_sort(top):
    """Sorting only the top keys is exact: rows whose top keys hold the mass use them, the others the full sort
    (top = 20 sends most rows to the fallback, 300 mixes both, 5000 = V is the full sort)."""
    logits = _random_logits(v=5000, seed=2)
    for fn, x in ((P.top_p_set, 0.95), (P.typical_set, 0.9), (P.top_p_set, 0.5)):
        assert torch.equal(fn(logits, x, top=top), fn(logits, x, top=5000))
    assert torch.equal(P.top_p_set(LOGITS, 0.79, top=2), P.top_p_set(LOGITS, 0.79, top=4))


def test_pareto_gap_by_hand_and_derive():
    cfg = P.Config(div_margin=0.05)
    a = {"dense/coherence": 0.30, "dense/diversity": 0.96}
    tp = {"dense/coherence": 0.25, "dense/diversity": 1.00}
    ty = {"dense/coherence": 0.28, "dense/diversity": 0.98}
    # terms: 0.05, 0.96 - 0.95 = 0.01, 0.02, 0.96 - 0.931 = 0.029 -> min 0.01
    assert P.pareto_gap(cfg, a, [tp, ty]) == pytest.approx(0.01)
    assert P.pareto_gap(cfg, {**a, "dense/diversity": 0.90}, [tp, ty]) == pytest.approx(-0.05)  # diversity too low
    assert P.pareto_gap(cfg, {**a, "dense/coherence": 0.27}, [tp, ty]) == pytest.approx(-0.01)  # less coherent than typical
    rows = [{"variant": v, "seed": s, **m} for s in (0, 1) for v, m in (("adaptive", a), ("top_p", tp), ("typical", ty))]
    out = P.derive(cfg, rows)
    assert [r["dense/pareto"] for r in out if r["variant"] == "adaptive"] == pytest.approx([0.01, 0.01])
    assert {r["dense/pareto"] for r in out if r["variant"] != "adaptive"} == {0.0}
    assert all("compressed:int8/pareto" not in r for r in out)  # no int8 columns given


def test_int8_linear_equals_the_dequantized_linear():
    from paperflow.compress.int8 import Int8Linear, fake_quantize, int8_kernel_model

    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 48)
    x = torch.randn(3, 5, 64)
    ref = torch.nn.functional.linear(x, fake_quantize(lin.weight.detach()), lin.bias.detach())
    assert torch.allclose(Int8Linear(lin)(x), ref, atol=1e-4)
    net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    net8 = int8_kernel_model(net, exclude=("2",))
    assert isinstance(net8[0], Int8Linear) and isinstance(net8[2], torch.nn.Linear) and isinstance(net[0], torch.nn.Linear)


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
    with pytest.raises(ConfigError):
        P.Config(div_margin=1.0)


def test_frontier_gain_by_hand_and_derive():
    pts = [(0.80, 0.30), (0.90, 0.20), (0.95, 0.10)]  # (diversity, coherence) of top-p 0.70 / 0.85 / 0.95
    assert P.frontier_gain(pts, 0.85, 0.30) == (pytest.approx(0.30 - 0.25), True)  # midway: frontier 0.25
    assert P.frontier_gain(list(reversed(pts)), 0.925, 0.10) == (pytest.approx(0.10 - 0.15), True)  # order-free
    assert P.frontier_gain(pts, 1.00, 0.05) == (pytest.approx(0.05 - 0.0), False)  # end segment extended: 0.10 - 2 x 0.05
    cfg = P.Config()
    pts_rows = {"top_p_50": (0.70, 0.35), "top_p_70": pts[0], "top_p_85": pts[1], "top_p": pts[2], "typical": (0.96, 0.12),
                "adaptive": (0.92, 0.22)}
    rows = [{"variant": v, "seed": 0, "dense/diversity": d, "dense/coherence": c} for v, (d, c) in pts_rows.items()]
    out = {r["variant"]: r for r in P.derive(cfg, rows)}
    assert out["adaptive"]["dense/frontier_gain"] == pytest.approx(0.22 - 0.16)  # frontier at 0.92: 0.20 - 0.4 x 0.10
    assert out["adaptive"]["dense/frontier_in_range"] == 1.0
    assert {out[v]["dense/frontier_gain"] for v in P.FRONTIER_VARIANTS} == {0.0}
    # pareto_top_p: min(0.22 - 0.10, 0.92 - 0.95 x 0.95) = 0.0175
    assert out["adaptive"]["dense/pareto_top_p"] == pytest.approx(0.92 - 0.95 * 0.95)


def test_lsa_scorer_and_mechanism_metrics_by_hand():
    texts = ["the cat sat on the mat and the dog ran in the park " * 3, "ships sail the sea under stars and wind " * 3,
             "kings and queens rule the castle with crowns " * 3]
    lsa = P.fit_lsa(texts, dim=2, vocab=50, chunk=10)
    assert lsa["basis"].shape == (len(lsa["words"]), 2) and lsa["words"][0] == "the"  # the word in most documents
    e = P.lsa_embed(lsa, ["the cat sat on the mat", "The CAT sat on the mat!", "zzz qqq"])
    assert torch.allclose(e[0], e[1]) and torch.equal(e[2], torch.zeros(2, dtype=e.dtype))
    # idf by hand for a word in every document: log((1 + n) / (1 + n)) + 1 = 1
    assert float(lsa["idf"][0]) == pytest.approx(1.0)
    m = P.mechanism_metrics({"set_sizes": torch.tensor([[1, 4], [2, 8]]), "kept_mass": torch.tensor([[0.5, 0.7], [0.9, 0.9]])})
    assert m["set_size"] == pytest.approx(3.75) and m["kept_mass"] == pytest.approx(0.75)
    assert m["kept_mass_sd"] == pytest.approx(float(torch.tensor([0.5, 0.7, 0.9, 0.9]).std()))
    assert m["log_set_size_sd"] == pytest.approx(float(torch.tensor([1.0, 4, 2, 8]).log().std()))


def test_spec_path_on_a_tiny_llama(tmp_path):
    res = tiny_resources(tmp_path)
    cfg = P.Config(sources=("austen",), pieces_per_source=6, piece_chars=200, prompt_tokens=6, gen_tokens=8,
                   n_prompts=4, batch=3, embed_batch=3, time_rounds=1, lsa_dim=4, lsa_vocab=200, lsa_chunk_words=10)
    data = P.prepare(cfg, res)
    assert data["windows_austen"].shape[1] == 14 and data["lsa"]["basis"].shape[1] == 4
    logged = []
    rows = []
    for v in P.VARIANTS:
        model = P.train(cfg, data, v, 0, lambda step, **kw: logged.append(kw))
        assert model["generated"].shape == (4, 8)
        assert bool((model["set_sizes"] >= 1).all())
        mass = model["kept_mass"]
        assert bool((mass > 0).all()) and bool((mass <= 1 + 1e-6).all())
        if v in ("top_p", *P.FRONTIER):  # nucleus keeps at least its p
            p = cfg.top_p if v == "top_p" else P.FRONTIER[v]
            assert bool((mass >= p - 1e-6).all())
        dense = P.evaluate(cfg, model, data)
        # the NLLs recorded while generating are the terms of a separate forward's perplexity (KV cache = full pass)
        lm = P.frozen_smollm2(data["model_dir"])
        prompts = model["windows"][:, : cfg.prompt_tokens]
        assert dense["ppl"] == pytest.approx(continuation_ppl(lm, prompts, model["generated"], 3), rel=1e-4)
        levels = P.compress(cfg, model, data, v, 0)
        row = {"variant": v, "seed": 0, **{f"dense/{k}": x for k, x in dense.items()}}
        if v not in P.INT8_VARIANTS:
            assert levels == {}
        else:
            assert set(levels) == {"int8"} and torch.equal(levels["int8"]["windows"], model["windows"])
            int8 = P.evaluate(cfg, levels["int8"], data)
            assert ("int8_speedup" in int8) == (v == "adaptive") and "int8_speedup" not in dense
            assert int8["human_coherence"] == dense["human_coherence"]  # the same scorer and reference
            row.update({f"compressed:int8/{k}": x for k, x in int8.items()})
        rows.append(row)
        assert 0 <= dense["diversity"] <= 1 and -1 <= dense["coherence"] <= 1 and dense["ppl"] > 0
        assert 0 <= dense["kept_mass_sd"] and dense["kept_mass"] <= 1 + 1e-6
    out = {r["variant"]: r for r in P.derive(cfg, rows)}
    t8, t32 = out["ref|int8_weights"]["dense/decode_step_s"], out["ref|fp32_weights"]["dense/decode_step_s"]
    assert t8 > 0 and t32 > 0 and out["adaptive"]["compressed:int8/int8_speedup"] == pytest.approx(t32 / t8)
    assert out["adaptive"]["compressed:int8/pareto_top_p"] == pytest.approx(
        P.pareto_gap(cfg, out["adaptive"], [out["top_p"]], "compressed:int8"))
    pts = [(out[v]["dense/diversity"], out[v]["dense/coherence"]) for v in P.FRONTIER_VARIANTS]
    gain, inside = P.frontier_gain(pts, out["adaptive"]["dense/diversity"], out["adaptive"]["dense/coherence"])
    assert out["adaptive"]["dense/frontier_gain"] == pytest.approx(gain)
    assert out["adaptive"]["dense/frontier_in_range"] == float(inside)
    # the int8 model differs from the fp32 one, but only slightly
    lm8 = P.frozen_smollm2_int8(data["model_dir"])
    w, w8 = lm.model.layers[0].mlp.up_proj.weight, lm8.model.layers[0].mlp.up_proj.weight
    assert not torch.equal(w, w8) and torch.allclose(w, w8, atol=float(w.abs().max()) / 127)
    assert torch.equal(lm.model.embed_tokens.weight, lm8.model.embed_tokens.weight)
    # the same seed gives the same prompts and samples (paired comparisons); another seed other prompts
    again = P.train(cfg, data, "adaptive", 0, lambda *a, **k: None)
    assert torch.equal(again["generated"], P.train(cfg, data, "adaptive", 0, lambda *a, **k: None)["generated"])
    assert not torch.equal(P.seed_prompts(cfg, data, 0), P.seed_prompts(cfg, data, 1))
    assert logged and "set_size" in logged[0]
    judged = [c for c in P.comparisons(cfg) if c.role != "fact"]
    assert {c.method for c in judged} == {"adaptive", "top_p_70"} and "top_p_50" in {c.baseline for c in judged}
    assert all(f"dense/{c.metric}" in out[c.method] or c.stage == "compressed" for c in judged)

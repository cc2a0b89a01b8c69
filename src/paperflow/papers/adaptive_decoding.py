"""Adaptive decoding: "Improving Open-Ended Text Generation via Adaptive Decoding", Wenhong Zhu, Hongkun Hao,
Zhiwei He, Yiming Ai, Rui Wang, ICML 2024. Official code: https://github.com/zwhong714/adaptive_decoding
(adaptive.py::adaptive_decoding; a modified transformers LogitsWarper in transformers-main/.../logits_process.py).

What is implemented. Every decoding rule is a function logits (B, V) -> boolean candidate set (B, V); one shared
batched sampling loop (`generate`, Hugging Face Llama with use_cache=True, the KV cache) renormalises the
distribution on the set and samples from it (greedy: the arg-max).
  - greedy:   {argmax p}.
  - top_k:    the k most probable tokens (k = 50).
  - top_p:    nucleus (Holtzman et al.): the smallest prefix of the sorted distribution with mass >= p (p = 0.95).
  - typical:  locally typical sampling (Meister et al. 2023): tokens sorted by |-log p_i - H(p)|, the smallest
              prefix of that order with mass >= tau (tau = 0.95).
  - adaptive: the paper's confidence-increment set (Sec. 3). With p_1 >= ... >= p_V sorted, the state after k
              tokens entered the candidate set A keeps p_1..p_k and spreads the rest R_k = 1 - S_k uniformly over
              the V - k tokens of B, with entropy
                  H_k = -sum_{i<=k} p_i log p_i - R_k log(R_k / (V - k)),    H_0 = log V (uniform),
              confidence Conf_k = (log V - H_k) / log V, and the increment of adding the k-th token
                  dConf_k = Conf_k - Conf_{k-1} = (H_{k-1} - H_k) / log V  (>= 0).
              Token k is a candidate iff dConf_k >= epsilon (the top-1 always is). This is adaptive.py's closed
              form A + (1 - S_k + p_k) log(C / D) with C = R_k / (V - k), D = R_{k-1} / (V - k + 1); as in that
              code the sorted positions are thresholded one by one (not "stop at the first failure"; on our
              hand-made tests and in practice the increments decrease so the set is a prefix) and the divisor
              is adaptive.py's up_bound = log2(V) while the entropies are in nats, so epsilon = 0.001 (the
              README's value) is compared with ln2 * (H_{k-1} - H_k) / ln V. We compute R_k as a suffix sum in
              float64 (the code's 1 - cumsum in float32 cancels badly for V = 49k) and dConf_V = 0 (code: NaN
              -> 0).
Metrics (evaluate; n-grams over whitespace words of the decoded continuation, as SimCTG's measure_diversity
that the paper's evaluation follows):
  - rep-n = 1 - |unique n-grams| / |n-grams| of one continuation, averaged over continuations (n = 2, 3, 4),
    diversity = prod_{n=2..4} (1 - rep-n) (the paper's "div"), distinct-n = |unique n-grams| / |n-grams| over
    ALL continuations of the run (n = 1, 2, 3) and distinct = their mean.
  - coherence: cosine of prompt and continuation embeddings. The paper uses SimCSE; no sentence encoder is
    shipped, so the stand-in is SmolLM2 itself: each text is encoded on its own, its last hidden states are
    mean-pooled and centred by the mean embedding of human text windows (computed once per run from the seed's
    human continuations; decoder hidden states are anisotropic, all raw cosines are ~0.9), then cosine.
  - ppl: perplexity of the continuation given the prompt under SmolLM2 (the generating model; greedy is
    lowest by construction), from the NLLs of the chosen tokens recorded while generating (the same numbers as
    a second forward over prompt + continuation, which cost a third of a job) and, as references, the same metrics of the human continuations (human_*).
  - set_size: mean candidate-set size per step (the adaptive set's behaviour).
  - balance = diversity * coherence: the PRE-DECLARED combination for the headline "better diversity/coherence
    balance" (the paper reports div, MAUVE and coherence and argues the balance; we fix the product in advance).
  MAUVE is not available (no GPT-2-large featuriser / mauve package offline): not reported.
Seeds: each seed draws its own prompt windows (the same for every method, so the comparisons are paired) and
its own sampling stream.
Substitutions for laptop scale: SmolLM2-135M-Instruct (fp32 de-quantised from the 4-bit Q4_1 GGUF) instead of
GPT2-XL / Llama-2 7B-70B; prompts of 32 tokens and continuations of 48 tokens (paper: 256-token continuations
of WritingPrompts / WikiText / WikiNews prefixes); 24 prompt windows per seed from the Austen novels and the
Shakespeare plays (whitespace collapsed) instead of the paper's benchmarks; these texts are public and may be
in SmolLM2's pre-training data ("held-out" only means they are not used anywhere else here); EOS / special
tokens are banned so every continuation has the full length; coherence with mean-pooled, centred SmolLM2
states instead of SimCSE; no MAUVE, no human evaluation.
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..data.smollm2 import frozen_smollm2, load_tokenizer
from ..registry import register_paper
from ..spec import Comparison, PaperSpec, check

VARIANTS = ("greedy", "top_k", "top_p", "typical", "adaptive")
BASELINES = ("greedy", "top_k", "top_p", "typical")
SOURCES = ("austen", "shakespeare")


@dataclass(frozen=True)
class Config:
    # decoding rules (paper baselines' usual settings; adaptive epsilon = the official README's 0.001)
    top_k: int = 50
    top_p: float = 0.95
    typical_tau: float = 0.95
    ada_epsilon: float = 0.001
    temperature: float = 1.0  # applied before every sampling rule (not greedy)
    # prompts: windows of prompt_tokens + gen_tokens tokens from pieces of the real texts
    sources: tuple = SOURCES
    pieces_per_source: int = 24  # evenly spaced pieces per source, split over its texts (6 novels / 1 file)
    piece_chars: int = 4000
    prompt_tokens: int = 32
    gen_tokens: int = 48
    n_prompts: int = 24  # per seed, drawn equally from each source
    batch: int = 24
    embed_batch: int = 48

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", tuple(str(s) for s in self.sources))
        check(self.top_k >= 1, f"top_k must be >= 1, got {self.top_k}")
        check(0 < self.top_p <= 1, f"top_p must be in (0, 1], got {self.top_p}")
        check(0 < self.typical_tau <= 1, f"typical_tau must be in (0, 1], got {self.typical_tau}")
        check(0 <= self.ada_epsilon < 1, f"ada_epsilon must be in [0, 1), got {self.ada_epsilon}")
        check(self.temperature > 0, f"temperature must be > 0, got {self.temperature}")
        check(len(self.sources) >= 1 and set(self.sources) <= set(SOURCES),
              f"sources must be a non-empty subset of {SOURCES}, got {self.sources}")
        check(self.pieces_per_source >= 1 and self.piece_chars >= 100,
              "pieces_per_source must be >= 1 and piece_chars >= 100")
        check(self.prompt_tokens >= 1, f"prompt_tokens must be >= 1, got {self.prompt_tokens}")
        check(self.gen_tokens >= 4, f"gen_tokens must be >= 4 (rep-4 needs 4 words), got {self.gen_tokens}")
        check(self.n_prompts >= len(self.sources) and self.n_prompts % len(self.sources) == 0,
              f"n_prompts must be a positive multiple of len(sources) = {len(self.sources)}, got {self.n_prompts}")
        check(self.batch >= 1 and self.embed_batch >= 1, "batch and embed_batch must be >= 1")


# ------------------------------------------------------------------------------- candidate sets (math)
def greedy_set(logits: torch.Tensor) -> torch.Tensor:
    return F.one_hot(logits.argmax(-1), logits.shape[-1]).bool()


def top_k_set(logits: torch.Tensor, k: int) -> torch.Tensor:
    k = min(int(k), logits.shape[-1])
    idx = logits.topk(k, dim=-1).indices
    return torch.zeros_like(logits, dtype=torch.bool).scatter(-1, idx, True)


def _prefix_mass_set(order_probs: torch.Tensor, order: torch.Tensor, mass: float) -> torch.Tensor:
    """Keep the smallest prefix (in `order`) whose probability reaches `mass`: position i is kept iff the mass
    strictly before it is < mass (so the token crossing the threshold is in, the first always is)."""
    before = order_probs.cumsum(-1) - order_probs
    keep_sorted = before < mass
    keep_sorted[..., 0] = True
    return torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)


def top_p_set(logits: torch.Tensor, p: float) -> torch.Tensor:
    probs = logits.double().softmax(-1)
    sp, order = probs.sort(-1, descending=True)
    return _prefix_mass_set(sp, order, p)


def typical_set(logits: torch.Tensor, tau: float) -> torch.Tensor:
    """Meister et al. (2023), Eq. for the locally typical set: sort by |-log p - H|, keep mass >= tau."""
    logp = logits.double().log_softmax(-1)
    probs = logp.exp()
    ent = -(probs * logp).nan_to_num().sum(-1, keepdim=True)
    dev = (-logp - ent).abs()
    _, order = dev.sort(-1)
    return _prefix_mass_set(probs.gather(-1, order), order, tau)


def confidence_increments(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """dConf_k (B, V) for the sorted positions k = 1..V (see the module docstring) and the sort order.
    Normalised by log2(V) as adaptive.py's up_bound (numerator in nats)."""
    probs = logits.double().softmax(-1)
    sp, order = probs.sort(-1, descending=True)
    v = sp.shape[-1]
    rest = (sp.flip(-1).cumsum(-1).flip(-1) - sp).clamp_min(0.0)  # R_k = sum_{i>k} p_i (suffix sums)
    n_rest = torch.arange(v - 1, -1, -1, dtype=sp.dtype)  # V - k for k = 1..V
    head = torch.special.xlogy(sp, sp).cumsum(-1)  # sum_{i<=k} p_i log p_i
    tail = torch.special.xlogy(rest, rest) - torch.special.xlogy(rest, n_rest.clamp_min(1.0))  # R log(R/(V-k))
    h = -(head + tail)  # H_1..H_V
    h_prev = torch.cat([torch.full_like(h[..., :1], math.log(v)), h[..., :-1]], -1)
    return (h_prev - h) / math.log2(v), order


def adaptive_set(logits: torch.Tensor, epsilon: float) -> torch.Tensor:
    """adaptive.py: sorted token k is kept iff dConf_k >= epsilon; the most probable token always."""
    delta, order = confidence_increments(logits)
    keep_sorted = delta >= epsilon
    keep_sorted[..., 0] = True
    return torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)


def candidate_set(variant: str, logits: torch.Tensor, cfg: Config) -> torch.Tensor:
    if variant == "greedy":
        return greedy_set(logits)
    if variant == "top_k":
        return top_k_set(logits, cfg.top_k)
    if variant == "top_p":
        return top_p_set(logits, cfg.top_p)
    if variant == "typical":
        return typical_set(logits, cfg.typical_tau)
    if variant == "adaptive":
        return adaptive_set(logits, cfg.ada_epsilon)
    raise ValueError(f"unknown decoding rule {variant!r}")


# --------------------------------------------------------------------------------------- sampling loop
@torch.no_grad()
def generate(lm, prompts: torch.Tensor, n_new: int, variant: str, cfg: Config, gen: torch.Generator,
             banned: list[int] = ()) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(B, P) equal-length prompts -> (B, n_new) new tokens, (B, n_new) candidate-set sizes and (B, n_new) NLL
    of each chosen token under the LM's own (unbanned, untempered) distribution, i.e. the per-token terms of
    continuation_ppl, read off the generation pass instead of a second forward; KV cache."""
    out = lm(input_ids=prompts, use_cache=True)
    past, logits = out.past_key_values, out.logits[:, -1].float()
    toks, sizes, nlls = [], [], []
    for t in range(n_new):
        logp = logits.log_softmax(-1)  # (B, V), before banning / temperature modify logits
        if len(banned):
            logits[:, list(banned)] = float("-inf")
        if variant != "greedy":
            logits = logits / cfg.temperature
        keep = candidate_set(variant, logits, cfg)
        if variant == "greedy":
            nxt = logits.argmax(-1)
        else:
            probs = logits.masked_fill(~keep, float("-inf")).softmax(-1)
            nxt = torch.multinomial(probs, 1, generator=gen).squeeze(1)
        toks.append(nxt)
        sizes.append(keep.sum(-1))
        nlls.append(-logp.gather(1, nxt[:, None]).squeeze(1))
        if t + 1 < n_new:
            out = lm(input_ids=nxt[:, None], past_key_values=past, use_cache=True)
            past, logits = out.past_key_values, out.logits[:, -1].float()
    return torch.stack(toks, 1), torch.stack(sizes, 1), torch.stack(nlls, 1)


# --------------------------------------------------------------------------------------------- metrics
def ngrams(words: list[str], n: int) -> list[tuple]:
    return [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]


def rep_n(words: list[str], n: int) -> float:
    """1 - unique/total n-grams of one text (SimCTG's rep-n / 100); 0 for a text with no n-gram."""
    g = ngrams(words, n)
    return 0.0 if not g else 1.0 - len(set(g)) / len(g)


def distinct_n(texts: list[list[str]], n: int) -> float:
    """Corpus distinct-n: unique n-grams / all n-grams over every text (n-grams do not cross texts)."""
    g = [x for w in texts for x in ngrams(w, n)]
    return 0.0 if not g else len(set(g)) / len(g)


def text_metrics(texts: list[str]) -> dict[str, float]:
    words = [t.split() for t in texts]
    out = {}
    for n in (2, 3, 4):
        out[f"rep_{n}"] = float(np.mean([rep_n(w, n) for w in words]))
    out["diversity"] = float(np.prod([1.0 - out[f"rep_{n}"] for n in (2, 3, 4)]))
    for n in (1, 2, 3):
        out[f"distinct_{n}"] = distinct_n(words, n)
    out["distinct"] = float(np.mean([out[f"distinct_{n}"] for n in (1, 2, 3)]))
    return out


@torch.no_grad()
def mean_embeddings(lm, seqs: list[list[int]], batch: int) -> torch.Tensor:
    """Mean-pooled last hidden states of each token sequence encoded on its own (right-padded, masked)."""
    embs = []
    for i in range(0, len(seqs), batch):
        chunk = seqs[i : i + batch]
        n = max(len(s) for s in chunk)
        ids = torch.zeros(len(chunk), n, dtype=torch.long)
        mask = torch.zeros(len(chunk), n, dtype=torch.long)
        for j, s in enumerate(chunk):
            ids[j, : len(s)] = torch.tensor(s, dtype=torch.long)
            mask[j, : len(s)] = 1
        h = lm.model(input_ids=ids, attention_mask=mask).last_hidden_state.float()
        m = mask[..., None].float()
        embs.append((h * m).sum(1) / m.sum(1).clamp_min(1.0))
    return torch.cat(embs, 0)


def centred_cosine(a: torch.Tensor, b: torch.Tensor, mu: torch.Tensor) -> torch.Tensor:
    return F.cosine_similarity(a - mu, b - mu, dim=-1)


@torch.no_grad()
def continuation_ppl(lm, prompts: torch.Tensor, conts: torch.Tensor, batch: int) -> float:
    """exp(mean NLL of the continuation tokens given the prompt) under the LM."""
    nll = []
    for i in range(0, prompts.shape[0], batch):
        ids = torch.cat([prompts[i : i + batch], conts[i : i + batch]], 1)
        lg = lm(input_ids=ids).logits[:, prompts.shape[1] - 1 : -1].float()
        nll.append(F.cross_entropy(lg.reshape(-1, lg.shape[-1]), conts[i : i + batch].reshape(-1), reduction="none"))
    return float(torch.exp(torch.cat(nll).mean()))


# ------------------------------------------------------------------------------------------------ stages
def _clean(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _pieces(text: str, n: int, chars: int) -> list[str]:
    """n evenly spaced pieces of `chars` characters (the first 5% skipped: front matter)."""
    start, stop = int(0.05 * len(text)), max(int(0.05 * len(text)) + 1, len(text) - chars)
    offs = np.linspace(start, stop, n).astype(int) if n > 1 else [start]
    return [text[o : o + chars] for o in offs]


def prepare_windows(cfg: Config, model_dir: str, texts: dict[str, list[str]]) -> dict:
    """texts {source: [text, ...]} -> token windows (N_s, prompt_tokens + gen_tokens) per source."""
    tok = load_tokenizer(model_dir)
    win = cfg.prompt_tokens + cfg.gen_tokens
    out = {"model_dir": os.path.abspath(model_dir)}
    for src in cfg.sources:
        rows = []
        per_text = max(1, cfg.pieces_per_source // len(texts[src]))
        for text in texts[src]:
            for piece in _pieces(_clean(text), per_text, cfg.piece_chars):
                ids = tok(piece, add_special_tokens=False, verbose=False)["input_ids"]
                rows += [ids[j : j + win] for j in range(0, len(ids) - win + 1, win)]
        need = cfg.n_prompts // len(cfg.sources)
        check(len(rows) >= need, f"source {src} gives {len(rows)} windows < n_prompts/len(sources) = {need}; "
                                 "raise piece_chars or pieces_per_source")
        out[f"windows_{src}"] = torch.tensor(rows, dtype=torch.int64)
    special = list(getattr(tok, "all_special_ids", []) or [])
    out["banned"] = sorted({int(i) for i in special if i is not None})
    return out


def prepare(cfg: Config, res) -> dict:
    texts = {}
    if "austen" in cfg.sources:
        with open(res["austen"], encoding="utf-8") as fh:
            texts["austen"] = list(json.load(fh).values())
    if "shakespeare" in cfg.sources:
        with open(res["shakespeare"], encoding="utf-8") as fh:
            full = fh.read()
        texts["shakespeare"] = [full]
    return prepare_windows(cfg, res["smollm2"], texts)


def seed_prompts(cfg: Config, data: dict, seed: int) -> torch.Tensor:
    """The seed's windows: n_prompts / len(sources) from each source without replacement (same for all methods)."""
    g = torch.Generator().manual_seed(1000 + int(seed))
    rows = []
    for src in cfg.sources:
        w = data[f"windows_{src}"]
        rows.append(w[torch.randperm(w.shape[0], generator=g)[: cfg.n_prompts // len(cfg.sources)]])
    return torch.cat(rows, 0)


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    """Nothing is trained: the 'model' of a decoding rule is its generations for the seed's prompts."""
    check(variant in VARIANTS, f"variant must be one of {VARIANTS}, got {variant!r}")
    lm = frozen_smollm2(data["model_dir"])
    windows = seed_prompts(cfg, data, seed)
    prompts = windows[:, : cfg.prompt_tokens]
    gen = torch.Generator().manual_seed(int(seed))
    toks, sizes, nlls = [], [], []
    for i in range(0, prompts.shape[0], cfg.batch):
        t, s, nll = generate(lm, prompts[i : i + cfg.batch], cfg.gen_tokens, variant, cfg, gen, data["banned"])
        toks.append(t)
        sizes.append(s)
        nlls.append(nll)
        log(i // cfg.batch, set_size=float(s.float().mean()))
    return {"variant": variant, "seed": int(seed), "model_dir": data["model_dir"], "windows": windows,
            "generated": torch.cat(toks, 0), "set_sizes": torch.cat(sizes, 0), "nll": torch.cat(nlls, 0)}


@torch.no_grad()
def evaluate(cfg: Config, model: dict, data: dict) -> dict[str, float]:
    lm = frozen_smollm2(model["model_dir"])
    tok = load_tokenizer(model["model_dir"])
    windows, gen = model["windows"], model["generated"]
    prompts, human = windows[:, : cfg.prompt_tokens], windows[:, cfg.prompt_tokens :]
    dec = lambda ids: tok.batch_decode(ids.tolist(), skip_special_tokens=True)  # noqa: E731
    gen_txt, hum_txt = dec(gen), dec(human)
    out = text_metrics(gen_txt)
    ref = text_metrics(hum_txt)
    # coherence: each text encoded alone (re-tokenised from its decoded text, as an external encoder would)
    enc = lambda txt: [tok(t, add_special_tokens=False)["input_ids"] or [0] for t in txt]  # noqa: E731
    e_p = mean_embeddings(lm, enc(dec(prompts)), cfg.embed_batch)
    e_g = mean_embeddings(lm, enc(gen_txt), cfg.embed_batch)
    e_h = mean_embeddings(lm, enc(hum_txt), cfg.embed_batch)
    mu = torch.cat([e_p, e_h], 0).mean(0)  # human text only: the same centre for every method of a seed
    out["coherence"] = float(centred_cosine(e_p, e_g, mu).mean())
    ref["coherence"] = float(centred_cosine(e_p, e_h, mu).mean())
    out["coherence_raw"] = float(F.cosine_similarity(e_p, e_g, dim=-1).mean())
    out["balance"] = out["diversity"] * out["coherence"]
    ref["balance"] = ref["diversity"] * ref["coherence"]
    # the generation pass's NLLs equal continuation_ppl's terms (tested); older artifacts have none
    out["ppl"] = float(torch.exp(model["nll"].mean())) if "nll" in model else continuation_ppl(lm, prompts, gen, cfg.embed_batch)
    ref["ppl"] = continuation_ppl(lm, prompts, human, cfg.embed_batch)
    out["set_size"] = float(model["set_sizes"].float().mean())
    for k in ("diversity", "distinct", "coherence", "balance", "ppl"):
        out[f"human_{k}"] = ref[k]
    return out


def comparisons(cfg: Config) -> list[Comparison]:
    rows = []
    for b in BASELINES:
        rows.append(Comparison("balance", "adaptive", b, better="higher",
                               text=f"adaptive decoding has a better diversity x coherence balance than {b}"))
    for b in BASELINES:
        rows.append(Comparison("diversity", "adaptive", b, better="higher",
                               text=f"adaptive decoding is more diverse (prod (1 - rep-n)) than {b}"))
    for b in BASELINES:
        rows.append(Comparison("coherence", "adaptive", b, better="higher",
                               text=f"adaptive decoding is more coherent with the prompt than {b}"))
    return rows


SPEC = register_paper(
    PaperSpec(
        id="adaptive_decoding",
        title="Improving Open-Ended Text Generation via Adaptive Decoding",
        claim="better diversity/coherence balance",
        Config=Config,
        variants=VARIANTS,
        prepare=prepare,
        train=train,
        compress=None,
        evaluate=evaluate,
        comparisons=comparisons,
        resources=("smollm2", "austen", "shakespeare"),
        data=(
            "pretrained SmolLM2-135M-Instruct (resources/smollm2-135m), frozen; prompts = the first 32 tokens of "
            "80-token windows cut from evenly spaced pieces of the six Austen novels and the Shakespeare plays "
            "(half each, drawn per seed), the other 48 tokens are the human reference continuation"
        ),
        substitutions=(
            "SmolLM2-135M (fp32 from the Q4_1 GGUF) instead of GPT2-XL / Llama-2; 24 prompts x 48 new tokens per "
            "seed instead of benchmark sets with 256-token continuations; Austen/Shakespeare prompts instead of "
            "WritingPrompts/WikiText/WikiNews; special tokens (EOS) banned so continuations have full length; "
            "coherence = cosine of mean-pooled, centred SmolLM2 hidden states (SimCSE not available); no MAUVE "
            "(not available offline), no human evaluation; balance = diversity x coherence declared in advance"
        ),
        compression="none: decoding rules only (compress=None)",
        tradeoff=("set_size", "balance"),
        weight=1,
    )
)

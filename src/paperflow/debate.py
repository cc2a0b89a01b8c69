"""Multi-agent debate and prompting protocols over a local chat LM, shared by the debate / agent papers.

Follows instadeepai/DebateLLM (debatellm/systems.py: SingleAgentQA, MultiAgentDebateGoogle = Society of Minds
(Du et al. 2023), MultiAgentDebateTsinghua = Multi-Persona (Liang et al. 2023); debatellm/utils/debate.py:
construct_message, construct_message_from_history modes "tsinghua_mad" / "tsinghua_judge", most_frequent;
debatellm/utils/eval.py: extract_last_floating_capital_letter_as_answer, continue_debate_tsinghua).

Questions are multiple choice: {"prompt": str, "options": [str, ...], "answer": letter, ...}.
  - `LMAgent`: one agent call over a batch of chat conversations: rendered with the tokenizer's chat template (a
    plain "User:/Assistant:" template when it has none), at most max_new_tokens sampled (temperature + nucleus
    top_p, KV cache, left padding, a seeded torch.Generator), answer read by the STRICT parser `parse_answer`;
    when nothing parses, the FALLBACK feeds "\\nAnswer:" after the reply (same KV cache) and takes the option
    letter with the highest next-token logit. Identical prompts in a batch are prefilled once and their KV cache
    copied (self-consistency samples, the agents of a debate's first round); rows are batched by prompt length.
  - `Ledger`: per-question counts of calls, generated and prompt tokens, strict parses.
  - protocols (each returns one final letter per question; settings in `Protocol`):
      single            one agent, one call (SingleAgentQA);
      self_consistency  one prompt sampled N times, majority vote (Wang et al.);
      ensemble          N agents with different persona system prompts, one call each, majority vote;
      society_of_minds  N agents x R rounds; round r > 0: agent i sees the question, its own previous reply (as
                        the assistant turn) and every OTHER agent's previous reply ("One agent's answer: ```...```")
                        with the debate suffix; the answer is the majority of the last round;
      multi_persona     angel (affirmative) + devil (negative) + judge, up to R rounds. Round 0: the angel answers
                        the question; the devil gets the debater system message, the angel's reply and its
                        instruction; the judge (moderator system message, the round's arguments as "<side>
                        arguing: ..." in one user turn) answers in universal mode: a parsable answer ENDS the debate
                        (continue_debate_tsinghua). Later rounds: each side sees its own replies as assistant turns
                        and the other side's as user turns ("tsinghua_mad") plus its instruction. Undecided after R
                        rounds: the judge is asked once more in final mode (its last undecided reply dropped, as the
                        code). AGREEMENT INTENSITY k (systems.py: agreement_intensity selects the devil's
                        context_<k>): "You disagree with my answer (100 - 10k)% of the time" for k < 5, "neither agree
                        nor disagree" for k = 5, "You agree with my answer 10k% of the time" for k > 5; -1 = the
                        default devil prompt (our wording of the code's prompt family).
  - `majority`: the most frequent answer; TIES go to the tied answer appearing FIRST (most_frequent's strict ">").
Where we depart from the code: prompts paraphrased and shortened; chat turns instead of Society of Minds' single
concatenated prompt string; the judge replies "Final answer: <letter>" / "Continue" instead of JSON; an unparsed
reply gets the log-likelihood letter instead of counting as wrong ("-1").
"""
from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

LETTERS = "ABCDE"

PERSONAS = (
    "You are an expert answering a multiple-choice question.",
    "You are a professor who knows the subject by heart.",
    "You are a careful reader who checks every option before answering.",
    "You are a quiz champion who answers quickly and correctly.",
    "You are a curious generalist with broad knowledge.",
)
SOM_PREFIX = "These are the answers to the question from other agents:"
SOM_ITEM = "\n\nOne agent's answer: ```{}```"
SOM_SUFFIX = "\n\nUsing these opinions carefully as additional advice, give an updated answer. "
DEBATER = ("You are a debater. Welcome to the {topic}, held as a debate. You need not agree with each other: "
           "the goal is the correct answer to this question:\n\n{question}")
MODERATOR = ("You are a moderator. Two debaters will give their answers and arguments on this question:\n\n{question}\n\n"
             "After each round you decide which answer is correct.")
ANGEL_NEXT = "Do you agree with my perspective? Give your reasons and your answer."
JUDGE_UNIVERSAL = ("As the moderator, decide whether one side is clearly right. If so, reply 'Final answer: <letter>'. "
                   "If not, reply 'Continue'.")
JUDGE_FINAL = "As the moderator, decide which answer is correct and reply 'Final answer: <letter>'."
AFFIRMATIVE, NEGATIVE, JUDGE = "Affirmative side", "Negative side", "Judge"


@dataclass(frozen=True)
class Protocol:
    """Settings of the protocols: N agents / samples, R rounds (Society of Minds, Multi-Persona), sampling of the
    agents and of the Multi-Persona judge, persona system prompts and the debate's topic (in the debater prompt)."""

    n_agents: int = 3
    n_rounds: int = 2
    mp_rounds: int = 2
    temperature: float = 0.7
    top_p: float = 1.0
    judge_temperature: float = 0.5
    judge_top_p: float = 0.5
    personas: tuple = PERSONAS
    topic: str = "quiz"


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


def question_text(q: dict) -> str:
    letters = LETTERS[: len(q["options"])]
    opts = "\n".join(f"{l}. {o}" for l, o in zip(letters, q["options"]))
    return f"{q['prompt']}\n{opts}"


def instruction(q: dict) -> str:
    letters = LETTERS[: len(q["options"])]
    return f"Reply with the letter ({', '.join(letters[:-1])} or {letters[-1]}) of the correct option."


def user_turn(q: dict) -> str:
    return f"{question_text(q)}\n\n{instruction(q)}"


# ------------------------------------------------------------------------------------------- prompts
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


def som_message(others: list[str], q: dict) -> str:
    """The debate message of round r > 0 (debate.py::construct_message): the other agents' previous replies."""
    if not others:  # a single agent reflects on its own answer (construct_message's introspection case)
        return "Can you verify that your answer is correct? Please restate your answer. " + instruction(q)
    return SOM_PREFIX + "".join(SOM_ITEM.format(o) for o in others) + SOM_SUFFIX + instruction(q)


def side_conv(q: dict, hist: list[tuple[str, str]], side: str, intensity: int, topic: str = "quiz") -> list[dict]:
    """A debater's conversation ("tsinghua_mad" mode): own replies as assistant turns, the other side's as user turns,
    judge replies left out; the side's instruction is appended to the last user turn."""
    debate = [(s, t) for s, t in hist if s != JUDGE]
    if side == AFFIRMATIVE and not debate:  # the angel's first turn: just the question (no system message)
        return [{"role": "user", "content": user_turn(q)}]
    conv = [{"role": "system", "content": DEBATER.format(topic=topic, question=question_text(q))}]
    if side == AFFIRMATIVE:
        conv.append({"role": "user", "content": user_turn(q)})
    user = ""
    for s, t in debate:
        if s == side:
            conv.append({"role": "user", "content": user.strip()} if user else None)
            conv.append({"role": "assistant", "content": t})
            user = ""
        else:
            user += "\n\n" + t
    conv = [m for m in conv if m is not None]
    instr = ANGEL_NEXT + " " + instruction(q) if side == AFFIRMATIVE else devil_instruction(intensity, q)
    conv.append({"role": "user", "content": (user.strip() + "\n\n" + instr).strip()})
    return conv


def judge_conv(q: dict, hist: list[tuple[str, str]], mode: str) -> list[dict]:
    """The judge's conversation ("tsinghua_judge" mode): each round's arguments in one user turn, its own replies as
    assistant turns, the mode instruction appended to the last user turn."""
    conv = [{"role": "system", "content": MODERATOR.format(question=question_text(q))}]
    seg = ""
    for s, t in hist:
        if s == JUDGE:
            conv += [{"role": "user", "content": seg.strip()}, {"role": "assistant", "content": t}]
            seg = ""
        else:
            seg += f"\n\n{s} arguing: {t}"
    conv.append({"role": "user", "content": (seg.strip() + "\n\n" + mode).strip()})
    return conv


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
    token has the highest next-token logit. Rows are grouped by prompt length into batches of batch_size (less
    padding); identical prompts of a batch are prefilled once (share_prefill) and their KV cache rows copied."""

    def __init__(self, lm, tok, max_new_tokens: int, batch_size: int, seed: int, share_prefill: bool = True):
        self.lm, self.tok = lm, tok
        self.max_new, self.batch_size, self.share = max_new_tokens, batch_size, share_prefill
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
        prompts = [self.tok(render(self.tok, c), add_special_tokens=False)["input_ids"] for c in convs]
        order = sorted(range(len(convs)), key=lambda i: len(prompts[i]))  # stable: ties keep the call order
        out: list[dict] = [{}] * len(convs)
        for i in range(0, len(order), self.batch_size):
            rows = order[i : i + self.batch_size]
            reps = self._batch([prompts[r] for r in rows], [options[r] for r in rows], temperature, top_p, fallback)
            for r, rep in zip(rows, reps):
                out[r] = rep
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

    def _prefill(self, prompts: list[list[int]], state: dict) -> torch.Tensor:
        """Left-padded prefill of the distinct prompts, then the KV cache rows copied to the duplicates."""
        uniq: dict[tuple, int] = {}
        idx = [uniq.setdefault(tuple(p), len(uniq)) for p in prompts] if self.share else list(range(len(prompts)))
        distinct = list(uniq) if self.share else [tuple(p) for p in prompts]
        width = max(len(p) for p in distinct)
        ids = torch.full((len(distinct), width), self.pad, dtype=torch.long)
        mask = torch.zeros(len(distinct), width, dtype=torch.long)
        for r, p in enumerate(distinct):
            ids[r, width - len(p) :] = torch.tensor(p)
            mask[r, width - len(p) :] = 1
        state["next"] = torch.zeros(len(distinct), dtype=torch.long)
        logits = self._forward(ids, mask, state)[:, -1]
        if len(distinct) < len(prompts):
            sel = torch.tensor(idx, dtype=torch.long)
            state["past"].batch_select_indices(sel)
            state["mask"], state["next"], logits = state["mask"][sel], state["next"][sel], logits[sel]
        return logits

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
    def _batch(self, prompts, options, temperature, top_p, fallback):
        b = len(prompts)
        state: dict = {}
        logits = self._prefill(prompts, state)
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


def _asked(persona: str, q: dict) -> list[dict]:
    return [{"role": "system", "content": persona}, {"role": "user", "content": user_turn(q)}]


def run_single(led: Ledger, p: Protocol) -> list[str]:
    rows = [(i, _asked(p.personas[0], q)) for i, q in enumerate(led.qs)]
    return [r["answer"] for r in led.ask(rows, p.temperature, p.top_p)]


def _voted(led: Ledger, p: Protocol, personas: list[str]) -> list[str]:
    rows = [(i, _asked(s, q)) for i, q in enumerate(led.qs) for s in personas]
    ans = [r["answer"] for r in led.ask(rows, p.temperature, p.top_p)]
    n = len(personas)
    return [majority(ans[i * n : (i + 1) * n]) for i in range(len(led.qs))]


def run_self_consistency(led: Ledger, p: Protocol) -> list[str]:
    """N samples of the single-agent prompt, majority vote."""
    return _voted(led, p, [p.personas[0]] * p.n_agents)


def run_ensemble(led: Ledger, p: Protocol) -> list[str]:
    """N agents with different personas (system prompts), one call each, majority vote."""
    return _voted(led, p, [p.personas[a % len(p.personas)] for a in range(p.n_agents)])


def run_society_of_minds(led: Ledger, p: Protocol, record: list | None = None) -> list[str]:
    """N agents x R rounds; each round every agent sees the others' previous replies; majority of the last round."""
    n, nq = p.n_agents, len(led.qs)
    base = [_asked(p.personas[0], q) for q in led.qs]
    prev: list[list[dict]] = []
    for r in range(p.n_rounds):
        rows = []
        for i, q in enumerate(led.qs):
            for a in range(n):
                conv = list(base[i])
                if r > 0:
                    conv += [{"role": "assistant", "content": prev[i][a]["text"]},
                             {"role": "user", "content": som_message([prev[i][o]["text"] for o in range(n) if o != a], q)}]
                rows.append((i, conv))
        reps = led.ask(rows, p.temperature, p.top_p)
        prev = [reps[i * n : (i + 1) * n] for i in range(nq)]
        if record is not None:
            record.append([[rep["answer"] for rep in prev[i]] for i in range(nq)])
    return [majority([rep["answer"] for rep in prev[i]]) for i in range(nq)]


def run_multi_persona(led: Ledger, p: Protocol, intensity: int, record: list | None = None) -> list[str]:
    """Angel + devil + judge (MultiAgentDebateTsinghua); the judge may end the debate after any round. `record`
    (optional) receives, per round, {side: {question index: the side's answer letter}} for the two debaters."""
    nq = len(led.qs)
    hist: list[list[tuple[str, str]]] = [[] for _ in range(nq)]  # (side, reply) per question, judge replies included
    final: list[str | None] = [None] * nq
    open_q = list(range(nq))
    for _ in range(p.mp_rounds):
        said: dict[str, dict[int, str]] = {}
        for side in (AFFIRMATIVE, NEGATIVE):
            rows = [(i, side_conv(led.qs[i], hist[i], side, intensity, p.topic)) for i in open_q]
            said[side] = {}
            for (i, _), rep in zip(rows, led.ask(rows, p.temperature, p.top_p)):
                hist[i].append((side, rep["text"]))
                said[side][i] = rep["answer"]
        if record is not None:
            record.append(said)
        rows = [(i, judge_conv(led.qs[i], hist[i], JUDGE_UNIVERSAL)) for i in open_q]
        still = []
        for (i, _), rep in zip(rows, led.ask(rows, p.judge_temperature, p.judge_top_p, fallback=False)):
            if rep["answer"] is not None:
                final[i] = rep["answer"]
            else:
                hist[i].append((JUDGE, rep["text"]))
                still.append(i)
        open_q = still
        if not open_q:
            break
    for i in open_q:
        hist[i].pop()  # drop the last undecided judge reply (systems.py: message_history.pop(-1))
    rows = [(i, judge_conv(led.qs[i], hist[i], JUDGE_FINAL)) for i in open_q]
    for (i, _), rep in zip(rows, led.ask(rows, p.judge_temperature, p.judge_top_p)):
        final[i] = rep["answer"]
    return final  # type: ignore[return-value]

"""Tests of the shared debate module (paperflow/debate.py): the strict answer parser on hand-written replies, the
majority vote's tie rule, the debate message construction and call counts on fake deterministic agents, and the batched
LM agent against unbatched greedy decoding (shared prefills included) on a tiny random Llama."""
from __future__ import annotations

import re

import pytest

from paperflow import debate as D
from tiny_llama import tiny_resources


def tiny_lm(model_dir):
    from paperflow.data.smollm2 import frozen_smollm2, load_tokenizer

    return frozen_smollm2(model_dir), load_tokenizer(model_dir)


OPTS = ["happy", "table", "river", "silent"]


# ------------------------------------------------------------------------------------------ parser
@pytest.mark.parametrize("text, want", [
    ("B", "B"), ("B.", "B"), ("(C)", "C"), ("D) silent", "D"), ("  A", "A"), ("C: river", "C"),
    ("The answer is C.", "C"), ("I think the answer is (D)", "D"), ("Answer: B", "B"), ("answer: A because", "A"),
    ("B table", "B"),  # leading letter followed by that option's text
    ("The correct word is river.", "C"),  # rule 3: exactly one option's text named
    ("A woman would be happy", "A"),  # article "A" is not a letter; "happy" names option A
    ("I would pick D", "D"),  # rule 4: last free-standing capital letter, "I " dropped
    ("E", None), ("I do not know", None), ("A man walked in", None), ("", None), ("Continue", None),
    ("happy or table", None),  # two options named, no letter: unparsed
])
def test_parse_answer_hand_written(text, want):
    assert D.parse_answer(text, OPTS) == want


def test_parse_answer_respects_number_of_options():
    assert D.parse_answer("D", ["x", "y", "z"]) is None
    assert D.parse_answer("Answer: E", OPTS + ["fifth"]) == "E"


def test_majority_and_ties_go_to_first_in_list():
    assert D.majority(["A", "B", "B"]) == "B"
    assert D.majority(["A", "B"]) == "A"
    assert D.majority(["C", "A", "A", "C"]) == "C"  # tie: C appears first
    assert D.majority(["D"]) == "D"


# ---------------------------------------------------------------------------------------- fake agents
def _qs(n=2):
    return [{"kind": "cloze", "work": "Emma", "prompt": f"Q{i}", "options": list(OPTS), "answer": "A"} for i in range(n)]


class CopyMajority:
    """Round 0: answers from a fixed cycle (per call); later rounds: the majority of own previous + others' answers
    read from the debate message ('```X```'), own answer first. Records every conversation."""

    def __init__(self, first):
        self.first, self.k, self.seen = list(first), 0, []

    def __call__(self, convs, options, temperature, top_p, fallback=True):
        out = []
        for conv in convs:
            self.seen.append(conv)
            last = conv[-1]["content"]
            others = re.findall(r"```(.*?)```", last)
            if others:
                ans = D.majority([conv[-2]["content"]] + others)
            else:
                ans = self.first[self.k % len(self.first)]
                self.k += 1
            out.append({"answer": ans, "parsed": True, "text": ans, "gen_tokens": 1, "prompt_tokens": len(last)})
        return out


def test_society_of_minds_copying_agents_converge_and_call_counts():
    cfg = D.Protocol(n_agents=3, n_rounds=3)
    agent = CopyMajority(["A", "B", "A", "B", "B", "C"])  # question 0: A B A, question 1: B B C
    led = D.Ledger(agent, _qs(2))
    record = []
    final = D.run_society_of_minds(led, cfg, record)
    assert record[0] == [["A", "B", "A"], ["B", "B", "C"]]
    assert record[1] == [["A", "A", "A"], ["B", "B", "B"]]  # everyone copies the majority: converged
    assert final == ["A", "B"]
    assert led.calls.tolist() == [9, 9]  # N x R calls per question
    # round-1 message of agent 1 of question 0: its own reply as the assistant turn, the OTHER two in the message
    conv = agent.seen[6 + 1]
    assert conv[-2] == {"role": "assistant", "content": "B"}
    assert re.findall(r"```(.*?)```", conv[-1]["content"]) == ["A", "A"]
    assert conv[1]["content"].startswith("Q0")


def test_self_consistency_and_ensemble_calls_and_personas():
    cfg = D.Protocol(n_agents=3)
    agent = CopyMajority(["B", "A", "B"])
    led = D.Ledger(agent, _qs(1))
    assert D.run_self_consistency(led, cfg) == ["B"]
    assert led.calls.tolist() == [3]
    assert len({c[0]["content"] for c in agent.seen}) == 1  # one prompt sampled N times
    agent = CopyMajority(["C", "C", "D"])
    led = D.Ledger(agent, _qs(1))
    assert D.run_ensemble(led, cfg) == ["C"]
    assert len({c[0]["content"] for c in agent.seen}) == 3  # N different personas


class Debaters:
    """Angel answers A, devil B; the judge decides at round `decide` (None: never in universal mode)."""

    def __init__(self, decide):
        self.decide, self.judge_calls, self.seen = decide, 0, []

    def __call__(self, convs, options, temperature, top_p, fallback=True):
        out = []
        for conv in convs:
            self.seen.append(conv)
            sysmsg = conv[0]["content"] if conv[0]["role"] == "system" else ""
            if sysmsg.startswith("You are a moderator"):
                final = D.JUDGE_FINAL in conv[-1]["content"]
                decided = final or (self.decide is not None and self.judge_calls == self.decide)
                self.judge_calls += 1
                text = "Final answer: B" if decided else "Continue"
            elif "disagree" in conv[-1]["content"] or "agree with my answer" in conv[-1]["content"]:
                text = "B"
            else:
                text = "A"
            ans = D.parse_answer(text, options[0])
            out.append({"answer": ans, "parsed": ans is not None, "text": text, "gen_tokens": 1, "prompt_tokens": 1})
        return out


def test_multi_persona_judge_ends_early_or_runs_all_rounds_plus_final():
    cfg = D.Protocol(mp_rounds=3)
    led = D.Ledger(Debaters(decide=0), _qs(1))
    assert D.run_multi_persona(led, cfg, -1) == ["B"] and led.calls.tolist() == [3]  # angel, devil, judge
    agent = Debaters(decide=None)
    led = D.Ledger(agent, _qs(1))
    record = []
    assert D.run_multi_persona(led, cfg, 9, record) == ["B"]
    assert len(record) == 3 and set(record[0]) == {D.AFFIRMATIVE, D.NEGATIVE} and set(record[0][D.NEGATIVE]) == {0}
    assert led.calls.tolist() == [3 * 3 + 1]  # 3 rounds of (angel, devil, judge) + the final-mode judge
    assert led.answer_calls == 3 * 2 + 1  # universal-mode judge calls carry no answer (not in the parse rate)
    # the devil's instruction carries the agreement intensity; the angel's later turns see the devil as the user
    devil = [c for c in agent.seen if "agree with my answer 90%" in c[-1]["content"]]
    assert len(devil) == 3
    angel_r1 = agent.seen[3]
    assert [m["role"] for m in angel_r1] == ["system", "user", "assistant", "user"]
    assert angel_r1[-1]["content"].startswith("B\n\n" + D.ANGEL_NEXT)
    final_judge = agent.seen[-1]
    assert [m["role"] for m in final_judge] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert "Continue" not in final_judge[-1]["content"] and D.JUDGE_FINAL in final_judge[-1]["content"]


def test_devil_instruction_levels():
    q = _qs(1)[0]
    assert "disagree with my answer 100%" in D.devil_instruction(0, q)
    assert "disagree with my answer 60%" in D.devil_instruction(4, q)
    assert "neither agree nor disagree" in D.devil_instruction(5, q)
    assert "agree with my answer 70%" in D.devil_instruction(7, q)
    assert D.devil_instruction(-1, q).startswith("You disagree with my answer.")


# ------------------------------------------------------------------------------------------- LM agent
def test_lm_agent_batched_greedy_equals_unbatched_and_fallback_answers(tmp_path):
    res = tiny_resources(tmp_path, max_positions=512)
    lm, tok = tiny_lm(res["smollm2"])
    assert D.render(tok, [{"role": "user", "content": "w1 w2"}]) == "User: w1 w2\nAssistant:"  # plain template
    convs = [[{"role": "user", "content": " ".join(f"w{j}" for j in range(n))}] for n in (3, 9, 5)]
    opts = [OPTS] * 3
    batched = D.LMAgent(lm, tok, 6, 8, 0)(convs, opts, 0.0, 1.0)
    single = [D.LMAgent(lm, tok, 6, 1, 0)([c], opts[:1], 0.0, 1.0)[0] for c in convs]
    assert [r["text"] for r in batched] == [r["text"] for r in single]
    assert [r["prompt_tokens"] for r in batched] == [7, 13, 9]  # "User" ":" + n words + "Assistant" ":"
    assert all(r["gen_tokens"] == 6 and r["answer"] in "ABCD" for r in batched)  # no EOS; fallback letter
    sampled = D.LMAgent(lm, tok, 4, 8, 1)(convs, opts, 1.0, 0.5)
    again = D.LMAgent(lm, tok, 4, 8, 1)(convs, opts, 1.0, 0.5)
    assert [r["text"] for r in sampled] == [r["text"] for r in again]  # seeded sampling


def test_shared_prefill_equals_separate_prefills(tmp_path):
    """Identical prompts prefilled once and their KV cache copied give the replies of separate prefills (greedy),
    and the order of the returned replies is the order of the conversations (rows are batched by length)."""
    res = tiny_resources(tmp_path, max_positions=512)
    lm, tok = tiny_lm(res["smollm2"])
    a = [{"role": "user", "content": "w1 w2 w3 w4"}]
    b = [{"role": "user", "content": " ".join(f"w{j}" for j in range(11))}]
    convs, opts = [a, b, a, a, b], [OPTS] * 5
    shared = D.LMAgent(lm, tok, 5, 8, 0)(convs, opts, 0.0, 1.0)
    separate = D.LMAgent(lm, tok, 5, 8, 0, share_prefill=False)(convs, opts, 0.0, 1.0)
    one_by_one = [D.LMAgent(lm, tok, 5, 1, 0)([c], opts[:1], 0.0, 1.0)[0] for c in convs]
    assert [r["text"] for r in shared] == [r["text"] for r in separate] == [r["text"] for r in one_by_one]
    assert [r["prompt_tokens"] for r in shared] == [8, 15, 8, 8, 15]
    assert [r["answer"] for r in shared] == [r["answer"] for r in one_by_one]

"""Tests of the MAD paper module (papers/mad_debate.py): the strict answer parser on hand-written replies, the
majority vote's tie rule, the debate message construction and call counts on fake deterministic agents, the batched
LM agent against unbatched greedy decoding, and the spec path on a tiny random Llama (no real resources)."""
from __future__ import annotations

import json
import math
import re

import pytest
import torch

from paperflow.papers import mad_debate as P
from paperflow.spec import ConfigError, Resources
from tiny_llama import tiny_resources

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
    assert P.parse_answer(text, OPTS) == want


def test_parse_answer_respects_number_of_options():
    assert P.parse_answer("D", ["x", "y", "z"]) is None
    assert P.parse_answer("Answer: E", OPTS + ["fifth"]) == "E"


def test_majority_and_ties_go_to_first_in_list():
    assert P.majority(["A", "B", "B"]) == "B"
    assert P.majority(["A", "B"]) == "A"
    assert P.majority(["C", "A", "A", "C"]) == "C"  # tie: C appears first
    assert P.majority(["D"]) == "D"


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
                ans = P.majority([conv[-2]["content"]] + others)
            else:
                ans = self.first[self.k % len(self.first)]
                self.k += 1
            out.append({"answer": ans, "parsed": True, "text": ans, "gen_tokens": 1, "prompt_tokens": len(last)})
        return out


def test_society_of_minds_copying_agents_converge_and_call_counts():
    cfg = P.Config(n_agents=3, n_rounds=3)
    agent = CopyMajority(["A", "B", "A", "B", "B", "C"])  # question 0: A B A, question 1: B B C
    led = P.Ledger(agent, _qs(2))
    record = []
    final = P.run_society_of_minds(led, cfg, record)
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
    cfg = P.Config(n_agents=3)
    agent = CopyMajority(["B", "A", "B"])
    led = P.Ledger(agent, _qs(1))
    assert P.run_self_consistency(led, cfg) == ["B"]
    assert led.calls.tolist() == [3]
    assert len({c[0]["content"] for c in agent.seen}) == 1  # one prompt sampled N times
    agent = CopyMajority(["C", "C", "D"])
    led = P.Ledger(agent, _qs(1))
    assert P.run_ensemble(led, cfg) == ["C"]
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
                final = P.JUDGE_FINAL in conv[-1]["content"]
                decided = final or (self.decide is not None and self.judge_calls == self.decide)
                self.judge_calls += 1
                text = "Final answer: B" if decided else "Continue"
            elif "disagree" in conv[-1]["content"] or "agree with my answer" in conv[-1]["content"]:
                text = "B"
            else:
                text = "A"
            ans = P.parse_answer(text, options[0])
            out.append({"answer": ans, "parsed": ans is not None, "text": text, "gen_tokens": 1, "prompt_tokens": 1})
        return out


def test_multi_persona_judge_ends_early_or_runs_all_rounds_plus_final():
    cfg = P.Config(mp_rounds=3)
    led = P.Ledger(Debaters(decide=0), _qs(1))
    assert P.run_multi_persona(led, cfg, -1) == ["B"] and led.calls.tolist() == [3]  # angel, devil, judge
    agent = Debaters(decide=None)
    led = P.Ledger(agent, _qs(1))
    assert P.run_multi_persona(led, cfg, 9) == ["B"]
    assert led.calls.tolist() == [3 * 3 + 1]  # 3 rounds of (angel, devil, judge) + the final-mode judge
    assert led.answer_calls == 3 * 2 + 1  # universal-mode judge calls carry no answer (not in the parse rate)
    # the devil's instruction carries the agreement intensity; the angel's later turns see the devil as the user
    devil = [c for c in agent.seen if "agree with my answer 90%" in c[-1]["content"]]
    assert len(devil) == 3
    angel_r1 = agent.seen[3]
    assert [m["role"] for m in angel_r1] == ["system", "user", "assistant", "user"]
    assert angel_r1[-1]["content"].startswith("B\n\n" + P.ANGEL_NEXT)
    final_judge = agent.seen[-1]
    assert [m["role"] for m in final_judge] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert "Continue" not in final_judge[-1]["content"] and P.JUDGE_FINAL in final_judge[-1]["content"]


def test_devil_instruction_levels():
    q = _qs(1)[0]
    assert "disagree with my answer 100%" in P.devil_instruction(0, q)
    assert "disagree with my answer 60%" in P.devil_instruction(4, q)
    assert "neither agree nor disagree" in P.devil_instruction(5, q)
    assert "agree with my answer 70%" in P.devil_instruction(7, q)
    assert P.devil_instruction(-1, q).startswith("You disagree with my answer.")


# ------------------------------------------------------------------------------------------- LM agent
def test_lm_agent_batched_greedy_equals_unbatched_and_fallback_answers(tmp_path):
    res = tiny_resources(tmp_path, max_positions=512)
    lm, tok = P.lm_and_tokenizer(res["smollm2"])
    assert P.render(tok, [{"role": "user", "content": "w1 w2"}]) == "User: w1 w2\nAssistant:"  # plain template
    convs = [[{"role": "user", "content": " ".join(f"w{j}" for j in range(n))}] for n in (3, 9, 5)]
    opts = [OPTS] * 3
    batched = P.LMAgent(lm, tok, 6, 8, 0)(convs, opts, 0.0, 1.0)
    single = [P.LMAgent(lm, tok, 6, 1, 0)([c], opts[:1], 0.0, 1.0)[0] for c in convs]
    assert [r["text"] for r in batched] == [r["text"] for r in single]
    assert [r["prompt_tokens"] for r in batched] == [7, 13, 9]  # "User" ":" + n words + "Assistant" ":"
    assert all(r["gen_tokens"] == 6 and r["answer"] in "ABCD" for r in batched)  # no EOS; fallback letter
    sampled = P.LMAgent(lm, tok, 4, 8, 1)(convs, opts, 1.0, 0.5)
    again = P.LMAgent(lm, tok, 4, 8, 1)(convs, opts, 1.0, 0.5)
    assert [r["text"] for r in sampled] == [r["text"] for r in again]  # seeded sampling


# ------------------------------------------------------------------------------------------ questions
PLAY = """THE TRAGEDY OF TESTING

by William Shakespeare

PERSONS REPRESENTED.

{speeches}
"""


def _texts(tmp_path):
    names = ["ALPHA", "BETA", "GAMMA", "DELTA"]
    lines = ["And now the morning breaks upon the silent river of our hopes",
             "I shall not yield to fortune nor to any cruel hand tonight",
             "Speak gently friend for every word you utter finds a listener here",
             "The garden wanders green beneath the castle wall in summer light"]
    sp = "\n\n".join(f"{names[i % 4]}.\n{lines[(i * 3) % 4]}\nwith patience {i}" for i in range(16))
    play = PLAY.format(speeches=sp)
    shakes = tmp_path / "shakespeare.txt"
    shakes.write_text(play + "\n\n" + play.replace("TESTING", "EXAMPLES"))
    novel = ("She walked slowly along the quiet lane, thinking of the letter she had received that morning. "
             "Her sister laughed at the notion that any gentleman could prefer the country to the town. "
             "The evening passed pleasantly enough, though nobody spoke of the dreadful events of the summer. ")
    austen = tmp_path / "austen_small.json"
    austen.write_text(json.dumps({"emma": novel * 3, "persuasion": novel.replace("sister", "cousin") * 3}))
    return str(austen), str(shakes)


def test_split_plays_speeches_and_question_pool(tmp_path):
    _, shakes = _texts(tmp_path)
    plays = P.split_plays(open(shakes).read())
    assert sorted(plays) == ["The Tragedy of Examples", "The Tragedy of Testing"]
    sp = P.speeches(plays["The Tragedy of Testing"])
    assert len(sp) == 16 and sp[0][0] == "Alpha" and sp[0][1].endswith("with patience 0")
    cfg = P.Config(n_questions=3, pool_per_kind=6, min_words=5, speaker_min_speeches=2)
    works = {"Emma": "She walked slowly along the quiet lane, thinking of the letter she had received. " * 4,
             "Persuasion": "The captain returned after eight years and found the family much reduced in fortune. " * 4,
             **plays}
    pool = P.build_questions(cfg, works, set(plays))
    assert {q["kind"] for q in pool} == set(P.KINDS)
    for q in pool:
        correct = q["options"][P.LETTERS.index(q["answer"])]
        assert len(q["options"]) == 4 and len(set(q["options"])) == 4
        if q["kind"] == "cloze":
            assert "____" in q["prompt"] and correct not in q["prompt"].split("?", 1)[1]
        elif q["kind"] == "source":
            assert correct == q["work"]
        else:
            assert correct in {"Alpha", "Beta", "Gamma", "Delta"}
    drawn = P.draw_questions(cfg, pool, 0)
    assert [q["kind"] for q in drawn] == ["cloze", "source", "speaker"]
    assert drawn == P.draw_questions(cfg, pool, 0)  # same draw for every protocol of a seed


# ---------------------------------------------------------------------------------------- spec path
def test_mad_spec_path_tiny_llama(tmp_path):
    tiny = tiny_resources(tmp_path, max_positions=1024)
    austen, shakes = _texts(tmp_path)
    res = Resources(root=str(tmp_path), paths={"smollm2": tiny["smollm2"], "austen": austen, "shakespeare": shakes})
    spec = P.SPEC
    assert spec.compress is None and spec.tradeoff == ("calls", "acc")
    cfg = spec.make_config(dict(n_questions=3, pool_per_kind=4, min_words=5, speaker_min_speeches=2, n_agents=2,
                                n_rounds=2, mp_rounds=2, max_new_tokens=2, batch_size=4, kinds=["cloze", "source", "speaker"]))
    data = spec.prepare(cfg, res)
    metrics = {}
    for variant in spec.variants:
        model = spec.train(cfg, data, variant, 0, lambda *a, **k: None)
        metrics[variant] = spec.evaluate(cfg, model, data)
        assert all(math.isfinite(v) for v in metrics[variant].values())
        assert 0 <= metrics[variant]["acc"] <= 1 and metrics[variant]["chance"] == 0.25
    assert metrics["single"]["calls"] == 1 and metrics["self_consistency"]["calls"] == 2
    assert metrics["ensemble"]["calls"] == 2 and metrics["society_of_minds"]["calls"] == 4
    assert 3 <= metrics["multi_persona"]["calls"] <= 7
    assert metrics["single"]["gen_tokens"] == 2
    assert metrics["single"]["parse_rate"] == 0.0  # tiny model emits w-words: every answer is the fallback's
    again = spec.evaluate(cfg, spec.train(cfg, data, "society_of_minds", 0, None), data)
    assert again == metrics["society_of_minds"]  # deterministic given the seed
    for c in spec.comparisons(cfg):
        assert c.metric in metrics[c.method] and c.baseline in spec.variants


def test_config_validation():
    with pytest.raises(ConfigError, match="kinds"):
        P.Config(kinds=("cloze", "riddle"))
    with pytest.raises(ConfigError, match="n_agents"):
        P.Config(n_agents=1)
    with pytest.raises(ConfigError, match="mp_agree_level"):
        P.Config(mp_agree_level=11)
    with pytest.raises(ConfigError, match="top_p"):
        P.Config(top_p=0.0)
    with pytest.raises(ConfigError, match="n_options"):
        P.Config(n_options=6)
    with pytest.raises(ConfigError, match="pool_per_kind"):
        P.Config(n_questions=100, pool_per_kind=10)
    with pytest.raises(ConfigError, match="unknown"):
        P.SPEC.make_config({"rounds": 3})
    assert P.Config(kinds=["cloze"]).kinds == ("cloze",)

"""Tests of the MAD paper module (papers/mad_debate.py): the question pool built from hand-made plays and novels,
the spec path (dense and int8 agents) on a tiny random Llama (no real resources), and the claims' gates. The agent,
parser and protocols are tested in tests/test_debate.py."""
from __future__ import annotations

import json
import math

import pytest

from paperflow.papers import mad_debate as P
from paperflow.spec import ConfigError, Resources
from tiny_llama import tiny_resources

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
    assert spec.compress is not None and spec.tradeoff == ("calls", "acc")
    cfg = spec.make_config(dict(n_questions=3, pool_per_kind=4, min_words=5, speaker_min_speeches=2, n_agents=2,
                                n_rounds=2, mp_rounds=2, max_new_tokens=2, batch_size=4, kinds=["cloze", "source", "speaker"]))
    data = spec.prepare(cfg, res)
    metrics, int8 = {}, {}
    for variant in spec.variants:
        model = spec.train(cfg, data, variant, 0, lambda *a, **k: None)
        metrics[variant] = spec.evaluate(cfg, model, data)
        levels = spec.compress(cfg, model, data, variant, 0)
        assert set(levels) == ({"int8"} if variant in P.INT8_VARIANTS else set())
        if levels:
            int8[variant] = spec.evaluate(cfg, levels["int8"], data)
            assert int8[variant]["calls"] == metrics[variant]["calls"]  # same protocol, int8 agents
        for m in [metrics[variant]] + ([int8[variant]] if levels else []):
            assert all(math.isfinite(v) for v in m.values())
            assert 0 <= m["acc"] <= 1 and m["chance"] == 0.25
    assert metrics["single"]["calls"] == 1 and metrics["self_consistency"]["calls"] == 2
    assert metrics["society_of_minds"]["calls"] == 4
    assert 3 <= metrics["multi_persona"]["calls"] <= 7
    assert metrics["single"]["gen_tokens"] == 2
    assert metrics["single"]["parse_rate"] == 0.0  # tiny model emits w-words: every answer is the fallback's
    again = spec.evaluate(cfg, spec.train(cfg, data, "society_of_minds", 0, None), data)
    assert again == metrics["society_of_minds"]  # deterministic given the seed
    sm = metrics["society_of_minds"]
    assert sm["questions"] == 3 and 0 <= sm["changed"] <= 1 and 0 <= sm["acc_round0"] <= 1
    assert 0 <= metrics["multi_persona"]["mp_disagree"] <= 1 and "changed" not in metrics["single"]
    assert 0 <= int8["society_of_minds"]["changed"] <= 1
    derived = spec.derive(cfg, [{"variant": v, "seed": 0, **{f"dense/{k}": x for k, x in m.items()}}
                                for v, m in metrics.items()])
    view = [r for r in derived if r["variant"] == "society_of_minds|round0"]
    assert len(view) == 1 and view[0]["dense/acc"] == sm["acc_round0"]
    for c in spec.comparisons(cfg):
        assert c.metric in metrics[c.method] and c.baseline.split("|")[0] in spec.variants
        # every judged row is gated on agents above chance and on enough questions
        assert c.role == "fact" or [g.variant for g in c.gates][:2] == ["single", "society_of_minds"]


def test_debate_metrics_by_hand():
    qs = [{"answer": "A"}, {"answer": "B"}]
    record = [[["A", "B", "A"], ["C", "C", "B"]],  # round 0: majorities A (right), C (wrong)
              [["A", "A", "A"], ["C", "B", "B"]],  # round 1: 1 of 3 and 1 of 3 changed
              [["A", "A", "A"], ["B", "B", "B"]]]  # round 2: 0 and 1 changed
    m = P.debate_metrics("society_of_minds", record, qs)
    assert m["changed"] == pytest.approx((1 + 1 + 0 + 1) / 12) and m["acc_round0"] == 0.5
    mp = [{P.D.AFFIRMATIVE: {0: "A", 1: "B"}, P.D.NEGATIVE: {0: "C", 1: "B"}}]
    assert P.debate_metrics("multi_persona_agree", mp, qs) == {"mp_disagree": 0.5}
    assert P.debate_metrics("single", [], qs) == {}


def test_gates_make_rows_not_testable_and_count_calls():
    """The claims table on made-up metrics: agents at chance, or too few questions per seed -> every judged row `not
    testable`; above chance with enough questions -> judged, the headline only while the debate is active (answers
    change between rounds, Society of Minds beats a single agent); the calls row is a fact either way."""
    import polars as pl

    from paperflow.report.claims import claims_rows

    cfg = P.Config()
    calls = {"single": 1, "self_consistency": 3, "society_of_minds": 6, "multi_persona": 4, "multi_persona_agree": 4}

    def table(single_acc, questions=120.0, changed=0.2):
        rows = [{"variant": v, "seed": s, "dense/acc": (single_acc if v == "single" else 0.5) + 0.01 * s * (v != "single"),
                 "dense/calls": float(calls[v]), "dense/questions": questions, "compressed:int8/questions": questions,
                 "compressed:int8/acc": single_acc if v == "single" else 0.5,
                 "dense/changed": changed if v == "society_of_minds" else None,
                 "compressed:int8/changed": changed if v == "society_of_minds" else None,
                 "dense/mp_disagree": {"multi_persona": 0.6, "multi_persona_agree": 0.2}.get(v, None)}
                for v in P.VARIANTS for s in range(3)]
        return pl.DataFrame(rows)

    low = claims_rows(P.SPEC, cfg, table(0.30), "test")
    assert {r["verdict"] for r in low if r["role"] != "fact"} == {"not testable"}
    few = claims_rows(P.SPEC, cfg, table(0.40, questions=12.0), "test")
    assert {r["verdict"] for r in few if r["role"] != "fact"} == {"not testable"}
    assert "questions" in next(r for r in few if r["role"] == "headline")["reason"]
    high = claims_rows(P.SPEC, cfg, table(0.40), "test")
    head = next(r for r in high if r["role"] == "headline")
    assert head["verdict"] == "reproduced" and "[active]" in head["mechanism"]
    off = next(r for r in claims_rows(P.SPEC, cfg, table(0.40, changed=0.0), "test") if r["role"] == "headline")
    assert off["verdict"] == "not testable" and "NOT ACTIVE" in off["mechanism"]
    fact = next(r for r in high if r["role"] == "fact")
    assert (fact["method_mean"], fact["baseline_mean"], fact["ratio"]) == (3.0, 6.0, 0.5)


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

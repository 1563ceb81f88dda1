"""The answer rules: a server answer that no real Laya could give never becomes a Decision."""

from __future__ import annotations

import pytest

from pytest_laya import Choice, LayaCallError, LayaConfigError, Noul, Score
from pytest_laya.wire.decision import parse_answers, parse_usage
from pytest_laya.wire.questions import ChoiceQuestion, NoulQuestion, ScoreQuestion, normalize_questions

QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team?", "criteria": {"billing": "money", "tech": "bugs"}},
    "urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["low", "mid", "high"]},
    "refund": {"type": "noul", "instructions": "Refund?"},
}
GOOD = {
    "team": {"type": "choice", "choice": "billing", "probabilities": {"billing": 0.8, "tech": 0.2}, "confidence": 0.6},
    "urgency": {"type": "score", "score": 1.5, "probabilities": {"0": 0.1, "1": 0.3, "2": 0.6}, "confidence": 0.3},
    "refund": {"type": "noul", "noul": 0.9, "confidence": 0.9},
}


def answers(**changes):
    raw = {k: dict(v) for k, v in GOOD.items()}
    for qid, patch in changes.items():
        raw[qid].update(patch)
    return raw


def test_good_answers_become_typed_answers_in_question_order():
    parsed = parse_answers(answers(), normalize_questions(QUESTIONS))
    assert list(parsed) == ["team", "urgency", "refund"]
    assert parsed["team"] == Choice(key="billing", probabilities={"billing": 0.8, "tech": 0.2}, confidence=0.6)
    score = parsed["urgency"]
    assert isinstance(score, Score) and score.level == 2 and score.expected == 1.5
    assert score.probabilities == {0: 0.1, 1: 0.3, 2: 0.6}
    assert score.legend == {0: "low", 1: "mid", 2: "high"}
    assert parsed["refund"] == Noul(p=0.9, confidence=0.9)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"team": {"probabilities": {"billing": 1.2, "tech": -0.2}}}, "outside"),
        ({"team": {"probabilities": {"billing": 0.5, "tech": 0.3}}}, "sum to 0.8000"),
        ({"team": {"choice": "sales"}}, "not among the options"),
        ({"team": {"probabilities": {"billing": 0.8, "tech": 0.1, "sales": 0.1}}}, "not offered \\['sales'\\]"),
        ({"team": {"probabilities": {"billing": 1.0}}}, "missing \\['tech'\\]"),
        ({"urgency": {"probabilities": {"0": 0.5, "1": 0.5}}}, "missing \\['2'\\]"),
        ({"urgency": {"score": 0.2}}, "disagrees with its probabilities"),
        # Within the mean's tolerance, but below the first level or past the last: no mean of levels.
        ({"urgency": {"score": -0.03, "probabilities": {"0": 1.0, "1": 0.0, "2": 0.0}}},
         "score -0.03 disagrees with its probabilities \\(their mean is 0.0000\\)"),
        ({"urgency": {"score": 2.03, "probabilities": {"0": 0.0, "1": 0.0, "2": 1.0}}}, "score 2.03 disagrees"),
        ({"urgency": {"score": "high"}}, "score must be a number, got 'high'"),
        ({"refund": {"noul": 1.01}}, "noul 1.01 is outside"),
        ({"refund": {"confidence": float("nan")}}, "must be a number"),
        ({"refund": {"type": "choice"}}, "a noul question was asked"),
        ({"team": {"probabilities": {"billing": True, "tech": 0}}}, "must be a number"),
    ],
)
def test_broken_answers_are_call_errors(changes, message):
    with pytest.raises(LayaCallError, match=message) as info:
        parse_answers(answers(**changes), normalize_questions(QUESTIONS))
    assert info.value.code == "bad_answer"


def test_missing_and_unasked_answers_are_call_errors():
    asked = normalize_questions(QUESTIONS)
    partial = answers()
    del partial["refund"]
    with pytest.raises(LayaCallError, match="no answer for question"):
        parse_answers(partial, asked)
    with pytest.raises(LayaCallError, match="nobody asked"):
        parse_answers({**answers(), "extra": GOOD["refund"]}, asked)


def test_rounding_within_tolerance_is_accepted():
    # Twelve options rounded to 4 decimals miss 1.0 by a little; that is not an error.
    crit = {f"o{i}": f"option {i}" for i in range(12)}
    asked = normalize_questions({"q": {"type": "choice", "instructions": "?", "criteria": crit}})
    probs = {k: 0.0833 for k in crit}
    assert parse_answers({"q": {"type": "choice", "choice": "o0", "probabilities": probs, "confidence": 0.1}}, asked)


def test_list_criteria_keys_are_spelled_as_the_server_spells_them():
    asked = normalize_questions({"q": ChoiceQuestion("?", ["yes", 2, True])})
    assert asked["q"].option_keys == ("yes", "2", "true")


def test_dataclass_questions_normalise_to_wire_dicts():
    asked = normalize_questions({
        "a": ChoiceQuestion("Which?", {"x": "ex"}),
        "b": ScoreQuestion("How much?", ["none", "lots"]),
        "c": NoulQuestion("Is it?", {"true": "yes", "false": "no"}),
    })
    assert asked["a"].wire == {"type": "choice", "instructions": "Which?", "criteria": {"x": "ex"}}
    assert asked["b"].option_keys == ("0", "1")
    assert asked["c"].wire["criteria"] == {"true": "yes", "false": "no"}


@pytest.mark.parametrize(
    ("questions", "code", "message"),
    [
        ({}, "no_questions", "ask at least one"),
        ({"q": {"type": "ranking", "instructions": "?"}}, "invalid_question", "unsupported type 'ranking'"),
        ({"q": {"type": "choice", "instructions": "?"}}, "invalid_question", "criteria"),
        ({"q": {"type": "choice", "instructions": "?", "criteria": ["a", "a"]}}, "invalid_question", "repeats"),
        ({"q": {"type": "score", "instructions": "?", "criteria": []}}, "invalid_question", "non-empty list"),
        ({"q": {"type": "noul", "instructions": " "}}, "invalid_question", "instructions"),
        ({"q": {"type": "noul", "instructions": "?", "criteria": {"maybe": "x"}}}, "invalid_question", "true'/'false"),
        ({"": {"type": "noul", "instructions": "?"}}, "invalid_question", "non-empty strings"),
        (["not", "a", "mapping"], "invalid_question", "must be a mapping"),
    ],
)
def test_questions_no_server_could_answer_are_config_errors(questions, code, message):
    with pytest.raises(LayaConfigError, match=message) as info:
        normalize_questions(questions)
    assert info.value.code == code


def test_usage_is_checked_and_extra_counts_kept():
    usage = parse_usage({"input_tokens": 40, "output_tokens": 0, "truncated": True, "state_tokens": 12})
    assert usage.input_tokens == 40 and usage.truncated and usage.extra["state_tokens"] == 12
    with pytest.raises(LayaCallError, match="input_tokens"):
        parse_usage({"input_tokens": -3})


def test_a_noul_answer_without_confidence_is_accepted_with_none():
    # Jev's noul answer is `type` and `noul` only; laya-serve with LAYA_JEV_STRICT=1 sends just that.
    strict = {**answers(), "refund": {"type": "noul", "noul": 0.7}}
    parsed = parse_answers(strict, normalize_questions(QUESTIONS))
    assert parsed["refund"] == Noul(p=0.7, confidence=None)


@pytest.mark.parametrize("qid", ["team", "urgency"])
def test_choice_and_score_answers_without_confidence_are_still_refused(qid):
    # Every Jev server sends a confidence on choice and score answers; none omits it.
    broken = answers()
    del broken[qid]["confidence"]
    with pytest.raises(LayaCallError, match="has no confidence"):
        parse_answers(broken, normalize_questions(QUESTIONS))

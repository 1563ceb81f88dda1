"""`answers_hold`, the answer rules' accept path, says True exactly where `answers_breaks` finds nothing.

The spec check and the client ask it first and word the rules only when it says False, so an
answer it accepted wrongly would pass every check. Conforming answers (the strategies' own) are
edited one or two ways at a time, many of them to the edge of a rule: a sum just inside or outside
its tolerance, a near tie, a number label, a bool, NaN, a legend entry.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_laya.strategies import question_sets, responses
from pytest_laya.wire.answer_rules import SUM_TOLERANCE, TIE_TOLERANCE, answers_breaks, answers_hold
from pytest_laya.wire.questions import normalize_questions
from tests.helpers.properties import example_count

_VALUES = st.sampled_from([
    0.0, 1.0, 0.5, -0.0, -1e-9, 1.0000001, 1 + SUM_TOLERANCE, 1 - SUM_TOLERANCE, 2.0, -1.0, TIE_TOLERANCE,
    math.nan, math.inf, -math.inf, True, False, None, "0.5", 0, 1, 2, 2**53, 2**53 + 1, [], {}, 7, "7", "true",
])


_KINDS = ["value", "drop", "add", "choice", "type", "answer", "legend", "score",
          "sum", "sum", "sum", "tie", "tie", "tie", "confidence", "confidence"]


def _edit(draw: st.DrawFn, answers: dict[str, Any], asked: dict[str, Any]) -> None:
    """One edit of `answers` in place: a value, a member, a key, a whole answer, or a nudge to
    the edge of the sum or the tie tolerance."""
    kind = draw(st.sampled_from(_KINDS))
    qid = draw(st.sampled_from(sorted(answers) or ["q"]))
    answer = answers.get(qid)
    if kind == "answer":
        if draw(st.booleans()) and answers:
            del answers[qid]
        else:
            answers[draw(st.sampled_from([qid, "other", "x"]))] = draw(_VALUES | st.just({"type": "noul", "noul": 0.5}))
        return
    if not isinstance(answer, dict):
        return
    probabilities = answer.get("probabilities")
    keys = sorted(probabilities) if isinstance(probabilities, dict) else []
    if kind == "value":
        member = draw(st.sampled_from(["confidence", "noul", "score", "probabilities", "choice"]))
        if member == "probabilities" and keys and draw(st.booleans()):
            probabilities[draw(st.sampled_from(keys))] = draw(_VALUES)
        else:
            answer[member] = draw(_VALUES)
    elif kind == "sum" and keys:  # the sum moved by just under or just over its tolerance
        key = draw(st.sampled_from(keys))
        step = draw(st.sampled_from([0.99, 1.01, 1.5])) * SUM_TOLERANCE
        value = float(probabilities[key])
        probabilities[key] = value + step if value + step <= 1.0 else value - step
    elif kind == "tie" and len(keys) > 1 and "choice" in answer:  # the choice just under the top
        top, other = draw(st.permutations(keys))[:2]
        gap = draw(st.sampled_from([0.5, 0.9, 1.1, 2.0])) * TIE_TOLERANCE
        probabilities[other] = max(0.0, float(probabilities[top]) - gap)
        answer["choice"] = other
    elif kind == "confidence":
        answer.pop("confidence", None)
    elif kind == "drop":
        answer.pop(draw(st.sampled_from(["noul", "score", "probabilities", "choice", "type", "legend"])), None)
    elif kind == "add" and keys:
        probabilities[draw(st.sampled_from(["extra", "0", "1", "99"]))] = draw(st.sampled_from([0.0, 0.5]))
    elif kind == "choice" and keys:
        answer["choice"] = draw(st.sampled_from([*keys, 7, True, 1.0, "nope"]))
    elif kind == "type":
        answer["type"] = draw(st.sampled_from(["choice", "score", "noul", "other", 1]))
    elif kind == "legend":
        answer["legend"] = draw(st.sampled_from([{}, {"0": "low"}, {"99": "x"}, {"01": "x"}, {"0": 1}, [], "x"]))
    elif kind == "score" and qid in asked and asked[qid].type == "score" and keys:
        mean = sum(int(k) * float(p) for k, p in probabilities.items()
                   if isinstance(p, (int, float)) and not isinstance(p, bool))
        answer["score"] = mean + draw(st.sampled_from([0.0, 0.01, 0.05, 0.5, -0.5]))


@st.composite
def _answered(draw: st.DrawFn) -> tuple[Any, dict[str, Any]]:
    questions = draw(question_sets(max_questions=4))
    asked = normalize_questions(questions)
    answers = copy.deepcopy(draw(responses(questions))["answers"])
    for _ in range(draw(st.sampled_from([0, 1, 1, 1, 2]))):
        _edit(draw, answers, asked)
    return (answers if draw(st.integers(0, 20)) else draw(_VALUES)), asked


@settings(max_examples=example_count(300), deadline=None)
@given(_answered())
def test_answers_hold_exactly_when_no_rule_breaks(answered):
    answers, asked = answered
    breaks = list(answers_breaks(answers, asked))
    assert answers_hold(answers, asked) is (not breaks), [b.message() for b in breaks]


def test_each_kind_of_break_is_refused():
    asked = normalize_questions({
        "team": {"type": "choice", "instructions": "t", "criteria": ["a", "b"]},
        "lvl": {"type": "score", "instructions": "l", "criteria": ["low", "mid", "high"]},
        "yes": {"type": "noul", "instructions": "y"},
        "n": {"type": "choice", "instructions": "n", "criteria": [7, True]},
        "map": {"type": "choice", "instructions": "m", "criteria": {"7": "seven", "8": "eight"}},
    })
    good = {"team": {"type": "choice", "choice": "a", "probabilities": {"a": 0.6, "b": 0.4}, "confidence": 0.2},
            "lvl": {"type": "score", "score": 1.0, "probabilities": {"0": 0.25, "1": 0.5, "2": 0.25},
                    "confidence": 0.5, "legend": {"0": "low"}},
            "yes": {"type": "noul", "noul": 0.3},
            "n": {"type": "choice", "choice": 7, "probabilities": {"7": 0.9, "true": 0.1}, "confidence": 0.8},
            "map": {"type": "choice", "choice": "7", "probabilities": {"7": 0.9, "8": 0.1}, "confidence": 0.8}}
    assert answers_hold(good, asked) and not list(answers_breaks(good, asked))
    edits = [
        ("team", "probabilities", {"a": 0.6, "b": 0.6}),  # probabilities-sum
        ("team", "choice", "b"),  # choice-most-probable
        ("team", "choice", "c"),  # choice-offered
        ("team", "confidence", 1.5),  # confidence-range
        ("lvl", "score", 1.5),  # score-expectation
        ("lvl", "legend", {"3": "x"}),  # score-legend
        ("yes", "noul", math.nan),  # probability-range
        ("n", "choice", True),  # a label's own spelling only for its own key
        ("team", "type", "noul"),  # answer-shape
        ("team", "probabilities", {"a": 0.6 + 1.5 * SUM_TOLERANCE, "b": 0.4}),  # just over the sum's tolerance
        ("team", "probabilities", {"a": 0.5 - 2 * TIE_TOLERANCE, "b": 0.5 + 2 * TIE_TOLERANCE}),  # just past a tie
        ("map", "choice", 7),  # 7 is a label's own spelling only for a list label
        ("team", "probabilities", None),  # answer-shape: no object of probabilities
        ("team", "probabilities", [0.6, 0.4]),
    ]
    for qid, member, value in edits:
        edited = copy.deepcopy(good)
        edited[qid][member] = value
        assert not answers_hold(edited, asked) and list(answers_breaks(edited, asked)), (qid, member, value)
    for qid, member, value in [("team", "probabilities", {"a": 0.6 + 0.9 * SUM_TOLERANCE, "b": 0.4}),
                               ("team", "probabilities", {"a": 0.5 - 0.5 * TIE_TOLERANCE, "b": 0.5}),
                               ("yes", "confidence", 1.0)]:  # just inside: still kept
        edited = copy.deepcopy(good)
        edited[qid][member] = value
        if member == "probabilities" and value["a"] < value["b"]:
            edited[qid]["choice"] = "a"
        assert answers_hold(edited, asked) and not list(answers_breaks(edited, asked)), (qid, member, value)
    without = copy.deepcopy(good)
    del without["team"]["confidence"]  # a choice answer needs its confidence (a noul's may be absent)
    assert not answers_hold(without, asked) and list(answers_breaks(without, asked))
    assert not answers_hold({k: v for k, v in good.items() if k != "yes"}, asked)  # answers-asked
    assert not answers_hold({**good, "extra": good["yes"]}, asked)

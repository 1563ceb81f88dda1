"""Malformed 200 answers (issue 31): each is a `LayaCallError` with the code ``bad_answer`` naming
the rule it breaks, never a raw ValueError, OverflowError or TypeError from inside `decide()`."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_laya import LayaCallError, ServedLayaClient
from pytest_laya.wire.decision import parse_answers
from pytest_laya.wire.questions import normalize_questions
from tests.helpers.properties import example_count

QUESTIONS = {
    "urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["low", "mid", "high"]},
    "team": {"type": "choice", "instructions": "Which team?", "criteria": ["billing", "tech"]},
    "refund": {"type": "noul", "instructions": "Refund?"},
}
GOOD: dict[str, Any] = {
    "urgency": {"type": "score", "score": 1.0, "probabilities": {"0": 0.2, "1": 0.6, "2": 0.2}, "confidence": 0.5,
                "legend": {"0": "low"}},
    "team": {"type": "choice", "choice": "billing", "probabilities": {"billing": 0.7, "tech": 0.3}, "confidence": 0.5},
    "refund": {"type": "noul", "noul": 0.9, "confidence": 0.9},
}


def body_text(answers: Any) -> str:
    return json.dumps({"answers": answers, "usage": {"input_tokens": 3, "output_tokens": 0}})


def decide(text: str | bytes):
    def respond(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "application/json"}, content=text)

    with ServedLayaClient("http://laya.test", transport=httpx.MockTransport(respond)) as client:
        return client.decide("I was charged twice.", QUESTIONS)


def changed(qid: str, **members: Any) -> dict[str, Any]:
    return {**GOOD, qid: {**GOOD[qid], **members}}


def test_a_good_answer_is_a_decision():
    decision = decide(body_text(GOOD))
    assert decision["team"].key == "billing" and decision["urgency"].level == 1


HUGE = "9" * 401


@pytest.mark.parametrize(("text", "rule"), [
    (body_text(changed("urgency", legend={"²": "x"})), "score-legend"),        # a digit to isdigit, not to int
    (body_text(changed("urgency", legend={"9" * 5000: "x"})), "score-legend"),  # past int()'s digit limit
    (body_text(GOOD).replace('"confidence": 0.5', f'"confidence": {HUGE}', 1), "confidence-range"),
    (body_text(GOOD).replace('"score": 1.0', f'"score": {HUGE}', 1), "answer-shape"),
    (body_text(GOOD).replace('"noul": 0.9', f'"noul": -{HUGE}', 1), "probability-range"),
    (body_text(changed("team", choice=["billing"])), "choice-offered"),
    (body_text(changed("team", choice={"billing": 1})), "choice-offered"),
    (body_text(changed("team", choice=10**30)), "choice-offered"),
    (body_text(changed("team", probabilities={"billing": 0.8, "tech": 0.8})), "probabilities-sum"),
    (body_text(changed("team", choice="tech")), "choice-most-probable"),
    (body_text(changed("urgency", score=2.0)), "score-expectation"),
    (body_text(changed("urgency", legend=["low"])), "score-legend"),
    (body_text(changed("refund", noul=float("nan"))), "probability-range"),
])
def test_a_malformed_answer_is_a_bad_answer_naming_its_rule(text, rule):
    with pytest.raises(LayaCallError) as info:
        decide(text)
    assert info.value.code == "bad_answer"
    assert f"(rule {rule})" in str(info.value)


def test_a_usage_count_too_long_to_show_is_a_bad_answer_that_says_so():
    text = body_text(GOOD).replace('"output_tokens": 0', f'"output_tokens": -{HUGE}')
    with pytest.raises(LayaCallError, match="output_tokens must be a non-negative integer, got an integer of more") as info:
        decide(text)
    assert info.value.code == "bad_answer"


# Any JSON value, the awkward ones first: huge integers, NaN and infinities, odd digits, nesting.
LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=10**300, max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(["²", "0", "1", "billing", "tech", "9" * 50, ""]),
    st.text(max_size=8),
)
JSON_VALUES = st.recursive(LEAVES, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.one_of(st.sampled_from(["0", "1", "2", "²", "billing", "type"]),
                                                           st.text(max_size=4)), inner, max_size=3)), max_leaves=8)
MEMBERS = ["type", "choice", "score", "noul", "probabilities", "confidence", "legend"]


@st.composite
def malformed_answers(draw) -> Any:
    """GOOD with some members of some answers (or whole answers) replaced by any JSON value."""
    answers: Any = json.loads(json.dumps(GOOD))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        qid = draw(st.sampled_from(list(GOOD) + ["unasked"]))
        where = draw(st.sampled_from(["whole", "member", "probability"]))
        if where == "whole" or qid not in answers or not isinstance(answers[qid], dict):
            answers[qid] = draw(JSON_VALUES)
        elif where == "member":
            answers[qid][draw(st.sampled_from(MEMBERS))] = draw(JSON_VALUES)
        elif isinstance(answers[qid].get("probabilities"), dict):
            key = draw(st.sampled_from(["0", "1", "billing", "tech", "²", "other"]))
            answers[qid]["probabilities"][key] = draw(JSON_VALUES)
    if draw(st.booleans()) and draw(st.booleans()):
        answers = draw(JSON_VALUES)
    return answers


@settings(max_examples=example_count(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(malformed_answers())
def test_whatever_the_answers_hold_decide_returns_a_decision_or_raises_a_call_error(answers):
    asked = normalize_questions(QUESTIONS)
    try:
        parse_answers(answers, asked)  # the rules themselves, without the client's safety net
    except LayaCallError as exc:
        assert exc.code == "bad_answer" and "(rule " in str(exc)
    try:
        text = body_text(answers)
    except ValueError:  # an integer json itself will not write
        return
    try:
        decide(text)
    except LayaCallError as exc:
        assert exc.code in ("bad_answer", "bad_response"), exc

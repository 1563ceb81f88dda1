"""`Spec.violations(..., request_body=...)`: a decision's answers held to the answer rules (issue 31)."""

from __future__ import annotations

import json

import pytest

from pytest_laya.specs import Spec
from tests.helpers.recorded import recordings

JSON = {"content-type": "application/json"}
QUESTIONS = {"team": {"type": "choice", "instructions": "Which team?", "criteria": ["billing", "tech"]},
             "refund": {"type": "noul", "instructions": "Refund?"}}
REQUEST = json.dumps({"state": "s", "questions": QUESTIONS}).encode()
TEAM = {"type": "choice", "choice": "billing", "probabilities": {"billing": 0.7, "tech": 0.3}, "confidence": 0.5}
REFUND = {"type": "noul", "noul": 0.9, "confidence": 0.9}


def body(**answers) -> bytes:
    return json.dumps({"model": "m", "answers": answers, "usage": {"input_tokens": 1, "output_tokens": 0}}).encode()


def rule_violations(response: bytes, request=REQUEST, path="/v1/systemone", status=200) -> list[str]:
    found = Spec.current().violations("POST", path, status, JSON, response, request_body=request)
    return [str(v) for v in found if v.rule and not v.rule.startswith("#")]


def test_answers_that_keep_the_rules_have_no_rule_violations():
    assert rule_violations(body(team=TEAM, refund=REFUND)) == []


@pytest.mark.parametrize(("answers", "expected"), [
    ({"team": {**TEAM, "probabilities": {"billing": 0.8, "tech": 0.8}}, "refund": REFUND},
     ["/body/answers/team/probabilities: rule probabilities-sum: expected a sum of 1 within 0.02, got 1.6000"]),
    ({"team": {**TEAM, "choice": "tech"}, "refund": REFUND},
     ["/body/answers/team/choice: rule choice-most-probable: expected the most probable option 'billing' (p=0.7), "
      "got 'tech' (p=0.3)"]),
    ({"team": {**TEAM, "probabilities": {"billing": 0.7, "sales": 0.3}}, "refund": REFUND},
     ["/body/answers/team/probabilities: rule options-offered: expected exactly the options ['billing', 'tech'], "
      "got missing ['tech']; not offered ['sales']"]),
    ({"team": TEAM},
     ["/body/answers: rule answers-asked: expected answers for ['team', 'refund'], got none for ['refund']"]),
    ({"team": TEAM, "refund": REFUND, "other": REFUND},
     ["/body/answers: rule answers-asked: expected answers for ['team', 'refund'] only, got answers for ['other']"]),
    ({"team": TEAM, "refund": {"type": "score", "score": 0, "probabilities": {"0": 1}, "confidence": 0.5}},
     ["/body/answers/refund/type: rule answer-shape: expected 'noul', got 'score'"]),
])
def test_each_broken_rule_is_a_violation_named_by_rule(answers, expected):
    assert rule_violations(body(**answers)) == expected


def test_a_score_expectation_is_held_to_its_probabilities():
    request = json.dumps({"state": "s", "questions": {"u": {"type": "score", "instructions": "?", "criteria": ["a", "b", "c"]}}})
    score = {"type": "score", "score": 2.0, "probabilities": {"0": 0.2, "1": 0.6, "2": 0.2}, "confidence": 0.5}
    assert rule_violations(body(u=score), request=request) == [
        "/body/answers/u/score: rule score-expectation: expected the mean level 1.0000, got 2.0"]


def test_an_answer_the_schema_faults_is_left_to_the_schema():
    broken = {**TEAM, "probabilities": {"billing": 1.5, "tech": 0.8}}  # out of range and summing to 2.3
    found = [str(v) for v in Spec.current().violations("POST", "/v1/systemone", 200, JSON, body(team=broken, refund=REFUND),
                                                       request_body=REQUEST)]
    assert found == ["/body/answers/team/probabilities/billing: expected <= 1, got 1.5"]


def test_each_batch_result_is_held_to_the_rules():
    batch = {"model": "m", "results": [
        {"model": "m", "answers": {"team": TEAM, "refund": REFUND}, "usage": {"input_tokens": 1, "output_tokens": 0}},
        {"model": "m", "answers": {"team": {**TEAM, "choice": "tech"}, "refund": REFUND},
         "usage": {"input_tokens": 1, "output_tokens": 0}}],
        "total_usage": {"input_tokens": 2, "output_tokens": 0}}
    request = json.dumps({"states": ["a", "b"], "questions": QUESTIONS})
    found = rule_violations(json.dumps(batch).encode(), request=request, path="/v1/systemone/batch")
    assert [v.split(":")[0] for v in found] == ["/body/results/1/answers/team/choice"]


@pytest.mark.parametrize("request_body", [None, b"not json", json.dumps({"state": "s", "questions": {}}).encode(),
                                          json.dumps({"state": "s", "questions": {"q": {"type": "ranking"}}}).encode()])
def test_without_a_request_that_asked_valid_questions_no_rule_applies(request_body):
    assert rule_violations(body(team={**TEAM, "choice": "tech"}), request=request_body) == []


def test_every_recorded_decision_keeps_the_rules():
    decisions = [r for r in recordings() if r.status == 200 and r.path.startswith("/v1/systemone") and r.request_bytes]
    assert len(decisions) > 20
    for recording in decisions:
        assert rule_violations(recording.body_bytes, request=recording.request_bytes, path=recording.path) == [], recording.id


def test_the_same_answer_is_judged_by_the_request_and_the_spec_of_each_check():
    """The rules' verdict on one body is reused between the two specs' checks of one exchange,
    never for another request, path or status with the same body."""
    response = body(team=TEAM, refund=REFUND)
    asks_only_team = json.dumps({"state": "s", "questions": {"team": QUESTIONS["team"]}}).encode()
    for spec in (Spec.current(), Spec.target(), Spec.current()):
        found = spec.violations("POST", "/v1/systemone", 200, JSON, response, request_body=asks_only_team)
        assert [v.rule for v in found if v.rule and not v.rule.startswith("#")] == ["answers-asked"]
    assert rule_violations(response, request=asks_only_team) == [
        "/body/answers: rule answers-asked: expected answers for ['team'] only, got answers for ['refund']"]
    assert rule_violations(response) == []
    assert rule_violations(response, request=asks_only_team, status=201) == []


def test_questions_are_read_as_each_request_asks_them_whatever_was_asked_before():
    """Normalised questions are remembered by the parsed questions: ones differing only in order, or
    in a value's type, are each read as asked, in any order of requests."""
    from pytest_laya.specs.answer_check import _asked
    from pytest_laya.wire.errors import LayaConfigError
    from pytest_laya.wire.questions import normalize_questions

    variants = [
        {"q": {"type": "choice", "instructions": "Which?", "criteria": ["a", "b"]}},
        {"q": {"type": "choice", "instructions": "Which?", "criteria": ["b", "a"]}},
        {"q": {"type": "score", "instructions": "How much?", "levels": 3}},
        {"q": {"type": "score", "instructions": "How much?", "levels": 3.0}},
        {"q": {"type": "score", "instructions": "How much?", "levels": "3"}},
        {"q": {"type": "score", "instructions": "How much?", "levels": True}},
        {"a": {"type": "noul", "instructions": "x"}, "b": {"type": "noul", "instructions": "y"}},
        {"b": {"type": "noul", "instructions": "y"}, "a": {"type": "noul", "instructions": "x"}},
    ]

    def direct(questions):
        try:
            return normalize_questions(questions)
        except LayaConfigError:
            return None

    for order in (variants, variants[::-1], variants + variants):
        for questions in order:
            got = _asked(json.dumps({"state": "s", "questions": questions}).encode())
            want = direct(questions)
            assert (got is None) == (want is None) and (got is None or list(got.items()) == list(want.items())), questions

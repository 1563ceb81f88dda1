"""The validator refuses what JSON refuses and stays bounded on hostile bodies (issue 31).

Python's json reads NaN, Infinity and repeated member names; the specs' bounds let NaN through
(every comparison with it is false). A body of 100,000 bad probabilities listed every violation:
20 s and 7 MB of text. Time is measured by `bench/measure_hostile_validation.py`, not here; these
tests hold the cap and the text bound.
"""

from __future__ import annotations

import json

import pytest

from pytest_laya.specs import Spec, SpecViolationError, Violations
from pytest_laya.specs.bounded import LISTED
from pytest_laya.wire.exchange import Exchange

JSON = {"content-type": "application/json"}
SPECS = [Spec.current, Spec.target]


def answer_body(probabilities: str = '{"a": 0.7, "b": 0.3}', confidence: str = "0.4", answers: str | None = None) -> bytes:
    answer = f'{{"type": "choice", "choice": "a", "probabilities": {probabilities}, "confidence": {confidence}}}'
    answers = answers if answers is not None else f'"answers": {{"q": {answer}}}'
    return (f'{{"model": "m", {answers}, "usage": {{"input_tokens": 1, "output_tokens": 0}},'
            f' "served_by": {{"checkpoint": "c", "revision": "r", "device": "cpu", "weights_dtype": "float32",'
            f' "compiled": false}}}}').encode()


def violations(spec, body: bytes) -> Violations:
    return spec().violations("POST", "/v1/systemone", 200, JSON, body)


def body_violations(spec, body: bytes) -> list[str]:
    return [str(v) for v in violations(spec, body) if v.where.startswith("/body")]


@pytest.mark.parametrize("spec", SPECS)
def test_a_conforming_body_still_conforms(spec):
    assert body_violations(spec, answer_body()) == []


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize(("body", "named"), [
    (answer_body(probabilities='{"a": NaN, "b": 0.3}'), "NaN is not a JSON number"),
    (answer_body(confidence="NaN"), "NaN is not a JSON number"),
    (answer_body(confidence="Infinity"), "Infinity is not a JSON number"),
    (answer_body(probabilities='{"a": -Infinity, "b": 0.3}'), "-Infinity is not a JSON number"),
])
def test_nan_and_infinity_are_violations_under_both_specs(spec, body, named):
    [found] = body_violations(spec, body)
    assert found.startswith("/body: expected a valid JSON application/json body, got invalid JSON") and named in found


@pytest.mark.parametrize("spec", SPECS)
def test_a_repeated_answers_member_whose_first_copy_is_invalid_is_a_violation(spec):
    first = '"answers": {"q": {"type": "choice", "choice": "a", "probabilities": {"a": 7}, "confidence": 9}}'
    second = '"answers": {"q": {"type": "choice", "choice": "a", "probabilities": {"a": 0.7, "b": 0.3}, "confidence": 0.4}}'
    [found] = body_violations(spec, answer_body(answers=f"{first}, {second}"))
    assert "the member name 'answers' appears more than once in one object" in found


def hostile(count: int) -> bytes:
    """`count` probabilities, each out of range: ~1.3 MB at 100,000."""
    return answer_body(probabilities=json.dumps({f"o{i}": 2 for i in range(count)}))


@pytest.mark.parametrize("spec", SPECS)
def test_a_hostile_body_lists_at_most_the_cap_and_stays_under_100_kb_of_text(spec):
    body = hostile(100_000)
    assert len(body) > 1_000_000
    found = violations(spec, body)
    assert len(found) == LISTED
    assert found.unlisted > 0 and not found.counted_all
    summary = found.summary()
    assert summary is not None and summary.startswith(f"... and at least {found.unlisted:,} more")
    exchange = Exchange("POST", "http://laya.test/v1/systemone", "/v1/systemone", 200, JSON, body, None, 0.0)
    message = str(SpecViolationError(exchange, spec().name, found))
    assert len(message.encode()) < 100_000 and summary in message
    assert f"(at least {found.total:,} violations)" in message


@pytest.mark.parametrize("spec", SPECS)
def test_a_few_more_than_the_cap_are_counted_exactly(spec):
    found = violations(spec, hostile(LISTED + 7))
    listed_in_body = sum(1 for v in found if v.where.startswith("/body"))
    assert len(found) == LISTED and found.counted_all
    assert listed_in_body + found.unlisted == LISTED + 7  # the headers' violations come first, all listed
    assert found.summary() == f"... and {found.unlisted} more"


@pytest.mark.parametrize("spec", SPECS)
def test_a_member_name_of_100_kb_is_shown_shortened(spec):
    found = violations(spec, hostile(0).replace(b'"probabilities": {}', b'"probabilities": {"' + b"x" * 100_000 + b'": 2}'))
    assert found and all(len(str(v)) < 2_000 for v in found)

"""--jev-strict: every answer in Jev's field set, with latency_ms, on real Laya (the tiny checkpoint).

A Jev client that validates each answer with `additionalProperties: false` and requires
`latency_ms` must accept every strict answer, and the answers must still meet both specs.
"""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import jsonschema
import pytest

from pytest_laya import Spec
from tests.helpers.servers import plain_http, reference_server

pytest.importorskip("laya", reason="needs the reference extra: pip install -e '.[reference]'")
from pytest_laya_reference.settings import ServerSettings  # noqa: E402

STATE = "I was charged twice for my order. Please refund the duplicate today."
QUESTIONS = {
    "department": {"type": "choice", "instructions": "Which team should handle this?",
                   "criteria": {"billing": "Charges and refunds", "technical": "Software problems"}},
    "channel": {"type": "choice", "instructions": "How should we reply?", "criteria": ["email", "phone"]},
    "urgency": {"type": "score", "instructions": "How urgent is the request?",
                "criteria": ["Not urgent", "Needs attention soon", "Needs attention immediately"]},
    "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
}
NUMBER = {"type": "number"}
PROBABILITIES = {"type": "object", "additionalProperties": {"type": "number", "minimum": 0, "maximum": 1}}
#: Jev's answers, as a client that refuses unknown fields validates them.
JEV_ANSWER = {"oneOf": [
    {"type": "object", "additionalProperties": False, "required": ["type", "choice", "probabilities", "confidence"],
     "properties": {"type": {"const": "choice"}, "choice": {"type": "string"}, "probabilities": PROBABILITIES,
                    "confidence": NUMBER}},
    {"type": "object", "additionalProperties": False,
     "required": ["type", "score", "probabilities", "confidence", "legend"],
     "properties": {"type": {"const": "score"}, "score": NUMBER, "probabilities": PROBABILITIES, "confidence": NUMBER,
                    "legend": {"type": "object", "additionalProperties": {"type": "string"}}}},
    {"type": "object", "additionalProperties": False, "required": ["type", "noul"],
     "properties": {"type": {"const": "noul"}, "noul": NUMBER}},
]}
JEV_USAGE = {"type": "object", "additionalProperties": False, "required": ["input_tokens", "output_tokens"],
             "properties": {"input_tokens": {"type": "integer"}, "output_tokens": {"type": "integer"}}}
JEV_RESPONSE = {"type": "object", "required": ["model", "answers", "usage", "latency_ms"],
                "properties": {"model": {"type": "string"},
                               "answers": {"type": "object", "additionalProperties": JEV_ANSWER},
                               "usage": JEV_USAGE, "latency_ms": {"type": "number", "minimum": 0}}}
JEV_BATCH = {"type": "object", "required": ["results", "total_usage", "latency_ms"],
             "properties": {"results": {"type": "array", "items": {
                 "type": "object", "required": ["answers", "usage"],
                 "properties": {"answers": {"type": "object", "additionalProperties": JEV_ANSWER}, "usage": JEV_USAGE}}},
                 "latency_ms": {"type": "number", "minimum": 0}}}
#: Requests whose answers a strict server must still shape: laya's abstention gate adds fields too.
REQUESTS = [
    {"state": STATE, "questions": QUESTIONS},
    {"state": STATE, "questions": QUESTIONS, "min_confidence": 0.5},
    {"state": "x " * 3000, "questions": QUESTIONS},  # truncated: laya's usage grows
]


def meets_both_specs(response: httpx.Response, path: str) -> None:
    for spec in (Spec.target(), Spec.current()):
        violations = spec.violations("POST", path, response.status_code, response.headers, response.content)
        assert violations == [], f"{spec.name}: " + "\n".join(map(str, violations))


@pytest.fixture(scope="module")
def strict():
    with reference_server(ServerSettings(jev_strict=True)) as thread:
        yield thread.url


@pytest.mark.parametrize("body", [REQUESTS[0], REQUESTS[2]], ids=["plain", "long_state"])
def test_every_strict_answer_is_what_a_strict_jev_client_accepts(strict, body):
    response = plain_http("POST", strict + "/v1/systemone", json=body, timeout=60)
    assert response.status_code == 200
    jsonschema.validate(response.json(), JEV_RESPONSE)
    assert isinstance(response.json()["latency_ms"], int)
    meets_both_specs(response, "/v1/systemone")


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/systemone", REQUESTS[1]),
    ("/v1/systemone", {**REQUESTS[0], "min_confidence": {"default": 0.4}}),
    ("/v1/systemone/batch", {"states": [STATE], "questions": QUESTIONS, "min_confidence": 0.5}),
], ids=["threshold", "map", "batch"])
def test_strict_mode_refuses_min_confidence_saying_why(strict, path, body):
    # Jev's shape has no member for the gate's verdict (low_confidence, abstention): answering 200
    # would drop the control silently (issue 31), and a control is honoured or refused.
    response = plain_http("POST", strict + path, json=body, timeout=60)
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["code"] == "invalid_request"
    assert "min_confidence cannot be honoured" in problem["detail"] and "--jev-strict" in problem["detail"]
    assert [e["pointer"] for e in problem["errors"]] == ["/min_confidence"]
    assert Spec.target().violations("POST", path, 422, response.headers, response.content) == []


def test_strict_batch_results_are_shaped_the_same(strict):
    response = plain_http("POST", strict + "/v1/systemone/batch", json={"states": [STATE, "The app crashes."],
                                                                  "questions": QUESTIONS}, timeout=60)
    assert response.status_code == 200
    jsonschema.validate(response.json(), JEV_BATCH)
    meets_both_specs(response, "/v1/systemone/batch")


def test_strict_mode_keeps_every_value_of_the_default_answer(strict, laya_reference_server):
    full = plain_http("POST", laya_reference_server.url + "/v1/systemone", json=REQUESTS[0], timeout=60).json()
    shaped = plain_http("POST", strict + "/v1/systemone", json=REQUESTS[0], timeout=60).json()
    assert "latency_ms" not in full and "routing" in full
    for qid, answer in shaped["answers"].items():
        assert answer == {k: full["answers"][qid][k] for k in answer}, qid
    assert shaped["served_by"] == full["served_by"] and shaped["model"] == full["model"]


def test_the_default_answer_meets_both_specs_but_not_a_strict_jev_client(laya_reference_server):
    # The strict check above can fail: laya's own additions break a client that refuses unknown
    # fields. The default answer still meets the current spec, so today's clients read it.
    default = laya_reference_server.url
    response = plain_http("POST", default + "/v1/systemone", json=REQUESTS[1], timeout=60)
    batch = plain_http("POST", default + "/v1/systemone/batch", json={"states": [STATE], "questions": QUESTIONS},
                       timeout=60)
    meets_both_specs(response, "/v1/systemone")
    meets_both_specs(batch, "/v1/systemone/batch")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(response.json(), JEV_RESPONSE)


@pytest.mark.parametrize("args, env", [(["--jev-strict"], {}), ([], {"LAYA_JEV_STRICT": "1"})], ids=["flag", "env"])
def test_the_command_line_turns_strict_mode_on(args, env):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("LAYA_")} | env
    proc = subprocess.Popen([sys.executable, "-m", "pytest_laya_reference", "--port", "0", *args], env=environ,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline().strip()
        assert line.startswith("laya-reference-server ready at "), line
        body = plain_http("POST", line.rsplit(" ", 1)[-1] + "/v1/systemone", json=REQUESTS[0], timeout=60).json()
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    jsonschema.validate(body, JEV_RESPONSE)

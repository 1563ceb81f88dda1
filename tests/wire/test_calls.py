"""`Call` and `Calls`: what a client sent, parsed, redacted, compared with readable differences."""

from __future__ import annotations

import json
import subprocess
import sys
from unittest.mock import ANY

import pytest

from pytest_laya.fake import FakeLaya
from pytest_laya.wire.calls import Call, Calls, redact_headers
from pytest_laya.wire.decision import Choice, Noul
from pytest_laya.wire.questions import ChoiceQuestion

TEAM = {"type": "choice", "instructions": "Which team?", "criteria": {"billing": "Charges", "tech": "Bugs"}}
REFUND = {"type": "noul", "instructions": "Does the customer ask for a refund?"}
BODY = {"state": "I was charged twice.", "questions": {"team": TEAM, "refund": REFUND}, "model": "fake-laya"}


def call(body=BODY, *, path="/v1/systemone", headers=None, answer=True) -> Call:
    status, response_headers, response = FakeLaya().answer(body) if answer else (None, {}, None)
    return Call(method="post", path=path, headers=headers or {"Content-Type": "application/json"},
                content=json.dumps(body).encode(), status=status, response_headers=response_headers,
                response_content=json.dumps(response).encode() if answer else None)


def test_a_call_reads_the_request_as_wire_objects():
    made = call(headers={"Authorization": "Bearer sk-secret-1234", "X-Request-Id": "req-1", "Cookie": "s=1"})
    assert made.method == "POST" and made.state == "I was charged twice." and made.model == "fake-laya"
    assert list(made.questions) == ["team", "refund"]
    assert made.questions["team"].type == "choice" and made.questions["team"].instructions == "Which team?"
    assert made.questions["team"].criteria == {"billing": "Charges", "tech": "Bugs"}
    assert made.questions["refund"].criteria is None
    assert made.request_id == "req-1" and made.states == ("I was charged twice.",)
    assert made.headers["authorization"] == "Bearer <redacted>" and made.headers["cookie"] == "<redacted>"
    assert "sk-secret-1234" not in repr(made) + repr(made.headers)


def test_the_response_is_parsed_into_a_decision():
    made = call()
    assert made.status == 200 and made.response["model"] == "fake-laya"
    assert isinstance(made.decision["team"], Choice) and isinstance(made.decision["refund"], Noul)
    assert made.decision.provenance.request_id == made.response_headers["x-request-id"]
    refused = call({"state": "x", "questions": {}})
    assert refused.status == 400 and refused.decision is None and refused.response["code"] == "malformed_request"
    assert call(answer=False).status is None and call(answer=False).response is None


def test_a_batch_call_lists_its_states_and_decisions():
    body = {"states": ["a", "b"], "questions": {"refund": REFUND}}
    status, headers, response = FakeLaya().answer_batch(body)
    made = Call(method="POST", path="/v1/systemone/batch", content=json.dumps(body).encode(), status=status,
                response_headers=headers, response=response)
    assert made.is_batch and made.state is None and made.states == ("a", "b")
    assert made.decision is None and [type(d["refund"]) for d in made.decisions] == [Noul, Noul]


@pytest.mark.parametrize("name", ["Authorization", "Proxy-Authorization", "X-Api-Key", "X-Auth-Token", "Cookie",
                                  "api-key", "X-Session-Secret"])
def test_every_credential_header_is_redacted(name):
    redacted = redact_headers({name: "Bearer hunter2-secret", "X-Request-Id": "keep-me", "Content-Type": "a/b"})
    assert "hunter2-secret" not in json.dumps(redacted)
    assert redacted["x-request-id"] == "keep-me" and redacted["content-type"] == "a/b"


def test_a_matching_call_has_no_differences():
    made = call()
    assert made.differences(state="I was charged twice.", questions={"team": TEAM, "refund": REFUND},
                            model="fake-laya", path="/v1/systemone", status=200) == []
    assert made.differences(questions={"team", "refund"}, headers={"content-type": "application/json"}) == []
    assert made.differences(state=ANY, questions={"team": {**TEAM, "instructions": ANY}, "refund": ANY}) == []
    assert made.differences(questions={"team": ChoiceQuestion("Which team?", {"billing": "Charges", "tech": "Bugs"}),
                                       "refund": REFUND}) == []


def test_differences_name_each_place():
    made = call()
    found = made.differences(state="I was charged once.",
                             questions={"team": {**TEAM, "criteria": ["billing", "tech"]}, "urgency": REFUND},
                             headers={"x-request-id": "req-9", "authorization": None})
    assert found == [
        "state: expected 'I was charged once.', sent 'I was charged twice.'",
        "questions/team/criteria: expected ['billing', 'tech'], sent {'billing': 'Charges', 'tech': 'Bugs'}",
        "questions/urgency: not sent (expected {'type': 'noul', 'instructions': 'Does the customer ask for a refund?'})",
        "questions/refund: sent {'type': 'noul', 'instructions': 'Does the customer ask for a refund?'}, not expected",
        "headers/x-request-id: not sent (expected 'req-9')",
    ]
    with pytest.raises(TypeError, match="cannot compare a call on 'answer'; use method, path"):
        made.differences(answer="billing")


def test_calls_assertions_print_what_differs():
    calls = Calls([call(), call({**BODY, "state": "Where is my parcel?"})])
    calls.assert_call_count(2)
    calls.assert_called_with(state="Where is my parcel?")
    calls.assert_any_call(state="I was charged twice.")
    with pytest.raises(AssertionError) as once:
        calls.assert_called_once_with(state="I was charged twice.")
    assert str(once.value).startswith("expected 1 call, got 2:\n  call 1: POST /v1/systemone questions=['team', "
                                      "'refund'] state='I was charged twice.' -> 200\n  call 2:")
    with pytest.raises(AssertionError) as last:
        calls.assert_called_with(state="I was charged twice.", model="fake-laya")
    assert str(last.value) == ("POST /v1/systemone questions=['team', 'refund'] state='Where is my parcel?' -> 200 "
                               "differs from what was expected:\n"
                               "  state: expected 'I was charged twice.', sent 'Where is my parcel?'")
    with pytest.raises(AssertionError, match=r"no call of 2 matches; the closest, call 2 .*\n  questions: not sent"):
        calls.assert_any_call(state="Where is my parcel?", questions={"team", "urgency"})
    with pytest.raises(AssertionError, match="expected no call, got 2"):
        calls.assert_not_called()
    with pytest.raises(AssertionError, match="no call was made"):
        _ = Calls().last
    Calls().assert_not_called()


def test_the_call_record_loads_neither_httpx_nor_pytest():
    code = ("import sys; import pytest_laya.wire.calls; "
            "print(sorted(m for m in ('httpx', 'pytest', 'vcr', 'hypothesis') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"

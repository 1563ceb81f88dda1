"""(b) respx: the five router tests."""
import json

import httpx
import pytest
import respx
from router import QUESTIONS, Router

URL = "http://laya.test"
TICKET = "I was charged twice this month and my card is now maxed out. Refund me today!"


def answer(team="tech", urgent=0.5306):                # hand-written from one real response
    probs = {k: (0.9 if k == team else 0.05) for k in QUESTIONS["team"]["criteria"]}
    return {"model": "tiny",
            "answers": {"team": {"type": "choice", "choice": team, "probabilities": probs, "confidence": 0.85},
                        "urgent": {"type": "noul", "noul": urgent, "confidence": max(urgent, 1 - urgent)}},
            "usage": {"input_tokens": 185, "output_tokens": 0, "state_tokens": 5, "truncated": False}}


@pytest.fixture
def laya(respx_mock, monkeypatch):
    monkeypatch.setenv("LAYA_SERVED_URL", URL)
    return respx_mock.post(f"{URL}/v1/systemone")


def test_happy_path(laya):
    laya.respond(json=answer())
    assert Router().route(TICKET) == {"queue": "tech", "escalate": False, "reason": "laya"}


def test_forced_branch(laya):
    laya.respond(json=answer(team="billing", urgent=0.95))
    assert Router().route(TICKET) == {"queue": "billing", "escalate": True, "reason": "laya"}


def test_what_was_sent(laya):
    laya.respond(json=answer())
    Router().route(TICKET)
    assert laya.call_count == 1
    assert json.loads(laya.calls.last.request.content) == {"state": TICKET, "questions": QUESTIONS}


def test_server_errors(laya):
    laya.side_effect = [httpx.Response(503, headers={"Retry-After": "1"}, json={"detail": "overloaded"}),
                        httpx.ReadTimeout("timed out")]
    slept = []
    result = Router(sleep=slept.append).route(TICKET)
    assert result == {"queue": "triage", "escalate": True, "reason": "ReadTimeout"}
    assert slept == [1.0] and laya.call_count == 2


def test_offline(laya):                                 # respx refuses anything not mocked
    with pytest.raises(respx.models.AllMockedAssertionError):
        httpx.get("http://api.example.com/v1/anything")

"""A `ServedLayaClient` on a transport answering in memory (`httpx.MockTransport`) starts no
watchdog thread per attempt: there is no socket for one to shut down. An error its handler
raises once the deadline passed is still the decision's timeout."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from pytest_laya import LayaCallError
from pytest_laya.client import ServedLayaClient

QUESTIONS = {"refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"}}
ANSWER = {"model": "fake-laya", "answers": {"refund": {"type": "noul", "noul": 0.25, "confidence": 0.75}},
          "usage": {"input_tokens": 12, "output_tokens": 0, "state_tokens": 6, "truncated": False}}


def test_no_thread_is_started_per_decision(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[threading.Thread] = []
    real = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start", lambda self: (started.append(self), real(self))[1])
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=ANSWER))
    with ServedLayaClient("http://laya.invalid", transport=transport) as client:
        for _ in range(3):
            assert client.decide("I was charged twice.", QUESTIONS)["refund"].p == 0.25
    assert started == []


def test_an_error_after_the_deadline_is_a_timeout() -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        time.sleep(0.3)
        raise httpx.ReadError("the connection dropped", request=request)

    with ServedLayaClient("http://laya.invalid", transport=httpx.MockTransport(slow), timeout_s=0.1) as client, \
            pytest.raises(LayaCallError) as caught:
        client.decide("I was charged twice.", QUESTIONS)
    assert caught.value.code == "deadline_exceeded"

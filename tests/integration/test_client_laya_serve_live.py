"""The served client against laya's own laya-serve 0.4.15, live on the tiny checkpoint.

Every response the client sees is validated against the current spec as it arrives, so this is
the live counterpart of the recorded-traffic tests: if laya-serve drifts, the spec or the client
is shown wrong here, not in a user's suite.
"""

from __future__ import annotations

import pytest

from pytest_laya import AsyncServedLayaClient, LayaCallError, LayaConfigError, ServedLayaClient, Spec
from tests.helpers.servers import LAYA_SERVE_KEY

laya = pytest.importorskip("laya", reason="needs the reference extra (laya[serve])")

KEY = LAYA_SERVE_KEY
STATE = "I was charged twice for my order. Please refund the duplicate today."
QUESTIONS = {
    "department": {"type": "choice", "instructions": "Which team should handle this?",
                   "criteria": {"billing": "Charges and refunds", "technical": "Software problems"}},
    "urgency": {"type": "score", "instructions": "How urgent is the request?",
                "criteria": ["Not urgent", "Needs attention soon", "Needs attention immediately"]},
    "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
}


@pytest.fixture(scope="module")
def laya_serve(laya_serves):
    return laya_serves(api_key=KEY)


@pytest.fixture
def exchanges():
    seen = []
    yield seen
    problems = [
        f"{x.method} {x.path} {x.status}: {v}"
        for x in seen
        for v in Spec.current().violations(x.method, x.path, x.status, x.headers, x.body)
    ]
    assert problems == [], "\n".join(problems)


def test_a_live_decision_conforms_and_is_identified(laya_serve, exchanges):
    with ServedLayaClient(laya_serve.url, model="tiny", api_key=KEY, on_exchange=exchanges.append) as client:
        decision = client.decide(STATE, QUESTIONS)
        again = client.decide(STATE, QUESTIONS)
        health = client.health()
    assert list(decision.answers) == ["department", "urgency", "refund"]
    assert decision.answers == again.answers  # the tiny checkpoint is deterministic
    assert decision.usage.input_tokens > 0
    assert "inference" in decision.provenance.server_timing
    # laya-serve names no weights in the answer and no revision for a local checkpoint.
    assert decision.model == "./tiny@unknown"
    assert "tiny" in health.loaded  # the shared laya-serve loads english too once a test asks for it
    assert [x.path for x in exchanges] == ["/v1/systemone", "/health", "/v1/systemone", "/health"]


async def test_the_async_client_agrees_with_the_sync_one(laya_serve, exchanges):
    with ServedLayaClient(laya_serve.url, model="tiny", api_key=KEY) as client:
        expected = client.decide(STATE, QUESTIONS)
    async with AsyncServedLayaClient(laya_serve.url, model="tiny", api_key=KEY, on_exchange=exchanges.append) as client:
        got = await client.decide(STATE, QUESTIONS)
    assert got.answers == expected.answers and got.usage == expected.usage


def test_a_wrong_key_is_a_config_error_that_never_shows_the_key(laya_serve, exchanges):
    with ServedLayaClient(laya_serve.url, model="tiny", api_key="sk-wrong-canary", on_exchange=exchanges.append) as client:
        with pytest.raises(LayaConfigError) as info:
            client.decide(STATE, QUESTIONS)
    assert info.value.code == "unauthorized" and info.value.status == 401
    assert "sk-wrong-canary" not in str(info.value) and KEY not in str(info.value)


def test_refusals_carry_laya_serves_words(laya_serve, exchanges):
    with ServedLayaClient(laya_serve.url, model="tiny", api_key=KEY, on_exchange=exchanges.append) as client:
        with pytest.raises(LayaCallError) as info:
            client.decide("x" * 50_001, QUESTIONS)
    assert (info.value.code, info.value.status) == ("rejected", 413)
    assert "state too large" in str(info.value)

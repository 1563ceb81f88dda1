"""The served client under every failure a real deployment produces, over a real loopback socket.

Each case runs through the sync and the async client: both share one policy, and this proves
they also share its behaviour. Deadlines are short so the whole matrix stays fast; the bound
checked is the deadline plus a generous scheduling allowance, never a tight timing.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from pytest_laya import AsyncServedLayaClient, LayaCallError, LayaConfigError, ServedLayaClient
from pytest_laya.faults import (
    Delay,
    GarbageBody,
    Handler,
    Refuse,
    ResetBeforeHeaders,
    ResetMidBody,
    Respond,
    ScriptedServer,
    Trickle,
    Truncate,
    closed_loopback_url,
)

QUESTIONS = {"refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"}}
ANSWER = {
    "model": "laya-rl-agent",
    "answers": {"refund": {"type": "noul", "noul": 0.9, "confidence": 0.9}},
    "usage": {"input_tokens": 20, "output_tokens": 0},
    "served_by": {"checkpoint": "laya-tiny", "revision": "sha256:1", "device": "cpu",
                  "weights_dtype": "float32", "compiled": False},
}
OK = Respond(200, ANSWER)
DEADLINE_S = 1.0
SLACK_S = 0.5  # CI machines have 2 busy cores; the deadline itself is what is asserted.


def decide(kind: str, url: str, timeout_s: float = DEADLINE_S, state: str = "I was charged twice.", **kwargs):
    """Run one decision with the sync or async client; return (decision or error, seconds)."""
    started = time.monotonic()
    try:
        if kind == "sync":
            with ServedLayaClient(url, timeout_s=timeout_s, **kwargs) as client:
                result = client.decide(state, QUESTIONS)
        else:
            async def run():
                async with AsyncServedLayaClient(url, timeout_s=timeout_s, **kwargs) as client:
                    return await client.decide(state, QUESTIONS)
            result = asyncio.run(run())
    except (LayaCallError, LayaConfigError) as exc:
        result = exc
    return result, time.monotonic() - started


@pytest.fixture(params=["sync", "async"])
def kind(request):
    return request.param


def served(*script):
    return ScriptedServer(*script).start()


def test_a_plain_answer(kind):
    with served(OK) as server:
        decision, _ = decide(kind, server.url)
    assert decision.answers["refund"].p == 0.9 and decision.model == "laya-tiny@sha256:1"
    assert len(server.requests) == 1


def test_refused_everywhere_is_connection_refused_after_one_retry(kind):
    error, elapsed = decide(kind, closed_loopback_url())
    assert isinstance(error, LayaCallError) and error.code == "connection_refused"
    assert "after 2 attempts" in str(error) and elapsed < DEADLINE_S + SLACK_S
    assert "(ConnectError: " in str(error)  # what the transport said, for the one reading the log


def test_refused_then_listening_succeeds_on_the_retry(kind):
    with ScriptedServer(Refuse(0.02), OK).start() as server:
        time.sleep(0.03)  # the Refuse window has passed by the time the retry connects
        decision, _ = decide(kind, server.url)
    assert not isinstance(decision, Exception), decision
    assert len(server.requests) == 1


def test_reset_before_headers_is_retried_with_the_same_request_id(kind):
    with served(ResetBeforeHeaders(), OK) as server:
        decision, _ = decide(kind, server.url)
    assert not isinstance(decision, Exception), decision
    ids = [r.headers["x-request-id"] for r in server.requests]
    assert len(ids) == 2 and ids[0] == ids[1] == decision.provenance.request_id


def test_reset_mid_body_is_retried(kind):
    with served(ResetMidBody(OK), OK) as server:
        decision, _ = decide(kind, server.url)
    assert not isinstance(decision, Exception), decision
    assert len(server.requests) == 2


def test_a_policy_passed_in_is_the_one_followed(kind):
    from pytest_laya.client.policy import RetryPolicy

    with served(Respond(502, {"detail": "upstream"}), OK) as server:
        error, _ = decide(kind, server.url, policy=RetryPolicy(max_retries=0))
    assert isinstance(error, LayaCallError) and "HTTP 502" in str(error)
    assert len(server.requests) == 1  # the default policy would have retried the 502 and succeeded


def test_reset_twice_is_connection_dropped(kind):
    with served(ResetMidBody(OK), ResetMidBody(OK), OK) as server:
        error, _ = decide(kind, server.url)
    assert isinstance(error, LayaCallError) and error.code == "connection_dropped"
    assert len(server.requests) == 2  # at most one retry


def test_truncated_json_is_never_a_decision(kind):
    with served(Truncate(OK, after_bytes=30), Truncate(OK, after_bytes=30)) as server:
        error, _ = decide(kind, server.url)
    assert isinstance(error, LayaCallError) and error.code == "connection_dropped"


def test_a_body_trickled_past_the_deadline_fails_at_the_deadline(kind):
    slow = Trickle(OK, chunk_size=4, interval_s=0.05)  # ~50 bytes/s: several seconds in all
    with served(slow, slow) as server:
        error, elapsed = decide(kind, server.url)
    assert isinstance(error, LayaCallError) and error.code == "deadline_exceeded"
    assert DEADLINE_S - 0.05 <= elapsed < DEADLINE_S + SLACK_S
    assert len(server.requests) == 1  # a timeout is not retried: the deadline is spent


def test_a_body_that_stalls_between_chunks_fails_at_the_deadline_not_a_read_timeout_later(kind):
    # Each read returns within the per-read timeout, so only a whole-response deadline catches it.
    stalling = Trickle(OK, chunk_size=8, interval_s=0.9 * DEADLINE_S)
    with served(stalling, stalling) as server:
        error, elapsed = decide(kind, server.url)
    assert isinstance(error, LayaCallError) and error.code == "deadline_exceeded"
    assert elapsed < DEADLINE_S + SLACK_S


@pytest.mark.parametrize("head", [False, True], ids=["body", "head"])
def test_a_transport_passed_in_still_ends_a_trickle_at_the_deadline(head):
    # The client bounds its own transport's every socket operation; one passed in is ended by a
    # watchdog that shuts its socket down at the deadline (found through httpx's connect trace
    # while the head trickles, through the response once the head is read).
    # Each read returns within httpx's per-read timeout, so only the deadline can end it.
    slow = Trickle(OK, chunk_size=8, interval_s=0.9 * DEADLINE_S, head=head)
    with served(slow, slow) as server:
        error, elapsed = decide("sync", server.url, transport=httpx.HTTPTransport())
    assert isinstance(error, LayaCallError) and error.code == "deadline_exceeded"
    assert DEADLINE_S - 0.05 <= elapsed < DEADLINE_S + SLACK_S
    assert len(server.requests) == 1


def test_a_transport_passed_in_ends_a_short_deadline_on_time():
    # A deadline under a second is kept too. (Whether the watchdog or the check between body
    # chunks ends it depends on when the chunks land: this test cannot tell them apart.)
    short = 0.3
    slow = Trickle(OK, chunk_size=8, interval_s=0.9 * short)
    with served(slow) as server:
        error, elapsed = decide("sync", server.url, timeout_s=short, transport=httpx.HTTPTransport())
    assert isinstance(error, LayaCallError) and error.code == "deadline_exceeded"
    assert short - 0.05 <= elapsed < short + SLACK_S


def test_a_transport_passed_in_ends_a_stall_on_a_reused_connection_at_the_deadline():
    # A pooled connection makes no connect event: the watchdog learns its socket from the response.
    stalling = Trickle(OK, chunk_size=8, interval_s=0.9 * DEADLINE_S)
    with served(OK, stalling, stalling) as server:
        with ServedLayaClient(server.url, timeout_s=DEADLINE_S, transport=httpx.HTTPTransport()) as client:
            client.decide("I was charged twice.", QUESTIONS)
            started = time.monotonic()
            with pytest.raises(LayaCallError) as info:
                client.decide("I was charged twice.", QUESTIONS)
            elapsed = time.monotonic() - started
    assert info.value.code == "deadline_exceeded" and elapsed < DEADLINE_S + SLACK_S
    assert [r.connection_id for r in server.requests] == [server.requests[0].connection_id] * 2  # reused


def test_a_transport_passed_in_answers_as_the_clients_own_does():
    with served(OK) as server:
        decision, _ = decide("sync", server.url, transport=httpx.HTTPTransport())
    assert not isinstance(decision, Exception), decision
    assert decision.answers["refund"].p == 0.9


@pytest.mark.parametrize("transport", ["the client's own", "passed in"])
def test_a_redirect_is_never_followed(kind, transport):
    # Following it would send the state and the key wherever the Location points.
    elsewhere = Respond(307, b"", headers={"Location": "/v1/elsewhere"})
    given = {} if transport == "the client's own" else {
        "transport": httpx.HTTPTransport() if kind == "sync" else httpx.AsyncHTTPTransport()}
    with served(elsewhere, OK) as server:
        error, _ = decide(kind, server.url, api_key="sk-redirect", **given)
    assert isinstance(error, LayaCallError) and "HTTP 307" in str(error)
    assert [r.path for r in server.requests] == ["/v1/systemone"]


def test_a_server_slower_than_the_deadline_fails_at_the_deadline(kind):
    with served(Delay(5.0, OK)) as server:
        error, elapsed = decide(kind, server.url)
    assert isinstance(error, LayaCallError) and error.code == "deadline_exceeded"
    assert elapsed < DEADLINE_S + SLACK_S


@pytest.mark.parametrize("status", [502, 504])
def test_gateway_errors_then_200_succeed(kind, status):
    with served(Respond(status, "backend unavailable\n"), OK) as server:
        decision, _ = decide(kind, server.url)
    assert not isinstance(decision, Exception), decision
    assert len(server.requests) == 2


def test_gateway_errors_twice_are_unavailable_with_the_proxy_text(kind):
    with served(Respond(502, "backend unavailable\n"), Respond(502, "backend unavailable\n")) as server:
        error, _ = decide(kind, server.url)
    assert isinstance(error, LayaCallError) and (error.code, error.status) == ("unavailable", 502)
    assert "backend unavailable" in str(error)


def test_503_with_a_retry_after_inside_the_deadline_waits_and_retries(kind):
    busy = Respond(503, {"detail": "server busy, try again later"}, headers={"Retry-After": "0"})
    with served(busy, OK) as server:
        decision, _ = decide(kind, server.url)
    assert not isinstance(decision, Exception), decision
    assert len(server.requests) == 2


def test_503_with_a_retry_after_beyond_the_deadline_fails_at_once(kind):
    busy = Respond(503, {"detail": "server busy, try again later"}, headers={"Retry-After": "30"})
    with served(busy, OK) as server:
        error, elapsed = decide(kind, server.url)
    assert isinstance(error, LayaCallError) and (error.code, error.status) == ("unavailable", 503)
    assert "server busy" in str(error) and elapsed < 0.5
    assert len(server.requests) == 1


def test_503_without_retry_after_is_not_retried(kind):
    with served(Respond(503, {"detail": "busy"}), OK) as server:
        error, _ = decide(kind, server.url)
    assert isinstance(error, LayaCallError) and error.status == 503
    assert len(server.requests) == 1


def test_500_is_a_server_error_and_not_retried(kind):
    with served(Respond(500, {"detail": "inference failed"}), OK) as server:
        error, _ = decide(kind, server.url)
    assert isinstance(error, LayaCallError) and (error.code, error.status) == ("server_error", 500)
    assert "inference failed" in str(error) and len(server.requests) == 1


def test_401_is_a_config_error(kind):
    with served(Respond(401, {"detail": "invalid or missing bearer token"})) as server:
        error, _ = decide(kind, server.url, api_key="sk-canary-xyz")
    assert isinstance(error, LayaConfigError) and error.code == "unauthorized"
    assert "sk-canary-xyz" not in str(error)
    assert server.requests[0].headers["authorization"] == "Bearer sk-canary-xyz"


def test_non_json_200_is_a_bad_response(kind):
    with served(GarbageBody(200)) as server:
        error, _ = decide(kind, server.url)
    assert isinstance(error, LayaCallError) and error.code == "bad_response" and error.status == 200


def test_200_with_a_wrong_content_type_is_a_bad_response(kind):
    with served(Respond(200, json.dumps(ANSWER), content_type="text/html")) as server:
        error, _ = decide(kind, server.url)
    assert isinstance(error, LayaCallError) and error.code == "bad_response"


def test_an_answer_that_breaks_the_rules_is_a_bad_answer(kind):
    broken = json.loads(json.dumps(ANSWER))
    broken["answers"]["refund"]["noul"] = 1.7
    with served(Respond(200, broken)) as server:
        error, _ = decide(kind, server.url)
    assert isinstance(error, LayaCallError) and error.code == "bad_answer"


def test_an_oversized_body_is_refused_without_reading_it_all(kind):
    huge = b'{"answers": "' + b"x" * (9 * 1024 * 1024) + b'"}'
    with served(Respond(200, huge, content_type="application/json")) as server:
        error, _ = decide(kind, server.url, timeout_s=5)
    assert isinstance(error, LayaCallError) and error.code == "bad_response" and "larger than" in str(error)


def test_the_health_read_for_identity_counts_against_the_deadline(kind):
    no_identity = {k: v for k, v in ANSWER.items() if k != "served_by"}
    no_identity["routing"] = {"model": "english", "repo": "convaiinnovations/laya"}

    def route(request):
        return Delay(5.0, Respond(200, {"status": "ok"})) if request.path == "/health" else Respond(200, no_identity)

    with ScriptedServer(default=Handler(route)).start() as server:
        decision, elapsed = decide(kind, server.url)
    # The slow /health cannot make the decision late; identity falls back to routing.
    assert not isinstance(decision, Exception), decision
    assert decision.model == "convaiinnovations/laya@unknown"
    assert elapsed < DEADLINE_S + SLACK_S

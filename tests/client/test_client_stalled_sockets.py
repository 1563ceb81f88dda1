"""Socket operations that never finish, each ended at the deadline; a socket the server closed.

A connect into a listener whose backlog is full never completes (the SYN is dropped); a request
sent to a server that never reads it blocks once the socket buffers fill. Nothing but the
deadline ends either, so a client that lost its bound would hang: `decide_within` turns that
hang into a failure, and the fixtures' clean-up (closing the sockets) releases the thread.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from pytest_laya import AsyncServedLayaClient, LayaCallError, ServedLayaClient
from pytest_laya.client import RetryPolicy, sync_client
from pytest_laya.faults import ScriptedServer
from tests.client.test_client_faults import DEADLINE_S, OK, QUESTIONS, SLACK_S, decide
from tests.helpers.servers import silent_server

HANG_S = DEADLINE_S + 10  # far past the deadline: a client still waiting then has no bound


def decide_within(kind: str, url: str, **kwargs):
    """`decide` in a thread; fails the test if it is still running after HANG_S seconds."""
    outcome: list = []
    thread = threading.Thread(target=lambda: outcome.append(decide(kind, url, **kwargs)), daemon=True)
    thread.start()
    thread.join(HANG_S)
    if thread.is_alive():
        pytest.fail(f"the decision still ran {HANG_S:g} s after it began: nothing bounded the stalled socket")
    return outcome[0]


@pytest.fixture
def full_backlog() -> Iterator[str]:
    """A loopback URL whose listener never accepts and whose backlog is full: a connect hangs."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=0)
    filler = socket.create_connection(listener.getsockname())  # takes the one place in the queue
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        filler.close()
        listener.close()


@pytest.fixture
def unread_requests() -> Iterator[str]:
    """A loopback URL whose server accepts connections and never reads from them."""
    with silent_server() as port:
        yield f"http://127.0.0.1:{port}"


# The async client's deadline (anyio.fail_after) does not depend on its transport; the sync
# client bounds its own transport's sockets, and a transport passed in by httpx's timeouts.
CLIENTS = [("sync", "the client's own transport"), ("sync", "a transport passed in"), ("async", "the client's own transport")]


def transport_for(transport: str) -> dict:
    return {"transport": httpx.HTTPTransport()} if transport == "a transport passed in" else {}


@pytest.mark.parametrize(("kind", "transport"), CLIENTS)
def test_a_connect_that_never_completes_ends_at_the_deadline(kind, transport, full_backlog):
    error, elapsed = decide_within(kind, full_backlog, **transport_for(transport))
    assert isinstance(error, LayaCallError) and error.code == "deadline_exceeded", error
    assert DEADLINE_S * 0.9 <= elapsed < DEADLINE_S + SLACK_S


@pytest.mark.parametrize(("kind", "transport"), CLIENTS)
def test_a_request_the_server_never_reads_ends_at_the_deadline(kind, transport, unread_requests):
    # 8 MB outgrows the socket buffers on either side, so the write blocks until the deadline.
    error, elapsed = decide_within(kind, unread_requests, state="x" * 8_000_000, **transport_for(transport))
    assert isinstance(error, LayaCallError) and error.code == "deadline_exceeded", error
    assert DEADLINE_S * 0.9 <= elapsed < DEADLINE_S + SLACK_S


def test_a_deadline_spent_before_the_first_attempt_sends_nothing(kind):
    with ScriptedServer(OK) as server:
        error, _ = decide(kind, server.url, timeout_s=1e-9)
    assert isinstance(error, LayaCallError) and error.code == "deadline_exceeded", error
    assert server.requests == []


def test_the_client_connects_to_the_host_its_url_names(kind):
    # Any 127.0.0.0/8 address is loopback; nothing listens on this port of 127.0.0.1.
    with ScriptedServer(OK, host="127.0.0.2") as server:
        decision, _ = decide(kind, server.url)
    assert not isinstance(decision, Exception), decision
    assert decision.answers["refund"].p == 0.9 and len(server.requests) == 1


@pytest.mark.parametrize("drift", ["no _pool", "no _network_backend"])
def test_an_httpx_without_the_pool_the_deadline_needs_says_which_httpx_to_pin(drift):
    # The sync deadline swaps the network backend of httpx's own pools (private attributes): a
    # release that moved them must fail at once, not run every decision without a deadline.
    client = httpx.Client()
    try:
        if drift == "no _pool":
            client._transport = httpx.MockTransport(lambda request: httpx.Response(200))
        else:
            del client._transport._pool._network_backend
        with pytest.raises(RuntimeError, match=r"has no HTTPTransport\._pool\._network_backend: the sync client's "
                                               r"deadline cannot be installed; pin the httpx version pytest-laya"):
            sync_client._bound_by_deadline(client)
    finally:
        client.close()


@pytest.fixture(params=["sync", "async"])
def kind(request):
    return request.param


def test_the_hang_guard_fails_a_decision_that_does_not_end(monkeypatch, full_backlog):
    # The guard itself: a client whose connect has no bound is reported, not waited for.
    import tests.client.test_client_stalled_sockets as this

    monkeypatch.setattr(this, "HANG_S", DEADLINE_S * 2)
    monkeypatch.setattr(sync_client, "_time_left", lambda: None)
    started = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match="nothing bounded the stalled socket"):
        this.decide_within("sync", full_backlog)
    assert time.monotonic() - started < DEADLINE_S * 2 + SLACK_S


def test_a_kept_alive_connection_the_server_closed_is_not_reused(kind):
    # Between two decisions the server closes the idle connection. The pool must notice (it
    # asks the stream whether the socket is readable) and connect again: reusing the dead
    # socket fails the next attempt, which only a retry would hide.
    with ScriptedServer(default=OK, idle_timeout_s=0.2) as server:
        if kind == "sync":
            with ServedLayaClient(server.url, timeout_s=DEADLINE_S, policy=RetryPolicy(max_retries=0)) as client:
                client.decide("I was charged twice.", QUESTIONS)
                time.sleep(0.6)
                client.decide("I was charged twice.", QUESTIONS)
        else:
            async def twice() -> None:
                async with AsyncServedLayaClient(server.url, timeout_s=DEADLINE_S,
                                                 policy=RetryPolicy(max_retries=0)) as client:
                    await client.decide("I was charged twice.", QUESTIONS)
                    await asyncio.sleep(0.6)
                    await client.decide("I was charged twice.", QUESTIONS)

            asyncio.run(twice())
    first, second = server.requests
    assert first.connection_id != second.connection_id

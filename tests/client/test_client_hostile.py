"""The served client against hostile servers (issue 16): every connection keeps the deadline,
decoded bodies stay under the cap, and nothing but a `LayaCallError` or `LayaConfigError` leaves
`decide()`.

Each case runs through the sync and the async client over a real loopback socket. Bounds are the
deadline plus a generous allowance; the old figures they rule out are far above them (a trickled
head on a reused connection took 6 s for a 1 s deadline here, 21 s for 2 s in the issue). Exact
figures: `scripts/measure_client_attacks.py` and docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import time
import tracemalloc
import zlib

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_laya import AsyncServedLayaClient, LayaCallError, LayaConfigError, LayaError, ServedLayaClient
from pytest_laya.client import MAX_RESPONSE_BYTES
from pytest_laya.faults import Respond, ScriptedServer, Trickle
from pytest_laya.wire.content_coding import MAX_LAYERS
from tests.helpers.bombs import GIB, STACKED_GZIP, declared_size, gzip_deflate, inner_layer
from tests.helpers.properties import example_count

QUESTIONS = {"refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"}}
ANSWER = {
    "model": "laya-rl-agent",
    "answers": {"refund": {"type": "noul", "noul": 0.9, "confidence": 0.9}},
    "usage": {"input_tokens": 20, "output_tokens": 0},
    "served_by": {"checkpoint": "laya-tiny", "revision": "sha256:1", "device": "cpu",
                  "weights_dtype": "float32", "compiled": False},
}
NO_SERVED_BY = {**{k: v for k, v in ANSWER.items() if k != "served_by"},
                "routing": {"model": "english", "repo": "convaiinnovations/laya"}}
OK = Respond(200, ANSWER)
DEADLINE_S = 1.0
SLACK_S = 0.5  # 2 busy shared cores; the bound proves the property, docs/reliability.md has figures


def head_trickled(response: Respond) -> Trickle:
    # One byte every 50 ms: the ~150-byte head alone takes 7 s, and no per-read timeout fires.
    return Trickle(response, chunk_size=1, interval_s=0.05, head=True)


@pytest.fixture(params=["sync", "async"])
def kind(request):
    return request.param


def decisions(kind: str, url: str, count: int, timeout_s: float = DEADLINE_S, **kwargs):
    """`count` decisions on one client (so on one pooled connection); [(result, seconds)]."""

    def timed(call):
        started = time.monotonic()
        try:
            result = call()
        except (LayaCallError, LayaConfigError) as exc:
            result = exc
        return result, time.monotonic() - started

    if kind == "sync":
        with ServedLayaClient(url, timeout_s=timeout_s, **kwargs) as client:
            return [timed(lambda: client.decide("I was charged twice.", QUESTIONS)) for _ in range(count)]

    async def run():
        out = []
        async with AsyncServedLayaClient(url, timeout_s=timeout_s, **kwargs) as client:
            for _ in range(count):
                started = time.monotonic()
                try:
                    result = await client.decide("I was charged twice.", QUESTIONS)
                except (LayaCallError, LayaConfigError) as exc:
                    result = exc
                out.append((result, time.monotonic() - started))
        return out

    return asyncio.run(run())


def decide(kind: str, url: str, timeout_s: float = DEADLINE_S, **kwargs):
    return decisions(kind, url, 1, timeout_s, **kwargs)[0]


# --------------------------------------------------------------------------- the attack is real


def test_a_trickled_head_defeats_a_per_read_timeout():
    # Why a whole-response deadline is needed: httpx's 0.3 s read timeout never fires.
    with ScriptedServer(Trickle(Respond(200, "ok"), chunk_size=4, interval_s=0.05, head=True)) as server:
        started = time.monotonic()
        response = httpx.get(server.url, timeout=httpx.Timeout(0.3))
        elapsed = time.monotonic() - started
    assert response.status_code == 200 and response.text == "ok"
    assert elapsed > 3 * 0.3


# --------------------------------------------------------------------------- the deadline on every connection


def test_the_deadline_holds_when_a_reused_connection_trickles_its_head(kind):
    with ScriptedServer(OK, head_trickled(OK)) as server:
        (first, _), (second, elapsed) = decisions(kind, server.url, 2)
    assert not isinstance(first, Exception), first
    assert isinstance(second, LayaCallError) and second.code == "deadline_exceeded"
    assert elapsed < DEADLINE_S + SLACK_S
    assert len({r.connection_id for r in server.requests}) == 1  # the pooled connection was reused


def test_the_deadline_holds_when_the_retry_after_a_keep_alive_502_trickles(kind):
    with ScriptedServer(OK, Respond(502, "bad gateway\n"), head_trickled(OK)) as server:
        (first, _), (second, elapsed) = decisions(kind, server.url, 2)
    assert not isinstance(first, Exception), first
    assert isinstance(second, LayaCallError) and second.code == "deadline_exceeded"
    assert elapsed < DEADLINE_S + SLACK_S
    assert len(server.requests) == 3 and len({r.connection_id for r in server.requests}) == 1


def test_the_deadline_holds_when_the_health_read_on_a_reused_connection_trickles(kind):
    with ScriptedServer(OK, Respond(200, NO_SERVED_BY), head_trickled(Respond(200, {"status": "ok"}))) as server:
        (_, _), (second, elapsed) = decisions(kind, server.url, 2)
    # The decision stands; identity falls back to routing, and the slow /health cannot delay it.
    assert not isinstance(second, Exception), second
    assert second.model == "convaiinnovations/laya@unknown"
    assert elapsed < DEADLINE_S + SLACK_S
    assert [r.path for r in server.requests] == ["/v1/systemone", "/v1/systemone", "/health"]
    assert len({r.connection_id for r in server.requests}) == 1


def test_a_trickled_head_on_a_new_connection_fails_at_the_deadline(kind):
    with ScriptedServer(head_trickled(OK)) as server:
        error, elapsed = decide(kind, server.url)
    assert isinstance(error, LayaCallError) and error.code == "deadline_exceeded"
    assert elapsed < DEADLINE_S + SLACK_S and len(server.requests) == 1


# --------------------------------------------------------------------------- a proxy from the environment

def test_a_proxy_from_the_environment_carries_decisions_to_other_hosts(kind, proxy_from):
    # As httpx, curl and requests do: a service behind its network's proxy reaches its Laya.
    with ScriptedServer(OK) as proxy:
        proxy_from(proxy.url)
        decision, _ = decide(kind, "http://laya.invalid:8000")
    assert not isinstance(decision, Exception), decision
    assert [r.path for r in proxy.requests] == ["http://laya.invalid:8000/v1/systemone"]


def test_loopback_is_reached_directly_whatever_the_proxy(kind, proxy_from):
    # The fake and reference servers listen on loopback, which a proxy elsewhere cannot reach;
    # so does a server on any other 127.0.0.0/8 address.
    with ScriptedServer(Respond(502, "the proxy was used\n")) as proxy, ScriptedServer(default=OK) as server, \
            ScriptedServer(default=OK, host="127.0.0.2") as elsewhere:
        proxy_from(proxy.url)
        for url in (server.url, server.url.replace("127.0.0.1", "localhost"), elsewhere.url):
            decision, _ = decide(kind, url)
            assert not isinstance(decision, Exception), decision
    assert proxy.requests == [] and len(server.requests) == 2 and len(elsewhere.requests) == 1


def test_the_deadline_holds_through_a_proxy(kind, proxy_from):
    with ScriptedServer(head_trickled(OK)) as proxy:
        proxy_from(proxy.url)
        error, elapsed = decide(kind, "http://laya.invalid:8000")
    assert isinstance(error, LayaCallError) and error.code == "deadline_exceeded"
    assert elapsed < DEADLINE_S + SLACK_S and len(proxy.requests) == 1


# --------------------------------------------------------------------------- compression bombs


def test_the_bomb_is_what_it_claims():
    # 1.8 KB on the wire; its inner layer's gzip trailer says 1 GiB (it is never expanded here).
    assert len(STACKED_GZIP) < 2000 and len(gzip_deflate()) < 2000
    assert declared_size(inner_layer()) == GIB


@pytest.mark.parametrize(("coding", "body"), [("gzip, gzip", STACKED_GZIP), ("gzip, deflate", gzip_deflate())],
                         ids=["gzip,gzip", "gzip,deflate"])
def test_a_stacked_compression_bomb_stops_at_the_cap_within_the_deadline(kind, coding, body):
    bomb = Respond(200, body, content_type="application/json", headers={"Content-Encoding": coding})
    with ScriptedServer(bomb) as server:
        tracemalloc.start()
        try:
            error, elapsed = decide(kind, server.url, timeout_s=2.0)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert isinstance(error, LayaCallError) and error.code == "bad_response"
    assert f"cap of {MAX_RESPONSE_BYTES} bytes" in str(error) and coding in str(error)
    assert elapsed < 2.0 + SLACK_S
    assert peak < 64 * 1024 * 1024, f"decoding held {peak / 2**20:.0f} MiB"
    assert len(server.requests) == 1  # a bad response is final


def test_a_single_layer_bomb_stops_at_the_cap(kind):
    body = gzip.compress(bytes(64 * 1024 * 1024), compresslevel=9)  # 64 KB on the wire
    with ScriptedServer(Respond(200, body, content_type="application/json", headers={"Content-Encoding": "gzip"})) as server:
        error, _ = decide(kind, server.url, timeout_s=5.0)
    assert isinstance(error, LayaCallError) and error.code == "bad_response" and "cap of" in str(error)


@pytest.mark.parametrize("coding", ["gzip", "x-gzip", "deflate", "raw deflate", "gzip, gzip", "deflate, gzip"])
def test_compressed_answers_still_decode(kind, coding):
    body = json.dumps(ANSWER).encode()
    for layer in [c.strip() for c in coding.split(",")]:
        if layer in ("gzip", "x-gzip"):
            body = gzip.compress(body)
        elif layer == "deflate":
            body = zlib.compress(body)
        else:
            raw = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
            body = raw.compress(body) + raw.flush()
    header = coding.replace("raw deflate", "deflate")
    with ScriptedServer(Respond(200, body, content_type="application/json", headers={"Content-Encoding": header})) as server:
        decision, _ = decide(kind, server.url)
    assert not isinstance(decision, Exception), decision
    assert decision["refund"].p == 0.9
    assert server.requests[0].headers["accept-encoding"] == "gzip, deflate"


def test_two_gzip_members_decode_as_one_body(kind):
    text = json.dumps(ANSWER).encode()
    body = gzip.compress(text[:40]) + gzip.compress(text[40:])
    with ScriptedServer(Respond(200, body, content_type="application/json", headers={"Content-Encoding": "gzip"})) as server:
        decision, _ = decide(kind, server.url)
    assert not isinstance(decision, Exception), decision


@pytest.mark.parametrize(("coding", "body", "says"), [
    ("br", b"\x1b\x00", "'br' is not one the client accepts"),
    ("zstd", b"\x28\xb5\x2f\xfd", "'zstd' is not one the client accepts"),
    (", ".join(["gzip"] * (MAX_LAYERS + 1)), b"", f"at most {MAX_LAYERS}"),
    ("gzip", b"this is not gzip", "not valid gzip"),
])
def test_an_undecodable_body_is_a_bad_response_saying_why(kind, coding, body, says):
    with ScriptedServer(Respond(200, body, content_type="application/json", headers={"Content-Encoding": coding})) as server:
        error, _ = decide(kind, server.url)
    assert isinstance(error, LayaCallError) and error.code == "bad_response" and says in str(error)


def test_an_undecodable_gateway_error_is_still_retried(kind):
    garbage = Respond(502, b"not gzip", headers={"Content-Encoding": "gzip"})
    with ScriptedServer(garbage, OK) as server:
        decision, _ = decide(kind, server.url)
    assert not isinstance(decision, Exception), decision
    assert len(server.requests) == 2


# --------------------------------------------------------------------------- only LayaErrors leave decide()


DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize(("status", "media", "code"), [
    (200, "application/json", "bad_response"),
    (500, "application/json", "server_error"),
    (422, "application/problem+json", "rejected"),
])
def test_a_body_nested_100k_deep_is_an_error_with_a_code(kind, status, media, code):
    with ScriptedServer(Respond(status, DEEP, content_type=media)) as server:
        error, _ = decide(kind, server.url)
    assert isinstance(error, LayaCallError) and error.code == code
    if status == 200:
        assert "nests too deeply" in str(error)


@pytest.mark.parametrize("spec", ["current", "target"])
def test_the_spec_validator_inside_the_send_path_reports_deep_nesting_as_a_violation(kind, spec):
    # The plugin validates every exchange from inside _send (on_exchange): a RecursionError
    # there would leave decide() raw.
    from pytest_laya import Spec

    seen = []

    def validate(exchange):
        seen.extend(getattr(Spec, spec)().violations("POST", exchange.path, exchange.status, exchange.headers,
                                                     exchange.body))

    with ScriptedServer(Respond(200, DEEP, content_type="application/json")) as server:
        error, _ = decide(kind, server.url, on_exchange=validate)
    assert isinstance(error, LayaCallError) and error.code == "bad_response"
    assert any("nested too deeply" in str(v) for v in seen), seen


def test_deep_nesting_in_a_health_document_is_no_identity(kind):
    with ScriptedServer(Respond(200, NO_SERVED_BY), Respond(200, DEEP, content_type="application/json")) as server:
        decision, _ = decide(kind, server.url)
    assert not isinstance(decision, Exception), decision
    assert decision.model == "convaiinnovations/laya@unknown"


@pytest.mark.parametrize("value", ["\u00b2", "\u0663", "1\u00b2", "\U0001d7e4", "nan", "1e400"])
def test_a_retry_after_that_is_no_number_is_not_waited_for(kind, value):
    # "²" and "٣" are digits to str.isdigit() but not to float(): a ValueError escaped before.
    # Sent as UTF-8 bytes (the server writes latin-1 text, so the bytes go as they are).
    wire = value.encode("utf-8").decode("latin-1")
    with ScriptedServer(Respond(503, {"detail": "busy"}, headers={"Retry-After": wire}), OK) as server:
        error, _ = decide(kind, server.url)
    assert isinstance(error, LayaCallError) and (error.code, error.status) == ("unavailable", 503)
    assert len(server.requests) == 1


_CODINGS = st.sampled_from([None, "gzip", "deflate", "gzip, gzip", "br", "identity", "gzip, identity", ",", "GZIP"])
_MEDIA = st.sampled_from(["application/json", "application/problem+json", "text/plain", "", "application/json; charset=latin-1"])


@st.composite
def _bodies(draw):
    base = draw(st.one_of(
        st.binary(max_size=64),
        st.just(json.dumps(ANSWER).encode()),
        st.builds(lambda n: b"{" * n + b"}" * n, st.integers(0, 5000)),
        st.builds(lambda n: b'{"answers": ' * n, st.integers(0, 5000)),
        st.recursive(st.none() | st.booleans() | st.floats() | st.text(max_size=5),
                     lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
                     max_leaves=10).map(lambda v: json.dumps(v).encode()),
    ))
    if draw(st.booleans()):
        base = gzip.compress(base)
    if draw(st.booleans()):
        base = base[: draw(st.integers(0, len(base)))]
    return base


@settings(max_examples=example_count(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(status=st.sampled_from([200, 200, 200, 201, 204, 301, 400, 401, 404, 413, 422, 429, 500, 502, 503, 504, 599]),
       coding=_CODINGS, media=_MEDIA, body=_bodies(),
       # No Retry-After here is a wait worth taking: "²", "٣" and friends, or 0.
       retry_after=st.one_of(st.none(), st.text(alphabet="0\u00b2\u0663ab-:, ", max_size=6)))
def test_no_response_makes_decide_raise_anything_but_a_laya_error(status, coding, media, body, retry_after):
    headers = {}
    if coding is not None:
        headers["content-encoding"] = coding
    if media:
        headers["content-type"] = media
    if retry_after is not None and retry_after.strip() == retry_after:
        headers["retry-after"] = retry_after.encode("utf-8")  # bytes: what a server may really send

    def answer(request: httpx.Request) -> httpx.Response:
        # stream=: an unread response, so the client's own decoding is what runs.
        return httpx.Response(status, headers=headers, stream=httpx.ByteStream(body))

    with ServedLayaClient("http://laya.test", timeout_s=2, transport=httpx.MockTransport(answer),
                          policy=None) as client:
        try:
            decision = client.decide("s", QUESTIONS)
        except LayaError as exc:
            assert exc.code
        else:
            assert decision["refund"].p == 0.9

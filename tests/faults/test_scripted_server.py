"""Tests for pytest_laya.faults: every scripted action over a real loopback socket, via httpx."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import httpx
import pytest

from pytest_laya.faults import (
    Action,
    Delay,
    GarbageBody,
    Handler,
    ReceivedRequest,
    Refuse,
    ResetBeforeHeaders,
    ResetMidBody,
    Respond,
    ScriptedServer,
    Trickle,
    Truncate,
    closed_loopback_url,
    free_loopback_port,
)
from pytest_laya.faults._http11 import RawConnection
from tests.helpers.servers import PLAIN_HTTP

# trust_env=False: a proxy set in the environment must never sit between client and server.
TIMEOUT = httpx.Timeout(5.0)


def client(**kwargs: object) -> httpx.Client:
    kwargs.setdefault("timeout", TIMEOUT)
    return httpx.Client(trust_env=False, verify=PLAIN_HTTP, **kwargs)  # type: ignore[arg-type]


def wait_until_up(url: str, limit_s: float = 3.0) -> tuple[httpx.Response, float]:
    """Poll with fresh connections until a request succeeds; the response and when it came."""
    deadline = time.monotonic() + limit_s
    while True:
        try:
            with client() as c:
                return c.get(url), time.monotonic()
        except httpx.ConnectError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


# --------------------------------------------------------------------------- Respond


def test_respond_json_with_headers() -> None:
    with ScriptedServer(Respond(200, {"decision": "allow", "n": [1, 2]}, headers={"X-Trace": "t-1"})) as server:
        with client() as c:
            r = c.post(server.url + "/v1/systemone", json={"q": 1})
    assert r.status_code == 200
    assert r.json() == {"decision": "allow", "n": [1, 2]}
    assert r.headers["content-type"] == "application/json"
    assert r.headers["x-trace"] == "t-1"
    assert int(r.headers["content-length"]) == len(r.content)


def test_respond_text_bytes_and_content_type_override() -> None:
    script = (
        Respond(503, "overloaded, try later"),
        Respond(200, b"\x00\x01raw"),
        Respond(422, "<p>no</p>", content_type="text/html"),
        Respond(200, "x", headers={"Content-Type": "application/problem+json"}),
    )
    with ScriptedServer(*script) as server, client() as c:
        text, raw, html, header_ct = (c.get(server.url) for _ in range(4))
    assert (text.status_code, text.text) == (503, "overloaded, try later")
    assert text.headers["content-type"] == "text/plain; charset=utf-8"
    assert raw.content == b"\x00\x01raw"
    assert raw.headers["content-type"] == "application/octet-stream"
    assert (html.status_code, html.headers["content-type"]) == (422, "text/html")
    assert header_ct.headers["content-type"] == "application/problem+json"


def test_respond_validates_its_arguments() -> None:
    with pytest.raises(ValueError, match="Content-Length"):
        Respond(200, b"x", headers={"Content-Length": "5"})
    with pytest.raises(ValueError):
        Respond(200, headers={"X-Bad": "a\r\nInjected: yes"})
    with pytest.raises(ValueError):
        Respond(99)
    with pytest.raises(ValueError):
        Respond(204, "body")
    with pytest.raises(TypeError):
        Respond(200, object())  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Delay(0.1, Refuse(1))
    with pytest.raises(ValueError):
        Truncate(Respond(200, b"abc"), after_bytes=3)
    with pytest.raises(ValueError):
        ResetMidBody(Respond(200))
    with pytest.raises(ValueError, match="valid JSON"):
        GarbageBody(body=b'{"ok": true}')
    with pytest.raises(TypeError):
        ScriptedServer("not an action")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- slow answers


def test_delay_waits_before_answering() -> None:
    with ScriptedServer(Delay(0.3, Respond(200, {"late": True}))) as server, client() as c:
        started = time.monotonic()
        r = c.get(server.url)
        elapsed = time.monotonic() - started
    assert r.json() == {"late": True}
    assert 0.25 <= elapsed < 3.0


def test_delay_hits_a_short_read_timeout() -> None:
    with ScriptedServer(Delay(1.0, Respond(200))) as server, client(timeout=httpx.Timeout(5.0, read=0.1)) as c:
        with pytest.raises(httpx.ReadTimeout):
            c.get(server.url)


def test_trickle_sends_headers_then_body_slowly() -> None:
    body = b"abcdefgh"
    with ScriptedServer(Trickle(Respond(200, body), chunk_size=2, interval_s=0.05)) as server, client() as c:
        started = time.monotonic()
        with c.stream("GET", server.url) as r:
            headers_after = time.monotonic() - started
            chunks = list(r.iter_raw())
        elapsed = time.monotonic() - started
    assert r.status_code == 200
    assert b"".join(chunks) == body
    assert len(chunks) >= 2  # it really arrived in pieces
    assert headers_after < elapsed
    assert 0.15 <= elapsed < 3.0  # four chunks, 0.05 s before each
    assert r.headers["connection"] == "close"


def test_trickle_times_out_a_short_read_timeout_after_the_status() -> None:
    action = Trickle(Respond(200, b"x" * 20), chunk_size=1, interval_s=0.3)
    with ScriptedServer(action) as server, client(timeout=httpx.Timeout(5.0, read=0.1)) as c:
        with c.stream("GET", server.url) as r:
            assert r.status_code == 200  # the head came at once
            with pytest.raises(httpx.ReadTimeout):
                r.read()


# --------------------------------------------------------------------------- broken connections


def test_reset_before_headers() -> None:
    with ScriptedServer(ResetBeforeHeaders(), Respond(200, "after")) as server, client() as c:
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
            c.post(server.url + "/v1/systemone", json={"q": 1})
        assert c.get(server.url).text == "after"  # the client recovers on a new connection
    assert server.requests[0].json() == {"q": 1}  # the request was read in full first


def test_reset_mid_body_fails_while_reading_the_body() -> None:
    body = json.dumps({"decision": "allow", "pad": "x" * 200}).encode()
    with ScriptedServer(ResetMidBody(Respond(200, body), after_bytes=40)) as server, client() as c:
        with c.stream("GET", server.url) as r:
            assert r.status_code == 200
            assert int(r.headers["content-length"]) == len(body)
            with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
                r.read()


def test_reset_mid_body_default_cut_is_half() -> None:
    action = ResetMidBody(Respond(200, b"0123456789"))
    assert action.cut == 5
    with ScriptedServer(action) as server, client() as c:
        with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
            c.get(server.url)


def test_truncate_gives_a_short_body() -> None:
    with ScriptedServer(Truncate(Respond(200, {"decision": "allow"}), after_bytes=5)) as server, client() as c:
        with c.stream("GET", server.url) as r:
            assert r.status_code == 200
            received = bytearray()
            with pytest.raises(httpx.RemoteProtocolError, match="incomplete|expected|closed"):
                for chunk in r.iter_raw():
                    received += chunk
    assert bytes(received) == b'{"dec'


def test_garbage_body_is_not_json() -> None:
    with ScriptedServer(GarbageBody(), GarbageBody(502, "text/html")) as server, client() as c:
        r = c.get(server.url)
        html = c.get(server.url)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    with pytest.raises(json.JSONDecodeError):
        r.json()
    assert (html.status_code, html.headers["content-type"]) == (502, "text/html")
    assert server.requests[0].connection_id != server.requests[1].connection_id  # closed after the fault


# --------------------------------------------------------------------------- Refuse


def test_refuse_at_start_then_listens_again_on_the_same_port() -> None:
    started = time.monotonic()
    with ScriptedServer(Refuse(0.4), Respond(200, "back")) as server:
        assert not server.listening
        with client() as c, pytest.raises(httpx.ConnectError):
            c.get(server.url)
        r, up_at = wait_until_up(server.url)
        assert server.listening
    assert r.text == "back"
    assert up_at - started >= 0.3
    assert len(server.requests) == 1  # nothing reached the server while refused


def test_refuse_after_a_response_refuses_the_very_next_connect() -> None:
    with ScriptedServer(Respond(503, "going down"), Refuse(0.3), Respond(200, "up")) as server, client() as c:
        first = c.get(server.url)
        assert first.status_code == 503
        assert first.headers["connection"] == "close"
        refused_at = time.monotonic()
        with pytest.raises(httpx.ConnectError):  # deterministic: listener closed before the 503 was sent
            c.get(server.url)
        r, up_at = wait_until_up(server.url)
    assert r.text == "up"
    assert up_at - refused_at >= 0.15
    assert server.pending == 0


def test_enqueued_refuse_closes_idle_keep_alive_connections() -> None:
    with ScriptedServer(default=Respond(200, "ok")) as server, client() as c:
        assert c.get(server.url).status_code == 200  # leaves an idle pooled connection
        server.enqueue(Refuse(0.3))
        with pytest.raises(httpx.ConnectError):
            c.get(server.url)
        r, _ = wait_until_up(server.url)
    assert r.text == "ok"


def test_closed_loopback_url_refuses() -> None:
    url = closed_loopback_url()
    assert url.startswith("http://127.0.0.1:")
    assert closed_loopback_url() == url
    with client() as c, pytest.raises(httpx.ConnectError):
        c.get(url)


def test_free_loopback_port_is_bindable() -> None:
    port = free_loopback_port()
    assert 0 < port < 65536
    with ScriptedServer(Respond(200), port=port) as server:
        assert server.url == f"http://127.0.0.1:{port}"


# --------------------------------------------------------------------------- Handler, recording, defaults


def test_handler_sees_the_request() -> None:
    def echo(request: ReceivedRequest) -> Respond:
        return Respond(
            201,
            {"body": request.json(), "method": request.method, "path": request.path},
            headers={"X-Request-Id": request.headers["x-request-id"]},
        )

    with ScriptedServer(Handler(echo)) as server, client() as c:
        r = c.post(server.url + "/v1/systemone?trace=1", json={"q": 2}, headers={"X-Request-Id": "req-42"})
    assert r.status_code == 201
    assert r.headers["x-request-id"] == "req-42"
    assert r.json() == {"body": {"q": 2}, "method": "POST", "path": "/v1/systemone?trace=1"}


def test_requests_are_recorded_including_chunked_bodies() -> None:
    def chunks():
        yield b'{"q":'
        yield b" 3}"

    with ScriptedServer(default=Respond(200)) as server, client() as c:
        c.post(server.url + "/v1/systemone", json={"q": 1}, headers={"X-Request-Id": "a"})
        c.post(server.url + "/v1/systemone", content=chunks())
        c.get(server.url + "/healthz")
    first, chunked, health = server.requests
    assert (first.method, first.path, first.body) == ("POST", "/v1/systemone", b'{"q":1}')
    assert first.headers["x-request-id"] == "a"
    assert first.header("X-REQUEST-ID") == "a"
    assert all(name == name.lower() for name in first.headers)
    assert chunked.headers["transfer-encoding"] == "chunked"
    assert chunked.json() == {"q": 3}
    assert (health.method, health.path, health.body) == ("GET", "/healthz", b"")


def test_raw_socket_expect_continue_and_chunked_trailers() -> None:
    with ScriptedServer(Handler(lambda req: Respond(200, req.body))) as server:
        with socket.create_connection((server.host, server.port), timeout=3) as sock:
            sock.sendall(
                b"POST /x HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            assert sock.recv(100).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
            sock.sendall(b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-Trailer: 1\r\n\r\n")
            reply = b""
            while not reply.endswith(b"abcde"):
                data = sock.recv(1000)
                assert data
                reply += data
    assert reply.startswith(b"HTTP/1.1 200 OK\r\n")
    assert server.requests[0].body == b"abcde"


class _SendsTwice(Action):
    """A socket fault written as a test would write a new one: its whole effect in `perform`."""

    def perform(self, conn: RawConnection, *, keep_alive: bool, head_only: bool) -> bool:
        response = Respond(200, "first")
        conn.send(response.render_head(keep_alive=False) + response.payload + b"HTTP/1.1 200 OK\r\n\r\n")
        return False


class _KnowsNoEffect(Action):
    pass


def test_a_new_action_is_one_class_with_its_own_perform() -> None:
    with ScriptedServer(_SendsTwice(), Respond(200, "next")) as server:
        with socket.create_connection((server.host, server.port), timeout=3) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            received = b""
            while chunk := sock.recv(1000):
                received += chunk
        assert received.endswith(b"first" + b"HTTP/1.1 200 OK\r\n\r\n")
        with client() as c:
            assert c.get(server.url).text == "next"


def test_an_action_without_an_effect_is_a_loud_500() -> None:
    with ScriptedServer(_KnowsNoEffect()) as server, client() as c:
        r = c.get(server.url)
    assert r.status_code == 500
    assert "scripted server: unsupported action" in r.text


def test_malformed_request_gets_400_without_consuming_the_script() -> None:
    with ScriptedServer(Respond(200)) as server:
        with socket.create_connection((server.host, server.port), timeout=3) as sock:
            sock.sendall(b"NOT A REQUEST LINE AT ALL\r\n\r\n")
            assert sock.recv(1000).startswith(b"HTTP/1.1 400 ")
        assert server.pending == 1
        assert server.requests == []


def test_script_exhausted_is_a_loud_500() -> None:
    with ScriptedServer(Respond(200, "only one")) as server, client() as c:
        assert c.get(server.url).text == "only one"
        r = c.post(server.url + "/v1/systemone", json={})
        assert server.pending == 0
    assert r.status_code == 500
    assert "scripted server: script exhausted" in r.text
    assert "POST /v1/systemone" in r.text


def test_default_action_and_callable_default_and_enqueue() -> None:
    with ScriptedServer(default=lambda req: Respond(200, {"path": req.path})) as server, client() as c:
        assert c.get(server.url + "/a").json() == {"path": "/a"}
        server.enqueue(Respond(418, "teapot"))
        assert server.pending == 1
        assert c.get(server.url + "/b").status_code == 418
        assert c.get(server.url + "/c").json() == {"path": "/c"}


def test_handler_that_raises_is_a_loud_500() -> None:
    def broken(request: ReceivedRequest) -> Respond:
        raise RuntimeError("handler bug")

    with ScriptedServer(Handler(broken)) as server, client() as c:
        r = c.get(server.url)
    assert r.status_code == 500
    assert "handler bug" in r.text
    assert isinstance(server.errors[0], RuntimeError)


# --------------------------------------------------------------------------- connections and lifecycle


def test_keep_alive_serves_two_requests_on_one_connection() -> None:
    with ScriptedServer(Respond(200, "one"), Respond(200, "two")) as server, client() as c:
        assert c.get(server.url).text == "one"
        assert c.get(server.url).text == "two"
    assert server.requests[0].connection_id == server.requests[1].connection_id


def test_connection_close_from_client_is_honoured() -> None:
    with ScriptedServer(Respond(200), Respond(200)) as server, client() as c:
        r = c.get(server.url, headers={"Connection": "close"})
        assert r.headers["connection"] == "close"
        c.get(server.url)
    assert server.requests[0].connection_id != server.requests[1].connection_id


def test_stop_is_idempotent_and_leaves_no_thread() -> None:
    before = set(threading.enumerate())
    server = ScriptedServer(Respond(200), Delay(30.0, Respond(200)))
    server.start()
    assert server.start() is server
    outcome: list[BaseException] = []

    def stuck_client() -> None:
        try:
            with client() as c:
                c.get(server.url)
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            outcome.append(exc)

    with client() as idle:
        idle.get(server.url)  # leaves an idle keep-alive connection thread on the server
        worker = threading.Thread(target=stuck_client)
        worker.start()
        assert server.wait_for_requests(2)
        started = time.monotonic()
        server.stop()
        stop_took = time.monotonic() - started
        server.stop()
    worker.join(3)
    assert stop_took < 1.5
    assert not worker.is_alive()
    assert outcome and isinstance(outcome[0], httpx.HTTPError)
    assert set(threading.enumerate()) == before
    with pytest.raises(RuntimeError):
        server.start()


def test_stop_before_start_is_harmless() -> None:
    server = ScriptedServer()
    server.stop()
    with pytest.raises(RuntimeError, match="no port"):
        _ = server.url


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "::", "example.com"])
def test_non_loopback_host_is_rejected(host: str) -> None:
    with pytest.raises(ValueError, match="loopback"):
        ScriptedServer(host=host)


def test_localhost_is_accepted() -> None:
    with ScriptedServer(Respond(200, "hi"), host="localhost") as server, client() as c:
        assert server.url.startswith("http://127.0.0.1:")
        assert c.get(server.url).text == "hi"


def test_async_client_with_the_event_loop_in_the_main_thread() -> None:
    """Two concurrent delayed requests overlap: connections are served on separate threads."""

    async def main(url: str) -> tuple[list[httpx.Response], float]:
        async with httpx.AsyncClient(trust_env=False, timeout=TIMEOUT, verify=PLAIN_HTTP) as ac:
            started = time.monotonic()
            responses = await asyncio.gather(ac.get(url + "/1"), ac.get(url + "/2"))
            return list(responses), time.monotonic() - started

    with ScriptedServer(default=Delay(0.3, Handler(lambda req: Respond(200, req.path)))) as server:
        responses, elapsed = asyncio.run(main(server.url))
    assert sorted(r.text for r in responses) == ["/1", "/2"]
    assert elapsed < 0.55  # one delay, not two

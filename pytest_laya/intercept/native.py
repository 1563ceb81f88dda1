"""The switchboard's own transports: replay answered in memory without vcrpy, installed once per process.

While a switchboard runs natively (`Switchboard.native`: every Laya route answers in memory from
the kit's own replay cassette, no pytest-recording cassette, no blocked network), each request
is routed here as vcrpy's stubs would route it, at a fraction of the cost:

* httpx, sync and async (``HTTPTransport``, ``AsyncHTTPTransport``, and the in-memory
  ``MockTransport``, ``ASGITransport`` and ``WSGITransport``, whose decision answers the
  switchboard's ``mocked`` check sees): the httpx request becomes an `intercept.request.Request`,
  and a played answer becomes an ``httpx.Response`` straight from the cassette's response;
* http.client, urllib and urllib3 (so requests), for plain-http connections to a Laya route's
  hosts: `intercept.sockets`' in-memory socket (the fake's shim stands on it too), whose request
  is routed the same way.

The handlers stay in place for the process; when no native switchboard is on (vcrpy's patches
are, or no test runs) each hands the request to the handler it replaced, untouched.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from pytest_laya.intercept.mocks import transport_running
from pytest_laya.intercept.request import Headers, Request

__all__ = ["install", "ours"]

_lock = threading.Lock()
_installed: list[Any] = []  # the switchboard the handlers route through (one per process)
_handlers: dict[tuple[type, str], Any] = {}  # (class, attribute) -> our handler


def ours(cls: type, attribute: str) -> bool:
    """Whether `cls.attribute` is the handler installed here (nobody patched over it since)."""
    mine = _handlers.get((cls, attribute))
    return mine is not None and cls.__dict__.get(attribute) is mine


def install(switchboard: Any) -> None:
    """Put the handlers in place (once per process) for `switchboard`."""
    with _lock:
        if _installed:
            if _installed[0] is not switchboard:
                _installed[0] = switchboard
            return
        import httpx

        from pytest_laya.intercept import sockets

        sync: tuple[type, ...] = (httpx.HTTPTransport, httpx.MockTransport, httpx.WSGITransport)
        for cls in sync:
            _patch(cls, "handle_request", _sync_handler(cls.__dict__["handle_request"], httpx))
        asynchronous: tuple[type, ...] = (httpx.AsyncHTTPTransport, httpx.MockTransport, httpx.ASGITransport)
        for cls in asynchronous:
            _patch(cls, "handle_async_request", _async_handler(cls.__dict__["handle_async_request"], httpx))
        sockets.add_claimer(_claim)
        _installed.append(switchboard)


def _patch(cls: type, attribute: str, handler: Any) -> None:
    handler.__module__ = __name__
    setattr(cls, attribute, handler)
    _handlers[(cls, attribute)] = handler


def _active() -> Any:
    board = _installed[0] if _installed else None
    return board if board is not None and board.native else None


# -- httpx

def _sync_handler(original: Callable[..., Any], httpx: Any) -> Callable[..., Any]:
    def handle_request(transport: Any, request: Any) -> Any:
        board = _active()
        if board is None:
            return original(transport, request)
        body = request.read()  # the body as bytes, its stream a ByteStream of them from now on
        ours_ = Request(request.method, str(request.url), body, Headers.of_httpx(request.headers))
        played = _answered_at_once(board, ours_)
        if played is not None:
            return httpx_response(played, httpx=httpx)
        with transport_running(transport, False):
            route = board._route(ours_)
            if route.can_play_response_for(ours_):
                return httpx_response(route.play_response(ours_), httpx=httpx)
            response = original(transport, request)
            if getattr(route, "check", None) is None:  # the network: as it came
                return response
            content = b"".join(response.stream)
            response.stream.close()
            response.stream = httpx.ByteStream(content)
            route.append(ours_, _serialized(response, content))
            return response
    return handle_request


def _async_handler(original: Callable[..., Any], httpx: Any) -> Callable[..., Any]:
    async def handle_async_request(transport: Any, request: Any) -> Any:
        board = _active()
        if board is None:
            return await original(transport, request)
        body = await request.aread()  # the body as bytes, its stream a ByteStream of them from now on
        ours_ = Request(request.method, str(request.url), body, Headers.of_httpx(request.headers))
        played = _answered_at_once(board, ours_)
        if played is not None:
            return httpx_response(played, httpx=httpx)
        with transport_running(transport, False):
            route = board._route(ours_)
            if route.can_play_response_for(ours_):
                return httpx_response(route.play_response(ours_), httpx=httpx)
            response = await original(transport, request)
            if getattr(route, "check", None) is None:
                return response
            content = b"".join([part async for part in response.stream])
            await response.stream.aclose()
            response.stream = httpx.ByteStream(content)
            route.append(ours_, _serialized(response, content))
            return response
    return handle_async_request


def _answered_at_once(board: Any, request: Request) -> Any:
    """The played response when a Laya route claims `request` and its cassette answers it at once
    (`LayaRoute.laya_answer`): one lookup, and no note of the transport, which only the routes
    that are not Laya's read (`answered_by_a_mock`). None: the request goes the full way."""
    route = board.laya_route_of(request)
    answer = getattr(route, "laya_answer", None)
    return answer(request) if answer is not None else None


def httpx_response(recorded: dict[str, Any], *, httpx: Any) -> Any:
    """The ``httpx.Response`` of a recorded response (as vcrpy's httpx stub builds it), with
    headers of its own."""
    if "status_code" in recorded:  # pragma: no cover - vcrpy's pre-8 httpx format: vcrpy reads it
        from vcr.stubs.httpx_stubs import _deserialize_response

        return _deserialize_response(recorded, httpx)
    status = recorded["status"]
    message = status.get("message")
    headers = [(name, value) for name, values in recorded["headers"].items() for value in values]
    return httpx.Response(status["code"], headers=headers, stream=httpx.ByteStream(recorded["body"]["string"]),
                          extensions={"reason_phrase": message.encode("ascii")} if message else None)


def _serialized(response: Any, content: bytes) -> dict[str, Any]:
    """A response as vcrpy records it (what the switchboard's ``mocked`` check reads)."""
    headers: dict[str, list[str]] = {}
    for name, value in response.headers.multi_items():
        headers.setdefault(name, []).append(value)
    return {"status": {"code": response.status_code, "message": response.reason_phrase}, "headers": headers,
            "body": {"string": content}}


# -- http.client, urllib, urllib3

def _claim(host: str, port: int, https: bool) -> Any:
    """The answer for a plain-http connection to `host:port`, when a native Laya route claims that host."""
    board = _active()
    if https or board is None or not board.claims_host(f"{host}:{port}"):
        return None
    default_port = "" if port == 80 else f":{port}"
    origin = f"http://{f'[{host}]' if ':' in host else host}{default_port}"

    def answer(sent: bytes) -> tuple[bytes, bytes]:
        from pytest_laya.intercept.sockets import parse_request

        parsed, rest = parse_request(sent)
        request = Request(parsed.method, origin + parsed.target, parsed.body, parsed.headers)
        route = board._route(request)
        if not route.can_play_response_for(request):  # pragma: no cover - a claimed host's route plays or raises
            raise ConnectionError(f"{request.uri}: not answered in process")
        return _http_bytes(route.play_response(request), parsed.method), rest

    return answer


def _http_bytes(recorded: dict[str, Any], method: str) -> bytes:
    """A recorded response as the bytes a server sends (``Connection: close``, its length given)."""
    status = recorded["status"]
    body = recorded["body"]["string"] or b""
    body = body.encode("utf-8") if isinstance(body, str) else bytes(body)
    lines = [f"HTTP/1.1 {status['code']} {status.get('message') or ''}".rstrip()]
    for name, values in recorded["headers"].items():
        if name.lower() in ("content-length", "transfer-encoding", "connection"):
            continue
        lines.extend(f"{name}: {value}" for value in values)
    lines += [f"Content-Length: {len(body)}", "Connection: close"]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head + (b"" if method == "HEAD" else body)

"""`LayaRoute`: a test's Laya server as the switchboard sees it, whichever client calls it.

A route owns the test's cassette (replay or record) or a capture (live, fake and reference
servers: every exchange goes to the server and is kept in memory, never saved). Every exchange
on the route becomes an `Exchange` handed to its observer (the plugin's spec check) and is kept
in `exchanges`; every error raised on the route (a cassette miss, a spec violation) is kept in
`errors` too, so a test whose code swallowed it still fails at teardown. Every decision request
is a `Call` in `calls`, in the order sent, answered or not (`Call.outcome` says which).

A route's cassette may also answer in memory (the fake's `InMemoryFake`): it plays every
request, and an error it raises with a ``laya_fault`` attribute is a fault the test scripted
(a timeout): the client gets it, the call records it, and the test is not failed for it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from pytest_laya.intercept.request import Headers
from pytest_laya.intercept.switchboard import host_of
from pytest_laya.wire.calls import Call, Calls
from pytest_laya.wire.content_coding import recorded_coding
from pytest_laya.wire.exchange import Exchange
from pytest_laya.wire.headers import LoweredHeaders, add_lowered
from pytest_laya.wire.routes import BATCH_PATH, DECIDE_PATH

__all__ = ["KINDS", "LayaRoute", "exchange_of"]

#: replay: answered from the cassette, no socket; record: sent and saved when the test passes;
#: capture: sent, kept in memory, never saved.
KINDS = ("replay", "record", "capture")


def _header_items(headers: Any) -> list[tuple[str, str]]:
    items: list[tuple[str, str]] = []
    for name, values in (headers or {}).items():
        for value in values if isinstance(values, (list, tuple)) else [values]:
            items.append((str(name), str(value)))
    return items


def _decoded(response: dict[str, Any]) -> dict[str, Any]:
    """`response` with its body decoded as a client reads it (gzip, deflate), within the client's cap.

    A body that will not decode, or decodes past `MAX_RESPONSE_BYTES`, is checked as it came:
    its spec check then says the body is not what its media type promises.
    """
    headers = response.get("headers") or {}
    encoding = recorded_coding(headers)
    if not encoding:
        return response
    from pytest_laya.client.call import MAX_RESPONSE_BYTES
    from pytest_laya.wire.content_coding import BodyTooLarge, UndecodableBody, decode_body
    raw = (response.get("body") or {}).get("string") or b""
    try:
        body = decode_body(raw if isinstance(raw, bytes) else str(raw).encode(), encoding, MAX_RESPONSE_BYTES)
    except (BodyTooLarge, UndecodableBody):
        return response
    kept = {k: v for k, v in headers.items() if str(k).lower() not in ("content-encoding", "content-length")}
    return {**response, "headers": kept, "body": {**(response.get("body") or {}), "string": body}}


def _response_parts(response: dict[str, Any]) -> tuple[int, _CaseInsensitive, bytes]:
    """An exchange's status, headers and body, from a vcrpy response (its body decoded as a client reads it)."""
    response = _decoded(response)
    body = (response.get("body") or {}).get("string")
    if isinstance(body, str):
        body = body.encode("utf-8")
    return (int((response.get("status") or {}).get("code") or 0), _CaseInsensitive(_header_items(response.get("headers"))),
            body or b"")


def exchange_of(request: Any, response: dict[str, Any], elapsed_s: float = 0.0) -> Exchange:
    """The `Exchange` of one vcrpy request and response (as recorded or played)."""
    status, headers, body = _response_parts(response)
    split = urlsplit(request.uri)
    request_body = request.body if isinstance(request.body, bytes) or request.body is None else str(request.body).encode()
    return Exchange(
        method=request.method,
        url=request.uri,
        path=(split.path or "/") + (f"?{split.query}" if split.query else ""),
        status=status,
        headers=headers,
        body=body,
        request_body=request_body,
        elapsed_s=elapsed_s,
    )


class _CaseInsensitive(LoweredHeaders):
    """Response headers as a mapping that answers any case (repeated headers joined with ", "): lowered
    headers, so the spec check reads them as they are (`wire.headers.lower_headers`)."""

    __slots__ = ()

    def __init__(self, items: Iterable[tuple[str, str]]) -> None:
        lowered = LoweredHeaders()  # lowered in a plain one: this class's lookups lower their key again
        add_lowered(lowered, items)
        super().__init__(lowered)

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key.lower())

    def get(self, key: str, default: Any = None) -> Any:
        return super().get(key.lower(), default)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and super().__contains__(key.lower())


def _request_headers(request: Any) -> Any:
    """A request's headers for its `Call` (which reads them only when asked): the kit's own request's
    as they are, read-only from here on; another's (vcrpy's) as pairs."""
    headers = getattr(request, "headers", None)
    return headers if type(headers) is Headers else _header_items(headers)


def _is_call(request: Any) -> bool:
    return str(request.method).upper() == "POST" and urlsplit(request.uri).path in (DECIDE_PATH, BATCH_PATH)


class LayaRoute:
    """The test's Laya server: which hosts it is, its cassette, and who sees its exchanges.

    `hosts` are ``host:port`` strings (`host_of`); `catch_all` claims every request (the
    standalone `use_cassette`). In replay a request to any host that the cassette can answer is
    claimed too: replay answers what was recorded, wherever the client thinks the server is.
    `redact` scrubs secrets from the message of an error raised here.
    """

    def __init__(self, cassette: Any, *, kind: str, urls: Iterable[str] = (), catch_all: bool = False,
                 observer: Callable[[Exchange], None] | None = None,
                 redact: Callable[[str], str] = lambda text: text) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        self.cassette = cassette
        self.kind = kind
        urls = list(urls)
        self.hosts = frozenset(host_of(url) for url in urls)
        #: Whether every URL of the route is plain http (the kit's own transports answer those).
        self.plain_http = all(urlsplit(url).scheme == "http" for url in urls)
        self.catch_all = catch_all
        self.observer = observer
        self.redact = redact
        self.exchanges: list[Exchange] = []
        self.errors: list[BaseException] = []
        #: Every decision request on the route, parsed, with its response (`pytest_laya.wire.calls`).
        self.calls = Calls()
        # Calls sent to the server and not answered yet, by request object.
        self._pending: dict[int, tuple[Any, Call]] = {}
        # When each request sent to the server left (perf_counter), for its exchange's `elapsed_s`.
        self._sent: dict[int, tuple[Any, float]] = {}
        self._lock = threading.Lock()

    def claims(self, request: Any, host: str) -> bool:
        if self.catch_all or host in self.hosts:
            return True
        return self.kind == "replay" and self.cassette.laya_has_match(request)

    def _failed(self, exc: BaseException) -> BaseException:
        if exc.args and isinstance(exc.args[0], str):
            exc.args = (self.redact(exc.args[0]), *exc.args[1:])
        self.errors.append(exc)
        return exc

    def can_play_response_for(self, request: Any) -> bool:
        try:
            playable = bool(self.cassette.can_play_response_for(request))
        except Exception as exc:
            self._unanswered(request, type(exc).__name__)
            raise self._failed(exc) from None
        if not playable:
            with self._lock:
                self._sent[id(request)] = (request, time.perf_counter())
        if not playable and _is_call(request):  # sent to the server: a call until it is answered
            with self._lock:
                known = self._pending.get(id(request), (None,))[0] is request  # vcrpy may ask twice
            call = None if known else self._unanswered(request, None)
            if call is not None:
                with self._lock:
                    self._pending[id(request)] = (request, call)
        return playable

    def play_response(self, request: Any) -> Any:
        return self._played(request, self.cassette.play_response)

    def laya_answer(self, request: Any) -> Any:
        """`play_response` in one step when the cassette answers `request` at once (its exact bytes
        recorded, not played yet: `ReplayCassette.laya_take`); else None, nothing played or kept
        (then ask `can_play_response_for`, which says why not)."""
        take = getattr(self.cassette, "laya_take", None)
        return None if take is None else self._played(request, take)

    def _played(self, request: Any, play: Callable[[Any], Any]) -> Any:
        """What `play` gives for `request`, its exchange observed (None: nothing was played); an
        error it raises is kept as the request's outcome, and fails the test unless scripted."""
        try:
            response = play(request)
        except Exception as exc:
            fault = getattr(exc, "laya_fault", None)
            if fault:  # scripted by the test: the client gets it, the test goes on
                self._unanswered(request, str(fault), fault=str(fault))
                raise
            self._unanswered(request, type(exc).__name__)
            raise self._failed(exc) from None
        if response is not None:
            self._observe(request, exchange_of(request, response))
        return response

    def append(self, request: Any, response: Any) -> None:
        with self._lock:
            sent = self._sent.pop(id(request), None)
        elapsed = time.perf_counter() - sent[1] if sent is not None and sent[0] is request else 0.0
        exchange = exchange_of(request, response, elapsed)  # as the server sent it, before scrubbing
        self.cassette.append(request, response)
        self._observe(request, exchange)

    def _unanswered(self, request: Any, outcome: str | None, fault: str | None = None) -> Call | None:
        """Keep a decision request that got no response (yet) as a call with its `outcome`."""
        if not _is_call(request):
            return None
        body = request.body if isinstance(request.body, bytes) or request.body is None else str(request.body).encode()
        split = urlsplit(request.uri)
        call = Call(method=request.method, path=(split.path or "/") + (f"?{split.query}" if split.query else ""),
                    url=request.uri, headers=_header_items(getattr(request, "headers", None)), content=body,
                    outcome=outcome, fault=fault)
        self.calls.append(call)
        return call

    def _observe(self, request: Any, exchange: Exchange) -> None:
        self.exchanges.append(exchange)
        if exchange.method == "POST" and exchange.path.split("?", 1)[0] in (DECIDE_PATH, BATCH_PATH):
            pending = None
            if self._pending:  # calls sent to a server (record, capture); none in replay
                with self._lock:
                    pending = self._pending.pop(id(request), None)
            if pending is not None and pending[0] is request:
                pending[1].answered(status=exchange.status, response_headers=list(exchange.headers.items()),
                                    response_content=exchange.body)
            else:
                self.calls.append(Call(method=exchange.method, path=exchange.path, url=exchange.url,
                                       headers=_request_headers(request),
                                       content=exchange.request_body, status=exchange.status,
                                       response_headers=exchange.headers,
                                       response_content=exchange.body))
        if self.observer is None:
            return
        try:
            self.observer(exchange)
        except Exception as exc:
            raise self._failed(exc) from None

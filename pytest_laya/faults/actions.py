"""What a scripted server can do with the next request: respond, wait, trickle, reset, refuse...

Actions are immutable data, each knowing its effect on the connection (`Action.perform`), so a
new socket fault is one class here. That keeps a script easy to build, print and compare, and
lets a higher layer (the fake Laya server) compute actions with a `Handler`.
"""

from __future__ import annotations

import http
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_laya.faults._http11 import TOKEN_CHARS, RawConnection, ReceivedRequest, header_tokens

__all__ = [
    "Action",
    "DEFAULT_GARBAGE",
    "DefaultAction",
    "Delay",
    "GarbageBody",
    "Handler",
    "Refuse",
    "ResetBeforeHeaders",
    "ResetMidBody",
    "Respond",
    "Trickle",
    "Truncate",
]


_SERVER_NAME = "pytest-laya-scripted"
_NO_BODY_STATUSES = frozenset({204, 304})
# Framing headers the server always computes itself, so Content-Length is always right.
_FRAMING_HEADERS = frozenset({"content-length", "transfer-encoding"})
#: The default body of :class:`GarbageBody`: starts like a JSON object, then is not JSON.
DEFAULT_GARBAGE = b'{"decision": "allow", <<scripted server: this is not JSON>>'


class Action:
    """Base class of every script action.

    Actions are immutable data with one effect on the wire, `perform`.  That keeps a script
    easy to build, print and compare, and lets a higher layer (a fake Laya server) compute
    actions with a :class:`Handler` without knowing how the faults are produced.
    """

    __slots__ = ()

    def perform(self, conn: RawConnection, *, keep_alive: bool, head_only: bool) -> bool:
        """Answer one request on `conn`; True when the connection may serve another.

        `keep_alive`: the client and the script allow another request; `head_only`: the
        request was a HEAD (no body is sent). An action the server cannot perform (a
        `Handler`, `Delay` or `Refuse` is resolved before this) fails loudly with a 500.
        """
        conn.send(_closing_bytes(Respond(500, f"scripted server: unsupported action {self!r}")))
        return False


def _closing_bytes(response: Respond, *, head_only: bool = False) -> bytes:
    """`response` on the wire with ``Connection: close``, its body left out for a HEAD."""
    return response.render_head(keep_alive=False) + (b"" if head_only else response.payload)


def _check_header_items(headers: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    if headers is None:
        return ()
    items: list[tuple[str, str]] = []
    for name, value in headers.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise TypeError(f"header names and values must be str, got {name!r}: {value!r}")
        if not name or not set(name) <= TOKEN_CHARS:
            raise ValueError(f"invalid header name {name!r}")
        if any(ch in value for ch in "\r\n\x00"):
            raise ValueError(f"header {name!r} value contains CR, LF or NUL")
        try:
            value.encode("latin-1")
        except UnicodeEncodeError:
            raise ValueError(f"header {name!r} value is not latin-1 encodable") from None
        if name.lower() in _FRAMING_HEADERS:
            raise ValueError(
                f"header {name!r} is computed by the server (Content-Length is always right); "
                "use Truncate or ResetMidBody for short bodies"
            )
        items.append((name, value))
    return tuple(items)


@dataclass(frozen=True)
class Respond(Action):
    """Answer the request with a complete, well-framed response.

    ``body``: ``dict``/``list`` are sent as JSON (``application/json``); ``str`` as
    ``text/plain; charset=utf-8``; ``bytes`` as ``application/octet-stream`` when not
    empty.  ``content_type`` overrides that, and a ``Content-Type`` in ``headers`` is used
    when ``content_type`` is not given.  ``Content-Length`` is always computed (passing it
    or ``Transfer-Encoding`` in ``headers`` is a ``ValueError``).  A ``Connection: close``
    header makes the server close the connection after this response.
    """

    status: int
    body: bytes | str | Mapping[str, Any] | list[Any] = b""
    headers: Mapping[str, str] | None = field(default=None, kw_only=True)
    content_type: str | None = field(default=None, kw_only=True)
    _payload: bytes = field(init=False, repr=False, compare=False)
    _ctype: str | None = field(init=False, repr=False, compare=False)
    _items: tuple[tuple[str, str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.status, bool) or not isinstance(self.status, int):
            raise TypeError(f"status must be an int, got {self.status!r}")
        if not 200 <= self.status <= 999:
            raise ValueError(f"status must be a final status 200..999, got {self.status}")
        body = self.body
        if isinstance(body, (bytes, bytearray, memoryview)):
            payload = bytes(body)
            default_ctype = "application/octet-stream" if payload else None
        elif isinstance(body, str):
            payload = body.encode("utf-8")
            default_ctype = "text/plain; charset=utf-8"
        elif isinstance(body, (Mapping, list, tuple)):
            payload = json.dumps(body if not isinstance(body, Mapping) else dict(body)).encode("utf-8")
            default_ctype = "application/json"
        else:
            raise TypeError(f"body must be bytes, str, dict or list, got {type(body).__name__}")
        if payload and self.status in _NO_BODY_STATUSES:
            raise ValueError(f"status {self.status} must not have a body")
        items = _check_header_items(self.headers)
        header_ctype = next((v for k, v in items if k.lower() == "content-type"), None)
        if self.content_type is not None:
            _check_header_items({"Content-Type": self.content_type})
        ctype = self.content_type or header_ctype or default_ctype
        object.__setattr__(self, "_payload", payload)
        object.__setattr__(self, "_ctype", ctype)
        object.__setattr__(self, "_items", items)

    @property
    def payload(self) -> bytes:
        """The body bytes exactly as they go on the wire."""
        return self._payload

    @property
    def asks_close(self) -> bool:
        """True when ``headers`` carry ``Connection: close``."""
        return any(
            k.lower() == "connection" and "close" in header_tokens(v) for k, v in self._items
        )

    def header_items(self, *, omit_length: bool = False) -> list[tuple[str, str]]:
        """The response headers as sent, in order, but for ``Connection`` (the transport's business).

        What an in-process transport hands its client, so that it sees the very headers the
        loopback server would send.
        """
        items = []
        if self._ctype is not None:
            items.append(("Content-Type", self._ctype))
        if self.status not in _NO_BODY_STATUSES and not omit_length:
            items.append(("Content-Length", str(len(self._payload))))
        named = {k.lower() for k, _ in self._items}
        if "server" not in named:
            items.append(("Server", _SERVER_NAME))
        items.extend((name, value) for name, value in self._items if name.lower() not in ("content-type", "connection"))
        return items

    def render_head(self, *, keep_alive: bool, omit_length: bool = False) -> bytes:
        """The status line and headers, with the right Content-Length and Connection."""
        try:
            reason = http.HTTPStatus(self.status).phrase
        except ValueError:
            reason = "Unknown"
        items = self.header_items(omit_length=omit_length)
        # Connection goes right after Content-Type and Content-Length, as it always has.
        at = int(self._ctype is not None) + int(self.status not in _NO_BODY_STATUSES and not omit_length)
        items.insert(at, ("Connection", "keep-alive" if keep_alive else "close"))
        lines = [f"HTTP/1.1 {self.status} {reason}"] + [f"{name}: {value}" for name, value in items]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def perform(self, conn: RawConnection, *, keep_alive: bool, head_only: bool) -> bool:
        keep = keep_alive and not self.asks_close
        if keep:
            # Count as idle from here on: a client that has read this response and then
            # enqueues a Refuse must find this connection shut down (FIN sent) before
            # enqueue() returns, never half-way between "answered" and "idle".
            conn.mark_idle()
        conn.send(self.render_head(keep_alive=keep) + (b"" if head_only else self.payload))
        return keep


def _check_nonnegative(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {value!r}")
    if not value >= 0:  # also rejects NaN
        raise ValueError(f"{name} must be >= 0, got {value!r}")


def _check_response_action(name: str, value: object) -> None:
    if not isinstance(value, Action):
        raise TypeError(f"{name} must be an Action, got {value!r}")
    if isinstance(value, Refuse):
        raise ValueError(
            f"{name} cannot be Refuse: Refuse acts on the listening socket, not on one request; "
            "put it in the script instead"
        )


@dataclass(frozen=True)
class Delay(Action):
    """Wait ``seconds`` after reading the request, then do ``then``.

    Models a slow model or an overloaded server: the client's read deadline, not the
    connect deadline, is what should fire.  The wait ends early when the server stops.
    """

    seconds: float
    then: Action

    def __post_init__(self) -> None:
        _check_nonnegative("seconds", self.seconds)
        _check_response_action("then", self.then)


@dataclass(frozen=True)
class Trickle(Action):
    """Send the status line and headers at once, then the body ``chunk_size`` bytes at a time.

    The server waits ``interval_s`` before every chunk, so a client with a short read
    timeout times out *after* it has seen the status -- the case where a per-read timeout
    is not a per-decision deadline.  The connection is closed afterwards.

    ``head=True`` trickles the status line and headers too, ``chunk_size`` bytes at a time:
    a server that is slow to answer at all, yet sends a byte before any per-read timeout
    fires, so only a deadline on the whole response can end the wait.  On a keep-alive
    connection this is what a reused (pooled) connection sees when its second answer stalls.
    """

    response: Respond
    chunk_size: int = field(default=1, kw_only=True)
    interval_s: float = field(default=0.1, kw_only=True)
    head: bool = field(default=False, kw_only=True)

    def __post_init__(self) -> None:
        if not isinstance(self.response, Respond):
            raise TypeError(f"response must be a Respond, got {self.response!r}")
        if isinstance(self.chunk_size, bool) or not isinstance(self.chunk_size, int) or self.chunk_size < 1:
            raise ValueError(f"chunk_size must be an int >= 1, got {self.chunk_size!r}")
        _check_nonnegative("interval_s", self.interval_s)
        if not isinstance(self.head, bool):
            raise TypeError(f"head must be a bool, got {self.head!r}")

    def perform(self, conn: RawConnection, *, keep_alive: bool, head_only: bool) -> bool:
        response = self.response
        payload = b"" if head_only else response.payload
        if self.head:
            payload = response.render_head(keep_alive=False) + payload
        else:
            conn.send(response.render_head(keep_alive=False))
        for start in range(0, len(payload), self.chunk_size):
            conn.pause(self.interval_s)
            conn.send(payload[start : start + self.chunk_size])
        return False


@dataclass(frozen=True)
class ResetBeforeHeaders(Action):
    """Read the whole request, then abort the connection with a TCP RST; no byte is sent.

    Uses ``SO_LINGER`` with a zero timeout, which makes ``close()`` send RST instead of
    FIN -- what a crashing worker or a load balancer dropping a backend looks like.
    """

    def perform(self, conn: RawConnection, *, keep_alive: bool, head_only: bool) -> bool:
        conn.abort()
        return False


def _cut_point(response: Respond, after_bytes: int | None, *, what: str) -> int:
    size = len(response.payload)
    if size == 0:
        raise ValueError(f"{what} needs a response with a non-empty body")
    if after_bytes is None:
        return size // 2
    if isinstance(after_bytes, bool) or not isinstance(after_bytes, int):
        raise TypeError(f"after_bytes must be an int, got {after_bytes!r}")
    if not 0 <= after_bytes < size:
        raise ValueError(f"after_bytes must be in 0..{size - 1} (body is {size} bytes), got {after_bytes}")
    return after_bytes


@dataclass(frozen=True)
class ResetMidBody(Action):
    """Send the headers (with the full Content-Length) and part of the body, then RST.

    ``after_bytes`` is how much of the body is sent; ``None`` sends the first half.
    The client sees an error while reading the body, after it has the status line.
    """

    response: Respond
    after_bytes: int | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        if not isinstance(self.response, Respond):
            raise TypeError(f"response must be a Respond, got {self.response!r}")
        _cut_point(self.response, self.after_bytes, what="ResetMidBody")

    @property
    def cut(self) -> int:
        """How many body bytes are sent before the reset."""
        return _cut_point(self.response, self.after_bytes, what="ResetMidBody")

    def perform(self, conn: RawConnection, *, keep_alive: bool, head_only: bool) -> bool:
        response = self.response
        conn.send(response.render_head(keep_alive=False) + response.payload[: self.cut])
        conn.wait_flushed(1.0)
        conn.abort()
        return False


@dataclass(frozen=True)
class Truncate(Action):
    """Like :class:`ResetMidBody`, but close cleanly (FIN) after ``after_bytes`` body bytes.

    The client gets an orderly end of stream before Content-Length is reached: a short
    body, which HTTP clients report as an incomplete message rather than a reset.
    """

    response: Respond
    after_bytes: int = field(kw_only=True)

    def __post_init__(self) -> None:
        if not isinstance(self.response, Respond):
            raise TypeError(f"response must be a Respond, got {self.response!r}")
        _cut_point(self.response, self.after_bytes, what="Truncate")

    def perform(self, conn: RawConnection, *, keep_alive: bool, head_only: bool) -> bool:
        response = self.response
        conn.send(response.render_head(keep_alive=False) + response.payload[: self.after_bytes])
        conn.close_gracefully()
        return False


@dataclass(frozen=True)
class GarbageBody(Action):
    """A complete, well-framed response whose body is not valid JSON.

    The Content-Type still says JSON by default, because the failure worth testing is a
    server (or proxy) that claims JSON and sends something else.  A custom ``body`` that
    happens to parse as JSON is rejected with ``ValueError``.
    """

    status: int = 200
    content_type: str = "application/json"
    body: bytes = field(default=DEFAULT_GARBAGE, kw_only=True)

    def __post_init__(self) -> None:
        if not isinstance(self.body, bytes) or not self.body:
            raise ValueError("GarbageBody body must be non-empty bytes")
        try:
            json.loads(self.body)
        except ValueError:  # JSONDecodeError and UnicodeDecodeError are both ValueErrors
            pass
        else:
            raise ValueError(f"GarbageBody body {self.body!r} is valid JSON")
        self.as_response()  # validates status and content_type

    def as_response(self) -> Respond:
        """The equivalent :class:`Respond` (the server sends it with Connection: close)."""
        return Respond(self.status, self.body, content_type=self.content_type)

    def perform(self, conn: RawConnection, *, keep_alive: bool, head_only: bool) -> bool:
        conn.send(_closing_bytes(self.as_response(), head_only=head_only))
        return False


@dataclass(frozen=True)
class Refuse(Action):
    """Stop listening for ``for_s`` seconds, then listen again on the same port.

    While refused, connection attempts fail with ECONNREFUSED -- a restarting server.
    Unlike the other actions, Refuse does not answer a request: it takes effect as soon
    as it reaches the head of the script.  At the head of the initial script it applies
    at :meth:`ScriptedServer.start`; enqueued onto an empty script it applies at once;
    after another action it applies when that action's request is answered: that
    response is sent with ``Connection: close`` and the listener is closed *before* its
    first byte is written, so the client's next connection attempt is refused for sure.
    Open keep-alive connections are closed too, as when a server goes down.  The
    ``for_s`` window starts once that response has been sent.  Consecutive Refuse
    actions add up.
    """

    for_s: float

    def __post_init__(self) -> None:
        _check_nonnegative("for_s", self.for_s)


@dataclass(frozen=True)
class Handler(Action):
    """Compute the action from the request, e.g. to echo ``X-Request-Id`` or check a body.

    ``fn`` runs on the connection's thread and may return any action but :class:`Refuse`.
    If it raises, the client gets a 500 whose text body holds the traceback, and the
    exception is kept in :attr:`ScriptedServer.errors` -- a broken handler fails loudly.
    """

    fn: Callable[[ReceivedRequest], Action]

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise TypeError(f"fn must be callable, got {self.fn!r}")


#: What a ``default`` may be: an action, or a function computing one from the request.
DefaultAction = Action | Callable[[ReceivedRequest], Action] | None

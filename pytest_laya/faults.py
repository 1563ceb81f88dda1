"""A scripted HTTP/1.1 server on a real loopback socket, for fault-injection tests.

Why this exists: the served client (retries, one deadline per decision, error mapping)
has to be tested against the failures a real deployment produces -- resets before the
status line, resets and short reads in the middle of a body, slow bodies, refused
connections, bodies that are not JSON.  A mock transport cannot produce these: the
interesting behaviour lives in the kernel socket and in the HTTP client's connection
handling, so the faults here happen on a real TCP socket bound to 127.0.0.1.

How it works: a test builds a :class:`ScriptedServer` with a *script*, a sequence of
actions.  Every incoming request consumes the next action (:class:`Respond`,
:class:`Delay`, :class:`Trickle`, :class:`ResetBeforeHeaders`, :class:`ResetMidBody`,
:class:`Truncate`, :class:`GarbageBody`, :class:`Handler`); :class:`Refuse` is the one
action that acts on the listening socket instead of on a request.  When the script is
empty the ``default`` action answers, and without a default the server answers a loud
500 so that a test with a short script fails instead of hanging.

The module is standard library only (no pytest, no httpx) so it stays cheap to import
and can sit under a "fake Laya server" that offers the same fault script to downstream
users.  Connection handling runs on daemon threads -- one acceptor plus one thread per
connection -- so the server works the same from synchronous tests and from async tests
whose event loop owns the main thread.  Every wait is bounded (socket timeouts, polled
stop flag), and :meth:`ScriptedServer.stop` closes every socket and joins every thread.
"""

from __future__ import annotations

import http
import ipaddress
import itertools
import json
import socket
import struct
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Union

try:  # Unix only: lets ResetMidBody wait until its partial body has left the kernel.
    import fcntl
    import termios

    _TIOCOUTQ: int | None = termios.TIOCOUTQ
except (ImportError, AttributeError):  # pragma: no cover - non-Unix platforms
    fcntl = None  # type: ignore[assignment]
    _TIOCOUTQ = None

__all__ = [
    "Action",
    "Delay",
    "GarbageBody",
    "Handler",
    "ReceivedRequest",
    "Refuse",
    "ResetBeforeHeaders",
    "ResetMidBody",
    "Respond",
    "ScriptedServer",
    "Trickle",
    "Truncate",
    "closed_loopback_url",
    "free_loopback_port",
]

# How often blocked threads wake up to look at the stop flag.  Small, so stop() is quick.
_POLL_S = 0.05
_MAX_LINE = 64 * 1024
_MAX_HEADERS = 200
_SERVER_NAME = "pytest-laya-scripted"
_NO_BODY_STATUSES = frozenset({204, 304})
# Framing headers the server always computes itself, so Content-Length is always right.
_FRAMING_HEADERS = frozenset({"content-length", "transfer-encoding"})
_TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")

#: The default body of :class:`GarbageBody`: starts like a JSON object, then is not JSON.
DEFAULT_GARBAGE = b'{"decision": "allow", <<scripted server: this is not JSON>>'


# --------------------------------------------------------------------------- requests


@dataclass(frozen=True)
class ReceivedRequest:
    """One request as the server parsed it off the wire.

    ``path`` is the raw request target (path plus query string, as sent).  Header names
    are lower-case; repeated headers are joined with ``", "`` as HTTP allows.  ``body`` is
    the decoded body (a chunked body is de-chunked).  ``connection_id`` numbers the TCP
    connections the server accepted, so a test can tell whether keep-alive reused one.
    """

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    http_version: str = "HTTP/1.1"
    connection_id: int = 0

    def header(self, name: str, default: str | None = None) -> str | None:
        """The value of header ``name`` (any case), or ``default``."""
        return self.headers.get(name.lower(), default)

    def json(self) -> Any:
        """The body parsed as JSON (raises ``ValueError`` when it is not JSON)."""
        return json.loads(self.body)


# --------------------------------------------------------------------------- actions


class Action:
    """Base class of every script action.

    Actions are immutable data; the server interprets them.  That keeps a script easy to
    build, print and compare, and lets a higher layer (a fake Laya server) compute actions
    with a :class:`Handler` without knowing how the faults are produced.
    """

    __slots__ = ()


def _check_header_items(headers: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    if headers is None:
        return ()
    items: list[tuple[str, str]] = []
    for name, value in headers.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise TypeError(f"header names and values must be str, got {name!r}: {value!r}")
        if not name or not set(name) <= _TOKEN_CHARS:
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
    def resolved_content_type(self) -> str | None:
        """The Content-Type the response is sent with (``None``: no header)."""
        return self._ctype

    @property
    def asks_close(self) -> bool:
        """True when ``headers`` carry ``Connection: close``."""
        return any(
            k.lower() == "connection" and "close" in _tokens(v) for k, v in self._items
        )

    def render_head(self, *, keep_alive: bool, omit_length: bool = False) -> bytes:
        """The status line and headers, with the right Content-Length and Connection."""
        try:
            reason = http.HTTPStatus(self.status).phrase
        except ValueError:
            reason = "Unknown"
        lines = [f"HTTP/1.1 {self.status} {reason}"]
        if self._ctype is not None:
            lines.append(f"Content-Type: {self._ctype}")
        if self.status not in _NO_BODY_STATUSES and not omit_length:
            lines.append(f"Content-Length: {len(self._payload)}")
        lines.append("Connection: keep-alive" if keep_alive else "Connection: close")
        named = {k.lower() for k, _ in self._items}
        if "server" not in named:
            lines.append(f"Server: {_SERVER_NAME}")
        for name, value in self._items:
            if name.lower() not in ("content-type", "connection"):
                lines.append(f"{name}: {value}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


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
    """

    response: Respond
    chunk_size: int = field(default=1, kw_only=True)
    interval_s: float = field(default=0.1, kw_only=True)

    def __post_init__(self) -> None:
        if not isinstance(self.response, Respond):
            raise TypeError(f"response must be a Respond, got {self.response!r}")
        if isinstance(self.chunk_size, bool) or not isinstance(self.chunk_size, int) or self.chunk_size < 1:
            raise ValueError(f"chunk_size must be an int >= 1, got {self.chunk_size!r}")
        _check_nonnegative("interval_s", self.interval_s)


@dataclass(frozen=True)
class ResetBeforeHeaders(Action):
    """Read the whole request, then abort the connection with a TCP RST; no byte is sent.

    Uses ``SO_LINGER`` with a zero timeout, which makes ``close()`` send RST instead of
    FIN -- what a crashing worker or a load balancer dropping a backend looks like.
    """


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
DefaultAction = Union[Action, Callable[[ReceivedRequest], Action], None]


# --------------------------------------------------------------------------- helpers


def _tokens(value: str) -> set[str]:
    return {t.strip().lower() for t in value.split(",") if t.strip()}


def _loopback_host(host: str) -> tuple[str, int]:
    """Validate that ``host`` is a loopback address; return (address, family)."""
    if not isinstance(host, str):
        raise TypeError(f"host must be a str, got {host!r}")
    candidate = "127.0.0.1" if host.lower() == "localhost" else host.strip("[]")
    try:
        address = ipaddress.ip_address(candidate)
    except ValueError:
        raise ValueError(
            f"ScriptedServer binds loopback addresses only; {host!r} is not an IP address or 'localhost'"
        ) from None
    if not address.is_loopback:
        raise ValueError(
            f"ScriptedServer binds loopback addresses only (127.0.0.0/8 or ::1), not {host!r}: "
            "a fault-injection server must never be reachable from the network"
        )
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    return str(address), family


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago.

    The kernel picks it (bind to port 0) and the socket is closed again, so another
    process may take it before the caller binds; fine for tests, not a reservation.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


_closed_port_lock = threading.Lock()
_closed_port_socket: socket.socket | None = None


def closed_loopback_url() -> str:
    """A URL on 127.0.0.1 where nothing listens: every connection is refused.

    The port is bound (but never listening) by a socket this process keeps open for its
    whole life, so no other socket can take the port and start listening there; that
    makes "connection refused" tests deterministic, unlike a port that is merely free.
    The same URL is returned on every call.
    """
    global _closed_port_socket
    with _closed_port_lock:
        if _closed_port_socket is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            _closed_port_socket = sock
        port = _closed_port_socket.getsockname()[1]
    return f"http://127.0.0.1:{port}"


class _ConnectionDone(Exception):
    """Internal: stop serving this connection (peer gone, timeout, server stopping)."""


class _BadRequest(Exception):
    """Internal: the bytes on the wire are not a request this server can parse."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class _Conn:
    """One accepted connection. Only its own thread closes the socket (others shut it down)."""

    __slots__ = ("sock", "id", "busy", "closing", "thread", "_closed")

    def __init__(self, sock: socket.socket, conn_id: int) -> None:
        self.sock = sock
        self.id = conn_id
        self.busy = False  # a request is being read or answered
        self.closing = False  # close after the current request
        self.thread: threading.Thread | None = None
        self._closed = False

    def shutdown(self) -> None:
        """Wake the owning thread out of recv/send (safe from any thread)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close_gracefully(self) -> None:
        """FIN: finish sending, drain what the peer already sent (so close() is no RST), close."""
        if self._closed:
            return
        self._closed = True
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        try:
            self.sock.setblocking(False)
            for _ in range(64):
                if not self.sock.recv(65536):
                    break
        except OSError:
            pass
        self.sock.close()

    def abort(self) -> None:
        """RST: SO_LINGER with a zero timeout makes close() reset the connection."""
        if self._closed:
            return
        self._closed = True
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.sock.close()


@dataclass
class _Parsed:
    request: ReceivedRequest
    keep_alive: bool


# --------------------------------------------------------------------------- server


class ScriptedServer:
    """An HTTP/1.1 server on a loopback port that answers requests by following a script.

    Use it as a context manager (``with ScriptedServer(Respond(200, {...})) as server:``)
    and point the client at :attr:`url`.  Each request consumes the next script action;
    :meth:`enqueue` appends more.  When the script is empty, ``default`` answers (an
    action, or a function of the request); without one, a 500 whose body says
    "scripted server: script exhausted".

    Requests are parsed properly (request line, headers, Content-Length or chunked body,
    ``Expect: 100-continue``), recorded in :attr:`requests`, and served with keep-alive
    unless the client asks to close; responses to faults carry ``Connection: close``.

    Limitations, on purpose: one script shared by all connections, consumed in arrival
    order (concurrent requests race for actions); no TLS, no HTTP/2, no pipelining
    guarantees beyond sequential keep-alive.  ``port`` can be fixed, but 0 (a free port
    chosen by the kernel) avoids collisions between tests.
    """

    def __init__(
        self,
        *script: Action,
        default: DefaultAction = None,
        host: str = "127.0.0.1",
        port: int = 0,
        idle_timeout_s: float = 60.0,
        request_timeout_s: float = 10.0,
        stop_timeout_s: float = 1.0,
        max_body_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        self._host, self._family = _loopback_host(host)
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(f"port must be an int in 0..65535, got {port!r}")
        for action in script:
            self._check_script_action(action)
        if default is None or isinstance(default, Action):
            if isinstance(default, Refuse):
                raise ValueError("default cannot be Refuse: Refuse is a script step, not an answer")
            self._default: Action | None = default
        elif callable(default):
            self._default = Handler(default)
        else:
            raise TypeError(f"default must be an Action, a callable or None, got {default!r}")
        self._port = port
        self.idle_timeout_s = idle_timeout_s
        self.request_timeout_s = request_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.max_body_bytes = max_body_bytes

        #: Every request received, in arrival order (appended under the server lock).
        self.requests: list[ReceivedRequest] = []
        #: Exceptions raised by Handler functions, and internal errors (e.g. a failed re-bind).
        self.errors: list[BaseException] = []

        self._cond = threading.Condition(threading.Lock())
        self._script: deque[Action] = deque(script)
        self._stopping = threading.Event()
        self._started = False
        self._stopped = False
        self._listener: socket.socket | None = None
        self._retired: list[socket.socket] = []  # shut down, waiting for the acceptor to close
        self._reopen_at: float | None = None  # when a refused listener binds again
        self._down = False  # in a Refuse window (or about to be)
        self._pending_triggers = 0  # requests holding a Refuse that applies after their response
        self._conns: set[_Conn] = set()
        self._threads: set[threading.Thread] = set()
        self._acceptor: threading.Thread | None = None
        self._conn_ids = itertools.count(1)

    # ----------------------------------------------------------------- public API

    @property
    def host(self) -> str:
        """The loopback address the server binds."""
        return self._host

    @property
    def port(self) -> int:
        """The bound port (known after :meth:`start` when constructed with port 0)."""
        if self._port == 0:
            raise RuntimeError("ScriptedServer has no port yet: call start() (or use it as a context manager)")
        return self._port

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:PORT`` (no trailing slash)."""
        host = f"[{self._host}]" if self._family == socket.AF_INET6 else self._host
        return f"http://{host}:{self.port}"

    @property
    def pending(self) -> int:
        """Script actions not yet consumed."""
        with self._cond:
            return len(self._script)

    @property
    def listening(self) -> bool:
        """False while a :class:`Refuse` window is in effect (or before start / after stop)."""
        with self._cond:
            return self._listener is not None

    def enqueue(self, *actions: Action) -> None:
        """Append actions to the script (a Refuse reaching the head applies at once)."""
        for action in actions:
            self._check_script_action(action)
        with self._cond:
            self._script.extend(actions)
            if self._started and not self._stopped:
                self._apply_head_refuse_locked()
            self._cond.notify_all()

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> bool:
        """Block until at least ``count`` requests were received; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.requests) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, _POLL_S))
            return True

    def start(self) -> ScriptedServer:
        """Bind, listen and start the acceptor thread.  Idempotent while running."""
        with self._cond:
            if self._stopped:
                raise RuntimeError("a stopped ScriptedServer cannot be restarted; create a new one")
            if self._started:
                return self
            listener = self._bind()
            self._port = listener.getsockname()[1]
            self._listener = listener
            self._started = True
            self._apply_head_refuse_locked()
            self._acceptor = threading.Thread(
                target=self._accept_loop, name=f"scripted-server-acceptor:{self._port}", daemon=True
            )
            self._acceptor.start()
        return self

    def stop(self) -> None:
        """Close the listener and every connection, and join every thread (about 1 s at most).

        Idempotent.  A Handler function blocked forever cannot be interrupted; its daemon
        thread is left behind after ``stop_timeout_s`` rather than hanging the test.
        """
        with self._cond:
            if not self._started or self._stopped:
                return  # never started (start() still allowed) or already stopped
            self._stopped = True
            self._stopping.set()
            self._retire_listener_locked()
            conns = list(self._conns)
            threads = list(self._threads)
            self._cond.notify_all()
        for conn in conns:
            conn.shutdown()
        deadline = time.monotonic() + self.stop_timeout_s
        me = threading.current_thread()
        for thread in [self._acceptor, *threads]:
            if thread is not None and thread is not me:
                thread.join(max(0.0, deadline - time.monotonic()))
        with self._cond:
            if self._acceptor is None or not self._acceptor.is_alive():
                self._close_retired_locked()

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self.url if self._port else "unbound"
        state = "stopped" if self._stopped else "running" if self._started else "new"
        return f"<ScriptedServer {where} {state} pending={self.pending} requests={len(self.requests)}>"

    # ----------------------------------------------------------------- listener and Refuse

    @staticmethod
    def _check_script_action(action: object) -> None:
        if not isinstance(action, Action):
            raise TypeError(f"script items must be Action instances, got {action!r}")

    def _bind(self) -> socket.socket:
        sock = socket.socket(self._family, socket.SOCK_STREAM)
        try:
            # SO_REUSEADDR: re-binding the same port after Refuse must not trip over the
            # TIME_WAIT entries of connections this server closed.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self._host, self._port))
            sock.listen(128)
            sock.settimeout(_POLL_S)
        except BaseException:
            sock.close()
            raise
        return sock

    def _retire_listener_locked(self) -> None:
        """Stop listening *now*.

        shutdown() takes the socket out of the kernel's listening table at once (new
        connects get RST, i.e. ECONNREFUSED) and wakes the acceptor; the acceptor thread
        itself then closes it, so no file descriptor is closed under a blocked accept().
        """
        listener = self._listener
        if listener is None:
            return
        self._listener = None
        try:
            listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            # Platforms that cannot shut down a listening socket: close it right away.
            listener.close()
            return
        self._retired.append(listener)

    def _close_retired_locked(self) -> None:
        while self._retired:
            self._retired.pop().close()

    def _pop_refuses_locked(self) -> float | None:
        """Pop consecutive Refuse actions at the head of the script; their total for_s."""
        total: float | None = None
        while self._script and isinstance(self._script[0], Refuse):
            refuse = self._script.popleft()
            assert isinstance(refuse, Refuse)
            total = (total or 0.0) + refuse.for_s
        return total

    def _begin_outage_locked(self, exclude: _Conn | None) -> None:
        """Close the listener and idle connections; busy ones close after their response."""
        self._down = True
        self._retire_listener_locked()
        for conn in self._conns:
            if conn is exclude or conn.busy:
                conn.closing = True
            else:
                conn.shutdown()
        self._cond.notify_all()

    def _apply_head_refuse_locked(self) -> None:
        """A Refuse at the head with nothing to wait for takes effect immediately."""
        if self._down or self._pending_triggers:
            return  # the reopen step looks at the head again before listening
        for_s = self._pop_refuses_locked()
        if for_s is not None:
            self._begin_outage_locked(exclude=None)
            self._reopen_at = time.monotonic() + for_s

    def _reopen_locked(self) -> None:
        """End of a Refuse window: bind the same port again (unless another Refuse is next)."""
        more = self._pop_refuses_locked()
        if more is not None:
            self._reopen_at = time.monotonic() + more
            return
        assert self._reopen_at is not None
        try:
            listener = self._bind()
        except OSError as exc:
            # The port can be taken briefly by another socket; keep trying for 2 s.
            if time.monotonic() - self._reopen_at > 2.0:
                self.errors.append(exc)
                self._reopen_at = None  # give up: connections stay refused, loudly
            else:
                self._cond.wait(0.02)
            return
        self._listener = listener
        self._reopen_at = None
        self._down = False
        self._cond.notify_all()

    def _accept_loop(self) -> None:
        try:
            while not self._stopping.is_set():
                with self._cond:
                    self._close_retired_locked()
                    listener = self._listener
                    if listener is None:
                        now = time.monotonic()
                        if self._reopen_at is not None and now >= self._reopen_at:
                            self._reopen_locked()
                        else:
                            wait = _POLL_S if self._reopen_at is None else self._reopen_at - now
                            self._cond.wait(min(_POLL_S, max(wait, 0.0)))
                        continue
                try:
                    sock, _addr = listener.accept()
                except socket.timeout:
                    continue
                except OSError:
                    # Shut down under us (Refuse or stop), or a transient error (EMFILE).
                    if not self._stopping.is_set() and self._listener is listener:
                        self._stopping.wait(_POLL_S)
                    continue
                self._adopt(sock, listener)
        except BaseException as exc:  # pragma: no cover - a bug; keep it visible
            with self._cond:
                self.errors.append(exc)
        finally:
            with self._cond:
                self._close_retired_locked()

    def _adopt(self, sock: socket.socket, listener: socket.socket) -> None:
        with self._cond:
            conn = _Conn(sock, next(self._conn_ids))
            if self._stopping.is_set() or self._listener is not listener:
                conn.abort()  # accepted in the instant the server went down
                return
            sock.settimeout(_POLL_S)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
            thread = threading.Thread(
                target=self._serve, args=(conn,), name=f"scripted-server-conn:{self._port}#{conn.id}", daemon=True
            )
            conn.thread = thread
            self._conns.add(conn)
            self._threads.add(thread)
            thread.start()

    # ----------------------------------------------------------------- connections

    def _serve(self, conn: _Conn) -> None:
        reader = _Reader(self, conn)
        try:
            while not self._stopping.is_set():
                try:
                    parsed = reader.read_request()
                except _BadRequest as bad:
                    self._send(conn, _error_response(bad.status, f"scripted server: {bad}"))
                    break
                if parsed is None:
                    break
                with self._cond:
                    self.requests.append(parsed.request)
                    self._cond.notify_all()
                if not self._handle(conn, parsed):
                    break
                conn.busy = False
                if conn.closing:
                    break
        except _ConnectionDone:
            pass
        except Exception as exc:  # a bug in this module: record it, never kill the test run
            with self._cond:
                self.errors.append(exc)
        finally:
            conn.close_gracefully()
            with self._cond:
                self._conns.discard(conn)
                self._threads.discard(threading.current_thread())

    def _take(self, request: ReceivedRequest) -> tuple[Action, float | None]:
        """The action for this request, and the for_s of a Refuse that follows it."""
        with self._cond:
            if self._script:
                action = self._script.popleft()
            elif self._default is not None:
                action = self._default
            else:
                action = _error_response(
                    500,
                    f"scripted server: script exhausted (no action left for {request.method} {request.path}); "
                    "enqueue more actions or pass default=",
                )
            refuse_for = self._pop_refuses_locked()
            if refuse_for is not None:
                self._pending_triggers += 1
            return action, refuse_for

    def _handle(self, conn: _Conn, parsed: _Parsed) -> bool:
        """Answer one request; True when the connection may serve another."""
        request = parsed.request
        action, refuse_for = self._take(request)
        try:
            resolved = self._resolve(action, request)
            if refuse_for is not None:
                with self._cond:
                    self._begin_outage_locked(exclude=conn)
            keep = self._perform(conn, resolved, request, parsed.keep_alive and not conn.closing)
        finally:
            if refuse_for is not None:
                conn.close_gracefully()
                with self._cond:
                    self._pending_triggers -= 1
                    self._down = True
                    if self._listener is not None:  # stop() raced us; nothing to refuse
                        self._retire_listener_locked()
                    self._reopen_at = time.monotonic() + refuse_for
                    self._cond.notify_all()
        return keep and refuse_for is None

    def _resolve(self, action: Action, request: ReceivedRequest) -> Action:
        """Run Handlers and Delays until an action that produces bytes (or a reset) remains."""
        for _ in range(100):
            if isinstance(action, Handler):
                try:
                    result = action.fn(request)
                except Exception as exc:
                    with self._cond:
                        self.errors.append(exc)
                    return _error_response(
                        500, "scripted server: Handler raised\n" + "".join(traceback.format_exception(exc))
                    )
                if not isinstance(result, Action):
                    return _error_response(500, f"scripted server: Handler returned {result!r}, not an Action")
                action = result
            elif isinstance(action, Delay):
                if self._stopping.wait(action.seconds):
                    raise _ConnectionDone
                action = action.then
            elif isinstance(action, Refuse):
                return _error_response(
                    500, "scripted server: a Handler returned Refuse; Refuse belongs in the script"
                )
            else:
                return action
        return _error_response(500, "scripted server: Handler/Delay nesting is more than 100 deep")

    def _perform(self, conn: _Conn, action: Action, request: ReceivedRequest, keep_alive: bool) -> bool:
        head_only = request.method == "HEAD"
        if isinstance(action, Respond):
            keep = keep_alive and not action.asks_close
            if keep:
                # Count as idle from here on: a client that has read this response and then
                # enqueues a Refuse must find this connection shut down (FIN sent) before
                # enqueue() returns, never half-way between "answered" and "idle".
                with self._cond:
                    conn.busy = False
            self._send(conn, action.render_head(keep_alive=keep) + (b"" if head_only else action.payload))
            return keep
        if isinstance(action, GarbageBody):
            response = action.as_response()
            self._send(conn, response.render_head(keep_alive=False) + (b"" if head_only else response.payload))
            return False
        if isinstance(action, Trickle):
            response = action.response
            self._send(conn, response.render_head(keep_alive=False))
            payload = b"" if head_only else response.payload
            for start in range(0, len(payload), action.chunk_size):
                if self._stopping.wait(action.interval_s):
                    raise _ConnectionDone
                self._send(conn, payload[start : start + action.chunk_size])
            return False
        if isinstance(action, ResetBeforeHeaders):
            conn.abort()
            return False
        if isinstance(action, ResetMidBody):
            response = action.response
            self._send(conn, response.render_head(keep_alive=False) + response.payload[: action.cut])
            _wait_flushed(conn.sock, time.monotonic() + 1.0)
            conn.abort()
            return False
        if isinstance(action, Truncate):
            response = action.response
            self._send(conn, response.render_head(keep_alive=False) + response.payload[: action.after_bytes])
            conn.close_gracefully()
            return False
        # An Action subclass this server does not know: fail loudly.
        self._send(conn, _error_response(500, f"scripted server: unsupported action {action!r}"))
        return False

    def _send(self, conn: _Conn, data: bytes | Respond) -> None:
        """sendall with a polled stop flag and an overall deadline (request_timeout_s)."""
        if isinstance(data, Respond):
            data = data.render_head(keep_alive=False) + data.payload
        view = memoryview(data)
        deadline = time.monotonic() + self.request_timeout_s
        while view:
            if self._stopping.is_set():
                raise _ConnectionDone
            try:
                sent = conn.sock.send(view)
            except socket.timeout:
                if time.monotonic() > deadline:
                    raise _ConnectionDone from None
                continue
            except OSError:
                raise _ConnectionDone from None
            view = view[sent:]


def _error_response(status: int, text: str) -> Respond:
    return Respond(status, text)


def _wait_flushed(sock: socket.socket, deadline: float) -> None:
    """Wait until the kernel send queue is empty, so a following RST loses no sent bytes."""
    if fcntl is None or _TIOCOUTQ is None:
        return
    while time.monotonic() < deadline:
        try:
            queued = struct.unpack("i", fcntl.ioctl(sock.fileno(), _TIOCOUTQ, b"\0\0\0\0"))[0]
        except OSError:
            return
        if queued <= 0:
            return
        time.sleep(0.002)


class _Reader:
    """Buffered request parser over one connection's socket (bounded waits only)."""

    def __init__(self, server: ScriptedServer, conn: _Conn) -> None:
        self._server = server
        self._conn = conn
        self._buf = bytearray()
        self._deadline = 0.0

    def _fill(self) -> bool:
        """Read more bytes into the buffer; False at end of stream."""
        while True:
            if self._server._stopping.is_set():
                raise _ConnectionDone
            try:
                data = self._conn.sock.recv(65536)
            except socket.timeout:
                if time.monotonic() > self._deadline:
                    raise _ConnectionDone from None
                continue
            except OSError:
                raise _ConnectionDone from None
            if not data:
                return False
            self._buf += data
            return True

    def _line(self) -> bytes:
        while True:
            end = self._buf.find(b"\n")
            if end >= 0:
                line = bytes(self._buf[: end + 1])
                del self._buf[: end + 1]
                return line.rstrip(b"\r\n")
            if len(self._buf) > _MAX_LINE:
                raise _BadRequest("line too long", 431)
            if not self._fill():
                raise _ConnectionDone  # peer went away mid-request

    def _exact(self, size: int) -> bytes:
        while len(self._buf) < size:
            if not self._fill():
                raise _ConnectionDone
        data = bytes(self._buf[:size])
        del self._buf[:size]
        return data

    def read_request(self) -> _Parsed | None:
        """The next request, or None when the client closed an idle connection."""
        self._deadline = time.monotonic() + self._server.idle_timeout_s
        while True:
            # Tolerate stray CRLFs between requests (RFC 9112 section 2.2).
            while self._buf[:2] == b"\r\n":
                del self._buf[:2]
            while self._buf[:1] == b"\n":
                del self._buf[:1]
            if self._buf:
                break
            try:
                if not self._fill():
                    return None
            except _ConnectionDone:
                return None
        self._conn.busy = True
        self._deadline = time.monotonic() + self._server.request_timeout_s

        request_line = self._line()
        parts = request_line.split(b" ")
        if len(parts) != 3:
            raise _BadRequest(f"malformed request line {request_line[:200]!r}")
        raw_method, raw_target, raw_version = parts
        try:
            method = raw_method.decode("ascii")
            target = raw_target.decode("ascii")
            version = raw_version.decode("ascii")
        except UnicodeDecodeError:
            raise _BadRequest("non-ASCII request line") from None
        if not method or not set(method) <= _TOKEN_CHARS or not target:
            raise _BadRequest(f"malformed request line {request_line[:200]!r}")
        if version not in ("HTTP/1.1", "HTTP/1.0"):
            raise _BadRequest(f"unsupported HTTP version {version!r}", 505)

        headers: dict[str, str] = {}
        count = 0
        while True:
            line = self._line()
            if not line:
                break
            count += 1
            if count > _MAX_HEADERS:
                raise _BadRequest("too many headers", 431)
            if line[:1] in (b" ", b"\t"):
                raise _BadRequest("obsolete header line folding")
            name, sep, value = line.partition(b":")
            text_name = name.decode("latin-1")
            if not sep or not text_name or not set(text_name) <= _TOKEN_CHARS:
                raise _BadRequest(f"malformed header line {line[:200]!r}")
            key = text_name.lower()
            text_value = value.decode("latin-1").strip(" \t")
            headers[key] = f"{headers[key]}, {text_value}" if key in headers else text_value

        connection = _tokens(headers.get("connection", ""))
        if version == "HTTP/1.0":
            keep_alive = "keep-alive" in connection
        else:
            keep_alive = "close" not in connection

        body = self._read_body(headers, version)
        request = ReceivedRequest(
            method=method,
            path=target,
            headers=headers,
            body=body,
            http_version=version,
            connection_id=self._conn.id,
        )
        return _Parsed(request=request, keep_alive=keep_alive)

    def _continue(self, headers: Mapping[str, str], version: str) -> None:
        if version == "HTTP/1.1" and "100-continue" in _tokens(headers.get("expect", "")):
            self._server._send(self._conn, b"HTTP/1.1 100 Continue\r\n\r\n")

    def _read_body(self, headers: Mapping[str, str], version: str) -> bytes:
        limit = self._server.max_body_bytes
        if "transfer-encoding" in headers:
            codings = [t.strip().lower() for t in headers["transfer-encoding"].split(",") if t.strip()]
            if not codings or codings[-1] != "chunked":
                raise _BadRequest("request Transfer-Encoding must end with chunked", 501)
            if codings != ["chunked"]:
                raise _BadRequest(f"unsupported Transfer-Encoding {headers['transfer-encoding']!r}", 501)
            self._continue(headers, version)
            return self._read_chunked(limit)
        if "content-length" in headers:
            values = {v.strip() for v in headers["content-length"].split(",")}
            if len(values) != 1 or not next(iter(values)).isdigit():
                raise _BadRequest(f"invalid Content-Length {headers['content-length']!r}")
            size = int(next(iter(values)))
            if size > limit:
                raise _BadRequest(f"body of {size} bytes is over the {limit} byte limit", 413)
            if size:
                self._continue(headers, version)
            return self._exact(size)
        return b""

    def _read_chunked(self, limit: int) -> bytes:
        body = bytearray()
        while True:
            size_text = self._line().split(b";", 1)[0].strip()
            try:
                if not size_text or not set(size_text.decode("ascii")) <= set("0123456789abcdefABCDEF"):
                    raise ValueError
                size = int(size_text, 16)
            except (ValueError, UnicodeDecodeError):
                raise _BadRequest(f"invalid chunk size {size_text[:50]!r}") from None
            if size == 0:
                for _ in range(_MAX_HEADERS + 1):  # trailer section, ignored
                    if not self._line():
                        return bytes(body)
                raise _BadRequest("too many trailer lines", 431)
            if len(body) + size > limit:
                raise _BadRequest(f"chunked body is over the {limit} byte limit", 413)
            body += self._exact(size)
            if self._exact(2) != b"\r\n":
                raise _BadRequest("chunk data not followed by CRLF")


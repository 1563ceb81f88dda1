"""`ProxyServer`: a small threaded HTTP/1.1 server on loopback that hands each request to a target.

The standard library's `socketserver.ThreadingTCPServer`, one thread per connection, with the
bounds the reference server enforces (pytest_laya_reference/settings.py): a cap on open connections
(beyond it a new connection is closed at once), a deadline for each request head (from when the
connection opened, or its previous response ended) and for each body, a cap on the head's size
and on the body's (``Content-Length`` or chunked), and keep-alive. Responses always carry a
``Content-Length``. A client that vanishes mid-request costs its thread, nothing more: errors on
a connection close it quietly. Memory is bounded by ``max_connections x (head + body)``.

The target (`ProxyServer.target`) is any callable from `IncomingRequest` to `Reply`; it can be
switched while the server runs (the plugin switches it per test).
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus

from pytest_laya.faults.loopback import check_loopback_host
from pytest_laya.wire.problems import PROBLEM_MEDIA_TYPE
from pytest_laya.wire.requests import MAX_BODY_BYTES

__all__ = ["SILENCE", "IncomingRequest", "ProxyLimits", "ProxyServer", "Reply", "problem_reply"]

@dataclass(frozen=True)
class ProxyLimits:
    """The bounds of one proxy; the defaults are the reference server's (body, head, timeouts)."""

    max_body_bytes: int = MAX_BODY_BYTES
    #: The request line and headers together (uvicorn's h11 default, which the reference server keeps).
    max_head_bytes: int = 16 * 1024
    max_headers: int = 100
    max_connections: int = 256
    head_timeout_s: float = 10.0
    body_timeout_s: float = 10.0
    keep_alive_timeout_s: float = 5.0
    #: How long a scripted timeout keeps a connection silent at most.
    silence_s: float = 300.0

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_head_bytes", "max_headers", "max_connections"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number of at least 1, not {value!r}")
        for name in ("head_timeout_s", "body_timeout_s", "keep_alive_timeout_s", "silence_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be more than 0 seconds, not {getattr(self, name)!r}")


@dataclass(frozen=True)
class IncomingRequest:
    """One request as the proxy read it: `target` is the path and query as sent."""

    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        values = [v for k, v in self.headers if k.lower() == name.lower()]
        return ", ".join(values) if values else None


@dataclass
class Reply:
    """What the proxy answers: status, headers (any ``Content-Length`` is replaced), body.

    Status 0 (`SILENCE`) answers nothing: the connection stays open and silent until the client
    gives up (a timeout the test scripted), or `ProxyLimits.silence_s` passes.
    """

    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    reason: str = ""


SILENCE = 0


def problem_reply(status: int, code: str, title: str, detail: str, headers: Sequence[tuple[str, str]] = ()) -> Reply:
    """A problem+json answer (RFC 9457) with the kit's own `code`."""
    document = {"type": f"/problems/{code}", "title": title, "status": status, "code": code, "detail": detail}
    body = json.dumps(document).encode()
    return Reply(status, [("Content-Type", PROBLEM_MEDIA_TYPE), *headers], body)


class _Refused(Exception):
    """A request the proxy answers itself and then closes the connection."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(reply.status)
        self.reply = reply


class _Gone(Exception):
    """The client closed, reset or went silent: close without a word."""


_REASONS = {status.value: status.phrase for status in HTTPStatus}

_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
                         "proxy-connection", "content-length"})


class _Reader:
    """Reads a socket into a buffer, every read against a deadline and a size cap."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()

    def _fill(self, deadline: float) -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            raise TimeoutError from None
        except OSError:
            raise _Gone from None
        if not data:
            raise _Gone
        self.buffer += data

    def until(self, marker: bytes, limit: int, deadline: float, too_long: Callable[[], Reply]) -> bytes:
        start = 0
        while True:
            index = self.buffer.find(marker, start)
            if index >= 0:
                if index > limit:
                    raise _Refused(too_long())
                data = bytes(self.buffer[:index])
                del self.buffer[:index + len(marker)]
                return data
            if len(self.buffer) > limit:
                raise _Refused(too_long())
            start = max(0, len(self.buffer) - len(marker) + 1)
            self._fill(deadline)

    def exact(self, size: int, deadline: float) -> bytes:
        while len(self.buffer) < size:
            self._fill(deadline)
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data


class _Handler(socketserver.BaseRequestHandler):
    server: ProxyServer

    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # an answer goes out whole, at once
        reader = _Reader(sock)
        limits = self.server.limits
        first = True
        try:
            while True:
                # A kept-alive connection has keep_alive_timeout_s to start its next request.
                if not first and not reader.buffer:
                    reader._fill(time.monotonic() + limits.keep_alive_timeout_s)
                first = False
                try:
                    request, keep_alive = self._read(reader, limits)
                except _Refused as refused:
                    self._write(sock, refused.reply, keep_alive=False)
                    return
                except TimeoutError:
                    return  # no (whole) head in time: close, as the reference server does
                reply = self.server.answer(request)
                if reply.status == SILENCE:
                    self._silence(sock, limits)
                    return
                self._write(sock, reply, keep_alive=keep_alive)
                if not keep_alive:
                    return
        except (_Gone, TimeoutError, OSError):
            return

    def _read(self, reader: _Reader, limits: ProxyLimits) -> tuple[IncomingRequest, bool]:
        def too_long() -> Reply:
            return problem_reply(431, "headers_too_large", "Request header fields too large",
                                 f"the request line and headers are over {limits.max_head_bytes} bytes")

        head = reader.until(b"\r\n\r\n", limits.max_head_bytes, time.monotonic() + limits.head_timeout_s, too_long)
        lines = head.decode("latin-1").split("\r\n")
        while lines and not lines[0]:  # stray CRLFs before a request are allowed (RFC 9112 2.2)
            lines.pop(0)
        parts = lines[0].split(" ") if lines else []
        if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[0].isalpha():
            raise _Refused(_bad("the request line is not HTTP/1.x"))
        method, target, version = parts
        headers: list[tuple[str, str]] = []
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon or not name or name != name.strip():
                raise _Refused(_bad(f"a header line is malformed: {line[:80]!r}"))
            headers.append((name, value.strip()))
        if len(headers) > limits.max_headers:
            raise _Refused(problem_reply(431, "headers_too_large", "Request header fields too large",
                                         f"more than {limits.max_headers} headers"))
        fields: dict[str, str] = {}
        for name, value in headers:
            key = name.lower()
            fields[key] = f"{fields[key]}, {value}" if key in fields else value
        connection = {token.strip().lower() for token in fields.get("connection", "").split(",")}
        keep_alive = "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
        if fields.get("expect", "").lower() == "100-continue":
            self.request.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = self._body(reader, fields, limits)
        kept = [(name, value) for name, value in headers if name.lower() not in _HOP_BY_HOP]
        return IncomingRequest(method.upper(), target, kept, body), keep_alive

    def _body(self, reader: _Reader, fields: dict[str, str], limits: ProxyLimits) -> bytes:
        deadline = time.monotonic() + limits.body_timeout_s
        def too_large() -> Reply:
            return problem_reply(413, "too_large", "Request body too large",
                                 f"the request body is over {limits.max_body_bytes} bytes")

        try:
            encoding = fields.get("transfer-encoding", "").lower()
            if encoding:
                if encoding != "chunked":
                    raise _Refused(_bad(f"Transfer-Encoding {encoding!r} is not supported (chunked is)", 501))
                return self._chunked(reader, limits, deadline, too_large)
            length_text = fields.get("content-length")
            if length_text is None:
                return b""
            if not length_text.isdigit():
                raise _Refused(_bad(f"Content-Length {length_text!r} is not a number"))
            length = int(length_text)
            if length > limits.max_body_bytes:
                raise _Refused(too_large())
            return reader.exact(length, deadline)
        except TimeoutError:
            raise _Refused(problem_reply(408, "body_timeout", "Request body timeout",
                                         f"the body did not arrive within {limits.body_timeout_s:g} s")) from None

    @staticmethod
    def _chunked(reader: _Reader, limits: ProxyLimits, deadline: float, too_large: Callable[[], Reply]) -> bytes:
        body = bytearray()

        def bad_size() -> Reply:
            return _bad("a chunk size line is malformed")

        while True:
            size_line = reader.until(b"\r\n", 1024, deadline, bad_size).split(b";", 1)[0].strip()
            try:
                size = int(size_line, 16)
            except ValueError:
                raise _Refused(bad_size()) from None
            if size < 0:
                raise _Refused(bad_size())
            if size == 0:
                while reader.until(b"\r\n", limits.max_head_bytes, deadline, bad_size):
                    pass  # trailers, ignored
                return bytes(body)
            if len(body) + size > limits.max_body_bytes:
                raise _Refused(too_large())
            body += reader.exact(size, deadline)
            if reader.exact(2, deadline) != b"\r\n":
                raise _Refused(_bad("a chunk does not end with CRLF"))

    @staticmethod
    def _silence(sock: socket.socket, limits: ProxyLimits) -> None:
        """Say nothing until the client closes (or `silence_s`); then close."""
        deadline = time.monotonic() + limits.silence_s
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(min(left, 1.0))
            try:
                if not sock.recv(65536):
                    return
            except TimeoutError:
                continue

    @staticmethod
    def _write(sock: socket.socket, reply: Reply, *, keep_alive: bool) -> None:
        reason = reply.reason or _REASONS.get(reply.status, "Unknown")
        lines = [f"HTTP/1.1 {reply.status} {reason}"]
        lines += [f"{name}: {value}" for name, value in reply.headers if name.lower() not in _HOP_BY_HOP]
        lines.append(f"Content-Length: {len(reply.body)}")
        if not keep_alive:
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")
        sock.settimeout(30.0)  # a client that stops reading its answer is dropped
        sock.sendall(head + reply.body if len(reply.body) < 65536 else head)
        if len(reply.body) >= 65536:
            sock.sendall(reply.body)


def _bad(detail: str, status: int = 400) -> Reply:
    return problem_reply(status, "malformed_request", "Malformed request", detail)


class ProxyServer(socketserver.ThreadingTCPServer):
    """The proxy's listening socket and connection threads; `target` answers each request.

    Listens on loopback (`host`; another address only when `loopback_only` is False, the
    standalone command's ``--host``). `start()` serves from a background thread; `stop()` closes
    the listener and every open connection.
    """

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024  # the listen backlog: a burst of clients waits, never reset
    block_on_close = False

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, limits: ProxyLimits | None = None,
                 target: Callable[[IncomingRequest], Reply] | None = None, loopback_only: bool = True) -> None:
        family: int = socket.AF_INET
        if loopback_only:
            host, family = check_loopback_host(host)
        elif ":" in host:
            family = socket.AF_INET6
        self.address_family = socket.AddressFamily(family)
        self.limits = limits or ProxyLimits()
        self.target: Callable[[IncomingRequest], Reply] = target or ProxyServer.no_target
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        super().__init__((host, port), _Handler)

    @staticmethod
    def no_target(request: IncomingRequest) -> Reply:
        """The answer while no test is routed through the proxy."""
        return problem_reply(503, "no_route", "No route",
                             "the proxy serves no test now (laya_proxy routes a test's requests while it runs)")

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else str(host)
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}"

    @property
    def open_connections(self) -> int:
        return len(self._open)

    def answer(self, request: IncomingRequest) -> Reply:
        try:
            return self.target(request)
        except Exception as exc:  # noqa: BLE001 - a target's bug is answered, never a dropped connection
            return problem_reply(500, "proxy_error", "Proxy error", f"{type(exc).__name__}: {exc}")

    # -- connections

    def verify_request(self, request: socket.socket | tuple[bytes, socket.socket],
                       client_address: object) -> bool:
        with self._open_lock:
            if len(self._open) >= self.limits.max_connections:
                return False  # closed at once (shutdown_request): the cap holds
            assert isinstance(request, socket.socket)
            self._open.add(request)
        return True

    def shutdown_request(self, request: socket.socket | tuple[bytes, socket.socket]) -> None:
        assert isinstance(request, socket.socket)
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: object, client_address: object) -> None:
        return None  # a connection's failure is the client's; the proxy goes on

    # -- running

    def start(self) -> ProxyServer:
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.2},
                                        name=f"laya-proxy {self.url}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        with self._open_lock:
            connections = list(self._open)
        for sock in connections:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ProxyServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

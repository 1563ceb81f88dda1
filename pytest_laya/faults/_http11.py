"""HTTP/1.1 on a raw socket for the scripted server: the parsed request, the connection, the reader.

Written here rather than borrowed from a framework because the faults must control every byte
(and every reset) on the wire. Bounded waits only, each ended early by the server's stop flag.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

try:  # Unix only: lets a reset wait until the bytes sent before it have left the kernel.
    import fcntl
    import termios

    _TIOCOUTQ: int | None = termios.TIOCOUTQ
except (ImportError, AttributeError):  # pragma: no cover - non-Unix platforms
    fcntl = None  # type: ignore[assignment]
    _TIOCOUTQ = None

_MAX_LINE = 64 * 1024
_MAX_HEADERS = 200
TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


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


def header_tokens(value: str) -> set[str]:
    return {t.strip().lower() for t in value.split(",") if t.strip()}


class ConnectionDone(Exception):
    """Internal: stop serving this connection (peer gone, timeout, server stopping)."""


class BadRequest(Exception):
    """Internal: the bytes on the wire are not a request this server can parse."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class RawConnection:
    """One accepted connection: what a script action does to it, every wait bounded.

    `stopping` is the server's stop flag (set: every wait ends with `ConnectionDone`), `lock`
    the server's lock over its connections' state, `send_timeout_s` the deadline of one send.
    Only its own thread closes the socket (others shut it down).
    """

    __slots__ = ("sock", "id", "busy", "closing", "thread", "stopping", "send_timeout_s", "_lock", "_closed")

    def __init__(self, sock: socket.socket, conn_id: int, *, stopping: threading.Event,
                 lock: threading.Condition, send_timeout_s: float) -> None:
        self.sock = sock
        self.id = conn_id
        self.busy = False  # a request is being read or answered
        self.closing = False  # close after the current request
        self.thread: threading.Thread | None = None
        self.stopping = stopping
        self.send_timeout_s = send_timeout_s
        self._lock = lock
        self._closed = False

    def send(self, data: bytes) -> None:
        """sendall with a polled stop flag and an overall deadline (`send_timeout_s`)."""
        view = memoryview(data)
        deadline = time.monotonic() + self.send_timeout_s
        while view:
            if self.stopping.is_set():
                raise ConnectionDone
            try:
                sent = self.sock.send(view)
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise ConnectionDone from None
                continue
            except OSError:
                raise ConnectionDone from None
            view = view[sent:]

    def pause(self, seconds: float) -> None:
        """Wait `seconds`; `ConnectionDone` at once when the server stops meanwhile."""
        if self.stopping.wait(seconds):
            raise ConnectionDone

    def mark_idle(self) -> None:
        """Count as idle from now on (under the server's lock): a Refuse shuts it down as idle."""
        with self._lock:
            self.busy = False

    def wait_flushed(self, timeout_s: float) -> None:
        """Wait (up to `timeout_s`) until the kernel send queue is empty, so a following RST loses no sent bytes."""
        if fcntl is None or _TIOCOUTQ is None:
            return
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                queued = struct.unpack("i", fcntl.ioctl(self.sock.fileno(), _TIOCOUTQ, b"\0\0\0\0"))[0]
            except OSError:
                return
            if queued <= 0:
                return
            time.sleep(0.002)

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
class ParsedRequest:
    request: ReceivedRequest
    keep_alive: bool


class RequestReader:
    """Buffered request parser over one connection's socket (bounded waits only)."""

    def __init__(self, conn: RawConnection, *, idle_timeout_s: float, request_timeout_s: float,
                 max_body_bytes: int) -> None:
        self._conn = conn
        self._idle_timeout_s = idle_timeout_s
        self._request_timeout_s = request_timeout_s
        self._max_body_bytes = max_body_bytes
        self._buf = bytearray()
        self._deadline = 0.0

    def _fill(self) -> bool:
        """Read more bytes into the buffer; False at end of stream."""
        while True:
            if self._conn.stopping.is_set():
                raise ConnectionDone
            try:
                data = self._conn.sock.recv(65536)
            except TimeoutError:
                if time.monotonic() > self._deadline:
                    raise ConnectionDone from None
                continue
            except OSError:
                raise ConnectionDone from None
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
                raise BadRequest("line too long", 431)
            if not self._fill():
                raise ConnectionDone  # peer went away mid-request

    def _exact(self, size: int) -> bytes:
        while len(self._buf) < size:
            if not self._fill():
                raise ConnectionDone
        data = bytes(self._buf[:size])
        del self._buf[:size]
        return data

    def read_request(self) -> ParsedRequest | None:
        """The next request, or None when the client closed an idle connection."""
        if not self._await_request():
            return None
        self._conn.busy = True
        self._deadline = time.monotonic() + self._request_timeout_s
        method, target, version = self._request_line()
        headers = self._header_section()
        connection = header_tokens(headers.get("connection", ""))
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
        return ParsedRequest(request=request, keep_alive=keep_alive)

    def _await_request(self) -> bool:
        """Wait (idle timeout) for a request's first byte; False when the client closed instead."""
        self._deadline = time.monotonic() + self._idle_timeout_s
        while True:
            # Tolerate stray CRLFs between requests (RFC 9112 section 2.2).
            while self._buf[:2] == b"\r\n":
                del self._buf[:2]
            while self._buf[:1] == b"\n":
                del self._buf[:1]
            if self._buf:
                return True
            try:
                if not self._fill():
                    return False
            except ConnectionDone:
                return False

    def _request_line(self) -> tuple[str, str, str]:
        """(method, target, version) of the request line."""
        request_line = self._line()
        parts = request_line.split(b" ")
        if len(parts) != 3:
            raise BadRequest(f"malformed request line {request_line[:200]!r}")
        raw_method, raw_target, raw_version = parts
        try:
            method = raw_method.decode("ascii")
            target = raw_target.decode("ascii")
            version = raw_version.decode("ascii")
        except UnicodeDecodeError:
            raise BadRequest("non-ASCII request line") from None
        if not method or not set(method) <= TOKEN_CHARS or not target:
            raise BadRequest(f"malformed request line {request_line[:200]!r}")
        if version not in ("HTTP/1.1", "HTTP/1.0"):
            raise BadRequest(f"unsupported HTTP version {version!r}", 505)
        return method, target, version

    def _header_section(self) -> dict[str, str]:
        """The headers, names lower-case, repeats joined by ``", "``."""
        headers: dict[str, str] = {}
        count = 0
        while True:
            line = self._line()
            if not line:
                return headers
            count += 1
            if count > _MAX_HEADERS:
                raise BadRequest("too many headers", 431)
            if line[:1] in (b" ", b"\t"):
                raise BadRequest("obsolete header line folding")
            name, sep, value = line.partition(b":")
            text_name = name.decode("latin-1")
            if not sep or not text_name or not set(text_name) <= TOKEN_CHARS:
                raise BadRequest(f"malformed header line {line[:200]!r}")
            key = text_name.lower()
            text_value = value.decode("latin-1").strip(" \t")
            headers[key] = f"{headers[key]}, {text_value}" if key in headers else text_value

    def _continue(self, headers: Mapping[str, str], version: str) -> None:
        if version == "HTTP/1.1" and "100-continue" in header_tokens(headers.get("expect", "")):
            self._conn.send(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _read_body(self, headers: Mapping[str, str], version: str) -> bytes:
        limit = self._max_body_bytes
        if "transfer-encoding" in headers:
            codings = [t.strip().lower() for t in headers["transfer-encoding"].split(",") if t.strip()]
            if not codings or codings[-1] != "chunked":
                raise BadRequest("request Transfer-Encoding must end with chunked", 501)
            if codings != ["chunked"]:
                raise BadRequest(f"unsupported Transfer-Encoding {headers['transfer-encoding']!r}", 501)
            self._continue(headers, version)
            return self._read_chunked(limit)
        if "content-length" in headers:
            values = {v.strip() for v in headers["content-length"].split(",")}
            if len(values) != 1 or not next(iter(values)).isdigit():
                raise BadRequest(f"invalid Content-Length {headers['content-length']!r}")
            size = int(next(iter(values)))
            if size > limit:
                raise BadRequest(f"body of {size} bytes is over the {limit} byte limit", 413)
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
                raise BadRequest(f"invalid chunk size {size_text[:50]!r}") from None
            if size == 0:
                for _ in range(_MAX_HEADERS + 1):  # trailer section, ignored
                    if not self._line():
                        return bytes(body)
                raise BadRequest("too many trailer lines", 431)
            if len(body) + size > limit:
                raise BadRequest(f"chunked body is over the {limit} byte limit", 413)
            body += self._exact(size)
            if self._exact(2) != b"\r\n":
                raise BadRequest("chunk data not followed by CRLF")

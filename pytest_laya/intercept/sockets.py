"""In-memory connections for http.client, urllib and urllib3 (so requests): one mechanism, two users.

While a claimer is registered, every new connection is offered to the claimers (host, port, and
whether it is https); the first that answers with a function gets an in-memory socket instead
of a TCP one: the client writes its request into it, and its first read hands the bytes written
to that function, whose bytes the client reads as the server's answer (it must say
``Connection: close``, so no pooled connection is ever reused). Every other connection, in
every thread, is left alone.

What is patched, as narrowly as vcrpy patches (and below it, so vcrpy on top still records and
replays): ``http.client.HTTPConnection.connect`` (the original class, even when vcrpy has
replaced the module's name with its stub), and ``urllib3.util.connection.create_connection``
(urllib3 2.x), when urllib3 is installed. The patches go in with the first claimer and come out
with the last, under one lock.

Users: the fake in process (`pytest_laya.fake.shim`) and the switchboard's own replay
(`intercept.native`).
"""

from __future__ import annotations

import http.client
import io
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["Answer", "Claimer", "InMemorySocket", "ParsedRequest", "add_claimer", "parse_request", "remove_claimer"]

#: Answers what a client wrote: (the bytes written) -> (the response's bytes, what followed the request).
Answer = Callable[[bytes], tuple[bytes, bytes]]
#: Asked about each new connection: (host, port, https) -> its answer, or None to leave it alone.
Claimer = Callable[[str, int, bool], "Answer | None"]

_lock = threading.RLock()
_claimers: list[Claimer] = []
_patches: list[tuple[Any, str, Any]] = []


class ParsedRequest(NamedTuple):
    method: str
    target: str
    headers: dict[str, str]  # lower-case names, repeated ones joined with ", "
    body: bytes
    http_version: str


def add_claimer(claimer: Claimer) -> None:
    with _lock:
        if not _claimers:
            _install()
        _claimers.append(claimer)


def remove_claimer(claimer: Claimer) -> None:
    with _lock:
        if claimer in _claimers:
            _claimers.remove(claimer)
            if not _claimers:
                _uninstall()


def _answer_for(host: str, port: int, https: bool) -> Answer | None:
    for claimer in list(_claimers):
        answer = claimer(host, port, https)
        if answer is not None:
            return answer
    return None


def _real_http_connection() -> type:
    cls = http.client.HTTPConnection
    while hasattr(cls, "_baseclass"):  # vcrpy's stubs keep the class they stand in for here
        cls = cls._baseclass
    return cls


def _install() -> None:
    base: Any = _real_http_connection()
    original_connect = base.connect

    def connect(self: http.client.HTTPConnection) -> None:
        answer = None if getattr(self, "_tunnel_host", None) else _answer_for(
            str(self.host).lower(), int(self.port), isinstance(self, http.client.HTTPSConnection))
        if answer is None:
            original_connect(self)
            return None
        self.sock = InMemorySocket(answer, str(self.host), int(self.port))
        return None

    _patches.append((base, "connect", base.__dict__.get("connect", original_connect)))
    base.connect = connect
    try:
        import urllib3.util.connection as urllib3_connection
    except ImportError:
        return
    original_create = urllib3_connection.create_connection

    def create_connection(address: tuple[str, int], *args: Any, **kwargs: Any) -> Any:
        host, port = address
        answer = _answer_for(str(host).strip("[]").lower(), int(port), False)
        if answer is None:
            return original_create(address, *args, **kwargs)
        return InMemorySocket(answer, str(host), int(port))

    _patches.append((urllib3_connection, "create_connection", original_create))
    urllib3_connection.create_connection = create_connection


def _uninstall() -> None:
    while _patches:
        owner, name, original = _patches.pop()
        setattr(owner, name, original)


class InMemorySocket:
    """What a client thinks is a connected TCP socket: it buffers the request and, when the client
    reads, answers it. One request per connection (the answer says close)."""

    def __init__(self, answer: Answer, host: str, port: int) -> None:
        self._answer = answer
        self._host = host
        self._port = port
        self._sent = bytearray()
        self._timeout: float | None = None
        self.closed = False

    def sendall(self, data: Any) -> None:
        self._check_open()
        self._sent += bytes(data)

    def send(self, data: Any) -> int:
        self.sendall(data)
        return len(data)

    def makefile(self, mode: str = "r", *args: Any, **kwargs: Any) -> io.BufferedReader:
        if "r" not in mode or "w" in mode:
            raise OSError(f"the in-process socket reads only, not mode {mode!r}")
        self._check_open()
        response, rest = self._answer(bytes(self._sent))
        self._sent = bytearray(rest)
        return io.BufferedReader(io.BytesIO(response))

    def settimeout(self, value: float | None) -> None:
        self._timeout = value

    def gettimeout(self) -> float | None:
        return self._timeout

    def setblocking(self, flag: bool) -> None:
        self._timeout = None if flag else 0.0

    def setsockopt(self, *args: Any) -> None:
        pass

    def getsockopt(self, *args: Any) -> int:
        return 0

    def getpeername(self) -> tuple[str, int]:
        return (self._host, self._port)

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", 0)

    def shutdown(self, how: int) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def _check_open(self) -> None:
        if self.closed:
            raise OSError("the in-process connection is closed")


def parse_request(data: bytes) -> tuple[ParsedRequest, bytes]:
    """One HTTP/1.1 request off the front of `data`: (the request, what follows it); ValueError if incomplete."""
    head, sep, rest = data.partition(b"\r\n\r\n")
    if not sep:
        raise ValueError("the request's headers were not complete when its response was read")
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, version = lines[0].split(" ")
    except ValueError:
        raise ValueError(f"bad request line {lines[0]!r}") from None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon:
            raise ValueError(f"bad header line {line!r}")
        name = name.strip().lower()
        value = value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body, rest = _dechunk(rest)
    else:
        length = int(headers.get("content-length", "0") or 0)
        if len(rest) < length:
            raise ValueError(f"the body was {len(rest)} of {length} bytes when the response was read")
        body, rest = rest[:length], rest[length:]
    return ParsedRequest(method, target, headers, body, version), rest


def _dechunk(data: bytes) -> tuple[bytes, bytes]:
    body = bytearray()
    while True:
        size_line, sep, data = data.partition(b"\r\n")
        if not sep:
            raise ValueError("a chunked body ended early")
        size = int(size_line.split(b";")[0].strip() or b"0", 16)
        if size == 0:
            _, _, data = data.partition(b"\r\n")  # no trailers expected
            return bytes(body), data
        body += data[:size]
        data = data[size + 2:]

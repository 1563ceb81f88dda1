"""The fake in process for http.client, urllib and urllib3 (so requests): `InProcessHost`.

While an `InProcessHost` is open, a connection to its host and port gets an in-memory socket
instead of a TCP one: the client writes its request into it, and reading the response hands the
request to the fake's one `exchange()` path and returns the bytes the loopback server would
have sent (``Connection: close``, so no pooled connection is ever reused). Every other
connection, in every thread, is left alone.

What is patched, as narrowly as vcrpy patches (and below it, so vcrpy on top still records
and replays): ``http.client.HTTPConnection.connect`` (http.client and urllib.request; the
original class, even when vcrpy has replaced the module's name with its stub), and
``urllib3.util.connection.create_connection`` (urllib3 2.x and requests), when urllib3 is
installed. The patches go in when the first host opens and come out when the last closes,
under one lock, so hosts may be opened from several threads and nested. Plain http only.
"""

from __future__ import annotations

import http.client
import io
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from pytest_laya.fake.flavours import Exchange
from pytest_laya.faults import ReceivedRequest, Respond

__all__ = ["InProcessHost", "served_hosts"]

#: A host's handler: (the parsed request, its full URL) -> (status, headers, body).
Route = Callable[[ReceivedRequest, str], Exchange]

_lock = threading.RLock()
_routes: dict[tuple[str, int], Route] = {}
_patches: list[tuple[Any, str, Any]] = []


def served_hosts() -> list[str]:
    """``host:port`` of every host served in process right now."""
    return [f"{host}:{port}" for host, port in _routes]


def _real_http_connection() -> type:
    cls = http.client.HTTPConnection
    while hasattr(cls, "_baseclass"):  # vcrpy's stubs keep the class they stand in for here
        cls = cls._baseclass
    return cls


def _install() -> None:
    base: Any = _real_http_connection()
    original_connect = base.connect

    def connect(self: http.client.HTTPConnection) -> None:
        route = None if getattr(self, "_tunnel_host", None) else _routes.get((str(self.host).lower(), int(self.port)))
        if route is None:
            original_connect(self)
            return None
        if isinstance(self, http.client.HTTPSConnection):
            raise ConnectionError(f"{self.host}:{self.port} is served in process by pytest-laya's fake, which "
                                  "speaks plain http://; use http:// for it")
        self.sock = _InMemorySocket(route, str(self.host), int(self.port))
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
        route = _routes.get((str(host).strip("[]").lower(), int(port)))
        if route is None:
            return original_create(address, *args, **kwargs)
        return _InMemorySocket(route, str(host), int(port))

    _patches.append((urllib3_connection, "create_connection", original_create))
    urllib3_connection.create_connection = create_connection


def _uninstall() -> None:
    while _patches:
        owner, name, original = _patches.pop()
        setattr(owner, name, original)


class InProcessHost:
    """Serve `url`'s host (``http://host[:port]``) in process with `route` while open.

    Use it as a context manager; `url` is the base URL to point clients at. Opening a host that
    is already served raises ValueError.
    """

    def __init__(self, url: str, route: Route) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"in-process serving takes a plain http:// URL with a host, e.g. http://laya.invalid, "
                             f"got {url!r}")
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            raise ValueError(f"in-process serving takes a base URL (scheme, host, port), got {url!r}")
        self.host = parts.hostname.lower()
        self.port = parts.port or 80
        netloc = f"[{self.host}]" if ":" in self.host else self.host
        self.url = f"http://{netloc}" + (f":{self.port}" if self.port != 80 else "")
        self._route = route
        self._open = False

    def __enter__(self) -> InProcessHost:
        key = (self.host, self.port)
        with _lock:
            if key in _routes:
                raise ValueError(f"{self.host}:{self.port} is already served in process; close that first")
            if not _routes:
                _install()
            _routes[key] = self._route
            self._open = True
        return self

    def __exit__(self, *exc_info: object) -> None:
        with _lock:
            if not self._open:
                return
            self._open = False
            _routes.pop((self.host, self.port), None)
            if not _routes:
                _uninstall()

    def __repr__(self) -> str:
        return f"<InProcessHost {self.url}{' open' if self._open else ''}>"


class _InMemorySocket:
    """What a client thinks is a connected TCP socket: it buffers the request and, when the client
    reads, answers it through the route. One request per connection (the answer says close)."""

    def __init__(self, route: Route, host: str, port: int) -> None:
        self._route = route
        self._host = host
        self._port = port
        self._sent = bytearray()
        self._timeout: float | None = None
        self.closed = False

    # -- what clients call

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
        return io.BufferedReader(io.BytesIO(self._answer()))

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

    # -- the exchange

    def _answer(self) -> bytes:
        try:
            request, rest = _parse(bytes(self._sent))
        except ValueError as exc:
            response = Respond(400, f"in-process fake: {exc}")
            return response.render_head(keep_alive=False) + response.payload
        self._sent = bytearray(rest)
        default_port = "" if self._port == 80 else f":{self._port}"
        host = f"[{self._host}]" if ":" in self._host else self._host
        status, headers, body = self._route(request, f"http://{host}{default_port}{request.path}")
        response = Respond(status, body, headers=headers)
        return response.render_head(keep_alive=False) + (b"" if request.method == "HEAD" else response.payload)


def _parse(data: bytes) -> tuple[ReceivedRequest, bytes]:
    """One HTTP/1.1 request off the front of `data`: (the request, what follows it)."""
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
    return ReceivedRequest(method=method, path=target, headers=headers, body=body, http_version=version), rest


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

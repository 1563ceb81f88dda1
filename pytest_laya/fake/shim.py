"""The fake in process for http.client, urllib and urllib3 (so requests): `InProcessHost`.

While an `InProcessHost` is open, a connection to its host and port gets an in-memory socket
instead of a TCP one (`pytest_laya.intercept.sockets`, which the switchboard's own replay uses
too): the client writes its request into it, and reading the response hands the request to the
fake's one `exchange()` path and returns the bytes the loopback server would have sent
(``Connection: close``, so no pooled connection is ever reused). Every other connection, in
every thread, is left alone. The patches (``http.client.HTTPConnection.connect`` and urllib3's
``create_connection``) go in when the first host opens and come out when the last closes, under
one lock, so hosts may be opened from several threads and nested. Plain http only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from urllib.parse import urlsplit

from pytest_laya.fake.flavours import FakeResponse
from pytest_laya.faults import ReceivedRequest, Respond
from pytest_laya.intercept import sockets

__all__ = ["InProcessHost", "served_hosts"]

#: A host's handler: (the parsed request, its full URL) -> (status, headers, body).
Route = Callable[[ReceivedRequest, str], FakeResponse]

_lock = threading.RLock()
_routes: dict[tuple[str, int], Route] = {}


def served_hosts() -> list[str]:
    """``host:port`` of every host served in process right now."""
    return [f"{host}:{port}" for host, port in _routes]


def _claim(host: str, port: int, https: bool) -> sockets.Answer | None:
    route = _routes.get((host, port))
    if route is None:
        return None
    if https:
        raise ConnectionError(f"{host}:{port} is served in process by pytest-laya's fake, which "
                              "speaks plain http://; use http:// for it")

    def answer(sent: bytes) -> tuple[bytes, bytes]:
        return _answer(route, host, port, sent)

    return answer


def _answer(route: Route, host: str, port: int, sent: bytes) -> tuple[bytes, bytes]:
    try:
        parsed, rest = sockets.parse_request(sent)
    except ValueError as exc:
        response = Respond(400, f"in-process fake: {exc}")
        return response.render_head(keep_alive=False) + response.payload, b""
    request = ReceivedRequest(method=parsed.method, path=parsed.target, headers=parsed.headers, body=parsed.body,
                              http_version=parsed.http_version)
    default_port = "" if port == 80 else f":{port}"
    shown = f"[{host}]" if ":" in host else host
    status, headers, body = route(request, f"http://{shown}{default_port}{request.path}")
    response = Respond(status, body, headers=headers)
    return response.render_head(keep_alive=False) + (b"" if request.method == "HEAD" else response.payload), rest


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
                sockets.add_claimer(_claim)
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
                sockets.remove_claimer(_claim)

    def __repr__(self) -> str:
        return f"<InProcessHost {self.url}{' open' if self._open else ''}>"

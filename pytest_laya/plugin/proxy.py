"""`laya_proxy`: the test's route behind a real loopback HTTP server, for services in other processes.

One `ProxyServer` per session (per xdist worker); each test that asks for `laya_proxy` switches
it to its own route (`TestRoute.laya`, the one `laya_server` opened) for the test's duration,
so a subprocess, a container or a Node service calling ``laya_proxy.url`` is replayed, recorded,
captured and checked exactly as an in-process client of the test is (`pytest_laya.proxy`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from pytest_laya.plugin.routes import TestRoute
    from pytest_laya.proxy import ProxyServer, Upstream
    from pytest_laya.route.modes import RouteKind
    from pytest_laya.servers.handle import ServerHandle
    from pytest_laya.wire.calls import Calls

__all__ = ["LayaProxy", "SessionProxy"]


@dataclass(frozen=True)
class LayaProxy:
    """What `laya_proxy` gives a test: the proxy's `url`, and the route behind it.

    `server` is the test's Laya server (`laya_server`); `kind` what the proxy does with a request
    (replay, record, capture, verify); `calls` every decision request the route saw, from any
    client, in-process or through the proxy; `api_key` the server's key (`laya_url_env` exports it).
    """

    url: str
    server: ServerHandle
    kind: RouteKind
    route: TestRoute = field(repr=False)

    def __repr__(self) -> str:
        return f"<LayaProxy {self.kind} {self.url} calls={len(self.calls)}>"

    @property
    def calls(self) -> Calls:
        assert self.route.laya is not None
        return self.route.laya.calls

    @property
    def api_key(self) -> Any:
        return self.server.api_key


class SessionProxy:
    """The session's proxy server and the upstream connection pools it forwards through."""

    def __init__(self) -> None:
        from pytest_laya.proxy import ProxyServer

        self.server: ProxyServer = ProxyServer().start()
        self._upstreams: dict[str, Upstream] = {}
        self._lock = threading.Lock()

    def upstream(self, url: str) -> Upstream:
        from pytest_laya.proxy import Upstream

        with self._lock:
            if url not in self._upstreams:
                self._upstreams[url] = Upstream(url)
            return self._upstreams[url]

    @contextlib.contextmanager
    def serving(self, route: TestRoute) -> Iterator[LayaProxy]:
        """Route the proxy's requests through `route` until the block ends."""
        from pytest_laya.proxy import RouteTarget

        assert route.laya is not None
        upstream = None if route.kind.replays else self.upstream(route.server.url)
        self.server.target = RouteTarget(route.laya, upstream=upstream, origin=route.server.url)
        try:
            yield LayaProxy(url=self.server.url, server=route.server, kind=route.kind, route=route)
        finally:
            from pytest_laya.proxy.http_server import ProxyServer

            self.server.target = ProxyServer.no_target

    def close(self) -> None:
        self.server.stop()
        for upstream in self._upstreams.values():
            upstream.close()

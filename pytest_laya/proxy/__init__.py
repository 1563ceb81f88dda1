"""Layer 4: a recording proxy, for services that call Laya from another process or language.

`ProxyServer` is a real loopback HTTP/1.1 server (the standard library's, with the reference
server's limits); `RouteTarget` hands each request it reads to a `LayaRoute` -- the test's own
route in the plugin's `laya_proxy`, so matching, scrubbing, the spec check, `calls` and the miss
messages are the in-process path's -- forwarding to an `Upstream` when the route records or
captures. `CassetteLibrary` is every cassette of a directory as one, for the standalone proxy
(``python -m pytest_laya proxy``). docs/proxy.md says when to use which.
"""

from __future__ import annotations

from pytest_laya.proxy.dispatch import RouteTarget, problem_code, vcr_request
from pytest_laya.proxy.http_server import IncomingRequest, ProxyLimits, ProxyServer, Reply, problem_reply
from pytest_laya.proxy.library import CassetteLibrary
from pytest_laya.proxy.upstream import Upstream, UpstreamError

__all__ = [
    "CassetteLibrary",
    "IncomingRequest",
    "ProxyLimits",
    "ProxyServer",
    "Reply",
    "RouteTarget",
    "Upstream",
    "UpstreamError",
    "problem_code",
    "problem_reply",
    "vcr_request",
]

"""`RouteTarget`: the proxy's requests handed to a `LayaRoute`, as vcrpy's patches hand the test's own.

Each request read off the socket becomes the vcrpy `Request` an in-process client's would
(method, URL, body, headers), and the route is asked what vcrpy's patches ask it: can it play
a response (replay: the cassette's match, or its miss raised), else the upstream answers and
the route appends the exchange (record: into the test's cassette; live, fake, verify: into its
capture). Matching, scrubbing, the spec check, `calls` and the miss messages are therefore the
route's own. An error the route raises (a miss, a spec violation) is kept on the route -- the
test fails -- and answered as a problem+json naming it. A timeout the test scripted on the fake
(`laya_server.timeout()`) is silence: the client times out as it would against a socket.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from pytest_laya.proxy.http_server import SILENCE, IncomingRequest, Reply, problem_reply
from pytest_laya.proxy.upstream import Upstream, UpstreamError

if TYPE_CHECKING:  # pragma: no cover
    from pytest_laya.intercept.laya_route import LayaRoute

__all__ = ["RouteTarget", "problem_code", "vcr_request"]

#: The status of a problem the proxy makes of the route's error (not 502/504: clients retry those).
ROUTE_ERROR_STATUS = 500


def problem_code(error: BaseException) -> str:
    """``CassetteMiss`` -> ``cassette_miss``, ``SpecViolationError`` -> ``spec_violation``."""
    name = type(error).__name__.removesuffix("Error")
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def vcr_request(method: str, url: str, headers: list[tuple[str, str]], body: bytes) -> Any:
    """The vcrpy `Request` vcrpy's httpx patch makes of the same request (repeated headers joined)."""
    from vcr.request import Request

    return Request(method, url, body, _joined(headers))


def native_request(method: str, url: str, headers: list[tuple[str, str]], body: bytes) -> Any:
    """The same request as the kit's `intercept.request.Request`, for the kit's own replay cassette."""
    from pytest_laya.intercept.request import Request

    return Request(method, url, body, _joined(headers))


def _joined(headers: list[tuple[str, str]]) -> dict[str, str]:
    joined: dict[str, str] = {}
    for name, value in headers:
        joined[name] = f"{joined[name]}, {value}" if name in joined else value
    return joined


def reply_of(response: dict[str, Any]) -> Reply:
    """A vcrpy response (recorded, played or forwarded) as the proxy's answer."""
    status = response.get("status") or {}
    headers = [(str(name), str(value)) for name, values in (response.get("headers") or {}).items()
               for value in (values if isinstance(values, (list, tuple)) else [values])]
    body = (response.get("body") or {}).get("string") or b""
    return Reply(int(status.get("code") or 500), headers, body if isinstance(body, bytes) else str(body).encode(),
                 reason=str(status.get("message") or ""))


class RouteTarget:
    """Answers a proxy's requests through `route`: played from it, or forwarded to `upstream` and
    appended to it. `origin` is the URL a replayed request is made to (no socket is opened)."""

    def __init__(self, route: LayaRoute, *, upstream: Upstream | None, origin: str) -> None:
        self.route = route
        self.upstream = upstream
        self.origin = origin.rstrip("/")

    def __call__(self, incoming: IncomingRequest) -> Reply:
        from pytest_laya.wire.urls import redact_url

        target = incoming.target if incoming.target.startswith("/") else f"/{incoming.target}"
        url = self.upstream.url_of(target) if self.upstream is not None else self.origin + target
        # The kit's own replay cassette takes the kit's request: replay then loads no vcrpy.
        native = getattr(getattr(self.route, "cassette", None), "laya_native", False)
        request = (native_request if native else vcr_request)(incoming.method, url, incoming.headers, incoming.body)
        try:
            if self.route.can_play_response_for(request):
                return reply_of(self.route.play_response(request))
            if self.upstream is None:
                return problem_reply(ROUTE_ERROR_STATUS, "no_upstream", "No upstream",
                                     "the route plays nothing for this request and the proxy has no upstream")
            try:
                response = self.upstream.forward(incoming.method, target, incoming.headers, incoming.body)
            except UpstreamError as exc:
                code, status = ("backend_timeout", 504) if exc.timeout else ("backend_unavailable", 502)
                return problem_reply(status, code, "Upstream unavailable" if status == 502 else "Upstream timeout",
                                     self.route.redact(f"{incoming.method} {redact_url(self.upstream.base_url)}: {exc}"))
            self.route.append(request, response)
            return reply_of(response)
        except Exception as exc:  # noqa: BLE001 - the route kept it (the test fails); the client is told
            if getattr(exc, "laya_fault", None) == "timeout":  # the test scripted it: the client waits in vain
                return Reply(SILENCE)
            return problem_reply(ROUTE_ERROR_STATUS, problem_code(exc), type(exc).__name__,
                                 self.route.redact(str(exc)))

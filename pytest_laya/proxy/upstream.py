"""`Upstream`: the server a recording or live proxy forwards to, over httpx's own transport (httpcore).

httpcore, not an `httpx.Client`: the plugin's switchboard patches httpx's transports for the
test, and the proxy's forwarding must reach the network, not the test's cassette. httpcore
never follows a redirect (a 3xx goes back to the client as it came, so the key never travels to
another host), never decodes a body (the client gets the bytes the server sent, gzip included),
and pools keep-alive connections for every proxy thread.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

__all__ = ["Upstream", "UpstreamError"]

#: Request headers that describe the client's connection to the proxy, not the request.
_NOT_FORWARDED = frozenset({"host", "connection", "keep-alive", "proxy-connection", "te", "trailer",
                            "transfer-encoding", "upgrade", "content-length", "proxy-authorization"})


class UpstreamError(Exception):
    """The upstream server could not be reached, or its answer not read, in time."""

    def __init__(self, message: str, *, timeout: bool = False) -> None:
        super().__init__(message)
        self.timeout = timeout


class Upstream:
    """Forwards requests to `base_url` (its path, if any, prefixes every request's)."""

    def __init__(self, base_url: str, *, timeout_s: float = 60.0, max_response_bytes: int | None = None,
                 max_connections: int = 64) -> None:
        import httpcore

        from pytest_laya.client.call import MAX_RESPONSE_BYTES

        split = urlsplit(base_url)
        if split.scheme not in ("http", "https") or not split.hostname:
            raise ValueError(f"the upstream must be an http(s) URL such as http://127.0.0.1:8000, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.host_header = split.netloc.rpartition("@")[2]
        self.timeout_s = timeout_s
        self.max_response_bytes = max_response_bytes or MAX_RESPONSE_BYTES
        self._pool = httpcore.ConnectionPool(max_connections=max_connections, retries=0)

    def url_of(self, target: str) -> str:
        return self.base_url + (target if target.startswith("/") else f"/{target}")

    def forward(self, method: str, target: str, headers: list[tuple[str, str]], body: bytes) -> dict[str, Any]:
        """Send one request; its answer as a vcrpy response (the shape vcrpy's httpx stub records)."""
        import httpcore

        sent = [(name, value) for name, value in headers if name.lower() not in _NOT_FORWARDED]
        sent = [("Host", self.host_header), *sent, ("Content-Length", str(len(body)))] if body or method in (
            "POST", "PUT", "PATCH") else [("Host", self.host_header), *sent]
        timeout = {"connect": min(self.timeout_s, 10.0), "read": self.timeout_s, "write": self.timeout_s,
                   "pool": self.timeout_s}
        try:
            with self._pool.stream(method, self.url_of(target), headers=sent, content=body,
                                   extensions={"timeout": timeout}) as response:
                content = bytearray()
                for chunk in response.stream:  # type: ignore[union-attr]  # a sync pool's stream
                    content += chunk
                    if len(content) > self.max_response_bytes:
                        raise UpstreamError(f"the upstream's answer is over {self.max_response_bytes} bytes")
                reason = response.extensions.get("reason_phrase", b"")
        except httpcore.TimeoutException as exc:
            raise UpstreamError(f"{type(exc).__name__} after {self.timeout_s:g} s", timeout=True) from None
        except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol) as exc:
            raise UpstreamError(f"{type(exc).__name__}: {exc}") from None
        recorded: dict[str, list[str]] = {}
        for name, value in response.headers:
            recorded.setdefault(name.decode("latin-1").lower(), []).append(value.decode("latin-1"))
        return {"status": {"code": response.status, "message": reason.decode("latin-1") if isinstance(reason, bytes)
                           else str(reason)},
                "headers": recorded, "body": {"string": bytes(content)}}

    def close(self) -> None:
        self._pool.close()

"""`UnmockedTransport`: an httpx transport that sends with http.client, past mock libraries.

respx patches httpcore and pytest-httpx patches httpx's transports, class-wide, for the whole
test. The kit's own reads of a server (its ``/health``, read as a test's route opens) must reach
the server and stay out of the test's mocks: one the mock answered (or refused) would be wrong,
and pytest-httpx fails the test for a request nobody registered. http.client is patched by
neither (vcrpy's patch of it is routed by the switchboard).
"""

from __future__ import annotations

import http.client
import ssl

import httpx

__all__ = ["UnmockedTransport"]


class UnmockedTransport(httpx.BaseTransport):
    """Each request on a fresh http.client connection, closed with the response (no pool, no proxy)."""

    def __init__(self, context: ssl.SSLContext | None = None) -> None:
        self.context = context

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        timeouts = request.extensions.get("timeout") or {}
        timeout = max((t for t in timeouts.values() if t is not None), default=None)
        url = request.url
        connection: http.client.HTTPConnection
        if url.scheme == "https":
            connection = http.client.HTTPSConnection(url.host, url.port, timeout=timeout, context=self.context)
        else:
            connection = http.client.HTTPConnection(url.host, url.port, timeout=timeout)
        try:
            connection.putrequest(request.method, url.raw_path.decode("ascii"), skip_host=True,
                                  skip_accept_encoding=True)
            for name, value in request.headers.raw:
                connection.putheader(name.decode("latin-1"), value.decode("latin-1"))
            connection.endheaders(request.read() or None)
            response = connection.getresponse()
            content = response.read()
        except TimeoutError as exc:
            raise httpx.ReadTimeout(str(exc), request=request) from exc
        except (OSError, http.client.HTTPException) as exc:
            raise httpx.ConnectError(str(exc), request=request) from exc
        finally:
            connection.close()
        return httpx.Response(response.status, headers=response.getheaders(), content=content, request=request,
                              extensions={"reason_phrase": response.reason.encode("latin-1")})

"""The fake in process for httpx: `FakeLayaTransport`, sync and async, no socket.

It is an ``httpx.MockTransport`` whose handler is `FakeLaya.exchange`, so a request gets exactly
what the loopback server would send (the same flavour code, the same bytes and headers but
``Connection``), and tools that patch httpx's own transports see it: vcrpy's httpx patch covers
``httpx.MockTransport.handle_request`` and ``handle_async_request``, which this class does not
override, so a cassette records and replays it like any other transport. Imported only by
`FakeLaya.transport()`, so the fake itself never loads httpx.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx

from pytest_laya.faults import ReceivedRequest, Respond

if TYPE_CHECKING:  # pragma: no cover
    from pytest_laya.fake.answers import FakeLaya

__all__ = ["FakeLayaTransport", "received"]


def received(request: httpx.Request) -> ReceivedRequest:
    """An httpx request as the loopback server would have parsed it (the body must be read)."""
    headers: dict[str, str] = {}
    for name, value in request.headers.multi_items():
        name = name.lower()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return ReceivedRequest(method=request.method, path=request.url.raw_path.decode("ascii"), headers=headers,
                           body=request.content)


class FakeLayaTransport(httpx.MockTransport):
    """Answers every request in process with `laya` (`FakeLaya.exchange`); recorded in `laya.calls`.

    ``httpx.Client(transport=fake.transport(), base_url="http://laya.invalid")``, or
    ``httpx.AsyncClient(transport=...)``: one object serves both. Any host is answered.
    """

    def __init__(self, laya: FakeLaya, *, api_key: str | None = None) -> None:
        super().__init__(self._answer)
        self.laya = laya
        self._api_key = api_key

    def _answer(self, request: httpx.Request) -> httpx.Response:
        status, headers, body = self.laya.exchange(received(request), api_key=self._api_key, url=str(request.url))
        response = Respond(status, body, headers=headers)
        return httpx.Response(status, headers=response.header_items(), content=response.payload)

    def __repr__(self) -> str:
        return f"<FakeLayaTransport {self.laya!r}>"

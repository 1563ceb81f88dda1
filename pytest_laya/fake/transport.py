"""The fake in process for httpx: `FakeLayaTransport`, sync and async, no socket.

It is an ``httpx.MockTransport`` whose handler is `FakeLaya.exchange`, so a request gets exactly
what the loopback server would send (the same flavour code, the same bytes and headers but
``Connection``), and tools that patch httpx's own transports see it: vcrpy's httpx patch covers
``httpx.MockTransport.handle_request`` and ``handle_async_request``, which this class does not
override, so a cassette records and replays it like any other transport. Imported only by
`FakeLaya.transport()`, so the fake itself never loads httpx.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

import httpx

from pytest_laya.fake.flavours import FakeResponse
from pytest_laya.faults import ReceivedRequest, Respond

__all__ = ["Exchanger", "FakeLayaTransport", "received"]


class Exchanger(Protocol):
    """What answers the transport's requests: `FakeLaya.exchange`, the fake's one path."""

    def exchange(self, request: ReceivedRequest, *, api_key: str | None = None, url: str | None = None,
                 fault: str | None = None) -> FakeResponse:
        ...


def received(request: httpx.Request) -> ReceivedRequest:
    """An httpx request as the loopback server would have parsed it (the body must be read):
    header names lower-case, repeats joined by ``", "`` (what ``httpx.Headers.items()`` gives)."""
    return ReceivedRequest(method=request.method, path=request.url.raw_path.decode("ascii"),
                           headers=dict(request.headers.items()), body=request.content)


def rendered(status: int, headers: dict[str, str], body: Any) -> tuple[list[tuple[str, str]], bytes]:
    """(header items, payload) as `Respond` renders the fake's own answers, without its checks of
    arbitrary headers: JSON for objects and lists, UTF-8 text for strings, and the fake's
    headers (it always sends a Content-Type). tests/fake/test_in_process.py holds the two equal."""
    if "Content-Type" not in headers:
        payload = None
    elif isinstance(body, (dict, list)):
        payload = json.dumps(body).encode("utf-8")
    elif isinstance(body, str):
        payload = body.encode("utf-8")
    else:
        payload = None
    if payload is None:
        response = Respond(status, body, headers=headers)
        return response.header_items(), response.payload
    items = [("Content-Type", headers["Content-Type"]), ("Content-Length", str(len(payload)))]
    items.extend((name, value) for name, value in headers.items() if name.lower() not in ("content-type", "connection"))
    return items, payload


class FakeLayaTransport(httpx.MockTransport):
    """Answers every request in process with `laya` (`FakeLaya.exchange`); recorded in `laya.calls`.

    ``httpx.Client(transport=fake.transport(), base_url="http://laya.invalid")``, or
    ``httpx.AsyncClient(transport=...)``: one object serves both. Any host is answered.
    """

    def __init__(self, laya: Exchanger, *, api_key: str | None = None) -> None:
        super().__init__(self._answer)
        self.laya = laya
        self._api_key = api_key

    def _answer(self, request: httpx.Request) -> httpx.Response:
        status, headers, body = self.laya.exchange(received(request), api_key=self._api_key, url=str(request.url))
        items, payload = rendered(status, headers, body)
        return httpx.Response(status, headers=items, content=payload)

    def __repr__(self) -> str:
        return f"<FakeLayaTransport {self.laya!r}>"

"""Which httpx transport is answering, and whether another mock library answers in memory.

The switchboard's httpx handlers (vcrpy's stubs, wrapped, and the kit's own, `native`) note the
transport whose handler runs and whether that handler is a mock library's; `answered_by_a_mock`
reads them when the switchboard decides where a request goes.
"""

from __future__ import annotations

import contextvars
import sys
from typing import Any

__all__ = ["answered_by_a_mock", "transport_running"]

#: The httpx transport whose handler is running (set around vcrpy's httpx stubs), and whether
#: that handler is a mock library's rather than httpx's own.
TRANSPORT: contextvars.ContextVar[Any] = contextvars.ContextVar("pytest_laya_transport", default=None)
MOCK_HANDLER: contextvars.ContextVar[bool] = contextvars.ContextVar("pytest_laya_mock_handler", default=False)
#: httpx transports that answer in memory, never from the network.
_IN_MEMORYTRANSPORTS = ("MockTransport", "ASGITransport", "WSGITransport")


def answered_by_a_mock() -> bool:
    """Whether the request being routed is answered in memory by another library: an httpx
    `MockTransport` (respx's and pytest-httpx's included) or ASGI/WSGI app, a mock library's
    handler in place of httpx's own (pytest-httpx), or httpcore under an active respx router."""
    transport = TRANSPORT.get()
    if transport is None:
        return False
    if MOCK_HANDLER.get():
        return True
    if any(cls.__name__ in _IN_MEMORYTRANSPORTS and cls.__module__.split(".")[0] in ("httpx", "httpx2")
           for cls in type(transport).__mro__):
        return True
    respx = sys.modules.get("respx.mocks")
    registry = getattr(getattr(respx, "Mocker", None), "registry", None) or {}
    return any(getattr(mocker, "routers", None) for mocker in registry.values())



class transport_running:  # noqa: N801 -- used as a function: `with transport_running(...)`
    """Note `transport` (and whether a mock library's handler answers for it) while its handler runs.

    A plain context manager, not a generator: every replayed request passes through one."""

    __slots__ = ("_mock_handler", "_tokens", "_transport")

    def __init__(self, transport: Any, mock_handler: bool) -> None:
        self._transport, self._mock_handler = transport, mock_handler

    def __enter__(self) -> None:
        self._tokens = TRANSPORT.set(self._transport), MOCK_HANDLER.set(self._mock_handler)

    def __exit__(self, *exc: object) -> None:
        MOCK_HANDLER.reset(self._tokens[1])
        TRANSPORT.reset(self._tokens[0])

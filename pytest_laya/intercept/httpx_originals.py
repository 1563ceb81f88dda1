"""httpx's own transport handlers in vcrpy's record of them, kept true.

vcrpy notes httpx's handlers once, when `vcr.patch` is first imported, and calls them for every
request a cassette lets through. The kit imports vcrpy lazily, so that import may come inside a
test whose pytest-httpx (or respx with ``using="httpx"``) has patched httpx's transports: vcrpy
would then keep that test's mock as httpx's own handler for the rest of the process, and every
later request vcrpy's patches send on (a recording, another host) would be answered by a mock
long gone. `note` keeps httpx's handlers as they are between tests; `restore` puts them back
in vcrpy's record wherever a mock library's stands there.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["note", "restore"]

#: vcrpy's names (in `vcr.patch`) for httpx's handlers: (class, attribute).
_VCRPY_NAMES = {
    "_HttpxHttpTransport_handle_request": ("HTTPTransport", "handle_request"),
    "_HttpxAsyncHttpTransport_handle_async_request": ("AsyncHTTPTransport", "handle_async_request"),
    "_HttpxWsgiTransport_handle_request": ("WSGITransport", "handle_request"),
    "_HttpxAsgiTransport_handle_async_request": ("ASGITransport", "handle_async_request"),
    "_HttpxMockTransport_handle_request": ("MockTransport", "handle_request"),
    "_HttpxMockTransport_handle_async_request": ("MockTransport", "handle_async_request"),
}
_own: dict[str, Any] = {}


def note() -> None:
    """Keep httpx's own handlers, once httpx is loaded (call it between tests, before any fixture
    patches them); then `restore`."""
    httpx = sys.modules.get("httpx")
    if httpx is not None and not _own:
        for name, (cls, attribute) in _VCRPY_NAMES.items():
            handler = getattr(getattr(httpx, cls, None), "__dict__", {}).get(attribute)
            if _library_of(handler) == "httpx":
                _own[name] = handler
    restore()


def restore() -> None:
    """Put httpx's own handlers back in `vcr.patch` where it holds a mock library's."""
    patch = sys.modules.get("vcr.patch")
    if patch is None:
        return
    for name, handler in _own.items():
        if hasattr(patch, name) and _library_of(getattr(patch, name)) not in ("httpx", "pytest_laya"):
            setattr(patch, name, handler)


def _library_of(handler: Any) -> str:
    return str(getattr(handler, "__module__", None) or "").split(".")[0]

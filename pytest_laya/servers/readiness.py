"""Waiting for a server to be ready: the one loop every fixture, benchmark and recorder uses."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["NotReady", "wait_ready"]

_POLL_S = 0.05


class NotReady(Exception):
    """The server did not become ready in time (or `alive` said it died)."""


def wait_ready(
    url: str,
    *,
    path: str = "/readyz",
    timeout_s: float = 120.0,
    alive: Callable[[], bool] | None = None,
    what: str = "the server",
) -> None:
    """Poll ``GET url+path`` until it answers 200; raise `NotReady` after `timeout_s`.

    `alive` is asked between polls (a subprocess that exited ends the wait at once). A refused
    or dropped connection counts as not ready yet. Proxies from the environment are ignored:
    the servers the kit starts are on loopback.
    """
    import httpx

    from pytest_laya.client.base import ssl_context

    deadline = time.monotonic() + timeout_s
    # The process's one TLS context: a new one reads the CA bundle again (~25 ms of CPU a wait).
    with httpx.Client(timeout=min(5.0, timeout_s), trust_env=False, verify=ssl_context()) as client:
        while True:
            if alive is not None and not alive():
                raise NotReady(f"{what} at {url} stopped before it was ready")
            try:
                if client.get(url + path).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() >= deadline:
                raise NotReady(f"{what} at {url} was not ready ({path} answering 200) within {timeout_s:g} s")
            time.sleep(_POLL_S)

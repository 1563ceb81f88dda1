"""Handles for the Laya servers a test talks to, and the processes the kit can start.

`ServerHandle` (what the plugin's `laya_server` yields), `LayaServeProcess` (laya's own
laya-serve on loopback), `wait_ready` (the one readiness loop) and `claimed_spec_of` (which
spec a server claims). The reference server is
not here: it needs real Laya, and only the plugin's `laya_reference_server` fixture imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytest_laya.servers.claimed_spec import ClaimedSpec, claimed_spec_of
from pytest_laya.servers.handle import REPLAY_URL, SERVER_KINDS, ServerHandle, ServerKind
from pytest_laya.servers.readiness import NotReady, wait_ready

if TYPE_CHECKING:  # pragma: no cover
    from pytest_laya.servers.laya_serve import LayaServeProcess

__all__ = ["REPLAY_URL", "SERVER_KINDS", "ClaimedSpec", "LayaServeProcess", "NotReady", "ServerHandle",
           "ServerKind", "claimed_spec_of", "wait_ready"]


def __getattr__(name: str) -> Any:
    # laya-serve's process handle brings the fault server's modules; a replay run needs neither.
    if name == "LayaServeProcess":
        from pytest_laya.servers.laya_serve import LayaServeProcess

        return LayaServeProcess
    raise AttributeError(f"module 'pytest_laya.servers' has no attribute {name!r}")

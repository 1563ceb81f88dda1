"""Layer 4: the interception layer. Every request of any client, routed by host while a test runs.

`Switchboard` is the one object vcrpy's HTTP patches talk to (patches built once, entered per
test); `LayaRoute` is a test's Laya server on it: its cassette or capture, and the observer that
sees every exchange, whichever library made it. Requests to other hosts go to another vcrpy
cassette (pytest-recording's), the network, or `NetworkBlocked`. In replay the kit's own
transports (`native`: httpx handlers, and `sockets`' in-memory connections for http.client and
urllib3) stand in for vcrpy's patches, installed once per process; `request.Request` is the
request they hand on, `mocks` says whether another mock library answers.
"""

from __future__ import annotations

from pytest_laya.intercept.laya_route import KINDS, LayaRoute, exchange_of
from pytest_laya.intercept.switchboard import NetworkBlocked, Switchboard, host_of

__all__ = ["KINDS", "LayaRoute", "NetworkBlocked", "Switchboard", "exchange_of", "host_of"]

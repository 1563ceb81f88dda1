"""Fault injection on a real loopback socket: a scripted HTTP/1.1 server and its actions.

The served client (retries, one deadline per decision, error mapping) has to be tested against
the failures a real deployment produces: resets before the status line, resets and short reads
mid-body, slow bodies, refused connections, bodies that are not JSON. A mock transport cannot
produce these, so they happen on a TCP socket bound to 127.0.0.1. A test builds a
`ScriptedServer` with a script of actions; each request consumes the next one, and the
``default`` answers once the script is empty (without one, a loud 500, so a short script fails
instead of hanging). Standard library only: no pytest, no httpx.
"""

from __future__ import annotations

from pytest_laya.faults._http11 import ReceivedRequest
from pytest_laya.faults.actions import (
    DEFAULT_GARBAGE,
    Action,
    DefaultAction,
    Delay,
    GarbageBody,
    Handler,
    Refuse,
    ResetBeforeHeaders,
    ResetMidBody,
    Respond,
    Trickle,
    Truncate,
)
from pytest_laya.faults.loopback import check_loopback_host, closed_loopback_url, free_loopback_port
from pytest_laya.faults.server import ScriptedServer

__all__ = [
    "DEFAULT_GARBAGE",
    "Action",
    "DefaultAction",
    "Delay",
    "GarbageBody",
    "Handler",
    "ReceivedRequest",
    "Refuse",
    "ResetBeforeHeaders",
    "ResetMidBody",
    "Respond",
    "ScriptedServer",
    "Trickle",
    "Truncate",
    "check_loopback_host",
    "closed_loopback_url",
    "free_loopback_port",
]

"""A fake Laya: useful, spec-valid decisions on a real loopback port, plus a fault script.

Downstream tests need a server that answers like a served Laya, so their happy path runs over a
real socket, and that can be told to fail in the ways deployments fail, so they can prove their
own error handling. Three rooms: `answers` (the answer function, `FakeLaya`), `flavours` (how
the target spec and laya-serve 0.4.15 validate, answer and refuse) and `server`
(`FakeLayaServer`, a `ScriptedServer` with the fake as its default handler; its fault methods
queue actions for the next requests), plus `pins` (answers a test forces), `transport` (the fake
in process for httpx) and `shim` (in process for http.client, urllib and requests).
docs/fake.md has the exact answer rules. Importing this never loads torch, laya, httpx or a web
framework.
"""

from __future__ import annotations

from pytest_laya.fake.answers import (
    IN_PROCESS_URL,
    TEMPERATURE,
    TOKENS_PER_QUESTION,
    FakeLaya,
    count_tokens,
    rank,
)
from pytest_laya.fake.flavours import (
    FLAVORS,
    LAYA_SERVE,
    LAYA_SERVE_MODEL_FIELD,
    LIMITS,
    TARGET,
)
from pytest_laya.fake.pins import PINNED_PROBABILITY, Pin, PinError
from pytest_laya.fake.server import FakeLayaServer, serve

__all__ = [
    "FLAVORS",
    "IN_PROCESS_URL",
    "LAYA_SERVE",
    "LAYA_SERVE_MODEL_FIELD",
    "LIMITS",
    "PINNED_PROBABILITY",
    "Pin",
    "PinError",
    "TARGET",
    "TEMPERATURE",
    "TOKENS_PER_QUESTION",
    "FakeLaya",
    "FakeLayaServer",
    "count_tokens",
    "rank",
    "serve",
]

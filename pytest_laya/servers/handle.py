"""Handles for the servers a test can be pointed at, whatever started them.

A `ServerHandle` is what the plugin's `laya_server` fixture yields: where the server is, what
kind it is, which spec it claims to implement, and its health and identity through the served
client. Live servers, the fake, the reference server and replayed cassettes all look the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pytest_laya.cassettes.scrub import RECORDED_ORIGIN
from pytest_laya.client import ServedLayaClient
from pytest_laya.wire.health import Health
from pytest_laya.wire.identity import ServedIdentity

__all__ = ["ServerHandle", "SERVER_KINDS", "REPLAY_URL"]

# What each kind of server claims to implement; responses are held to that spec.
SERVER_KINDS = {"live": "current", "replay": "current", "fake": "target", "reference": "target"}
# Cassettes match without scheme, host or port, so a replayed server needs no real address.
REPLAY_URL = RECORDED_ORIGIN


@dataclass(frozen=True)
class ServerHandle:
    """Where a test's Laya server is, what kind it is (`SERVER_KINDS`) and the spec it claims."""

    url: str
    kind: str
    spec: str = "current"
    api_key: str | None = field(default=None, repr=False)
    model: str | None = None
    #: For a replayed server: the server its cassette was recorded from, if it says.
    recorded_from: str | None = None
    #: How the summary and the report name it (default: its kind and URL).
    label: str | None = None

    def client(self, **kwargs: Any) -> ServedLayaClient:
        return ServedLayaClient(self.url, api_key=self.api_key, model=self.model, **kwargs)

    def health(self) -> Health:
        with self.client() as client:
            return client.health()

    def identity(self) -> ServedIdentity | None:
        with self.client() as client:
            return client.identity()

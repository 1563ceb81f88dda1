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
from pytest_laya.wire.spec_name import SpecName
from pytest_laya.wire.text_enum import TextEnum

__all__ = ["ServerHandle", "ServerKind", "SERVER_KINDS", "REPLAY_URL"]


class ServerKind(TextEnum):
    """What kind of server a `ServerHandle` is. A project may name its own (``staging``): any
    non-empty string is a kind, captured and checked like the fake, never recorded."""

    LIVE = "live"
    REPLAY = "replay"
    FAKE = "fake"
    REFERENCE = "reference"

    @classmethod
    def _missing_(cls, value: object) -> ServerKind | None:
        if not isinstance(value, str) or not value:
            return None
        member = str.__new__(cls, value)
        member._name_ = value.upper()
        member._value_ = value
        # One object per name, as for the members (`is` compares them).
        found: ServerKind = cls._value2member_map_.setdefault(value, member)  # type: ignore[assignment]
        return found

    @property
    def follows_mode(self) -> bool:
        """The run's mode applies to it as to ``--laya-url``: replayed, recorded or verified (else
        its traffic is captured and checked, never saved)."""
        return self in (ServerKind.LIVE, ServerKind.REPLAY)

    @property
    def replays(self) -> bool:
        """Its answers come from a cassette: no server is reached."""
        return self is ServerKind.REPLAY

    @property
    def is_live(self) -> bool:
        """A server of the project's (``--laya-url``), named in a recording by what it said of itself."""
        return self is ServerKind.LIVE

    @property
    def is_fake(self) -> bool:
        return self is ServerKind.FAKE

    @property
    def claims(self) -> SpecName:
        """The spec it implements, its responses held to it: the kit's own servers the target, any other the current."""
        return SpecName.TARGET if self in (ServerKind.FAKE, ServerKind.REFERENCE) else SpecName.CURRENT


#: What each kind of server claims to implement, by name (`ServerKind.claims`).
SERVER_KINDS = {kind.value: kind.claims.value for kind in ServerKind}
# Cassettes match without scheme, host or port, so a replayed server needs no real address.
REPLAY_URL = RECORDED_ORIGIN


@dataclass(frozen=True)
class ServerHandle:
    """Where a test's Laya server is, what kind it is (`ServerKind`, given as its string too) and
    the spec it claims."""

    url: str
    kind: ServerKind
    spec: str = "current"
    api_key: str | None = field(default=None, repr=False)
    model: str | None = None
    #: For a replayed server: the server its cassette was recorded from, if it says.
    recorded_from: str | None = None
    #: How the summary and the report name it (default: its kind and URL).
    label: str | None = None

    def __post_init__(self) -> None:
        try:
            kind = ServerKind(self.kind)
        except ValueError:
            raise ValueError(f"ServerHandle kind must be a non-empty string such as 'live', 'fake' or 'reference', "
                             f"got {self.kind!r}") from None
        object.__setattr__(self, "kind", kind)  # frozen

    def client(self, **kwargs: Any) -> ServedLayaClient:
        return ServedLayaClient(self.url, api_key=self.api_key, model=self.model, **kwargs)

    def health(self) -> Health:
        with self.client() as client:
            return client.health()

    def identity(self) -> ServedIdentity | None:
        with self.client() as client:
            return client.identity()

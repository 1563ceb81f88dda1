"""Where a recording came from: the server kind, the spec it claimed, which weights answered.

Only what the server says: nothing about the machine that recorded (no local versions), so
recording one server from two machines writes the same bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from pytest_laya.cassettes import CassetteHandle
    from pytest_laya.servers.handle import ServerHandle
    from pytest_laya.wire.exchange import Exchange
    from pytest_laya.wire.health import Health

__all__ = ["serving_now", "set_recorded_provenance"]


def serving_now(server: ServerHandle, health: Health | None, chosen: str | None) -> dict[str, Any]:
    """What is known, before any request, of the server a recording will name: the spec it is
    held to (`chosen`, the run's --laya-spec; else the spec its handle names; else what its
    `health` claims) and the weights its /health names. A field nothing says is left out."""
    from pytest_laya.wire.spec_name import SpecName

    known = SpecName.document(server.spec)
    spec = chosen or (known.value if known is not None else None) or (health.spec if health else None)
    identity = health.identity_for(getattr(server, "model", None)) if health is not None else None
    return {name: value for name, value in (("spec", spec), ("identity", identity)) if value is not None}


def set_recorded_provenance(handle: CassetteHandle, server: ServerHandle, health: Health | None,
                            claimed: str | None, exchanges: list[Exchange]) -> None:
    """Name in `handle`'s provenance the server that answered `exchanges`, the spec it was held
    to (`claimed`, else what its `health` says, else current) and the weights that answered."""
    from pytest_laya.cassettes.provenance import recorded_identity

    spec = claimed or (health.spec if health else None) or "current"
    try:
        identity = recorded_identity(handle, health, getattr(server, "model", None))
    except Exception:  # noqa: BLE001 - provenance never fails a test
        identity = None
    # A test (or a fixture of the project) may have named the server already (set_provenance).
    name = (handle.provenance or {}).get("server") or (
        _server_seen(server, identity, exchanges) if server.kind.is_live else server.kind.value)
    handle.set_provenance(server=name, spec=spec, identity=identity)


def _server_seen(server: ServerHandle, identity: Any, exchanges: list[Exchange]) -> str:
    """A live server as the recording saw it: the checkpoint that answered, else the ``Server``
    header it sent, else the URL it was recorded from (credentials and query left out)."""
    from pytest_laya.wire.urls import redact_url

    if identity is not None and getattr(identity, "checkpoint", None):
        return str(identity.checkpoint)
    for exchange in reversed(exchanges):
        name = exchange.headers.get("server")
        if name:
            return str(name)
    return redact_url(server.url)

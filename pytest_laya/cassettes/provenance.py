"""Where a recorded cassette came from: the identity of the weights that answered.

Best effort by design: provenance never fails a test.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["recorded_identity", "HEALTH_TIMEOUT_S"]

HEALTH_TIMEOUT_S = 5.0


def recorded_identity(handle: Any, health: Any, model: str | None) -> Any:
    """Which weights answered the recorded requests: a response's `served_by`, else what /health
    says of the routed model, else the routing's repo. None when nothing says."""
    from pytest_laya.wire.identity import ServedIdentity, parse_served_by

    repo = routed = None
    for response in reversed(list(getattr(handle.cassette, "responses", ()))):
        raw = ((response or {}).get("body") or {}).get("string")
        try:
            body = json.loads(raw) if raw else None
        except (TypeError, ValueError):
            continue
        if not isinstance(body, dict):
            continue
        try:
            served_by = parse_served_by(body.get("served_by"))
        except Exception:  # noqa: BLE001 - a malformed served_by: the test has already said so
            served_by = None
        if served_by is not None:
            return served_by
        routing = body.get("routing")
        if repo is None and isinstance(routing, Mapping) and isinstance(routing.get("repo"), str):
            repo, routed = routing["repo"], routing.get("model") if isinstance(routing.get("model"), str) else model
    if health is not None:
        identity = health.identity_for(routed or model, repo=repo)
        if identity is not None:
            return identity
    return ServedIdentity(checkpoint=repo, source="routing") if repo else None

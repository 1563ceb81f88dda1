"""Whether a cassette is still fresh: its age against a limit, its weights against a live server's.

A cassette's age is read from ``metadata.pytest_laya.recorded``, the day (UTC) its interactions
were recorded. A cassette without that field was not written by pytest-laya's recorder (or was
edited): its age cannot be shown, so it counts as stale, and re-recording it gives it a date.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Staleness", "age_finding", "identity_finding", "recorded_day", "today"]


def today() -> datetime.date:
    return datetime.datetime.now(datetime.timezone.utc).date()


def recorded_day(provenance: Mapping[str, Any] | None) -> datetime.date | None:
    """The day a cassette was recorded, from its provenance; None when it has no valid date."""
    value = (provenance or {}).get("recorded")
    if not isinstance(value, str):
        return None
    try:
        return datetime.date.fromisoformat(value[:10])
    except ValueError:
        return None


@dataclass(frozen=True)
class Staleness:
    """Why one cassette is stale: too old (`kind` ``age``) or from other weights (``identity``)."""

    kind: str
    reason: str
    recorded: str | None = None
    age_days: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "reason": self.reason, "recorded": self.recorded, "age_days": self.age_days}


def age_finding(provenance: Mapping[str, Any] | None, max_age_days: int, *,
                now: datetime.date | None = None) -> Staleness | None:
    """A `Staleness` when the cassette was recorded more than `max_age_days` days ago (or on no
    known day); None when it is fresh."""
    day = recorded_day(provenance)
    if day is None:
        return Staleness("age", "has no recording date (metadata.pytest_laya.recorded), so its age is unknown")
    age = ((now or today()) - day).days
    if age <= max_age_days:
        return None
    return Staleness("age", f"was recorded on {day.isoformat()}, {age} days ago, more than the {max_age_days} "
                            f"days --laya-max-age allows", recorded=day.isoformat(), age_days=age)


def _pair(identity: Any) -> tuple[str, str | None] | None:
    if isinstance(identity, Mapping):
        checkpoint, revision = identity.get("checkpoint"), identity.get("revision")
    else:
        checkpoint, revision = getattr(identity, "checkpoint", None), getattr(identity, "revision", None)
    if not isinstance(checkpoint, str) or not checkpoint:
        return None
    return checkpoint, revision if isinstance(revision, str) and revision else None


def identity_finding(provenance: Mapping[str, Any] | None, live: Iterable[Any], *,
                     server: str) -> Staleness | None | bool:
    """Whether the weights a cassette was recorded from are among those `server` serves now.

    `live` are the live server's identities (`ServedIdentity` or mappings). Returns a `Staleness`
    when the recorded checkpoint is not served, or is served at another revision; None when it
    matches; False when the cassette names no identity, so nothing can be compared.
    """
    recorded = _pair((provenance or {}).get("identity"))
    if recorded is None:
        return False
    served = [pair for pair in (_pair(identity) for identity in live) if pair is not None]
    checkpoint, revision = recorded
    same = [pair for pair in served if pair[0] == checkpoint]
    shown = ", ".join(f"{c}@{r or 'unknown'}" for c, r in served) or "no checkpoint it names"
    if not same:
        return Staleness("identity", f"was recorded from {checkpoint}@{revision or 'unknown'}, but {server} "
                                     f"serves {shown}", recorded=(provenance or {}).get("recorded"))
    if revision is not None and all(r is not None and r != revision for _, r in same):
        return Staleness("identity", f"was recorded from {checkpoint} at revision {revision}, but {server} "
                                     f"serves {shown}", recorded=(provenance or {}).get("recorded"))
    return None

"""Which of the kit's specs a server claims, and why: the one rule the suites and the plugin share.

A server declares the spec it implements in the `Laya-Spec` response header, or in its /health
document's ``"spec"`` field (the reference server and the fake's target flavour do both). The
header wins, because every response carries it; a server that declares nothing is held to the
current spec, which is what today's servers do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_laya.wire.headers import SPEC_HEADER, claimed_spec
from pytest_laya.wire.health import Health

__all__ = ["ClaimedSpec", "claimed_spec_of", "DEFAULT_SPEC"]

#: The spec of a server that declares none.
DEFAULT_SPEC = "current"


@dataclass(frozen=True)
class ClaimedSpec:
    """`name` (``current`` or ``target``) and `reason`, the words a summary shows."""

    name: str
    reason: str

    def of(self, server: str) -> str:
        """`reason` with `server` named in place of "it": ``the server's Laya-Spec header says target``."""
        if self.reason.startswith("its "):
            return f"{server}'s {self.reason[4:]}"
        if self.reason.startswith("it "):
            return f"{server} {self.reason[3:]}"
        return f"{server}: {self.reason}"


def claimed_spec_of(headers: Mapping[str, str] | None, health: Health | Mapping[str, Any] | None) -> ClaimedSpec:
    """The spec a server claims: `headers`' `Laya-Spec`, else `health`'s ``spec``, else current.

    `headers` are any response's headers; `health` is the /health document (parsed JSON or a
    `Health`), or None when there is none. A value other than ``current`` or ``target`` counts
    as no claim.
    """
    from_header = claimed_spec(headers)
    if from_header is not None:
        return ClaimedSpec(from_header, f"its {SPEC_HEADER} header says {from_header}")
    document = health if isinstance(health, Health) else Health(health) if isinstance(health, Mapping) else None
    if document is not None and document.spec is not None:
        return ClaimedSpec(document.spec, f'its /health says "spec": "{document.spec}"')
    return ClaimedSpec(DEFAULT_SPEC, f'it claims none, with no {SPEC_HEADER} header and no "spec" in /health')

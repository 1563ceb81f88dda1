"""One HTTP exchange as the kit sees it, whichever client made it and however it was answered."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Exchange"]


@dataclass(frozen=True, slots=True)  # slots: a replay keeps one per decision, without a dict each
class Exchange:
    """A response and the request it answered, for validators, recorders and summaries.

    `headers` are the response's (any case-insensitive mapping, e.g. `httpx.Headers`); `path`
    is the request target without scheme and host (the query included, if any).
    """

    method: str
    url: str
    path: str
    status: int
    headers: Mapping[str, str]
    body: bytes
    request_body: bytes | None
    elapsed_s: float

"""What can go wrong with a cassette, each error saying what to do.

None is an `httpx.TransportError`: the served client lets them through untouched instead of
retrying them or mapping them to a call error.

    CassetteError            unreadable or malformed file (names the file and the field)
     +-- CassetteMissing     replay asked for a file that does not exist
     +-- CassetteMiss        no recorded interaction matches the request
     +-- CassetteAlreadyPlayed  the matching interactions were already played
     +-- CassetteUnplayed    strict replay ended with interactions never asked for
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

__all__ = [
    "CassetteError",
    "CassetteMissing",
    "CassetteMiss",
    "CassetteAlreadyPlayed",
    "CassetteUnplayed",
    "Unplayed",
]


class CassetteError(Exception):
    """A cassette that cannot be used; the base of every cassette error.

    Raised as such for an unreadable file (bad YAML, a refused YAML tag, a truncated cassette,
    no ``interactions``); `path` is the file. Not an `httpx.TransportError`: the served client
    lets it through untouched instead of retrying it or mapping it to a call error.
    """

    def __init__(self, message: str, *, path: str | os.PathLike[str] | None = None) -> None:
        super().__init__(message)
        self.path = None if path is None else Path(path)


class CassetteMissing(CassetteError):
    """Replay asked for a cassette file that does not exist."""


class CassetteMiss(CassetteError):
    """No recorded interaction matches the request; `differences` says how the closest differs."""

    def __init__(self, message: str, *, path: str | os.PathLike[str] | None, request: str,
                 closest: int | None, differences: list[str]) -> None:
        super().__init__(message, path=path)
        self.request = request
        self.closest = closest
        self.differences = differences


class CassetteAlreadyPlayed(CassetteError):
    """The request matches only interactions that this test already played."""

    def __init__(self, message: str, *, path: str | os.PathLike[str] | None, request: str) -> None:
        super().__init__(message, path=path)
        self.request = request


class CassetteUnplayed(CassetteError):
    """Strict replay ended with recorded interactions the test never asked for."""

    def __init__(self, message: str, *, path: str | os.PathLike[str] | None, unplayed: list[Unplayed]) -> None:
        super().__init__(message, path=path)
        self.unplayed = unplayed


class Unplayed(NamedTuple):
    """A recorded interaction no request matched: method, path and a short body summary."""

    method: str
    path: str
    body: str

    def __str__(self) -> str:
        return f"{self.method} {self.path}" + (f" {self.body}" if self.body else "")


for _error in (CassetteError, CassetteMissing, CassetteMiss, CassetteAlreadyPlayed, CassetteUnplayed, Unplayed):
    _error.__module__ = "pytest_laya.cassettes"  # where users import them from, as tracebacks show it

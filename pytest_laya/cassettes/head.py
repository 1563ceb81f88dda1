"""A cassette's head: the file without its interactions (its ``version`` and ``metadata``).

It is what replay reads of the file itself (where it was recorded, under which spec); the
interactions replay plays come from the same derived entry, kept per configuration
(`cassettes.replay`), so a later run with the derived cache (`cassettes.derived`) parses nothing
and holds no parse of the whole file.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_laya.cassettes import derived
from pytest_laya.cassettes.disk import KeptByFile, read_limited
from pytest_laya.cassettes.persist import read_cassette, read_direct

__all__ = ["head_of", "read_head"]

#: `read_head`'s results.
_HEADS: KeptByFile[dict[str, Any]] = KeptByFile()


def head_of(data: Mapping[str, Any]) -> dict[str, Any]:
    """A parsed cassette's top level without its interactions (its values shared: read-only)."""
    return {key: value for key, value in data.items() if key != "interactions"}


def read_head(path: Path) -> dict[str, Any] | None:
    """The cassette at `path` without its interactions (`head_of`: its ``version`` and ``metadata``,
    what replay reads of the file itself), checked as `read_cassette` checks it; None if there is none.

    With the derived cache in use (`cassettes.derived`), an earlier run's head of these very bytes
    is read instead of parsing the file: replay then takes the interactions from its own entry and
    parses nothing. Shared with later reads of the unchanged file: read-only.
    """
    return _HEADS.read(path, lambda: _made_head(path))


def _made_head(path: Path) -> dict[str, Any] | None:
    """`read_head` of a file not kept: an earlier run's head of its bytes, else its direct read's
    (`persist.read_direct`), else its parse's."""
    if derived.directory() is not None:
        raw = read_limited(path)
        if raw is None:
            return None
        earlier: dict[str, Any] | None = derived.head(raw) if raw.strip() else None  # of these very bytes
        if earlier is not None:
            return earlier
    direct = read_direct(path)  # in the layout vcrpy writes: read straight, kept for replay to take
    if direct is not None:
        return direct.head
    data = read_cassette(path)  # parsed and checked (an empty file refused), kept by path
    if data is None:
        return None
    head = head_of(data)
    derived.note_head(data, head)
    return head

"""A cassette's head: the file without its interactions (its ``version`` and ``metadata``).

It is what replay reads of the file itself (where it was recorded, under which spec); the
interactions replay plays come from its own derived entry (`cassettes.replay`), so a later run
with the derived cache (`cassettes.derived`) parses nothing and holds no parse of the whole file.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_laya.cassettes import derived
from pytest_laya.cassettes.errors import CassetteError
from pytest_laya.cassettes.persist import file_identity, read_cassette, read_limited

__all__ = ["head_of", "read_head"]

#: `read_head`'s results, by path, with the file's identity when it was read (`persist.file_identity`).
_HEADS: collections.OrderedDict[str, tuple[tuple[int, int, int, int], dict[str, Any]]] = collections.OrderedDict()
_HEADS_MAX = 16
_LOCK = threading.Lock()


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
    identity = file_identity(path)
    if identity is None:
        return None
    key = str(path)
    with _LOCK:
        cached = _HEADS.get(key)
        if cached is not None and cached[0] == identity:
            _HEADS.move_to_end(key)
            return cached[1]
    head = None
    if derived.directory() is not None:
        raw = read_limited(path)
        if raw is None:
            return None
        head = derived.head(raw) if raw.strip() else None  # an earlier run's, of these very bytes
    if head is None:
        data = read_cassette(path)  # parsed and checked (an empty file refused), kept by path
        if data is None:
            return None
        head = head_of(data)
        derived.note_head(data, head)
    try:
        unchanged = file_identity(path) == identity
    except CassetteError:
        unchanged = False
    if unchanged:  # kept only if the file did not change while it was read
        with _LOCK:
            _HEADS[key] = (identity, head)
            _HEADS.move_to_end(key)
            while len(_HEADS) > _HEADS_MAX:
                _HEADS.popitem(last=False)
    return head

"""The play rules both replaying cassettes share (the kit's `replay.ReplayCassette` and vcrpy's in
`_vcr`): which recorded interaction a request plays next, and the errors, word for word, when
none can: no cassette, no match (with the closest recorded request and how it differs), or every
match played already."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from pytest_laya.cassettes.errors import CassetteAlreadyPlayed, CassetteMiss, CassetteMissing, Unplayed
from pytest_laya.cassettes.matching import SHOW_DIFFS, body_differences, body_summary, describe, request_body
from pytest_laya.wire.body import body_bytes

__all__ = ["Playable", "already_played_error", "check_playable", "miss_error", "next_to_play", "unplayed_of"]

Interaction = tuple[Any, dict[str, Any]]


class Playable(Protocol):
    """What the play rule reads of a replayed cassette (the kit's own, and the vcrpy one)."""

    @property
    def data(self) -> Any: ...

    @property
    def play_counts(self) -> Any: ...

    @property
    def rewound(self) -> bool: ...

    @property
    def record_hint(self) -> str: ...

    @property
    def _laya_path(self) -> Path: ...


def check_playable(cassette: Playable, filtered: Any, matches: list[int]) -> None:
    """Raise why `filtered` cannot be played: no cassette, no match, or every match played already."""
    if not cassette.rewound:
        raise CassetteMissing(
            f"no cassette for this test at {cassette._laya_path} (record it with {cassette.record_hint}); "
            f"the test asked for {describe(filtered)}", path=cassette._laya_path)
    next_to_play(cassette, filtered, matches)


def next_to_play(cassette: Playable, filtered: Any, matches: list[int]) -> int:
    """The first of `matches` not played yet, in recorded order; else the miss or already-played error."""
    index = next((i for i in matches if not cassette.play_counts[i]), None)
    if index is not None:
        return index
    # No match, or another thread played the last one between the check and the play.
    if not matches:
        raise miss_error(cassette.data, filtered, describe(filtered), cassette._laya_path, cassette.record_hint)
    raise already_played_error(describe(filtered), matches, len(cassette.data), cassette._laya_path,
                               cassette.record_hint)


def unplayed_of(data: Sequence[Interaction], play_counts: Any) -> list[Unplayed]:
    """The recorded interactions never played, as `Unplayed`."""
    return [Unplayed(r.method, urlsplit(r.uri).path or "/", body_summary(body_bytes(r.body)))
            for i, (r, _) in enumerate(data) if not play_counts[i]]


def already_played_error(described: str, matches: list[int], total: int, path: Path,
                         record_hint: str) -> CassetteAlreadyPlayed:
    which = ", ".join(str(i + 1) for i in matches)
    times = "once" if len(matches) == 1 else f"{len(matches)} times"
    return CassetteAlreadyPlayed(
        f"{described}: the matching interaction was already played (recorded {times}: interaction "
        f"{which} of {total} in {path}); record the test again with "
        f"{record_hint} if it makes this request twice", path=path, request=described)


def _differences(filtered: Any, stored: Any) -> list[str]:
    """Where `filtered` differs from `stored` in method, path and query (vcrpy's matchers)."""
    differs: list[str] = []
    if filtered.method != stored.method:
        differs.append(f"method (recorded {stored.method}, now {filtered.method})")
    if filtered.path != stored.path:
        differs.append(f"path (recorded {urlsplit(stored.uri).path}, now {urlsplit(filtered.uri).path})")
    if filtered.query != stored.query:
        differs.append(f"query (recorded {urlsplit(stored.uri).query!r}, now {urlsplit(filtered.uri).query!r})")
    return differs


def miss_error(data: Sequence[Interaction], filtered: Any, described: str, path: Path, record_hint: str) -> CassetteMiss:
    """The miss of `filtered` against `data`: the closest recorded request and how it differs."""
    if not data:
        return CassetteMiss(
            f"no recorded interaction matches {described}; the cassette {path} has no "
            f"interactions (the test made no request when it was recorded); record it again with "
            f"{record_hint}", path=path, request=described, closest=None, differences=[])
    now = request_body(filtered)
    best: tuple[Any, ...] | None = None
    for index, (stored, _) in enumerate(data):
        differs = _differences(filtered, stored)
        weight, body_diffs = body_differences(now, request_body(stored))
        key = (len(differs), weight, index)
        if best is None or key < best[0]:
            best = (key, index, stored, differs + body_diffs)
    assert best is not None
    _, index, stored, differences = best
    shown = differences[:SHOW_DIFFS]
    more = f"; and {len(differences) - SHOW_DIFFS} more" if len(differences) > SHOW_DIFFS else ""
    message = (
        f"no recorded interaction matches {described} in cassette {path}; closest recorded request: "
        f"{describe(stored)} (interaction {index + 1} of {len(data)}) differs in: "
        + "; ".join(shown) + more
        + f". If the request changed on purpose, record the test again with {record_hint}."
    )
    return CassetteMiss(message, path=path, request=described, closest=index, differences=differences)

"""`CassetteLibrary`: every cassette under a directory, replayed as one, for the standalone proxy.

A request from a service outside any test names no cassette, so it is matched against all of
them, by the cassettes' own rule (`cassettes.matching.match_key`: method, path, query, canonical
body), each file loaded and scrubbed as the plugin's replay loads one. The library is a
cassette as `LayaRoute` sees one (`can_play_response_for`, `play_response`, `laya_has_match`),
so the standalone proxy's route, spec check and miss messages are the plugin's. A request made
more often than it was recorded plays its recordings again, in order, from the first: a
long-running proxy serves any number of runs. A miss names the closest recorded request of all
the files.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pytest_laya.cassettes.errors import CassetteAlreadyPlayed, CassetteMiss
from pytest_laya.cassettes.matching import describe, match_key
from pytest_laya.cassettes.naming import CASSETTE_SUFFIX

__all__ = ["CassetteLibrary"]


class CassetteLibrary:
    """The cassettes under `directory` (``*.yaml``, recursively; or only `files`), as one replayed cassette."""

    def __init__(self, directory: str | Path, *, api_key: Any = None, config: Any = None,
                 files: Iterable[Path] | None = None) -> None:
        from pytest_laya.cassettes import laya_vcr

        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise FileNotFoundError(f"no cassette directory at {self.directory}: record into it first "
                                    f"(--mode record), or give the directory your tests' cassettes are in")
        vcr = laya_vcr(record=False, cassette_dir=None, api_key=api_key, strict=False, config=config,
                       record_hint="--mode record")
        chosen = sorted(self.directory.rglob(f"*{CASSETTE_SUFFIX}")) if files is None else list(files)
        self.handles = [vcr.open(path) for path in chosen]
        self._lock = threading.Lock()
        #: match key -> the cassettes holding an interaction with it, in file order.
        self._index: dict[tuple[Any, ...], list[Any]] = {}
        for handle in self.handles:
            for stored, _ in handle.cassette.data:
                owners = self._index.setdefault(match_key(stored), [])
                if handle.cassette not in owners:
                    owners.append(handle.cassette)

    @property
    def interactions(self) -> int:
        return sum(handle.interactions for handle in self.handles)

    def _owners(self, request: Any) -> list[Any]:
        if not self.handles:
            return []
        filtered = self.handles[0].cassette.filter_request(request)  # one scrub; every file has the same filters
        return self._index.get(match_key(filtered), []) if filtered else []

    # -- what LayaRoute asks of a cassette

    def laya_has_match(self, request: Any) -> bool:
        return bool(self._owners(request))

    def can_play_response_for(self, request: Any) -> bool:
        if self._owners(request):
            return True
        raise self._miss(request)

    def play_response(self, request: Any) -> Any:
        with self._lock:
            owners = self._owners(request)
            if not owners:
                raise self._miss(request)
            for cassette in owners:
                try:
                    return cassette.play_response(request)
                except CassetteAlreadyPlayed:
                    continue
            for cassette in owners:  # every recording played: start again from the first
                cassette.laya_rewind(request)
            return owners[0].play_response(request)

    def append(self, request: Any, response: Any) -> None:
        raise TypeError("a replaying proxy records nothing")

    def _miss(self, request: Any) -> CassetteMiss:
        misses: Iterable[CassetteMiss] = (self._miss_in(handle.cassette, request) for handle in self.handles
                                          if handle.interactions)
        best = min(misses, key=lambda miss: len(miss.differences), default=None)
        if best is not None:
            return best
        shown = describe(request)
        return CassetteMiss(f"no recorded interaction matches {shown}: {self.directory} holds no recorded "
                            f"interactions (record into it with --mode record)", path=self.directory,
                            request=shown, closest=None, differences=[])

    @staticmethod
    def _miss_in(cassette: Any, request: Any) -> CassetteMiss:
        try:
            cassette.can_play_response_for(request)
        except CassetteMiss as miss:
            return miss
        raise AssertionError("a cassette the index did not name matched")  # pragma: no cover

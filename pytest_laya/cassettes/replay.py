"""The kit's own replay cassette: a file parsed, scrubbed and indexed once, played without vcrpy.

`open_replay` gives a test's `CassetteHandle` over a `ReplayCassette`. The file's interactions go
through the same steps vcrpy's load takes with the kit's filters (request ids out of bodies, the
ignored hosts, the scrubber), then are indexed by `matching.match_key`; the result is cached by
the file's identity (path, inode, size, mtime, ctime) and the scrubbing configuration, so a file read
again costs a stat. Each test gets its own play counts over the shared, read-only interactions.

The cassette answers the switchboard's questions for any request with vcrpy's attributes (the
kit's `intercept.request.Request` or vcrpy's own), with the very rules and messages of the vcrpy
cassette in `_vcr` (`play_rules`, shared by both).
A configuration with hooks of the project's (``before_record_request``/``response``, a callable
replacement) is not cached and not served here: those hooks are handed vcrpy's objects.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_laya.cassettes import derived
from pytest_laya.cassettes.config import CassetteConfig
from pytest_laya.cassettes.errors import CassetteError, Unplayed
from pytest_laya.cassettes.handle import CassetteHandle
from pytest_laya.cassettes.head import head_of, read_head
from pytest_laya.cassettes.matching import match_key
from pytest_laya.cassettes.naming import CASSETTE_SUFFIX
from pytest_laya.cassettes.persist import Persister, forget_parse, interactions_of, read_cassette, take_direct
from pytest_laya.cassettes.play_rules import check_playable, next_to_play, unplayed_of
from pytest_laya.cassettes.request_ids import echo_ids, without_request_ids
from pytest_laya.cassettes.scrub import Scrubber
from pytest_laya.intercept.request import Request
from pytest_laya.wire.body import body_bytes, forget_view

__all__ = ["FilteredOnce", "ReplayCassette", "native_config", "open_replay"]

Interaction = tuple[Any, dict[str, Any]]


def native_config(config: CassetteConfig) -> bool:
    """Whether the kit's own replay serves `config`: no hook of the project's to hand vcrpy objects to."""
    if config.before_record_request is not None or config.before_record_response is not None:
        return False
    return not any(callable(replacement) for _, replacement in config.filters)


@dataclass(frozen=True)
class _Loaded:
    """One file's interactions, scrubbed and indexed (shared by every test that plays it: read-only)."""

    #: The file's head (`head.head_of`: its version and metadata), what a replay handle reads of the file itself.
    data: dict[str, Any]
    interactions: tuple[Interaction, ...]
    index: dict[tuple[Any, ...], list[int]]
    learned: tuple[str, ...]  # secrets the scrubber learned from the file (for error messages)
    #: `index`'s lists again, by each recorded request's exact body bytes (`exact_key`).
    exact: dict[tuple[Any, ...], list[int]]


def exact_key(request: Any) -> tuple[Any, ...]:
    """Method, path, query and the body's bytes as sent: requests equal in it are equal in
    `match_key` too (equal bytes have one canonical form), without parsing the body."""
    return (request.method, request.path or "/", tuple(request.query), body_bytes(request.body))


def _exact_index(interactions: Sequence[Interaction],
                 index: dict[tuple[Any, ...], list[int]]) -> dict[tuple[Any, ...], list[int]]:
    """Each recorded request's `exact_key`, with the very list of `index` it belongs to."""
    exact: dict[tuple[Any, ...], list[int]] = {}
    for places in index.values():
        for i in places:
            exact.setdefault(exact_key(interactions[i][0]), places)
    return exact


#: The files read last, by identity. Two: a file is read again mostly by its own test (a rerun,
#: another handle on it, the tests that share it), and every kept interaction is objects the
#: garbage collector walks (each file kept past its test, some 15 per interaction, at least twice).
_CACHE: collections.OrderedDict[tuple[Any, ...], _Loaded] = collections.OrderedDict()
_CACHE_MAX = 2
_CACHE_LOCK = threading.Lock()


def _filtered(request: Any, ignored: frozenset[str], scrubber: Scrubber, *, own: bool = False) -> Any:
    """vcrpy's filter of a request with the kit's filters: a copy (`own`: `request` itself, the
    caller's to change), None for an ignored host, scrubbed."""
    copied = request if own else request.copy() if isinstance(request, Request) else Request(
        request.method, request.uri, request.body, list(request.headers.items()))
    if ignored and copied.host in ignored:
        return None
    return scrubber.request(copied)


def _fresh(path: Path, data: dict[str, Any]) -> tuple[list[Any], list[dict[str, Any]]]:
    return interactions_of(path, data, Request)


def _load(head: dict[str, Any], requests: list[Any], responses: list[dict[str, Any]], api_key: str | None,
          config: CassetteConfig) -> _Loaded:
    """A file's fresh requests and responses (changed here) filtered, scrubbed and indexed; `head` its head."""
    scrubber = Scrubber(api_key, learn=True, config=config)
    known = set(scrubber._secrets)
    ignored = frozenset(config.ignore_hosts)
    interactions: list[Interaction] = []
    for request, response in zip(requests, responses):
        response = without_request_ids(response, request)
        filtered = _filtered(request, ignored, scrubber, own=True)  # fresh: read for this load alone
        if not filtered:
            continue
        response = scrubber.response(response)
        if response is None:  # pragma: no cover - only a project's hook drops one, and hooks are not served here
            continue
        interactions.append((filtered, response))
    index: dict[tuple[Any, ...], list[int]] = {}
    for i, (request, _) in enumerate(interactions):
        index.setdefault(match_key(request), []).append(i)
    exact = _exact_index(interactions, index)
    for request, _ in interactions:  # indexed: its body's view is asked again only by a miss's message
        forget_view(request)
    return _Loaded(head, tuple(interactions), index, tuple(sorted(scrubber._secrets - known)), exact)


def _derived(path: Path, head: dict[str, Any], api_key: str | None, config: CassetteConfig) -> _Loaded | None:
    """`_load`'s result, from an earlier run (`cassettes.derived`) when the file's bytes, the
    configuration and the kit are the same; else worked out from the file's parse, and kept when
    it may be. `head` is the file's head (`head.read_head`): a kept entry needs nothing more of
    the file, so a later run parses nothing; None if the file is gone.

    Kept only what the file holds already: never a file read with an API key (scrubbing it is
    the key's business) or one whose scrubbing learned a secret from it.
    """
    digest = derived.digest_of_parsed(head) if api_key is None else None
    extras = derived.extras()
    key = None
    if digest is not None and derived.noted(digest):  # else no run kept an entry of these bytes
        key = _variant_key(config, extras)
        entry = derived.variant(digest, key)
        kept = _from_plain(head, entry)
        if kept is not None:
            for extra in extras:  # each restores its own, or is worked out again when asked
                extra.restore(entry[2].get(extra.name))
            return kept
    # The direct read or the parse the head came from (kept by path), or the file as it is now.
    direct = take_direct(path)
    if direct is not None:
        source, loaded = direct.head, _load(direct.head, direct.requests, direct.responses, api_key, config)
    else:
        data = read_cassette(path)
        if data is None:
            return None
        source, loaded = data, _load(head_of(data), *_fresh(path, data), api_key, config)
    forget_parse(path)  # the file is read again only when it changes, or once `_CACHE` lets it go
    digest = derived.digest_of_parsed(source) if api_key is None else None
    if digest is not None and not loaded.learned:  # kept from the file's second run on; worked out only then
        derived.keep(loaded.data, digest, lambda: (key or _variant_key(config, extras), _plain(loaded, extras)))
    return loaded


def _variant_key(config: CassetteConfig, extras: tuple[derived.Extra, ...]) -> bytes:
    """What the interactions replay derives from a file depend on beyond its bytes: the scrubbing
    configuration, and each extra's own inputs (the specs' text, for their verdicts)."""
    digest = hashlib.sha256()
    for part in (repr(config).encode(), *(extra.name.encode() + b"\0" + extra.key() for extra in extras)):
        digest.update(len(part).to_bytes(8, "big") + part)
    return digest.digest()


def _plain(loaded: _Loaded, extras: tuple[derived.Extra, ...]) -> tuple[Any, ...]:
    """`loaded`'s interactions and index, and what `extras` derive from them, as built-in values."""
    interactions = tuple((request.method, request.uri, request.body, tuple(request.headers.items()), response)
                         for request, response in loaded.interactions)
    index = tuple((key, tuple(places)) for key, places in loaded.index.items())
    return interactions, index, {extra.name: extra.derive(loaded.data, loaded.interactions) for extra in extras}


def _from_plain(data: dict[str, Any], plain: Any) -> _Loaded | None:
    """The `_Loaded` that `_plain` gave `plain`, or None if `plain` is not one (a foreign entry)."""
    from pytest_laya.intercept.request import Headers, Request

    try:
        stored, index, extras = plain
        if not isinstance(extras, dict):
            return None
        interactions: list[Interaction] = []
        for method, uri, body, headers, response in stored:
            if not isinstance(response, dict):
                return None
            request = Request(method, uri, body, Headers(headers))
            interactions.append((request, response))
        places = {key: list(at) for key, at in index}
        if any(not 0 <= i < len(interactions) for at in places.values() for i in at):
            return None
    except (TypeError, ValueError, AttributeError):
        return None
    return _Loaded(data, tuple(interactions), places, (), _exact_index(interactions, places))


def _loaded(path: Path, api_key: str | None, config: CassetteConfig) -> _Loaded | None:
    """The file's interactions, from the cache while the file is unchanged; None if there is no file."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError:
        info = None  # read_cassette says what is wrong
    # ctime too, as persist's parse cache: an edit in place that keeps the size and puts the old
    # mtime back (``cp -p``, a restore) changes only it.
    key = None if info is None else (str(path), info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns,
                                     api_key, config)
    if key is not None:
        with _CACHE_LOCK:
            cached = _CACHE.get(key)
            if cached is not None:
                _CACHE.move_to_end(key)
                return cached
    head = read_head(path)
    loaded = None if head is None else _derived(path, head, api_key, config)
    if loaded is None:
        return None
    if key is not None:
        with _CACHE_LOCK:
            _CACHE[key] = loaded
            while len(_CACHE) > _CACHE_MAX:
                _CACHE.popitem(last=False)
    return loaded


def open_replay(path: str | os.PathLike[str], *, api_key: str | None, strict: bool, record_hint: str,
                config: CassetteConfig | None = None) -> CassetteHandle:
    """One test's cassette for replay (``.yaml`` added if missing), played by the kit, no vcrpy.

    `config` must be one `native_config` accepts (the plugin opens others with `_vcr`).
    """
    config = config or CassetteConfig()
    full = Path(path if str(path).endswith(CASSETTE_SUFFIX) else f"{os.fspath(path)}{CASSETTE_SUFFIX}")
    scrubber = Scrubber(api_key, learn=True, config=config)
    try:
        hash(config)
    except TypeError:  # a replacement that cannot be a key: load it afresh
        data = read_cassette(full)
        loaded = None if data is None else _load(head_of(data), *_fresh(full, data), api_key, config)
    else:
        loaded = _loaded(full, api_key, config)
    persister = Persister(record=False, deferred=True)
    if loaded is not None:
        persister.loaded = loaded.data
        for secret in loaded.learned:
            scrubber.keep_secret(secret)
    cassette = ReplayCassette(full, loaded, scrubber, frozenset(config.ignore_hosts), record_hint)
    return CassetteHandle(path=full, record=False, strict=strict, cassette=cassette, persister=persister,
                          provenance=None, api_key=api_key, scrubber=scrubber)


class FilteredOnce:
    """A request filtered (copied and scrubbed) once: the switchboard, like vcrpy, asks whether a
    request can be played and then plays the same request object."""

    def __init__(self, filter_request: Callable[[Any], Any]) -> None:
        self._filter = filter_request
        self._last: tuple[Any, Any] | None = None

    def __call__(self, request: Any) -> Any:
        last = self._last
        if last is not None and last[0] is request:
            return last[1]
        filtered = self._filter(request)
        self._last = (request, filtered)
        return filtered

    def taken(self, request: Any) -> Any:
        """The filtered request, then forgotten: once it is played, asking again filters anew."""
        filtered = self(request)
        self._last = None
        return filtered


class ReplayCassette:
    """A test's replay of one cassette file: the shared interactions, this test's play counts."""

    #: Read by the switchboard: requests to this cassette's route may be answered by the kit's own transports.
    laya_native = True
    record_mode = "none"

    def __init__(self, path: Path, loaded: _Loaded | None, scrubber: Scrubber, ignored: frozenset[str],
                 record_hint: str) -> None:
        self._laya_path = path
        self._path = str(path)
        self._loaded = loaded
        self._scrubber = scrubber
        self._ignored = ignored
        self.record_hint = record_hint
        self.rewound = loaded is not None
        self.data: Sequence[Interaction] = loaded.interactions if loaded is not None else ()
        self._index = loaded.index if loaded is not None else {}
        config = scrubber.config
        # Requests found by their bytes (`_exact`) when filtering could change nothing matching reads.
        self._exact = loaded.exact if loaded is not None and not config.filters else {}
        self._exact_last: tuple[Any, list[int] | None] | None = None
        self.play_counts = [0] * len(self.data)
        self._lock = threading.RLock()
        # The filter's own arguments, not a bound method: the cassette would hold itself in a cycle,
        # left for the garbage collector rather than freed with the test.
        self._filtered = FilteredOnce(functools.partial(_filtered, ignored=ignored, scrubber=scrubber))

    def __len__(self) -> int:
        return len(self.data)

    def filter_request(self, request: Any) -> Any:
        return _filtered(request, self._ignored, self._scrubber)

    def _matches(self, filtered: Any) -> list[int]:
        return self._index.get(match_key(filtered), [])

    def _exact_matches(self, request: Any) -> list[int] | None:
        """`request`'s matches found by its exact bytes, without filtering it; None when they are
        not found so (the full way then decides, and words any error).

        Filtering a request changes what matching reads only through a secret (the API key, one
        learnt from the file or from a credential it carries) or the project's filters, and never
        for a request to an ignored host it drops: none of them here, the recorded request whose
        bytes it sends is one `_matches` finds too."""
        last = self._exact_last
        if last is not None and last[0] is request:
            return last[1]
        found = None
        if self._exact and not self._scrubber._secrets and "authorization" not in request.headers \
                and (not self._ignored or request.host not in self._ignored):
            found = self._exact.get(exact_key(request))
        self._exact_last = (request, found)
        return found

    def _playable(self, request: Any) -> int | None:
        """The first unplayed match `_exact_matches` finds, or None."""
        for i in self._exact_matches(request) or ():
            if not self.play_counts[i]:
                return i
        return None

    def laya_has_match(self, request: Any) -> bool:
        """Whether any recorded interaction matches `request` (played or not)."""
        with self._lock:
            if self.rewound and self._exact_matches(request):
                return True
            return bool(self.rewound and self._matches(self._filtered(request)))

    def can_play_response_for(self, request: Any) -> bool:
        with self._lock:
            if self._playable(request) is not None:
                return True
            filtered = self._filtered(request)
            check_playable(self, filtered, self._matches(filtered))
            return True

    def play_response(self, request: Any) -> Any:
        """The recorded response `request` plays next, its own ids echoed; or the miss or
        already-played error."""
        taken = self.laya_take(request)
        if taken is not None:
            return taken
        with self._lock:
            filtered = self._filtered.taken(request)
            index = next_to_play(self, filtered, self._matches(filtered))
            self.play_counts[index] += 1
        return self._played(index, request)

    def laya_take(self, request: Any) -> Any:
        """`play_response` when `request`'s exact bytes were recorded and are unplayed (one lookup,
        one lock); else None, nothing played (`can_play_response_for` then words the error)."""
        with self._lock:
            index = self._playable(request)
            self._exact_last = None
            if index is None:
                return None
            self.play_counts[index] += 1
        return self._played(index, request)

    def _played(self, index: int, request: Any) -> Any:
        return echo_ids(self.data[index][1], request)

    def laya_rewind(self, request: Any) -> None:
        """Make the interactions `request` matches playable again."""
        with self._lock:
            for index in self._matches(self._filtered(request)):
                self.play_counts[index] = 0

    def append(self, request: Any, response: Any) -> None:
        raise CassetteError(f"a replayed cassette records nothing ({self._laya_path})", path=self._laya_path)

    def laya_unplayed(self) -> list[Unplayed]:
        with self._lock:
            return unplayed_of(self.data, self.play_counts)

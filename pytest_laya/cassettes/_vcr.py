"""The vcrpy glue, built on first use so that importing the kit loads no vcrpy.

What differs from a plain `vcr.VCR`, and why (docs/cassettes.md): one authority for the mode
(`record=False` is vcrpy's ``none``: nothing sent, nothing written; `record=True` is ``all``
with the old cassette not loaded, so a refreshed cassette holds exactly what this run
recorded; `RecordMode.NEW_EPISODES` is ``new_episodes``: the old interactions are played, only
requests they lack are sent, and those are appended to the file as it was); matching by
`matching.match_key` as a dict lookup; scrubbing on the way in (`scrub`); the client's request
id echoed on replay; misses raised from inside the transport as the `errors` types; saving decided by the `CassetteHandle`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import vcr

from pytest_laya.cassettes.config import CassetteConfig
from pytest_laya.cassettes.errors import Unplayed
from pytest_laya.cassettes.handle import CassetteHandle, open_cassette, open_session
from pytest_laya.cassettes.matching import MATCH_ON, laya_body_matcher, match_key
from pytest_laya.cassettes.naming import CASSETTE_SUFFIX
from pytest_laya.cassettes.persist import Persister, interactions_of
from pytest_laya.cassettes.play_rules import check_playable, next_to_play, unplayed_of
from pytest_laya.cassettes.replay import FilteredOnce
from pytest_laya.cassettes.request_ids import echo_ids, without_request_ids
from pytest_laya.cassettes.scrub import Scrubber
from pytest_laya.intercept.switchboard import vcr_response_fixes
from pytest_laya.route.modes import RecordMode
from pytest_laya.wire.body import body_of

__all__ = [
    "RECORD_HINT",
    "laya_vcr",
    "use_cassette",
]


#: What a miss tells the user to run; the plugin may pass its own wording to `laya_vcr`.
RECORD_HINT = "--laya-mode=record"


class _LayaCassette:
    """What a vcrpy cassette does differently here: replay raises pytest-laya's misses and echoes X-Request-Id
    (mixed into vcrpy's ``Cassette`` by `_classes`, so that importing this module loads no vcrpy)."""

    record_hint = RECORD_HINT
    # vcrpy's Cassette's, which this is mixed into (annotations only: nothing shadowed).
    record_mode: Any
    rewound: bool
    dirty: bool
    data: list[tuple[Any, Any]]
    play_counts: Any
    _path: str
    _persister: Any
    _after_load_interaction: Any
    _before_record_request: Any
    _before_record_response: Any
    _old_interactions: list[tuple[Any, Any]]
    _played_interactions: list[tuple[Any, Any]]
    _loaded_count: int
    _metadata: dict[str, Any]
    filter_request: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._laya_lock = threading.RLock()
        # Match key -> indices of the interactions with that key, in recorded order; built on
        # the first lookup, so replay is a dict lookup whatever the cassette's length.
        self._laya_index: dict[tuple[Any, ...], list[int]] = {}
        self._laya_indexed = 0
        self._laya_filtered = FilteredOnce(self.filter_request)

    def _replaying(self) -> bool:
        return bool(self.record_mode == "none")  # vcrpy's RecordMode is a str enum

    def _appending(self) -> bool:
        return bool(self.record_mode == RecordMode.NEW_EPISODES.vcr_record_mode)

    def _recording_whole(self) -> bool:
        return bool(self.record_mode == RecordMode.ALL.vcr_record_mode)

    def _load(self) -> None:
        """Replay (and appending): vcrpy's load, minus its deep copies of objects nobody else holds.

        Each recorded interaction becomes fresh vcrpy objects (`fresh_interactions`), goes
        through `append`'s filters (request ids, ignored hosts, the scrubber) exactly as
        vcrpy's ``_load`` would send it, and is kept; the parsed file is shared with the
        cache, never changed. Recording (or a load hook) takes vcrpy's own path.
        """
        persister = self._persister
        if not (self._replaying() or self._appending()) or self._after_load_interaction or \
                not isinstance(persister, Persister):
            super()._load()  # type: ignore[misc]
            self._loaded_count = len(self.data)
            return None
        path = Path(self._path)
        data = persister.read(path)
        if data is None:
            return None
        requests, responses = interactions_of(path, data)
        with self._laya_lock:
            for request, response in zip(requests, responses):
                self._laya_keep(request, response)
        self._loaded_count = len(self.data)
        self.dirty = False
        self.rewound = True
        metadata = data.get("metadata")
        self._metadata = dict(metadata) if isinstance(metadata, dict) else {}
        return None

    def _laya_keep(self, request: Any, response: Any) -> None:
        """One loaded interaction through `append`'s filters, kept unless a filter drops it."""
        response = without_request_ids(response, request)
        filtered = self._before_record_request(request)
        if not filtered:
            return
        response = self._before_record_response(response)  # fresh: no copy needed
        if response is None:
            return
        self.data.append((filtered, response))
        self._old_interactions.append((filtered, response))

    @property
    def _laya_path(self) -> Path:
        return Path(getattr(self, "_path", ""))

    def _laya_matches(self, filtered: Any) -> list[int]:
        """Indices of the interactions `filtered` matches: the rules of `MATCH_ON`, as a lookup."""
        data = self.data
        if self._laya_indexed != len(data):
            if self._laya_indexed > len(data):  # pragma: no cover - vcrpy never shrinks data
                self._laya_index, self._laya_indexed = {}, 0
            for i in range(self._laya_indexed, len(data)):
                self._laya_index.setdefault(match_key(data[i][0]), []).append(i)
            self._laya_indexed = len(data)
        return self._laya_index.get(match_key(filtered), [])

    def laya_has_match(self, request: Any) -> bool:
        """Whether any recorded interaction matches `request` (played or not)."""
        with self._laya_lock:
            return bool(self.rewound and self._laya_matches(self._laya_filtered(request)))

    def _laya_recorded_matches(self, filtered: Any) -> list[int]:
        """The loaded interactions `filtered` matches: appending, what this run recorded is never
        played (a request made twice is sent twice, so the file holds both and replays)."""
        loaded = getattr(self, "_loaded_count", len(self.data))
        return [i for i in self._laya_matches(filtered) if i < loaded]

    def can_play_response_for(self, request: Any) -> bool:
        if self._appending():  # played when the file holds it, unplayed; else sent, then appended
            with self._laya_lock:
                filtered = self._laya_filtered(request)
                return bool(filtered) and any(not self.play_counts[i] for i in self._laya_recorded_matches(filtered))
        if self._recording_whole():  # vcrpy's answer, without its scan of every interaction recorded so far
            self._before_record_request(request)  # the filters still see it first (the scrubber learns its key)
            return False
        if not self._replaying():
            return bool(super().can_play_response_for(request))  # type: ignore[misc]
        with self._laya_lock:
            filtered = self._laya_filtered(request)
            check_playable(self, filtered, self._laya_matches(filtered))
            return True

    def play_response(self, request: Any) -> Any:
        if not (self._replaying() or self._appending()):
            return super().play_response(request)  # type: ignore[misc]
        with self._laya_lock:
            filtered = self._laya_filtered.taken(request)
            index = next_to_play(self, filtered, self._laya_recorded_matches(filtered))
            stored, response = self.data[index]
            if index < getattr(self, "_loaded_count", len(self.data)):
                # What vcrpy's own play_response keeps for drop_unused_requests.
                self._played_interactions.append((stored, response))
            self.play_counts[index] += 1
        return echo_ids(response, request)

    def laya_rewind(self, request: Any) -> None:
        """Make the interactions `request` matches playable again (the standalone proxy's repeats)."""
        with self._laya_lock:
            for index in self._laya_matches(self._laya_filtered(request)):
                self.play_counts[index] = 0

    def append(self, request: Any, response: Any) -> None:
        with self._laya_lock:
            super().append(request, without_request_ids(response, request))  # type: ignore[misc]

    def laya_unplayed(self) -> list[Unplayed]:
        with self._laya_lock:
            return unplayed_of(self.data, self.play_counts)

    def laya_new_interactions(self) -> list[tuple[Any, Any]]:
        """What this run appended after the loaded interactions."""
        with self._laya_lock:
            return list(self.data[getattr(self, "_loaded_count", 0):])

    def _save(self, force: bool = False) -> None:
        """vcrpy's own save (`LayaVCR.use_cassette`); appending, the new interactions after the file as it was."""
        persister = self._persister
        if not self._appending() or not isinstance(persister, Persister):
            super()._save(force)  # type: ignore[misc]
            return
        new = self.laya_new_interactions()
        if new:
            persister.save_appended(Path(self._path), [r for r, _ in new], [r for _, r in new])
        self.dirty = False


class _LayaVCR:
    """What a `vcr.VCR` does differently here: configured for served Laya, its record mode fixed
    (mixed into ``vcr.VCR`` by `_classes`)."""

    # vcrpy's VCR's, which this is mixed into (annotations only).
    ignore_hosts: Any
    ignore_localhost: bool
    before_record_request: Any
    register_matcher: Any
    register_persister: Any
    _build_ignore_hosts: Any

    def __init__(self, *, record: bool | RecordMode, cassette_dir: str | os.PathLike[str] | None,
                 api_key: str | None, strict: bool, record_hint: str, config: CassetteConfig | None = None) -> None:
        import vcr

        #: How this VCR records (None: it replays); `laya_record` is whether it records at all.
        self.laya_record_mode = _record_mode(record)
        self.laya_record = self.laya_record_mode is not None
        self.laya_strict = bool(strict)
        self.laya_api_key = api_key
        self.laya_config = config or CassetteConfig()
        self._laya_scrubber = Scrubber(api_key, learn=True, config=self.laya_config)
        self._laya_cassette_class: Any = _cassette_class(_classes()[1], record_hint)
        super().__init__(  # type: ignore[call-arg]
            record_mode=self._laya_vcr_record_mode(),
            cassette_library_dir=None if cassette_dir is None else os.fspath(cassette_dir),
            path_transformer=vcr.VCR.ensure_suffix(CASSETTE_SUFFIX),
            match_on=MATCH_ON,
            before_record_request=self._laya_scrubber.request,
            before_record_response=self._laya_scrubber.response,
            decode_compressed_response=False,  # the scrubber decodes, within the client's cap
            drop_unused_requests=True,
            record_on_exception=False,
            ignore_hosts=self.laya_config.ignore_hosts,
            custom_patches=vcr_response_fixes(),
        )
        self.register_matcher("laya_body", laya_body_matcher)
        self.register_persister(Persister(record=self.laya_record, deferred=False, appends=self.laya_appends))

    @property
    def laya_appends(self) -> bool:
        """Whether recording keeps the old file's interactions, plays them and appends what they lack."""
        return self.laya_record_mode is not None and self.laya_record_mode.appends

    def _laya_vcr_record_mode(self) -> Any:
        from vcr.record_mode import RecordMode as VcrRecordMode

        mode = self.laya_record_mode
        return VcrRecordMode.NONE if mode is None else VcrRecordMode(mode.vcr_record_mode)

    def _build_before_record_request(self, options: dict[str, Any]) -> Any:
        """vcrpy's filter of every request, with a cheap copy where vcrpy deep-copies.

        The filters are those vcrpy would compose here -- the ignored hosts, then the scrubber
        -- when no vcrpy-level filter is configured (the kit's own filters are the
        scrubber's); otherwise vcrpy builds it.
        """
        if any(options.get(key) for key in _VCR_REQUEST_FILTERS) or any(
                getattr(self, key) for key in _VCR_REQUEST_FILTERS[:-2]):
            return super()._build_before_record_request(options)  # type: ignore[misc]
        hosts = set(options.get("ignore_hosts", self.ignore_hosts) or ())
        if options.get("ignore_localhost", self.ignore_localhost):
            hosts.update(("localhost", "0.0.0.0", "127.0.0.1", "::1"))
        ignored = self._build_ignore_hosts(hosts) if hosts else None
        scrub = self.before_record_request

        def before_record_request(request: Any) -> Any:
            body_of(request)  # one view of the live body, which every copy carries: vcrpy filters
            request = copy_request(request)  # a request to ask whether it can play it, then again to record it
            if ignored is not None and ignored(request) is None:
                return None
            return scrub(request) if scrub is not None else request

        return before_record_request

    def get_merged_config(self, **kwargs: Any) -> dict[str, Any]:
        for forbidden in ("record_mode", "allow_playback_repeats", "match_on", "serializer"):
            if forbidden in kwargs:
                raise TypeError(f"{forbidden} is fixed by pytest-laya's cassettes "
                                f"(record={self.laya_record_mode or False});"
                                " the mode is chosen in one place only")
        config: dict[str, Any] = super().get_merged_config(**kwargs)  # type: ignore[misc]
        config["record_mode"] = self._laya_vcr_record_mode()
        config["allow_playback_repeats"] = False
        return config

    def use_cassette(self, path: Any = None, **kwargs: Any) -> Any:
        """vcrpy's context manager over one cassette file (no decorator form, no discard)."""
        if path is None or not isinstance(path, (str, os.PathLike)):
            raise TypeError("LayaVCR.use_cassette needs a cassette path")
        return self._laya_cassette_class.use(**self.get_merged_config(path=path, **kwargs))

    def cassette(self, path: str | os.PathLike[str], *,
                 provenance: Mapping[str, Any] | None = None) -> contextlib.AbstractContextManager[CassetteHandle]:
        """One test's cassette: a context manager giving a `CassetteHandle` (see `use_cassette`)."""
        return open_session(self, path, provenance)

    def open(self, path: str | os.PathLike[str], *,
             provenance: Mapping[str, Any] | None = None) -> CassetteHandle:
        """One test's cassette, loaded but not patched in: the caller routes requests to
        `handle.cassette` (the plugin's switchboard) and calls `handle.finish(failed=...)`."""
        return open_cassette(self, path, provenance)


@functools.cache
def _classes() -> tuple[type, type]:
    """(LayaVCR, LayaCassette): the mixins over vcrpy's classes, built on first use so that importing
    this module loads no vcrpy."""
    import vcr
    from vcr.cassette import Cassette

    class LayaCassette(_LayaCassette, Cassette):  # type: ignore[misc]  # vcrpy is untyped
        """A vcrpy cassette whose replay raises pytest-laya's misses and echoes X-Request-Id."""

    class LayaVCR(_LayaVCR, vcr.VCR):  # type: ignore[misc]  # vcrpy is untyped
        """A `vcr.VCR` configured for served Laya; its record mode cannot be overridden."""

    return LayaVCR, LayaCassette


#: vcrpy's own request filters (keyword and VCR attribute names): when any is set, vcrpy composes
#: the filter of every request itself. The last two are keywords only.
_VCR_REQUEST_FILTERS = ("filter_headers", "filter_query_parameters", "filter_post_data_parameters",
                        "before_record", "before_record_request")


@functools.cache
def _cassette_class(base: type, record_hint: str) -> type:
    """The cassette class whose misses advise `record_hint`; one per hint, not one per cassette."""
    return type("LayaCassette", (base,), {"record_hint": record_hint})


def copy_request(request: Any) -> Any:
    """A vcrpy `Request` of one's own, as ``copy.deepcopy`` gives, at a fraction of its cost: its
    parts are immutable (method, URI, its parse, body bytes) but for the headers and a chunked
    body, which are copied. The body's view (`wire.body.body_of`) goes along: it is kept only
    while the body is the very bytes it was made of."""
    from vcr.request import HeadersDict

    copied = object.__new__(type(request))
    state = dict(request.__dict__)
    state["_headers"] = HeadersDict(request._headers)
    if isinstance(state.get("_body"), list):
        state["_body"] = list(state["_body"])
    copied.__dict__.update(state)
    return copied


def _record_mode(record: bool | RecordMode) -> RecordMode | None:
    """`laya_vcr`'s `record` as the record mode it asks for (None: replay)."""
    if isinstance(record, RecordMode):
        if record.replays_recorded:
            raise ValueError(f"record={record!r} chooses per test whether to record, which the cassette cannot: "
                             f"open a test's cassette with record=False when it exists and can be read, else "
                             f"with record=True (the plugin's {record.flag} does this)")
        return record
    if isinstance(record, bool):
        return RecordMode.ALL if record else None
    if isinstance(record, str):  # the command line's spelling
        return _record_mode(RecordMode.parse(record))
    raise TypeError(f"record must be a bool or a pytest_laya.route.modes.RecordMode, got {type(record).__name__}")


def laya_vcr(*, record: bool | RecordMode, cassette_dir: str | os.PathLike[str] | None, api_key: str | None,
             strict: bool = True, record_hint: str = RECORD_HINT, config: CassetteConfig | None = None) -> vcr.VCR:
    """A `vcr.VCR` for served-Laya cassettes (see the module docstring for what it changes).

    `record` is the only authority on the mode: False replays (vcrpy ``none``, no network, no
    writes), True or `RecordMode.ALL` records (vcrpy ``all``, the old file replaced as a whole),
    `RecordMode.NEW_EPISODES` appends (vcrpy ``new_episodes``: the old file's interactions are
    played, requests they lack are recorded and appended; the old ones stay byte for byte;
    `RecordMode.MISSING`, a choice per test, is refused: pass False or True). `api_key` is
    scrubbed from everything recorded. `strict` makes a clean replay with unplayed interactions
    fail. `.cassette(path, provenance=...)` gives a `CassetteHandle` context manager;
    `.use_cassette(path)` is vcrpy's own (atomic writes, no discard).
    """
    vcr_class, _ = _classes()
    return vcr_class(record=record, cassette_dir=cassette_dir, api_key=api_key, strict=strict,
                     record_hint=record_hint, config=config)


def use_cassette(path: str | os.PathLike[str], *, record: bool | RecordMode, api_key: str | None = None,
                 strict: bool = True, provenance: Mapping[str, Any] | None = None,
                 record_hint: str = RECORD_HINT) -> contextlib.AbstractContextManager[CassetteHandle]:
    """One test's cassette at `path` (``.yaml`` added if missing), as a `CassetteHandle`.

    Every httpx (and http.client, requests...) request made inside the block goes through the
    cassette: recorded, or answered from it, never from the network. In record mode the file
    is replaced when the block ends cleanly and `discard()` was not called (appended to, with
    `RecordMode.NEW_EPISODES`).
    """
    vcr_class, _ = _classes()
    laya: _LayaVCR = vcr_class(record=record, cassette_dir=None, api_key=api_key, strict=strict, record_hint=record_hint)
    return laya.cassette(Path(path), provenance=provenance)

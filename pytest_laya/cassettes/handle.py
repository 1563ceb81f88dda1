"""`CassetteHandle`: one test's cassette while it is in use, and what became of it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pytest_laya.cassettes.disk import atomic_write, file_identity, read_limited
from pytest_laya.cassettes.errors import CassetteError, CassetteUnplayed, Unplayed
from pytest_laya.cassettes.persist import Persister, provenance_of, recorded_date, today
from pytest_laya.cassettes.rendering import GrowingCassetteText, render, render_appended
from pytest_laya.cassettes.scrub import Scrubber

__all__ = [
    "CassetteHandle",
    "PROVENANCE_FIELDS",
    "PROVENANCE_FORMAT",
]


#: The version of the ``metadata.pytest_laya`` mapping.
PROVENANCE_FORMAT = 1


PROVENANCE_FIELDS = ("server", "identity", "spec", "laya_version")


class _WholeText:
    """A cassette's text rendered whole each time (a cassette saved once)."""

    render = staticmethod(render)
    render_appended = staticmethod(render_appended)


_WHOLE = _WholeText()


class CassetteHandle:
    """One test's cassette while it is in use.

    `record` says which mode it is in, and `appends` whether recording keeps the old file's
    interactions (played) and appends the requests they lack. In record mode the file is written
    when the block ends, unless `discard()` was called or the block raised; in replay nothing is
    written and, with `strict`, a clean exit with unplayed interactions raises `CassetteUnplayed`.
    `outcome` says what happened: ``"written"`` (recorded whole), ``"appended"`` (appending: the
    requests the file lacked were added to it), ``"unchanged"`` (re-recorded identically, file
    untouched; appending, nothing new was recorded), ``"kept"`` (not saved: the old file stays),
    ``"discarded"`` (not saved, and there was no old file), ``"replayed"``, ``"missing"`` (replay
    found no file), or ``None`` while in use.
    """

    def __init__(self, *, path: Path, record: bool, strict: bool, cassette: Any, persister: Persister,
                 provenance: Mapping[str, Any] | None, api_key: str | None, scrubber: Scrubber | None = None,
                 appends: bool = False) -> None:
        self.path = path
        self.record = record
        self.appends = appends
        self.strict = strict
        self.cassette = cassette
        self.outcome: str | None = None
        #: The decision calls made through this cassette (replayed or recorded), parsed, with their
        #: responses: a `pytest_laya.wire.calls.Calls`, filled by the plugin's route (None outside it).
        self.calls: Any = None
        self._persister = persister
        self._discarded = False
        self._scrub = Scrubber(api_key, learn=False)
        # The recording scrubber learns credentials from Authorization headers as it goes.
        self._recording_scrub = scrubber or self._scrub
        self._provenance: dict[str, Any] = {}
        #: Re-recorded unchanged, a cassette keeps its first recording date when that date is this
        #: ISO day or later (None: always); an older one is written again with today's date.
        self.keep_date_after: str | None = None
        #: Set once the cassette is saved a second time (the standalone proxy saves after every
        #: exchange): from then on each interaction is rendered once.
        self._growing: GrowingCassetteText | None = None
        self._saved = False
        #: The identity of the file this handle wrote last, and the date it wrote into it.
        self._written: tuple[Any, str] | None = None
        if provenance:
            self.set_provenance(**dict(provenance))

    # -- state

    @property
    def exists(self) -> bool:
        """Replay: whether a cassette file was loaded. Record: whether an old file is there now."""
        return self._persister.loaded is not None if not self.record else self.path.is_file()

    @property
    def interactions(self) -> int:
        return len(self.cassette)

    @property
    def played(self) -> int:
        return sum(1 for i in range(len(self.cassette)) if self.cassette.play_counts[i])

    @property
    def provenance(self) -> dict[str, Any] | None:
        """Replay: ``metadata.pytest_laya`` of the loaded file. Record: what will be written."""
        if self.record:
            return {"format": PROVENANCE_FORMAT, **self._provenance}
        return provenance_of(self._persister.loaded)

    def set_provenance(self, **fields: Any) -> None:
        """Record where the interactions came from: server, identity, spec, laya_version.

        Values must be plain data (str, numbers, bools, lists, mappings; a dataclass is turned
        into a mapping); None removes a field. Ignored in replay. The API key is scrubbed.
        """
        for name, value in fields.items():
            if name not in PROVENANCE_FIELDS:
                raise TypeError(f"unknown provenance field {name!r}; expected one of {', '.join(PROVENANCE_FIELDS)}")
            if value is None:
                self._provenance.pop(name, None)
            else:
                self._provenance[name] = self._plain(value, name)

    def _plain(self, value: Any, where: str) -> Any:
        import dataclasses

        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = dataclasses.asdict(value)
        if isinstance(value, Mapping):
            return {str(k): self._plain(v, f"{where}.{k}") for k, v in value.items() if v is not None}
        if isinstance(value, (list, tuple)):
            return [self._plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, str):
            return self._scrub.text(value)
        if value is None or isinstance(value, (bool, int, float)):
            return value
        raise TypeError(f"provenance {where} must be plain data, got {type(value).__name__}")

    def unplayed(self) -> list[Unplayed]:
        """Recorded interactions no request has matched yet (empty in record mode)."""
        return [] if self.record else self.cassette.laya_unplayed()

    def check_all_played(self) -> None:
        """Raise `CassetteUnplayed` if any recorded interaction was never played."""
        left = self.unplayed()
        if left:
            listed = "; ".join(str(u) for u in left)
            raise CassetteUnplayed(
                f"{len(left)} of {self.interactions} recorded interactions in {self.path} were never played: "
                f"{listed}. The test no longer makes these requests: record it again with "
                f"{self.cassette.record_hint}; or, if they may go unplayed, mark the test "
                f"@pytest.mark.laya(strict=False) (--no-laya-strict for the whole run; strict=False for "
                f"pytest_laya.cassettes.use_cassette)", path=self.path, unplayed=left)

    def discard(self) -> None:
        """Don't save what this run recorded (the test failed): the old cassette stays as it was."""
        self._discarded = True

    # -- ending

    def redact(self, text: str) -> str:
        """`text` with every secret this cassette knows of replaced (for error messages)."""
        return self._recording_scrub.text(text)

    def shown_target(self, uri: str) -> str:
        """A request's path and query as an error message may show them (the project's filters applied)."""
        return self._recording_scrub.shown_target(uri)

    def finish(self, *, failed: bool) -> str:
        """End the cassette's use: save it (record, unless `failed` or discarded) or check it was
        all played (strict replay of a test that passed). Returns the `outcome`."""
        self._finish(failed)
        assert self.outcome is not None
        return self.outcome

    def _finish(self, failed: bool) -> None:
        if not self.record:
            self.outcome = "replayed" if self.exists else "missing"
            if self.strict and not failed and not self._discarded:
                self.check_all_played()
            return
        if failed or self._discarded:
            self.outcome = "kept" if self.path.is_file() else "discarded"
            return
        self.outcome = self._commit()

    def _metadata(self, recorded: str) -> dict[str, Any]:
        return {"pytest_laya": {"format": PROVENANCE_FORMAT, **self._provenance, "recorded": recorded}}

    def _commit(self) -> str:
        if self._saved and self._growing is None:
            self._growing = GrowingCassetteText()
        self._saved = True
        loaded = self._persister.loaded if self.appends else None
        if loaded is not None:
            return self._commit_appended(loaded)
        requests, responses = self.cassette.requests, self.cassette.responses
        date = today()
        text = (self._growing or _WHOLE).render(requests, responses, self._metadata(date))
        try:
            old = read_limited(self.path, "write")
        except CassetteError:
            old = None  # broken or too big: replaced (a FIFO or a directory: `atomic_write` refuses it)
        if old is not None:
            if old == text:
                return "unchanged"
            old_date = self._date_written() or recorded_date(self.path)
            keep = old_date is not None and old_date != date and (
                self.keep_date_after is None or old_date >= self.keep_date_after)
            if keep and old_date is not None and old == render(requests, responses, self._metadata(old_date)):
                return "unchanged"  # same interactions: keep the date they were first recorded on
        atomic_write(self.path, text)
        self._written = (file_identity(self.path), date)
        return "written"

    def _date_written(self) -> str | None:
        """The recording date of the file this handle wrote last, while it is still that file (a
        cassette saved after every exchange is not parsed again to learn it)."""
        written = self._written
        return written[1] if written is not None and written[0] == file_identity(self.path) else None

    def _commit_appended(self, old: Mapping[str, Any]) -> str:
        """The old file with what this run recorded appended; nothing new, the file is untouched."""
        new = self.cassette.laya_new_interactions()
        if not new:
            return "unchanged"
        metadata = self._appended_metadata(old)
        atomic_write(self.path, (self._growing or _WHOLE).render_appended(
            old, [r for r, _ in new], [r for _, r in new], metadata))
        return "appended"

    def _appended_metadata(self, old: Mapping[str, Any]) -> dict[str, Any]:
        """The old file's metadata, its provenance and date kept (a cassette is as old as its oldest
        answer); a CassetteError when this run's server is not the one that answered before."""
        metadata = dict(old.get("metadata") or {})
        if provenance_of(old) is None:
            metadata.update(self._metadata(today()))
            return metadata
        self.refuse_another_server(self._provenance)
        return metadata

    def refuse_another_server(self, now: Mapping[str, Any]) -> None:
        """A CassetteError when the server answering now (`now`: provenance fields, plain data as
        `set_provenance` stores them; a field left out is unknown) is not the one the appended
        cassette names. Called when a test opens the cassette, from what /health says, so no
        recorded answer is played under another server's claim, and again before saving."""
        recorded = provenance_of(self._persister.loaded) if self.appends else None
        if recorded is None:
            return
        now = {name: self._plain(value, name) for name, value in now.items() if value is not None}
        differ = [f"{name} {_shown(recorded[name])} then, {_shown(now[name])} now"
                  for name in ("identity", "spec")
                  if recorded.get(name) is not None and now.get(name) is not None
                  and _differs(recorded[name], now[name])]
        if differ:
            raise CassetteError(
                f"could not append to cassette {self.path}: it was recorded from another server "
                f"({'; '.join(differ)}), and one cassette must not mix the answers of two servers; nothing was "
                f"written. Record it again as a whole with {self.cassette.record_hint}", path=self.path)


def _differs(then: Any, now: Any) -> bool:
    """Two provenance values name different servers. Identities differ only in a field both
    name: how the kit learnt one (`source`: the response's served_by, /health) is not the
    weights, and /health may name fewer fields than a response."""
    if isinstance(then, Mapping) and isinstance(now, Mapping):
        return any(then[key] != now[key] for key in then.keys() & now.keys() if key != "source")
    return bool(then != now)


def _shown(value: Any) -> str:
    if isinstance(value, Mapping):
        return ", ".join(f"{key} {item}" for key, item in value.items())
    return str(value)


_NOT_CASSETTE_ARGUMENTS = ("path_transformer", "func_path_generator", "record_on_exception")


def open_cassette(laya: Any, path: str | os.PathLike[str], provenance: Mapping[str, Any] | None) -> CassetteHandle:
    """Load one test's cassette (a `LayaVCR` configuration) without patching any HTTP library."""
    persister = Persister(record=laya.laya_record, deferred=True, appends=laya.laya_appends)
    config = laya.get_merged_config(path=path, persister=persister)
    transform = config.get("path_transformer")
    config["path"] = transform(config["path"]) if transform else config["path"]
    cassette = laya._laya_cassette_class.load(**{k: v for k, v in config.items() if k not in _NOT_CASSETTE_ARGUMENTS})
    return CassetteHandle(path=Path(config["path"]), record=laya.laya_record, strict=laya.laya_strict,
                          cassette=cassette, persister=persister, provenance=provenance, api_key=laya.laya_api_key,
                          scrubber=laya._laya_scrubber, appends=laya.laya_appends)


@contextlib.contextmanager
def open_session(laya: Any, path: str | os.PathLike[str], provenance: Mapping[str, Any] | None) -> Iterator[CassetteHandle]:
    persister = Persister(record=laya.laya_record, deferred=True, appends=laya.laya_appends)
    config = laya.get_merged_config(path=path, persister=persister)
    full = Path(config["path_transformer"](config["path"]) if config.get("path_transformer") else config["path"])
    manager = laya._laya_cassette_class.use(**config)
    cassette = manager.__enter__()
    handle = CassetteHandle(path=full, record=laya.laya_record, strict=laya.laya_strict, cassette=cassette,
                            persister=persister, provenance=provenance, api_key=laya.laya_api_key,
                            appends=laya.laya_appends)
    failed = True
    try:
        yield handle
        failed = False
    finally:
        manager.__exit__(None, None, None)  # unpatches; the deferred persister writes nothing
        if failed:
            handle._finish(failed=True)
    handle._finish(failed=False)

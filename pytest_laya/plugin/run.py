"""`LayaRun`: the run's resolved settings and everything it saw, and its pytest-xdist merge.

One object per pytest config. Hooks and fixtures hand what they see to it; the summary and the
JSON report read it. Under pytest-xdist each worker `export()`s its part to the controller in
`workeroutput`, and the controller `merge()`s them, so its summary, report and unused-cassette
check cover the whole run.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_laya.route.modes import Mode, RecordMode
from pytest_laya.wire.spec_name import SpecName

if TYPE_CHECKING:  # pragma: no cover
    from pytest_laya.cassettes.verify import VerifyTotals
    from pytest_laya.intercept import Switchboard
    from pytest_laya.specs.conformance import Conformance
    from pytest_laya.wire.exchange import Exchange
    from pytest_laya.wire.health import Health

__all__ = ["CALLED", "CASSETTE_COUNTS", "FAILED", "WRITTEN_OUTCOMES", "LayaRun", "WORKEROUTPUT_KEY", "counted_as"]

#: What became of the cassettes, in the summary's words: replayed from a file; asked for in replay
#: with no file; recorded whole (written); appended to (--laya-record=new_episodes added the
#: requests it lacked); re-recorded with no byte changed (appending: nothing new); not saved because the test
#: failed (kept: the old file stays; discarded: there was none); replay found a file it cannot read
#: (broken); the write failed (unsaved); fetched from the shared store (--laya-store) into the
#: local directory, and written to it (--laya-store-write).
CASSETTE_COUNTS = ("played", "missing", "recorded", "appended", "unchanged", "kept", "discarded", "broken", "unsaved", "fetched",
                   "stored")
#: The `CassetteHandle.outcome`s of a cassette file this run wrote: recorded whole, or appended to.
WRITTEN_OUTCOMES = ("written", "appended")

#: Set on a test's stash once any of its phases failed, and once its call phase ran to its end
#: (not skipped, not xfailed): only then is what it recorded saved.
FAILED = pytest.StashKey[bool]()
CALLED = pytest.StashKey[bool]()
#: The key of pytest-laya's part of an xdist worker's `workeroutput`.
WORKEROUTPUT_KEY = "pytest_laya"


def counted_as(outcome: str) -> str:
    """The summary's name (`CASSETTE_COUNTS`) for a cassette's outcome (`CassetteHandle.outcome`)."""
    return _COUNTED_AS.get(outcome, outcome)


_COUNTED_AS = {"replayed": "played", "written": "recorded"}


@dataclass
class LayaRun:
    """The run's settings (mode, URL, spec, cassette directory, strictness) and its tallies.

    Under pytest-xdist the controller's `LayaRun` holds the merged totals of its workers.
    """

    mode: Mode
    url: str | None
    api_key: Any = field(repr=False)  # a `pytest_laya.client.Secret`, or None
    #: --laya-spec (None: auto).
    spec: SpecName | None
    cassette_dir: Path | None
    strict: bool
    report: Path | None
    checkpoint: str | None
    cassettes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CASSETTE_COUNTS, 0))
    #: Cassette files tests used (resolved), plus those of tests skipped before reaching theirs.
    used_cassettes: set[Path] = field(default_factory=set)
    servers: dict[str, str] = field(default_factory=dict)
    #: Which test (node id) uses each cassette file, so two tests never share one (per process).
    cassette_owners: dict[Path, str] = field(default_factory=dict)
    conformance: Conformance | None = None
    #: Whether anything reads the conformance table (-v, a report, a live run: a server contract
    #: shows it). When nothing does, each exchange is held to its claimed spec only.
    table_read: bool = True
    #: Collected test modules, and modules skipped at collection (their cassettes are kept).
    modules: set[Path] = field(default_factory=set)
    skipped_modules: set[Path] = field(default_factory=set)
    #: Why this run is not the whole suite (then unused cassettes are not computed).
    partial: list[str] = field(default_factory=list)
    #: Tests collected (by each xdist worker: all of them) and tests run (here, or relayed by xdist).
    collected: int = 0
    ran: int = 0
    #: Items pytest collected before any conftest or plugin filtered them (`pytest_itemcollected`).
    items_seen: int = 0
    #: Cassette files of parametrised tests, up to their ``[``: a missing parameter may be one
    #: the environment left out, so --laya-prune keeps those cassettes.
    families: set[str] = field(default_factory=set)
    #: Cassettes no test used, relative to the rootdir; None when not computed.
    unused_cassettes: list[str] | None = None
    #: verify mode: how far a number may move from its recording, and what was compared.
    verify_tolerance: float = 1e-4
    #: The largest cassette read or written (--laya-max-cassette-size).
    max_cassette_bytes: int = 16 * 1024 * 1024
    verify: VerifyTotals | None = None
    #: Extra summary lines by section title (the server contract's target gaps and measurements).
    notes: dict[str, list[str]] = field(default_factory=dict)
    #: --laya-record's record mode (None outside record mode); enforce | report; the network guard.
    record_mode: RecordMode | None = None
    conformance_mode: str = "enforce"
    block_network: bool = False
    prune: bool = False
    #: The environment variable each Laya test gets its server's URL in (ini laya_url_env), if any,
    #: and the one its API key goes in beside it (ini laya_api_key_env).
    url_env: str | None = None
    api_key_env: str = "LAYA_SERVED_API_KEY"
    #: One record per test that used Laya: its cassette, outcome, exchanges, violations, drift.
    tests: list[dict[str, Any]] = field(default_factory=list)
    #: Cassettes deleted by --laya-prune, relative to the rootdir.
    pruned: list[str] = field(default_factory=list)
    #: --laya-max-age (days; None: no limit), --laya-max-age-warn, --laya-identity-check; and the
    #: stale cassettes found (one record each: test, cassette, kind, reason, recorded, age_days).
    max_age: int | None = None
    max_age_warn: bool = False
    identity_check: bool = False
    stale: list[dict[str, Any]] = field(default_factory=list)
    #: Node ids of the tests that ran and of those deselected; and, for the report of a split
    #: run, its ``cassette_files``, ``used_cassettes`` and ``scope`` (`plugin.split`).
    ran_tests: list[str] = field(default_factory=list)
    deselected: list[str] = field(default_factory=list)
    shard: dict[str, Any] = field(default_factory=dict)
    #: --laya-report-html: where the HTML page goes (None: nowhere).
    report_html: Path | None = None
    #: --laya-store (a `pytest_laya.store.CassetteStore`, read-only unless --laya-store-write), or None.
    store: Any = None
    _switchboard: Switchboard | None = field(default=None, repr=False)
    _health: dict[str, Health | None] = field(default_factory=dict, repr=False)
    #: The terminal's progress status (`plugin.progress.Progress`), told of every exchange; None off a terminal.
    progress: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # Given as the command line's strings too (the standalone proxy, benchmarks, tests).
        self.mode = Mode(self.mode)
        self.spec = SpecName(self.spec) if self.spec is not None else None
        self.record_mode = RecordMode(self.record_mode) if self.record_mode is not None else None

    @property
    def reads_cassettes(self) -> bool:
        """Tests read recorded cassettes: replay, verify, or a record mode that replays or appends to them."""
        return self.mode.reads_cassettes or (self.record_mode is not None and self.record_mode.reads_recorded)

    @property
    def spec_document(self) -> SpecName | None:
        """The spec --laya-spec names (CURRENT or TARGET); None for auto."""
        return SpecName.document(self.spec)

    def switchboard(self) -> Switchboard:
        """This process's switchboard (its HTTP patches are built once, on first use)."""
        if self._switchboard is None:
            from pytest_laya.intercept import Switchboard

            self._switchboard = Switchboard()
        return self._switchboard

    def server_label(self, server: Any) -> str:
        """How a server is named in the summary and the report (credentials in its URL hidden)."""
        from pytest_laya.wire.urls import redact_url

        if getattr(server, "label", None):
            return str(server.label)
        if not server.kind.replays:
            return f"{server.kind} {redact_url(server.url)}"
        return f"replay of {server.recorded_from}" if getattr(server, "recorded_from", None) else "replay"

    def export_server(self, monkeypatch: pytest.MonkeyPatch, server: Any) -> str:
        """Put `server`'s URL (in `url_env`, default ``LAYA_SERVED_URL``) and API key (in
        `api_key_env`; removed when the server has none) in the environment for one test, for a
        service that reads them there; returns the URL variable's name."""
        name = self.url_env or "LAYA_SERVED_URL"
        monkeypatch.setenv(name, server.url)
        from pytest_laya.client.secret import revealed

        plain = revealed(server.api_key)
        if plain:
            monkeypatch.setenv(self.api_key_env, plain)
        else:
            monkeypatch.delenv(self.api_key_env, raising=False)
        return name

    def health_of(self, server: Any) -> Health | None:
        """`server`'s /health, read once per URL and session (None when it has none or it failed)."""
        if server.url in self._health:
            return self._health[server.url]
        from pytest_laya.cassettes.provenance import HEALTH_TIMEOUT_S
        from pytest_laya.client.base import ssl_context
        from pytest_laya.client.unmocked import UnmockedTransport
        from pytest_laya.wire.errors import LayaError

        health = None
        try:
            # Past the test's mocks (respx, pytest-httpx) and any other vcrpy cassette.
            with self._unrouted(), server.client(timeout_s=HEALTH_TIMEOUT_S,
                                                 transport=UnmockedTransport(ssl_context())) as client:
                health = client.health()
        except LayaError as exc:
            if exc.status == 404:
                self.note("gaps", f"{self.server_label(server)} has no /health (the current spec lets it; "
                                  f"the target requires it)")
        except Exception:  # noqa: BLE001 - a health read never fails a test; its absence is the finding
            pass
        self._health[server.url] = health
        return health

    def _unrouted(self) -> contextlib.AbstractContextManager[Any]:
        """The kit's own /health read goes to the server, never into another vcrpy cassette: a
        pytest-recording cassette (``@pytest.mark.vcr``) is already in place when a test's route
        opens, and would record the read, its Authorization header and all."""
        if "vcr" not in sys.modules:
            return contextlib.nullcontext()
        return self.switchboard().active([])

    def tracker(self) -> Conformance:
        """The conformance tally, made on first use: start-up then imports neither httpx nor the specs."""
        if self.conformance is None:
            from pytest_laya.specs.conformance import Conformance

            self.conformance = Conformance(claimed_only=not self.table_read)
        return self.conformance

    def verifications(self) -> VerifyTotals:
        if self.verify is None:
            from pytest_laya.cassettes.verify import VerifyTotals

            self.verify = VerifyTotals()
        return self.verify

    def note(self, section: str, line: str) -> None:
        """Add `line` under `section` in the terminal summary and the JSON report (once: repeats are dropped)."""
        lines = self.notes.setdefault(section, [])
        if line not in lines:
            lines.append(line)

    def spec_observer(self, server: Any, cassette: Any = None) -> Callable[[Exchange], None]:
        """An ``on_exchange`` callback for a client talking to `server` (a `ServerHandle`).

        Every response is checked against both specs and counted in the conformance table; one
        that breaks the spec `server` claims raises `SpecViolationError`, failing the test (naming
        `cassette`, the `laya_cassette` handle, when the response was replayed from it).
        """
        from pytest_laya.specs.conformance import SpecViolationError

        label = self.server_label(server)
        spec = (SpecName.document(server.spec) or SpecName.CURRENT).value
        replayed_from = str(cassette.path) if cassette is not None and not getattr(cassette, "record", True) else None

        def observe(exchange: Exchange) -> None:
            if self.progress is not None:
                self.progress.exchange(exchange)
            violations = self.tracker().check(exchange, server=label, claimed=spec)
            if violations:
                raise SpecViolationError(exchange, spec, violations, cassette=replayed_from)

        self.servers.setdefault(label, spec)
        return observe

    def count_cassette(self, outcome: str) -> None:
        """Count a cassette's outcome (`CassetteHandle.outcome`) under the summary's names."""
        key = counted_as(outcome)
        self.cassettes[key] = self.cassettes.get(key, 0) + 1

    # -- pytest-xdist

    def export(self) -> dict[str, Any]:
        """What a worker sends the controller (plain data: execnet carries no sets or paths)."""
        return {
            "cassettes": dict(self.cassettes),
            "used_cassettes": sorted(str(p) for p in self.used_cassettes),
            "servers": dict(self.servers),
            "conformance": self.conformance.rows() if self.conformance else [],
            "modules": sorted(str(p) for p in self.modules),
            "skipped_modules": sorted(str(p) for p in self.skipped_modules),
            "families": sorted(self.families),
            "partial": list(self.partial),
            "collected": self.collected,
            "verify": self.verify.results if self.verify else [],
            "notes": {section: list(lines) for section, lines in self.notes.items()},
            "tests": list(self.tests),
            "owners": {str(path): owner for path, owner in self.cassette_owners.items()},
            "stale": list(self.stale),
            "deselected": list(self.deselected),
        }

    def merge(self, data: Mapping[str, Any]) -> None:
        """Fold in a worker's `export()`."""
        for key, count in data.get("cassettes", {}).items():
            self.cassettes[key] = self.cassettes.get(key, 0) + int(count)
        self.used_cassettes.update(Path(p) for p in data.get("used_cassettes", ()))
        self.servers.update(data.get("servers", {}))
        if data.get("conformance"):
            self.tracker().merge_rows(data["conformance"])
        self.modules.update(Path(p) for p in data.get("modules", ()))
        self.skipped_modules.update(Path(p) for p in data.get("skipped_modules", ()))
        self.families.update(data.get("families", ()))
        self.partial.extend(data.get("partial", ()))
        self.collected = max(self.collected, int(data.get("collected", 0)))
        for result in data.get("verify", ()):
            self.verifications().results.append(result)
        for section, lines in data.get("notes", {}).items():
            for line in lines:
                self.note(section, line)
        self.tests.extend(data.get("tests", ()))
        self.stale.extend(data.get("stale", ()))
        self.deselected.extend(data.get("deselected", ()))
        for path, owner in data.get("owners", {}).items():
            mine = self.cassette_owners.setdefault(Path(path), owner)
            if mine != owner:  # two workers' tests wrote one file: only one test's interactions survive
                self.note("errors", f"{owner} and {mine} both used the cassette {path} (in different xdist "
                                    f"workers): give each test its own cassette")

"""`LayaRun`: the run's resolved settings and everything it saw, and its pytest-xdist merge.

One object per pytest config. Hooks and fixtures hand what they see to it; the summary and the
JSON report read it. Under pytest-xdist each worker `export()`s its part to the controller in
`workeroutput`, and the controller `merge()`s them, so its summary, report and unused-cassette
check cover the whole run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from pytest_laya.cassettes.verify import VerifyTotals
    from pytest_laya.specs.conformance import Conformance
    from pytest_laya.wire.exchange import Exchange

__all__ = ["LayaRun", "WORKEROUTPUT_KEY"]

#: The key of pytest-laya's part of an xdist worker's `workeroutput`.
WORKEROUTPUT_KEY = "pytest_laya"


@dataclass
class LayaRun:
    """The run's settings (mode, URL, spec, cassette directory, strictness) and its tallies.

    Under pytest-xdist the controller's `LayaRun` holds the merged totals of its workers.
    """

    mode: str
    url: str | None
    api_key: str | None = field(repr=False)
    spec: str | None
    cassette_dir: Path | None
    strict: bool
    report: Path | None
    checkpoint: str | None
    cassettes: dict[str, int] = field(default_factory=lambda: {"played": 0, "recorded": 0, "unchanged": 0, "discarded": 0})
    #: Cassette files tests used (resolved), plus those of tests skipped before reaching theirs.
    used_cassettes: set[Path] = field(default_factory=set)
    servers: dict[str, str] = field(default_factory=dict)
    #: Which test (node id) uses each cassette file, so two tests never share one (per process).
    cassette_owners: dict[Path, str] = field(default_factory=dict)
    conformance: Conformance | None = None
    #: Collected test modules, and modules skipped at collection (their cassettes are kept).
    modules: set[Path] = field(default_factory=set)
    skipped_modules: set[Path] = field(default_factory=set)
    #: Why this run is not the whole suite (then unused cassettes are not computed).
    partial: list[str] = field(default_factory=list)
    #: Tests collected (by each xdist worker: all of them) and tests run (here, or relayed by xdist).
    collected: int = 0
    ran: int = 0
    #: Cassettes no test used, relative to the rootdir; None when not computed.
    unused_cassettes: list[str] | None = None
    #: verify mode: how far a number may move from its recording, and what was compared.
    verify_tolerance: float = 1e-4
    verify: VerifyTotals | None = None
    #: Extra summary lines by section title (the server contract's target gaps and measurements).
    notes: dict[str, list[str]] = field(default_factory=dict)

    def tracker(self) -> Conformance:
        """The conformance tally, made on first use: start-up then imports neither httpx nor the specs."""
        if self.conformance is None:
            from pytest_laya.specs.conformance import Conformance

            self.conformance = Conformance()
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

        if server.kind != "replay":
            label = f"{server.kind} {server.url}"
        else:
            label = f"replay of {server.recorded_from}" if getattr(server, "recorded_from", None) else "replay"
        replayed_from = str(cassette.path) if cassette is not None and not getattr(cassette, "record", True) else None

        def observe(exchange: Exchange) -> None:
            violations = self.tracker().check(exchange, server=label, claimed=server.spec)
            if violations:
                raise SpecViolationError(exchange, server.spec, violations, cassette=replayed_from)

        self.servers.setdefault(label, server.spec)
        return observe

    def count_cassette(self, outcome: str) -> None:
        """Count a cassette's outcome (`CassetteHandle.outcome`) under the summary's names."""
        key = {"replayed": "played", "written": "recorded"}.get(outcome, outcome)
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
            "partial": list(self.partial),
            "collected": self.collected,
            "verify": self.verify.results if self.verify else [],
            "notes": {section: list(lines) for section, lines in self.notes.items()},
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
        self.partial.extend(data.get("partial", ()))
        self.collected = max(self.collected, int(data.get("collected", 0)))
        for result in data.get("verify", ()):
            self.verifications().results.append(result)
        for section, lines in data.get("notes", {}).items():
            for line in lines:
                self.note(section, line)

"""Where a test's Laya traffic goes, and what happens to it: one `TestRoute` per test.

`laya_server` opens the route; every Laya fixture stands on it. The route picks the server
(the marker's ``server=``, else the mode), opens the test's cassette (replay, record) or a
capture (live, fake, reference: sent, never saved), and switches the process's `Switchboard`
to it for the test, so any client the test's code uses -- httpx, urllib, requests, laya's
RemoteRouter, the kit's own client -- is answered, recorded and held to its server's spec the
same way (`pytest_laya.route.spec_check`). At the end it saves or checks the cassette, compares
in verify mode, and fails the test with any error its code swallowed.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_laya.plugin.cassette_fixture import (
    broken_cassette,
    cassette_of,
    claim_cassette,
    pytest_recording_clash,
    recording_into,
    replays_recorded,
)
from pytest_laya.plugin.caught_errors import SECTION as CAUGHT_SECTION
from pytest_laya.plugin.caught_errors import caught_section, fail_swallowed
from pytest_laya.plugin.freshness import check_freshness
from pytest_laya.plugin.markers import marker_options, pin_marker_answers
from pytest_laya.plugin.run import CALLED, FAILED, LayaRun
from pytest_laya.plugin.store import fail_unfetched, store_recorded
from pytest_laya.plugin.switch import routed, vcr_config
from pytest_laya.plugin.verify_mode import verify_route
from pytest_laya.route.changes import CHANGED_SECTION, changed_answers, shown_path
from pytest_laya.route.modes import RouteKind
from pytest_laya.route.provenance import serving_now, set_recorded_provenance
from pytest_laya.route.spec_check import SpecCheck, replayed_spec
from pytest_laya.wire.spec_name import SpecName

if TYPE_CHECKING:  # pragma: no cover
    from pytest_laya.cassettes import CassetteHandle
    from pytest_laya.cassettes.config import CassetteConfig
    from pytest_laya.cassettes.verify import CassetteVerification
    from pytest_laya.intercept.laya_route import LayaRoute
    from pytest_laya.servers.handle import ServerHandle

__all__ = ["OPEN_ROUTES", "ROUTE", "TestRoute", "note_outcome", "open_fake_route", "route_of"]

#: Where a test's route is kept, for the fixtures and hooks that need it; and every route the
#: test has open (its `laya_server`'s and its `laya_fake_server`'s).
ROUTE = pytest.StashKey["TestRoute"]()
OPEN_ROUTES = pytest.StashKey[list["TestRoute"]]()


@dataclass
class TestRoute:
    """One test's Laya server, its route through the switchboard, and what the test saw.

    `TestRoute.opened(request, run)` opens it, switches the test's traffic to it and closes it
    after the test; `open`, `switched` and `close` are those three steps.
    """

    __test__ = False  # not a test class, whatever pytest's naming rules say

    nodeid: str
    server: ServerHandle
    kind: RouteKind
    handle: CassetteHandle | None = None
    laya: LayaRoute | None = None
    cassette_path: Path | None = None
    recorded: list[Any] | None = None  # verify: the cassette's interactions (None: no cassette)
    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Whether a spec violation fails the test (--laya-conformance=enforce); laya_fake_server's route only lists them.
    enforce: bool = True
    #: Requests --laya-block-network refused while the route was the innermost one.
    refused: list[BaseException] = field(default_factory=list)
    #: The session's fake (a `FakeLayaServer`) when it is the test's server, answering in memory,
    #: and the faults the test scripted on it (`FaultSteps`).
    fake: Any = None
    steps: Any = None
    #: The route's spec check, and the test's cassette settings (`laya_vcr_config`).
    check: SpecCheck | None = field(default=None, repr=False)
    config: CassetteConfig | None = field(default=None, repr=False)
    #: What became of the cassette once the route closed (`CassetteHandle.finish`; None: none needed).
    outcome: str | None = None

    def __post_init__(self) -> None:
        self.kind = RouteKind(self.kind)  # given as its string too (the standalone proxy, benchmarks)

    @property
    def exchanges(self) -> int:
        return len(self.laya.exchanges) if self.laya is not None else 0

    def swallowed(self) -> list[BaseException]:
        """Errors raised on the route (misses, violations, blocked hosts) that the test may have caught."""
        return (list(self.laya.errors) if self.laya is not None else []) + self.refused

    # -- its life

    @classmethod
    @contextlib.contextmanager
    def opened(cls, request: pytest.FixtureRequest, run: LayaRun, server: ServerHandle | None = None, *,
               primary: bool = True) -> Iterator[TestRoute]:
        """The test's route, open and switched in for the block, closed after it. `server` is a
        project's own `laya_server` (see `_choose`). The `primary` route is the test's `laya_server`
        (kept in the stash; its violations fail the test); another (`open_fake_route`) is routed beside it."""
        route = cls.open(request, run, server, primary=primary)
        try:
            with route.switched(request, run):
                yield route
        finally:
            try:
                route.close(request, run)
            finally:
                # The route holds the cassette, every exchange and the spec check: let them go with
                # the test, not with the session (the item lives until the run ends).
                if primary:
                    del request.node.stash[ROUTE]
                request.node.stash[OPEN_ROUTES].remove(route)
                route._release()

    def _release(self) -> None:
        """Drop the spec check's links back to the route (route -> check -> route, and through its
        LayaRoute's observer), so the closed route, its cassette and its exchanges are freed at
        once rather than by the garbage collector, whose collections over the session's objects
        a replay of many short tests otherwise pays for."""
        if self.laya is not None:
            self.laya.observer = None
        self.check = None

    @classmethod
    def open(cls, request: pytest.FixtureRequest, run: LayaRun, given: ServerHandle | None = None, *,
             primary: bool = True) -> TestRoute:
        """Choose the test's server and open its cassette or capture, with its spec check."""
        from pytest_laya.intercept import LayaRoute

        server, kind, path = _choose(request, run, given)
        if kind.replays and path is not None:
            check_freshness(request, run, path)
        route = cls(nodeid=request.node.nodeid, server=server, kind=kind, cassette_path=path, enforce=primary)
        if primary:
            request.node.stash[ROUTE] = route
        request.node.stash.setdefault(OPEN_ROUTES, []).append(route)
        if path is not None:
            pytest_recording_clash(request, path)
            claim_cassette(request, run, path)
        route.config = config = vcr_config(request)
        if kind.records or (kind.captures and SpecName.document(server.spec) is None):
            # The weights' identity and the claimed spec: read once per server and session, before
            # any cassette is in place (and never for a server whose spec is known).
            run.health_of(server)
        handle = route.handle = route._open_handle(request, run, config)
        route.check = SpecCheck(run, route)
        answerer = route._in_memory_fake(request) if given is None and server.kind.is_fake else handle.cassette
        route.laya = LayaRoute(answerer, kind="replay" if kind.replays else "record",
                               urls=_urls(run, server), observer=route.check, redact=handle.redact)
        handle.calls = route.laya.calls
        return route

    def _in_memory_fake(self, request: pytest.FixtureRequest) -> Any:
        """The session's fake as this route's answerer, in memory, with the faults this test scripts."""
        from pytest_laya.fake.in_memory import FaultSteps, InMemoryFake

        self.fake = request.getfixturevalue("_laya_session_fake")
        self.steps = FaultSteps(self.fake.laya)
        return InMemoryFake(self.fake.laya, self.steps)

    def _open_handle(self, request: pytest.FixtureRequest, run: LayaRun, config: CassetteConfig) -> CassetteHandle:
        from pytest_laya.cassettes import laya_vcr
        from pytest_laya.cassettes.replay import native_config, open_replay

        if self.kind.verifies:
            assert self.cassette_path is not None
            old = laya_vcr(record=False, cassette_dir=None, api_key=run.api_key, strict=False,
                           config=config).open(self.cassette_path)
            self.recorded = list(old.cassette.data) if old.exists else None
        if self.kind.captures:
            return _capture(run, config)
        assert self.cassette_path is not None
        strict = bool(marker_options(request.node).get("strict", run.strict)) and self.kind.replays
        try:
            if self.kind.replays and native_config(config):  # the kit's own replay: no vcrpy
                return open_replay(self.cassette_path, api_key=run.api_key, strict=strict,
                                   record_hint=_record_hint(run.url), config=config)
            record = recording_into(run.record_mode, self.cassette_path) if self.kind.records else False
            handle: CassetteHandle = laya_vcr(record=record, cassette_dir=None, api_key=run.api_key,
                                              strict=strict, record_hint=_record_hint(run.url),
                                              config=config).open(self.cassette_path)
            if handle.appends:  # before any recorded answer plays under this server's claim
                chosen = run.spec_document.value if run.spec_document is not None else None
                handle.refuse_another_server(serving_now(self.server, run.health_of(self.server), chosen))
            return handle
        except Exception:
            if self.kind.replays:  # a broken file: counted, so the summary does not say "none used"
                run.count_cassette("broken")
                run.tests.append(self.record_of(run, "broken", None))
            raise

    @contextlib.contextmanager
    def switched(self, request: pytest.FixtureRequest, run: LayaRun) -> Iterator[None]:
        """The test's requests through the run's switchboard to this route for the block."""
        assert self.laya is not None and self.config is not None
        if self.fake is not None:
            self.fake.steps = self.steps  # calls that reach its port (another process) take them too
        try:
            with routed(request, run, [self.laya], self.config, refused=self.refused):
                yield
        finally:
            if self.fake is not None:
                self.fake.steps = None

    def close(self, request: pytest.FixtureRequest, run: LayaRun) -> None:
        """After the test: save or check its cassette, compare in verify mode, count, report, and
        fail the test (at teardown) with any error its code caught and hid."""
        failed = request.node.stash.get(FAILED, False) or not request.node.stash.get(CALLED, False)
        drift = None
        try:
            if self.kind.finishes_cassette:
                self._finish_cassette(request, run, failed)
            if self.kind.verifies and not failed:
                drift = verify_route(request, run, self)
        finally:
            run.tests.append(self.record_of(run, self.outcome, drift))
        if failed:
            return
        fail_swallowed(request.node, self)
        if drift is not None and drift.drifted:
            pytest.fail(drift.report(), pytrace=False)

    def _finish_cassette(self, request: pytest.FixtureRequest, run: LayaRun, failed: bool) -> None:
        """Save (record) or check (replay) the cassette, and count its `outcome` (None: the test needed none)."""
        from pytest_laya.cassettes.errors import CassetteError

        handle, path = self.handle, self.cassette_path
        assert handle is not None and path is not None
        broken = self._before_saving(run) if self.kind.records and not failed else None
        if self.kind.records and run.max_age is not None:
            from pytest_laya.cassettes.freshness import today

            handle.keep_date_after = (today() - datetime.timedelta(days=run.max_age)).isoformat()
        try:
            outcome = handle.finish(failed=failed)
        except CassetteError:
            if self.kind.records:
                self.outcome = "unsaved"
                run.count_cassette(self.outcome)
            raise
        if outcome == "missing" and self.laya is not None and not self.laya.exchanges and not self.laya.calls:
            return  # the test made no Laya call: it needs no cassette
        self.outcome = outcome
        run.count_cassette(outcome)
        if broken is not None and outcome == "written":
            run.note("broken cassettes replaced by this recording", f"{shown_path(handle.path)}: {broken}")
        if self.kind.records:
            store_recorded(request, run, path, outcome)

    def _before_saving(self, run: LayaRun) -> str | None:
        """A recording about to be saved: its provenance, and what it changes of the old file; why
        the old file is broken, if it is."""
        assert self.handle is not None and self.cassette_path is not None
        set_recorded_provenance(self.handle, self.server, run.health_of(self.server),
                                self.check.claimed if self.check is not None else None,
                                self.laya.exchanges if self.laya is not None else [])
        broken = broken_cassette(self.cassette_path)
        if broken is None and not self.handle.appends:  # appending changes no recorded answer
            for line in changed_answers(self.cassette_path, self.handle, api_key=run.api_key,
                                        server=run.server_label(self.server)):
                run.note(CHANGED_SECTION, line)
        return broken

    def record_of(self, run: LayaRun, outcome: str | None, drift: CassetteVerification | None) -> dict[str, Any]:
        """The test's record in the JSON report."""
        return {
            "test": self.nodeid,
            "server": run.server_label(self.server),
            "route": self.kind.value,
            "cassette": str(self.cassette_path) if self.cassette_path is not None else None,
            "outcome": outcome,
            "exchanges": self.exchanges,
            "violations": list(self.violations),
            "drift": drift.to_json() if drift is not None else None,
            "latency_ms": [round(exchange.elapsed_s * 1000, 3) for exchange in self.laya.exchanges]
            if self.laya is not None else [],
        }


def open_fake_route(request: pytest.FixtureRequest, run: LayaRun, url: str) -> contextlib.AbstractContextManager[TestRoute]:
    """`laya_fake_server`'s route: whichever client calls the fake (at `url`) gets through
    --laya-block-network, and every response is checked against the target spec and counted in the
    conformance table under ``laya_fake_server``. A violation is listed, never failing the test:
    the fake breaks its spec only where the test's fault script asks it to (`garbage_body()`)."""
    from pytest_laya.servers.handle import ServerHandle, ServerKind

    spec = (run.spec_document or SpecName.TARGET).value
    server = ServerHandle(url=url, kind=ServerKind.FAKE, spec=spec, label="laya_fake_server")
    return TestRoute.opened(request, run, server, primary=False)


def note_outcome(item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport, run: LayaRun | None) -> None:
    """What a phase's report means for the test's routes: a failure (the cassette is not saved,
    and what the code caught is shown beside its own failure), a completed call (only then is a
    recording saved), and, skipped or failed, that the test still owns its cassette."""
    if report.failed:
        item.stash[FAILED] = True
        routes: list[TestRoute] = item.stash.get(OPEN_ROUTES, [])
        caught = caught_section(routes, call.excinfo.value if call.excinfo else None)
        if caught is not None:
            report.sections.append((CAUGHT_SECTION, caught))
    if report.when == "call" and not report.skipped:  # a test that skipped itself (or xfailed) did not complete
        item.stash[CALLED] = True
    if (report.skipped or report.failed) and run is not None and run.mode.accounts_cassettes:
        # Perhaps before reaching its cassette (or before asking for laya_url with
        # request.getfixturevalue): the test still owns it.
        try:
            run.used_cassettes.add(cassette_of(item, run))
        except pytest.UsageError:
            pass


def route_of(request: pytest.FixtureRequest, run: LayaRun, server: ServerHandle) -> TestRoute:
    """The test's route for a fixture that stands on `laya_server` (`server`): the one it opened,
    or, when a project overrides `laya_server` with its own server, one opened for that server now
    (captured and checked, or replayed and recorded as `_choose` says) and closed when the asking
    fixture is torn down, before the project's server."""
    route: TestRoute | None = request.node.stash.get(ROUTE, None)
    if route is None:
        opened = TestRoute.opened(request, run, server)
        route = opened.__enter__()
        request.addfinalizer(lambda: opened.__exit__(None, None, None))
    return route


# -- choosing the server and the route ------------------------------------------------------

def _choose(request: pytest.FixtureRequest, run: LayaRun,
            given: ServerHandle | None = None) -> tuple[ServerHandle, RouteKind, Path | None]:
    """(the server, the route kind, the cassette file or None) for this test.

    `given` is a project's own `laya_server`: of kind ``live`` (or ``replay``) the mode applies to
    it as to ``--laya-url``; of any other kind it is captured and checked, never recorded.
    """
    from pytest_laya.servers.handle import ServerHandle, ServerKind

    wanted = marker_options(request.node).get("server")
    if given is not None and not given.kind.follows_mode:
        return given, RouteKind.CAPTURE, None
    if given is None and (wanted == "fake" or (wanted is None and run.mode.fakes)):
        fake = request.getfixturevalue("_laya_session_fake")
        pin_marker_answers(request, fake.laya, run)
        return ServerHandle(url=fake.url, kind=ServerKind.FAKE, spec=(run.spec_document or SpecName.TARGET).value), \
            RouteKind.CAPTURE, None
    if not run.mode.uses_cassette_file:
        return given or _live_handle(request, run, wanted), RouteKind.CAPTURE, None
    path = cassette_of(request.node, run)
    if run.store is not None:
        fail_unfetched(request, path)
    if run.mode.replays or replays_recorded(run, path):  # --laya-record=missing: a readable cassette replays
        return _replay_handle(run, path) if given is None else given, RouteKind.REPLAY, path
    return given or _live_handle(request, run, wanted), RouteKind.RECORD if run.mode.records else RouteKind.VERIFY, path


def _replay_handle(run: LayaRun, path: Path) -> ServerHandle:
    from pytest_laya.cassettes.errors import CassetteError
    from pytest_laya.cassettes.head import read_head
    from pytest_laya.cassettes.persist import provenance_of
    from pytest_laya.servers.handle import REPLAY_URL, ServerHandle, ServerKind

    try:  # read once: opening the cassette next reads the same head
        provenance = provenance_of(read_head(path)) or {}
    except CassetteError:  # opening it reports the problem
        provenance = {}
    source = provenance.get("server") if isinstance(provenance.get("server"), str) else None
    spec = replayed_spec(run.spec_document, provenance)
    return ServerHandle(url=run.url or REPLAY_URL, kind=ServerKind.REPLAY, spec=spec.value, recorded_from=source,
                        api_key=run.api_key)


def _live_handle(request: pytest.FixtureRequest, run: LayaRun, wanted: str | None) -> ServerHandle:
    from pytest_laya.servers.handle import ServerHandle, ServerKind

    if wanted == "reference":
        reference: ServerHandle = request.getfixturevalue("laya_reference_server")
        return reference
    if not run.url:
        pytest.fail(f"--laya-mode={run.mode} needs --laya-url URL (or LAYA_SERVED_URL), or "
                    f"@pytest.mark.laya(server='reference') on the test", pytrace=False)
    return ServerHandle(url=run.url, kind=ServerKind.LIVE, spec=(run.spec_document or SpecName.AUTO).value, api_key=run.api_key)


@functools.lru_cache(maxsize=8)
def _record_hint(url: str | None) -> str:
    from pytest_laya.wire.urls import redact_url

    return "--laya-record" + (f" --laya-url {redact_url(url)}" if url else "")


def _urls(run: LayaRun, server: ServerHandle) -> list[str]:
    from pytest_laya.servers.handle import REPLAY_URL

    urls = [server.url]
    if server.kind.replays:
        urls.append(REPLAY_URL)
        if run.url:
            urls.append(run.url)
    return urls


def _capture(run: LayaRun, config: CassetteConfig) -> CassetteHandle:
    """A record-mode cassette that is never saved: live, fake and reference traffic, scrubbed, in memory."""
    from pytest_laya.cassettes import laya_vcr

    handle: CassetteHandle = laya_vcr(record=True, cassette_dir=None, api_key=run.api_key, strict=False,
                                      config=config).open("<capture>")
    handle.discard()
    return handle

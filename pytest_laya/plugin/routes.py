"""Where a test's Laya traffic goes, and what happens to it: one `TestRoute` per test.

`laya_server` opens the route; every Laya fixture stands on it. The route picks the server
(the marker's ``server=``, else the mode), opens the test's cassette (replay, record) or a
capture (live, fake, reference: sent, never saved), and switches the process's `Switchboard`
to it for the test, so any client the test's code uses -- httpx, urllib, requests, laya's
RemoteRouter, the kit's own client -- is answered, recorded and held to its server's spec the
same way. At the end it saves or checks the cassette, compares in verify mode, and fails the
test with any error its code swallowed.

Which spec an exchange is held to: ``--laya-spec`` when given; else, in replay, the spec its
cassette was recorded under; else the ``Laya-Spec`` header of the response, else the server's
``/health`` ``spec``, else current.
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
    cassette_file,
    cassette_location,
    claim_cassette,
    pytest_recording_clash,
    replays_recorded,
)
from pytest_laya.plugin.caught_errors import fail_swallowed
from pytest_laya.plugin.freshness import check_freshness
from pytest_laya.plugin.handle import answered_by_a_fault, in_memory_fake
from pytest_laya.plugin.markers import blocks_network, marker_options, pin_marker_answers
from pytest_laya.plugin.mocked_answers import LISTED_VIOLATIONS, MockedAnswerCheck
from pytest_laya.plugin.run import CALLED, FAILED, LayaRun
from pytest_laya.plugin.store import fail_unfetched, store_recorded
from pytest_laya.plugin.verify_mode import changed_answers, shown_path, verify_route
from pytest_laya.wire.spec_name import SpecName

if TYPE_CHECKING:  # pragma: no cover
    from pytest_laya.cassettes import CassetteHandle
    from pytest_laya.cassettes.config import CassetteConfig
    from pytest_laya.intercept.laya_route import LayaRoute
    from pytest_laya.servers.handle import ServerHandle
    from pytest_laya.wire.exchange import Exchange

__all__ = ["OPEN_ROUTES", "ROUTE", "TestRoute", "open_fake_route", "open_test_route", "routed"]

#: Where a test's route is kept, for the fixtures and hooks that need it; and every route the
#: test has open (its `laya_server`'s and its `laya_fake_server`'s).
ROUTE = pytest.StashKey["TestRoute"]()
OPEN_ROUTES = pytest.StashKey[list["TestRoute"]]()


@dataclass
class TestRoute:
    """One test's Laya server, its route through the switchboard, and what the test saw."""

    __test__ = False  # not a test class, whatever pytest's naming rules say

    nodeid: str
    server: ServerHandle
    kind: str  # replay | record | capture | verify
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

    @property
    def exchanges(self) -> int:
        return len(self.laya.exchanges) if self.laya is not None else 0

    def swallowed(self) -> list[BaseException]:
        """Errors raised on the route (misses, violations, blocked hosts) that the test may have caught."""
        return (list(self.laya.errors) if self.laya is not None else []) + self.refused


# -- choosing the server and the route ------------------------------------------------------

def _replay_handle(run: LayaRun, path: Path) -> ServerHandle:
    from pytest_laya.cassettes.errors import CassetteError
    from pytest_laya.cassettes.persist import provenance_of, read_cassette
    from pytest_laya.servers.handle import REPLAY_URL, ServerHandle

    try:  # parsed once: opening the cassette next reads the same parse
        provenance = provenance_of(read_cassette(path)) or {}
    except CassetteError:  # opening it reports the problem
        provenance = {}
    source = provenance.get("server") if isinstance(provenance.get("server"), str) else None
    return ServerHandle(url=run.url or REPLAY_URL, kind="replay", spec=_recorded_spec(run, provenance),
                        recorded_from=source, api_key=run.api_key)


def _recorded_spec(run: LayaRun, provenance: dict[str, Any]) -> str:
    return (run.spec_document or SpecName.document(provenance.get("spec")) or SpecName.AUTO).value


def _live_handle(request: pytest.FixtureRequest, run: LayaRun, wanted: str | None) -> ServerHandle:
    from pytest_laya.servers.handle import ServerHandle

    if wanted == "reference":
        reference: ServerHandle = request.getfixturevalue("laya_reference_server")
        return reference
    if not run.url:
        pytest.fail(f"--laya-mode={run.mode} needs --laya-url URL (or LAYA_SERVED_URL), or "
                    f"@pytest.mark.laya(server='reference') on the test", pytrace=False)
    return ServerHandle(url=run.url, kind="live", spec=(run.spec_document or SpecName.AUTO).value, api_key=run.api_key)


def _choose(request: pytest.FixtureRequest, run: LayaRun,
            given: ServerHandle | None = None) -> tuple[ServerHandle, str, Path | None]:
    """(the server, the route kind, the cassette file or None) for this test.

    `given` is a project's own `laya_server`: of kind ``live`` (or ``replay``) the mode applies to
    it as to ``--laya-url``; of any other kind it is captured and checked, never recorded.
    """
    from pytest_laya.servers.handle import ServerHandle

    wanted = marker_options(request.node).get("server")
    if given is not None and given.kind not in ("live", "replay"):
        return given, "capture", None
    if given is None and (wanted == "fake" or (wanted is None and run.mode.fakes)):
        fake = request.getfixturevalue("_laya_session_fake")
        pin_marker_answers(request, fake.laya, run)
        return ServerHandle(url=fake.url, kind="fake", spec=(run.spec_document or SpecName.TARGET).value), \
            "capture", None
    if not run.mode.uses_cassette_file:
        return given or _live_handle(request, run, wanted), "capture", None
    path = cassette_file(*cassette_location(request.node, run))
    if run.store is not None:
        fail_unfetched(request, path)
    if run.mode.replays or replays_recorded(run, path):  # --laya-record=missing: a readable cassette replays
        return _replay_handle(run, path) if given is None else given, "replay", path
    return given or _live_handle(request, run, wanted), ("record" if run.mode.records else "verify"), path


# -- the spec check ------------------------------------------------------------------------

class _SpecCheck:
    """The route's observer: each exchange held to its claimed spec and counted in the run's tally."""

    def __init__(self, run: LayaRun, route: TestRoute) -> None:
        self.run = run
        self.route = route
        self.label = run.server_label(route.server)
        self.claimed: str | None = None

    def claim(self, exchange: Exchange) -> tuple[str, str]:
        """(spec, why) for one exchange."""
        from pytest_laya.servers.claimed_spec import claimed_spec_of

        server = self.route.server
        chosen = self.run.spec_document
        if chosen is not None:
            return chosen.value, f"--laya-spec {chosen} was given"
        known = SpecName.document(server.spec)
        if known is not None:
            if server.kind == "replay":
                return known.value, "its cassette was recorded under it"
            return known.value, f"a {server.kind} server implements it"
        health = self.run.health_of(server) if server.kind != "replay" else None
        claim = claimed_spec_of(exchange.headers, health)
        return claim.name, claim.of("the server")

    def __call__(self, exchange: Exchange) -> None:
        from pytest_laya.specs.conformance import SPECS, SpecViolationError

        if self.run.progress is not None:
            self.run.progress.exchange(exchange)
        spec, why = self.claim(exchange)
        self.claimed = self.claimed or spec
        self.run.servers.setdefault(self.label, spec)
        if self.route.fake is not None and answered_by_a_fault(self.route.fake, exchange):
            return  # laya_server.fail(503): the test's own answer, a violation of neither spec
        path = exchange.path.split("?", 1)[0]
        if not SPECS[spec]().describes(exchange.method, path, exchange.status):
            # A route the spec lacks, answered other than its 404 or 405 (a 200 from /metrics).
            self.run.note("not checked: requests the specs do not describe",
                          f"{self.label}: {exchange.method} {path} -> {exchange.status}")
            return
        violations = self.run.tracker().check(exchange, server=self.label, claimed=spec)
        if exchange.method == "GET" and exchange.path.split("?")[0] == "/health" and exchange.status == 404:
            self.run.note("gaps", f"{self.label} has no /health (the current spec lets it; the target requires it)")
        if not violations:
            return
        handle = self.route.handle
        replayed = self.route.kind == "replay" and self.route.cassette_path is not None
        enforced = self.run.conformance_mode == "enforce" and self.route.enforce
        target = handle.shown_target(exchange.url) if handle is not None else path
        error = SpecViolationError(exchange, spec, violations, cassette=str(self.route.cassette_path) if replayed else None,
                                   claimed_by=why, target=target, enforced=enforced)
        redact = handle.redact if handle is not None else str
        self.route.violations.append(redact(str(error)))
        if enforced:
            raise error
        summary = violations.summary()
        for violation in [*violations, *([summary] if summary else [])]:
            self.run.note(LISTED_VIOLATIONS, redact(f"{self.route.nodeid}: {self.label} ({spec} spec): "
                                                    f"{exchange.method} {target} -> {exchange.status}: {violation}"))


#: The spec check, for the standalone proxy's route (`pytest_laya.plugin.proxy_command`).
SpecCheck = _SpecCheck


# -- opening and closing a route -------------------------------------------------------------

def _open_cassette(run: LayaRun, route: TestRoute, request: pytest.FixtureRequest,
                   config: CassetteConfig) -> CassetteHandle:
    from pytest_laya.cassettes import laya_vcr

    assert route.cassette_path is not None
    strict = marker_options(request.node).get("strict", run.strict)
    vcr = laya_vcr(record=route.kind == "record", cassette_dir=None, api_key=run.api_key,
                   strict=bool(strict) and route.kind == "replay", record_hint=_record_hint(run.url), config=config)
    return vcr.open(route.cassette_path)  # the file `_choose` worked out (`cassette_file`)


@functools.lru_cache(maxsize=8)
def _record_hint(url: str | None) -> str:
    from pytest_laya.wire.urls import redact_url

    return "--laya-record" + (f" --laya-url {redact_url(url)}" if url else "")


def vcr_config(request: pytest.FixtureRequest) -> CassetteConfig:
    """The test's `laya_vcr_config` (or pytest-recording's ``vcr_config``), read and checked."""
    from pytest_laya.cassettes.config import CassetteConfig

    value = request.getfixturevalue("laya_vcr_config")
    lenient = isinstance(value, FromVcrConfig)
    try:
        return CassetteConfig.from_mapping(value, where="vcr_config" if lenient else "laya_vcr_config",
                                           lenient=lenient)
    except ValueError as exc:
        raise pytest.UsageError(f"{request.node.nodeid}: {exc}") from None


class FromVcrConfig(dict[str, Any]):
    """pytest-recording's ``vcr_config``, handed over by the default `laya_vcr_config`."""


@contextlib.contextmanager
def routed(request: pytest.FixtureRequest, run: LayaRun, laya: list[LayaRoute], config: CassetteConfig,
           refused: list[BaseException] | None = None) -> Iterator[None]:
    """The test's requests through the run's switchboard: `laya` for its Laya servers, pytest-recording's
    cassette or the network for other hosts, and --laya-block-network's refusals (kept in `refused`),
    each showing its request through the project's filters and the kit's secret scrubbing."""
    from pytest_laya.cassettes.scrub import Scrubber

    scrubber = Scrubber(run.api_key, learn=True, config=config)
    refused = refused if refused is not None else []
    if "httpx_mock" in request.fixturenames:  # pytest-httpx patches first, so its answers pass the switchboard
        request.getfixturevalue("httpx_mock")
    with run.switchboard().active(laya, outer=outer_cassette(request), block_network=blocks_network(request.node, run),
                                  allowed_hosts=config.allowed_hosts, ignored_hosts=config.ignore_hosts,
                                  shown=lambda sent: scrubber.shown_target(sent.uri, sent.headers), refused=refused,
                                  mocked=MockedAnswerCheck(run, refused)):
        yield


def open_fake_route(request: pytest.FixtureRequest, run: LayaRun, url: str) -> contextlib.AbstractContextManager[TestRoute]:
    """`laya_fake_server`'s route: whichever client calls the fake (at `url`) gets through
    --laya-block-network, and every response is checked against the target spec and counted in the
    conformance table under ``laya_fake_server``. A violation is listed, never failing the test:
    the fake breaks its spec only where the test's fault script asks it to (`garbage_body()`)."""
    from pytest_laya.servers.handle import ServerHandle

    spec = (run.spec_document or SpecName.TARGET).value
    server = ServerHandle(url=url, kind="fake", spec=spec, label="laya_fake_server")
    return open_test_route(request, run, server, primary=False)


@contextlib.contextmanager
def open_test_route(request: pytest.FixtureRequest, run: LayaRun, server: ServerHandle | None = None, *,
                    primary: bool = True) -> Iterator[TestRoute]:
    """Choose the test's server, open its cassette or capture, and route its traffic for the test;
    then save, check or compare what it recorded (`close_test_route`). `server` is a project's own
    `laya_server` (see `_choose`). The `primary` route is the test's `laya_server` (kept in the
    stash; its violations fail the test); another (`open_fake_route`) is routed beside it."""
    from pytest_laya.intercept import LayaRoute

    given = server
    server, kind, path = _choose(request, run, server)
    if kind == "replay" and path is not None:
        check_freshness(request, run, path)
    route = TestRoute(nodeid=request.node.nodeid, server=server, kind=kind, cassette_path=path, enforce=primary)
    if primary:
        request.node.stash[ROUTE] = route
    request.node.stash.setdefault(OPEN_ROUTES, []).append(route)
    if path is not None:
        pytest_recording_clash(request, path)
        claim_cassette(request, run, path)
    config = vcr_config(request)
    if kind == "record" or (kind in ("verify", "capture") and SpecName.document(server.spec) is None):
        # The weights' identity and the claimed spec: read once per server and session, before
        # any cassette is in place (and never for a server whose spec is known).
        run.health_of(server)
    if kind == "verify":
        route.recorded = _recorded_interactions(run, request, config)
    try:
        route.handle = _capture(run, config) if kind in ("capture", "verify") else _open_cassette(run, route, request, config)
    except Exception:
        if kind == "replay":  # a broken file: counted, so the summary does not say "none used"
            run.count_cassette("broken")
            run.tests.append(_test_record(run, route, "broken", None))
        raise
    check = _SpecCheck(run, route)
    answerer = in_memory_fake(request, route) if given is None and server.kind == "fake" else route.handle.cassette
    route.laya = LayaRoute(answerer, kind="replay" if kind == "replay" else "record",
                           urls=_urls(run, server), observer=check, redact=route.handle.redact)
    route.handle.calls = route.laya.calls
    if route.fake is not None:
        route.fake.steps = route.steps  # calls that reach its port (another process) take them too
    try:
        with routed(request, run, [route.laya], config, refused=route.refused):
            yield route
    finally:
        if route.fake is not None:
            route.fake.steps = None
        try:
            close_test_route(request, run, route, check)
        finally:
            # The route holds the cassette, every exchange and the spec check: let them go with
            # the test, not with the session (the item lives until the run ends).
            if primary:
                del request.node.stash[ROUTE]
            request.node.stash[OPEN_ROUTES].remove(route)


def close_test_route(request: pytest.FixtureRequest, run: LayaRun, route: TestRoute, check: _SpecCheck) -> None:
    """After the test: save or check its cassette, compare in verify mode, count, report, and fail
    the test (at teardown) with any error its code caught and hid."""
    from pytest_laya.cassettes.errors import CassetteError

    handle = route.handle
    assert handle is not None
    failed = request.node.stash.get(FAILED, False) or not request.node.stash.get(CALLED, False)
    outcome = None
    problems: list[str] = []
    drift = None
    broken = None
    try:
        if route.kind == "record" and not failed:
            _set_recorded_provenance(run, route, check)
            broken = broken_cassette(route.cassette_path) if route.cassette_path is not None else None
            if broken is None:
                problems.extend(changed_answers(run, route))
        if route.kind == "record" and run.max_age is not None:
            from pytest_laya.cassettes.freshness import today

            handle.keep_date_after = (today() - datetime.timedelta(days=run.max_age)).isoformat()
        if route.kind in ("replay", "record"):
            try:
                outcome = handle.finish(failed=failed)
            except CassetteError:
                if route.kind == "record":
                    outcome = "unsaved"
                    run.count_cassette(outcome)
                raise
            if outcome == "missing" and route.laya is not None and not route.laya.exchanges and not route.laya.calls:
                outcome = None  # the test made no Laya call: it needs no cassette
            else:
                run.count_cassette(outcome)
            if broken is not None and outcome == "written":
                run.note("broken cassettes replaced by this recording", f"{shown_path(handle.path)}: {broken}")
            if route.kind == "record" and route.cassette_path is not None:
                store_recorded(request, run, route.cassette_path, outcome)
        if route.kind == "verify" and not failed:
            drift = verify_route(request, run, route)
    finally:
        run.tests.append(_test_record(run, route, outcome, drift))
    if failed:
        return
    fail_swallowed(request.node, route)
    if drift is not None and drift.drifted:
        pytest.fail(drift.report(), pytrace=False)


def _test_record(run: LayaRun, route: TestRoute, outcome: str | None, drift: Any) -> dict[str, Any]:
    return {
        "test": route.nodeid,
        "server": run.server_label(route.server),
        "route": route.kind,
        "cassette": str(route.cassette_path) if route.cassette_path is not None else None,
        "outcome": outcome,
        "exchanges": route.exchanges,
        "violations": list(route.violations),
        "drift": drift.to_json() if drift is not None else None,
        "latency_ms": [round(exchange.elapsed_s * 1000, 3) for exchange in route.laya.exchanges]
        if route.laya is not None else [],
    }


def _set_recorded_provenance(run: LayaRun, route: TestRoute, check: _SpecCheck) -> None:
    """Where the recording came from: the server kind, the spec it claimed, which weights answered.

    Only what the server says: nothing about the machine that recorded (no local versions), so
    recording one server from two machines writes the same bytes.
    """
    from pytest_laya.cassettes.provenance import recorded_identity

    handle = route.handle
    assert handle is not None
    health = run.health_of(route.server)
    spec = check.claimed or (health.spec if health else None) or "current"
    try:
        identity = recorded_identity(handle, health, getattr(route.server, "model", None))
    except Exception:  # noqa: BLE001 - provenance never fails a test
        identity = None
    # A test (or a fixture of the project) may have named the server already (set_provenance).
    server = (handle.provenance or {}).get("server") or (
        _server_seen(route, identity) if route.server.kind == "live" else route.server.kind)
    handle.set_provenance(server=server, spec=spec, identity=identity)


def _server_seen(route: TestRoute, identity: Any) -> str:
    """A live server as the recording saw it: the checkpoint that answered, else the ``Server``
    header it sent, else the URL it was recorded from (credentials and query left out)."""
    from pytest_laya.wire.urls import redact_url

    if identity is not None and getattr(identity, "checkpoint", None):
        return str(identity.checkpoint)
    for exchange in reversed(route.laya.exchanges if route.laya is not None else []):
        name = exchange.headers.get("server")
        if name:
            return str(name)
    return redact_url(route.server.url)


def _urls(run: LayaRun, server: ServerHandle) -> list[str]:
    from pytest_laya.servers.handle import REPLAY_URL

    urls = [server.url]
    if server.kind == "replay":
        urls.append(REPLAY_URL)
        if run.url:
            urls.append(run.url)
    return urls


def _capture(run: LayaRun, config: CassetteConfig) -> CassetteHandle:
    """A record-mode cassette that is never saved: live, fake and reference traffic, scrubbed, in memory."""
    from pytest_laya.cassettes import laya_vcr

    handle = laya_vcr(record=True, cassette_dir=None, api_key=run.api_key, strict=False,
                      config=config).open("<capture>")
    handle.discard()
    return handle


def _recorded_interactions(run: LayaRun, request: pytest.FixtureRequest, config: CassetteConfig) -> list[Any] | None:
    """verify: the cassette's interactions (None when there is no cassette)."""
    from pytest_laya.cassettes import laya_vcr

    directory, relpath = cassette_location(request.node, run)
    old = laya_vcr(record=False, cassette_dir=directory, api_key=run.api_key, strict=False, config=config).open(relpath)
    return list(old.cassette.data) if old.exists else None


def outer_cassette(request: pytest.FixtureRequest) -> Any:
    """pytest-recording's cassette, when the test is marked ``@pytest.mark.vcr``: other hosts go there."""
    if request.node.get_closest_marker("vcr") is None or not request.config.pluginmanager.has_plugin("recording"):
        return None
    try:
        return request.getfixturevalue("vcr")
    except pytest.FixtureLookupError:
        return None

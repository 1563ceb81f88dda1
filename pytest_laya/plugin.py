"""pytest-laya's pytest plugin (entry point ``laya``): options, the marker, fixtures, the summary.

Kept thin on purpose: the client, the fake, the cassettes and the validation live in their own
modules and work without pytest. Every fixture here is a seam a project can override in its
`conftest.py`. Heavy pieces (vcrpy, the reference server and so torch) are imported only by the
fixtures that need them.

After a run of the whole suite (no -k/-m, no paths or node ids but the rootdir or testpaths,
nothing deselected, no --lf/--ff, no collection error, not stopped early) in replay or record
mode, cassettes that pytest-laya wrote (they carry ``metadata.pytest_laya``) under the cassette
directories in use and that no test used are listed as unused: in the terminal summary and as
``unused_cassettes`` in the JSON report (null when not computed). That never fails the run.
Cassettes of tests skipped before reaching theirs, and of modules skipped at collection, count
as used.

Under pytest-xdist each worker sends what it saw (cassette counts, the cassettes it used, the
servers and conformance rows, what it collected) to the controller in its `workeroutput`; the
controller merges them, so its summary, its JSON report and its unused-cassette check cover the
whole run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .provenance import laya_version, read_health, recorded_identity
from .unused_cassettes import CASSETTE_SUFFIX, find_unused, selection_problems

MODES = ("replay", "record", "live", "fake", "verify")
SERVERS = ("fake", "reference", "live")
MARKER_OPTIONS = ("cassette", "server", "strict")
_FAILED = pytest.StashKey[bool]()
_CALLED = pytest.StashKey[bool]()
_STATE = pytest.StashKey["LayaRun"]()
#: The key of pytest-laya's part of an xdist worker's `workeroutput`.
WORKEROUTPUT_KEY = "pytest_laya"


# -- options ------------------------------------------------------------------------------

def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("laya", "Laya decision servers (pytest-laya)")
    group.addoption("--laya-mode", choices=MODES, default=None,
                    help="how tests reach Laya: replay cassettes (default), record them, a live server, the fake, "
                         "or verify (run live and compare every answer with the test's cassette).")
    group.addoption("--laya-record", action="store_true", default=False,
                    help="short for --laya-mode=record: refresh the cassettes of the tests that run.")
    group.addoption("--laya-url", default=None, help="URL of a live served Laya, e.g. http://127.0.0.1:8000.")
    group.addoption("--laya-api-key", default=None,
                    help="bearer token for the live server (default: LAYA_SERVED_API_KEY). Never written to cassettes or reports.")
    group.addoption("--laya-spec", choices=("current", "target"), default=None,
                    help="the spec a live server is held to (default: current; target for a reference server).")
    group.addoption("--laya-cassette-dir", default=None,
                    help="where cassettes live (default: cassettes/ beside each test module).")
    group.addoption("--laya-strict", dest="laya_strict", action="store_true", default=None,
                    help="fail a replayed test that leaves recorded interactions unplayed (default).")
    group.addoption("--no-laya-strict", dest="laya_strict", action="store_false",
                    help="allow unplayed interactions.")
    group.addoption("--laya-report", default=None, metavar="PATH", help="write the pytest-laya summary as JSON.")
    group.addoption("--laya-checkpoint", default=None,
                    help="checkpoint for laya_reference_server (default: the embedded tiny checkpoint).")
    group.addoption("--laya-limit", action="append", default=[], metavar="NAME=N",
                    help="a request limit of the server under the server contract (pytest_laya.suites.server), "
                         "e.g. max_questions=32; wins over /health's limits and the spec's defaults. Repeatable.")
    parser.addini("laya_mode", "default for --laya-mode", default="replay")
    parser.addini("laya_url", "default for --laya-url", default="")
    parser.addini("laya_spec", "default for --laya-spec", default="")
    parser.addini("laya_cassette_dir", "default for --laya-cassette-dir (relative to the ini file)", default="")
    parser.addini("laya_strict", "default for --laya-strict", type="bool", default=True)
    parser.addini("laya_report", "default for --laya-report", default="")
    # -- verify mode
    group.addoption("--laya-verify-tolerance", type=float, default=None, metavar="X",
                    help="verify mode: how far a number (a probability) may move from its recording (default 1e-4).")
    parser.addini("laya_verify_tolerance", "default for --laya-verify-tolerance", default="")


@dataclass
class LayaRun:
    """The run's resolved settings and what it saw, for fixtures and the summary.

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
    conformance: Any = None

    def tracker(self) -> Any:
        """The conformance tracker, made on first use: start-up then imports neither httpx nor the specs."""
        if self.conformance is None:
            from .conformance import Conformance

            self.conformance = Conformance()
        return self.conformance
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
    #: verify mode: how far a number may move from its recording, and what was compared
    #: (a `pytest_laya.verify.VerifyTotals`, made by `verifications()`).
    verify_tolerance: float = 1e-4
    verify: Any = None

    def verifications(self) -> Any:
        if self.verify is None:
            from .verify import VerifyTotals

            self.verify = VerifyTotals()
        return self.verify
    #: Extra summary lines by section title (the server contract's target gaps and measurements).
    notes: dict[str, list[str]] = field(default_factory=dict)

    def note(self, section: str, line: str) -> None:
        """Add `line` under `section` in the terminal summary and the JSON report (once: repeats are dropped)."""
        lines = self.notes.setdefault(section, [])
        if line not in lines:
            lines.append(line)


def _resolve(config: pytest.Config) -> LayaRun:
    opt = config.option
    mode = opt.laya_mode
    if opt.laya_record:
        if mode not in (None, "record"):
            raise pytest.UsageError(f"--laya-record asks for record mode, but --laya-mode={mode} was given too: pass one of them")
        mode = "record"
    mode = mode or config.getini("laya_mode") or "replay"
    if mode not in MODES:
        raise pytest.UsageError(f"laya_mode = {mode!r} in the ini file: use one of {', '.join(MODES)}")
    url = opt.laya_url or config.getini("laya_url") or None
    spec = opt.laya_spec or config.getini("laya_spec") or None
    if spec not in (None, "current", "target"):
        raise pytest.UsageError(f"laya_spec = {spec!r} in the ini file: use current or target")
    cassette_dir = opt.laya_cassette_dir or config.getini("laya_cassette_dir") or None
    base = Path(config.inipath).parent if config.inipath and not opt.laya_cassette_dir else Path(config.invocation_params.dir)
    report = opt.laya_report or config.getini("laya_report") or None
    strict = opt.laya_strict if opt.laya_strict is not None else config.getini("laya_strict")
    api_key = opt.laya_api_key or os.environ.get("LAYA_SERVED_API_KEY") or None
    run = LayaRun(mode=mode, url=url.rstrip("/") if url else None, api_key=api_key, spec=spec,
                  cassette_dir=(base / cassette_dir) if cassette_dir else None, strict=bool(strict),
                  report=Path(report) if report else None, checkpoint=opt.laya_checkpoint)
    run.verify_tolerance = _verify_tolerance(config)
    if run.url:
        _check_url(run)
    return run


def _verify_tolerance(config: pytest.Config) -> float:
    """--laya-verify-tolerance, else the ini key, else the default; a bad value is a usage error."""
    import math

    from .verify import DEFAULT_TOLERANCE

    value = config.option.laya_verify_tolerance
    where = "--laya-verify-tolerance"
    if value is None:
        text = str(config.getini("laya_verify_tolerance") or "").strip()
        if not text:
            return DEFAULT_TOLERANCE
        where = f"laya_verify_tolerance = {text!r} in the ini file"
        try:
            value = float(text)
        except ValueError:
            value = math.nan
    if not (value >= 0 and math.isfinite(value)):
        raise pytest.UsageError(f"{where}: the verify tolerance must be a number >= 0, e.g. 1e-4")
    return float(value)


def _check_url(run: LayaRun) -> None:
    from .errors import LayaError
    from .settings import ClientSettings, redact_url

    try:
        ClientSettings.resolve(run.url, environ={})
    except LayaError as exc:
        raise pytest.UsageError(f"--laya-url: {exc.summary}") from None
    if run.mode not in ("live", "record", "verify"):
        return
    import httpx

    try:
        httpx.get(run.url + "/health", timeout=5.0)
    except httpx.HTTPError as exc:
        raise pytest.UsageError(
            f"--laya-url {redact_url(run.url)} cannot be reached ({type(exc).__name__}): start the server or fix the URL"
        ) from None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "laya(cassette=None, server=None, strict=None): pytest-laya options for one test: the cassette file "
        "name, the server (fake, reference or live) and strict unused-interaction checking.",
    )
    if config.option.help:
        return
    run = _resolve(config)
    config.stash[_STATE] = run
    config.pluginmanager.register(_Progress(run), f"laya-progress-{id(config)}")
    config.pluginmanager.register(_async_fixtures(config), f"laya-async-fixtures-{id(config)}")


def _run(config: pytest.Config) -> LayaRun:
    return config.stash[_STATE]


def _marker(node: pytest.Item) -> dict[str, Any]:
    marker = node.get_closest_marker("laya")
    if marker is None:
        return {}
    if marker.args:
        raise pytest.UsageError(f"{node.nodeid}: @pytest.mark.laya takes keyword options only ({', '.join(MARKER_OPTIONS)})")
    unknown = sorted(set(marker.kwargs) - set(MARKER_OPTIONS))
    if unknown:
        raise pytest.UsageError(f"{node.nodeid}: @pytest.mark.laya has no option {', '.join(map(repr, unknown))}; "
                                f"use {', '.join(MARKER_OPTIONS)}")
    server = marker.kwargs.get("server")
    if server is not None and server not in SERVERS:
        raise pytest.UsageError(f"{node.nodeid}: @pytest.mark.laya(server={server!r}): use one of {', '.join(SERVERS)}")
    return dict(marker.kwargs)


def _overridden(item: pytest.Item, name: str) -> bool:
    """Whether the fixture `name` that `item` gets is a project's own, not this plugin's."""
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.get(name) if info is not None else None
    return bool(defs) and getattr(defs[-1].func, "__module__", __name__) != __name__


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run = config.stash.get(_STATE, None)
    if run is None:
        return
    for item in items:
        options = _marker(item)  # typos fail the run at start-up, not one test at a time
        needs_url = run.mode in ("live", "record", "verify") and options.get("server") in (None, "live")
        uses_laya = any(name.startswith(("laya_", "async_laya_")) for name in getattr(item, "fixturenames", ()))
        if needs_url and uses_laya and not run.url and not _overridden(item, "laya_server"):
            raise pytest.UsageError(f"--laya-mode={run.mode} needs --laya-url URL (or laya_url in the ini file), "
                                    f"or @pytest.mark.laya(server='reference') on the test ({item.nodeid})")


# -- what the run selected and used, for the unused-cassette check ------------------------

def pytest_deselected(items: list[pytest.Item]) -> None:
    if items:
        run = items[0].config.stash.get(_STATE, None)
        if run is not None:
            run.partial.append(f"{len(items)} deselected")


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    report = yield
    run = collector.config.stash.get(_STATE, None)
    if run is not None:
        if report.failed:
            run.partial.append(f"collection error in {report.nodeid or 'the session'}")
        elif report.skipped and isinstance(collector, pytest.Module):
            run.skipped_modules.add(Path(collector.path))
    return report


def pytest_collection_finish(session: pytest.Session) -> None:
    run = session.config.stash.get(_STATE, None)
    if run is not None:
        run.modules.update(Path(item.path) for item in session.items)
        run.collected = max(run.collected, len(session.items))


class _Progress:
    """Counts the tests that ran, in this process or (on an xdist controller) relayed by workers.

    A plugin object per config, because the hook has no config (and pytester runs nest).
    """

    def __init__(self, run: LayaRun) -> None:
        self.run = run

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        self.run.ran += 1


def _cassette_location(node: pytest.Item, run: LayaRun) -> tuple[Path, Path]:
    """(cassette directory, path relative to it) of a test's cassette, as `laya_cassette` uses them."""
    from .cassettes import cassette_relpath

    options = _marker(node)
    directory = run.cassette_dir or Path(node.path).parent / "cassettes"
    relpath = Path(options["cassette"]) if options.get("cassette") else Path(cassette_relpath(node.nodeid))
    return directory, relpath


def _cassette_file(directory: Path, relpath: Path) -> Path:
    """The file vcrpy opens for `relpath` in `directory` (``.yaml`` added as `laya_vcr` adds it)."""
    full = str(directory / relpath)
    return Path(full if full.endswith(CASSETTE_SUFFIX) else full + CASSETTE_SUFFIX).resolve()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    # Unplayed interactions fail the test itself (not its teardown): checked as soon as its body
    # returned cleanly. The cassette's own check at teardown is then skipped (the test failed).
    result = yield
    handle = getattr(item, "funcargs", {}).get("laya_cassette")
    if handle is not None and not handle.record and handle.strict:
        handle.check_all_played()
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    report = yield
    if report.failed:
        item.stash[_FAILED] = True
    if report.when == "call":
        item.stash[_CALLED] = True
    if report.when == "setup" and not report.passed and "laya_cassette" in getattr(item, "fixturenames", ()):
        # Skipped (or broken) before reaching its cassette: the test still owns it.
        run = item.config.stash.get(_STATE, None)
        if run is not None and run.mode in ("replay", "record"):
            try:
                run.used_cassettes.add(_cassette_file(*_cassette_location(item, run)))
            except pytest.UsageError:
                pass
    return report


# -- pytest-xdist -------------------------------------------------------------------------

def _export(run: LayaRun) -> dict[str, Any]:
    """What a worker sends the controller (plain data: execnet carries no sets or paths)."""
    return {
        "cassettes": dict(run.cassettes),
        "used_cassettes": sorted(str(p) for p in run.used_cassettes),
        "servers": dict(run.servers),
        "conformance": run.conformance.rows() if run.conformance else [],
        "modules": sorted(str(p) for p in run.modules),
        "skipped_modules": sorted(str(p) for p in run.skipped_modules),
        "partial": list(run.partial),
        "collected": run.collected,
        "verify": run.verify.results if run.verify else [],
        "notes": {section: list(lines) for section, lines in run.notes.items()},
    }


def _merge(run: LayaRun, data: Mapping[str, Any]) -> None:
    for key, count in data.get("cassettes", {}).items():
        run.cassettes[key] = run.cassettes.get(key, 0) + int(count)
    run.used_cassettes.update(Path(p) for p in data.get("used_cassettes", ()))
    run.servers.update(data.get("servers", {}))
    if data.get("conformance"):
        run.tracker().merge_rows(data["conformance"])
    run.modules.update(Path(p) for p in data.get("modules", ()))
    run.skipped_modules.update(Path(p) for p in data.get("skipped_modules", ()))
    run.partial.extend(data.get("partial", ()))
    run.collected = max(run.collected, int(data.get("collected", 0)))
    for result in data.get("verify", ()):
        run.verifications().results.append(result)
    for section, lines in data.get("notes", {}).items():
        for line in lines:
            run.note(section, line)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist controller: fold a finished worker's results into the run's totals."""
    run = node.config.stash.get(_STATE, None)
    if run is None:
        return
    output = getattr(node, "workeroutput", None) or {}
    data = output.get(WORKEROUTPUT_KEY)
    if data is None:
        run.partial.append(f"worker {getattr(node, 'gateway', node)!s} sent no results" + (f" ({error})" if error else ""))
        return
    _merge(run, data)
    if error or output.get("shouldfail") or output.get("shouldstop") or output.get("exitstatus") == int(pytest.ExitCode.INTERRUPTED):
        run.partial.append("a worker stopped early")


# -- fixtures -----------------------------------------------------------------------------

@pytest.fixture(scope="session")
def laya_run(pytestconfig: pytest.Config) -> LayaRun:
    """The run's pytest-laya settings (mode, URL, cassette dir, strictness)."""
    return _run(pytestconfig)


@pytest.fixture(scope="session")
def _laya_session_fake() -> Iterator[Any]:
    from .fake import FakeLayaServer

    with FakeLayaServer() as server:
        yield server


@pytest.fixture(scope="session")
def laya_reference_server(laya_run: LayaRun) -> Iterator[Any]:
    """The reference server on the tiny checkpoint (or --laya-checkpoint), once per session, on a free port."""
    from .servers import ServerHandle

    try:
        from reference_server.app import create_app
        from reference_server.engine import LayaEngine
        from reference_server.serving import ServerThread
        from reference_server.tiny_checkpoint import embedded_checkpoint_dir
    except ImportError as exc:  # pragma: no cover - depends on the install
        pytest.fail(f"laya_reference_server needs the reference extra (pip install 'pytest-laya[reference]'): {exc}")
    source = laya_run.checkpoint or str(embedded_checkpoint_dir())
    engine = LayaEngine({"tiny" if not laya_run.checkpoint else Path(source).name or "model": source})
    with ServerThread(create_app(engine)) as thread:
        import time

        import httpx

        deadline = time.monotonic() + 120
        while httpx.get(thread.url + "/readyz").status_code != 200:
            if time.monotonic() > deadline:
                pytest.fail(f"the reference server on {thread.url} did not become ready within 120 s")
            time.sleep(0.05)
        yield ServerHandle(url=thread.url, kind="reference", spec="target")


@pytest.fixture
def laya_fake_server() -> Iterator[Any]:
    """A fresh fake Laya on a loopback port, speaking the target spec, with a fault script
    (`refuse()`, `reset()`, `delay(s)`, `trickle()`, `status(503, retry_after=1)`, `garbage_body()`...)."""
    from .fake import FakeLayaServer

    with FakeLayaServer() as server:
        yield server


@pytest.fixture
def laya_server(request: pytest.FixtureRequest, laya_run: LayaRun) -> Any:
    """The server this test talks to: a `ServerHandle` with `url`, `kind`, `spec`, `health()`, `identity()`.

    Chosen by the mode (replay: the cassette; live/record: --laya-url; fake: the session's fake),
    or by `@pytest.mark.laya(server=...)`.
    """
    from .servers import REPLAY_URL, ServerHandle

    wanted = _marker(request.node).get("server")
    if wanted == "reference":
        return request.getfixturevalue("laya_reference_server")
    if wanted == "fake" or (wanted is None and laya_run.mode == "fake"):
        fake = request.getfixturevalue("_laya_session_fake")
        return ServerHandle(url=fake.url, kind="fake", spec="target")
    if laya_run.mode == "replay" and wanted is None:
        # Held to the spec its cassette was recorded under, unless --laya-spec says otherwise.
        from .cassettes import recorded_provenance

        provenance = recorded_provenance(_cassette_file(*_cassette_location(request.node, laya_run))) or {}
        recorded_spec = provenance.get("spec") if provenance.get("spec") in ("current", "target") else None
        source = provenance.get("server") if isinstance(provenance.get("server"), str) else None
        return ServerHandle(url=laya_run.url or REPLAY_URL, kind="replay",
                            spec=laya_run.spec or recorded_spec or "current", recorded_from=source)
    if not laya_run.url:
        pytest.fail(f"server={wanted or 'live'} needs --laya-url URL")
    return ServerHandle(url=laya_run.url, kind="live", spec=laya_run.spec or "current", api_key=laya_run.api_key)


def _pytest_recording_clash(request: pytest.FixtureRequest, ours: Path) -> None:
    """Fail a test that pytest-recording's `vcr` marker would give the very same cassette file."""
    if request.node.get_closest_marker("vcr") is None or not request.config.pluginmanager.has_plugin("recording"):
        return
    try:
        theirs = Path(request.getfixturevalue("vcr_cassette_dir")) / request.getfixturevalue("default_cassette_name")
    except pytest.FixtureLookupError:
        return
    if _cassette_file(theirs.parent, Path(theirs.name)) == ours:
        pytest.fail(f"{request.node.nodeid} is marked @pytest.mark.vcr and uses a pytest-laya cassette: both would "
                    f"use {ours}. Give pytest-laya's another name with @pytest.mark.laya(cassette=...) "
                    f"(or pytest-recording's with @pytest.mark.default_cassette(...)).", pytrace=False)


@pytest.fixture(scope="session")
def _laya_recorded_health(laya_run: LayaRun) -> dict[str, Any]:
    """/health documents of the servers being recorded, by URL: read once per session (per xdist
    worker), before any test's fixtures, so that no cassette -- ours or pytest-recording's -- is
    in place to capture the read. Empty outside record mode."""
    cache: dict[str, Any] = {}
    if laya_run.mode == "record" and laya_run.url:
        from .servers import ServerHandle

        cache[laya_run.url] = read_health(ServerHandle(url=laya_run.url, kind="live", api_key=laya_run.api_key))
    return cache


@pytest.fixture
def laya_cassette(request: pytest.FixtureRequest, laya_run: LayaRun, laya_server: Any,
                  _laya_recorded_health: dict[str, Any]) -> Iterator[Any]:
    """The active cassette (`CassetteHandle`) in replay and record mode against a live server; None otherwise.

    When recording, the cassette's provenance says where it came from: the server kind, the
    spec, the weights (`identity`: a response's `served_by`, else the server's /health entry for
    the routed model) and the installed laya's version. /health is read once per session, or
    once before a test if that read failed, never inside a cassette and never in replay.
    """
    if laya_run.mode not in ("replay", "record", "verify") or laya_server.kind not in ("replay", "live"):
        yield None
        return
    from .cassettes import laya_vcr

    options = _marker(request.node)
    directory, relpath = _cassette_location(request.node, laya_run)
    path = _cassette_file(directory, relpath)
    _pytest_recording_clash(request, path)
    owner = laya_run.cassette_owners.setdefault(path, request.node.nodeid)
    if owner != request.node.nodeid:
        pytest.fail(f"{request.node.nodeid} and {owner} both use the cassette {path}: recording would keep "
                    f"only one test's interactions, and replay would leave the other's unplayed. Give each "
                    f"test its own cassette (drop @pytest.mark.laya(cassette=...), or name another file).",
                    pytrace=False)
    laya_run.used_cassettes.add(path)  # the test owns it, whatever happens to it below
    if laya_run.mode == "verify":
        yield from _verify_cassette(request, laya_run, laya_server, directory, relpath, path)
        return
    record = laya_run.mode == "record"
    strict = options.get("strict", laya_run.strict)
    vcr = laya_vcr(record=record, cassette_dir=directory, api_key=laya_run.api_key,
                   strict=strict, record_hint="--laya-record")
    provenance = None
    health = None
    if record:
        provenance = {"server": laya_server.kind, "spec": laya_server.spec, "laya_version": laya_version()}
        health = _laya_recorded_health.get(laya_server.url)
        if health is None:  # not read yet, or it failed: once more, before the cassette is in place
            health = _laya_recorded_health[laya_server.url] = read_health(laya_server)
    handle = None
    try:
        with vcr.cassette(relpath, provenance=provenance) as handle:
            yield handle
            if request.node.stash.get(_FAILED, False) or not request.node.stash.get(_CALLED, False):
                handle.discard()  # failed, or never ran (interrupted): nothing to save or to hold it to
            elif record:
                try:
                    handle.set_provenance(identity=recorded_identity(handle, health, getattr(laya_server, "model", None)))
                except Exception:  # noqa: BLE001 - provenance never fails a test
                    pass
    finally:
        if handle is not None:
            laya_run.used_cassettes.add(handle.path.resolve())
            if handle.outcome:
                key = {"replayed": "played", "written": "recorded"}.get(handle.outcome, handle.outcome)
                laya_run.cassettes[key] = laya_run.cassettes.get(key, 0) + 1


def _verify_cassette(request: pytest.FixtureRequest, laya_run: LayaRun, laya_server: Any,
                     directory: Path, relpath: Path, path: Path) -> Iterator[Any]:
    """`laya_cassette` in verify mode: the test runs live while its cassette is kept aside, and
    every live answer is compared with the recorded one (`pytest_laya.verify`); drift fails the
    test at teardown with the differences and the command that records the cassette again.

    The live exchanges are captured by a record-mode cassette that is never saved, so they are
    scrubbed and normalised exactly as a re-recording would store them.
    """
    from .cassettes import laya_vcr
    from .settings import redact_url
    from .verify import verify_interactions

    with laya_vcr(record=False, cassette_dir=directory, api_key=laya_run.api_key, strict=False).cassette(relpath) as old:
        missing = not old.exists
        recorded = list(old.cassette.data)
    live = laya_vcr(record=True, cassette_dir=directory, api_key=laya_run.api_key, strict=False,
                    record_hint="--laya-record")
    with live.cassette(relpath) as handle:
        try:
            yield handle
        finally:
            handle.discard()  # verify never writes a cassette
    invoked = Path(request.config.invocation_params.dir)
    shown = os.path.relpath(path, invoked) if path.is_relative_to(invoked) else str(path)
    test = os.path.relpath(request.node.path, invoked) if Path(request.node.path).is_relative_to(invoked) \
        else str(request.node.path)
    test += "::" + request.node.nodeid.partition("::")[2] if "::" in request.node.nodeid else ""
    rerecord = f"pytest '{test}' --laya-record" + (f" --laya-url {redact_url(laya_run.url)}" if laya_run.url else "")
    if request.config.option.laya_cassette_dir:
        rerecord += f" --laya-cassette-dir {request.config.option.laya_cassette_dir}"
    result = verify_interactions(recorded, list(handle.cassette.data), path=shown, rerecord=rerecord,
                                 server=redact_url(laya_server.url), tolerance=laya_run.verify_tolerance,
                                 missing=missing)
    laya_run.verifications().add(result)
    if result.drifted:
        pytest.fail(result.report(), pytrace=False)


def spec_observer(laya_run: LayaRun, server: Any, cassette: Any = None) -> Any:
    """An ``on_exchange`` callback for a client talking to `server`, as the fixtures give theirs.

    Every response is checked against both specs and counted in the run's conformance table; one
    that breaks the spec `server` claims raises `SpecViolationError`, failing the test (naming
    `cassette`, the `laya_cassette` handle, when the response was replayed from it). Suites
    built on the plugin (`pytest_laya.suites.server`) feed their own clients through it.
    """
    from .conformance import SpecViolationError

    if server.kind != "replay":
        label = f"{server.kind} {server.url}"
    else:
        label = f"replay of {server.recorded_from}" if getattr(server, "recorded_from", None) else "replay"

    def observe(exchange: Any) -> None:
        violations = laya_run.tracker().check(exchange, server=label, claimed=server.spec)
        if violations:
            replayed = cassette is not None and not getattr(cassette, "record", True)
            raise SpecViolationError(exchange, server.spec, violations,
                                     cassette=str(cassette.path) if replayed else None)

    laya_run.servers.setdefault(label, server.spec)
    return observe


@pytest.fixture
def laya_client(laya_run: LayaRun, laya_server: Any, laya_cassette: Any) -> Iterator[Any]:
    """A `ServedLayaClient` bound to `laya_server`; every response it sees is checked against the server's spec."""
    with laya_server.client(on_exchange=spec_observer(laya_run, laya_server, laya_cassette)) as client:
        yield client


@pytest.fixture
def laya_model(laya_run: LayaRun, laya_server: Any, laya_cassette: Any) -> Iterator[Any]:
    """The served client as a `DecisionModel` (`ServedLayaModel`), for contract-style tests."""
    from .models import ServedLayaModel

    model = ServedLayaModel(laya_server.url, name=f"served-laya ({laya_server.kind})", api_key=laya_server.api_key,
                            model=laya_server.model, on_exchange=spec_observer(laya_run, laya_server, laya_cassette))
    yield model
    model.close()


async def _async_laya_client(laya_run: LayaRun, laya_server: Any, laya_cassette: Any):
    """The async twin of `laya_client`: an `AsyncServedLayaClient`, every response checked the same way.

    With pytest-asyncio installed this is a pytest-asyncio fixture, so it works in its strict
    mode as well as in auto mode; without it, a plain async fixture, which anyio's pytest plugin
    runs for its own tests.
    """
    from .client import AsyncServedLayaClient

    async with AsyncServedLayaClient(laya_server.url, api_key=laya_server.api_key, model=laya_server.model,
                                     on_exchange=spec_observer(laya_run, laya_server, laya_cassette)) as client:
        yield client


def _async_fixtures(config: pytest.Config) -> Any:
    """A plugin holding `async_laya_client`, declared the way the installed async runner reads it."""
    import types

    holder = types.ModuleType("pytest_laya.plugin.async_fixtures", "pytest-laya's async fixtures")
    if config.pluginmanager.has_plugin("asyncio"):
        import pytest_asyncio

        holder.async_laya_client = pytest_asyncio.fixture(_async_laya_client, name="async_laya_client")
    else:
        holder.async_laya_client = pytest.fixture(_async_laya_client, name="async_laya_client")
    return holder


# -- summary ------------------------------------------------------------------------------

def _summary(run: LayaRun) -> dict[str, Any]:
    return {
        "mode": run.mode,
        "servers": run.servers,
        "cassettes": dict(run.cassettes),
        "conformance": run.conformance.rows() if run.conformance else [],
        "unused_cassettes": run.unused_cassettes,
        "verify": run.verify.results if run.verify else None,
        "notes": {section: list(lines) for section, lines in run.notes.items()},
    }


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int):
    # A wrapper, so this runs after the session's fixtures are torn down (even if that raised),
    # and the innermost one, so it is done before xdist sends `workeroutput` and before the
    # terminal summary is written.
    try:
        return (yield)
    finally:
        _conclude(session, exitstatus)


def _conclude(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    run = config.stash.get(_STATE, None)
    if run is None:
        return
    if session.shouldfail or session.shouldstop or exitstatus == pytest.ExitCode.INTERRUPTED:
        run.partial.append("stopped early")
    if hasattr(config, "workerinput"):  # an xdist worker: the controller reports
        config.workeroutput[WORKEROUTPUT_KEY] = _export(run)  # type: ignore[attr-defined]
        return
    if run.ran < run.collected:
        run.partial.append(f"{run.collected - run.ran} of {run.collected} collected tests did not run")
    run.unused_cassettes = None
    if run.mode in ("replay", "record") and not run.partial and not selection_problems(config):
        run.unused_cassettes = find_unused(run, config.rootpath)
    if run.report is not None:
        run.report.parent.mkdir(parents=True, exist_ok=True)
        tmp = run.report.with_name(run.report.name + ".tmp")
        tmp.write_text(json.dumps(_summary(run), indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, run.report)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    run = config.stash.get(_STATE, None)
    if run is None:
        return
    summary = _summary(run)
    unused = summary["unused_cassettes"] or []
    if not summary["servers"] and not any(summary["cassettes"].values()) and not unused and not run.notes:
        return
    tr = terminalreporter
    tr.section("pytest-laya")
    c = summary["cassettes"]
    tr.line(f"mode: {run.mode}; servers: {', '.join(f'{k} ({v} spec)' for k, v in run.servers.items()) or 'none'}")
    tr.line(f"cassettes: {c.get('played', 0)} played, {c.get('recorded', 0)} recorded, "
            f"{c.get('unchanged', 0)} re-recorded unchanged, {c.get('discarded', 0)} discarded (test failed)")
    for section, lines in run.notes.items():  # before the conformance table, which ends the section
        tr.line(f"{section}:")
        for line in lines:
            tr.line(f"  {line}")
    if run.notes and summary["conformance"]:
        tr.line("conformance (each server's responses, against each spec):")
    for row in summary["conformance"]:
        tr.line(f"  {row['server']:<40} {row['spec']:<8} operations {row['operations_met']}/{row['operations_seen']}, "
                f"headers {row['headers_met']}/{row['headers_seen']}, {row['violations']} violations in {row['exchanges']} responses")
    if run.verify:
        for number, line in enumerate(run.verify.lines()):
            tr.line(line, red=number > 0)
    if c.get("discarded"):
        tr.line("a test failed while recording: its old cassette was kept; fix the test and run --laya-record again")
    if unused:
        tr.line(f"unused cassettes: {len(unused)} (delete them or run the tests that own them)", yellow=True)
        for path in unused:
            tr.line(f"  {path}")

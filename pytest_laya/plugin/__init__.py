"""pytest-laya's pytest plugin (entry point ``laya``): hooks and fixtures, each handing over.

The run's state lives in a `LayaRun` (`run`); options in `options`, the marker in `markers`, each
test's route through the interception layer in `routes` (its cassette file in
`cassette_fixture`, verify's comparison in `verify_mode`), the reference server in `servers`,
the summary and the JSON report in `summary`, unused cassettes in `unused`, traceback trimming
in `tracebacks`. Every fixture here is a seam a project can override in its `conftest.py`.
Heavy pieces (vcrpy, the reference server and so torch) are imported only by what needs them.
"""

from __future__ import annotations

import types
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_laya.plugin import interrupts, options, summary
from pytest_laya.plugin.cassette_fixture import cassette_of, find_shared_cassettes, replays_recorded
from pytest_laya.plugin.caught_errors import fail_swallowed
from pytest_laya.plugin.handle import LayaServer, skip_scripted_faults
from pytest_laya.plugin.markers import MARKER_HELP, blocks_network, check_test_pins, marker_options, pin_marker_answers
from pytest_laya.plugin.routes import OPEN_ROUTES, ROUTE, TestRoute, note_outcome, open_fake_route, route_of
from pytest_laya.plugin.run import WORKEROUTPUT_KEY, LayaRun
from pytest_laya.plugin.servers import reference_server, spec_observer
from pytest_laya.plugin.store import fetch_missing
from pytest_laya.plugin.switch import FromVcrConfig, routed, vcr_config
from pytest_laya.plugin.tracebacks import hide_library_frames
from pytest_laya.plugin.unused import note_dropped_items

if TYPE_CHECKING:  # pragma: no cover
    from pytest_laya.cassettes import CassetteHandle
    from pytest_laya.client import AsyncServedLayaClient, ServedLayaClient
    from pytest_laya.fake import FakeLayaServer
    from pytest_laya.models import ServedLayaModel
    from pytest_laya.plugin.proxy import LayaProxy, SessionProxy
    from pytest_laya.servers import ServerHandle

__all__ = ["LayaRun", "LayaServer", "WORKEROUTPUT_KEY", "spec_observer"]

_STATE = pytest.StashKey[LayaRun]()
_SIZE_LIMIT_BEFORE = pytest.StashKey[int]()
_DERIVED_BEFORE = pytest.StashKey[Any]()


def _run(config: pytest.Config) -> LayaRun | None:
    return config.stash.get(_STATE, None)


# -- hooks ---------------------------------------------------------------------------------

def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    if config.option.help:
        return
    run = config.stash[_STATE] = options.resolve(config)
    config.stash[_SIZE_LIMIT_BEFORE] = _set_size_limit(run.max_cassette_bytes)
    config.stash[_DERIVED_BEFORE] = _use_derived_cache(config, run)
    config.pluginmanager.register(_Progress(run), f"laya-progress-{id(config)}")
    interrupts.watch(run, config)  # SIGTERM stops the run as Ctrl-C does; xdist results survive an interrupt
    config.pluginmanager.register(_async_fixtures(config), f"laya-async-fixtures-{id(config)}")
    if not config.pluginmanager.has_plugin("recording"):
        config.pluginmanager.register(_empty_vcr_config(), f"laya-vcr-config-{id(config)}")


def pytest_unconfigure(config: pytest.Config) -> None:
    before = config.stash.get(_SIZE_LIMIT_BEFORE, None)
    if before is not None:
        _set_size_limit(before)  # a nested run (pytester) leaves the outer run's limit as it was
    if _DERIVED_BEFORE in config.stash:
        from pytest_laya.cassettes import derived

        derived.use(*config.stash[_DERIVED_BEFORE])


def _use_derived_cache(config: pytest.Config, run: LayaRun) -> Any:
    """Keep what replay derives from cassette files (and the spec verdicts on their exchanges, as
    `run` judges them) in pytest's cache (none under -p no:cacheprovider); returns what was in use before."""
    from pytest_laya.cassettes import derived
    from pytest_laya.route.spec_check import replay_verdicts

    cache = getattr(config, "cache", None)
    folder = None
    if cache is not None:
        try:
            folder = Path(cache.mkdir("pytest-laya")) / "derived"
        except OSError:  # an unwritable cache directory: no cache, as pytest itself goes on
            folder = None
    return derived.use(folder, (replay_verdicts(claimed_only=not run.table_read, chosen=run.spec_document),))


def _set_size_limit(limit: int) -> int:
    from pytest_laya.cassettes.disk import set_size_limit

    return set_size_limit(limit)


def pytest_sessionstart(session: pytest.Session) -> None:
    run = _run(session.config)
    if run is not None and not run.mode.replays:  # replay answers at once: nothing to wait for
        from pytest_laya.plugin.progress import progress_for

        run.progress = progress_for(session.config)
        if run.progress is not None:
            session.config.pluginmanager.register(run.progress, f"laya-terminal-progress-{id(session.config)}")


def _overridden(item: pytest.Item, name: str) -> bool:
    """Whether the fixture `name` that `item` gets is a project's own, not this plugin's."""
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.get(name) if info is not None else None
    return defs is not None and bool(defs) and getattr(defs[-1].func, "__module__", __name__) != __name__


#: Where an xdist worker hands the controller the usage error it found at collection.
_USAGE_ERROR_KEY = "pytest_laya_usage_error"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run = _run(config)
    if run is None:
        return
    try:
        _check_items(run, items)
    except pytest.UsageError as exc:
        workeroutput = getattr(config, "workeroutput", None)
        if workeroutput is None:
            raise
        # An xdist worker's UsageError crashes its controller (INTERNALERROR, exit 3, the message
        # lost): the worker runs nothing and hands the message over; the controller raises it.
        workeroutput[_USAGE_ERROR_KEY] = str(exc)
        items[:] = []


def _check_items(run: LayaRun, items: list[pytest.Item]) -> None:
    for item in items:
        wanted = marker_options(item).get("server")  # typos fail the run at start-up, not one test at a time
        needs_url = run.mode.needs_url and wanted in (None, "live")
        uses_laya = any(name.startswith(("laya_", "async_laya_")) for name in getattr(item, "fixturenames", ()))
        if needs_url and uses_laya and not run.url:
            needs_url = not replays_recorded(run, cassette_of(item, run))
        if needs_url and uses_laya and not run.url and not _overridden(item, "laya_server"):
            raise pytest.UsageError(f"--laya-mode={run.mode} needs --laya-url URL (or LAYA_SERVED_URL, or laya_url "
                                    f"in the ini file), or @pytest.mark.laya(server='reference') on the test "
                                    f"({item.nodeid})")


def pytest_deselected(items: list[pytest.Item]) -> None:
    run = _run(items[0].config) if items else None
    if run is not None:
        run.partial.append(f"{len(items)} deselected")
        run.deselected.extend(item.nodeid for item in items)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Any:
    report = yield
    run = _run(collector.config)
    if run is not None:
        if report.failed:
            run.partial.append(f"collection error in {report.nodeid or 'the session'}")
        elif report.skipped and isinstance(collector, pytest.Module):
            run.skipped_modules.add(Path(collector.path))
    return report


@pytest.hookimpl(wrapper=True)
def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> Any:
    ignored = yield
    run = _run(config)
    if ignored and run is not None and (collection_path.suffix == ".py" or collection_path.is_dir()):
        run.skipped_modules.add(Path(collection_path))  # collect_ignore and the like: its cassettes are kept
    return ignored


def pytest_itemcollected(item: pytest.Item) -> None:
    run = _run(item.config)
    if run is not None:
        run.items_seen += 1


def pytest_collection_finish(session: pytest.Session) -> None:
    run = _run(session.config)
    if run is not None:
        run.modules.update(Path(item.path) for item in session.items)
        run.collected = max(run.collected, len(session.items))
        note_dropped_items(run, session.items)
        find_shared_cassettes(session.config, session.items, run)
        fetch_missing(session.config, session.items, run)


class _Progress:
    """Counts the tests that ran, here or (on an xdist controller) relayed by workers.

    A plugin object per config, because the hook has no config (and pytester runs nest).
    """

    def __init__(self, run: LayaRun) -> None:
        self.run = run

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        self.run.ran += 1
        self.run.ran_tests.append(nodeid)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Before any fixture: httpx's own handlers, kept for vcrpy (a test's mock library may patch them).
    from pytest_laya.intercept import httpx_originals

    httpx_originals.note()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    # An error the test's code swallowed, and unplayed interactions, fail the test itself (not its
    # teardown): checked as soon as its body returned cleanly. The checks at teardown are then
    # skipped (the test failed).
    result = yield
    for opened in list(item.stash.get(OPEN_ROUTES, ())):
        fail_swallowed(item, opened)
    route = item.stash.get(ROUTE, None)
    if route is not None and route.kind.replays and route.handle is not None and route.handle.strict:
        route.handle.check_all_played()
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    if call.excinfo is not None:
        hide_library_frames(call.excinfo)
    report = yield
    note_outcome(item, call, report, _run(item.config))
    return report


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist controller: fold a finished worker's results into the run's totals."""
    output = getattr(node, "workeroutput", None) or {}
    if output.get(_USAGE_ERROR_KEY):
        raise pytest.UsageError(output[_USAGE_ERROR_KEY])
    run = _run(node.config)
    if run is None:
        return
    data = output.get(WORKEROUTPUT_KEY)
    if data is None:
        run.partial.append(f"worker {getattr(node, 'gateway', node)!s} sent no results" + (f" ({error})" if error else ""))
        return
    run.merge(data)
    interrupted = output.get("exitstatus") == int(pytest.ExitCode.INTERRUPTED)
    if error or output.get("shouldfail") or output.get("shouldstop") or interrupted:
        run.partial.append("a worker stopped early")


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> Any:
    # A wrapper, so this runs after the session's fixtures are torn down (even if that raised),
    # and the innermost one, so it is done before xdist sends `workeroutput` and before the
    # terminal summary is written.
    try:
        return (yield)
    finally:
        run = _run(session.config)
        if run is not None:
            summary.conclude(run, session, exitstatus)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    run = _run(config)
    if run is not None:
        summary.write_terminal_summary(terminalreporter, run)


# -- fixtures ------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def laya_run(pytestconfig: pytest.Config) -> LayaRun:
    """The run's pytest-laya settings (mode, URL, cassette dir, strictness) and what it saw."""
    return pytestconfig.stash[_STATE]


@pytest.fixture(scope="session")
def _laya_session_fake() -> Iterator[FakeLayaServer]:
    from pytest_laya.fake import FakeLayaServer

    server = FakeLayaServer().start()  # pins are per test (the marker's), checked at each test's teardown
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def laya_reference_server(laya_run: LayaRun) -> Iterator[ServerHandle]:
    """The reference server on the tiny checkpoint (or --laya-checkpoint), once per session, on a free port."""
    yield from reference_server(laya_run)


@pytest.fixture
def laya_fake_server(request: pytest.FixtureRequest, laya_run: LayaRun) -> Iterator[FakeLayaServer]:
    """A fresh fake Laya on a loopback port, speaking the target spec, with a fault script
    (`refuse()`, `reset()`, `delay(s)`, `trickle()`, `status(503, retry_after=1)`, `garbage_body()`...),
    pinned answers (`decide(...)`, the marker's ``answers=``) and the `calls` it answered.
    Pin mistakes fail the test at teardown."""
    from pytest_laya.fake import FakeLayaServer

    server = FakeLayaServer().start()
    try:
        pin_marker_answers(request, server.laya, laya_run)
        with open_fake_route(request, laya_run, server.url) as route:
            skip_scripted_faults(route, server)
            yield server
    finally:
        server.stop()
    check_test_pins(request, laya_run, server.laya)


@pytest.fixture
def laya_vcr_config(vcr_config: Any) -> dict[str, Any]:
    """Your secrets, noise and hosts for Laya cassettes: ``filter_headers``, ``filter_query_parameters``,
    ``filter_post_data_parameters``, ``before_record_request``, ``before_record_response``,
    ``allowed_hosts``, ``ignore_hosts``. Override it in a conftest.py; by default it is your
    ``vcr_config`` (pytest-recording's fixture; its own keys are ignored), or ``{}``."""
    return FromVcrConfig(vcr_config or {})


def _empty_vcr_config() -> types.ModuleType:
    """A plugin giving ``vcr_config`` = ``{}``, registered only when pytest-recording (which has
    one) is not installed: `laya_vcr_config` asks for it by name, and a project's own wins."""
    holder = types.ModuleType("pytest_laya.plugin.vcr_config", "pytest-laya's vcr_config without pytest-recording")

    def vcr_config() -> dict[str, Any]:
        return {}

    holder.vcr_config = pytest.fixture(vcr_config, scope="module")  # type: ignore[attr-defined]
    return holder


@pytest.fixture
def laya_server(request: pytest.FixtureRequest, laya_run: LayaRun) -> Iterator[LayaServer]:
    """The test's one Laya handle (`LayaServer`): `url`, `kind`, `spec`, `health()`, `identity()`,
    and `calls` in every mode; on the fake, `decide()`, `fail()`, `timeout()` and `delay()`.

    Chosen by the mode (replay: the cassette; live/record/verify: --laya-url; fake: the session's
    fake, answering in memory), or by `@pytest.mark.laya(server=...)`. While the test runs, every
    request to it -- from any client -- is answered or recorded by the mode and held to the
    server's spec.
    """
    with TestRoute.opened(request, laya_run) as route:
        if laya_run.url_env:
            laya_run.export_server(request.getfixturevalue("monkeypatch"), route.server)
        yield LayaServer(route, request, laya_run)


@pytest.fixture
def laya_url(request: pytest.FixtureRequest, laya_run: LayaRun, laya_server: ServerHandle) -> str:
    """The URL of this test's Laya server, for a client of your own (replay: it never opens a socket)."""
    route_of(request, laya_run, laya_server)
    return laya_server.url


@pytest.fixture
def laya_url_env(request: pytest.FixtureRequest, laya_server: ServerHandle, laya_run: LayaRun,
                 monkeypatch: pytest.MonkeyPatch) -> ServerHandle:
    """Puts this test's Laya URL into ``LAYA_SERVED_URL`` (or the ini's ``laya_url_env``) and its
    API key into ``LAYA_SERVED_API_KEY`` (or the ini's ``laya_api_key_env``; unset when the server
    has none) for the test, for a service that reads them from the environment; returns the
    test's `laya_server` handle (``.url``, ``.calls``, ``.decide()``...). A test that uses
    `laya_proxy` gets the proxy's URL (docs/proxy.md)."""
    route_of(request, laya_run, laya_server)
    laya_run.export_server(monkeypatch, request.getfixturevalue("laya_proxy")
                           if "laya_proxy" in request.fixturenames else laya_server)
    return laya_server


@pytest.fixture(scope="session")
def _laya_session_proxy() -> Iterator[SessionProxy]:
    from pytest_laya.plugin.proxy import SessionProxy

    proxy = SessionProxy()
    try:
        yield proxy
    finally:
        proxy.close()


@pytest.fixture
def laya_proxy(request: pytest.FixtureRequest, laya_run: LayaRun, laya_server: ServerHandle,
               _laya_session_proxy: SessionProxy) -> Iterator[LayaProxy]:
    """A real loopback HTTP server (`.url`) standing for this test's Laya server, for a service in
    another process or language: replayed from the test's cassette, recorded into it, forwarded
    (live, fake, verify) and held to the spec exactly as the test's in-process clients are; a
    miss is answered as a ``cassette_miss`` problem and fails the test. `.calls` are the
    route's. Started once per session, switched per test (docs/proxy.md)."""
    with _laya_session_proxy.serving(route_of(request, laya_run, laya_server)) as proxy:
        if laya_run.url_env:
            laya_run.export_server(request.getfixturevalue("monkeypatch"), proxy)
        yield proxy


@pytest.fixture
def laya_cassette(request: pytest.FixtureRequest, laya_run: LayaRun, laya_server: ServerHandle) -> CassetteHandle | None:
    """This test's cassette (`CassetteHandle`): replayed, recorded, or (verify) the live capture
    compared with it; None for a live, fake or reference server that records nothing.

    When recording, the cassette's provenance says where it came from: the server kind, the
    spec it claimed, and the weights (`identity`: a response's `served_by`, else the server's
    /health entry for the routed model).
    """
    route = route_of(request, laya_run, laya_server)
    return route.handle if route.kind.uses_cassette_file else None


@pytest.fixture(autouse=True)
def _laya_network_guard(request: pytest.FixtureRequest, laya_run: LayaRun) -> Iterator[None]:
    """For tests that have no Laya server: --laya-block-network (or the marker's
    ``block_network=True``), so only allowed hosts are reached; and, for a test that uses respx or
    pytest-httpx, the spec check of the decision answers they give (never blocked)."""
    mocks = {"respx_mock", "httpx_mock"}.intersection(request.fixturenames) or request.node.get_closest_marker("respx")
    if "laya_server" in request.fixturenames or not (mocks or blocks_network(request.node, laya_run)):
        yield
        return
    with routed(request, laya_run, [], vcr_config(request)):
        yield


@pytest.fixture
def laya_client(request: pytest.FixtureRequest, laya_run: LayaRun, laya_server: ServerHandle) -> Iterator[ServedLayaClient]:
    """A `ServedLayaClient` bound to `laya_server` (its responses are checked like any client's)."""
    route_of(request, laya_run, laya_server)
    with laya_server.client() as client:
        yield client


@pytest.fixture
def laya_model(request: pytest.FixtureRequest, laya_run: LayaRun, laya_server: ServerHandle) -> Iterator[ServedLayaModel]:
    """The served client as a `DecisionModel` (`ServedLayaModel`), for contract-style tests."""
    from pytest_laya.models import ServedLayaModel

    route_of(request, laya_run, laya_server)
    model = ServedLayaModel(laya_server.url, name=f"served-laya ({laya_server.kind})", api_key=laya_server.api_key,
                            model=laya_server.model)
    yield model
    model.close()


async def _async_laya_client(request: pytest.FixtureRequest, laya_run: LayaRun,
                             laya_server: ServerHandle) -> AsyncIterator[AsyncServedLayaClient]:
    """The async twin of `laya_client`: an `AsyncServedLayaClient`, its responses checked the same way.

    With pytest-asyncio installed this is a pytest-asyncio fixture, so it works in its strict
    mode as well as in auto mode; without it, a plain async fixture, which anyio's pytest plugin
    runs for its own tests.
    """
    from pytest_laya.client import AsyncServedLayaClient

    route_of(request, laya_run, laya_server)
    async with AsyncServedLayaClient(laya_server.url, api_key=laya_server.api_key, model=laya_server.model) as client:
        yield client


def _async_fixtures(config: pytest.Config) -> types.ModuleType:
    """A plugin holding `async_laya_client`, declared the way the installed async runner reads it."""
    holder = types.ModuleType("pytest_laya.plugin.async_fixtures", "pytest-laya's async fixtures")
    if config.pluginmanager.has_plugin("asyncio"):
        import pytest_asyncio

        holder.async_laya_client = pytest_asyncio.fixture(_async_laya_client, name="async_laya_client")  # type: ignore[attr-defined]
    else:
        holder.async_laya_client = pytest.fixture(_async_laya_client, name="async_laya_client")  # type: ignore[attr-defined]
    return holder

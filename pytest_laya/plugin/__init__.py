"""pytest-laya's pytest plugin (entry point ``laya``): hooks and fixtures, each handing over.

The run's state lives in a `LayaRun` (`run`); options in `options`, the marker in `markers`, the
cassette fixture's work in `cassette_fixture` and `verify_mode`, server choice and the spec check
in `servers`, the summary and JSON report in `summary`, unused cassettes in `unused`. Every
fixture here is a seam a project can override in its `conftest.py`. Heavy pieces (vcrpy, the
reference server and so torch) are imported only by the fixtures that need them.
"""

from __future__ import annotations

import types
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_laya.plugin import options, summary
from pytest_laya.plugin.cassette_fixture import CALLED, FAILED, cassette_file, cassette_location, use_test_cassette
from pytest_laya.plugin.markers import MARKER_HELP, check_test_pins, marker_options, pin_marker_answers
from pytest_laya.plugin.run import WORKEROUTPUT_KEY, LayaRun
from pytest_laya.plugin.servers import choose_server, reference_server, spec_observer

if TYPE_CHECKING:  # pragma: no cover
    from pytest_laya.cassettes import CassetteHandle
    from pytest_laya.client import AsyncServedLayaClient, ServedLayaClient
    from pytest_laya.fake import FakeLayaServer
    from pytest_laya.models import ServedLayaModel
    from pytest_laya.servers import ServerHandle

__all__ = ["LayaRun", "WORKEROUTPUT_KEY", "spec_observer"]

_STATE = pytest.StashKey[LayaRun]()


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
    config.pluginmanager.register(_Progress(run), f"laya-progress-{id(config)}")
    config.pluginmanager.register(_async_fixtures(config), f"laya-async-fixtures-{id(config)}")


def _overridden(item: pytest.Item, name: str) -> bool:
    """Whether the fixture `name` that `item` gets is a project's own, not this plugin's."""
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.get(name) if info is not None else None
    return bool(defs) and getattr(defs[-1].func, "__module__", __name__) != __name__


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run = _run(config)
    if run is None:
        return
    for item in items:
        wanted = marker_options(item).get("server")  # typos fail the run at start-up, not one test at a time
        needs_url = run.mode in ("live", "record", "verify") and wanted in (None, "live")
        uses_laya = any(name.startswith(("laya_", "async_laya_")) for name in getattr(item, "fixturenames", ()))
        if needs_url and uses_laya and not run.url and not _overridden(item, "laya_server"):
            raise pytest.UsageError(f"--laya-mode={run.mode} needs --laya-url URL (or laya_url in the ini file), "
                                    f"or @pytest.mark.laya(server='reference') on the test ({item.nodeid})")


def pytest_deselected(items: list[pytest.Item]) -> None:
    run = _run(items[0].config) if items else None
    if run is not None:
        run.partial.append(f"{len(items)} deselected")


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


def pytest_collection_finish(session: pytest.Session) -> None:
    run = _run(session.config)
    if run is not None:
        run.modules.update(Path(item.path) for item in session.items)
        run.collected = max(run.collected, len(session.items))


class _Progress:
    """Counts the tests that ran, here or (on an xdist controller) relayed by workers.

    A plugin object per config, because the hook has no config (and pytester runs nest).
    """

    def __init__(self, run: LayaRun) -> None:
        self.run = run

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        self.run.ran += 1


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    # Unplayed interactions fail the test itself (not its teardown): checked as soon as its body
    # returned cleanly. The cassette's own check at teardown is then skipped (the test failed).
    result = yield
    handle = getattr(item, "funcargs", {}).get("laya_cassette")
    if handle is not None and not handle.record and handle.strict:
        handle.check_all_played()
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed:
        item.stash[FAILED] = True
    if report.when == "call":
        item.stash[CALLED] = True
    if report.when == "setup" and not report.passed and "laya_cassette" in getattr(item, "fixturenames", ()):
        # Skipped (or broken) before reaching its cassette: the test still owns it.
        run = _run(item.config)
        if run is not None and run.mode in ("replay", "record"):
            try:
                run.used_cassettes.add(cassette_file(*cassette_location(item, run)))
            except pytest.UsageError:
                pass
    return report


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist controller: fold a finished worker's results into the run's totals."""
    run = _run(node.config)
    if run is None:
        return
    output = getattr(node, "workeroutput", None) or {}
    data = output.get(WORKEROUTPUT_KEY)
    if data is None:
        run.partial.append(f"worker {getattr(node, 'gateway', node)!s} sent no results" + (f" ({error})" if error else ""))
        return
    run.merge(data)
    if error or output.get("shouldfail") or output.get("shouldstop") or output.get("exitstatus") == int(pytest.ExitCode.INTERRUPTED):
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
        yield server
    finally:
        server.stop()
    check_test_pins(request, laya_run, server.laya)


@pytest.fixture
def laya_server(request: pytest.FixtureRequest, laya_run: LayaRun) -> ServerHandle:
    """The server this test talks to: a `ServerHandle` with `url`, `kind`, `spec`, `health()`, `identity()`.

    Chosen by the mode (replay: the cassette; live/record: --laya-url; fake: the session's fake),
    or by `@pytest.mark.laya(server=...)`.
    """
    return choose_server(request, laya_run)


@pytest.fixture(scope="session")
def _laya_recorded_health(laya_run: LayaRun) -> dict[str, Any]:
    """/health documents of the servers being recorded, by URL: read once per session (per xdist
    worker), before any test's fixtures, so that no cassette -- ours or pytest-recording's -- is
    in place to capture the read. Empty outside record mode."""
    from pytest_laya.cassettes.provenance import read_health
    from pytest_laya.servers.handle import ServerHandle

    cache: dict[str, Any] = {}
    if laya_run.mode == "record" and laya_run.url:
        cache[laya_run.url] = read_health(ServerHandle(url=laya_run.url, kind="live", api_key=laya_run.api_key))
    return cache


@pytest.fixture
def laya_cassette(request: pytest.FixtureRequest, laya_run: LayaRun, laya_server: ServerHandle,
                  _laya_recorded_health: dict[str, Any]) -> Iterator[CassetteHandle | None]:
    """The active cassette (`CassetteHandle`) in replay and record mode against a live server; None otherwise.

    When recording, the cassette's provenance says where it came from: the server kind, the
    spec, the weights (`identity`: a response's `served_by`, else the server's /health entry for
    the routed model) and the installed laya's version. /health is read once per session, or
    once before a test if that read failed, never inside a cassette and never in replay.
    """
    yield from use_test_cassette(request, laya_run, laya_server, _laya_recorded_health)


@pytest.fixture
def laya_client(laya_run: LayaRun, laya_server: ServerHandle,
                laya_cassette: CassetteHandle | None) -> Iterator[ServedLayaClient]:
    """A `ServedLayaClient` bound to `laya_server`; every response it sees is checked against the server's spec."""
    with laya_server.client(on_exchange=spec_observer(laya_run, laya_server, laya_cassette)) as client:
        yield client


@pytest.fixture
def laya_model(laya_run: LayaRun, laya_server: ServerHandle,
               laya_cassette: CassetteHandle | None) -> Iterator[ServedLayaModel]:
    """The served client as a `DecisionModel` (`ServedLayaModel`), for contract-style tests."""
    from pytest_laya.models import ServedLayaModel

    model = ServedLayaModel(laya_server.url, name=f"served-laya ({laya_server.kind})", api_key=laya_server.api_key,
                            model=laya_server.model, on_exchange=spec_observer(laya_run, laya_server, laya_cassette))
    yield model
    model.close()


async def _async_laya_client(laya_run: LayaRun, laya_server: ServerHandle,
                             laya_cassette: CassetteHandle | None) -> AsyncIterator[AsyncServedLayaClient]:
    """The async twin of `laya_client`: an `AsyncServedLayaClient`, every response checked the same way.

    With pytest-asyncio installed this is a pytest-asyncio fixture, so it works in its strict
    mode as well as in auto mode; without it, a plain async fixture, which anyio's pytest plugin
    runs for its own tests.
    """
    from pytest_laya.client import AsyncServedLayaClient

    async with AsyncServedLayaClient(laya_server.url, api_key=laya_server.api_key, model=laya_server.model,
                                     on_exchange=spec_observer(laya_run, laya_server, laya_cassette)) as client:
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

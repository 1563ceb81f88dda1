"""pytest-laya's pytest plugin (entry point ``laya``): options, the marker, fixtures, the summary.

Kept thin on purpose: the client, the fake, the cassettes and the validation live in their own
modules and work without pytest. Every fixture here is a seam a project can override in its
`conftest.py`. Heavy pieces (vcrpy, the reference server and so torch) are imported only by the
fixtures that need them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

MODES = ("replay", "record", "live", "fake")
SERVERS = ("fake", "reference", "live")
MARKER_OPTIONS = ("cassette", "server", "strict")
_FAILED = pytest.StashKey[bool]()
_STATE = pytest.StashKey["LayaRun"]()


# -- options ------------------------------------------------------------------------------

def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("laya", "Laya decision servers (pytest-laya)")
    group.addoption("--laya-mode", choices=MODES, default=None,
                    help="how tests reach Laya: replay cassettes (default), record them, a live server, or the fake.")
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
    parser.addini("laya_mode", "default for --laya-mode", default="replay")
    parser.addini("laya_url", "default for --laya-url", default="")
    parser.addini("laya_spec", "default for --laya-spec", default="")
    parser.addini("laya_cassette_dir", "default for --laya-cassette-dir (relative to the ini file)", default="")
    parser.addini("laya_strict", "default for --laya-strict", type="bool", default=True)
    parser.addini("laya_report", "default for --laya-report", default="")


@dataclass
class LayaRun:
    """The run's resolved settings and what it saw, for fixtures and the summary."""

    mode: str
    url: str | None
    api_key: str | None = field(repr=False)
    spec: str | None
    cassette_dir: Path | None
    strict: bool
    report: Path | None
    checkpoint: str | None
    cassettes: dict[str, int] = field(default_factory=lambda: {"played": 0, "recorded": 0, "unchanged": 0, "discarded": 0})
    used_cassettes: set[Path] = field(default_factory=set)
    servers: dict[str, str] = field(default_factory=dict)
    conformance: Any = None


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
    if run.url:
        _check_url(run)
    return run


def _check_url(run: LayaRun) -> None:
    from .errors import LayaError
    from .settings import ClientSettings, redact_url

    try:
        ClientSettings.resolve(run.url, environ={})
    except LayaError as exc:
        raise pytest.UsageError(f"--laya-url: {exc.summary}") from None
    if run.mode not in ("live", "record"):
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
    from .conformance import Conformance

    run = _resolve(config)
    run.conformance = Conformance()
    config.stash[_STATE] = run


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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run = config.stash.get(_STATE, None)
    if run is None:
        return
    for item in items:
        options = _marker(item)  # typos fail the run at start-up, not one test at a time
        needs_url = run.mode in ("live", "record") and options.get("server") in (None, "live")
        uses_laya = any(name.startswith(("laya_", "async_laya_")) for name in getattr(item, "fixturenames", ()))
        if needs_url and uses_laya and not run.url:
            raise pytest.UsageError(f"--laya-mode={run.mode} needs --laya-url URL (or laya_url in the ini file), "
                                    f"or @pytest.mark.laya(server='reference') on the test ({item.nodeid})")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    report = yield
    if report.failed:
        item.stash[_FAILED] = True
    return report


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
        return ServerHandle(url=laya_run.url or REPLAY_URL, kind="replay", spec=laya_run.spec or "current")
    if not laya_run.url:
        pytest.fail(f"server={wanted or 'live'} needs --laya-url URL")
    return ServerHandle(url=laya_run.url, kind="live", spec=laya_run.spec or "current", api_key=laya_run.api_key)


@pytest.fixture
def laya_cassette(request: pytest.FixtureRequest, laya_run: LayaRun, laya_server: Any) -> Iterator[Any]:
    """The active cassette (`CassetteHandle`) in replay and record mode against a live server; None otherwise."""
    if laya_run.mode not in ("replay", "record") or laya_server.kind not in ("replay", "live"):
        yield None
        return
    from .cassettes import cassette_relpath, laya_vcr

    options = _marker(request.node)
    directory = laya_run.cassette_dir or Path(request.node.path).parent / "cassettes"
    relpath = Path(options["cassette"]) if options.get("cassette") else Path(cassette_relpath(request.node.nodeid))
    strict = options.get("strict", laya_run.strict)
    vcr = laya_vcr(record=laya_run.mode == "record", cassette_dir=directory, api_key=laya_run.api_key,
                   strict=strict, record_hint="--laya-record")
    provenance = {"server": laya_server.kind, "spec": laya_server.spec} if laya_run.mode == "record" else None
    with vcr.cassette(relpath, provenance=provenance) as handle:
        yield handle
        if request.node.stash.get(_FAILED, False):
            handle.discard()
    laya_run.used_cassettes.add(handle.path.resolve())
    key = {"replayed": "played", "written": "recorded"}.get(handle.outcome or "", handle.outcome or "played")
    laya_run.cassettes[key] = laya_run.cassettes.get(key, 0) + 1


def _observer(laya_run: LayaRun, server: Any):
    from .conformance import SpecViolationError

    label = f"{server.kind} {server.url}" if server.kind != "replay" else "replay"

    def observe(exchange: Any) -> None:
        violations = laya_run.conformance.check(exchange, server=label, claimed=server.spec)
        if violations:
            raise SpecViolationError(exchange, server.spec, violations)

    laya_run.servers.setdefault(label, server.spec)
    return observe


@pytest.fixture
def laya_client(laya_run: LayaRun, laya_server: Any, laya_cassette: Any) -> Iterator[Any]:
    """A `ServedLayaClient` bound to `laya_server`; every response it sees is checked against the server's spec."""
    with laya_server.client(on_exchange=_observer(laya_run, laya_server)) as client:
        yield client


@pytest.fixture
async def async_laya_client(laya_run: LayaRun, laya_server: Any, laya_cassette: Any):
    """The async twin of `laya_client` (needs an async test runner such as pytest-asyncio or anyio)."""
    from .client import AsyncServedLayaClient

    async with AsyncServedLayaClient(laya_server.url, api_key=laya_server.api_key, model=laya_server.model,
                                     on_exchange=_observer(laya_run, laya_server)) as client:
        yield client


# -- summary ------------------------------------------------------------------------------

def _summary(run: LayaRun) -> dict[str, Any]:
    return {
        "mode": run.mode,
        "servers": run.servers,
        "cassettes": dict(run.cassettes),
        "conformance": run.conformance.rows() if run.conformance else [],
    }


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    run = config.stash.get(_STATE, None)
    if run is None:
        return
    summary = _summary(run)
    if run.report is not None:
        run.report.parent.mkdir(parents=True, exist_ok=True)
        tmp = run.report.with_name(run.report.name + ".tmp")
        tmp.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, run.report)
    if not summary["servers"] and not any(summary["cassettes"].values()):
        return
    tr = terminalreporter
    tr.section("pytest-laya")
    c = summary["cassettes"]
    tr.line(f"mode: {run.mode}; servers: {', '.join(f'{k} ({v} spec)' for k, v in run.servers.items()) or 'none'}")
    tr.line(f"cassettes: {c.get('played', 0)} played, {c.get('recorded', 0)} recorded, "
            f"{c.get('unchanged', 0)} re-recorded unchanged, {c.get('discarded', 0)} discarded (test failed)")
    for row in summary["conformance"]:
        tr.line(f"  {row['server']:<40} {row['spec']:<8} operations {row['operations_met']}/{row['operations_seen']}, "
                f"headers {row['headers_met']}/{row['headers_seen']}, {row['violations']} violations in {row['exchanges']} responses")
    if c.get("discarded"):
        tr.line("a test failed while recording: its old cassette was kept; fix the test and run --laya-record again")

"""The recording suite's fixtures: the live servers of each kind, and `laya_server` pointing at them.

`laya_server` is overridden (the plugin's documented seam) with a handle of kind ``live`` on a
server this suite started, so the plugin's own record, replay and verify modes apply unchanged:
`--laya-record` writes the cassettes, `--laya-mode=verify` checks them against fresh servers.
Each cassette's provenance names the server kind it came from (``reference``,
``laya-serve-0.4.15`` or ``laya-serve-0.4.15-strict``) rather than ``live``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from recording_cases import LAYA_SERVE, LAYA_SERVE_STRICT, MODEL, REFERENCE, SPEC_OF
from recording_servers import RUNNING_SERVERS, SERVER_KEY, RunningServer, laya_serve, reference_server

HERE = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    # Cassette paths are relative to laya_cassette_dir, which this directory's pytest.ini sets
    # to the repository's cassettes/. Collected together with other tests, that ini is not read.
    if config.inipath is not None and Path(config.inipath).resolve().parent != HERE \
            and not config.option.laya_cassette_dir:
        raise pytest.UsageError(
            "the recording suite runs on its own: .venv/bin/python -m pytest cassettes/recording --laya-record "
            "(or --laya-mode=verify), or pass --laya-cassette-dir")
    if os.environ.get(RUNNING_SERVERS) and config.getoption("laya_mode") != "verify":
        raise pytest.UsageError(f"{RUNNING_SERVERS} is for --laya-mode=verify only: a recording comes from "
                                "servers the recording suite starts itself; unset it")


def _running(kind: str) -> dict[str, Any]:
    """The running servers of `kind` that RUNNING_SERVERS names, by configuration."""
    named = json.loads(os.environ.get(RUNNING_SERVERS) or "{}")
    return {config: RunningServer(url=url, api_key=SERVER_KEY if config == "keyed" else None)
            for name, url in named.items() for k, _, config in [name.partition("/")] if k == kind}


def _start(kind: str, config: str) -> Any:
    options = {"keyed": config == "keyed", "busy": config == "busy"}
    if kind == REFERENCE:
        return reference_server(warming=config == "warming", **options)
    if kind in (LAYA_SERVE, LAYA_SERVE_STRICT):
        if config == "warming":
            raise ValueError("laya-serve has no warming state to record: it answers /health before it is warm")
        return laya_serve(jev_strict=kind == LAYA_SERVE_STRICT, **options)
    raise ValueError(f"unknown server kind {kind!r}")


def _configs_selected(request: pytest.FixtureRequest) -> list[str]:
    """The server configurations this module's selected tests need (a warming one is per test)."""
    needed = {item.callspec.params["case"].server for item in request.session.items
              if item.module is request.module and hasattr(item, "callspec") and "case" in item.callspec.params}
    return sorted(needed - {"warming"})


def _start_together(stack: contextlib.ExitStack, kind: str, configs: list[str]) -> dict[str, Any]:
    """Start `configs` of `kind` at once (a laya-serve start is seconds of mostly single-core
    work: its own interpreter importing torch), each stopped by `stack`; if one fails, the
    others started are stopped too."""

    def enter(config: str) -> tuple[Any, Any]:
        manager = _start(kind, config)
        return manager, manager.__enter__()

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(configs))) as pool:
        futures = {config: pool.submit(enter, config) for config in configs}
    started, failures = {}, []
    for config, future in futures.items():
        try:
            manager, server = future.result()
        except Exception as error:  # noqa: BLE001 - every one is collected; the first is raised
            failures.append(error)
            continue
        stack.push(manager.__exit__)
        started[config] = server
    if failures:
        raise failures[0]
    return started


@pytest.fixture(scope="module")
def module_servers(request: pytest.FixtureRequest) -> Iterator[Any]:
    """`get(config)`: this module's server kind in that configuration. For laya-serve, every
    configuration the module's selected tests need is started on first use, all at once."""
    kind = request.module.KIND
    running = _running(kind)
    with contextlib.ExitStack() as stack:
        started: dict[str, Any] = {}

        def get(config: str) -> Any:
            # laya-serve only: reference servers start in this process one at a time, since
            # their engines loading at once race on transformers' lazy first import ("cannot
            # import name 'AutoTokenizer'"), leaving them never ready.
            if not started and kind != REFERENCE:
                needed = sorted(set(_configs_selected(request)) | {config})
                started.update({c: running[c] for c in needed if c in running})
                started.update(_start_together(stack, kind, [c for c in needed if c not in running]))
            if config not in started:
                started[config] = running.get(config) or stack.enter_context(_start(kind, config))
            return started[config]

        yield get


@pytest.fixture
def recording_server(case: Any, request: pytest.FixtureRequest, module_servers: Any) -> Iterator[Any]:
    """The server `case` needs; a warming one is fresh for each test (it warms up only once)."""
    if case.server == "warming":
        with _start(request.module.KIND, "warming") as server:
            yield server
    else:
        yield module_servers(case.server)


@pytest.fixture
def laya_server(recording_server: Any, request: pytest.FixtureRequest) -> Any:
    from pytest_laya.servers import ServerHandle

    kind = request.module.KIND
    return ServerHandle(url=recording_server.url, kind="live", spec=SPEC_OF[kind],
                        api_key=recording_server.api_key, model=MODEL)


@pytest.fixture(autouse=True)
def _server_kind_in_provenance(laya_cassette: Any, request: pytest.FixtureRequest) -> None:
    if laya_cassette is not None:
        laya_cassette.set_provenance(server=request.module.KIND)


@pytest.fixture(scope="session", autouse=True)
def _converted_cassettes_are_not_unused(laya_run: Any) -> None:
    """cassettes/system1/ shares the cassette directory but is made by
    scripts/convert_system1_recordings.py, not by these tests: never list it as unused."""
    if laya_run.cassette_dir is not None:
        laya_run.used_cassettes.update(p.resolve() for p in (laya_run.cassette_dir / "system1").rglob("*.yaml"))

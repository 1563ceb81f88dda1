"""The plugin's command-line options and ini keys, resolved once into the run's settings.

One authority per setting: the command line wins over the ini file, which wins over the
environment (`LAYA_SERVED_URL`, `LAYA_SERVED_API_KEY`), which wins over the default. A bad value
is a `pytest.UsageError` at start-up that says what to pass instead.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from pytest_laya.plugin.run import LayaRun

__all__ = ["MODES", "SPECS", "add_options", "resolve"]

MODES = ("replay", "record", "live", "fake", "verify")
SPECS = ("current", "target")


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("laya", "Laya decision servers (pytest-laya)")
    group.addoption("--laya-mode", choices=MODES, default=None,
                    help="how tests reach Laya: replay cassettes (default), record them, a live server, the fake, "
                         "or verify (run live and compare every answer with the test's cassette).")
    group.addoption("--laya-record", action="store_true", default=False,
                    help="short for --laya-mode=record: refresh the cassettes of the tests that run.")
    group.addoption("--laya-url", default=None, help="URL of a live served Laya, e.g. http://127.0.0.1:8000.")
    group.addoption("--laya-api-key", default=None,
                    help="bearer token for the live server (default: LAYA_SERVED_API_KEY). Never written to cassettes or reports.")
    group.addoption("--laya-spec", choices=SPECS, default=None,
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
    group.addoption("--laya-verify-tolerance", type=float, default=None, metavar="X",
                    help="verify mode: how far a number (a probability) may move from its recording (default 1e-4).")
    parser.addini("laya_mode", "default for --laya-mode", default="replay")
    parser.addini("laya_url", "default for --laya-url", default="")
    parser.addini("laya_spec", "default for --laya-spec", default="")
    parser.addini("laya_cassette_dir", "default for --laya-cassette-dir (relative to the ini file)", default="")
    parser.addini("laya_strict", "default for --laya-strict", type="bool", default=True)
    parser.addini("laya_report", "default for --laya-report", default="")
    parser.addini("laya_verify_tolerance", "default for --laya-verify-tolerance", default="")


def resolve(config: pytest.Config) -> LayaRun:
    """The run's settings from the options, the ini file and the environment; or a UsageError."""
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
    if spec not in (None, *SPECS):
        raise pytest.UsageError(f"laya_spec = {spec!r} in the ini file: use {' or '.join(SPECS)}")
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
    from pytest_laya.cassettes.verify import DEFAULT_TOLERANCE

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
    from pytest_laya.client.settings import ClientSettings, redact_url
    from pytest_laya.wire.errors import LayaError

    assert run.url is not None
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

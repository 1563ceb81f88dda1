"""The plugin's command-line options and ini keys, resolved once into the run's settings.

One authority per setting: the command line wins over the ini file, which wins over the
environment (`LAYA_SERVED_URL`, `LAYA_SERVED_API_KEY`), which wins over the default. A bad value
is a `pytest.UsageError` at start-up that says what to pass instead.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_laya.plugin.run import LayaRun
from pytest_laya.route.modes import Mode, RecordMode
from pytest_laya.wire.spec_name import SpecName

if TYPE_CHECKING:  # pragma: no cover
    from pytest_laya.client.secret import Secret

__all__ = ["CONFORMANCE", "MODES", "RECORD_MODES", "SPECS", "add_options", "check_url", "resolve"]

MODES = Mode.values()
SPECS = SpecName.values()
#: --laya-record's values (`RecordMode`: what each does is its `does`).
RECORD_MODES = RecordMode.values()
CONFORMANCE = ("enforce", "report")


def _record_mode(value: str) -> RecordMode:
    try:
        return RecordMode.parse(value)
    except ValueError as exc:
        import argparse

        raise argparse.ArgumentTypeError(str(exc)) from None


def _tolerance(value: str) -> float:
    import argparse

    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or number < 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a tolerance: give a number >= 0, e.g. 1e-5")
    return number


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("laya", "Laya decision servers (pytest-laya)")
    group.addoption("--laya-mode", choices=MODES, default=None,
                    help="how tests reach Laya: replay cassettes (default), record them, a live server, the fake, "
                         "or verify (run live and compare every answer with the test's cassette).")
    group.addoption("--laya-record", nargs="?", const=RecordMode.ALL.value, default=None, type=_record_mode,
                    metavar="|".join(RECORD_MODES),
                    help="record mode: " + "; ".join(f"{mode.flag} to {mode.does}" for mode in RecordMode) + ".")
    group.addoption("--laya-url", default=None,
                    help="URL of a live served Laya, e.g. http://127.0.0.1:8000 (default: LAYA_SERVED_URL).")
    group.addoption("--laya-api-key", default=None,
                    help="bearer token for the live server (default: LAYA_SERVED_API_KEY). "
                         "Never written to cassettes or reports.")
    group.addoption("--laya-spec", choices=SPECS, default=None,
                    help="the spec responses are held to: auto (default: what the server declares in its Laya-Spec "
                         "header or /health, or what its cassette was recorded under; else current), current or target.")
    group.addoption("--laya-conformance", choices=CONFORMANCE, default=None,
                    help="enforce (default): a response that breaks its spec fails the test; report: list every "
                         "violation in the summary and --laya-report without failing.")
    group.addoption("--laya-block-network", action="store_true", default=None,
                    help="fail any request to a host that is neither the test's Laya server nor in laya_vcr_config's "
                         "allowed_hosts (or recorded by pytest-recording).")
    group.addoption("--laya-prune", action="store_true", default=False,
                    help="after a run of the whole suite, delete cassettes pytest-laya wrote that no test used.")
    group.addoption("--laya-cassette-dir", default=None,
                    help="where cassettes live (default: cassettes/ beside each test module).")
    group.addoption("--laya-strict", dest="laya_strict", action="store_true", default=None,
                    help="fail a replayed test that leaves recorded interactions unplayed (default).")
    group.addoption("--no-laya-strict", dest="laya_strict", action="store_false",
                    help="allow unplayed interactions.")
    group.addoption("--laya-report", default=None, metavar="PATH", help="write the pytest-laya summary as JSON.")
    group.addoption("--laya-report-html", default=None, metavar="PATH",
                    help="write the report as one self-contained HTML page with figures (needs pytest-laya[report]).")
    group.addoption("--laya-checkpoint", default=None,
                    help="checkpoint for laya_reference_server (default: the embedded tiny checkpoint).")
    group.addoption("--laya-limit", action="append", default=[], metavar="NAME=N",
                    help="a request limit of the server under the server contract (pytest_laya.suites.server), "
                         "e.g. max_questions=32; wins over /health's limits and the spec's defaults. Repeatable.")
    group.addoption("--laya-tolerance", type=_tolerance, default=None, metavar="X",
                    help="server contract: the largest probability deviation its behaviour checks allow (batching, "
                         "determinism, replicas; option order and interference with --laya-require-invariance); "
                         "default: the server's /health answer_tolerance, else 1e-5 for fp32 and 1e-3 for fp16/bf16.")
    group.addoption("--laya-require-invariance", action="store_true", default=False,
                    help="server contract: fail option order and question interference past the tolerance "
                         "(by default they are measured and reported).")
    group.addoption("--laya-verify-tolerance", type=float, default=None, metavar="X",
                    help="verify mode: how far a number (a probability) may move from its recording (default 1e-4).")
    group.addoption("--laya-max-age", default=None, metavar="DAYS",
                    help="fail each replayed test whose cassette was recorded more than DAYS days ago (or on no "
                         "known day), naming the file and the command that records it again.")
    group.addoption("--laya-max-age-warn", action="store_true", default=None,
                    help="warn instead of failing for --laya-max-age and --laya-identity-check.")
    group.addoption("--laya-identity-check", action="store_true", default=None,
                    help="read /health of --laya-url once and fail each replayed test whose cassette was recorded "
                         "from another checkpoint or revision (no request is replayed against it).")
    group.addoption("--laya-max-cassette-size", default=None, metavar="SIZE",
                    help="the largest cassette read or written, e.g. 16MiB (the default), 500kB or a number of "
                         "bytes; a bigger one is an error that says so.")
    group.addoption("--laya-store", default=None, metavar="URL",
                    help="a shared cassette store (s3://, gs://, az://, memory://, file://; needs "
                         "pytest-laya[store]): a cassette missing locally is fetched from it. Read-only unless "
                         "--laya-store-write.")
    group.addoption("--laya-store-write", action="store_true", default=None,
                    help="also write each cassette recorded to --laya-store.")
    parser.addini("laya_mode", "default for --laya-mode", default="replay")
    parser.addini("laya_max_cassette_size", "default for --laya-max-cassette-size", default="")
    parser.addini("laya_url", "default for --laya-url", default="")
    parser.addini("laya_spec", "default for --laya-spec", default="")
    parser.addini("laya_cassette_dir", "default for --laya-cassette-dir (relative to the ini file)", default="")
    parser.addini("laya_strict", "default for --laya-strict", type="bool", default=True)
    parser.addini("laya_report", "default for --laya-report", default="")
    parser.addini("laya_report_html", "default for --laya-report-html", default="")
    parser.addini("laya_verify_tolerance", "default for --laya-verify-tolerance", default="")
    parser.addini("laya_conformance", "default for --laya-conformance", default="")
    parser.addini("laya_block_network", "default for --laya-block-network", type="bool", default=False)
    parser.addini("laya_max_age", "default for --laya-max-age (days)", default="")
    parser.addini("laya_max_age_warn", "default for --laya-max-age-warn", type="bool", default=False)
    parser.addini("laya_identity_check", "default for --laya-identity-check", type="bool", default=False)
    parser.addini("laya_store", "default for --laya-store", default="")
    parser.addini("laya_store_write", "default for --laya-store-write", type="bool", default=False)
    parser.addini("laya_url_env", "an environment variable every Laya test gets the server's URL in "
                  "(e.g. LAYA_SERVED_URL), for a service that reads its URL from the environment", default="")
    parser.addini("laya_api_key_env", "the environment variable the server's API key goes in beside the URL "
                  "(default LAYA_SERVED_API_KEY)", default="")


def resolve(config: pytest.Config) -> LayaRun:
    """The run's settings from the options, the ini file and the environment; or a UsageError."""
    opt = config.option
    mode, record_mode = _modes(config)
    url = opt.laya_url or config.getini("laya_url") or os.environ.get("LAYA_SERVED_URL") or None
    url_source = ("--laya-url" if opt.laya_url else "laya_url in the ini file" if config.getini("laya_url")
                  else "LAYA_SERVED_URL")
    spec = opt.laya_spec or config.getini("laya_spec") or "auto"
    if spec not in SPECS:
        raise pytest.UsageError(f"laya_spec = {spec!r} in the ini file: use {', '.join(SPECS)}")
    conformance = opt.laya_conformance or config.getini("laya_conformance") or "enforce"
    if conformance not in CONFORMANCE:
        raise pytest.UsageError(f"laya_conformance = {conformance!r} in the ini file: use enforce or report")
    block_network = opt.laya_block_network if opt.laya_block_network is not None else config.getini("laya_block_network")
    cassette_dir = opt.laya_cassette_dir or config.getini("laya_cassette_dir") or None
    base = Path(config.inipath).parent if config.inipath and not opt.laya_cassette_dir else Path(config.invocation_params.dir)
    _check_rootdir_not_taken_from_values(config)
    report = opt.laya_report or config.getini("laya_report") or None
    strict = opt.laya_strict if opt.laya_strict is not None else config.getini("laya_strict")
    api_key = _api_key(opt.laya_api_key, os.environ.get("LAYA_SERVED_API_KEY"))
    run = LayaRun(mode=mode, url=_url(url), api_key=api_key, spec=SpecName(spec),
                  cassette_dir=(base / cassette_dir) if cassette_dir else None, strict=bool(strict),
                  report=Path(report) if report else None, checkpoint=opt.laya_checkpoint)
    run.verify_tolerance = _verify_tolerance(config)
    run.max_cassette_bytes = _max_cassette_bytes(config)
    run.record_mode = record_mode
    run.conformance_mode = conformance
    run.block_network = bool(block_network)
    run.prune = bool(opt.laya_prune)
    run.url_env = str(config.getini("laya_url_env") or "").strip() or None
    run.api_key_env = str(config.getini("laya_api_key_env") or "").strip() or "LAYA_SERVED_API_KEY"
    run.max_age = _max_age(config)
    run.max_age_warn = bool(opt.laya_max_age_warn if opt.laya_max_age_warn is not None
                            else config.getini("laya_max_age_warn"))
    run.identity_check = bool(opt.laya_identity_check if opt.laya_identity_check is not None
                              else config.getini("laya_identity_check"))
    if run.identity_check and not run.url:
        raise pytest.UsageError("--laya-identity-check compares cassettes with a live server's /health: "
                                "give its URL with --laya-url (or LAYA_SERVED_URL)")
    run.store = _store(config)
    run.report_html = _report_html(config)
    # Replay and the fake show the conformance table only when asked (-v, --laya-report[-html]).
    run.table_read = (opt.verbose > 0 or run.report is not None or run.report_html is not None
                      or run.mode not in (Mode.REPLAY, Mode.FAKE))
    if run.url:
        check_url(run.url, run.api_key, where=url_source, reach=run.mode.needs_url)
    return run


def _modes(config: pytest.Config) -> tuple[Mode, RecordMode | None]:
    """(--laya-mode, --laya-record's record mode in record mode, else None)."""
    given, record_mode = config.option.laya_mode, config.option.laya_record
    if record_mode:
        if given is not None and not Mode(given).records:
            raise pytest.UsageError(f"--laya-record asks for record mode, but --laya-mode={given} was given too: "
                                    f"pass one of them")
        given = Mode.RECORD
    name = given or config.getini("laya_mode") or Mode.REPLAY
    if name not in MODES:
        raise pytest.UsageError(f"laya_mode = {name!r} in the ini file: use one of {', '.join(MODES)}")
    mode = Mode(name)
    return mode, (record_mode or RecordMode.ALL) if mode.records else None


# Options whose value is a path: written `--opt PATH`, pytest picks the rootdir before it knows them.
PATH_OPTIONS = ("--laya-report", "--laya-report-html", "--laya-cassette-dir")


def _check_rootdir_not_taken_from_values(config: pytest.Config) -> None:
    """A usage error when pytest took a space-form path option's value for a test path.

    pytest chooses the rootdir (and the ini file) before plugins add their options, so the PATH of
    `--laya-report PATH` counts as a test path there when it exists: the rootdir, node ids and the
    report's scope change. `--laya-report=PATH` is read as one token and never counts.
    """
    import inspect

    from _pytest.config.findpaths import determine_setup

    args = list(config.invocation_params.args)
    given = [(flag, args[i + 1]) for i, flag in enumerate(args[:-1]) if flag in PATH_OPTIONS]
    here = Path(config.invocation_params.dir)
    taken = [(flag, value) for flag, value in given if (here / value).exists()]
    if not taken:
        return
    known = config.known_args_namespace
    settings: dict[str, Any] = {
        "inifile": getattr(known, "inifilename", None), "override_ini": getattr(known, "override_ini", None),
        "args": list(getattr(known, "file_or_dir", None) or []),
        "rootdir_cmd_arg": getattr(known, "rootdir", None) or None, "invocation_dir": here}
    accepted = inspect.signature(determine_setup).parameters
    rootpath = determine_setup(**{name: value for name, value in settings.items() if name in accepted})[0]
    if Path(rootpath).resolve() == Path(config.rootpath).resolve():
        return
    flag, value = taken[0]
    raise pytest.UsageError(
        f"{flag} {value}: pytest read {value}, which exists, as a test path when it chose the rootdir "
        f"({config.rootpath} instead of {rootpath}), so node ids and the report would be wrong: "
        f"write {flag}={value}")


def _report_html(config: pytest.Config) -> Path | None:
    """--laya-report-html, else the ini key; a usage error when matplotlib, which draws it, is missing."""
    path = config.option.laya_report_html or str(config.getini("laya_report_html") or "").strip()
    if not path:
        return None
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise pytest.UsageError("--laya-report-html draws its figures with matplotlib: pip install 'pytest-laya[report]'")
    return Path(path)


def _store(config: pytest.Config) -> object:
    """--laya-store, else the ini key: a `CassetteStore` (opened on first use), or None."""
    url = config.option.laya_store or str(config.getini("laya_store") or "").strip()
    write = config.option.laya_store_write if config.option.laya_store_write is not None else \
        config.getini("laya_store_write")
    if not url:
        if config.option.laya_store_write:
            raise pytest.UsageError("--laya-store-write writes to the shared cassette store: give it with --laya-store URL")
        return None
    from pytest_laya.store import CassetteStore
    from pytest_laya.wire.urls import redact_url

    if "://" not in url:
        raise pytest.UsageError(f"--laya-store {redact_url(url)!r} is not a URL: use e.g. s3://bucket/cassettes, "
                                f"file:///srv/cassettes or memory://cassettes")
    return CassetteStore(url, writable=bool(write))


def _given(config: pytest.Config, name: str) -> tuple[Any, str]:
    """``--laya-<name>``'s value, else the ini key ``laya_<name>``'s text (None where neither is
    given), and where it came from, for a usage error."""
    value = getattr(config.option, f"laya_{name}")
    if value is not None:
        return value, "--laya-" + name.replace("_", "-")
    text = str(config.getini(f"laya_{name}") or "").strip()
    return text or None, f"laya_{name} = {text!r} in the ini file"


def _max_age(config: pytest.Config) -> int | None:
    """--laya-max-age, else the ini key, else None; a bad value is a usage error."""
    text, where = _given(config, "max_age")
    if text is None:
        return None
    try:
        days = int(str(text).strip())
    except ValueError:
        days = -1
    if days < 0:
        raise pytest.UsageError(f"{where}: the most days a cassette may be old must be a whole number >= 0, e.g. 180")
    return days


def _url(url: str | None) -> str | None:
    """The server URL, as a str whose repr hides a password in it."""
    from pytest_laya.wire.urls import RedactedUrl

    return RedactedUrl(url.rstrip("/")) if url else None


def _api_key(option: str | None, environ: str | None) -> object:
    """The API key as a `Secret` (never printable), checked once: a bad key is one usage error."""
    from pytest_laya.client.secret import Secret, key_problem

    where = "--laya-api-key" if option else "LAYA_SERVED_API_KEY"
    key = Secret.wrap(option or environ or None)
    if key is not None:
        problem = key_problem(key)
        if problem:
            raise pytest.UsageError(f"{where}: {problem}")
    return key


def _verify_tolerance(config: pytest.Config) -> float:
    """--laya-verify-tolerance, else the ini key, else the default; a bad value is a usage error."""
    from pytest_laya.cassettes.verify import DEFAULT_TOLERANCE

    value, where = _given(config, "verify_tolerance")
    if value is None:
        return DEFAULT_TOLERANCE
    try:
        value = float(value)
    except ValueError:
        value = math.nan
    if not (value >= 0 and math.isfinite(value)):
        raise pytest.UsageError(f"{where}: the verify tolerance must be a number >= 0, e.g. 1e-4")
    return float(value)


_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 1024 ** 2, "mb": 1024 ** 2,
               "mib": 1024 ** 2, "g": 1024 ** 3, "gb": 1024 ** 3, "gib": 1024 ** 3}


def _max_cassette_bytes(config: pytest.Config) -> int:
    """--laya-max-cassette-size, else the ini key, else 16 MiB; a bad value is a usage error."""
    import re

    from pytest_laya.cassettes.disk import DEFAULT_SIZE_LIMIT

    text, where = _given(config, "max_cassette_size")
    if text is None:
        return DEFAULT_SIZE_LIMIT
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", str(text))
    unit = found.group(2).lower() if found else ""
    if found is None or unit not in _SIZE_UNITS or float(found.group(1)) * _SIZE_UNITS[unit] < 1:
        raise pytest.UsageError(f"{where}: a cassette size limit is a positive size such as 16MiB, 500kB or "
                                f"1048576 (bytes)")
    return int(float(found.group(1)) * _SIZE_UNITS[unit])


def check_url(url: str, api_key: Secret | None = None, *, where: str, reach: bool = True) -> None:
    """A `pytest.UsageError` naming `where` (the option, ini key or variable the URL came from)
    when `url` is no server base URL or, with `reach`, nothing answers there."""
    from pytest_laya.client import ServedLayaClient
    from pytest_laya.client.policy import TransportFailure
    from pytest_laya.client.settings import base_url
    from pytest_laya.wire.errors import LayaError
    from pytest_laya.wire.urls import redact_url

    try:
        base_url(url, where)
    except LayaError as exc:
        raise pytest.UsageError(exc.summary) from None
    if not reach:
        return
    try:  # any HTTP answer means the server is there; the client bounds the time and the body
        with ServedLayaClient(url, api_key=api_key, timeout_s=5.0) as client:
            client.health()
    except LayaError as exc:
        if exc.code in (TransportFailure.UNTRUSTED.value, TransportFailure.TLS_FAILED.value):
            # it is there, but the client will not talk to it
            raise pytest.UsageError(f"{where} {redact_url(url)}: {exc.summary}") from None
        if exc.status is None:
            raise pytest.UsageError(f"{where} {redact_url(url)} cannot be reached ({exc.code}): start the "
                                    f"server or fix the URL") from None

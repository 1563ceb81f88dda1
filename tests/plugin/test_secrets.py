"""The API key never leaves the process: no cassette, log, error, summary or report holds it.

A canary key is set (on the command line and through LAYA_SERVED_API_KEY) and the plugin runs a
small suite through pytester in record mode, replay mode and live mode, with a passing test, a
failing one whose message prints the client, the server handle and a decision's provenance, and
a server that refuses the key (401). Logging is at DEBUG for every logger (httpx, httpcore,
vcrpy, pytest-laya) and sent to the terminal and a log file; JUnit XML and the --laya-report
JSON are written. Then every byte the runs produced is searched for the canary, raw and in the
encodings a leak would take (URL-encoded, JSON-escaped, base64 of the bearer header).
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest

from pytest_laya.fake import FakeLayaServer
from tests.helpers.leaks import URL_UNSAFE_CANARY as CANARY
from tests.helpers.pytester_runs import WITHOUT_UNUSED_PLUGINS

pytest_plugins = ["pytester"]


def _base64_forms(name: str, secret: bytes) -> dict[str, str]:
    """The base64 of `secret` as it shows inside any longer base64 text, whatever follows it
    (a newline, a non-ASCII tail) and at each of the three alignments: whole groups only."""
    forms = {}
    for shift in range(3):
        part = secret[shift:]
        whole = len(part) // 3 * 3
        forms[f"base64 {name} (offset {shift})"] = base64.b64encode(part[:whole]).decode()
    return forms


FORMS = {
    "raw": CANARY,
    "url-encoded": quote(CANARY, safe=""),
    "url-encoded, lower-case hex": re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), quote(CANARY, safe="")),
    "form-encoded": quote_plus(CANARY),
    "json-escaped": json.dumps(CANARY)[1:-1],
    "json-escaped with \\/": json.dumps(CANARY)[1:-1].replace("/", "\\/"),
    "json \\u-escaped": "".join(f"\\u{ord(c):04x}" for c in CANARY),
    **_base64_forms("bearer", f"Bearer {CANARY}".encode()),
    **_base64_forms("key", CANARY.encode()),
    "reversed": CANARY[::-1],
}

SUITE = """
import logging

import pytest

from pytest_laya import LayaConfigError

Q = {"refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"}}
log = logging.getLogger("suite")


def test_passes(laya_client):
    decision = laya_client.decide("I was charged twice.", Q)
    log.debug("decided %r with %r", decision, laya_client)
    assert 0 <= decision["refund"].p <= 1


def test_fails_and_prints_everything(laya_client, laya_server, laya_run):
    decision = laya_client.decide("The app crashes on start.", Q)
    assert False, f"deliberate: {laya_client!r} {laya_server!r} {laya_run!r} {decision!r} {decision.provenance!r}"


def test_a_refused_key_is_a_config_error(laya_client):
    try:
        laya_client.decide("Where is my parcel?", Q)
    except LayaConfigError as exc:
        log.error("refused: %s (%r)", exc, exc)
        raise
"""


def _run(pytester, monkeypatch, mode_args: list[str], name: str, *, env_key: bool, key: str = CANARY):
    report = pytester.path / f"{name}.json"
    junit = pytester.path / f"{name}.xml"
    logfile = pytester.path / f"{name}.log"
    if env_key:
        monkeypatch.setenv("LAYA_SERVED_API_KEY", key)
    else:
        monkeypatch.delenv("LAYA_SERVED_API_KEY", raising=False)
        mode_args = [*mode_args, f"--laya-api-key={CANARY}"]
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:asyncio", *WITHOUT_UNUSED_PLUGINS, "-rA", "-vv", "--showlocals", "--tb=long",
        "--log-level=DEBUG", "--log-cli-level=DEBUG", f"--log-file={logfile}", "--log-file-level=DEBUG",
        f"--junitxml={junit}", f"--laya-report={report}", *mode_args)
    return result, report


def _leaks(text: str) -> list[str]:
    return [form for form, value in FORMS.items() if value in text]


def _assert_nowhere(pytester, outputs: dict[str, str]) -> None:
    found = {}
    for name, text in outputs.items():
        if _leaks(text):
            found[name] = _leaks(text)
    for path in Path(pytester.path).rglob("*"):
        if path.is_file() and not path.name.startswith("test_") and path.suffix != ".pyc":
            leaks = _leaks(path.read_bytes().decode("utf-8", "replace"))
            if leaks:
                found[str(path.relative_to(pytester.path))] = leaks
    assert found == {}, f"the API key leaked into: {found}"


def test_the_key_appears_in_no_output_of_record_replay_or_live_runs(pytester, monkeypatch):
    pytester.makepyfile(test_suite=SUITE)
    outputs: dict[str, str] = {}
    with FakeLayaServer(api_key=CANARY) as accepting:
        recorded, report = _run(pytester, monkeypatch, ["--laya-record", f"--laya-url={accepting.url}", "--laya-spec=target"],
                                "record", env_key=True)
        # The key reached the server: the secret was really in play.
        assert sum(r.headers.get("authorization") == f"Bearer {CANARY}" for r in accepting.requests) >= 3
    recorded.assert_outcomes(passed=2, failed=1)
    outputs["record stdout"], outputs["record stderr"] = recorded.stdout.str(), recorded.stderr.str()
    assert "deliberate:" in outputs["record stdout"] and "DEBUG" in outputs["record stdout"]
    assert json.loads(report.read_text())["cassettes"]["recorded"] == 2

    cassettes = sorted((pytester.path / "cassettes").rglob("*.yaml"))
    assert len(cassettes) == 2  # the failing test's cassette was discarded
    assert all("Bearer <redacted>" in c.read_text() for c in cassettes)

    replayed, _ = _run(pytester, monkeypatch, ["--laya-spec=target"], "replay", env_key=False)
    # The passing test replays; the other two never recorded a cassette (one failed, one was a
    # 401 test that passed against the accepting server only because it was never refused).
    replayed.assert_outcomes(passed=2, failed=1)
    outputs["replay stdout"], outputs["replay stderr"] = replayed.stdout.str(), replayed.stderr.str()

    with FakeLayaServer(api_key=CANARY + "-not-this-one") as refusing:
        refused, _ = _run(pytester, monkeypatch, ["--laya-mode=live", f"--laya-url={refusing.url}", "--laya-spec=target"],
                          "live", env_key=True)
        assert any(r.headers.get("authorization") == f"Bearer {CANARY}" for r in refusing.requests)
    refused.assert_outcomes(failed=3)
    outputs["live stdout"], outputs["live stderr"] = refused.stdout.str(), refused.stderr.str()
    assert "[unauthorized]" in outputs["live stdout"] and "refused:" in outputs["live stdout"]

    _assert_nowhere(pytester, outputs)


def test_the_search_would_find_a_leak(pytester):
    # The grep itself can fail: a file holding the key in any of its forms is reported.
    for form, value in FORMS.items():
        assert form in _leaks(f"header: {value};")
    (pytester.path / "leaky.log").write_text(f"Authorization: Bearer {CANARY}\n")
    with pytest.raises(AssertionError, match="leaky.log"):
        _assert_nowhere(pytester, {})


# --------------------------------------------------------------------------- keys the client refuses (issue 16)

CLIENT_SUITE = """
import os

from pytest_laya import ServedLayaClient

Q = {"refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"}}


def test_a_key_read_from_a_secret_file_with_its_newline():
    ServedLayaClient(os.environ["SUITE_URL"], api_key=os.environ["SUITE_KEY"] + "\\n")


def test_a_key_with_a_non_ascii_character():
    ServedLayaClient(os.environ["SUITE_URL"], api_key=os.environ["SUITE_KEY"] + "\\u00e9")


def test_a_spec_violation_raised_inside_the_send_path(laya_client):
    laya_client.decide("I was charged twice.", Q)
"""


@pytest.mark.parametrize("env_tail", ["", "\n", "\u00e9"], ids=["clean key", "key with newline", "non-ASCII key"])
def test_a_refused_key_or_a_violation_in_the_send_path_never_prints_the_key(pytester, monkeypatch, env_tail):
    from pytest_laya.faults import Respond, ScriptedServer

    pytester.makepyfile(test_client_suite=CLIENT_SUITE)
    broken = {"model": "m", "answers": {"refund": {"type": "noul", "noul": 1.5, "confidence": 0.5}},
              "usage": {"input_tokens": 1, "output_tokens": 0}}
    with ScriptedServer(default=Respond(200, broken)) as server:
        monkeypatch.setenv("SUITE_URL", server.url)
        monkeypatch.setenv("SUITE_KEY", CANARY)
        # --full-trace: every frame is printed with its locals, the kit's own included.
        result, _ = _run(pytester, monkeypatch, ["--laya-mode=live", f"--laya-url={server.url}", "--laya-spec=target",
                                                 "--full-trace"],
                         f"client-{len(env_tail)}", env_key=True, key=CANARY + env_tail)
        sent = [r.headers.get("authorization") for r in server.requests if r.path == "/v1/systemone"]
    output = result.stdout.str()
    if env_tail:
        # A key the plugin cannot send is one usage error at start-up, naming where it came from.
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        assert "LAYA_SERVED_API_KEY" in result.stderr.str()
        assert ("line feed at the end" if env_tail == "\n" else "non-ASCII") in result.stderr.str()
        assert sent == []  # nothing was sent
    else:
        result.assert_outcomes(failed=3)
        assert output.count("[bad_setting]") >= 2 and "line feed at the end" in output and "non-ASCII" in output
        assert sent == [f"Bearer {CANARY}"] and "SpecViolationError" in output and "_send" in output
    _assert_nowhere(pytester, {"stdout": output, "stderr": result.stderr.str()})

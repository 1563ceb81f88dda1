"""The pytest plugin, run with pytester: modes, cassettes, validation, usage errors, summary."""

from __future__ import annotations

import json

import httpcore  # noqa: F401
import httpx  # noqa: F401
import pytest
import vcr  # noqa: F401
import vcr.stubs.httpx_stubs  # noqa: F401

from pytest_laya.fake import FakeLayaServer

# pytester's in-process runs drop modules first imported inside them; importing the network
# stack here keeps one copy of each class, so exceptions map the same in every inner run.

pytest_plugins = ["pytester"]

CANARY = "sk-plugin-canary-5150"
TEST_DECIDE = """
def test_refund(laya_client):
    decision = laya_client.decide("I was charged twice. Refund me.", {
        "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
        "team": {"type": "choice", "instructions": "Which team?", "criteria": {"billing": "money", "tech": "bugs"}},
    })
    assert 0 <= decision["refund"].p <= 1
    assert decision["team"].key in ("billing", "tech")
"""


def run(pytester, *args):
    return pytester.runpytest("-p", "no:asyncio", "-p", "no:cacheprovider", *args)


@pytest.fixture
def laya_serve_like():
    # A live server in laya-serve 0.4.15's shape: what the current spec describes.
    with FakeLayaServer(flavor="laya-serve-0.4.15", api_key=CANARY) as server:
        yield server


def test_fake_mode_answers_and_summarises(pytester):
    pytester.makepyfile(test_it=TEST_DECIDE)
    result = run(pytester, "--laya-mode=fake")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*pytest-laya*", "mode: fake; servers: fake http://127.0.0.1:* (target spec)",
                                 "*target*operations 1/1*"])


def test_record_then_replay_without_a_server(pytester, laya_serve_like):
    pytester.makepyfile(test_it=TEST_DECIDE)
    recorded = run(pytester, "--laya-record", f"--laya-url={laya_serve_like.url}", f"--laya-api-key={CANARY}")
    recorded.assert_outcomes(passed=1)
    recorded.stdout.fnmatch_lines(["cassettes: 0 played, 1 recorded*"])
    [cassette] = (pytester.path / "cassettes").rglob("*.yaml")
    text = cassette.read_text()
    assert CANARY not in text and "interactions" in text
    served = len(laya_serve_like.requests)
    replayed = run(pytester)
    replayed.assert_outcomes(passed=1)
    replayed.stdout.fnmatch_lines(["cassettes: 1 played, 0 recorded*"])
    assert len(laya_serve_like.requests) == served  # replay never reached the server


def test_replay_without_a_cassette_says_how_to_record(pytester):
    pytester.makepyfile(test_it=TEST_DECIDE)
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*no cassette*--laya-record*"])


def test_a_test_that_fails_while_recording_keeps_the_old_cassette(pytester, laya_serve_like):
    pytester.makepyfile(test_it=TEST_DECIDE)
    run(pytester, "--laya-record", f"--laya-url={laya_serve_like.url}", f"--laya-api-key={CANARY}").assert_outcomes(passed=1)
    [cassette] = (pytester.path / "cassettes").rglob("*.yaml")
    before = cassette.read_bytes()
    pytester.makepyfile(test_it=TEST_DECIDE.replace('"Does the customer ask for a refund?"', '"Changed?"') + "    assert False\n")
    result = run(pytester, "--laya-record", f"--laya-url={laya_serve_like.url}", f"--laya-api-key={CANARY}")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*1 discarded (test failed)*", "*old cassette was kept*"])
    assert cassette.read_bytes() == before


def test_a_response_that_breaks_its_spec_fails_the_test(pytester, laya_serve_like):
    # laya-serve's shape held to the target spec: no X-Request-Id, no served_by.
    pytester.makepyfile(test_it=TEST_DECIDE)
    result = run(pytester, "--laya-mode=live", f"--laya-url={laya_serve_like.url}", f"--laya-api-key={CANARY}",
                 "--laya-spec=target")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*SpecViolationError*POST /v1/systemone -> 200 breaks the target spec*",
                                 "*/headers/x-request-id: expected header X-Request-Id (required), got absent*"])
    assert CANARY not in result.stdout.str()


def test_live_mode_conforms_to_the_current_spec_and_writes_a_report(pytester, laya_serve_like):
    pytester.makepyfile(test_it=TEST_DECIDE)
    report = pytester.path / "out" / "laya.json"
    result = run(pytester, "--laya-mode=live", f"--laya-url={laya_serve_like.url}", f"--laya-api-key={CANARY}",
                 f"--laya-report={report}")
    result.assert_outcomes(passed=1)
    data = json.loads(report.read_text())
    assert data["mode"] == "live"
    rows = {row["spec"]: row for row in data["conformance"]}
    assert rows["current"]["violations"] == 0 and rows["target"]["violations"] > 0
    assert CANARY not in report.read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--laya-mode=live"], "*--laya-mode=live needs --laya-url URL*"),
        (["--laya-mode=live", "--laya-url=http://127.0.0.1:9"], "*--laya-url http://127.0.0.1:9 cannot be reached*"),
        (["--laya-mode=live", "--laya-url=localhost:8000"], "*--laya-url: url must be an http(s) URL*"),
        (["--laya-record", "--laya-mode=fake"], "*--laya-record asks for record mode, but --laya-mode=fake*"),
    ],
)
def test_bad_configuration_is_one_usage_error(pytester, args, message):
    pytester.makepyfile(test_it=TEST_DECIDE)
    result = run(pytester, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_ini_keys_apply_and_the_command_line_wins(pytester):
    pytester.makeini("[pytest]\nlaya_mode = fake\n")
    pytester.makepyfile(test_it=TEST_DECIDE)
    run(pytester).stdout.fnmatch_lines(["mode: fake*"])
    pytester.makeini("[pytest]\nlaya_mode = nonsense\n")
    bad = run(pytester)
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*laya_mode = 'nonsense' in the ini file*"])


def test_marker_typos_fail_loudly(pytester):
    pytester.makepyfile(test_it="""
import pytest

@pytest.mark.laya(sever="fake")
def test_x(laya_client):
    pass
""")
    result = run(pytester, "--laya-mode=fake")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: test_it.py::test_x: @pytest.mark.laya has no option 'sever'; use cassette, server, strict"])


def test_marker_picks_the_fake_server_in_any_mode(pytester):
    pytester.makepyfile(test_it="""
import pytest

@pytest.mark.laya(server="fake")
def test_x(laya_client, laya_server):
    assert laya_server.kind == "fake"
    assert laya_client.decide("s", {"q": {"type": "noul", "instructions": "?"}})["q"].p >= 0
""")
    run(pytester).assert_outcomes(passed=1)


def test_the_fake_fixture_scripts_faults(pytester):
    pytester.makepyfile(test_it="""
import pytest
from pytest_laya import ServedLayaClient, LayaCallError

def test_overload_is_retried(laya_fake_server):
    laya_fake_server.status(503, retry_after=0)
    with ServedLayaClient(laya_fake_server.url) as client:
        assert client.decide("s", {"q": {"type": "noul", "instructions": "?"}})["q"].p >= 0

def test_garbage_is_an_error(laya_fake_server):
    laya_fake_server.garbage_body()
    with ServedLayaClient(laya_fake_server.url) as client:
        with pytest.raises(LayaCallError):
            client.decide("s", {"q": {"type": "noul", "instructions": "?"}})
""")
    run(pytester).assert_outcomes(passed=2)


def test_fixtures_are_documented(pytester):
    pytester.makepyfile(test_it="def test_x(): pass\n")
    result = run(pytester, "--fixtures")
    for name in ("laya_client", "async_laya_client", "laya_server", "laya_fake_server", "laya_reference_server", "laya_cassette"):
        result.stdout.fnmatch_lines([f"{name}*"])

"""`laya_server`, the one per-test handle: its calls in every mode, whatever client made them; on
the fake, pinned answers and scripted faults answered in memory (a timeout is the client's own
timeout, at once); the marker's per-test network block; the errors importable from pytest_laya."""

from __future__ import annotations

import pytest

from pytest_laya.fake import FakeLayaServer
from tests.helpers.pytester_runs import run

pytest_plugins = ["pytester"]

SERVICE = """
import json
import urllib.request

import httpx
import pytest

QUESTIONS = {"team": {"type": "choice", "instructions": "Which team?", "criteria": {"billing": "money", "tech": "bugs"}}}
STATE = "I was charged twice."


def ask_httpx(url, **kwargs):
    return httpx.post(url + "/v1/systemone", json={"state": STATE, "questions": QUESTIONS}, **kwargs)


def ask_urllib(url):
    request = urllib.request.Request(url + "/v1/systemone", data=json.dumps({"state": STATE, "questions": QUESTIONS}).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=600) as response:
        return response.status
"""


@pytest.fixture
def live():
    with FakeLayaServer() as server:
        yield server


def test_calls_in_every_mode_whatever_the_client(pytester, live):
    pytester.makepyfile(test_it=SERVICE + """

def test_calls(laya_server):
    assert ask_httpx(laya_server.url).status_code == 200
    assert ask_urllib(laya_server.url) == 200
    laya_server.calls.assert_call_count(2)
    laya_server.calls.assert_called_with(state=STATE, questions=QUESTIONS, status=200, outcome="200")
    assert laya_server.calls.last.decision["team"].key in ("billing", "tech")
""")
    url = f"--laya-url={live.url}"
    for mode in (["--laya-record", url], [], ["--laya-mode=live", url], ["--laya-mode=fake"],
                 ["--laya-mode=verify", url]):
        result = run(pytester, *mode)
        result.assert_outcomes(passed=1)


def test_a_replay_miss_is_a_call_with_its_outcome(pytester, live):
    pytester.makepyfile(test_it=SERVICE + """

@pytest.mark.laya(caught_errors="ignore")
def test_calls(laya_server):
    with pytest.raises(Exception):
        ask_httpx(laya_server.url)
    assert [call.outcome for call in laya_server.calls] == ["CassetteMissing"]
""")
    run(pytester).assert_outcomes(passed=1)


def test_scripted_faults_answer_in_memory_with_each_clients_own_timeout(pytester):
    pytester.makepyfile(test_it=SERVICE + """
import socket

import requests


def test_httpx(laya_server):
    laya_server.fail(503, retry_after=2).timeout().fail(503, code="not_ready")
    first = ask_httpx(laya_server.url, timeout=600)
    assert first.status_code == 503 and first.headers["retry-after"] == "2"
    assert first.headers["content-type"] == "application/problem+json"
    with pytest.raises(httpx.ReadTimeout, match="scripted by the test"):
        ask_httpx(laya_server.url, timeout=600)
    assert ask_httpx(laya_server.url).json()["code"] == "not_ready"
    assert ask_httpx(laya_server.url).status_code == 200
    assert [call.outcome for call in laya_server.calls] == ["503", "timeout", "503", "200"]
    laya_server.calls[1].assert_matches(state=STATE, status=None, outcome="timeout")


def test_urllib(laya_server):
    laya_server.timeout()
    with pytest.raises(socket.timeout, match="scripted by the test"):
        ask_urllib(laya_server.url)
    assert [call.outcome for call in laya_server.calls] == ["timeout"]


def test_requests(laya_server):
    laya_server.timeout()
    with pytest.raises(requests.exceptions.ReadTimeout):
        requests.post(laya_server.url + "/v1/systemone", json={"state": STATE, "questions": QUESTIONS}, timeout=600)
    assert laya_server.calls.last.outcome == "timeout"


async def test_async_httpx(laya_server):
    laya_server.timeout()
    async with httpx.AsyncClient(timeout=600) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.post(laya_server.url + "/v1/systemone", json={"state": STATE, "questions": QUESTIONS})
""")
    result = pytester.runpytest("-p", "no:cacheprovider", "--laya-mode=fake", "-o", "asyncio_mode=auto",
                                "-o", "asyncio_default_fixture_loop_scope=function")
    result.assert_outcomes(passed=4)


def test_decide_and_the_markers_answers_pin_the_same_handle(pytester):
    pytester.makepyfile(test_it=SERVICE + """

@pytest.mark.laya(answers={"team": "tech"})
def test_marker(laya_server):
    assert ask_httpx(laya_server.url).json()["answers"]["team"]["choice"] == "tech"
    laya_server.calls.assert_called_once_with(state=STATE)


def test_decide(laya_server):
    laya_server.decide({"team": "billing"})
    assert ask_httpx(laya_server.url).json()["answers"]["team"]["choice"] == "billing"


@pytest.mark.laya(server="fake")
def test_decide_on_the_markers_fake(laya_server):
    laya_server.decide({"team": "tech"}, times=1)
    assert ask_httpx(laya_server.url).json()["answers"]["team"]["choice"] == "tech"


def test_unused_pin_fails(laya_server):
    laya_server.decide({"nothing_asks_this": "x"})
""")
    result = run(pytester, "--laya-mode=fake", "-rE")
    result.assert_outcomes(passed=4, errors=1)
    result.stdout.fnmatch_lines(["*pinned at laya_server.decide(...) in test_it.py::test_unused_pin_fails) was never used*"])


def test_scripting_a_server_that_is_not_the_fake_says_how(pytester):
    pytester.makepyfile(test_it="""
def test_it(laya_server):
    laya_server.timeout()
""")
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*laya_server.timeout() scripts the fake, but this test's server is replay "
                                 "(--laya-mode=replay): run with --laya-mode=fake*"])


def test_laya_url_env_gives_the_handle(pytester):
    pytester.makepyfile(test_it=SERVICE + """
import os


def test_it(laya_url_env, laya_server):
    assert laya_url_env is laya_server
    assert os.environ["LAYA_SERVED_URL"] == laya_url_env.url
    ask_httpx(os.environ["LAYA_SERVED_URL"])
    laya_url_env.calls.assert_called_once_with(state=STATE)
""")
    run(pytester, "--laya-mode=fake").assert_outcomes(passed=1)


def test_the_marker_blocks_the_network_for_one_test(pytester):
    pytester.makepyfile(test_it="""
import httpx
import pytest

from pytest_laya import NetworkBlocked


@pytest.mark.laya(block_network=True, caught_errors="ignore")
def test_blocked():
    with pytest.raises(NetworkBlocked):
        httpx.get("http://192.0.2.1:9/anything")


@pytest.mark.laya(block_network="yes")
def test_typo():
    pass
""")
    result = run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*block_network='yes'*use True or False*"])
    pytester.makepyfile(test_it=pytester.path.joinpath("test_it.py").read_text().split("\n\n@pytest.mark.laya(block_network=\"yes\")")[0])
    run(pytester).assert_outcomes(passed=1)


def test_the_errors_are_importable_from_pytest_laya():
    import pytest_laya

    # By name: another test may have reloaded a module, making a second class of the same name.
    found = {name: f"{getattr(pytest_laya, name).__module__}.{name}" for name in (
        "NetworkBlocked", "CassetteMiss", "CassetteMissing", "SpecViolationError", "LayaCallError", "LayaConfigError")}
    assert found == {"NetworkBlocked": "pytest_laya.intercept.NetworkBlocked",
                     "CassetteMiss": "pytest_laya.cassettes.CassetteMiss",
                     "CassetteMissing": "pytest_laya.cassettes.CassetteMissing",
                     "SpecViolationError": "pytest_laya.specs.SpecViolationError",
                     "LayaCallError": "pytest_laya.wire.errors.LayaCallError",
                     "LayaConfigError": "pytest_laya.wire.errors.LayaConfigError"}


def test_a_call_from_another_process_takes_the_same_scripted_steps_over_the_socket(pytester):
    pytester.makepyfile(test_it=SERVICE + """
import subprocess
import sys

CLIENT = (
    "import json, sys, urllib.error, urllib.request\\n"
    "body = json.dumps({'state': 's', 'questions': {'q': {'type': 'noul', 'instructions': 'Yes?'}}}).encode()\\n"
    "request = urllib.request.Request(sys.argv[1] + '/v1/systemone', data=body, method='POST',\\n"
    "                                 headers={'Content-Type': 'application/json'})\\n"
    "try:\\n"
    "    print(urllib.request.urlopen(request, timeout=60).status)\\n"
    "except urllib.error.HTTPError as error:\\n"
    "    print(error.code, error.headers['Retry-After'])\\n"
)


def test_other_process(laya_server):
    laya_server.fail(503, retry_after=3)
    ask = [sys.executable, "-c", CLIENT, laya_server.url]
    assert subprocess.run(ask, capture_output=True, text=True, check=True).stdout.split() == ["503", "3"]
    assert subprocess.run(ask, capture_output=True, text=True, check=True).stdout.split() == ["200"]
""")
    run(pytester, "--laya-mode=fake").assert_outcomes(passed=1)


def test_the_marker_lets_one_test_reach_the_network_under_the_run_wide_block(pytester):
    pytester.makepyfile(test_it=SERVICE + """
from pytest_laya import NetworkBlocked
from pytest_laya.fake import FakeLayaServer


@pytest.mark.laya(block_network=False)
def test_open():
    with FakeLayaServer() as other:  # a host that is not the test's Laya server
        assert httpx.get(other.url + "/health").status_code == 200


@pytest.mark.laya(caught_errors="ignore")
def test_blocked():
    with FakeLayaServer() as other, pytest.raises(NetworkBlocked):
        httpx.get(other.url + "/health")
""")
    run(pytester, "--laya-block-network").assert_outcomes(passed=2)

"""pytest-laya beside respx, pytest-httpx and httpx.MockTransport: requests they answer are never
blocked under --laya-block-network, the decision answers they give are held to the spec, and
`pytest_laya.answer`, `respx_side_effect` and `httpx_callback` give them complete, valid answers
(docs/plugin.md's example of the three, in MOCKED and the last test)."""

from __future__ import annotations

import pytest

from tests.helpers.pytester_runs import WITHOUT_UNUSED_PLUGINS, run

pytest_plugins = ["pytester"]

pytest.importorskip("respx")
pytest.importorskip("pytest_httpx")

QUESTIONS = {"team": {"type": "choice", "instructions": "Which team?", "criteria": {"billing": "money", "tech": "bugs"}},
             "urgent": {"type": "noul", "instructions": "Urgent?"}}

MOCKED = f"""
import httpx
import pytest

from pytest_laya import SpecViolationError, httpx_callback, respx_side_effect

QUESTIONS = {QUESTIONS!r}
URL = "http://laya.test/v1/systemone"
BROKEN = {{"model": "tiny", "answers": {{"urgent": {{"type": "noul", "noul": 1.5, "confidence": 0.9}}}},
          "usage": {{"input_tokens": 1, "output_tokens": 0, "state_tokens": 1, "truncated": False}}}}


def ask():
    return httpx.post(URL, json={{"state": "I was charged twice.", "questions": QUESTIONS}})


def test_respx_valid(respx_mock):
    respx_mock.post(URL).mock(side_effect=respx_side_effect(team="billing", urgent=0.95))
    body = ask().json()
    assert body["answers"]["team"]["choice"] == "billing" and body["answers"]["urgent"]["noul"] == 0.95


def test_respx_broken(respx_mock):
    respx_mock.post(URL).respond(json=BROKEN)
    ask()


def test_httpx_mock_valid(httpx_mock):
    httpx_mock.add_callback(httpx_callback(team="tech"), url=URL)
    response = ask()
    assert response.json()["answers"]["team"]["choice"] == "tech" and response.headers["x-request-id"]


def test_httpx_mock_broken(httpx_mock):
    httpx_mock.add_response(url=URL, json=BROKEN)
    ask()


def test_other_hosts_mocked(respx_mock, httpx_mock):
    pass


def test_respx_other_host(respx_mock):
    respx_mock.get("http://api.example.com/x").respond(204)
    assert httpx.get("http://api.example.com/x").status_code == 204


def test_pytest_httpx_other_host(httpx_mock):
    httpx_mock.add_response(url="http://api.example.com/x", status_code=204)
    assert httpx.get("http://api.example.com/x").status_code == 204


def test_mock_transport():
    with httpx.Client(transport=httpx.MockTransport(lambda request: httpx.Response(204))) as client:
        assert client.get("http://api.example.com/x").status_code == 204
"""


@pytest.mark.parametrize("blocked", [[], ["--laya-block-network"]], ids=["open", "blocked"])
def test_other_mocks_are_never_blocked_and_their_laya_answers_are_checked(pytester, blocked):
    pytester.makepyfile(test_it=MOCKED)
    result = run(pytester, *blocked, "-rf")
    result.assert_outcomes(passed=6, failed=2)
    # Counted in the tracebacks ("E" lines): the -rf summary repeats the first line or not, by the terminal's width.
    raised = [line for line in result.stdout.lines if line.startswith("E ")]
    assert sum("SpecViolationError: POST /v1/systemone -> 200 breaks the current spec" in line for line in raised) == 2
    assert sum("/body/answers/urgent/noul: expected <= 1, got 1.5" in line for line in raised) == 2
    result.stdout.fnmatch_lines(["FAILED test_it.py::test_respx_broken - *", "FAILED test_it.py::test_httpx_mock_broken - *"])


def test_answer_gives_a_complete_valid_body():
    from pytest_laya import Spec, answer
    from pytest_laya.fake.pins import PinError as FakePinError

    body = answer(QUESTIONS, team="billing", urgent=0.95)
    assert body["answers"]["team"]["choice"] == "billing" and body["answers"]["urgent"]["noul"] == 0.95
    assert sum(body["answers"]["team"]["probabilities"].values()) == pytest.approx(1)
    assert body["usage"]["input_tokens"] > 0 and "confidence" in body["answers"]["team"]
    import json

    assert Spec.current().violations("POST", "/v1/systemone", 200, {"content-type": "application/json"},
                                     json.dumps(body).encode()) == []
    with pytest.raises(FakePinError, match="'nope' is not among its options"):
        answer(QUESTIONS, team="nope")


RECORDED_BESIDE_HTTPX_MOCK = """
import httpx
import pytest


@pytest.mark.httpx_mock(should_mock=lambda request: request.url.path != "/v1/systemone")
def test_weather_mocked_laya_recorded(httpx_mock, laya_server):
    httpx_mock.add_response(url="http://weather.test/now", json={"weather": "snow"})
    assert httpx.get("http://weather.test/now").json() == {"weather": "snow"}
    headers = {"authorization": f"Bearer {laya_server.api_key.reveal()}"}
    body = {"state": "Refund me.", "questions": {"refund": {"type": "noul", "instructions": "Refund?"}}}
    response = httpx.post(f"{laya_server.url}/v1/systemone", json=body, headers=headers)
    assert 0 <= response.json()["answers"]["refund"]["noul"] <= 1
"""


def test_the_kits_health_read_goes_past_pytest_httpx_while_recording(pytester):
    # Recording opens the test's route with pytest-httpx's mock in place; the kit's own /health
    # read must reach the server, not the mock (which fails the test for a request nobody registered).
    from pytest_laya.fake import FakeLayaServer
    from tests.helpers.pytester_runs import CANARY

    pytester.makepyfile(test_it=RECORDED_BESIDE_HTTPX_MOCK)
    with FakeLayaServer(flavor="laya-serve-0.4.15", api_key=CANARY) as server:
        result = run(pytester, "--laya-record", f"--laya-url={server.url}", f"--laya-api-key={CANARY}")
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*not expected*")


PYTEST_HTTPX_THEN_RESPX = """
import httpx


def test_a_pytest_httpx(httpx_mock):
    httpx_mock.add_response(url="http://weather.test/now", json={"weather": "snow"})
    assert httpx.get("http://weather.test/now").json() == {"weather": "snow"}


def test_b_respx(respx_mock):
    respx_mock.get("http://weather.test/now").respond(json={"weather": "rain"})
    assert httpx.get("http://weather.test/now").json() == {"weather": "rain"}
"""


def test_vcrpy_loaded_under_pytest_httpx_keeps_httpx_own_handler(pytester):
    # The kit loads vcrpy in the first test that needs its patches: here one with pytest-httpx's
    # mock in place. vcrpy must not keep that mock as httpx's handler for the tests after it.
    # A new process: this one has loaded vcrpy already.
    pytester.makepyfile(test_it=PYTEST_HTTPX_THEN_RESPX)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:asyncio", *WITHOUT_UNUSED_PLUGINS)
    result.assert_outcomes(passed=2)


LAYA_BESIDE_PLAIN_HTTPX_MOCK = """
import httpx


def test_weather_mocked(httpx_mock, laya_server):
    httpx_mock.add_response(url="http://weather.test/now", json={"weather": "snow"})
    assert httpx.get("http://weather.test/now").json() == {"weather": "snow"}
    body = {"state": "Refund me.", "questions": {"refund": {"type": "noul", "instructions": "Refund?"}}}
    response = httpx.post(f"{laya_server.url}/v1/systemone", json=body)
    assert 0 <= response.json()["answers"]["refund"]["noul"] <= 1
    assert len(laya_server.calls) == 1
"""


def test_a_laya_servers_requests_go_past_pytest_httpx_in_every_mode(pytester):
    # pytest-httpx mocks another host; the test's Laya requests go to its route, not to the mock,
    # when recording and live as in replay (where the route answers before the mock is asked).
    from pytest_laya.fake import FakeLayaServer

    pytester.makepyfile(test_it=LAYA_BESIDE_PLAIN_HTTPX_MOCK)
    with FakeLayaServer(flavor="laya-serve-0.4.15") as server:
        run(pytester, "--laya-record", f"--laya-url={server.url}").assert_outcomes(passed=1)
        run(pytester, "--laya-mode=live", f"--laya-url={server.url}").assert_outcomes(passed=1)
        assert [r.path for r in server.requests].count("/v1/systemone") == 2
    run(pytester).assert_outcomes(passed=1)

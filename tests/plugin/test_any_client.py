"""Every client a downstream service uses is recorded, replayed and held to the spec (issue 14).

The inner suites call the Laya server with their own clients -- httpx (sync and async), urllib,
requests -- given only `laya_url` / `laya_server`; nothing goes through the kit's client.
"""

from __future__ import annotations

import json

import httpcore  # noqa: F401
import httpx  # noqa: F401
import pytest
import vcr  # noqa: F401
import vcr.stubs.httpx_stubs  # noqa: F401

from pytest_laya.fake import FakeLayaServer
from pytest_laya.faults import Handler, Respond, ScriptedServer, closed_loopback_url
from tests.helpers.pytester_runs import cassette_data, report_of, run

pytest_plugins = ["pytester"]

OWN_CLIENTS = """
import asyncio
import json
import urllib.request

import httpx
import requests

BODY = {"state": "I was charged twice. Refund me.",
        "questions": {"refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
                      "team": {"type": "choice", "instructions": "Which team?", "criteria": ["billing", "tech"]}}}


def check(answer):
    assert 0 <= answer["answers"]["refund"]["noul"] <= 1


def test_httpx(laya_url):
    with httpx.Client() as client:
        check(client.post(laya_url + "/v1/systemone", json=BODY).raise_for_status().json())


def test_async_httpx(laya_url):
    async def ask():
        async with httpx.AsyncClient() as client:
            return (await client.post(laya_url + "/v1/systemone", json=BODY)).raise_for_status().json()
    check(asyncio.run(ask()))


def test_urllib(laya_url):
    request = urllib.request.Request(laya_url + "/v1/systemone", data=json.dumps(BODY).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request) as response:
        check(json.loads(response.read()))


def test_requests(laya_server):
    response = requests.post(laya_server.url + "/v1/systemone", json=BODY)
    response.raise_for_status()
    check(response.json())
"""
CLIENTS = ("test_httpx", "test_async_httpx", "test_urllib", "test_requests")


@pytest.fixture
def laya_serve_like():
    with FakeLayaServer(flavor="laya-serve-0.4.15") as server:
        yield server


def _break_probability(path):
    """A hand edit: the recorded noul probability becomes 1.5."""
    text = path.read_text()
    data = cassette_data(path)
    body = data["interactions"][0]["response"]["body"]["string"]
    answer = json.loads(body)
    answer["answers"]["refund"]["noul"] = 1.5
    edited = json.dumps(answer, separators=(",", ":"))
    data["interactions"][0]["response"]["body"]["string"] = edited
    import yaml

    path.write_text(yaml.safe_dump(data, sort_keys=True))
    assert text != path.read_text()


def test_own_clients_record_replay_and_are_validated(pytester, laya_serve_like):
    pytester.makepyfile(test_it=OWN_CLIENTS)
    recorded = run(pytester, "--laya-record", f"--laya-url={laya_serve_like.url}", "-v")
    recorded.assert_outcomes(passed=4)
    recorded.stdout.fnmatch_lines(["mode: record; servers: live http://127.0.0.1:* (current spec)",
                                   "cassettes: 4 recorded",
                                   "*live http://127.0.0.1:* current *0 violations in 4 responses"])
    served = len(laya_serve_like.requests)
    report = pytester.path / "laya.json"
    replayed = run(pytester, f"--laya-report={report}", "-v")
    replayed.assert_outcomes(passed=4)
    replayed.stdout.fnmatch_lines(["mode: replay; servers: replay of fake-laya (current spec)", "cassettes: 4 played",
                                   "*replay of fake-laya * current *0 violations in 4 responses"])
    assert len(laya_serve_like.requests) == served  # replay never reached the server
    tests = {record["test"].split("::")[1]: record for record in report_of(report)["tests"]}
    assert set(tests) == set(CLIENTS)
    assert all(t["exchanges"] == 1 and t["outcome"] == "replayed" and t["violations"] == [] for t in tests.values())


def test_a_hand_edited_cassette_fails_whichever_client_replays_it(pytester, laya_serve_like):
    pytester.makepyfile(test_it=OWN_CLIENTS)
    run(pytester, "--laya-record", f"--laya-url={laya_serve_like.url}").assert_outcomes(passed=4)
    for path in (pytester.path / "cassettes" / "test_it").glob("*.yaml"):
        _break_probability(path)
    result = run(pytester)
    result.assert_outcomes(failed=4)
    text = result.stdout.str()
    assert text.count("SpecViolationError") >= 4
    result.stdout.fnmatch_lines(["*/body/answers/refund/noul: expected <= 1, got 1.5*",
                                 "*replayed from the cassette *test_it/test_*.yaml*"])
    # The report mode lists the same violations and lets the tests go on (here to their own check).
    report = pytester.path / "laya.json"
    listed = run(pytester, "--laya-conformance=report", f"--laya-report={report}")
    listed.assert_outcomes(failed=4)
    assert "SpecViolationError" not in listed.stdout.str() and listed.stdout.str().count("assert 1.5 <= 1") >= 4
    assert all(any("got 1.5" in v for v in t["violations"]) for t in report_of(report)["tests"])
    # ...in the terminal summary too: each with its test, server, spec and pointer
    summary = listed.stdout.str().split("pytest-laya")[-1]
    for client in CLIENTS:
        assert f"test_it.py::{client}: replay of fake-laya (current spec): POST /v1/systemone -> 200: " \
               f"/body/answers/refund/noul: expected <= 1, got 1.5" in summary
    # and nothing advises the mode the run is already in
    assert all("--laya-conformance=report" not in v for t in report_of(report)["tests"] for v in t["violations"])


def test_laya_server_alone_never_opens_a_socket_in_replay(pytester, monkeypatch):
    pytester.makepyfile(test_it="""
import httpx

def test_only_the_url(laya_url):
    httpx.post(laya_url + "/v1/systemone", json={"state": "s", "questions": {}})
""")
    import socket

    opened = []
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: opened.append(a) or (_ for _ in ()).throw(OSError("no DNS")))
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*CassetteMissing*no cassette for this test*--laya-record*"])
    assert opened == []


def test_the_plugin_reads_laya_served_url_and_hands_the_url_to_the_environment(pytester, laya_serve_like, monkeypatch):
    pytester.makeini("[pytest]\nlaya_url_env = MY_SERVICE_LAYA_URL\n")
    pytester.makepyfile(test_it="""
import os
import httpx

def test_service_reads_the_environment(laya_server):
    url = os.environ["MY_SERVICE_LAYA_URL"]
    assert url == laya_server.url
    httpx.post(url + "/v1/systemone", json={"state": "s", "questions": {"q": {"type": "noul", "instructions": "?"}}})
""")
    monkeypatch.setenv("LAYA_SERVED_URL", laya_serve_like.url)
    run(pytester, "--laya-record").assert_outcomes(passed=1)  # no --laya-url: LAYA_SERVED_URL names it
    assert any(r.path == "/v1/systemone" for r in laya_serve_like.requests)
    monkeypatch.delenv("LAYA_SERVED_URL")
    run(pytester).assert_outcomes(passed=1)


def test_other_hosts_are_untouched_and_never_in_the_laya_cassette(pytester, laya_serve_like):
    def other(request):
        return Respond(200, {"ticket": 7}, headers={"Content-Type": "application/json"})

    with ScriptedServer(default=Handler(other)) as service:
        pytester.makepyfile(test_it=OWN_CLIENTS.split("def test_httpx")[0] + f"""
def test_laya_and_another_service(laya_url):
    with httpx.Client() as client:
        check(client.post(laya_url + "/v1/systemone", json=BODY).json())
        assert client.get("{service.url}/tickets/7").json() == {{"ticket": 7}}
""")
        run(pytester, "--laya-record", f"--laya-url={laya_serve_like.url}").assert_outcomes(passed=1)
        [path] = (pytester.path / "cassettes").rglob("*.yaml")
        uris = [i["request"]["uri"] for i in cassette_data(path)["interactions"]]
        assert uris == ["http://laya.invalid/v1/systemone"]
        asked = len(service.requests)
        run(pytester).assert_outcomes(passed=1)  # the other service is reached live in replay too
        assert len(service.requests) == asked + 1


def test_block_network_refuses_hosts_that_are_not_allowed(pytester):
    unreachable = closed_loopback_url()
    with ScriptedServer(default=Respond(200, {"ok": True})) as allowed:
        pytester.makeconftest("""
import pytest

@pytest.fixture
def laya_vcr_config():
    return {"allowed_hosts": ["%s"]}
""" % allowed.url.split("//")[1])
        pytester.makepyfile(test_it=f"""
import httpx

def test_blocked():
    httpx.get("{unreachable}/x")

def test_allowed():
    assert httpx.get("{allowed.url}/y").json() == {{"ok": True}}
""")
        result = run(pytester, "--laya-block-network")
        result.assert_outcomes(passed=1, failed=1)
        result.stdout.fnmatch_lines(["*NetworkBlocked: GET 127.0.0.1:*/x: the network is blocked (--laya-block-network)*"])
        run(pytester).assert_outcomes(passed=1, failed=1)  # without the option, the refused port itself fails
        assert len(allowed.requests) == 2


def test_an_error_the_code_swallows_still_fails_the_test(pytester):
    pytester.makepyfile(test_it="""
import httpx

def test_service_catches_everything(laya_url):
    try:
        httpx.post(laya_url + "/v1/systemone", json={"state": "s", "questions": {}})
    except Exception:
        pass  # a service that logs and carries on
""")
    result = run(pytester, "-rA")
    result.assert_outcomes(failed=1)  # the test itself fails, not its teardown after a "passed"
    result.stdout.fnmatch_lines(["*CassetteMissing: no cassette for this test*",
                                 "*The code under test caught this error*",
                                 "FAILED test_it.py::test_service_catches_everything - *"])
    assert "PASSED" not in result.stdout.str() and "ERROR at teardown" not in result.stdout.str()


def test_spec_auto_follows_the_laya_spec_header(pytester):
    from pytest_laya.fake import FakeLaya

    laya = FakeLaya()

    def target_claiming(request):
        status, headers, body = laya.answer(json.loads(request.body))
        return Respond(status, body, headers={**headers, "Laya-Spec": "target"})

    with ScriptedServer(default=Handler(target_claiming)) as server:
        pytester.makepyfile(test_it=OWN_CLIENTS.split("def test_async_httpx")[0])
        result = run(pytester, "--laya-mode=live", f"--laya-url={server.url}", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["mode: live; servers: live http://127.0.0.1:* (target spec)"])


def test_the_cassette_lists_the_calls_any_client_made(pytester, laya_serve_like):
    pytester.makepyfile(test_it=OWN_CLIENTS.split("def test_httpx")[0] + """
def test_calls(laya_url, laya_cassette):
    with httpx.Client() as client:
        client.post(laya_url + "/v1/systemone", json=BODY, headers={"Authorization": "Bearer sk-calls-0000"})
    [call] = laya_cassette.calls
    assert call.state == BODY["state"] and call.questions["team"].criteria == ["billing", "tech"]
    assert call.status == 200 and 0 <= call.response["answers"]["refund"]["noul"] <= 1
    assert "sk-calls-0000" not in str(call.headers)
    laya_cassette.calls.assert_called_once_with(state=BODY["state"])
""")
    run(pytester, "--laya-record", f"--laya-url={laya_serve_like.url}").assert_outcomes(passed=1)
    run(pytester).assert_outcomes(passed=1)

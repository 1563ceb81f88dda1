"""`laya_proxy`: a service in another process (Node, a Python subprocess) recorded and replayed
through the test's own route, in every mode, over a real loopback socket."""

from __future__ import annotations

import json
import shutil

import httpcore  # noqa: F401
import httpx  # noqa: F401
import pytest
import vcr  # noqa: F401
import vcr.stubs.httpx_stubs  # noqa: F401
import yaml

import pytest_laya.plugin.proxy  # noqa: F401
import pytest_laya.proxy  # noqa: F401
from pytest_laya.fake import FakeLayaServer
from tests.helpers.pytester_runs import run
from tests.helpers.servers import reference_server

# pytester's in-process runs drop modules first imported inside them; importing the network
# stack and the proxy here keeps one copy of each class (as tests/plugin/test_verify.py does).

pytest_plugins = ["pytester"]

needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="needs Node 20 (node, built-in fetch)")

#: A Node 20 service: one decision with the built-in fetch, to the URL laya_url_env exported; it
#: prints the status and the parsed body. The question's instructions come from argv.
NODE_CLIENT = r"""
const instructions = process.argv[2] ?? "Does the customer ask for a refund?";
const body = {state: "I was charged twice. Refund me.",
              questions: {refund: {type: "noul", instructions}}};
const response = await fetch(process.env.LAYA_SERVED_URL + "/v1/systemone", {
  method: "POST", headers: {"content-type": "application/json"}, body: JSON.stringify(body)});
console.log(JSON.stringify({status: response.status, type: response.headers.get("content-type"),
                            body: await response.json()}));
"""

NODE_TEST = """
import json
import os
import subprocess


def node(*args):
    done = subprocess.run(["node", "client.mjs", *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_triage(laya_proxy, laya_url_env, laya_server):
    assert os.environ["LAYA_SERVED_URL"] == laya_proxy.url
    assert laya_proxy.calls is laya_server.calls  # one route, one list of calls
    assert repr(laya_proxy) == f"<LayaProxy {laya_proxy.kind} {laya_proxy.url} calls=0>"
    answer = node(*([os.environ["ASK"]] if "ASK" in os.environ else []))
    print("ANSWER", json.dumps(answer))
    if os.environ.get("LENIENT"):
        return  # a service that logs an error and carries on: the route fails the test all the same
    assert answer["status"] == 200, answer
    assert 0 <= answer["body"]["answers"]["refund"]["noul"] <= 1
    laya_proxy.calls.assert_called_once()
    assert laya_proxy.calls[0].questions["refund"].instructions == "Does the customer ask for a refund?"
"""


@pytest.fixture
def node_project(pytester):
    pytester.makefile(".mjs", client=NODE_CLIENT)
    pytester.makepyfile(test_it=NODE_TEST)
    return pytester


def answer_printed(result):
    [line] = [line for line in result.stdout.lines if "ANSWER {" in line]
    return json.loads(line.partition("ANSWER ")[2])


def cassette_of(pytester):
    return pytester.path / "cassettes" / "test_it" / "test_triage.yaml"


def record_from_fake(pytester, *args):
    with FakeLayaServer() as fake:
        result = run(pytester, "--laya-record", f"--laya-url={fake.url}", *args)
    result.assert_outcomes(passed=1)
    return cassette_of(pytester)


@needs_node
def test_node_records_against_the_reference_server_and_replays_with_it_stopped(node_project):
    with reference_server() as served:
        recorded = run(node_project, "--laya-record", f"--laya-url={served.url}", "-s")
        recorded.assert_outcomes(passed=1)
    data = yaml.safe_load(cassette_of(node_project).read_text())
    [interaction] = data["interactions"]
    assert interaction["request"]["method"] == "POST"
    assert interaction["request"]["uri"] == "http://laya.invalid/v1/systemone"
    assert data["metadata"]["pytest_laya"]["identity"]  # the reference server's weights, as in process

    replayed = run(node_project, "-s", "-v")  # the reference server is gone: the cassette answers
    replayed.assert_outcomes(passed=1)
    assert answer_printed(replayed)["body"] == answer_printed(recorded)["body"]
    replayed.stdout.fnmatch_lines(["mode: replay*", "cassettes: 1 played",
                                   "*0 violations in 1 responses*"])


@needs_node
def test_a_miss_is_answered_as_a_cassette_miss_problem_and_fails_the_test(node_project, monkeypatch):
    record_from_fake(node_project)
    monkeypatch.setenv("ASK", "Is the customer angry?")
    monkeypatch.setenv("LENIENT", "1")
    result = run(node_project, "-s")
    result.assert_outcomes(failed=1)
    answer = answer_printed(result)
    assert answer["status"] == 500 and answer["type"] == "application/problem+json"
    assert answer["body"]["code"] == "cassette_miss"
    assert "closest recorded request: POST /v1/systemone (interaction 1 of 1)" in answer["body"]["detail"]
    assert "body at /questions/refund/instructions" in answer["body"]["detail"]
    result.stdout.fnmatch_lines(["*CassetteMiss: no recorded interaction matches POST /v1/systemone*"])


@needs_node
def test_a_test_failing_for_its_own_reason_still_shows_the_miss_behind_it(node_project, monkeypatch):
    record_from_fake(node_project)
    monkeypatch.setenv("ASK", "Is the customer angry?")  # the service gets a cassette_miss; the test's assert fails
    result = run(node_project)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*assert 500 == 200*", "*Laya errors the code under test caught*",
                                 "CassetteMiss: no recorded interaction matches POST /v1/systemone*"])


@needs_node
def test_a_cassette_edited_to_break_the_spec_fails_the_test(node_project, monkeypatch):
    cassette = record_from_fake(node_project)
    data = yaml.safe_load(cassette.read_text())
    response = data["interactions"][0]["response"]
    body = json.loads(response["body"]["string"])
    body["answers"]["refund"]["noul"] = "yes"  # not a probability
    response["body"]["string"] = json.dumps(body)
    response["headers"].pop("content-length", None)
    cassette.write_text(yaml.safe_dump(data))
    monkeypatch.setenv("LENIENT", "1")
    result = run(node_project, "-s", "--laya-spec=target")
    result.assert_outcomes(failed=1)
    answer = answer_printed(result)
    assert answer["status"] == 500 and answer["body"]["code"] == "spec_violation"
    assert "/answers/refund/noul" in answer["body"]["detail"]
    result.stdout.fnmatch_lines(["*SpecViolationError*noul*"])


@needs_node
def test_live_forwards_and_verify_compares(node_project):
    record_from_fake(node_project)
    before = cassette_of(node_project).read_bytes()
    with FakeLayaServer() as fake:
        live = run(node_project, "--laya-mode=live", f"--laya-url={fake.url}")
        live.assert_outcomes(passed=1)
        assert [r.path for r in fake.requests if r.method == "POST"] == ["/v1/systemone"]  # forwarded, once
        run(node_project, "--laya-mode=verify", f"--laya-url={fake.url}").assert_outcomes(passed=1)
    with FakeLayaServer(revision="fake-1") as changed:
        drifted = run(node_project, "--laya-mode=verify", f"--laya-url={changed.url}")
    drifted.assert_outcomes(passed=1, errors=1)
    drifted.stdout.fnmatch_lines(['*body at /served_by/revision (recorded "fake-0", now "fake-1")*'])
    assert cassette_of(node_project).read_bytes() == before  # neither live nor verify writes


TIMEOUT_CLIENT = r"""
try {
  await fetch(process.env.LAYA_SERVED_URL + "/v1/systemone", {method: "POST", body: "{}",
              headers: {"content-type": "application/json"}, signal: AbortSignal.timeout(3000)});
  console.log("answered");
} catch (error) {
  console.log(error.name);
}
"""

TIMEOUT_TEST = """
import subprocess


def test_scripted_timeout(laya_server, laya_proxy, laya_url_env):
    laya_server.timeout()
    done = subprocess.run(["node", "timeout.mjs"], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "TimeoutError", done.stdout + done.stderr
    assert [call.outcome for call in laya_server.calls] == ["timeout"]
"""


@needs_node
def test_fake_mode_answers_as_the_fake_with_the_tests_pins_and_faults(node_project):
    node_project.makepyfile(test_pinned=NODE_TEST.replace("def test_triage(", """
import pytest

@pytest.mark.laya(answers={"refund": 0.93})
def test_pinned(""").replace("assert 0 <= answer", "assert answer['body']['answers']['refund']['noul'] == 0.93\n    assert 0 <= answer"))
    node_project.makefile(".mjs", timeout=TIMEOUT_CLIENT)
    node_project.makepyfile(test_timeout=TIMEOUT_TEST)
    result = run(node_project, "--laya-mode=fake", "-s")
    result.assert_outcomes(passed=3)
    assert not (node_project.path / "cassettes").exists()


SERVICE = """
import json
import os
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer

BODY = json.dumps({"state": "Where is my parcel?",
                   "questions": {"team": {"type": "choice", "instructions": "Which team?",
                                          "criteria": {"billing": "money", "shipping": "parcels"}}}}).encode()


class Triage(BaseHTTPRequestHandler):
    def do_GET(self):
        sent = urllib.request.Request(os.environ["LAYA_SERVED_URL"] + "/v1/systemone", data=BODY,
                                      headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(sent, timeout=30) as response:
            team = json.load(response)["answers"]["team"]["choice"]
        self.send_response(200)
        self.end_headers()
        self.wfile.write(team.encode())

    def log_message(self, *args):
        pass


server = HTTPServer(("127.0.0.1", 0), Triage)
print(server.server_address[1], flush=True)
server.serve_forever()
"""

SERVICE_TEST = """
import subprocess
import sys
import urllib.request

import pytest


@pytest.fixture
def triage_service(laya_proxy, laya_url_env):
    process = subprocess.Popen([sys.executable, "service.py"], stdout=subprocess.PIPE, text=True)
    try:
        yield f"http://127.0.0.1:{process.stdout.readline().strip()}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_triage(triage_service, laya_proxy):
    with urllib.request.urlopen(triage_service + "/triage", timeout=30) as response:
        assert response.read().decode() in ("billing", "shipping")
    laya_proxy.calls.assert_called_once()
"""


def test_a_subprocess_service_started_by_a_fixture_records_and_replays(pytester):
    pytester.makepyfile(service=SERVICE, test_it=SERVICE_TEST)
    record_from_fake(pytester)
    run(pytester).assert_outcomes(passed=1)


PYTHON_SERVICE_TEST = """
import json
import subprocess
import sys

SERVICE = (
    "import json, os, urllib.request;"
    "body = json.dumps({'state': 'Refund me.', 'questions': {'refund': {'type': 'noul', 'instructions': 'Refund?'}}});"
    "request = urllib.request.Request(os.environ['LAYA_SERVED_URL'] + '/v1/systemone', data=body.encode(),"
    " headers={'content-type': 'application/json'}, method='POST');"
    "print(urllib.request.urlopen(request, timeout=30).read().decode())")


def test_service(laya_proxy, laya_url_env):
    done = subprocess.run([sys.executable, "-c", SERVICE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert 0 <= json.loads(done.stdout)["answers"]["refund"]["noul"] <= 1
"""

VCRPY_LOADED = """
import sys


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line("vcrpy loaded: " + str("vcr" in sys.modules))
"""


def test_a_proxied_replay_loads_no_vcrpy(pytester):
    # Loaded once, vcrpy turns the kit's own replay off for every later test of the process.
    pytester.makepyfile(test_it=PYTHON_SERVICE_TEST)
    with FakeLayaServer() as fake:
        run(pytester, "--laya-record", f"--laya-url={fake.url}").assert_outcomes(passed=1)
    pytester.makeconftest(VCRPY_LOADED)
    replayed = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:asyncio", "-p", "no:schemathesis",
                                             "-p", "no:hypothesispytest")
    replayed.assert_outcomes(passed=1)
    replayed.stdout.fnmatch_lines(["vcrpy loaded: False", "*cassettes: 1 played*"])

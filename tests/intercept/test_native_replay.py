"""The kit's own replay (issue 36): every client replays without vcrpy, as vcrpy's patches replay it.

A process that has not loaded vcrpy (nor a client library only vcrpy patches) replays through
`intercept.native` and `cassettes.replay`; this suite's own process has loaded vcrpy, so its
in-process runs take vcrpy's path. Each test here runs the same replay both ways and holds
them to the same outcome, the same calls and the same miss message.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import vcr  # noqa: F401  (this process replays through vcrpy's patches; subprocesses do not)

from pytest_laya.cassettes.replay import open_replay
from pytest_laya.fake import FakeLayaServer
from tests.helpers.pytester_runs import WITHOUT_UNUSED_PLUGINS, run

pytest_plugins = ["pytester"]

CLIENTS = """
import asyncio
import json
import urllib.request

import httpx
import requests

BODY = {"state": "I was charged twice. Refund me.",
        "questions": {"refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"}}}


def check(answer):
    assert 0 <= answer["answers"]["refund"]["noul"] <= 1


def test_httpx(laya_server, laya_url):
    with httpx.Client() as client:
        check(client.post(laya_url + "/v1/systemone", json=BODY).raise_for_status().json())
    assert len(laya_server.calls) == 1


def test_async_httpx(laya_url):
    async def ask():
        async with httpx.AsyncClient() as client:
            return (await client.post(laya_url + "/v1/systemone", json=BODY)).raise_for_status().json()
    check(asyncio.run(ask()))


def test_urllib(laya_server, laya_url):
    request = urllib.request.Request(laya_url + "/v1/systemone", data=json.dumps(BODY).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request) as response:
        check(json.loads(response.read()))
    assert len(laya_server.calls) == 1 and laya_server.calls[0].status == 200


def test_requests(laya_server):
    response = requests.post(laya_server.url + "/v1/systemone", json=BODY)
    response.raise_for_status()
    check(response.json())


def test_kit_client(laya_client):
    assert 0 <= laya_client.decide(BODY["state"], BODY["questions"])["refund"].p <= 1
"""

#: Says, at the end of the inner run, whether vcrpy was loaded.
CONFTEST = """
import sys


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line("vcrpy loaded: " + str("vcr" in sys.modules))
"""


@pytest.fixture
def recorded(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_clients=CLIENTS)
    pytester.makeconftest(CONFTEST)
    with FakeLayaServer() as fake:
        run(pytester, "--laya-record", "--laya-url", fake.url).assert_outcomes(passed=5)
    return pytester


def _native(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *WITHOUT_UNUSED_PLUGINS, *args)


def test_every_client_replays_without_vcrpy(recorded: pytest.Pytester) -> None:
    result = _native(recorded)
    result.assert_outcomes(passed=5)
    result.stdout.fnmatch_lines(["vcrpy loaded: False", "*cassettes: 5 played*"])


def test_a_miss_says_the_same_without_vcrpy(recorded: pytest.Pytester) -> None:
    edited = recorded.path / "test_clients.py"
    edited.write_text(edited.read_text().replace("I was charged twice. Refund me.", "I was charged once."))
    with_vcrpy = run(recorded)
    without = _native(recorded)
    with_vcrpy.assert_outcomes(failed=5)
    without.assert_outcomes(failed=5)
    without.stdout.fnmatch_lines(["vcrpy loaded: False"])

    def misses(result: pytest.RunResult) -> list[str]:
        return sorted(line.split("CassetteMiss: ", 1)[1] for line in result.outlines
                      if line.startswith("E ") and "CassetteMiss: " in line)

    assert misses(with_vcrpy) and misses(without) == misses(with_vcrpy)


def test_a_replay_cassette_is_read_again_when_its_file_changes(tmp_path: Path) -> None:
    path = tmp_path / "one.yaml"

    def write(answer: float) -> None:
        body = json.dumps({"answers": {"refund": {"type": "noul", "noul": answer}}})
        path.write_text(
            "interactions:\n- request:\n    body: '{}'\n    headers: {}\n    method: POST\n"
            "    uri: http://laya.invalid/v1/systemone\n  response:\n"
            f"    body:\n      string: '{body}'\n    headers: {{}}\n    status:\n      code: 200\n"
            "      message: OK\nversion: 1\n")

    def played() -> bytes:
        from pytest_laya.intercept.request import Request

        handle = open_replay(path, api_key=None, strict=False, record_hint="--laya-record")
        request = Request("POST", "http://laya.invalid/v1/systemone", b"{}", {})
        assert handle.cassette.can_play_response_for(request)
        body: bytes = handle.cassette.play_response(request)["body"]["string"]
        return body

    write(0.25)
    assert b"0.25" in played() and b"0.25" in played()
    write(0.5)  # same size, another answer: the file's mtime (and inode, when replaced) tell
    stat = os.stat(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    time.sleep(0)
    assert b"0.5" in played()
    kept = os.stat(path)
    write(0.6)  # same size, in place, and the old mtime put back (``cp -p``, a restore tool): its ctime tells
    os.utime(path, ns=(kept.st_atime_ns, kept.st_mtime_ns))
    assert os.stat(path).st_size == kept.st_size and os.stat(path).st_ino == kept.st_ino
    assert b"0.6" in played()

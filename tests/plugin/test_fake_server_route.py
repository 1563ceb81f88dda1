"""`laya_fake_server` is a Laya server of the test: reached under --laya-block-network, whichever
client calls it, and every response it sends is checked and counted in the conformance table."""

from __future__ import annotations

import httpcore  # noqa: F401
import httpx  # noqa: F401
import vcr  # noqa: F401
import vcr.stubs.httpx_stubs  # noqa: F401

from tests.helpers.pytester_runs import report_of, run

pytest_plugins = ["pytester"]

OWN_CLIENTS = """
import json
import urllib.request

import httpx
import pytest

BODY = {"state": "I was charged twice.", "questions": {"refund": {"type": "noul", "instructions": "Refund?"}}}


def test_httpx(laya_fake_server):
    laya_fake_server.decide({"refund": 0.9})
    answer = httpx.post(laya_fake_server.url + "/v1/systemone", json=BODY).json()
    assert answer["answers"]["refund"]["noul"] == 0.9


def test_urllib(laya_fake_server):
    request = urllib.request.Request(laya_fake_server.url + "/v1/systemone", data=json.dumps(BODY).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request) as response:
        assert json.loads(response.read())["answers"]["refund"]["noul"] >= 0


def test_a_scripted_garbage_body_reaches_the_service(laya_fake_server):
    laya_fake_server.garbage_body()
    with pytest.raises(json.JSONDecodeError):  # the service's own handling of a broken answer
        httpx.post(laya_fake_server.url + "/v1/systemone", json=BODY).json()
"""


def test_own_clients_reach_the_fake_under_block_network_and_are_counted(pytester):
    pytester.makepyfile(test_it=OWN_CLIENTS)
    report = pytester.path / "laya.json"
    result = run(pytester, "--laya-block-network", f"--laya-report={report}", "-v")
    result.assert_outcomes(passed=3)
    rows = {row["spec"]: row for row in report_of(report)["conformance"] if row["server"] == "laya_fake_server"}
    assert set(rows) == {"current", "target"}
    # The scripted garbage is the test's own fault: neither checked nor counted as a violation.
    assert rows["target"]["exchanges"] == 2 and rows["target"]["violations"] == 0
    out = result.stdout.str()
    assert "laya_fake_server" in out and "servers: laya_fake_server (target spec)" in out
    assert "spec violations" not in out


def test_the_fake_beside_a_replayed_server_keeps_both_routes(pytester):
    pytester.makepyfile(test_it="""
import httpx

BODY = {"state": "s", "questions": {"refund": {"type": "noul", "instructions": "Refund?"}}}

def test_both(laya_url, laya_fake_server):
    assert httpx.post(laya_fake_server.url + "/v1/systemone", json=BODY).status_code == 200
    httpx.post(laya_url + "/v1/systemone", json=BODY)  # nothing recorded: a miss, failing the test
""")
    result = run(pytester, "--laya-block-network")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*CassetteMissing*"])
    assert "NetworkBlocked" not in result.stdout.str()

"""The summary is quiet by default: one line (mode, cassettes, violations of the spec each server
is held to) and what asks for action; the conformance table under -v; a fault the test scripted
is no violation; a test that made no Laya call needs no cassette."""

from __future__ import annotations

from tests.helpers.pytester_runs import TEST_DECIDE, run

pytest_plugins = ["pytester"]

SCRIPTED = """
import httpx

BODY = {"state": "x", "questions": {"q": {"type": "noul", "instructions": "Yes?"}}}


def test_scripted_503(laya_server, laya_fake_server):
    laya_server.fail(503)
    laya_fake_server.status(503)
    assert httpx.post(laya_server.url + "/v1/systemone", json=BODY).status_code == 503
    assert httpx.post(laya_fake_server.url + "/v1/systemone", json=BODY).status_code == 503
    assert httpx.post(laya_server.url + "/v1/systemone", json=BODY).status_code == 200
"""


def test_one_line_by_default_and_the_table_under_v(pytester):
    pytester.makepyfile(test_it=TEST_DECIDE + SCRIPTED)
    quiet = run(pytester, "--laya-mode=fake")
    quiet.assert_outcomes(passed=2)
    quiet.stdout.fnmatch_lines(["*= pytest-laya =*",
                                "mode: fake; cassettes: none used; violations: 0 (-v for the conformance table)",
                                "*= 2 passed*"])
    assert "operations" not in quiet.stdout.str() and "servers:" not in quiet.stdout.str()
    verbose = run(pytester, "--laya-mode=fake", "-v")
    verbose.stdout.fnmatch_lines(["mode: fake; servers: *", "cassettes: none used",
                                  "  fake http://127.0.0.1:* target   operations */*, 0 violations in * responses"])


def test_a_test_that_made_no_laya_call_needs_no_cassette(pytester):
    pytester.makepyfile(test_it="""
def test_nothing_asked(laya_server):
    assert laya_server.calls == []
""")
    result = run(pytester)
    result.assert_outcomes(passed=1)
    assert "missing" not in result.stdout.str()

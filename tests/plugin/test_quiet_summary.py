"""The summary is quiet by default: one line (mode, cassettes, violations of the spec each server
is held to) and what asks for action; the conformance table under -v; a fault the test scripted
is no violation; a test that made no Laya call needs no cassette."""

from __future__ import annotations

import pytest

from pytest_laya.__main__ import main
from pytest_laya.fake import FakeLayaServer
from tests.helpers.pytester_runs import TEST_DECIDE, WITHOUT_UNUSED_PLUGINS, report_of, run

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


def test_a_scripted_fault_is_no_violation_in_the_table_the_report_or_its_merge(pytester, capsys):
    # laya_server.fail(503) answers as the target spec says, which the current spec does not know:
    # the test's own fault counts against neither, in every place that counts violations.
    pytester.makepyfile(test_it=SCRIPTED)
    verbose = run(pytester, "--laya-mode=fake", "-v", "--laya-report=r.json")
    verbose.assert_outcomes(passed=1)
    verbose.stdout.fnmatch_lines(["conformance (each server's responses, against each spec):",
                                  "  fake http://127.0.0.1:* current  operations 1/1, *0 violations in 1 responses",
                                  "  fake http://127.0.0.1:* target   operations 1/1, *0 violations in 1 responses"])
    report = report_of(pytester.path / "r.json")
    assert [row["violations"] for row in report["conformance"]] == [0, 0]
    pytester.chdir()
    capsys.readouterr()
    assert main(["report", "merge", "r.json", "--out", "merged.json"]) == 0
    assert ", 0 violations," in capsys.readouterr().out


def test_the_conformance_rows_have_their_heading(pytester):
    pytester.makepyfile(test_it=TEST_DECIDE)
    verbose = run(pytester, "--laya-mode=fake", "-v")
    verbose.stdout.fnmatch_lines(["cassettes: none used", "conformance (each server's responses, against each spec):",
                                  "  fake http://127.0.0.1:* current  operations */*, 0 violations in * responses",
                                  "  fake http://127.0.0.1:* target   operations */*, 0 violations in * responses"],
                                 consecutive=True)


OWN_HTTPX = """
import httpx

BODY = {"state": "I was charged twice.", "questions": {"refund": {"type": "noul", "instructions": "Refund?"}}}


def test_refund(laya_url):
    assert httpx.post(laya_url + "/v1/systemone", json=BODY).raise_for_status().json()["answers"]["refund"]
"""


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_the_spec_a_server_is_not_held_to_is_measured_when_the_table_is_read(pytester, workers):
    # laya-serve 0.4.15 claims the current spec and meets it; it lacks what only the target asks for.
    # A quiet replay holds each answer to its claimed spec alone; -v and the report measure both.
    pytester.makepyfile(test_it=OWN_HTTPX)
    with FakeLayaServer(flavor="laya-serve-0.4.15") as server:
        run(pytester, "--laya-record", f"--laya-url={server.url}").assert_outcomes(passed=1)
    quiet = run(pytester, *workers, *WITHOUT_UNUSED_PLUGINS)
    quiet.assert_outcomes(passed=1)
    quiet.stdout.fnmatch_lines(["mode: replay; cassettes: 1 played; violations: 0 (-v for the conformance table)"])
    verbose = run(pytester, "-v", f"--laya-report={pytester.path / 'r.json'}", *workers, *WITHOUT_UNUSED_PLUGINS)
    verbose.assert_outcomes(passed=1)
    verbose.stdout.fnmatch_lines(["conformance (each server's responses, against each spec):",
                                  "  replay* current  operations 1/1, *, 0 violations in 1 responses",
                                  "  replay* target   operations 0/1, *, [1-9]* violations in 1 responses"])
    rows = {row["spec"]: row["violations"] for row in report_of(pytester.path / "r.json")["conformance"]}
    assert rows["current"] == 0 and rows["target"] > 0

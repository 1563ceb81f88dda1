"""An appended cassette is told apart from one recorded whole and one left untouched: the
summary's `appended` count, the JSON report's `cassettes` and test `outcome`, the report merge
and the HTML page (issue 34)."""

from __future__ import annotations

import httpcore  # noqa: F401
import httpx  # noqa: F401
import pytest
import vcr  # noqa: F401
import vcr.stubs.httpx_stubs  # noqa: F401

from pytest_laya.__main__ import main
from pytest_laya.fake import FakeLayaServer
from tests.helpers.pytester_runs import CANARY, TEST_DECIDE, report_of, run

pytest_plugins = ["pytester"]

SECOND = '''
    again = laya_client.decide("The second charge is still there.", {
        "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
    })
    assert 0 <= again["refund"].p <= 1
'''


def _tests(grown: str = "", new: bool = False) -> str:
    """test_grows (with `grown` added to it), test_same and, when `new`, test_new (no cassette yet)."""
    text = (TEST_DECIDE + grown).replace("def test_refund", "def test_grows")
    text += TEST_DECIDE.replace("def test_refund", "def test_same")
    return text + (TEST_DECIDE.replace("def test_refund", "def test_new") if new else "")


@pytest.fixture
def server():
    with FakeLayaServer(api_key=CANARY) as fake:
        yield fake


def _counted(report) -> dict[str, int]:
    return {key: count for key, count in report["cassettes"].items() if count}


def _record(pytester, server, *args):
    return run(pytester, f"--laya-url={server.url}", f"--laya-api-key={CANARY}", *args)


def _appending_run(pytester, server, report: str):
    """Record test_grows and test_same whole; then append to test_grows, leave test_same untouched
    and record test_new whole, writing `report`."""
    pytester.makepyfile(test_it=_tests())
    _record(pytester, server, "--laya-record").assert_outcomes(passed=2)
    pytester.makepyfile(test_it=_tests(SECOND, new=True))
    result = _record(pytester, server, "--laya-record=new_episodes", f"--laya-report={report}")
    result.assert_outcomes(passed=3)
    return result


def test_the_summary_and_the_json_report_tell_appended_recorded_and_untouched_apart(pytester, server):
    result = _appending_run(pytester, server, "report.json")
    result.stdout.fnmatch_lines(["*cassettes: 1 recorded, 1 appended, 1 unchanged (file untouched);*"])
    report = report_of(pytester.path / "report.json")
    assert _counted(report) == {"recorded": 1, "appended": 1, "unchanged": 1}
    outcomes = {record["test"].rsplit("::", 1)[1]: record["outcome"] for record in report["tests"]}
    assert outcomes == {"test_grows": "appended", "test_same": "unchanged", "test_new": "written"}


def test_a_merged_report_adds_the_appended_counts_and_says_them(pytester, server, capsys):
    _appending_run(pytester, server, "one.json")
    # A second shard's run: test_same grows too.
    grown = (TEST_DECIDE + SECOND).replace("def test_refund", "def test_same")
    pytester.makepyfile(test_it=_tests(SECOND, new=True).replace(
        TEST_DECIDE.replace("def test_refund", "def test_same"), grown))
    _record(pytester, server, "--laya-record=new_episodes", "--laya-report=two.json").assert_outcomes(passed=3)
    assert _counted(report_of(pytester.path / "two.json")) == {"appended": 1, "unchanged": 2}
    merged = pytester.path / "merged.json"
    capsys.readouterr()
    assert main(["report", "merge", str(pytester.path / "one.json"), str(pytester.path / "two.json"),
                 "--out", str(merged)]) == 0
    assert "cassettes: 1 recorded, 2 appended, 3 unchanged (file untouched)" in capsys.readouterr().out
    merged_report = report_of(merged)
    assert _counted(merged_report) == {"recorded": 1, "appended": 2, "unchanged": 3}
    assert sorted(record["outcome"] for record in merged_report["tests"]) == \
        ["appended", "appended", "unchanged", "unchanged", "unchanged", "written"]


def test_the_html_report_lists_each_cassette_as_appended_recorded_whole_or_untouched(pytester, server):
    pytest.importorskip("matplotlib.figure")
    from pytest_laya.report.html import render_html

    _appending_run(pytester, server, "report.json")
    page = render_html(report_of(pytester.path / "report.json"))
    assert "Cassettes: 1 appended, 1 recorded, 1 unchanged." in page
    for name, what in (("test_grows", "appended to (the requests it lacked)"), ("test_new", "recorded whole"),
                       ("test_same", "unchanged (file untouched)")):
        assert f"test_it/{name}.yaml</code> {what}</li>" in page

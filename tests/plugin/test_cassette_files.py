"""Broken and unwritable cassette files through the plugin: recording repairs a broken one and
says so; replay of a broken one is one clear error, counted in the summary; a failed save is a
`CassetteError` that names the file and what to do, and is counted (issues 31 and 32)."""

from __future__ import annotations

import pytest

from pytest_laya.fake import FakeLayaServer
from tests.helpers.pytester_runs import TEST_DECIDE, report_of, run

pytest_plugins = ["pytester"]

CASSETTE = "cassettes/test_it/test_refund.yaml"
BROKEN = {
    "empty": b"",
    "truncated": b"interactions:\n- request:\n    body: '{\"state\": \"I was char",
    "binary": b"\xff\xfe\x00\x01\x89PNG",
    "unknown-version": b"interactions: []\nversion: 2\n",
}


@pytest.mark.parametrize("record", ["--laya-record", "--laya-record=missing"])
@pytest.mark.parametrize("damage", BROKEN, ids=list(BROKEN))
def test_recording_replaces_a_broken_cassette_and_says_so(pytester, damage, record):
    pytester.makepyfile(test_it=TEST_DECIDE)
    path = pytester.path / CASSETTE
    path.parent.mkdir(parents=True)
    path.write_bytes(BROKEN[damage])
    report = pytester.path / "report.json"
    with FakeLayaServer() as server:
        result = run(pytester, record, f"--laya-url={server.url}", f"--laya-report={report}")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*cassettes: 1 recorded;*", "broken cassettes replaced by this recording:",
                                 f"  {CASSETTE}: *"])
    assert report_of(report)["notes"]["broken cassettes replaced by this recording"]
    assert not list(path.parent.glob(".*.tmp"))
    run(pytester).assert_outcomes(passed=1)  # the repaired cassette replays


def test_record_missing_needs_a_url_for_a_broken_cassette_only(pytester):
    pytester.makepyfile(test_it=TEST_DECIDE)
    path = pytester.path / CASSETTE
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    result = run(pytester, "--laya-record=missing")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*needs --laya-url*"])


def test_replaying_a_broken_cassette_is_one_message_that_says_what_to_do_and_is_counted(pytester):
    pytester.makepyfile(test_it=TEST_DECIDE)
    path = pytester.path / CASSETTE
    path.parent.mkdir(parents=True)
    path.write_bytes(b"interactions: []\n")
    report = pytester.path / "report.json"
    result = run(pytester, f"--laya-report={report}")
    result.assert_outcomes(errors=1)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(["E * has no 'version' key: the file is truncated *To fix it, record the test again "
                                 "(--laya-record, or --laya-record=missing, replaces a broken file)*",
                                 "*cassettes: 1 broken (replay could not read the file);*"])
    assert "contextlib" not in out and "__enter__" not in out
    data = report_of(report)
    assert data["cassettes"]["broken"] == 1
    assert [(t["test"], t["outcome"]) for t in data["tests"]] == [("test_it.py::test_refund", "broken")]


def test_a_fifo_cassette_fails_the_test_instead_of_hanging_the_run(pytester):
    import os

    pytester.makepyfile(test_it=TEST_DECIDE)
    path = pytester.path / CASSETTE
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    result = run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["E * a FIFO (named pipe), not a regular file. Remove it*"])


def test_the_size_limit_is_an_option_and_an_ini_key(pytester):
    pytester.makepyfile(test_it=TEST_DECIDE)
    with FakeLayaServer() as server:
        run(pytester, "--laya-record", f"--laya-url={server.url}").assert_outcomes(passed=1)
    small = run(pytester, "--laya-max-cassette-size=1kB")
    small.assert_outcomes(errors=1)
    small.stdout.fnmatch_lines(["E * over the size limit of 1024 bytes*--laya-max-cassette-size*"])
    pytester.makeini("[pytest]\nlaya_max_cassette_size = 1MiB\n")
    run(pytester).assert_outcomes(passed=1)
    bad = run(pytester, "--laya-max-cassette-size=lots")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--laya-max-cassette-size: a cassette size limit is a positive size such as 16MiB*"])


def test_a_failed_save_names_the_file_and_what_to_do_and_is_counted(pytester):
    # Root writes into a read-only directory, so the save is made to fail with a name longer
    # than the file system allows (the marker's cassette= is taken as given).
    long_name = "x" * 300
    pytester.makepyfile(test_it="import pytest\n" + TEST_DECIDE.replace(
        "def test_refund", f"@pytest.mark.laya(cassette={long_name!r})\ndef test_refund"))
    report = pytester.path / "report.json"
    with FakeLayaServer() as server:
        result = run(pytester, "--laya-record", f"--laya-url={server.url}", f"--laya-report={report}")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["E * could not write cassette *xxx.yaml: File name too long; the previous file is "
                                 "unchanged. Its name is too long *@pytest.mark.laya(cassette='short_name.yaml')*",
                                 "*cassettes: 1 not saved (the write failed);*"])
    assert "OSError" not in result.stdout.str()
    assert report_of(report)["cassettes"]["unsaved"] == 1


PARAMETRISED = """
import pytest

@pytest.mark.parametrize("state", {ids!r})
def test_each(laya_client, state):
    assert laya_client.decide(state, {{"q": {{"type": "noul", "instructions": "?"}}}})["q"].p >= 0
"""


def test_ids_with_double_colons_and_dots_get_their_own_cassettes(pytester):
    pytester.makepyfile(test_it=PARAMETRISED.format(ids=["a::b", "a.b"]))
    with FakeLayaServer() as server:
        run(pytester, "--laya-record", f"--laya-url={server.url}").assert_outcomes(passed=2)
    names = sorted(p.name for p in (pytester.path / "cassettes/test_it").glob("*.yaml"))
    assert names == ["test_each[a%3A%3Ab].yaml", "test_each[a.b].yaml"]
    run(pytester).assert_outcomes(passed=2)


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "two xdist workers"])
def test_ids_that_differ_only_in_case_are_refused_with_advice_that_fits(pytester, workers):
    from tests.helpers.pytester_runs import WITHOUT_UNUSED_PLUGINS

    pytester.makepyfile(test_it=PARAMETRISED.format(ids=["Refund", "refund"]))
    with FakeLayaServer() as server:
        result = run(pytester, "--laya-record", f"--laya-url={server.url}", *workers, *WITHOUT_UNUSED_PLUGINS)
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*test_it.py::test_each[[]Refund] and test_it.py::test_each[[]refund] have cassette "
                                 "names that differ only in case*case-insensitive file system (macOS, Windows)*"
                                 "Give the tests ids that differ in more than case (pytest.param(..., id='...'))*"])
    assert "drop @pytest.mark.laya(cassette=...)" not in result.stdout.str()
    assert not list((pytester.path / "cassettes").rglob("*.yaml")) if (pytester.path / "cassettes").exists() else True

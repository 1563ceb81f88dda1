"""--laya-max-age and --laya-identity-check: stale cassettes fail (or warn) by name (issue 38)."""

from __future__ import annotations

import datetime
import re
import shlex

import pytest

from pytest_laya.cassettes.freshness import age_finding, identity_finding
from pytest_laya.fake import FakeLayaServer
from tests.helpers.pytester_runs import TEST_DECIDE, cassette_data, report_of, run

pytest_plugins = ["pytester"]

CASSETTE = "cassettes/test_it/test_refund.yaml"


def _recorded(pytester, model="one"):
    pytester.makepyfile(test_it=TEST_DECIDE)
    with FakeLayaServer(model=model) as fake:
        run(pytester, "--laya-record", f"--laya-url={fake.url}").assert_outcomes(passed=1)
    return pytester.path / CASSETTE


def _date(path, days_ago):
    day = (datetime.datetime.now(datetime.timezone.utc).date() - datetime.timedelta(days=days_ago)).isoformat()
    text, count = re.subn(r"(?m)^(\s+recorded: )'?[0-9-]+'?$", rf"\g<1>'{day}'", path.read_text())
    assert count == 1
    path.write_text(text)
    return day


def test_a_cassette_recorded_400_days_ago_fails_under_max_age_180_by_name(pytester):
    path = _recorded(pytester)
    day = _date(path, 400)
    result = run(pytester, "--laya-max-age", "180", "--laya-report", "report.json")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([
        f"*cassette {CASSETTE} was recorded on {day}, 400 days ago, more than the 180 days --laya-max-age allows: "
        f"record it again with pytest test_it.py::test_refund --laya-record --laya-max-age 180 --laya-url URL*",
        "stale cassettes:", f"  {CASSETTE}: was recorded on {day}, 400 days ago*"])
    stale = report_of(pytester.path / "report.json")["stale_cassettes"]
    assert stale == [{"test": "test_it.py::test_refund", "cassette": CASSETTE, "kind": "age", "recorded": day,
                      "age_days": 400, "reason": stale[0]["reason"]}]
    # Within the limit, and without one, it replays.
    run(pytester, "--laya-max-age", "400").assert_outcomes(passed=1)
    run(pytester).assert_outcomes(passed=1)


def test_max_age_warn_warns_and_replays(pytester):
    path = _recorded(pytester)
    _date(path, 400)
    result = run(pytester, "--laya-max-age=180", "--laya-max-age-warn")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines([f"*PytestWarning: cassette {CASSETTE} was recorded on *400 days ago*"])


def test_the_ini_sets_the_limit_and_a_bad_value_is_a_usage_error(pytester):
    path = _recorded(pytester)
    _date(path, 30)
    pytester.makeini("[pytest]\nlaya_max_age = 7\n")
    run(pytester).assert_outcomes(errors=1)
    bad = run(pytester, "--laya-max-age", "half a year")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--laya-max-age: *whole number >= 0, e.g. 180*"])


def test_a_cassette_without_a_recording_date_counts_as_stale(pytester):
    path = _recorded(pytester)
    path.write_text(re.sub(r"(?m)^\s+recorded: .*\n", "", path.read_text()))
    result = run(pytester, "--laya-max-age=180")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*cassette {CASSETTE} has no recording date*its age is unknown*"])


def test_re_recording_a_stale_cassette_moves_its_date_even_when_nothing_changed(pytester):
    path = _recorded(pytester)
    day = _date(path, 400)
    with FakeLayaServer(model="one") as fake:
        # Without a limit, an unchanged re-record keeps the first date (no churn in git)...
        run(pytester, "--laya-record", f"--laya-url={fake.url}").assert_outcomes(passed=1)
        assert cassette_data(path)["metadata"]["pytest_laya"]["recorded"] == day
        # ...under one, the recording confirms it today.
        run(pytester, "--laya-record", f"--laya-url={fake.url}", "--laya-max-age=180").assert_outcomes(passed=1)
    assert age_finding(cassette_data(path)["metadata"]["pytest_laya"], 0) is None
    run(pytester, "--laya-max-age=180").assert_outcomes(passed=1)


def test_running_the_printed_re_record_command_makes_the_test_fresh(pytester):
    # An unchanged re-record keeps its first date unless the limit is given: the command carries it.
    path = _recorded(pytester)
    _date(path, 400)
    stale = run(pytester, "--laya-max-age", "180")
    stale.assert_outcomes(errors=1)
    command = re.search(r"record it again with pytest (.*?--laya-url) URL$", stale.stdout.str(), re.M)
    assert command is not None, stale.stdout.str()
    with FakeLayaServer(model="one") as fake:
        run(pytester, *shlex.split(command.group(1)), fake.url).assert_outcomes(passed=1)
    assert age_finding(cassette_data(path)["metadata"]["pytest_laya"], 0) is None
    run(pytester, "--laya-max-age", "180").assert_outcomes(passed=1)


def test_identity_check_flags_cassettes_from_other_weights(pytester):
    _recorded(pytester, model="one")
    with FakeLayaServer(model="one") as same:
        run(pytester, "--laya-identity-check", f"--laya-url={same.url}").assert_outcomes(passed=1)
    with FakeLayaServer(model="two") as other:
        result = run(pytester, "--laya-identity-check", f"--laya-url={other.url}", "--laya-report=r.json")
        result.assert_outcomes(errors=1)
        result.stdout.fnmatch_lines([f"*cassette {CASSETTE} was recorded from one@fake-0, but "
                                     f"{other.url} serves two@fake-0: record it again with*"])
        assert report_of(pytester.path / "r.json")["stale_cassettes"][0]["kind"] == "identity"
        warned = run(pytester, "--laya-identity-check", "--laya-max-age-warn", f"--laya-url={other.url}")
        warned.assert_outcomes(passed=1, warnings=1)
    with FakeLayaServer(model="one", revision="fake-1") as moved:
        result = run(pytester, "--laya-identity-check", f"--laya-url={moved.url}")
        result.assert_outcomes(errors=1)
        result.stdout.fnmatch_lines(["*was recorded from one at revision fake-0, but * serves one@fake-1*"])


def test_identity_check_needs_a_url(pytester):
    pytester.makepyfile(test_it=TEST_DECIDE)
    result = run(pytester, "--laya-identity-check")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--laya-identity-check * give its URL with --laya-url*"])


def test_age_is_counted_in_whole_days_up_to_the_limit():
    now = datetime.date(2026, 12, 6)
    assert age_finding({"recorded": "2026-06-09"}, 180, now=now) is None  # 180 days: still fresh
    assert age_finding({"recorded": "2026-06-08"}, 180, now=now).age_days == 181
    assert "unknown" in age_finding({"recorded": "yesterday"}, 180, now=now).reason


def test_identity_without_a_recorded_checkpoint_is_not_compared():
    assert identity_finding({}, [{"checkpoint": "a", "revision": "1"}], server="s") is False
    assert identity_finding({"identity": {"checkpoint": "a"}}, [{"checkpoint": "a", "revision": "1"}], server="s") is None

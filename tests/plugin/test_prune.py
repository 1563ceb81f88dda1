"""--laya-prune deletes only what no test can need, and never through a link (issue 31).

Each case once deleted a cassette a test still needed, or a file outside the project: a conftest
that drops tests without `pytest_deselected`, a test that skips before it asks for `laya_url`,
`collect_ignore`, a parameter list that depends on the environment, and cassettes that are
symbolic links.
"""

from __future__ import annotations

import os

import pytest

from pytest_laya.fake import FakeLayaServer
from tests.helpers.pytester_runs import TEST_DECIDE, report_of, run

pytest_plugins = ["pytester"]

URL_TEST = """
import httpx

def test_url(request):
    {skip}url = request.getfixturevalue("laya_url")
    httpx.get(url + "/health")
"""
PARAMETRISED = """
import os
import pytest

@pytest.mark.parametrize("state", os.environ.get("STATES", "a,b").split(","))
def test_each(laya_client, state):
    assert laya_client.decide(state, {"q": {"type": "noul", "instructions": "?"}})["q"].p >= 0
"""


@pytest.fixture
def server():
    with FakeLayaServer() as fake:
        yield fake


def _cassettes(pytester) -> list[str]:
    return sorted(p.relative_to(pytester.path).as_posix() for p in (pytester.path / "cassettes").rglob("*.yaml"))


def _record(pytester, server) -> list[str]:
    result = run(pytester, "--laya-record", f"--laya-url={server.url}")
    assert result.ret == 0, result.stdout.str()
    return _cassettes(pytester)


def test_a_conftest_that_drops_tests_without_deselecting_them_makes_the_run_partial(pytester, server):
    pytester.makepyfile(test_it=TEST_DECIDE + TEST_DECIDE.replace("def test_refund", "def test_slow_refund"))
    before = _record(pytester, server)
    assert len(before) == 2
    pytester.makeconftest("def pytest_collection_modifyitems(config, items):\n"
                          "    items[:] = [item for item in items if 'slow' not in item.nodeid]\n")
    report = pytester.path / "report.json"
    result = run(pytester, "--laya-prune", f"--laya-report={report}")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*--laya-prune deleted nothing*1 of 2 collected tests were left out of the run "
                                 "without pytest_deselected*"])
    assert _cassettes(pytester) == before and report_of(report)["unused_cassettes"] is None


def test_a_test_that_skips_before_asking_for_laya_url_keeps_its_cassette(pytester, server):
    pytester.makepyfile(test_it=URL_TEST.format(skip=""))
    before = _record(pytester, server)
    assert before == ["cassettes/test_it/test_url.yaml"]
    pytester.makepyfile(test_it=URL_TEST.format(skip="import pytest; pytest.skip('not today')\n    "))
    result = run(pytester, "--laya-prune")
    result.assert_outcomes(skipped=1)
    assert _cassettes(pytester) == before
    assert "pruned" not in result.stdout.str()


def test_collect_ignore_keeps_the_ignored_modules_cassettes(pytester, server):
    pytester.makepyfile(test_a=TEST_DECIDE, test_b=TEST_DECIDE)
    before = _record(pytester, server)
    assert len(before) == 2
    pytester.makeconftest("collect_ignore = ['test_b.py']\n")
    report = pytester.path / "report.json"
    result = run(pytester, "--laya-prune", f"--laya-report={report}")
    result.assert_outcomes(passed=1)
    assert _cassettes(pytester) == before and report_of(report)["pruned_cassettes"] == []


def test_a_parameter_the_environment_left_out_is_listed_but_not_pruned(pytester, server, monkeypatch):
    pytester.makepyfile(test_it=PARAMETRISED)
    before = _record(pytester, server)
    assert before == ["cassettes/test_it/test_each[a].yaml", "cassettes/test_it/test_each[b].yaml"]
    monkeypatch.setenv("STATES", "a")
    report = pytester.path / "report.json"
    result = run(pytester, "--laya-prune", f"--laya-report={report}")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*--laya-prune kept 1 unused cassette(s) of parametrised tests that still run "
                                 "(cassettes/test_it/test_each[[]b].yaml)*"])
    assert _cassettes(pytester) == before
    assert report_of(report)["unused_cassettes"] == ["cassettes/test_it/test_each[b].yaml"]


def test_prune_removes_a_link_never_its_target(pytester, server):
    pytester.makepyfile(test_it=TEST_DECIDE)
    _record(pytester, server)
    golden = pytester.path.parent / f"{pytester.path.name}-golden.yaml"  # outside the project
    golden.write_bytes((pytester.path / "cassettes/test_it/test_refund.yaml").read_bytes())
    link = pytester.path / "cassettes/test_it/test_old.yaml"
    link.symlink_to(golden)
    outside = pytester.path.parent / f"{pytester.path.name}-outside"
    (outside / "test_gone").mkdir(parents=True)
    (outside / "test_gone" / "test_x.yaml").write_bytes(golden.read_bytes())
    (pytester.path / "cassettes/linked").symlink_to(outside, target_is_directory=True)
    result = run(pytester, "--laya-prune")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*pruned 1 unused cassette(s):*", "  cassettes/test_it/test_old.yaml"])
    assert not os.path.lexists(link)
    assert golden.is_file() and (outside / "test_gone" / "test_x.yaml").is_file()  # nothing outside touched


def test_a_cassette_that_is_a_link_is_its_tests_own(pytester, server):
    pytester.makepyfile(test_it=TEST_DECIDE)
    _record(pytester, server)
    cassette = pytester.path / "cassettes/test_it/test_refund.yaml"
    golden = pytester.path.parent / f"{pytester.path.name}-shared.yaml"
    golden.write_bytes(cassette.read_bytes())
    cassette.unlink()
    cassette.symlink_to(golden)
    report = pytester.path / "report.json"
    result = run(pytester, "--laya-prune", f"--laya-report={report}")
    result.assert_outcomes(passed=1)
    assert report_of(report)["unused_cassettes"] == [] and cassette.is_symlink() and golden.is_file()

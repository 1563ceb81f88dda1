"""Split runs: each shard's --laya-report, joined by `python -m pytest_laya report merge` (issue 38)."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from pytest_laya.__main__ import main
from pytest_laya.fake import FakeLayaServer
from tests.helpers.pytester_runs import TEST_DECIDE, WITHOUT_UNUSED_PLUGINS, report_of, run

pytest_plugins = ["pytester"]

THREE = "".join(TEST_DECIDE.replace("def test_refund", f"def test_{name}") for name in ("one", "two", "three"))
GONE = "cassettes/test_a/test_gone.yaml"


@pytest.fixture
def project(pytester):
    """Three recorded tests, and a cassette whose test was deleted."""
    pytester.makepyfile(test_a=THREE)
    with FakeLayaServer() as fake:
        run(pytester, "--laya-record", f"--laya-url={fake.url}").assert_outcomes(passed=3)
    shutil.copy(pytester.path / "cassettes/test_a/test_one.yaml", pytester.path / GONE)
    return pytester


def _merge(pytester, capsys, *args):
    pytester.chdir()
    capsys.readouterr()  # what the inner runs printed
    status = main(["report", "merge", *args])
    return status, capsys.readouterr()


def test_two_shards_merge_into_one_report_that_finds_the_cassette_no_shard_used(project, capsys):
    run(project, "-k", "one or two", "--laya-report=shard1.json").assert_outcomes(passed=2)
    shard1 = report_of(project.path / "shard1.json")
    assert shard1["unused_cassettes"] is None  # a shard alone cannot tell
    assert shard1["used_cassettes"] == ["cassettes/test_a/test_one.yaml", "cassettes/test_a/test_two.yaml"]
    assert GONE in shard1["cassette_files"]
    # The other shard under pytest-xdist.
    run(project, "-k", "three", "--laya-report=shard2.json", "-n", "2",
        *WITHOUT_UNUSED_PLUGINS).assert_outcomes(passed=1)
    status, out = _merge(project, capsys, "shard1.json", "shard2.json", "--out", "merged.json")
    assert status == 0, out.err
    assert f"unused cassettes: 1\n  {GONE}" in out.out
    merged = report_of(project.path / "merged.json")
    assert merged["unused_cassettes"] == [GONE]
    assert merged["merged_from"] == ["shard1.json", "shard2.json"]
    assert merged["cassettes"]["played"] == 3
    assert sorted(record["test"] for record in merged["tests"]) == [
        "test_a.py::test_one", "test_a.py::test_three", "test_a.py::test_two"]
    assert [(row["spec"], row["exchanges"], row["violations"]) for row in merged["conformance"]] == [
        ("current", 3, 0), ("target", 3, 0)]
    # The merged report prunes what no shard used, and nothing else.
    capsys.readouterr()
    assert main(["report", "prune", "merged.json"]) == 0
    assert "pruned 1 unused cassette(s)" in capsys.readouterr().out
    assert not (project.path / GONE).exists()
    assert sorted(p.name for p in (project.path / "cassettes/test_a").iterdir()) == [
        "test_one.yaml", "test_three.yaml", "test_two.yaml"]
    run(project).assert_outcomes(passed=3)


def test_a_missing_shard_means_no_unused_cassettes_and_says_why(project, capsys):
    run(project, "-k", "one", "--laya-report=shard1.json").assert_outcomes(passed=1)
    status, out = _merge(project, capsys, "shard1.json", "--out", "merged.json")
    assert status == 0
    assert "2 test(s) ran in no shard: test_a.py::test_three, test_a.py::test_two" in out.out
    assert report_of(project.path / "merged.json")["unused_cassettes"] is None
    assert main(["report", "prune", "merged.json"]) == 1
    assert "nothing was deleted: 2 test(s) ran in no shard" in capsys.readouterr().err
    assert (project.path / GONE).exists()


def test_shards_of_pytest_split_merge(project, capsys):
    pytest.importorskip("pytest_split")
    for group in (1, 2):
        run(project, "--splits", "2", "--group", str(group), f"--laya-report=group{group}.json")
    status, out = _merge(project, capsys, "group1.json", "group2.json")
    assert status == 0
    merged = json.loads(out.out)
    assert merged["unused_cassettes"] == [GONE]
    assert len(merged["tests"]) == 3


def test_merge_carries_violations_and_stale_cassettes(project, capsys):
    path = project.path / "cassettes/test_a/test_two.yaml"
    path.write_text(re.sub(r"(?m)^(\s+recorded: ).*$", r"\g<1>'2001-01-01'", path.read_text()))
    run(project, "-k", "two", "--laya-max-age=30", "--laya-max-age-warn", "--laya-report=s.json")
    status, out = _merge(project, capsys, "s.json")
    assert status == 0
    (stale,) = json.loads(out.out)["stale_cassettes"]
    assert stale["cassette"] == "cassettes/test_a/test_two.yaml" and stale["recorded"] == "2001-01-01"


def test_a_file_that_is_not_a_report_is_a_clear_error(pytester, capsys):
    (pytester.path / "junit.json").write_text('{"tests": 3}')
    status, out = _merge(pytester, capsys, "junit.json", "absent.json")
    assert status == 2
    assert "junit.json is not a pytest-laya report: it lacks 'cassettes' and 'tests'" in out.err


def test_a_report_path_outside_the_project_in_space_form_is_a_usage_error_not_a_test_path(
        project, tmp_path_factory):
    # pytest picks the rootdir before it knows --laya-report: an existing PATH written apart counted
    # as a test path there, so node ids changed and the run looked partial.
    project.makeini("[pytest]\n")
    report = tmp_path_factory.mktemp("reports") / "r.json"
    run(project, "--laya-report", str(report)).assert_outcomes(passed=3)  # not there yet: no harm
    again = run(project, "--laya-report", str(report))
    assert again.ret == pytest.ExitCode.USAGE_ERROR
    again.stderr.fnmatch_lines([f"*--laya-report {report}: pytest read {report}, which exists, as a test path "
                                f"when it chose the rootdir*write --laya-report={report}*"])
    run(project, f"--laya-report={report}").assert_outcomes(passed=3)
    written = report_of(report)
    assert {test["test"] for test in written["tests"]} == {f"test_a.py::test_{n}" for n in ("one", "two", "three")}
    assert written["unused_cassettes"] == [GONE]
    # A path inside the project leaves the rootdir alone: the space form goes on working.
    run(project, "--laya-report", "inside.json").assert_outcomes(passed=3)
    run(project, "--laya-report", "inside.json").assert_outcomes(passed=3)

"""Record modes, counts, names, pruning and messages a suite coming from pytest-recording expects (issue 15)."""

from __future__ import annotations

import httpcore  # noqa: F401
import httpx  # noqa: F401
import pytest
import vcr  # noqa: F401
import vcr.stubs.httpx_stubs  # noqa: F401

from pytest_laya.fake import FakeLayaServer
from tests.helpers.pytester_runs import CANARY, TEST_DECIDE, WITHOUT_UNUSED_PLUGINS, cassette_data, report_of, run

pytest_plugins = ["pytester"]

TWO = TEST_DECIDE + TEST_DECIDE.replace("def test_refund", "def test_again")


@pytest.fixture
def server():
    with FakeLayaServer(flavor="laya-serve-0.4.15", api_key=CANARY) as fake:
        yield fake


def _record(pytester, server, *args):
    return run(pytester, f"--laya-url={server.url}", f"--laya-api-key={CANARY}", *args)


def test_record_missing_records_only_tests_without_a_cassette(pytester, server):
    pytester.makepyfile(test_it=TEST_DECIDE)
    _record(pytester, server, "--laya-record").assert_outcomes(passed=1)
    first = pytester.path / "cassettes/test_it/test_refund.yaml"
    before = first.read_bytes()
    pytester.makepyfile(test_it=TWO)
    result = _record(pytester, server, "--laya-record=missing")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["mode: record; cassettes: 1 played, 1 recorded; *"])
    assert first.read_bytes() == before
    assert (pytester.path / "cassettes/test_it/test_again.yaml").is_file()
    # Nothing missing: no server is needed at all.
    run(pytester, "--laya-record=missing").assert_outcomes(passed=2)


def test_record_missing_under_xdist_writes_each_missing_cassette_once_and_no_secret(pytester, server):
    tests = "".join(TEST_DECIDE.replace("def test_refund", f"def test_{n}") for n in range(6))
    pytester.makepyfile(test_a=tests, test_b=tests)
    (pytester.path / "cassettes").mkdir()
    run(pytester, "test_a.py", f"--laya-url={server.url}", f"--laya-api-key={CANARY}", "--laya-record").assert_outcomes(passed=6)
    result = _record(pytester, server, "--laya-record=missing", "-n", "2", *WITHOUT_UNUSED_PLUGINS)
    result.assert_outcomes(passed=12)
    result.stdout.fnmatch_lines(["*cassettes: 6 played, 6 recorded;*"])
    files = sorted(p.relative_to(pytester.path).as_posix() for p in (pytester.path / "cassettes").rglob("*.yaml"))
    assert len(files) == 12 and len(set(files)) == 12
    for path in (pytester.path / "cassettes").rglob("*.yaml"):
        assert CANARY not in path.read_text()


def test_a_test_path_after_the_record_option_is_a_clear_usage_error(pytester):
    pytester.makepyfile(test_it=TEST_DECIDE)
    result = run(pytester, "--laya-record", "test_it.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*'test_it.py' is not a record mode*put test paths before --laya-record*"])


def test_re_recording_says_which_answers_changed(pytester):
    pytester.makepyfile(test_it=TEST_DECIDE)
    with FakeLayaServer(model="one") as first:
        run(pytester, "--laya-record", f"--laya-url={first.url}", "--laya-spec=target").assert_outcomes(passed=1)
    with FakeLayaServer(model="one") as same:
        unchanged = run(pytester, "--laya-record", f"--laya-url={same.url}", "--laya-spec=target")
    unchanged.stdout.fnmatch_lines(["*cassettes: 1 unchanged (file untouched);*"])
    assert "answers changed" not in unchanged.stdout.str()
    with FakeLayaServer(model="two") as other:
        changed = run(pytester, "--laya-record", f"--laya-url={other.url}", "--laya-spec=target")
    changed.assert_outcomes(passed=1)
    changed.stdout.fnmatch_lines(["re-recorded cassettes whose answers changed:",
                                  "*cassettes/test_it/test_refund.yaml: 1 of 1 interactions changed",
                                  "*/served_by/checkpoint*"])


def test_a_test_that_skips_itself_while_recording_writes_no_cassette(pytester, server):
    pytester.makepyfile(test_it=TEST_DECIDE.replace('    assert 0 <= decision["refund"].p <= 1',
                                                    '    import pytest\n    pytest.skip("not today")'))
    result = _record(pytester, server, "--laya-record", "-v")
    result.assert_outcomes(skipped=1)
    assert not (pytester.path / "cassettes/test_it/test_refund.yaml").exists()
    result.stdout.fnmatch_lines(["*cassettes: 1 discarded*"])


def test_counts_say_what_happened(pytester, server):
    pytester.makepyfile(test_it=TEST_DECIDE)
    missing = run(pytester)
    missing.assert_outcomes(failed=1)
    missing.stdout.fnmatch_lines(["*cassettes: 1 missing (replay found no file);*",
                                  "*1 test(s) asked for a cassette that does not exist*--laya-record=missing*"])
    pytester.makepyfile(test_it=TEST_DECIDE + "    assert False\n")
    failed = _record(pytester, server, "--laya-record")
    failed.assert_outcomes(failed=1)
    failed.stdout.fnmatch_lines(["*cassettes: 1 discarded (test failed; nothing saved);*",
                                 "*had no cassette yet: nothing was saved*"])
    assert not (pytester.path / "cassettes").exists() or not list((pytester.path / "cassettes").rglob("*.yaml"))


def test_the_reference_marker_replays_without_the_reference_server(pytester):
    pytester.makeconftest("""
import pytest
from pytest_laya.fake import FakeLayaServer
from pytest_laya.servers import ServerHandle

@pytest.fixture(scope="session")
def laya_reference_server(request):
    if request.config.getoption("laya_mode") != "record" and not request.config.getoption("laya_record"):
        pytest.fail("replay started the reference server")
    with FakeLayaServer(model="tiny") as fake:
        yield ServerHandle(url=fake.url, kind="reference", spec="target")
""")
    pytester.makepyfile(test_it="import pytest\n\npytestmark = pytest.mark.laya(server='reference')\n" + TEST_DECIDE)
    recorded = run(pytester, "--laya-record", "-v")
    recorded.assert_outcomes(passed=1)
    recorded.stdout.fnmatch_lines(["mode: record; servers: reference http://127.0.0.1:* (target spec)",
                                   "cassettes: 1 recorded"])
    meta = cassette_data(pytester.path / "cassettes/test_it/test_refund.yaml")["metadata"]["pytest_laya"]
    assert meta["server"] == "reference" and meta["spec"] == "target"
    replayed = run(pytester, "-v")
    replayed.assert_outcomes(passed=1)
    replayed.stdout.fnmatch_lines(["mode: replay; servers: replay of reference (target spec)", "cassettes: 1 played"])


def test_prune_deletes_unused_cassettes_only_after_the_whole_suite(pytester, server):
    pytester.makepyfile(test_it=TEST_DECIDE)
    _record(pytester, server, "--laya-record").assert_outcomes(passed=1)
    kept = pytester.path / "cassettes/test_it/test_refund.yaml"
    stale = pytester.path / "cassettes/test_it/test_gone.yaml"
    stale.write_bytes(kept.read_bytes())
    partial = run(pytester, "--laya-prune", "-k", "refund")
    partial.assert_outcomes(passed=1)
    partial.stdout.fnmatch_lines(["*--laya-prune deleted nothing: it needs a whole-suite*-k*"])
    assert stale.is_file()
    report = pytester.path / "laya.json"
    whole = run(pytester, "--laya-prune", f"--laya-report={report}")
    whole.assert_outcomes(passed=1)
    whole.stdout.fnmatch_lines(["*pruned 1 unused cassette(s):*", "*cassettes/test_it/test_gone.yaml"])
    assert not stale.exists() and kept.is_file()
    assert report_of(report)["pruned_cassettes"] == ["cassettes/test_it/test_gone.yaml"]


def test_a_marker_cassette_must_stay_inside_the_cassette_directory(pytester):
    pytester.makepyfile(test_it="import pytest\n\n@pytest.mark.laya(cassette='../../escaped')\n" + TEST_DECIDE.lstrip())
    result = run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR or result.parseoutcomes().get("errors")
    assert "must be a relative path inside the cassette directory" in result.stdout.str() + result.stderr.str()
    assert not (pytester.path.parent / "escaped.yaml").exists()


def test_parametrize_ids_that_look_alike_get_their_own_cassettes(pytester, server):
    pytester.makepyfile(test_it="""
import pytest

@pytest.mark.parametrize("state", ["a/b", "a b", "a:b", "a_b", ".."], ids=lambda s: s)
def test_each(laya_client, state):
    laya_client.decide(state, {"q": {"type": "noul", "instructions": "Is it fine?"}})
""")
    _record(pytester, server, "--laya-record").assert_outcomes(passed=5)
    names = sorted(p.name for p in (pytester.path / "cassettes/test_it").glob("*.yaml"))
    assert len(names) == 5, names
    run(pytester).assert_outcomes(passed=5)


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "two xdist workers"])
def test_tests_sharing_a_cassette_are_errors_naming_both_and_nothing_is_written(pytester, server, workers):
    named = "import pytest\n\n@pytest.mark.laya(cassette='shared')\n" + TEST_DECIDE.lstrip()
    pytester.makepyfile(test_a=named, test_b=named.replace("test_refund", "test_other"))
    pytester.makeini("[pytest]\nlaya_cassette_dir = recorded\n")
    result = _record(pytester, server, "--laya-record", *workers, "-p", "no:randomly", *WITHOUT_UNUSED_PLUGINS)
    # Neither test ran: whichever worker got which, each is an error before its cassette opens.
    result.assert_outcomes(errors=2)
    out = result.stdout.str()
    shared = pytester.path / "recorded" / "shared.yaml"
    errors = out.split("short test summary info")[0]  # under CI the short summary repeats each in full
    assert errors.count(f"test_a.py::test_refund and test_b.py::test_other both use the cassette {shared}") == 2, out
    result.stdout.fnmatch_lines(["*Neither ran, and nothing was written to that file*"])
    assert not (pytester.path / "recorded").exists() or not list((pytester.path / "recorded").iterdir())
    assert "recorded" not in out.replace(f"{shared}", "") and "answers changed" not in out
    assert not [r for r in server.requests if r.path != "/health"]  # no decision was asked


def test_a_miss_shows_where_the_request_differs_and_no_library_frames(pytester, server):
    long_state = "I was charged twice for my order last week, please refund the duplicate payment today. " * 2
    pytester.makepyfile(test_it=TEST_DECIDE.replace('"I was charged twice. Refund me."', repr(long_state)))
    _record(pytester, server, "--laya-record").assert_outcomes(passed=1)
    changed = long_state[:-8] + "tomorrow. "
    pytester.makepyfile(test_it=TEST_DECIDE.replace('"I was charged twice. Refund me."', repr(changed)))
    result = run(pytester, "--tb=long")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "…" in out and "today" in out and "tomorrow" in out  # the window around the difference
    assert "site-packages/httpx" not in out and "site-packages/vcr" not in out

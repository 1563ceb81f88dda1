"""The plugin under pytest-xdist: cassettes, the summary and the unused-cassette check stay right."""

from __future__ import annotations

import json

import httpx
import pytest

from pytest_laya.client import Exchange
from pytest_laya.fake import FakeLaya, FakeLayaServer
from pytest_laya.specs.conformance import Conformance
from tests.helpers.pytester_runs import WITHOUT_UNUSED_PLUGINS, run

pytest.importorskip("xdist")

pytest_plugins = ["pytester"]

TESTS = """
import pytest

@pytest.mark.parametrize("state", ["one", "two", "three", "four"])
def test_decide(laya_client, state):
    for question in ("Is it urgent?", "Is it a refund?"):
        assert 0 <= laya_client.decide(state, {"q": {"type": "noul", "instructions": question}})["q"].p <= 1
"""


def sub(pytester, *args):
    """An inner run in a new process: where the controller's own exit and stderr are what is checked."""
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:asyncio", *WITHOUT_UNUSED_PLUGINS, *args)


def on_workers(pytester, *args):
    """An inner run on two xdist workers, its controller in this process (the workers are new
    processes either way; a controller process of its own would cost one more pytest start-up)."""
    return run(pytester, *WITHOUT_UNUSED_PLUGINS, "-n", "2", *args)


def record(pytester, laya_serve):
    """The four cassettes, recorded in this process: what the test checks is the runs after it
    on two workers (recording on workers is test_recording_and_replaying_on_two_workers')."""
    run(pytester, "--laya-record", f"--laya-url={laya_serve.url}").assert_outcomes(passed=4)
    assert len(cassettes(pytester)) == 4


@pytest.fixture
def laya_serve():
    with FakeLayaServer(flavor="laya-serve-0.4.15") as server:
        yield server


def cassettes(pytester):
    return sorted((pytester.path / "cassettes").rglob("*.yaml"))


def test_recording_and_replaying_on_two_workers(pytester, laya_serve):
    import yaml

    pytester.makepyfile(test_it=TESTS)
    report = pytester.path / "laya.json"
    recorded = on_workers(pytester, "--laya-record", f"--laya-url={laya_serve.url}", f"--laya-report={report}")
    recorded.assert_outcomes(passed=4)
    recorded.stdout.fnmatch_lines(["*cassettes: 4 recorded;*"])
    assert json.loads(report.read_text())["cassettes"]["recorded"] == 4
    files = cassettes(pytester)
    assert [f.name for f in files] == [f"test_decide[{s}].yaml" for s in ("four", "one", "three", "two")]
    assert not [p for p in (pytester.path / "cassettes").rglob("*") if p.is_file() and p.suffix != ".yaml"]
    for path in files:  # every file whole, every interaction there: two decisions and laya-serve's /health
        data = yaml.safe_load(path.read_text())
        assert data["version"] == 1
        assert sorted(i["request"]["method"] for i in data["interactions"]) == ["GET", "POST", "POST"]
        assert data["metadata"]["pytest_laya"]["identity"]["revision"] == "fake-0"
    served = len(laya_serve.requests)

    # Strict replay on two workers plays every interaction; one process sees the same conformance.
    two = on_workers(pytester, f"--laya-report={report}", "-v")
    two.assert_outcomes(passed=4)
    two.stdout.fnmatch_lines(["mode: replay; servers: replay of fake-laya (current spec)",
                              "cassettes: 4 played",
                              "  replay of fake-laya * current  operations 2/2, headers 4/4, 0 violations in 12 responses"])
    merged = json.loads(report.read_text())
    one = run(pytester, f"--laya-report={report}")
    one.assert_outcomes(passed=4)
    single = json.loads(report.read_text())
    assert merged == single
    assert merged["unused_cassettes"] == []
    assert len(laya_serve.requests) == served


def test_unused_cassettes_with_workers(pytester, laya_serve):
    pytester.makepyfile(test_it=TESTS)
    record(pytester, laya_serve)
    old = pytester.path / "cassettes" / "test_it" / "test_decide[five].yaml"
    old.write_bytes((pytester.path / "cassettes" / "test_it" / "test_decide[one].yaml").read_bytes())
    report = pytester.path / "laya.json"
    full = on_workers(pytester, f"--laya-report={report}")
    full.assert_outcomes(passed=4)
    assert full.ret == 0  # unused cassettes are reported, never a failure
    full.stdout.fnmatch_lines(["unused cassettes: 1 (delete them or run the tests that own them)",
                               "  cassettes/test_it/test_decide[[]five].yaml"])
    assert json.loads(report.read_text())["unused_cassettes"] == ["cassettes/test_it/test_decide[five].yaml"]
    for args in (["-k", "one or two"], ["--deselect", "test_it.py::test_decide[four]"], ["test_it.py::test_decide"]):
        partial = on_workers(pytester, f"--laya-report={report}", *args)
        assert partial.ret == 0
        assert "unused cassettes" not in partial.stdout.str()
        assert json.loads(report.read_text())["unused_cassettes"] is None


def test_a_run_stopped_on_a_worker_reports_no_unused_cassettes(pytester, laya_serve):
    pytester.makepyfile(test_it=TESTS)
    record(pytester, laya_serve)
    pytester.makepyfile(test_aaa="def test_fails():\n    assert False\n")
    report = pytester.path / "laya.json"
    stopped = on_workers(pytester, "-x", f"--laya-report={report}")
    assert stopped.ret != 0
    assert "unused cassettes" not in stopped.stdout.str()
    assert json.loads(report.read_text())["unused_cassettes"] is None
    failing = on_workers(pytester, f"--laya-report={report}")  # not stopped: checked, and nothing is unused
    failing.assert_outcomes(passed=4, failed=1)
    assert json.loads(report.read_text())["unused_cassettes"] == []


def _exchange(laya: FakeLaya, state: str, *, drop: tuple[str, ...] = ()) -> Exchange:
    body = {"state": state, "questions": {"q": {"type": "noul", "instructions": "?"}}}
    status, headers, payload = laya.answer(body)
    headers = {k: v for k, v in headers.items() if k.lower() not in drop}
    raw = json.dumps(payload).encode()
    return Exchange(method="POST", url="http://laya.invalid/v1/systemone", path="/v1/systemone", status=status,
                    headers=httpx.Headers({"content-type": "application/json", **headers}), body=raw,
                    request_body=json.dumps(body).encode(), elapsed_s=0.0)


def test_conformance_rows_merge_exactly():
    laya = FakeLaya()  # the target flavor: a response without X-Request-Id breaks the target spec
    exchanges = [_exchange(laya, "a"), _exchange(laya, "b", drop=("x-request-id",)), _exchange(laya, "c")]
    whole = Conformance()
    for exchange in exchanges:
        whole.check(exchange, server="s", claimed="target")
    first, second = Conformance(), Conformance()
    first.check(exchanges[0], server="s", claimed="target")
    for exchange in exchanges[1:]:
        second.check(exchange, server="s", claimed="target")
    merged = Conformance()
    merged.merge_rows(first.rows())
    merged.merge_rows(second.rows())
    assert merged.rows() == whole.rows()
    target = next(row for row in whole.rows() if row["spec"] == "target")
    assert target["headers_met"] < target["headers_seen"]  # the broken header stays broken after merging
    with pytest.raises(ValueError, match="cannot be merged exactly"):
        Conformance().merge_rows([{k: v for k, v in target.items() if k != "headers"}])


@pytest.mark.parametrize(("tests", "args", "message"), [
    ("@pytest.mark.laya(answrs={'q': 0.5})\ndef test_x(laya_server):\n    pass\n", (),
     "ERROR: test_it.py::test_x: @pytest.mark.laya has no option 'answrs'; use *"),
    ("def test_x(laya_server):\n    pass\n", ("--laya-record",), "ERROR: --laya-mode=record needs --laya-url URL*"),
    ("def test_x(laya_server):\n    pass\n", ("--laya-record=missing",), "ERROR: --laya-mode=record needs --laya-url URL*"),
], ids=["marker-typo", "record-without-url", "record-missing-without-url"])
@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_a_usage_error_found_at_collection_is_one_line_and_exit_4_on_workers_too(pytester, monkeypatch, tests, args,
                                                                                 message, workers):
    """A worker's UsageError used to crash xdist's controller (INTERNALERROR, exit 3, message lost)."""
    monkeypatch.delenv("LAYA_SERVED_URL", raising=False)
    pytester.makepyfile(test_it="import pytest\n\n" + tests)
    result = sub(pytester, *workers, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()

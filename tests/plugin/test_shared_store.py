"""Shared cassettes through fsspec (issue 38): push to S3 (moto's server on loopback), delete the
local copies, replay from the store; the store is read-only unless --laya-store-write; no
credential reaches a cassette or a message."""

from __future__ import annotations

import shutil
import socket

import pytest

from pytest_laya.__main__ import main
from pytest_laya.fake import FakeLayaServer
from pytest_laya.store import CassetteStore, StoreError
from tests.helpers.pytester_runs import TEST_DECIDE, run

pytest_plugins = ["pytester"]

SECRET = "moto-secret-canary-7781"
TWO = TEST_DECIDE + TEST_DECIDE.replace("def test_refund", "def test_again")


@pytest.fixture(scope="module")
def moto_endpoint():
    pytest.importorskip("s3fs")
    server_module = pytest.importorskip("moto.server")
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3(moto_endpoint, monkeypatch, request):
    """A fresh bucket on moto's S3; credentials and endpoint where the engine reads them."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing-key-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    bucket = "laya-" + request.node.name.replace("_", "-")[:40].lower().strip("-")
    import boto3

    boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    return f"s3://{bucket}/team"


def _record(pytester):
    pytester.makepyfile(test_it=TWO)
    with FakeLayaServer() as fake:
        run(pytester, "--laya-record", f"--laya-url={fake.url}").assert_outcomes(passed=2)


def test_push_to_s3_delete_locally_and_replay_from_the_store(pytester, s3, capsys):
    _record(pytester)
    pytester.chdir()
    assert main(["store", "push", ".", s3]) == 0
    assert f"pushed 2 cassette(s) from . to {s3}" in capsys.readouterr().out
    shutil.rmtree(pytester.path / "cassettes")
    result = run(pytester, f"--laya-store={s3}")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*cassettes: 2 played, 2 fetched from the store;*"])
    assert SECRET not in result.stdout.str() + result.stderr.str()
    # The local directory is read first: the next run fetches nothing.
    run(pytester, f"--laya-store={s3}").stdout.fnmatch_lines(["*cassettes: 2 played;*"])
    # pull brings every cassette back into a directory of one's choice.
    assert main(["store", "pull", s3, "elsewhere"]) == 0
    assert sorted(p.name for p in (pytester.path / "elsewhere/cassettes/test_it").iterdir()) == [
        "test_again.yaml", "test_refund.yaml"]
    for path in (pytester.path / "elsewhere").rglob("*"):
        assert not path.name.startswith(".")  # no temporary file left behind
        if path.is_file():
            assert SECRET not in path.read_text()


def test_the_store_is_read_only_unless_store_write(pytester, s3):
    pytester.makepyfile(test_it=TWO)
    store = CassetteStore(s3)
    with FakeLayaServer() as fake:
        run(pytester, "--laya-record", f"--laya-url={fake.url}", f"--laya-store={s3}").assert_outcomes(passed=2)
        assert store.keys() == []
        written = run(pytester, "--laya-record", f"--laya-url={fake.url}", f"--laya-store={s3}", "--laya-store-write")
    written.assert_outcomes(passed=2)
    written.stdout.fnmatch_lines(["*cassettes: 2 unchanged (file untouched), 2 written to the store;*"])
    assert store.keys() == ["cassettes/test_it/test_again.yaml", "cassettes/test_it/test_refund.yaml"]
    assert store.get("cassettes/test_it/test_refund.yaml") == (pytester.path / "cassettes/test_it/test_refund.yaml").read_bytes()
    with pytest.raises(StoreError, match="read-only here: pass --laya-store-write"):
        store.put("cassettes/x.yaml", b"x")


def test_a_store_that_cannot_be_read_fails_the_test_without_showing_a_credential(pytester, s3, monkeypatch):
    pytester.makepyfile(test_it=TEST_DECIDE)
    nothing_there = socket.socket()
    nothing_there.bind(("127.0.0.1", 0))
    closed = nothing_there.getsockname()[1]
    nothing_there.close()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{closed}")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    result = run(pytester, f"--laya-store={s3}")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*could not read cassettes/test_it/test_refund.yaml from the cassette store {s3} (*"
                                 "check the URL and the credentials the storage engine reads*"])
    assert SECRET not in result.stdout.str() + result.stderr.str()


def test_a_cassette_in_neither_place_is_missing_and_the_summary_says_the_store_lacks_it(pytester, s3):
    pytester.makepyfile(test_it=TEST_DECIDE)
    result = run(pytester, f"--laya-store={s3}")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*no cassette for this test at*", "shared store:",
                                 f"  cassettes/test_it/test_refund.yaml: not in {s3} either"])


def test_memory_and_file_stores_and_their_keys(tmp_path):
    for url in ("memory://laya-test-store/one", (tmp_path / "store").as_uri()):
        store = CassetteStore(url, writable=True)
        store.put("tests/cassettes/test_a/test_b.yaml", b"metadata:\n  pytest_laya: {}\n")
        assert store.keys() == ["tests/cassettes/test_a/test_b.yaml"]
        assert store.get("tests/cassettes/test_a/absent.yaml") is None
        with pytest.raises(StoreError, match="not a cassette key"):
            store.get("../outside.yaml")
    assert [p.name for p in (tmp_path / "store/tests/cassettes/test_a").iterdir()] == ["test_b.yaml"]


def test_usage_errors_and_shown_urls(pytester):
    pytester.makepyfile(test_it=TEST_DECIDE)
    result = run(pytester, "--laya-store-write")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--laya-store-write * give it with --laya-store URL*"])
    assert run(pytester, "--laya-store=bucket/dir").ret == pytest.ExitCode.USAGE_ERROR
    # A store is shown as every URL the kit shows: user, password and query masked.
    shown = CassetteStore("s3://user:pa55word@bucket/dir?token=abc").shown
    assert shown == "s3://***@bucket/dir?***" and "pa55word" not in shown and "abc" not in shown


def test_the_store_is_read_before_any_test_so_a_blocked_network_does_not_stop_it(pytester, s3):
    pytest.importorskip("pytest_recording")
    _record(pytester)
    pytester.chdir()
    assert main(["store", "push", ".", s3]) == 0
    shutil.rmtree(pytester.path / "cassettes")
    # pytest-recording's --block-network refuses every socket a test (or its fixtures) opens.
    result = run(pytester, f"--laya-store={s3}", "--block-network", "--laya-block-network")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*cassettes: 2 played, 2 fetched from the store*"])

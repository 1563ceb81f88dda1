"""--laya-record=new_episodes: a cassette that exists is played, and only the requests it lacks are
recorded, appended to it; the interactions it held stay byte for byte (issue 34)."""

from __future__ import annotations

import os

import httpcore  # noqa: F401
import httpx  # noqa: F401
import pytest
import vcr  # noqa: F401
import vcr.stubs.httpx_stubs  # noqa: F401

import pytest_laya.plugin.proxy  # noqa: F401
import pytest_laya.proxy  # noqa: F401
from pytest_laya.fake import FakeLayaServer
from tests.helpers.pytester_runs import CANARY, TEST_DECIDE, WITHOUT_UNUSED_PLUGINS, cassette_data, run

pytest_plugins = ["pytester"]

SECOND = '''
    again = laya_client.decide("The second charge is still there.", {
        "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
    })
    assert 0 <= again["refund"].p <= 1
'''
CASSETTE = "cassettes/test_it/test_refund.yaml"


@pytest.fixture
def server():
    with FakeLayaServer(flavor="laya-serve-0.4.15", api_key=CANARY) as fake:
        yield fake


def _record(pytester, server, *args):
    return run(pytester, f"--laya-url={server.url}", f"--laya-api-key={CANARY}", *args)


def _decisions(server) -> list[bytes]:
    return [r.body for r in server.requests if r.path == "/v1/systemone"]


def _head(text: bytes) -> bytes:
    """A cassette's interactions as the file spells them (what comes before its metadata)."""
    return text[:text.index(b"\nmetadata:")]


def _states(path) -> list[str]:
    import json

    return [json.loads(i["request"]["body"])["state"] for i in cassette_data(path)["interactions"]
            if i["request"]["uri"].endswith("/v1/systemone")]


def test_a_new_request_is_recorded_and_appended_and_the_old_interactions_stay_byte_for_byte(pytester, server):
    pytester.makepyfile(test_it=TEST_DECIDE)
    _record(pytester, server, "--laya-record").assert_outcomes(passed=1)
    cassette = pytester.path / CASSETTE
    before = cassette.read_bytes()
    sent_before = len(_decisions(server))
    pytester.makepyfile(test_it=TEST_DECIDE + SECOND)
    result = _record(pytester, server, "--laya-record=new_episodes", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*cassettes: 1 appended*"])
    after = cassette.read_bytes()
    assert after.startswith(_head(before)) and len(after) > len(before)
    assert _states(cassette) == ["I was charged twice. Refund me.", "The second charge is still there."]
    # The first request was played from the cassette: only the second reached the server.
    sent = _decisions(server)[sent_before:]
    assert len(sent) == 1 and b"second charge" in sent[0]
    assert CANARY not in after.decode() and "answers changed" not in result.stdout.str()
    # Metadata as it was: the cassette is as old as its oldest answer.
    assert cassette_data(cassette)["metadata"] == yaml_metadata(before)
    run(pytester).assert_outcomes(passed=1)  # strict replay plays both


def yaml_metadata(text: bytes):
    import yaml

    return yaml.safe_load(text)["metadata"]


def test_a_test_with_no_new_request_leaves_its_cassette_untouched(pytester, server):
    pytester.makepyfile(test_it=TEST_DECIDE)
    _record(pytester, server, "--laya-record").assert_outcomes(passed=1)
    cassette = pytester.path / CASSETTE
    before, stat = cassette.read_bytes(), os.stat(cassette)
    sent_before = len(_decisions(server))
    result = _record(pytester, server, "--laya-record=new_episodes", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*cassettes: 1 unchanged (file untouched)*"])
    assert cassette.read_bytes() == before and os.stat(cassette).st_mtime_ns == stat.st_mtime_ns
    assert len(_decisions(server)) == sent_before  # played, not sent


def test_a_request_made_twice_is_sent_twice_so_the_cassette_replays_it(pytester, server):
    pytester.makepyfile(test_it=TEST_DECIDE)
    _record(pytester, server, "--laya-record").assert_outcomes(passed=1)
    pytester.makepyfile(test_it=TEST_DECIDE + SECOND + SECOND.replace("again", "third"))
    _record(pytester, server, "--laya-record=new_episodes").assert_outcomes(passed=1)
    assert _states(pytester.path / CASSETTE)[1:] == ["The second charge is still there."] * 2
    run(pytester).assert_outcomes(passed=1)


def test_a_test_without_a_cassette_is_recorded_whole(pytester, server):
    pytester.makepyfile(test_it=TEST_DECIDE)
    result = _record(pytester, server, "--laya-record=new_episodes", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*cassettes: 1 recorded*"])
    assert _states(pytester.path / CASSETTE) == ["I was charged twice. Refund me."]
    run(pytester).assert_outcomes(passed=1)


def test_a_failing_test_keeps_its_cassette_as_it_was(pytester, server):
    pytester.makepyfile(test_it=TEST_DECIDE)
    _record(pytester, server, "--laya-record").assert_outcomes(passed=1)
    cassette = pytester.path / CASSETTE
    before = cassette.read_bytes()
    pytester.makepyfile(test_it=TEST_DECIDE + SECOND + "    assert False\n")
    result = _record(pytester, server, "--laya-record=new_episodes", "-v")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*cassettes: 1 kept*"])
    assert cassette.read_bytes() == before


def test_a_broken_cassette_is_recorded_again_whole(pytester, server):
    pytester.makepyfile(test_it=TEST_DECIDE)
    _record(pytester, server, "--laya-record").assert_outcomes(passed=1)
    cassette = pytester.path / CASSETTE
    cassette.write_bytes(cassette.read_bytes()[:200])
    result = _record(pytester, server, "--laya-record=new_episodes")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["broken cassettes replaced by this recording:*"])
    run(pytester).assert_outcomes(passed=1)


def _append_against_another(pytester, first: dict, other: dict) -> tuple[pytest.RunResult, bytes, FakeLayaServer]:
    """Records one decision from `FakeLayaServer(**first)`, then appends a second against one of
    `other`: the run, the cassette's bytes before it, and the other (stopped) server."""
    pytester.makepyfile(test_it=TEST_DECIDE)
    with FakeLayaServer(**first) as recorded_from:
        run(pytester, "--laya-record", f"--laya-url={recorded_from.url}").assert_outcomes(passed=1)
    before = (pytester.path / CASSETTE).read_bytes()
    pytester.makepyfile(test_it=TEST_DECIDE + SECOND)
    with FakeLayaServer(**other) as appended_to:
        result = run(pytester, "--laya-record=new_episodes", f"--laya-url={appended_to.url}")
    return result, before, appended_to


def test_appending_answers_of_another_server_is_refused_and_nothing_is_written(pytester):
    result, before, other = _append_against_another(pytester, {"model": "one"}, {"model": "two"})
    result.assert_outcomes(errors=1)  # refused when the test opens its cassette: nothing played, nothing sent
    result.stdout.fnmatch_lines(["*could not append to cassette*recorded from another server (identity*one*two*"
                                 "Record it again as a whole with --laya-record*"])
    assert (pytester.path / CASSETTE).read_bytes() == before
    assert _decisions(other) == []


def test_a_cassette_of_another_spec_is_refused_before_its_answers_play_under_the_new_claim(pytester):
    """Recorded from a server that claims no spec (held to current), appended against one whose
    /health claims the target: the recorded answers must not be judged as the new server's, so the
    test is refused at its start with the cassette's reason, not failed with target violations."""
    result, before, other = _append_against_another(pytester, {"flavor": "laya-serve-0.4.15"}, {"flavor": "target"})
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*could not append to cassette*recorded from another server*spec current then, "
                                 "target now*Record it again as a whole with --laya-record*"])
    result.stdout.no_fnmatch_line("*breaks the target spec*")
    assert (pytester.path / CASSETTE).read_bytes() == before
    assert _decisions(other) == []


def test_appending_under_two_xdist_workers_extends_each_cassette_once_and_stores_no_secret(pytester, server):
    tests = "".join(TEST_DECIDE.replace("def test_refund", f"def test_{n}") for n in range(4))
    pytester.makepyfile(test_it=tests)
    _record(pytester, server, "--laya-record").assert_outcomes(passed=4)
    files = sorted((pytester.path / "cassettes/test_it").glob("*.yaml"))
    before = {path.name: path.read_bytes() for path in files}
    grown = "".join((TEST_DECIDE + SECOND).replace("def test_refund", f"def test_{n}") for n in range(4))
    pytester.makepyfile(test_it=grown)
    result = _record(pytester, server, "--laya-record=new_episodes", "-n", "2", *WITHOUT_UNUSED_PLUGINS)
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*cassettes: 4 appended*"])
    for path in files:
        text = path.read_bytes()
        assert text.startswith(_head(before[path.name])) and CANARY not in text.decode()
        assert _states(path) == ["I was charged twice. Refund me.", "The second charge is still there."]
    run(pytester, "-n", "2", *WITHOUT_UNUSED_PLUGINS).assert_outcomes(passed=4)


PROXIED = """
import json
import subprocess
import sys

SERVICE = (
    "import json, os, sys, urllib.request;"
    "body = json.dumps({'state': sys.argv[1], 'questions': {'refund': {'type': 'noul', 'instructions': 'Refund?'}}});"
    "request = urllib.request.Request(os.environ['LAYA_SERVED_URL'] + '/v1/systemone', data=body.encode(),"
    " headers={'content-type': 'application/json'}, method='POST');"
    "print(urllib.request.urlopen(request, timeout=30).read().decode())")


def test_refund(laya_proxy, laya_url_env):
    for state in STATES:
        done = subprocess.run([sys.executable, "-c", SERVICE, state], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert 0 <= json.loads(done.stdout)["answers"]["refund"]["noul"] <= 1
"""


def test_a_service_behind_laya_proxy_is_appended_to_the_same_way(pytester):
    pytester.makepyfile(test_it='STATES = ["one"]\n' + PROXIED)
    cassette = pytester.path / CASSETTE
    with FakeLayaServer() as keyless:  # the service sends no key
        run(pytester, "--laya-record", f"--laya-url={keyless.url}").assert_outcomes(passed=1)
        before = cassette.read_bytes()
        sent_before = len(_decisions(keyless))
        pytester.makepyfile(test_it='STATES = ["one", "two"]\n' + PROXIED)
        run(pytester, "--laya-record=new_episodes", f"--laya-url={keyless.url}").assert_outcomes(passed=1)
        assert len(_decisions(keyless)) == sent_before + 1  # "one" was played by the proxy's route
    assert cassette.read_bytes().startswith(_head(before)) and _states(cassette) == ["one", "two"]
    run(pytester).assert_outcomes(passed=1)


def test_a_bad_record_mode_names_every_record_mode(pytester):
    pytester.makepyfile(test_it=TEST_DECIDE)
    result = run(pytester, "--laya-record=new_episode")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*'new_episode' is not a record mode: use one of --laya-record (*), "
                                 "--laya-record=missing (*), --laya-record=new_episodes (*)*"])


def test_help_lists_every_record_mode(pytester):
    result = run(pytester, "--help")
    assert "--laya-record=new_episodes to keep each cassette and append the requests it lacks" in \
        " ".join(result.stdout.str().split())

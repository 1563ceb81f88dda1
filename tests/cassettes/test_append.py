"""`laya_vcr(record=RecordMode.NEW_EPISODES)`: the cassette layer's appending, outside the plugin."""

from __future__ import annotations

import httpx
import pytest

from pytest_laya.cassettes import laya_vcr, use_cassette
from pytest_laya.fake import FakeLayaServer
from pytest_laya.route.modes import RecordMode

KEY = "sk-append-canary-2718"
QUESTIONS = {"refund": {"type": "noul", "instructions": "Refund?"}}


def _ask(url: str, state: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/systemone", json={"state": state, "questions": QUESTIONS},
                      headers={"Authorization": f"Bearer {KEY}"})


@pytest.fixture
def server():
    with FakeLayaServer(api_key=KEY) as fake:
        yield fake


def _decisions(server) -> int:
    return sum(1 for r in server.requests if r.path == "/v1/systemone")


def test_the_cassette_handle_plays_what_it_holds_and_appends_the_rest(tmp_path, server):
    path = tmp_path / "t.yaml"
    with use_cassette(path, record=True, api_key=KEY):
        first = _ask(server.url, "one")
    before = path.read_bytes()
    with use_cassette(path, record=RecordMode.NEW_EPISODES, api_key=KEY) as handle:
        assert handle.appends and handle.record
        replayed = _ask(server.url, "one")
        _ask(server.url, "two")
    assert handle.outcome == "appended" and _decisions(server) == 2
    assert replayed.content == first.content
    after = path.read_bytes()
    assert after.startswith(before[:before.index(b"\nmetadata:")]) and KEY not in after.decode()
    with use_cassette(path, record=False) as replay:
        _ask("http://127.0.0.1:1", "one")
        _ask("http://127.0.0.1:1", "two")
    assert replay.played == 2


def test_vcrpys_own_context_manager_appends_too(tmp_path, server):
    with use_cassette(tmp_path / "t.yaml", record=True, api_key=KEY):
        _ask(server.url, "one")
    before = (tmp_path / "t.yaml").read_bytes()
    appending = laya_vcr(record=RecordMode.NEW_EPISODES, cassette_dir=tmp_path, api_key=KEY)
    with appending.use_cassette("t"):
        _ask(server.url, "one")
    assert (tmp_path / "t.yaml").read_bytes() == before  # nothing new: not written
    with appending.use_cassette("t"):
        _ask(server.url, "one")
        _ask(server.url, "two")
    after = (tmp_path / "t.yaml").read_bytes()
    assert after.startswith(before[:before.index(b"\nmetadata:")]) and after.count(b"- request:") == 2
    assert after[after.index(b"\nmetadata:"):] == before[before.index(b"\nmetadata:"):]


@pytest.mark.parametrize(("record", "error", "says"), [
    (RecordMode.MISSING, ValueError, "chooses per test whether to record"),
    ("missing", ValueError, "chooses per test whether to record"),
    ("sometimes", ValueError, "'sometimes' is not a record mode"),
    (1, TypeError, "record must be a bool or a pytest_laya.route.modes.RecordMode, got int"),
])
def test_a_record_value_the_cassette_cannot_honour_is_a_clear_error(tmp_path, record, error, says):
    with pytest.raises(error, match=says):
        laya_vcr(record=record, cassette_dir=tmp_path, api_key=None)


def test_a_bool_still_chooses_replay_or_a_whole_recording(tmp_path):
    assert laya_vcr(record=False, cassette_dir=tmp_path, api_key=None).laya_record_mode is None
    assert laya_vcr(record=True, cassette_dir=tmp_path, api_key=None).laya_record_mode is RecordMode.ALL
    assert laya_vcr(record="new_episodes", cassette_dir=tmp_path, api_key=None).get_merged_config(
        path="x")["record_mode"].value == "new_episodes"


def test_the_same_weights_learnt_another_way_are_the_same_server_and_other_weights_are_not(tmp_path, server):
    """A recording names the weights from the response's served_by; a test opening it later knows
    them from /health (fewer fields, another `source`). Those are one server; another revision is not."""
    from pytest_laya.cassettes import CassetteError
    from pytest_laya.wire.identity import ServedIdentity

    path = tmp_path / "t.yaml"
    with use_cassette(path, record=True, api_key=KEY) as handle:
        _ask(server.url, "one")
        handle.set_provenance(spec="target", identity=ServedIdentity("tiny", "sha256:1", "cpu", "float32", False))
    with use_cassette(path, record=RecordMode.NEW_EPISODES, api_key=KEY) as handle:
        handle.refuse_another_server({"spec": "target", "identity": ServedIdentity("tiny", "sha256:1", source="health")})
        handle.refuse_another_server({"identity": None, "spec": None})  # nothing known: nothing to refuse
        with pytest.raises(CassetteError, match=r"another server \(identity .*sha256:1.* then, .*sha256:2.* now\)"):
            handle.refuse_another_server({"identity": ServedIdentity("tiny", "sha256:2", source="health")})
        with pytest.raises(CassetteError, match="spec target then, current now"):
            handle.refuse_another_server({"spec": "current"})

"""Replay finds a request sent with a recorded request's very bytes without parsing its body, and
everything else the full way (filtered, scrubbed, canonical JSON): the same interaction, the same errors."""

from __future__ import annotations

import collections
import json

import httpx
import pytest

from pytest_laya.cassettes import CassetteAlreadyPlayed, CassetteMiss, use_cassette
from pytest_laya.cassettes.replay import open_replay
from pytest_laya.faults import Respond, ScriptedServer
from pytest_laya.intercept.request import Request
from pytest_laya.wire import body as body_module

URL = "http://laya.test/v1/systemone"
SENT = {"state": "charged twice", "questions": {"q": {"type": "noul", "instructions": "Refund?"}}}
BYTES = json.dumps(SENT).encode()
KEY = "sk-exact-bytes-0123456789"


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[bytes]:
    counted: collections.Counter[bytes] = collections.Counter()
    real = body_module._loads

    def counting(text, hook=None):
        counted[text.encode() if isinstance(text, str) else bytes(text)] += 1
        return real(text, hook)

    monkeypatch.setattr(body_module, "_loads", counting)
    return counted


def record(path, body: bytes, headers: dict[str, str] | None = None, api_key: str | None = None) -> None:
    with ScriptedServer(default=Respond(200, {"answers": {"q": {"noul": 0.25}}})).start() as server:
        with use_cassette(path, record=True, api_key=api_key), httpx.Client() as http:
            http.post(server.url + "/v1/systemone", content=body, headers=headers or {})


def play(handle, body: bytes, headers: dict[str, str] | None = None) -> dict:
    live = Request("POST", URL, body, headers or {"content-type": "application/json"})
    assert handle.cassette.can_play_response_for(live)
    return json.loads(handle.cassette.play_response(live)["body"]["string"])


def test_the_recorded_bytes_are_played_without_parsing_the_request(tmp_path, parses):
    record(tmp_path / "c.yaml", BYTES)
    handle = open_replay(tmp_path / "c.yaml", api_key=None, strict=True, record_hint="--laya-record")
    parses.clear()
    assert play(handle, BYTES) == {"answers": {"q": {"noul": 0.25}}}
    assert BYTES not in parses
    handle.check_all_played()


def test_other_bytes_of_the_same_json_still_match(tmp_path):
    record(tmp_path / "c.yaml", BYTES)
    handle = open_replay(tmp_path / "c.yaml", api_key=None, strict=True, record_hint="--laya-record")
    reordered = json.dumps({"questions": SENT["questions"], "state": SENT["state"]}, indent=2).encode()
    assert play(handle, reordered) == {"answers": {"q": {"noul": 0.25}}}


def test_the_same_bytes_twice_with_one_recording_is_already_played(tmp_path):
    record(tmp_path / "c.yaml", BYTES)
    handle = open_replay(tmp_path / "c.yaml", api_key=None, strict=True, record_hint="--laya-record")
    play(handle, BYTES)
    live = Request("POST", URL, BYTES, {"content-type": "application/json"})
    with pytest.raises(CassetteAlreadyPlayed, match="already played"):
        handle.cassette.can_play_response_for(live)


def test_a_credential_in_the_request_is_learnt_and_scrubbed_before_matching(tmp_path):
    """The key stands in the body: recorded as <redacted>, matched once the Authorization header taught it."""
    body = json.dumps({**SENT, "state": KEY}).encode()
    record(tmp_path / "c.yaml", body, headers={"authorization": f"Bearer {KEY}"}, api_key=KEY)
    assert KEY not in (tmp_path / "c.yaml").read_text()
    handle = open_replay(tmp_path / "c.yaml", api_key=None, strict=True, record_hint="--laya-record")
    assert play(handle, body, {"authorization": f"Bearer {KEY}"}) == {"answers": {"q": {"noul": 0.25}}}
    assert KEY not in handle.redact(f"sent {KEY}")


def test_a_miss_is_worded_as_before(tmp_path):
    record(tmp_path / "c.yaml", BYTES)
    handle = open_replay(tmp_path / "c.yaml", api_key=None, strict=True, record_hint="--laya-record")
    live = Request("POST", URL, json.dumps({**SENT, "state": "charged once"}).encode(), {})
    with pytest.raises(CassetteMiss) as caught:
        handle.cassette.can_play_response_for(live)
    assert 'body at /state (recorded "charged twice", now "charged once")' in str(caught.value)


def played_by(handle, headers: dict[str, str]):
    """A route over `handle` (one test's), after playing the recorded request with `headers`."""
    from pytest_laya.intercept.laya_route import LayaRoute

    route = LayaRoute(handle.cassette, kind="replay", urls=[URL])
    live = Request("POST", URL, BYTES, {"content-type": "application/json", **headers})
    assert route.can_play_response_for(live)
    route.play_response(live)
    return route


def test_each_play_of_a_recorded_response_gets_its_exchange_and_each_call_keeps_its_request(tmp_path):
    record(tmp_path / "c.yaml", BYTES, api_key=None)
    tests = [played_by(open_replay(tmp_path / "c.yaml", api_key=None, strict=True, record_hint="--laya-record"),
                       {"user-agent": f"agent-{n}"}) for n in range(2)]
    first, second = (route.exchanges[0] for route in tests)
    assert first.headers == second.headers and first.body == second.body
    assert json.loads(first.body) == {"answers": {"q": {"noul": 0.25}}}
    assert [route.calls[0].headers["user-agent"] for route in tests] == ["agent-0", "agent-1"]
    assert [route.calls[0].response_headers["content-type"] for route in tests] == ["application/json"] * 2


def test_a_request_with_its_own_id_gets_its_own_response_and_exchange(tmp_path):
    with ScriptedServer(default=Respond(200, {"answers": {"q": {"noul": 0.25}}},
                                        headers={"X-Request-Id": "server-assigned-00001"})).start() as server:
        with use_cassette(tmp_path / "c.yaml", record=True), httpx.Client() as http:
            http.post(server.url + "/v1/systemone", content=BYTES)
    open_one = lambda: open_replay(tmp_path / "c.yaml", api_key=None, strict=True, record_hint="--laya-record")  # noqa: E731
    plain = played_by(open_one(), {})
    mine = played_by(open_one(), {"x-request-id": "mine-0123456789"})
    again = played_by(open_one(), {})
    assert mine.exchanges[0].headers["x-request-id"] == "mine-0123456789"
    assert mine.calls[0].response_headers["x-request-id"] == "mine-0123456789"
    assert plain.exchanges[0].headers["x-request-id"] == again.exchanges[0].headers["x-request-id"] != "mine-0123456789"
    assert plain.exchanges[0].headers == again.exchanges[0].headers


def test_a_response_played_again_is_built_afresh(tmp_path):
    from pytest_laya.intercept.native import httpx_response

    record(tmp_path / "c.yaml", BYTES)
    route = played_by(open_replay(tmp_path / "c.yaml", api_key=None, strict=True, record_hint="--laya-record"), {})
    live = Request("POST", URL, BYTES, {"content-type": "application/json"})
    route.cassette.laya_rewind(live)
    assert route.can_play_response_for(live)
    first = httpx_response(route.play_response(live), httpx=httpx)
    first.headers["content-type"] = "text/plain"  # the test's code changes what it got
    route.cassette.laya_rewind(live)
    assert route.can_play_response_for(live)
    again = httpx_response(route.play_response(live), httpx=httpx)
    again.read()
    assert again.headers["content-type"] == "application/json" and again.json() == {"answers": {"q": {"noul": 0.25}}}
    assert route.exchanges[0].headers == route.exchanges[-1].headers and len(route.calls) == 3

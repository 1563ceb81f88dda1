"""An interaction's body is parsed once on its way through scrubbing, matching and replay's index,
and scrubbing and matching read the same value (`pytest_laya.wire.body.Body`)."""

from __future__ import annotations

import collections
import json

import httpx
import pytest

from pytest_laya.cassettes import use_cassette
from pytest_laya.cassettes.replay import open_replay
from pytest_laya.faults import Respond, ScriptedServer
from pytest_laya.intercept.request import Request
from pytest_laya.wire import body as body_module
from pytest_laya.wire.body import NOT_JSON, Body, body_of
from pytest_laya.wire.redaction import REDACTED

KEY = "sk-parsed-once-0123456789"
SENT = {"state": f"my key is {KEY}", "questions": {"q": {"type": "noul", "instructions": "Refund?"}}}
ANSWER = {"answers": {"q": {"noul": 0.25}}, "latency_ms": 12.5, "request_id": "req-0123456789abcdef"}
HEADERS = {"content-type": "application/json", "authorization": f"Bearer {KEY}",
           "x-request-id": "req-0123456789abcdef"}


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    """Every text `wire.body` parses, counted."""
    counted: collections.Counter[str] = collections.Counter()
    real = body_module._loads

    def counting(text, hook=None):
        counted[text if isinstance(text, str) else text.decode("utf-8", "replace")] += 1
        return real(text, hook)

    monkeypatch.setattr(body_module, "_loads", counting)
    return counted


def record(path) -> None:
    answer = Respond(200, ANSWER, headers={"x-request-id": HEADERS["x-request-id"]})
    with ScriptedServer(default=answer).start() as server:
        with use_cassette(path, record=True, api_key=KEY), httpx.Client() as http:
            http.post(server.url + "/v1/systemone", content=json.dumps(SENT).encode(), headers=HEADERS)


def test_a_recorded_interaction_parses_each_body_once(tmp_path, parses):
    record(tmp_path / "c.yaml")
    assert parses, "scrubbing and matching read the bodies through wire.body"
    assert {text: n for text, n in parses.items() if n > 1} == {}


@pytest.mark.parametrize("replay", ["native", "vcrpy"])
def test_a_replayed_interaction_parses_each_body_once(tmp_path, parses, replay):
    path = tmp_path / "c.yaml"
    record(path)
    parses.clear()
    if replay == "native":
        handle = open_replay(path, api_key=KEY, strict=True, record_hint="--laya-record")
        live = Request("POST", "http://laya.test/v1/systemone", json.dumps(SENT).encode(), HEADERS)
        assert handle.cassette.can_play_response_for(live)
        answered = handle.cassette.play_response(live)
        assert json.loads(answered["body"]["string"])["answers"] == ANSWER["answers"]
    else:
        with use_cassette(path, record=False, api_key=KEY), httpx.Client() as http:
            response = http.post("http://laya.test/v1/systemone", content=json.dumps(SENT).encode(), headers=HEADERS)
        assert response.json()["answers"] == ANSWER["answers"]
    assert parses
    assert {text: n for text, n in parses.items() if n > 1} == {}


def test_matching_reads_the_value_scrubbing_left(parses):
    from pytest_laya.cassettes.matching import request_body
    from pytest_laya.cassettes.scrub import Scrubber

    request = Request("POST", "http://laya.test/v1/systemone", json.dumps(SENT, indent=2).encode(), HEADERS)
    scrubbed = Scrubber(KEY, learn=True).request(request.copy())
    assert sum(parses.values()) == 1  # scrubbing's parse, which matching then reads
    view = body_of(scrubbed)
    assert view.json == {**SENT, "state": REDACTED}
    assert request_body(scrubbed) == view.canonical == Body(scrubbed.body).canonical
    assert sum(parses.values()) == 2  # only the fresh Body above parsed again


@pytest.mark.parametrize("raw", [b"", b"  \n", b"not json", b'{"a":', b"\xff\xfe"])
def test_what_is_not_json_reads_the_same_to_both(raw):
    view = Body(raw)
    assert view.document is NOT_JSON
    assert view.json is NOT_JSON
    assert view.canonical == raw


def test_a_body_with_a_bom_matches_as_json_and_is_scrubbed_as_text():
    view = Body("\ufeff{}".encode())  # as before: json.loads reads bytes with a BOM, a str parse refuses it
    assert view.document is NOT_JSON
    assert view.json == {}
    assert view.canonical == b"{}"


def test_a_repeated_member_name_is_kept_for_scrubbing_and_read_last_wins_for_matching():
    view = Body(b'{"a": 1, "a": 2, "b": [{"c": 3, "c": 4}]}')
    assert view.document == [("a", 1), ("a", 2), ("b", [[("c", 3), ("c", 4)]])]
    assert view.json == json.loads(view.raw) == {"a": 2, "b": [{"c": 4}]}
    assert view.canonical == b'{"a":2,"b":[{"c":4}]}'


def test_a_body_nested_deeper_than_json_reads_is_matched_as_bytes():
    raw = b"[" * 100_000 + b"]" * 100_000
    view = Body(raw)
    assert view.json is NOT_JSON and view.document is NOT_JSON
    assert view.canonical == raw

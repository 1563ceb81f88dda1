"""Cassettes: recording against a loopback "live" server, replaying without any network.

The live server is a `ScriptedServer` whose handler answers like a served Laya: each answer
depends on the request body (so a cross-replay would show), it echoes X-Request-Id and the API
key (so scrubbing has something to find), and it sends volatile headers (Date, timings).
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import socket
import threading
from pathlib import Path, PurePosixPath

import httpx
import pytest

from pytest_laya import AsyncServedLayaClient, LayaCallError, ServedLayaClient
from pytest_laya.cassettes import (
    RECORDED_REQUEST_ID,
    RECORDED_TRACEPARENT,
    CassetteAlreadyPlayed,
    CassetteError,
    CassetteMiss,
    CassetteMissing,
    CassetteUnplayed,
    Unplayed,
    canonical_body,
    cassette_relpath,
    laya_vcr,
    use_cassette,
)
from pytest_laya.faults import Handler, ReceivedRequest, Respond, ScriptedServer, closed_loopback_url

KEY = "sk-canary-cassette-1234"
NOUL = {"refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"}}


def _p(text: str) -> float:
    return round(int(hashlib.sha256(text.encode()).hexdigest()[:4], 16) / 65535, 4)


def laya_answer(request: ReceivedRequest) -> Respond:
    """A served Laya in miniature: answers depend only on the body; echoes id and key."""
    common = {"Date": "Mon, 01 Jan 2024 00:00:00 GMT", "Set-Cookie": f"session={KEY}"}
    if request.path.split("?")[0] == "/health":
        return Respond(200, {"status": "ok", "loaded": ["tiny"], "note": f"key {KEY}"}, headers=common)
    if request.path.split("?")[0] != "/v1/systemone":
        return Respond(404, {"detail": "Not Found"}, headers=common)
    body = request.json()
    answers = {}
    for qid, q in body["questions"].items():
        p = _p(json.dumps([body["state"], q], sort_keys=True))
        if q["type"] == "noul":
            answers[qid] = {"type": "noul", "noul": p, "confidence": 0.5}
        else:
            keys = [str(k) for k in q["criteria"]]
            probs = {k: round((1 - p) / (len(keys) - 1), 4) for k in keys[1:]}
            probs[keys[0]] = round(1 - sum(probs.values()), 4)
            answers[qid] = {"type": "choice", "choice": max(probs, key=probs.__getitem__), "probabilities": probs,
                             "confidence": 0.5}
    headers = {**common, "Server-Timing": f"inference;dur={_p(str(os.urandom(4))) * 30:.2f}",
               "X-Inference-Time-Ms": str(int(_p(str(os.urandom(4))) * 30)),
               "traceparent": f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01",
               "WWW-Authenticate": f'Bearer realm="laya", hint="{KEY}"'}
    if request.header("x-request-id"):
        headers["X-Request-Id"] = request.header("x-request-id")
    return Respond(200, {"model": "laya-rl-agent", "answers": answers,
                         "usage": {"input_tokens": 10 + len(body["state"]), "output_tokens": 0},
                         "routing": {"model": "tiny", "repo": "/checkpoints/tiny", "echo": body["state"]}},
                   headers=headers)


def live(handler=laya_answer) -> ScriptedServer:
    return ScriptedServer(default=Handler(handler)).start()


def record(path: Path, *states: str, questions=NOUL, api_key: str | None = KEY, **kwargs) -> list:
    """Record one decision per state against a fresh live server; the decisions."""
    with live() as server, use_cassette(path, record=True, api_key=api_key, **kwargs) as cassette:
        with ServedLayaClient(server.url, api_key=api_key) as client:
            decisions = [client.decide(state, questions) for state in states]
    assert cassette.outcome in ("written", "unchanged")
    return decisions


@pytest.fixture
def cassette_file(tmp_path: Path) -> Path:
    return tmp_path / "cassettes" / "test_mod" / "test_case.yaml"


@pytest.fixture
def no_sockets(monkeypatch):
    """Call it once recording is done: any network connection after that fails the test loudly."""
    def refuse(*args, **kwargs):
        raise AssertionError("replay opened a network connection")

    def block():
        monkeypatch.setattr(socket, "create_connection", refuse)
        monkeypatch.setattr(socket.socket, "connect", refuse)
        monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    return block


# --------------------------------------------------------------------------- recording


def test_the_api_key_appears_nowhere_in_the_cassette(cassette_file):
    with live() as server, use_cassette(cassette_file, record=True, api_key=KEY) as cassette:
        with ServedLayaClient(server.url, api_key=KEY) as client:
            client.decide(f"my key is {KEY}", NOUL)
        # The key in a query string (raw and percent-encoded), a foreign header and a body.
        with httpx.Client(trust_env=False) as http:
            http.post(f"{server.url}/v1/systemone?api_key={KEY}&k2={KEY.replace('-', '%2D')}",
                      headers={"X-Api-Key": KEY, "Authorization": f"Bearer {KEY}"},
                      json={"state": KEY, "questions": NOUL})
    assert cassette.outcome == "written"
    raw = cassette_file.read_bytes()
    for form in (KEY, KEY.replace("-", "%2D"), "canary"):
        assert form.encode() not in raw
    assert b"Bearer <redacted>" in raw and b"session=" not in raw  # Set-Cookie is not on the allow-list
    assert b"realm=" not in raw  # WWW-Authenticate held the key: its whole value is replaced


def test_a_bearer_token_is_scrubbed_even_when_no_api_key_is_configured(cassette_file):
    with live() as server, use_cassette(cassette_file, record=True, api_key=None):
        with ServedLayaClient(server.url, api_key=KEY) as client:
            client.decide("hello", NOUL)
    assert KEY.encode() not in cassette_file.read_bytes()


def test_stored_headers_are_allow_listed_and_normalised(cassette_file):
    record(cassette_file, "charged twice")
    data = _yaml(cassette_file)
    request, response = data["interactions"][0]["request"], data["interactions"][0]["response"]
    assert request["uri"] == "http://laya.invalid/v1/systemone"
    assert set(request["headers"]) <= {"content-type", "accept", "authorization", "x-request-id", "traceparent"}
    assert request["headers"]["x-request-id"] == [RECORDED_REQUEST_ID]
    assert request["headers"]["traceparent"] == [RECORDED_TRACEPARENT]
    headers = response["headers"]
    assert set(headers) == {"content-type", "content-length", "server-timing", "x-inference-time-ms",
                            "x-request-id", "traceparent", "www-authenticate"}
    assert headers["server-timing"] == ["inference;dur=0"] and headers["x-inference-time-ms"] == ["0"]
    assert headers["x-request-id"] == [RECORDED_REQUEST_ID] and headers["traceparent"] == [RECORDED_TRACEPARENT]
    assert headers["content-length"] == [str(len(response["body"]["string"].encode()))]


def test_re_recording_an_unchanged_server_is_byte_for_byte_identical(tmp_path):
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    record(first, "charged twice", "all fine")   # each record uses a new server on a new port,
    record(second, "charged twice", "all fine")  # new request ids and new trace ids
    assert first.read_bytes() == second.read_bytes()
    before = os.stat(first).st_mtime_ns
    with live() as server, use_cassette(first, record=True, api_key=KEY) as cassette:
        with ServedLayaClient(server.url, api_key=KEY) as client:
            client.decide("charged twice", NOUL)
            client.decide("all fine", NOUL)
    assert cassette.outcome == "unchanged" and os.stat(first).st_mtime_ns == before


def test_re_recording_keeps_the_date_while_the_interactions_are_unchanged(cassette_file):
    record(cassette_file, "charged twice", provenance={"server": "scripted"})
    text = cassette_file.read_text()
    today = _yaml(cassette_file)["metadata"]["pytest_laya"]["recorded"]
    cassette_file.write_text(text.replace(f"'{today}'", "'2000-01-01'"))
    record(cassette_file, "charged twice", provenance={"server": "scripted"})
    assert _yaml(cassette_file)["metadata"]["pytest_laya"]["recorded"] == "2000-01-01"
    record(cassette_file, "something new", provenance={"server": "scripted"})
    assert _yaml(cassette_file)["metadata"]["pytest_laya"]["recorded"] == today


def test_recording_replaces_the_old_cassette_wholly(cassette_file):
    record(cassette_file, "old one", "old two")
    record(cassette_file, "new one")
    states = [json.loads(i["request"]["body"])["state"] for i in _yaml(cassette_file)["interactions"]
              if i["request"]["body"]]
    assert states == ["new one"]


def test_recording_does_not_even_read_a_corrupt_old_cassette(cassette_file):
    cassette_file.parent.mkdir(parents=True)
    cassette_file.write_text("interactions: [unterminated")
    record(cassette_file, "fresh")
    assert len(_yaml(cassette_file)["interactions"]) == 2  # the decision and its /health


def test_provenance_is_stored_under_vcrpy_metadata(cassette_file):
    with live() as server, use_cassette(cassette_file, record=True, api_key=KEY,
                                        provenance={"server": "scripted", "spec": "target"}) as cassette:
        with ServedLayaClient(server.url, api_key=KEY) as client:
            client.decide("x", NOUL)
        cassette.set_provenance(identity={"checkpoint": "tiny", "revision": "sha256:1", "note": KEY},
                                laya_version="0.4.15")
        with pytest.raises(TypeError, match="unknown provenance field"):
            cassette.set_provenance(colour="blue")
    meta = _yaml(cassette_file)["metadata"]["pytest_laya"]
    assert meta["server"] == "scripted" and meta["spec"] == "target" and meta["laya_version"] == "0.4.15"
    assert meta["identity"] == {"checkpoint": "tiny", "revision": "sha256:1", "note": "<redacted>"}
    assert meta["format"] == 1 and len(meta["recorded"]) == 10  # YYYY-MM-DD, no time
    with use_cassette(cassette_file, record=False, strict=False) as replay:
        assert replay.provenance == meta


def test_plain_vcrpy_loads_the_cassette_and_its_metadata(cassette_file):
    import vcr

    record(cassette_file, "charged twice", provenance={"server": "scripted"})
    plain = vcr.VCR(record_mode="none")
    with plain.use_cassette(str(cassette_file)) as cassette:
        assert len(cassette) == 2
        if hasattr(cassette, "get_metadata"):  # vcrpy >= 9.3
            assert cassette.get_metadata("pytest_laya", None)["server"] == "scripted"


def test_a_test_that_makes_no_request_records_an_empty_cassette(cassette_file):
    with use_cassette(cassette_file, record=True, api_key=KEY) as cassette:
        pass
    assert cassette.outcome == "written" and _yaml(cassette_file)["interactions"] == []
    with pytest.raises(CassetteMiss, match="has no interactions"):
        with use_cassette(cassette_file, record=False), httpx.Client() as http:
            http.get("http://laya.test/health")


# --------------------------------------------------------------------------- saving


def test_a_failed_test_keeps_the_old_cassette(cassette_file):
    record(cassette_file, "good")
    good = cassette_file.read_bytes()
    with live() as server, use_cassette(cassette_file, record=True, api_key=KEY) as cassette:
        with ServedLayaClient(server.url, api_key=KEY) as client:
            client.decide("bad run", NOUL)
        cassette.discard()  # what the plugin does when the test failed
    assert cassette.outcome == "kept" and cassette_file.read_bytes() == good
    with pytest.raises(ZeroDivisionError):
        with live() as server, use_cassette(cassette_file, record=True, api_key=KEY):
            with ServedLayaClient(server.url, api_key=KEY) as client:
                client.decide("another bad run", NOUL)
            raise ZeroDivisionError("the test fails after recording")
    assert cassette_file.read_bytes() == good


def test_a_crash_while_writing_leaves_the_old_cassette_and_no_temp_files(cassette_file, monkeypatch):
    record(cassette_file, "good")
    good = cassette_file.read_bytes()

    def crash(src, dst):
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(CassetteError, match="could not write cassette .*disk on fire") as caught:
        record(cassette_file, "changed")
    assert caught.value.path == cassette_file
    assert cassette_file.read_bytes() == good
    assert sorted(p.name for p in cassette_file.parent.iterdir()) == [cassette_file.name]


def test_concurrent_writers_leave_one_whole_cassette(tmp_path):
    from pytest_laya.cassettes import persist

    target = tmp_path / "shared.yaml"
    versions = [(f"version {i}\n" * 2000).encode() for i in range(6)]
    threads = [threading.Thread(target=persist.atomic_write, args=(target, v)) for v in versions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert target.read_bytes() in versions
    assert [p.name for p in tmp_path.iterdir()] == ["shared.yaml"]


def test_replay_never_writes(cassette_file):
    record(cassette_file, "charged twice")
    before = (cassette_file.read_bytes(), os.stat(cassette_file).st_mtime_ns)
    with use_cassette(cassette_file, record=False, strict=False) as cassette:
        with ServedLayaClient("http://laya.test") as client:
            client.decide("charged twice", NOUL)
    assert cassette.outcome == "replayed"
    assert (cassette_file.read_bytes(), os.stat(cassette_file).st_mtime_ns) == before


def test_the_record_mode_cannot_be_overridden(tmp_path):
    laya = laya_vcr(record=False, cassette_dir=tmp_path, api_key=None)
    with pytest.raises(TypeError, match="record_mode is fixed"):
        laya.use_cassette("x", record_mode="all")
    assert laya.get_merged_config(path="x")["record_mode"].value == "none"
    assert laya_vcr(record=True, cassette_dir=tmp_path, api_key=None).get_merged_config(path="x")["record_mode"].value == "all"


# --------------------------------------------------------------------------- replay


def test_two_bodies_to_one_path_get_their_own_answers(cassette_file, no_sockets):
    recorded = record(cassette_file, "charged twice", "all fine")
    no_sockets()
    with use_cassette(cassette_file, record=False) as cassette:
        with ServedLayaClient(closed_loopback_url()) as client:
            fine = client.decide("all fine", NOUL)  # the other order than recorded
            twice = client.decide("charged twice", NOUL)
    assert twice.answers["refund"].p == recorded[0].answers["refund"].p
    assert fine.answers["refund"].p == recorded[1].answers["refund"].p
    assert twice.answers["refund"].p != fine.answers["refund"].p
    assert cassette.unplayed() == [] and cassette.played == 3


def test_replay_matches_whatever_port_or_host_the_live_url_has(cassette_file, no_sockets):
    record(cassette_file, "charged twice")
    no_sockets()
    for url in ("http://127.0.0.1:1", "https://laya.example.com:8443", closed_loopback_url()):
        with use_cassette(cassette_file, record=False) as cassette, ServedLayaClient(url) as client:
            assert client.decide("charged twice", NOUL).answers["refund"].p == _p(
                json.dumps(["charged twice", {"type": "noul", "instructions": NOUL["refund"]["instructions"]}],
                           sort_keys=True))
        assert cassette.unplayed() == []


def test_replay_echoes_the_new_request_id(cassette_file):
    record(cassette_file, "charged twice")
    with use_cassette(cassette_file, record=False, strict=False), ServedLayaClient("http://laya.test") as client:
        decision = client.decide("charged twice", NOUL, request_id="req-123")
    assert decision.provenance.request_id == "req-123"
    with use_cassette(cassette_file, record=False, strict=False), httpx.Client() as http:
        body = json.dumps({"state": "charged twice", "questions": NOUL}).encode()
        response = http.post("http://laya.test/v1/systemone", content=body,
                             headers={"X-Request-Id": "plain-httpx", "traceparent": f"00-{'ab' * 16}-{'cd' * 8}-01"})
    assert response.headers["x-request-id"] == "plain-httpx"
    assert response.headers["traceparent"].split("-")[1] == "ab" * 16  # the new trace, the recorded span
    assert "date" not in response.headers and response.headers["server-timing"] == "inference;dur=0"


def test_replay_adds_no_request_id_the_server_never_sent(cassette_file):
    def no_echo(request):
        return Respond(200, {"ok": True})

    with live(no_echo) as server, use_cassette(cassette_file, record=True, api_key=None):
        httpx.post(f"{server.url}/v1/systemone", json={"a": 1}, headers={"X-Request-Id": "one"})
    with use_cassette(cassette_file, record=False), httpx.Client() as http:
        response = http.post("http://laya.test/v1/systemone", json={"a": 1}, headers={"X-Request-Id": "two"})
    assert response.json() == {"ok": True} and "x-request-id" not in response.headers


def test_bodies_match_as_canonical_json_and_other_bodies_as_bytes(cassette_file):
    def echo(request):
        return Respond(200, request.body, content_type="application/octet-stream")

    with live(echo) as server, use_cassette(cassette_file, record=True, api_key=None), httpx.Client() as http:
        http.post(f"{server.url}/v1/systemone", content=b'{"b": 1, "a": "\\u00e9"}')
        http.post(f"{server.url}/upload", content=b"plain text \xff")
    with use_cassette(cassette_file, record=False), httpx.Client() as http:
        assert http.post("http://x/upload", content=b"plain text \xff").status_code == 200
        assert http.post("http://x/v1/systemone", content='{"a":"é",  "b":1}'.encode()).status_code == 200
    with pytest.raises(CassetteMiss, match=r"body \(not JSON: 12 bytes recorded, 11 bytes now\)"):
        with use_cassette(cassette_file, record=False, strict=False), httpx.Client() as http:
            http.post("http://x/upload", content=b"plain text!")
    assert canonical_body(b'{"b": 1, "a": [1, 2]}') == b'{"a":[1,2],"b":1}'
    assert canonical_body(b"not json") == b"not json"
    # Text stays as written (UTF-8, as the docs promise), however the request escaped it.
    assert canonical_body(b'{"a": "\\u00e9"}') == canonical_body('{"a": "é"}'.encode()) == '{"a":"é"}'.encode()


def test_the_async_client_replays_too(cassette_file, no_sockets):
    recorded = record(cassette_file, "charged twice")
    no_sockets()

    async def replay():
        async with AsyncServedLayaClient("http://laya.test") as client:
            return await client.decide("charged twice", NOUL, request_id="async-1")

    with use_cassette(cassette_file, record=False):
        decision = asyncio.run(replay())
    assert decision.answers["refund"].p == recorded[0].answers["refund"].p
    assert decision.provenance.request_id == "async-1"


def test_concurrent_requests_each_get_one_recorded_answer(cassette_file):
    record(cassette_file, *["same"] * 4)
    results, errors = [], []

    def one(client):
        try:
            results.append(client.decide("same", NOUL).answers["refund"].p)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    with use_cassette(cassette_file, record=False, strict=False) as cassette:
        with ServedLayaClient("http://laya.test") as client:
            client.decide("same", NOUL)  # reads /health once, so the threads only decide
            threads = [threading.Thread(target=one, args=(client,)) for _ in range(3)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    assert errors == [] and len(set(results)) == 1 and cassette.unplayed() == []


def test_vcrpy_style_use_cassette_records_and_replays(tmp_path):
    recorder = laya_vcr(record=True, cassette_dir=tmp_path, api_key=KEY)
    with live() as server, recorder.use_cassette("native"):
        with ServedLayaClient(server.url, api_key=KEY) as client:
            client.decide("charged twice", NOUL)
    raw = (tmp_path / "native.yaml").read_bytes()
    assert KEY.encode() not in raw and b"laya.invalid" in raw
    player = laya_vcr(record=False, cassette_dir=tmp_path, api_key=None)
    with player.use_cassette("native"), ServedLayaClient("http://laya.test") as client:
        client.decide("charged twice", NOUL)
        with pytest.raises(CassetteMiss):
            client.decide("all fine", NOUL)


# --------------------------------------------------------------------------- misses


def test_no_cassette(tmp_path, no_sockets):
    no_sockets()
    missing = tmp_path / "nowhere" / "test_x.yaml"
    with use_cassette(missing, record=False) as cassette, ServedLayaClient(closed_loopback_url()) as client:
        assert not cassette.exists
        with pytest.raises(CassetteMissing) as caught:
            client.decide("anything", NOUL)
    message = str(caught.value)
    assert message.startswith(f"no cassette for this test at {missing} (record it with --laya-mode=record)")
    assert caught.value.path == missing and not missing.exists()


def test_the_plugin_chooses_the_record_hint(tmp_path):
    with use_cassette(tmp_path / "none", record=False, record_hint="--laya-record"), httpx.Client() as http:
        with pytest.raises(CassetteMissing, match=r"\(record it with --laya-record\)"):
            http.get("http://laya.test/health")


def test_a_miss_names_the_closest_request_and_the_differing_pointers(cassette_file, no_sockets):
    choice = {"q": {"type": "choice", "instructions": "Which?", "criteria": ["refund", "complaint"]}}
    record(cassette_file, "charged twice", "all fine", questions=choice)
    no_sockets()
    changed = {"q": {"type": "choice", "instructions": "Which?", "criteria": ["refund", "praise"]}}
    with use_cassette(cassette_file, record=False, api_key=KEY, strict=False):
        with ServedLayaClient(closed_loopback_url(), api_key=KEY) as client:
            with pytest.raises(CassetteMiss) as caught:
                client.decide("charged twice", changed)
            with pytest.raises(CassetteMiss) as secret:
                client.decide(f"charged twice {KEY}", choice)
    miss = caught.value
    message = str(miss)
    assert message.startswith(f"no recorded interaction matches POST /v1/systemone in cassette {cassette_file}; "
                              "closest recorded request: POST /v1/systemone (interaction 1 of 3) differs in: "
                              'body at /questions/q/criteria/1 (recorded "complaint", now "praise")')
    assert "--laya-mode=record" in message and miss.closest == 0
    assert not isinstance(miss, (httpx.TransportError, LayaCallError))
    assert KEY not in str(secret.value) and "<redacted>" in str(secret.value)


def test_a_miss_truncates_long_values(cassette_file):
    record(cassette_file, "x" * 10)
    with use_cassette(cassette_file, record=False, strict=False), ServedLayaClient("http://laya.test") as client:
        with pytest.raises(CassetteMiss) as caught:
            client.decide("y" * 500, NOUL)
    assert "y" * 100 not in str(caught.value) and "…" in str(caught.value)


def test_a_request_made_twice_but_recorded_once(cassette_file):
    record(cassette_file, "charged twice")
    with use_cassette(cassette_file, record=False), ServedLayaClient("http://laya.test") as client:
        client.decide("charged twice", NOUL)
        with pytest.raises(CassetteAlreadyPlayed) as caught:
            client.decide("charged twice", NOUL)
    assert str(caught.value).startswith("POST /v1/systemone: the matching interaction was already played")
    assert "record the test again" in str(caught.value)


def test_a_request_made_twice_and_recorded_twice_plays_both(cassette_file):
    record(cassette_file, "same", "same")
    with use_cassette(cassette_file, record=False) as cassette, ServedLayaClient("http://laya.test") as client:
        client.decide("same", NOUL)
        client.decide("same", NOUL)
    assert cassette.unplayed() == []


def test_strict_replay_fails_on_unplayed_interactions(cassette_file):
    record(cassette_file, "charged twice", "all fine")
    with pytest.raises(CassetteUnplayed) as caught:
        with use_cassette(cassette_file, record=False) as cassette, ServedLayaClient("http://laya.test") as client:
            client.decide("charged twice", NOUL)
            left = cassette.unplayed()
    assert left == [Unplayed("POST", "/v1/systemone", left[0].body)]
    assert left[0].body.startswith('state="all fine", questions={"refund":')
    assert "1 of 3 recorded interactions" in str(caught.value)
    with use_cassette(cassette_file, record=False, strict=False) as cassette, ServedLayaClient("http://laya.test") as client:
        client.decide("charged twice", NOUL)
    assert len(cassette.unplayed()) == 1  # reported, not raised
    with pytest.raises(CassetteMiss):  # a failing test is not also reported as unplayed
        with use_cassette(cassette_file, record=False), ServedLayaClient("http://laya.test") as client:
            client.decide("something else", NOUL)


def test_replay_never_reaches_the_network(cassette_file, no_sockets):
    record(cassette_file, "charged twice")
    no_sockets()
    with use_cassette(cassette_file, record=False, strict=False), httpx.Client() as http:
        with pytest.raises(CassetteMiss):
            http.get(f"{closed_loopback_url()}/elsewhere")
        with pytest.raises(CassetteMiss):
            http.get("https://example.com/")


def test_cassette_errors_are_not_transport_errors():
    for cls in (CassetteError, CassetteMissing, CassetteMiss, CassetteAlreadyPlayed, CassetteUnplayed):
        assert issubclass(cls, CassetteError) and not issubclass(cls, (httpx.TransportError, LayaCallError))


# --------------------------------------------------------------------------- bad files


def test_an_unsafe_yaml_tag_is_refused_and_never_runs(cassette_file, tmp_path):
    marker = tmp_path / "pwned"
    cassette_file.parent.mkdir(parents=True)
    cassette_file.write_text(
        f"interactions:\n- request: !!python/object/apply:os.system ['touch {marker}']\n  response: {{}}\nversion: 1\n")
    with pytest.raises(CassetteError) as caught:
        with use_cassette(cassette_file, record=False):
            pass
    assert str(cassette_file) in str(caught.value) and "!!python/object/apply:os.system" in str(caught.value)
    assert "nothing in it ran" in str(caught.value) and not marker.exists()


@pytest.mark.parametrize("text, problem", [
    ("interactions: [\n", "is not valid YAML"),
    ("- request: {}\n", "top level is list"),
    ("version: 1\n", "has no 'interactions' list"),
    ("interactions: {}\nversion: 1\n", "expected a list"),
    ("interactions: []\n", "has no 'version' key"),
    ("interactions:\n- request: {method: GET, uri: /x, body: '', headers: {}}\nversion: 1\n", "interaction 1 lacks response"),
    ("", "is empty"),
    ("interactions: []\nversion: 2\n", "format version 2"),
])
def test_a_bad_file_is_one_clear_error(cassette_file, text, problem):
    cassette_file.parent.mkdir(parents=True)
    cassette_file.write_text(text)
    with pytest.raises(CassetteError, match=problem) as caught:
        with use_cassette(cassette_file, record=False):
            pass
    assert type(caught.value) is CassetteError and caught.value.path == cassette_file
    assert str(cassette_file) in str(caught.value)


def test_every_truncation_of_a_cassette_is_detected(cassette_file, tmp_path):
    record(cassette_file, "charged twice")
    lines = cassette_file.read_text().splitlines(keepends=True)
    cut = tmp_path / "cut.yaml"
    for keep in range(len(lines)):
        cut.write_text("".join(lines[:keep]))
        with pytest.raises(CassetteError):
            with use_cassette(cut, record=False):
                pass


# --------------------------------------------------------------------------- layout


@pytest.mark.parametrize("nodeid, expected", [
    ("tests/test_x.py::test_a", "test_x/test_a.yaml"),
    ("tests/unit/test_x.py::TestA::test_b[p-1]", "test_x/TestA.test_b[p-1].yaml"),
    ("test_x.py::test_c[a/b c:d]", "test_x/test_c[a%2Fb%20c%3Ad].yaml"),
    ("test_x.py::test_c[a_b]", "test_x/test_c[a_b].yaml"),
    ("test_x.py::test_c[..]", "test_x/test_c[..].yaml"),
    ("test_x.py::test_ü[%]", "test_x/test_%C3%BC[%25].yaml"),
])
def test_cassette_relpath(nodeid, expected):
    assert cassette_relpath(nodeid) == PurePosixPath(expected)


def test_a_shared_cassette_directory_keeps_the_module_path():
    assert cassette_relpath("tests/unit/test_x.py::test_a", shared=True) == PurePosixPath("tests/unit/test_x/test_a.yaml")
    assert cassette_relpath("tests/api/test_x.py::test_a", shared=True) != cassette_relpath("tests/unit/test_x.py::test_a", shared=True)
    assert cassette_relpath("../test_x.py::test_a", shared=True) == PurePosixPath("%2E./test_x/test_a.yaml")


def test_long_test_names_stay_short_and_distinct():
    a = cassette_relpath("t.py::test[" + "x" * 300 + "1]")
    b = cassette_relpath("t.py::test[" + "x" * 300 + "2]")
    assert a != b and len(a.name) <= 125


def test_laya_vcr_cassette_dir_and_suffix(tmp_path):
    laya = laya_vcr(record=True, cassette_dir=tmp_path, api_key=KEY)
    with live() as server, laya.cassette("mod/test_a", provenance={"server": "scripted"}) as cassette:
        httpx.get(f"{server.url}/health")
    assert cassette.path == tmp_path / "mod" / "test_a.yaml" and cassette.path.is_file()


def _yaml(path: Path):
    import yaml

    return yaml.safe_load(path.read_text())


def test_a_body_sent_as_text_a_file_or_chunks_matches_the_same_bytes(tmp_path):
    # vcrpy hands matching the body as the client sent it: text, bytes, a file (which vcrpy keeps as
    # a BytesIO) or an iterator of chunks (a generator upload, chunks of text or bytes); a
    # before_record_request hook may leave an open file.
    from vcr.request import Request

    from pytest_laya.cassettes.matching import match_key

    raw = '{"b": 1, "a": "é"}'
    (tmp_path / "body.json").write_text(raw, encoding="utf-8")
    url = "http://laya.invalid/v1/systemone"
    requests = [Request("POST", url, body, {}) for body in (raw, raw.encode(), bytearray(raw.encode()),
                                                           io.BytesIO(raw.encode()), iter([raw[:6], raw[6:].encode()]))]
    with open(tmp_path / "body.json", "rb") as opened:
        hooked = Request("POST", url, None, {})
        hooked.body = opened  # vcrpy's setter keeps anything but text as it is
        requests.append(hooked)
        keys = {match_key(request) for request in requests}
    assert keys == {("POST", "/v1/systemone", (), '{"a":"é","b":1}'.encode())}


def test_the_replay_lookup_matches_exactly_what_vcrpys_matchers_match():
    """Replay looks interactions up by key; the key must agree with vcrpy's own matchers."""
    from vcr import matchers
    from vcr.request import Request

    from pytest_laya.cassettes.matching import laya_body_matcher as _laya_body_matcher
    from pytest_laya.cassettes.matching import match_key

    bodies = [b'{"a": 1, "b": [1, 2]}', b'{"b":[1,2],"a":1}', b'{"a": 1.0, "b": [1, 2]}', b'{"a": "\\u00e9"}',
              '{"a": "é"}'.encode(), b"not json", b"not  json", b"", None]
    uris = ["http://laya.invalid/v1/systemone", "http://laya.invalid/v1/systemone?b=2&a=1",
            "http://laya.invalid/v1/systemone?a=1&b=2", "http://laya.invalid/health", "http://laya.invalid/"]
    requests = [Request(method, uri, body, {}) for method in ("GET", "POST") for uri in uris for body in bodies]
    functions = (matchers.method, matchers.path, matchers.query, _laya_body_matcher)
    for one in requests:
        for other in requests:
            assert (match_key(one) == match_key(other)) == matchers.requests_match(one, other, functions), (one, other)


def test_a_long_cassette_replays_every_interaction_in_any_order(tmp_path):
    path = tmp_path / "long.yaml"
    questions = [{f"q{i}": {"type": "noul", "instructions": f"question {i}?"}} for i in range(60)]
    with live() as server:
        with use_cassette(path, record=True) as cassette, ServedLayaClient(server.url) as client:
            answered = [client.decide("same state", q).answers for q in questions]
    assert cassette.outcome == "written"
    order = list(range(60))[::-1]
    with use_cassette(path, record=False) as cassette, ServedLayaClient("http://127.0.0.1:1") as client:
        replayed = {i: client.decide("same state", questions[i]).answers for i in order}
        assert cassette.played == cassette.interactions and cassette.unplayed() == []
        with pytest.raises(CassetteAlreadyPlayed):
            client.decide("same state", questions[7])
    assert [replayed[i] for i in range(60)] == answered


def test_recorded_provenance_is_read_without_opening_the_cassette(cassette_file, tmp_path):
    from pytest_laya.cassettes import recorded_provenance

    record(cassette_file, "charged twice", provenance={"server": "laya-serve", "spec": "target"})
    with use_cassette(cassette_file, record=False, strict=False) as cassette:
        assert recorded_provenance(cassette_file) == cassette.provenance
    assert recorded_provenance(cassette_file)["spec"] == "target"
    assert recorded_provenance(tmp_path / "absent.yaml") is None
    garbage = tmp_path / "garbage.yaml"
    garbage.write_text("metadata: [unclosed\n")
    assert recorded_provenance(garbage) is None


# --------------------------------------------------------------------------- a file parsed once


def test_a_cassette_is_parsed_once_while_it_is_unchanged(cassette_file, monkeypatch):
    from pytest_laya.cassettes import persist

    record(cassette_file, "charged twice")
    parses = []
    real = persist._parse_cassette
    monkeypatch.setattr(persist, "_parse_cassette", lambda path: parses.append(path) or real(path))
    monkeypatch.setattr(persist, "_PARSED", type(persist._PARSED)())
    assert persist.recorded_provenance(cassette_file) is not None  # the cheap metadata read is apart
    for _ in range(3):  # where it was recorded, then the cassette itself, three tests in a row
        persist.provenance_of(persist.read_cassette(cassette_file))
        with use_cassette(cassette_file, record=False) as cassette, ServedLayaClient("http://laya.test") as client:
            client.decide("charged twice", NOUL)
        assert cassette.outcome == "replayed"
    assert parses == [cassette_file]


def test_a_cassette_changed_on_disk_is_read_again_even_with_its_size_and_mtime_kept(cassette_file):
    record(cassette_file, "charged twice")
    with use_cassette(cassette_file, record=False) as cassette, ServedLayaClient("http://laya.test") as client:
        recorded = client.decide("charged twice", NOUL).answers["refund"].p
    stat = os.stat(cassette_file)
    text = cassette_file.read_text()
    edited = f"{recorded:.4f}".replace("0.", "0.9", 1)[:6]  # another probability, as many characters
    assert f"{recorded:.4f}"[:6] in text and len(edited) == 6
    with open(cassette_file, "r+", encoding="utf-8") as handle:  # in place: same inode, same size
        handle.write(text.replace(f"{recorded:.4f}"[:6], edited, 1))
    os.utime(cassette_file, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the old mtime
    assert os.stat(cassette_file).st_size == stat.st_size
    with use_cassette(cassette_file, record=False) as cassette, ServedLayaClient("http://laya.test") as client:
        assert client.decide("charged twice", NOUL).answers["refund"].p == float(edited)
    # replaced as a whole, as a recording does (a new inode): read again too
    record(cassette_file, "all fine")
    with use_cassette(cassette_file, record=False) as cassette, ServedLayaClient("http://laya.test") as client:
        with pytest.raises(CassetteMiss):
            client.decide("charged twice", NOUL)
        client.decide("all fine", NOUL)
    assert cassette.unplayed() == []


def test_replaying_a_cassette_never_changes_what_the_next_replay_of_it_loads(cassette_file):
    from pytest_laya.cassettes.config import CassetteConfig

    record(cassette_file, "charged twice")

    def mark(response):  # a project's hook that changes the loaded response in place
        response["status"]["message"] += " (seen)"
        response["headers"]["x-seen"] = ["1"]
        return response

    config = CassetteConfig(before_record_response=mark)
    for _ in range(3):
        laya = laya_vcr(record=False, cassette_dir=None, api_key=None, strict=False, config=config)
        with laya.cassette(cassette_file), httpx.Client() as client:
            body = json.dumps({"state": "charged twice", "questions": NOUL}).encode()
            response = client.post("http://laya.test/v1/systemone", content=body)
        assert response.reason_phrase == "OK (seen)" and response.headers.get_list("x-seen") == ["1"]


def test_the_parsed_cassettes_kept_are_a_bounded_few(tmp_path):
    from pytest_laya.cassettes import persist

    record(tmp_path / "one.yaml", "charged twice")
    for i in range(persist._PARSED.size + 10):
        copy_ = tmp_path / f"copy-{i}.yaml"
        copy_.write_bytes((tmp_path / "one.yaml").read_bytes())
        assert persist.read_cassette(copy_)["interactions"]
    assert len(persist._PARSED) <= persist._PARSED.size


def test_a_hook_that_changes_the_request_in_place_changes_only_the_cassettes_copy(cassette_file):
    from pytest_laya.cassettes.config import CassetteConfig

    record(cassette_file, "charged twice")

    def rewrite(request):  # in place, as a project's hook may
        request.headers["X-Request-Id"] = "hooked-in-place"
        return request

    laya = laya_vcr(record=False, cassette_dir=None, api_key=None, strict=False,
                    config=CassetteConfig(before_record_request=rewrite))
    with laya.cassette(cassette_file), ServedLayaClient("http://laya.test") as client:
        decision = client.decide("charged twice", NOUL, request_id="req-123")
    assert decision.provenance.request_id == "req-123"  # the live request kept its own id

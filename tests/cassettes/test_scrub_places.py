"""Scrubbing and normalising change values at named places only, never text inside other text (issue 31).

Each answer is recorded through the kit's cassette with an `httpx.MockTransport` as the server,
then replayed from the written file: what the replay hands the caller must be what was served,
except at the places docs/cassettes.md lists.
"""

from __future__ import annotations

import json

import httpx
import pytest
import yaml

from pytest_laya.cassettes import RECORDED_REQUEST_ID, RECORDED_TRACEPARENT, REDACTED, laya_vcr, use_cassette

URL = "http://laya.test/v1/systemone"
REQUEST = b'{"state": "s", "questions": {}}'


def served(body: str, headers=()):
    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers=[("content-type", "application/json"), *headers], content=body.encode())
    return handle


def round_trip(tmp_path, body: str, *, api_key: str | None = None, request_headers=None, response_headers=()):
    """Record `body` as the answer to one POST, replay it from the file: (stored text, replayed text)."""
    path = tmp_path / "c.yaml"
    request = httpx.Request("POST", URL, content=REQUEST,
                            headers={"content-type": "application/json", **(request_headers or {})})
    with laya_vcr(record=True, cassette_dir=None, api_key=api_key).cassette(path), \
            httpx.Client(transport=httpx.MockTransport(served(body, response_headers))) as http:
        http.send(request)
    stored = yaml.safe_load(path.read_text())["interactions"][0]["response"]["body"]["string"]
    with use_cassette(path, record=False, api_key=api_key), httpx.Client() as http:
        replayed = http.send(request).text
    return stored, replayed


# --------------------------------------------------------------------------- case 1: volatile places

@pytest.mark.parametrize("option", ["duration_ms", "latency_ms", "elapsed_ms", "timing"])
def test_an_option_named_like_a_duration_keeps_its_probability(tmp_path, option):
    body = json.dumps({"model": "m", "answers": {"team": {
        "type": "choice", "choice": option, "probabilities": {option: 0.538, "billing": 0.462}, "confidence": 0.5}},
        "latency_ms": 17})
    stored, replayed = round_trip(tmp_path, body)
    answer = json.loads(replayed)
    assert answer["answers"] == json.loads(body)["answers"]
    assert answer["latency_ms"] == 0  # the top-level duration is still normalised


def test_a_noul_question_called_timing_keeps_its_answer_on_a_jev_strict_server(tmp_path):
    body = ('{"model":"laya-rl-agent","answers":{"timing":{"type":"noul","noul":0.7311}},'
            '"usage":{"input_tokens":12,"output_tokens":0},"latency_ms":38}')
    stored, replayed = round_trip(tmp_path, body)
    assert stored == replayed == body.replace('"latency_ms":38', '"latency_ms":0')


def test_timing_members_are_zeroed_only_at_the_top_of_a_decision_or_a_batch_result(tmp_path):
    body = ('{"results":[{"answers":{"timing":{"type":"noul","noul":0.25}},"timing":{"queue":1.5,"infer":3}}],'
            '"timing":{"total":4.5},"served_by":{"checkpoint":"/home/me/tiny","device":"cpu"},'
            '"routing":{"repo":"/srv/ckpt/tiny"},"note":{"repo":"/keep/this"}}')
    stored, _ = round_trip(tmp_path, body)
    assert stored == ('{"results":[{"answers":{"timing":{"type":"noul","noul":0.25}},"timing":{"queue":0,"infer":0}}],'
                      '"timing":{"total":0},"served_by":{"checkpoint":"<local>/tiny","device":"cpu"},'
                      '"routing":{"repo":"<local>/tiny"},"note":{"repo":"/keep/this"}}')


# --------------------------------------------------------------------------- case 2: request ids and trace ids

@pytest.mark.parametrize("request_id", ["probabilities", "confidence", "refund-question"])
def test_a_request_id_equal_to_a_key_or_a_name_leaves_the_answer_as_it_was(tmp_path, request_id):
    body = json.dumps({"answers": {
        request_id: {"type": "choice", "choice": request_id, "probabilities": {request_id: 0.9, "other": 0.1},
                     "confidence": 0.8},
        "urgency": {"type": "score", "score": 0.4, "legend": {"0": request_id, "1": "high"},
                    "probabilities": {"0": 0.6, "1": 0.4}, "confidence": 0.2}},
        "served_by": {"checkpoint": "tiny", "truncated_questions": [request_id]},
        "echo": request_id, "request_id": f"{request_id} was here"}, separators=(",", ":"))
    stored, replayed = round_trip(tmp_path, body, request_headers={"x-request-id": request_id})
    # Only the whole values outside names are the id: `echo`; text that contains it is kept.
    assert json.loads(replayed) == {**json.loads(body), "echo": RECORDED_REQUEST_ID}
    assert stored == body.replace(f'"echo":"{request_id}"', f'"echo":"{RECORDED_REQUEST_ID}"')


def test_a_trace_id_inside_a_revision_leaves_the_revision_as_it_was(tmp_path):
    trace = "3b1f0c9a7d2e4f6a8b0c1d2e3f405162"
    traceparent = f"00-{trace}-00f067aa0ba902b7-01"
    body = json.dumps({"served_by": {"revision": f"sha256:{trace}aa", "checkpoint": "tiny"},
                       "trace_id": trace, "traceparent": traceparent})
    stored, replayed = round_trip(tmp_path, body, request_headers={"traceparent": traceparent})
    recorded_trace = RECORDED_TRACEPARENT.split("-")[1]
    assert json.loads(replayed) == {"served_by": {"revision": f"sha256:{trace}aa", "checkpoint": "tiny"},
                                    "trace_id": recorded_trace, "traceparent": RECORDED_TRACEPARENT}


def test_a_problem_instance_has_its_request_id_segment_replaced(tmp_path):
    body = '{"type":"/problems/not_found","instance":"/requests/req-12345678/x","detail":"no req-12345678x"}'
    stored, _ = round_trip(tmp_path, body, request_headers={"x-request-id": "req-12345678"})
    assert stored == body.replace("/requests/req-12345678/", f"/requests/{RECORDED_REQUEST_ID}/")


def test_a_text_body_loses_a_request_id_only_when_it_is_the_whole_body(tmp_path):
    stored, _ = round_trip(tmp_path, "id req-12345678 seen", request_headers={"x-request-id": "req-12345678"})
    assert stored == "id req-12345678 seen"
    stored, _ = round_trip(tmp_path, "req-12345678", request_headers={"x-request-id": "req-12345678"})
    assert stored == RECORDED_REQUEST_ID


# --------------------------------------------------------------------------- case 3: a short key

def test_a_short_key_is_replaced_only_where_it_is_a_whole_value(tmp_path):
    body = json.dumps({"answers": {"dev": {"type": "choice", "choice": "dev", "probabilities": {"dev": 1.0},
                                           "confidence": 1.0}},
                       "served_by": {"checkpoint": "tiny", "device": "device-0", "weights_dtype": "dev"}})
    stored, replayed = round_trip(tmp_path, body, api_key="dev", response_headers=[("server-timing", "device;dur=3")])
    expected = json.loads(body)
    expected["served_by"]["weights_dtype"] = REDACTED  # a whole value equal to the key
    assert json.loads(replayed) == expected  # `device`, the question id and the option name untouched
    assert '"device": "device-0"' in stored


def test_a_short_key_is_replaced_in_a_text_body_and_a_url_only_as_a_whole_value(tmp_path):
    path = tmp_path / "c.yaml"
    handler = served("device dev")
    with laya_vcr(record=True, cassette_dir=None, api_key="dev").cassette(path), \
            httpx.Client(transport=httpx.MockTransport(handler)) as http:
        http.post("http://laya.test/v1/dev/devices?key=dev&mode=device", content=b"dev")
    [stored] = yaml.safe_load(path.read_text())["interactions"]
    assert stored["request"]["uri"] == f"http://laya.invalid/v1/{REDACTED}/devices?key={REDACTED}&mode=device"
    assert stored["request"]["body"] == REDACTED
    assert stored["response"]["body"]["string"] == "device dev"


def test_a_long_key_inside_a_problems_detail_replaces_the_whole_detail(tmp_path):
    key = "sk-live-0123456789"
    body = json.dumps({"type": "/problems/unauthorized", "detail": f"the key {key} is revoked"})
    stored, _ = round_trip(tmp_path, body, api_key=key)
    assert key not in stored and json.loads(stored) == {"type": "/problems/unauthorized", "detail": REDACTED}


def test_every_copy_of_a_duplicate_member_is_scrubbed_and_the_layout_kept(tmp_path):
    key = "sk-live-0123456789"
    body = f'{{"token" : "{key}",\n "token":"{key}", "n": [1, "\\u0073k-live-0123456789"]}}'
    stored, _ = round_trip(tmp_path, body, api_key=key)
    assert stored == f'{{"token" : "{REDACTED}",\n "token":"{REDACTED}", "n": [1, "{REDACTED}"]}}'


# --------------------------------------------------------------------------- from outside, through the plugin

DOWNSTREAM = """
import json
import pathlib

import httpx

REQUEST_ID = "probabilities"  # the question id too, and a key of every choice answer
BODY = {"state": "I was charged twice.",
        "questions": {REQUEST_ID: {"type": "choice", "instructions": "Which timer?",
                                   "criteria": ["duration_ms", "latency_ms", "billing"]}}}
SERVED = pathlib.Path(__file__).with_name("served.json")


def test_decision(laya_url):
    with httpx.Client() as client:
        response = client.post(laya_url + "/v1/systemone", json=BODY, headers={"X-Request-Id": REQUEST_ID})
    answer = response.raise_for_status().json()
    if not SERVED.exists():  # the recording run keeps what the server said
        SERVED.write_text(json.dumps(answer))
    assert answer["answers"] == json.loads(SERVED.read_text())["answers"]
"""


def test_a_downstream_decision_named_like_spec_keys_and_the_request_id_replays_as_served(pytester):
    from pytest_laya.fake import FakeLayaServer
    from tests.helpers.pytester_runs import run

    pytester.makepyfile(test_downstream=DOWNSTREAM)
    with FakeLayaServer() as server:
        server.laya.pin({"probabilities": {"duration_ms": 0.5, "latency_ms": 0.3, "billing": 0.2}})
        run(pytester, "--laya-record", f"--laya-url={server.url}").assert_outcomes(passed=1)
    served = json.loads((pytester.path / "served.json").read_text())["answers"]["probabilities"]
    assert served["choice"] == "duration_ms" and served["probabilities"]["duration_ms"] == 0.5
    run(pytester).assert_outcomes(passed=1)  # replay: the same decision, compared in the inner test


@pytest.mark.parametrize("body", [
    b'{"routing": {"repo": "org/model"}, "served_by": {"checkpoint": "fake-0"}}',
    b'{"repo": "/home/me/ckpt"}',
    b'{"repo" :\n "/home/me/ckpt"}',
    b'{"repo": "\\/home\\/me"}',
    b'{"routing": {"repo": "C:\\\\models\\\\m"}}',
    b'{"routing": {"repo": "\\\\\\\\share\\\\m"}}',
    b'{"served_by": {"local_dir": "/data/m", "checkpoint_dir": "x"}}',
    b'{"models": {"m": {"model_dir": "/m"}}}',
    b'{"re\\u0070o": "/home/me", "checkpoint": "x"}',
    b'{"text": "{\\"repo\\": \\"/x\\"}", "repo": "org/m"}',
    b'{"latency_ms": 12, "repo": "org/m"}',
    b'{"timing": {"infer": 3}}',
    b'not json "repo": "/x"',
])
def test_the_quick_look_passes_over_a_body_only_when_normalising_it_changes_nothing(body):
    """`may_be_volatile` skips the parse only where it would change nothing: a body it passes over
    is the same after the full normalisation of every place."""
    from pytest_laya.cassettes.json_splice import splice
    from pytest_laya.cassettes.places import may_be_volatile, volatile_value

    spliced = splice(body.decode(), volatile_value)
    if not may_be_volatile(body):
        assert spliced is None or spliced == body.decode()
    assert may_be_volatile(b'{"repo": "/abs"}') and not may_be_volatile(b'{"repo": "org/m"}')

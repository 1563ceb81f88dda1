"""The round-trip property: what a cassette replays is what the server served (issue 31).

Answers drawn from `pytest_laya.strategies`, with adversarial names (question ids, option names
and level labels equal to spec keys, the API key, the request id, the trace id and revision
text), are handed to the kit's cassette as vcrpy's httpx stub hands a live exchange to it, recorded to a
file and replayed from that file. The replayed body must be the served one byte for byte, except at the
declared volatile places (docs/cassettes.md), which hold their stored values; so the decoded
answers are exactly the served ones. Everything runs in this process: no server, no subprocess.

300 examples (3,000 under ``LAYA_PROPERTIES=thorough``, tests/helpers/properties.py;
``LAYA_ROUND_TRIP_EXAMPLES`` overrides both).
"""

from __future__ import annotations

import itertools
import json
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_laya import strategies as laya_st
from pytest_laya.cassettes import laya_vcr
from pytest_laya.wire.questions import option_key
from tests.helpers.properties import example_count

EXAMPLES = int(os.environ.get("LAYA_ROUND_TRIP_EXAMPLES") or example_count(300))

KEY = "sk-round-trip-canary-0451"
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
REVISION = f"sha256:{TRACE}9f0e"  # the trace id is part of it
MACHINE_PATH = "/home/recorder/checkpoints/tiny"
URL = "http://laya.test/v1/systemone"

#: Request ids: spec keys, and an id that is part of revision text. A request id equal to a whole
#: value the server sends (a revision) is replaced there by design, so none is drawn.
REQUEST_IDS = ["probabilities", "confidence", "latency_ms", "duration_ms", f"{TRACE[:12]}", "req-0123456789"]

#: What names are drawn from, besides ordinary text: spec keys, the volatile members, the key,
#: every request id, the trace id, revision text, the stored values, a machine path.
ADVERSARIAL = [
    "probabilities", "confidence", "latency_ms", "duration_ms", "elapsed_ms", "timing", "choice", "type",
    "noul", "score", "legend", "answers", "served_by", "routing", "repo", "checkpoint", "revision", "request_id",
    "instance", "model", "usage", "results", "queue", KEY, *REQUEST_IDS, TRACE,
    f"00-{TRACE}-00f067aa0ba902b7-01", REVISION, "<redacted>", "recorded", "<local>/tiny", MACHINE_PATH, "0",
]
# Strategies are built once here, not inside each draw: building one is most of a draw's cost.
adversarial = st.sampled_from(ADVERSARIAL)
names = st.one_of(adversarial, laya_st.texts(min_size=1, max_size=6, blank=False))
KINDS = st.sampled_from(["choice", "score", "noul"])
LEVELS = st.lists(names, min_size=1, max_size=3)
OPTIONS = st.lists(names, min_size=1, max_size=4, unique_by=option_key)
FLAVORS = st.sampled_from(["target", "laya-serve-0.4.15"])
LAYOUTS = st.sampled_from([{"separators": (",", ":")}, {}, {"indent": 2}, {"ensure_ascii": False}])
LATENCIES = st.integers(0, 10**6)
REQUEST_ID_DRAWS = st.sampled_from(REQUEST_IDS)
TIMINGS = st.fixed_dictionaries({"queue": st.floats(0, 1e4), "infer": st.integers(0, 10**4)})


@st.composite
def question(draw):
    kind = draw(KINDS)
    if kind == "noul":
        return {"type": "noul", "instructions": draw(adversarial)}
    if kind == "score":
        return {"type": "score", "instructions": draw(adversarial), "criteria": draw(LEVELS)}
    options = draw(OPTIONS)
    if draw(st.booleans()):
        return {"type": "choice", "instructions": draw(adversarial), "criteria": options}
    return {"type": "choice", "instructions": draw(adversarial), "criteria": {o: draw(adversarial) for o in options}}


QUESTION_SETS = st.dictionaries(names, question(), min_size=1, max_size=3)


@st.composite
def exchanges(draw):
    """(request id, request body, served body as a dict, layout) for one decision."""
    questions = draw(QUESTION_SETS)
    body = draw(laya_st.responses(questions, flavor=draw(FLAVORS)))
    # The volatile places a server fills, as laya-serve and a Jev-strict server do.
    body.setdefault("served_by", {})["revision"] = REVISION
    body["routing"] = {"model": "tiny", "repo": MACHINE_PATH}
    body["latency_ms"] = draw(LATENCIES)
    if draw(st.booleans()):
        body["timing"] = draw(TIMINGS)
    return draw(REQUEST_ID_DRAWS), {"state": draw(adversarial), "questions": questions}, body, draw(LAYOUTS)


def stored_form(body: dict) -> dict:
    """`body` as docs/cassettes.md says a cassette stores it: the volatile places' stored values."""
    stored = json.loads(json.dumps(body))
    stored["latency_ms"] = 0
    stored["routing"]["repo"] = "<local>/tiny"
    if "timing" in stored:
        stored["timing"] = {phase: 0 for phase in stored["timing"]}
    return stored


def test_a_replayed_answer_is_the_served_one_outside_the_volatile_places(tmp_path, monkeypatch):
    from vcr.request import Request

    # Durability is not what this checks: 4,000 fsyncs would be most of its time.
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    recorder = laya_vcr(record=True, cassette_dir=tmp_path, api_key=KEY)
    player = laya_vcr(record=False, cassette_dir=tmp_path, api_key=KEY)
    numbers = itertools.count()

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(exchanges())
    def round_trip(exchange):
        request_id, request_body, body, layout = exchange
        served = json.dumps(body, **layout).encode()
        sent = json.dumps(request_body).encode()
        headers = {"content-type": "application/json", "x-request-id": request_id,
                   "traceparent": f"00-{TRACE}-00f067aa0ba902b7-01", "authorization": f"Bearer {KEY}"}
        # The exchange as vcrpy's httpx stub hands it to the cassette, with the server's own span.
        response = {"status": {"code": 200, "message": "OK"}, "body": {"string": served}, "headers": {
            "content-type": ["application/json"], "content-length": [str(len(served))], "x-request-id": [request_id],
            "traceparent": [f"00-{TRACE}-{next(numbers):016x}-01"], "server-timing": ["inference;dur=12.5"]}}
        name = f"c{next(numbers)}"
        recording = recorder.open(name)
        recording.cassette.append(Request("POST", URL, sent, headers), response)
        assert recording.finish(failed=False) == "written"
        assert response["body"]["string"] == served  # the caller got what was served

        replaying = player.open(name)
        request = Request("POST", URL, sent, headers)
        assert replaying.cassette.can_play_response_for(request)
        replayed = replaying.cassette.play_response(request)
        assert replaying.finish(failed=False) == "replayed"
        assert replayed["body"]["string"] == json.dumps(stored_form(body), **layout).encode()
        assert json.loads(replayed["body"]["string"])["answers"] == body["answers"]
        assert replayed["headers"]["server-timing"] == ["inference;dur=0"]
        assert replayed["headers"]["x-request-id"] == [request_id]

    round_trip()

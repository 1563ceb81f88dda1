"""A cassette's own interactions pass through scrubbing unchanged, and scrubbing knows it cheaply.

With no filter, no hook and no secret known, scrubbing only normalises (the origin, the kept
headers, the stored ids and durations), so an interaction already in stored form comes out as it
went in: `Scrubber` then returns it at once (`_stored_request`, `_stored_response`). These tests
hold that shortcut to the full scrubbing on requests and responses drawn around the stored form,
one or two edits away from it, so that every condition of the shortcut is crossed both ways.
"""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_laya.cassettes.config import CassetteConfig
from pytest_laya.cassettes.scrub import RECORDED_ORIGIN, RECORDED_REQUEST_ID, RECORDED_TRACEPARENT, Scrubber
from pytest_laya.intercept.request import Request

BODY = json.dumps({"state": "refund?", "questions": {"q": {"type": "noul", "instructions": "Refund?"}}}).encode()
ANSWER = json.dumps({"model": "m", "answers": {"q": {"type": "noul", "noul": 0.25, "confidence": 0.75}}}).encode()
VOLATILE = json.dumps({"model": "m", "latency_ms": 12, "served_by": {"checkpoint": "/home/me/ckpt"}}).encode()

URIS = st.sampled_from([
    f"{RECORDED_ORIGIN}/v1/systemone", f"{RECORDED_ORIGIN}/v1/systemone?a=1&b", f"{RECORDED_ORIGIN}/v1/x%2Fy;p",
    RECORDED_ORIGIN, f"{RECORDED_ORIGIN}/v1/systemone#part", f"{RECORDED_ORIGIN}/v1/systemone?",
    f"{RECORDED_ORIGIN}/v1/sys\ttemone", f"{RECORDED_ORIGIN}/v1/sys\ntemone", "http://laya.invalid:80/v1/systemone",
    "HTTP://laya.invalid/v1/systemone", "http://127.0.0.1:8000/v1/systemone", f"{RECORDED_ORIGIN}/v1/systemone?a=1&&b=",
])
STORED_REQUEST_HEADERS = [("accept", "*/*"), ("content-type", "application/json"), ("x-request-id", RECORDED_REQUEST_ID)]
#: The stored headers with edits: some dropped, and others (a name's case, other values, a credential) added.
REQUEST_HEADERS = st.tuples(st.lists(st.booleans(), min_size=3, max_size=3), st.lists(st.sampled_from([
    ("content-type", "application/json"), ("accept", "*/*"), ("Content-Type", "application/json"),
    ("x-request-id", RECORDED_REQUEST_ID), ("x-request-id", "req-0123456789"), ("traceparent", RECORDED_TRACEPARENT),
    ("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), ("authorization", "Bearer sk-0123456789"),
    ("user-agent", "python-httpx/0.28"), ("accept", ["*/*", "text/plain"]), ("accept", 7),
]), max_size=2)).map(lambda drawn: [pair for pair, kept in zip(STORED_REQUEST_HEADERS, drawn[0]) if kept] + drawn[1])
REQUEST_BODIES = st.sampled_from([BODY, BODY.decode(), None, b"", VOLATILE, b"\xff\xfe"])

STORED_RESPONSE_HEADERS = {
    "content-length": [str(len(ANSWER))], "content-type": ["application/json"], "laya-spec": ["target"],
    "server-timing": ["queue;dur=0, infer;dur=0"], "x-request-id": [RECORDED_REQUEST_ID], "x-inference-time-ms": ["0"],
}
HEADER_NAMES = st.sampled_from([*STORED_RESPONSE_HEADERS, "traceparent", "Content-Type", "date", "content-encoding",
                                "retry-after"])
HEADER_VALUES = st.one_of(
    st.lists(st.sampled_from(["application/json", RECORDED_REQUEST_ID, RECORDED_TRACEPARENT, "0", "12", "target",
                              "queue;dur=0, infer;dur=0", "infer;dur=12.5", 'x;desc="a"', "gzip", str(len(ANSWER)),
                              "req-0123456789"]), min_size=1, max_size=2),
    st.sampled_from(["application/json", 12, ["0", 3]]),
)
#: The stored headers with one to three edits: a value replaced, a header dropped, or one added.
RESPONSE_HEADERS = st.one_of(
    st.lists(st.tuples(HEADER_NAMES, st.one_of(st.none(), HEADER_VALUES)), min_size=1, max_size=3).map(
        lambda edits: {name: value for name, value in
                       {**STORED_RESPONSE_HEADERS, **dict(edits)}.items() if value is not None}),
    st.sampled_from([None, {}]),
)
RESPONSE_BODIES = st.sampled_from([ANSWER, ANSWER.decode(), None, VOLATILE, b"not json", b""])


def _scrubbers() -> tuple[Scrubber, Scrubber]:
    """(with the shortcut, without it): the second scrubs everything the full way."""
    full = Scrubber(None, learn=True, config=CassetteConfig())
    full._normalises_only = False
    return Scrubber(None, learn=True, config=CassetteConfig()), full


def _request_parts(request: Request) -> tuple[str, list[tuple[str, object]], bytes | None]:
    return request.uri, list(request.headers.items()), request.body


def _outcome(scrub, value):
    """What scrubbing `value` gives, or the error it raises (a body that cannot be decoded)."""
    try:
        return "gives", scrub(copy.deepcopy(value))
    except Exception as exc:  # noqa: BLE001 - compared, not swallowed
        return "raises", type(exc), str(exc)


@settings(max_examples=400, deadline=None)
@given(uri=URIS, headers=REQUEST_HEADERS, body=REQUEST_BODIES)
def test_a_request_scrubs_to_what_the_full_scrubbing_gives(uri, headers, body):
    quick, full = _scrubbers()
    taken = quick.request(Request("POST", uri, body, headers))
    made = full.request(Request("POST", uri, body, headers))
    assert _request_parts(taken) == _request_parts(made)


@settings(max_examples=400, deadline=None)
@given(headers=RESPONSE_HEADERS, body=RESPONSE_BODIES, message=st.sampled_from(["OK", "", None]))
def test_a_response_scrubs_to_what_the_full_scrubbing_gives(headers, body, message):
    response = {"status": {"code": 200, "message": message}, "body": {"string": body}}
    if headers is not None:
        response["headers"] = headers
    quick, full = _scrubbers()
    assert _outcome(quick.response, response) == _outcome(full.response, response)


def _stored_pair() -> tuple[Request, dict]:
    request = Request("POST", f"{RECORDED_ORIGIN}/v1/systemone", BODY,
                      [("accept", "*/*"), ("content-type", "application/json"), ("x-request-id", RECORDED_REQUEST_ID)])
    response = {"status": {"code": 200, "message": "OK"}, "body": {"string": ANSWER},
                "headers": {"content-length": [str(len(ANSWER))], "content-type": ["application/json"],
                            "laya-spec": ["target"], "server-timing": ["queue;dur=0, infer;dur=0"],
                            "x-request-id": [RECORDED_REQUEST_ID], "x-inference-time-ms": ["0"]}}
    return request, response


def test_a_cassettes_own_interaction_is_known_as_stored_and_returned_as_it_is():
    scrubber = Scrubber(None, learn=True, config=CassetteConfig())
    request, response = _stored_pair()
    assert scrubber._stored_request(request) and scrubber._stored_response(response)
    assert scrubber.request(request) is request and scrubber.response(response) is response


def test_with_a_key_a_filter_or_a_hook_everything_is_scrubbed_the_full_way():
    key = "sk-stored-form-canary"
    request, response = _stored_pair()
    request.body = BODY.replace(b"refund?", key.encode())
    response["body"]["string"] = ANSWER.replace(b'"m"', json.dumps(key).encode())
    keyed = Scrubber(key, learn=True, config=CassetteConfig())
    assert key.encode() not in keyed.request(request).body
    assert key.encode() not in keyed.response(response)["body"]["string"]
    request, response = _stored_pair()
    filtered = Scrubber(None, learn=True, config=CassetteConfig(filter_headers=(("accept", "<accept>"),)))
    assert filtered.request(request).headers["accept"] == "<accept>"
    hooked = Scrubber(None, learn=True, config=CassetteConfig(before_record_response=lambda r: {**r, "hooked": True}))
    assert hooked.response(response)["hooked"] is True


RESPONSE_EDGES = {
    "a duration": lambda r: r["headers"].update({"server-timing": ["infer;dur=12.5"]}),
    "an inference time": lambda r: r["headers"].update({"x-inference-time-ms": ["12"]}),
    "a repeated id": lambda r: r["headers"].update({"x-request-id": [RECORDED_REQUEST_ID, RECORDED_REQUEST_ID]}),
    "another id": lambda r: r["headers"].update({"x-request-id": ["req-0123456789"]}),
    "a length off by one": lambda r: r["headers"].update({"content-length": [str(len(ANSWER) + 1)]}),
    "a trace": lambda r: r["headers"].update({"traceparent": ["00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"]}),
    "a name in capitals": lambda r: r["headers"].update({"Laya-Spec": r["headers"].pop("laya-spec")}),
    "a header not kept": lambda r: r["headers"].update({"date": ["Mon, 07 Dec 2026 17:00:00 GMT"]}),
    "a value not text": lambda r: r["headers"].update({"retry-after": [3]}),
    "a value not a list": lambda r: r["headers"].update({"laya-spec": "target"}),
    "a body as text": lambda r: r["body"].update({"string": ANSWER.decode()}),
    "a volatile body": lambda r: r["body"].update({"string": VOLATILE}),
    "no headers": lambda r: r.pop("headers"),
    "a body not a mapping": lambda r: r.update({"body": ANSWER}),
}


@pytest.mark.parametrize("edit", RESPONSE_EDGES.values(), ids=RESPONSE_EDGES.keys())
def test_a_response_one_edit_from_the_stored_form_is_scrubbed_the_full_way(edit):
    _, response = _stored_pair()
    edit(response)
    quick, full = _scrubbers()
    assert not quick._stored_response(response)
    assert _outcome(quick.response, response) == _outcome(full.response, response)


REQUEST_EDGES = {
    "another origin": lambda r: setattr(r, "uri", "http://127.0.0.1:8000/v1/systemone"),
    "a fragment": lambda r: setattr(r, "uri", f"{RECORDED_ORIGIN}/v1/systemone#part"),
    "an empty query": lambda r: setattr(r, "uri", f"{RECORDED_ORIGIN}/v1/systemone?"),
    "a tab": lambda r: setattr(r, "uri", f"{RECORDED_ORIGIN}/v1/sys\ttemone"),
    "no body": lambda r: setattr(r, "body", None),
    "a credential": lambda r: r.headers.update({"authorization": "Bearer sk-0123456789"}),
    "another id": lambda r: r.headers.update({"x-request-id": "req-0123456789"}),
    "a trace": lambda r: r.headers.update({"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}),
    "a header not kept": lambda r: r.headers.update({"user-agent": "python-httpx/0.28"}),
    "a name in capitals": lambda r: setattr(r, "headers", [("Accept", "*/*"), ("content-type", "application/json")]),
}


@pytest.mark.parametrize("edit", REQUEST_EDGES.values(), ids=REQUEST_EDGES.keys())
def test_a_request_one_edit_from_the_stored_form_is_scrubbed_the_full_way(edit):
    request, _ = _stored_pair()
    edit(request)
    quick, full = _scrubbers()
    assert not quick._stored_request(request)
    assert _request_parts(quick.request(request.copy())) == _request_parts(full.request(request.copy()))

"""What a replay miss says: which recorded request is closest, and where and how it differs.

A miss is the message a user reads when their code sends a request the cassette does not hold;
it has to name the right recorded request and show the values that changed, readably, whatever
the bodies are. The end-to-end cases replay a real cassette; the tables pin the parts of the
message (`body_differences`, `show_difference`, `body_summary`, `describe`) exactly.
"""

from __future__ import annotations

import io
import json

import httpx
import pytest
from vcr.request import Request

from pytest_laya.cassettes import CassetteMiss, canonical_body, use_cassette
from pytest_laya.cassettes.matching import body_differences, body_summary, describe, show_difference
from pytest_laya.faults import Respond, ScriptedServer
from pytest_laya.wire.body import body_bytes

DECIDE = "/v1/systemone"


def record(path, *requests):
    """Record (method, target, body) requests against a server that answers every one 200."""
    with ScriptedServer(default=Respond(200, {"ok": True})).start() as server:
        with use_cassette(path, record=True), httpx.Client() as http:
            for method, target, body in requests:
                http.request(method, server.url + target, content=body, headers={"content-type": "application/json"})


def miss(path, method, target, body) -> CassetteMiss:
    with use_cassette(path, record=False, strict=False), httpx.Client() as http:
        with pytest.raises(CassetteMiss) as caught:
            http.request(method, "http://laya.test" + target, content=body, headers={"content-type": "application/json"})
    return caught.value


def j(value) -> bytes:
    return json.dumps(value).encode()


# --------------------------------------------------------------------------- the closest recorded request

def test_the_closest_recording_is_the_one_with_the_fewest_differing_values(tmp_path):
    path = tmp_path / "c.yaml"
    now = {"state": "charged twice", "questions": {"q": {"type": "noul", "instructions": "Refund?"}}}
    far = {"state": "charged twice", "questions": {}}  # a whole question (2 values) gone
    near = {"state": "charged once", "questions": now["questions"]}  # one value changed
    record(path, ("POST", DECIDE, j(far)), ("POST", DECIDE, j(near)))
    found = miss(path, "POST", DECIDE, j(now))
    assert found.closest == 1
    assert found.differences == ['body at /state (recorded "charged once", now "charged twice")']


def test_a_recording_with_the_same_body_is_closer_than_one_with_the_same_query(tmp_path):
    path = tmp_path / "c.yaml"
    body = j({"state": "charged twice"})
    record(path, ("POST", DECIDE + "?v=1", j({"state": "charged once"})), ("POST", DECIDE + "?v=2", body))
    found = miss(path, "POST", DECIDE + "?v=3", body)
    assert found.closest == 1
    assert found.differences == ["query (recorded 'v=2', now 'v=3')"]


def test_an_absent_object_weighs_as_many_values_as_it_holds(tmp_path):
    path = tmp_path / "c.yaml"
    now = {"a": 1, "b": {"x": 1, "y": 2, "z": 3}}
    record(path, ("POST", DECIDE, j({"a": 1})),  # b absent: 3 values
           ("POST", DECIDE, j({"a": 2, "b": {"x": 1, "y": 2, "z": 4}})))  # 2 values differ
    assert miss(path, "POST", DECIDE, j(now)).closest == 1


def test_a_miss_shows_non_ascii_text_as_written(tmp_path):
    path = tmp_path / "c.yaml"
    record(path, ("POST", DECIDE, j({"state": "café"})))
    found = miss(path, "POST", DECIDE, j({"state": "crème brûlée"}))
    assert found.differences == ['body at /state (recorded "café", now "crème brûlée")']


def test_only_the_first_differences_are_listed_in_the_message(tmp_path):
    path = tmp_path / "c.yaml"
    record(path, ("POST", DECIDE, j({str(i): i for i in range(8)})))
    found = miss(path, "POST", DECIDE, j({str(i): -i - 1 for i in range(8)}))
    assert len(found.differences) == 8
    assert "body at /4 (recorded 4, now -5); and 3 more." in str(found)


# --------------------------------------------------------------------------- differences, value by value

@pytest.mark.parametrize(("now", "recorded", "weight", "shown"), [
    ({"a": 1}, {"a": 1}, 0, []),
    ({"a": 1, "b": 2}, {"a": 1, "b": 3}, 1, ["body at /b (recorded 3, now 2)"]),
    # Members present on one side only: "absent", and as many values as they hold.
    ({"a": 1, "new": {"x": 1, "y": [1, 2]}}, {"a": 1}, 3, ['body at /new (recorded absent, now {"x":1,"y":[1,2]})']),
    ({"a": 1}, {"a": 1, "old": [1, 2]}, 2, ["body at /old (recorded [1,2], now absent)"]),
    ({"a": 1, "new": {}}, {"a": 1}, 1, ["body at /new (recorded absent, now {})"]),
    ({"a": 1}, {"a": 1, "old": []}, 1, ["body at /old (recorded [], now absent)"]),
    # A list counts the values inside its items: two in the object, one beside it.
    ({"a": 1}, {"a": 1, "old": [{"x": 1, "y": 2}, 3]}, 3, ['body at /old (recorded [{"x":1,"y":2},3], now absent)']),
    # An object replaced by a scalar, either way: as many values as the larger side holds.
    ({"q": {"x": 1, "y": 2}}, {"q": 7}, 2, ['body at /q (recorded 7, now {"x":1,"y":2})']),
    ({"q": 7}, {"q": [1, 2, 3]}, 3, ["body at /q (recorded [1,2,3], now 7)"]),
    # Lists of different lengths: item by item.
    ({"l": [1, 2]}, {"l": [1, 2, 3]}, 1, ["body at /l/2 (recorded 3, now absent)"]),
    ({"l": [1, 2, 3, 4]}, {"l": [1, 9]}, 3, ["body at /l/1 (recorded 9, now 2)", "body at /l/2 (recorded absent, now 3)",
                                             "body at /l/3 (recorded absent, now 4)"]),
    # Different kinds of container are one difference, at their place.
    ({"a": [1]}, {"a": {"0": 1}}, 1, ['body at /a (recorded {"0":1}, now [1])']),
    ({"0": 1}, [1], 1, ['body at / (recorded [1], now {"0":1})']),
    ([1], {"0": 1}, 1, ['body at / (recorded {"0":1}, now [1])']),
    # true is not 1, nor 1.0 1: bodies differ as their JSON text does.
    ({"n": True}, {"n": 1}, 1, ["body at /n (recorded 1, now true)"]),
    ({"n": 1.0}, {"n": 1}, 1, ["body at /n (recorded 1, now 1.0)"]),
    ({"n": "7"}, {"n": 7}, 1, ['body at /n (recorded 7, now "7")']),
    # Members in order of their names, at escaped pointers.
    ({"b/c": 1, "a~": 1}, {"b/c": 2, "a~": 2}, 2, ["body at /a~0 (recorded 2, now 1)", "body at /b~1c (recorded 2, now 1)"]),
])
def test_json_bodies_differ_value_by_value(now, recorded, weight, shown):
    assert body_differences(canonical_body(j(now)), canonical_body(j(recorded))) == (weight, shown)


NOT_JSON_WEIGHT = body_differences(b"x", b"y")[0]


@pytest.mark.parametrize(("now", "recorded", "shown"), [
    (b"abc", b"abcd", "body (not JSON: 4 bytes recorded, 3 bytes now)"),
    (b"", b'{"a":1}', "body (recorded JSON, now empty)"),
    (b"  ", b'{"a":1}', "body (recorded JSON, now empty)"),
    (b"{oops", b'{"a":1}', "body (recorded JSON, now not JSON)"),
    (b'{"a":1}', b"", "body (recorded empty, now JSON)"),
    (b'{"a":1}', b"<html>", "body (recorded not JSON, now JSON)"),
])
def test_a_body_that_is_not_json_is_one_difference_farther_than_any_json_one(now, recorded, shown):
    assert body_differences(now, recorded) == (NOT_JSON_WEIGHT, [shown])
    many = {str(i): i for i in range(1000)}
    assert NOT_JSON_WEIGHT > body_differences(j(many), j({}))[0] == 1000


# --------------------------------------------------------------------------- values too long to show whole

def test_short_values_are_shown_whole_up_to_the_limit():
    forty = "x" * 38  # 40 characters as JSON, with its quotes
    assert show_difference(forty, "y") == (f'"{forty}"', '"y"')
    assert show_difference("y", forty) == ('"y"', f'"{forty}"')
    assert show_difference(forty + "x", "y") == ('"' + forty + '…"', '"y"')  # cut inside its quotes
    # Two values of exactly the limit that differ late are still shown whole, not windowed.
    late_a, late_b = "x" * 37 + "a", "x" * 37 + "b"
    assert show_difference(late_a, late_b) == (f'"{late_a}"', f'"{late_b}"')


def test_a_value_on_one_side_only_is_shown_whole_up_to_the_limit():
    # Against an absent member there is no first difference to centre on: the start is shown.
    def shown(value):
        return body_differences(canonical_body(j({"v": value})), canonical_body(j({})))[1]

    thirty_eight, thirty_nine = "x" * 38, "x" * 39  # 40 and 41 characters with the quotes
    assert shown(thirty_eight) == [f'body at /v (recorded absent, now "{thirty_eight}")']
    assert shown(thirty_nine) == [f'body at /v (recorded absent, now "{"x" * 37}…")']
    forty, forty_one = [1] * 18 + [10], [1] * 20  # 40 and 41 characters as JSON
    assert shown(forty) == [f"body at /v (recorded absent, now {json.dumps(forty, separators=(',', ':'))})"]
    assert shown(forty_one) == ["body at /v (recorded absent, now [" + "1," * 19 + "…)"]


def test_long_values_are_shown_around_where_they_first_differ():
    before, after = "a" * 60, "z" * 60
    recorded, now = before + "OLD" + after, before + "NEW" + after
    # The window (38 characters inside the quotes) opens 12 characters before the first difference (at 60).
    shown = show_difference(recorded, now)
    assert shown == ('"…' + "a" * 12 + "OLD" + "z" * 23 + '…"', '"…' + "a" * 12 + "NEW" + "z" * 23 + '…"')
    # A difference near the start shows the start, with no leading ellipsis.
    assert show_difference("OLD" + after, "NEW" + after) == ('"OLD' + "z" * 35 + '…"', '"NEW' + "z" * 35 + '…"')
    # A difference near the end: no trailing ellipsis; both quotes stay.
    assert show_difference(before + "OLD", before + "NEW") == ('"…' + "a" * 12 + 'OLD"', '"…' + "a" * 12 + 'NEW"')
    # The documented example: a state that changed in its last words.
    state = "I was charged twice for my order last week and want a refund for the duplicate payment"
    assert show_difference(state, state.replace("duplicate", "duplicated")) == (
        '"…he duplicate payment"', '"…he duplicated payment"')
    # A window that ends exactly at the last character has no trailing ellipsis.
    tail = "z" * 25
    assert show_difference(before + "O" + tail, before + "N" + tail) == (
        '"…' + "a" * 12 + "O" + tail + '"', '"…' + "a" * 12 + "N" + tail + '"')


def test_a_long_value_other_than_a_string_is_cut_as_its_json():
    assert show_difference({"a": "x" * 50}, {"a": "x" * 49 + "y"})[1].startswith("…") is True


def test_a_value_that_only_grew_is_shown_where_it_grew():
    short, long = int("1" * 50), int("1" * 70)
    # They agree for all 50 digits of the shorter: the window opens 13 before its end.
    assert show_difference(short, long) == ("…" + "1" * 13, "…" + "1" * 33)


def test_an_absent_side_is_named_and_a_long_present_one_cut():
    long = {"text": "x" * 100}
    body = body_differences(j({"a": 1, "b": long}), j({"a": 1}))[1]
    assert body == ['body at /b (recorded absent, now {"text":"' + "x" * 30 + "…)"]


# --------------------------------------------------------------------------- summaries of unplayed requests

@pytest.mark.parametrize(("body", "summary"), [
    (b"", ""),
    (b"<html>", "<6 bytes, not JSON>"),
    (j({"state": "hi", "n": 1}), 'state="hi", n=1'),  # members in the order sent
    (j({"state": "s" * 100}), 'state="' + "s" * 37 + '…"'),  # each value cut to 40 characters, quotes kept
    (j({"state": "s" * 38}), 'state="' + "s" * 38 + '"'),  # 40 characters: shown whole
    (j([1, 2]), "[1,2]"),
    (j(["x" * 200]), '["' + "x" * 157 + "…"),  # anything else cut to 160
])
def test_an_unplayed_request_is_summarised_recognisably(body, summary):
    assert body_summary(body) == summary


def test_a_summary_of_many_members_stays_short():
    members = {f"member{i}": i for i in range(40)}
    summary = body_summary(j(members))
    assert len(summary) == 160 and summary.startswith("member0=0, member1=1, ") and summary.endswith("…")
    assert body_summary(j({"k" * 158: 1})) == "k" * 158 + "=1"  # 160 characters: shown whole
    assert body_summary(j({"k" * 159: 1})) == "k" * 159 + "…"


@pytest.mark.parametrize(("uri", "shown"), [
    ("http://laya.invalid/v1/systemone", "POST /v1/systemone"),
    ("http://laya.invalid/v1/systemone?model=tiny", "POST /v1/systemone?model=tiny"),
    ("http://laya.invalid", "POST /"),
])
def test_a_request_is_described_by_method_path_and_query(uri, shown):
    assert describe(Request("POST", uri, b"", {})) == shown


# --------------------------------------------------------------------------- bodies in every form vcrpy hands over

@pytest.mark.parametrize(("body", "expected"), [
    (None, b""),
    ("café", "café".encode()),
    (b"raw", b"raw"),
    (bytearray(b"raw"), b"raw"),
    (memoryview(b"raw"), b"raw"),
    (io.BytesIO(b"from a BytesIO"), b"from a BytesIO"),
    (io.BufferedReader(io.BytesIO(b"from a stream")), b"from a stream"),
    (iter([b"chunk ", "é", bytearray(b"!")]), "chunk é!".encode()),
    (12, b"12"),
])
def test_a_body_in_any_form_compares_as_its_bytes(body, expected):
    assert body_bytes(body) == expected

"""The direct reader gives replay exactly what the general way gives (parse, check, fresh copies), or nothing."""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_laya.cassettes import direct_reader, persist, replay, yaml_loader
from pytest_laya.cassettes.config import CassetteConfig
from pytest_laya.cassettes.head import head_of
from pytest_laya.intercept.request import Request
from tests.helpers.properties import example_count

ROOT = Path(__file__).resolve().parents[2]
CASSETTES = sorted(p for d in ("cassettes", "examples", "tests/data") for p in (ROOT / d).rglob("*.yaml"))


def _request(request):
    return request.method, request.uri, request.body, list(request.headers.items())


def general(text):
    """(head, requests, responses) as replay read every file before: parsed, checked, copied; else the error's type."""
    try:
        data = yaml_loader.load(text)
        persist._check_structure(Path("c.yaml"), data)
        requests, responses = persist.fresh_interactions(data, Request)
    except Exception as exc:  # noqa: BLE001 - compared by type
        return type(exc).__name__
    return head_of(data), [_request(r) for r in requests], responses


def direct(text):
    """(head, requests, responses) as `persist.read_direct` reads `text` from a file, or None."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "c.yaml"
        path.write_text(text, encoding="utf-8")
        found = persist._read_direct(path)
    return None if found is None else (found.head, [_request(r) for r in found.requests], found.responses)


def agrees(text):
    """Whether the direct read is nothing, or what the general way reads; and whether it read anything."""
    got = direct(text)
    return (got is None or got == general(text)), got is not None


def test_every_cassette_in_the_repository_is_read_as_the_general_way_reads_it():
    read = 0
    for path in CASSETTES:
        same, was_read = agrees(path.read_text(encoding="utf-8"))
        assert same, path
        read += was_read
    assert read >= 0.8 * len(CASSETTES)  # the kit's and vcrpy's own files are in the layout


_ASCII = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=120)
_TEXT = _ASCII | _ASCII | _ASCII | st.text(max_size=40) | st.sampled_from(
    ["", " ", "'", "''", "a: b", "#x", "x #y", "- x", "yes", "null", "1", "0x1F", "1:30", "2001-01-01", "--- x",
     "a\n\nb", "a\nb", "  lead", "trail  ", "x" * 200 + " " + "y" * 50, "*/*", "{}", "[]", "é", "\t", "\r\n",
     "x" * 90, " ".join(["word"] * 40), "a ''quoted'' word " * 8])
_NAMES = st.from_regex(r"[a-z][a-z0-9-]{0,15}", fullmatch=True) | st.sampled_from(["on", "no", "null", "1", "X-Id", "a.b"])
_HEADERS = st.dictionaries(_NAMES, st.lists(_ASCII | _TEXT, min_size=1, max_size=2), max_size=3)


def _cassette(bodies, request_headers, response_headers, method, uri, code, message, meta):
    """A cassette's data, each interaction's headers its own (shared ones are YAML anchors, another layout)."""
    return {"interactions": [
        {"request": {"body": request, "headers": copy.deepcopy(request_headers), "method": method, "uri": uri},
         "response": {"body": {"string": response}, "headers": copy.deepcopy(response_headers),
                      "status": {"code": code, "message": message}}}
        for request, response in bodies], "metadata": {"pytest_laya": meta}, "version": 1}


@settings(max_examples=example_count(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies=st.lists(st.tuples(_TEXT | st.none(), _TEXT), min_size=1, max_size=3),
       request_headers=_HEADERS, response_headers=_HEADERS,
       method=st.sampled_from(["POST"] * 6 + ["GET", "ON", "null", "P OST"]),
       uri=st.sampled_from(["http://laya.invalid/v1/systemone", "http://laya.invalid/v1/systemone?x=1", "", "yes",
                            "http://laya.invalid/" + "p" * 100]),
       code=st.sampled_from([200] * 4 + [404, 599, 600, 99]), message=st.sampled_from(["OK", "Not Found", ""]) | _TEXT | st.none(),
       meta=st.dictionaries(st.sampled_from(["format", "spec", "server", "note"]), _TEXT | st.integers() | st.none(),
                            max_size=3))
def test_any_cassette_vcrpy_writes_is_read_as_the_general_way_reads_it(bodies, request_headers, response_headers,
                                                                        method, uri, code, message, meta):
    from vcr.serializers import yamlserializer

    text = yamlserializer.serialize(_cassette(bodies, request_headers, response_headers, method, uri, code, message, meta))
    assert agrees(text)[0]


def test_a_cassette_in_the_layout_is_read_directly():
    from vcr.serializers import yamlserializer

    text = yamlserializer.serialize(_cassette(
        [("{" + '"state": "' + "word " * 40 + '"}', "it's " * 30), (None, "")], {"accept": ["*/*"]},
        {"content-type": ["application/json"], "content-length": ["12"]}, "POST", "http://laya.invalid/v1/systemone",
        200, "OK", {"format": 1, "spec": "target"}))
    assert "\n      word" in text and "''" in text  # folded over lines, a quote doubled
    same, read = agrees(text)
    assert same and read


_BASE = None


def _base():
    global _BASE
    if _BASE is None:
        from vcr.serializers import yamlserializer

        _BASE = yamlserializer.serialize(_cassette(
            [('{"state":"' + "a long state, " * 8 + '","n":1}', '{"answers": {"q": {"noul": 0.5}}, "it\'s": "' + "x " * 30 + '"}'),
             ("", "{}")],
            {"accept": ["*/*"], "content-type": ["application/json"]}, {"content-type": ["application/json"], "x-id": ["1"]},
            "POST", "http://laya.invalid/v1/systemone", 200, "OK", {"format": 1, "spec": "target", "recorded": "2026-12-07"}))
    return _BASE


@settings(max_examples=example_count(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(at=st.floats(0, 1), edit=st.sampled_from(["delete", "space", "newline", "quote", "colon", "hash", "dash", "tab", "x",
                                                 "dedent", "indent", "blank"]))
def test_a_cassette_changed_by_hand_is_read_as_the_general_way_reads_it_or_left_to_it(at, edit):
    text = _base()
    i = min(int(at * len(text)), len(text) - 1)
    line_start = text.rfind("\n", 0, i) + 1
    changed = {
        "delete": text[:i] + text[i + 1:],
        "space": text[:i] + " " + text[i:],
        "newline": text[:i] + "\n" + text[i:],
        "quote": text[:i] + "'" + text[i:],
        "colon": text[:i] + ": " + text[i:],
        "hash": text[:i] + " #" + text[i:],
        "dash": text[:line_start] + "---" + text[line_start:],
        "tab": text[:i] + "\t" + text[i:],
        "x": text[:i] + "x" + text[i + 1:],
        "dedent": text[:line_start] + text[line_start:].removeprefix("  "),
        "indent": text[:line_start] + "  " + text[line_start:],
        "blank": text[:line_start] + "\n" + text[line_start:],
    }[edit]
    assert agrees(changed)[0]


@pytest.mark.parametrize(("old", "new"), [
    ("    method: POST\n", "    method: 12\n"),
    ("    uri: http://laya.invalid/v1/systemone\n", "    uri: 1\n"),
    ("    body: ''\n", "    body: 12\n"),
    ("      string: '{}'\n", "      string: 12\n"),
    ("      message: OK\n", "      message: 404\n"),
    ("      - application/json\n", "      - 12\n"),
    ("      x-id:\n", "      " + "k" * 1100 + ":\n"),
    ("      x-id:\n", "      on:\n"),
    ("version: 1\n", "version: 1\ninteractions: []\n"),
    ("version: 1\n", "version: 2\n"),
    ("    format: 1\n", "    format: one\n"),
])
def test_a_field_of_another_type_than_the_layout_gives_is_left_to_the_general_way(old, new):
    assert old in _base()
    text = _base().replace(old, new, 1)
    assert direct(text) is None
    assert agrees(text)[0]


@pytest.mark.parametrize("text", [
    "interactions: []\nversion: 1\n",  # no interaction
    "version: 1\ninteractions: []\n",  # another order
    "---\ninteractions:\n",  # a document marker
])
def test_what_the_layout_does_not_cover_is_left_to_the_general_way(text):
    assert direct(text) is None


def test_replay_takes_a_direct_read_once_and_reads_the_file_again_for_another_reader(tmp_path):
    from vcr.serializers import yamlserializer

    path = tmp_path / "c.yaml"
    path.write_text(yamlserializer.serialize(_cassette([("{}", "{}")], {}, {}, "POST", "http://laya.invalid/v1/systemone",
                                                       200, "OK", {"format": 1})), encoding="utf-8")
    first = persist.read_direct(path)
    assert first is not None and persist.read_direct(path) is first  # kept for replay
    assert persist.take_direct(path) is first
    again = persist.take_direct(path)  # taken: the next reader gets requests of its own
    assert again is not None and again.requests[0] is not first.requests[0]
    loaded = replay._load(again.head, again.requests, again.responses, None, CassetteConfig())
    assert [r.body for r, _ in loaded.interactions] == [b"{}"]


def test_a_file_the_direct_reader_leaves_is_replayed_and_refused_as_before(tmp_path):
    text = _base().replace("      code: 200\n", "      code: '200'\n")  # a hand edit the general check names
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    assert direct(text) is None
    with pytest.raises(persist.CassetteError, match="response.status.code"):
        replay.open_replay(path, api_key=None, strict=True, record_hint="--laya-record")


def test_the_reader_needs_no_request_class_of_vcrpys():
    found = direct_reader.read(_base(), Request)
    assert found is not None and all(type(r) is Request for r in found.requests)

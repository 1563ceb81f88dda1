"""The reference server reads request bodies with orjson where it agrees with json, else json.

What a client sees must not depend on which parser ran: every body is accepted or refused
exactly as `json.loads` would, with the same values (an integer beyond 64 bits stays exact)
and the same error text.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_laya.wire import requests as validation
from pytest_laya.wire.problems import Problem
from pytest_laya.wire.requests import parse_json_object
from tests.helpers.properties import example_count

pytest.importorskip("orjson", reason="orjson comes with the reference extra: pip install -e '.[reference]'")


def _typed(value: Any) -> Any:
    """The value with every number tagged by its type, so 1 and 1.0 (and -0.0 and 0.0) differ."""
    if isinstance(value, dict):
        return {key: _typed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_typed(item) for item in value]
    if isinstance(value, float):
        return ("float", "nan" if math.isnan(value) else value.hex())
    return (type(value).__name__, value)


def _json_only(raw: bytes, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Any]:
    with monkeypatch.context() as patch:
        patch.setattr(validation, "orjson", None)
        return _outcome(raw)


def _outcome(raw: bytes) -> tuple[str, Any]:
    try:
        return "accepted", _typed(parse_json_object(raw))
    except Problem as problem:
        return "refused", (problem.code, problem.detail)


def test_the_fast_path_is_taken(monkeypatch):
    calls = []
    real = validation.orjson.loads
    monkeypatch.setattr(validation.orjson, "loads", lambda data: calls.append(data) or real(data))
    assert parse_json_object(b'{"state": "x", "n": 1}') == {"state": "x", "n": 1}
    assert calls, "orjson was not used for a plain UTF-8 body"


EDGE_CASES = [
    b'{"n": 123456789012345678901234567890}',      # beyond 64 bits: orjson would give a float
    b'{"n": 18446744073709551616}', b'{"n": -9223372036854775809}', b'{"n": 18446744073709551615}',
    b'{"id": "12345678901234567890123"}',          # a long digit run in a string
    b'{"n": 1e400}', b'{"n": -1e400}', b'{"n": 1.7976931348623157e309}',
    b'{"n": NaN}', b'{"n": Infinity}', b'{"n": -Infinity}',
    b'{"n": -0}', b'{"n": -0.0}', b'{"n": 5e-324}', b'{"n": 0.1e1}', b'{"n": 1E2}',
    b'{"a": 1, "a": 2}',
    b'{"s": "\\ud800"}', b'{"s": "\\udc00x"}', b'{"s": "\\ud83d\\ude00"}', b'{"s": "\\u0000"}',
    b'\xef\xbb\xbf{"s": "bom"}', '{"s": "utf-16"}'.encode("utf-16-le"), '{"s": "utf-16"}'.encode("utf-16"),
    b'{"s": "\xff"}', b'{"s": "\xed\xa0\x80"}',                  # invalid UTF-8, an encoded surrogate
    b'{"s": "\x01"}', b'[1,]', b'{"a": 1,}', b'{"a" 1}', b'', b' ', b'{} x', b'"just a string"', b'[]',
    b'{"deep": ' + b'[' * 1100 + b']' * 1100 + b'}', b'{"deep": ' + b'[' * 200 + b']' * 200 + b'}',
    b' \t\r\n{"ws": true} \n',
]


@pytest.mark.parametrize("raw", EDGE_CASES, ids=[repr(raw[:40]) for raw in EDGE_CASES])
def test_edge_cases_get_what_json_alone_gives(raw, monkeypatch):
    assert _outcome(raw) == _json_only(raw, monkeypatch)


def test_a_wide_integer_stays_exact():
    assert parse_json_object(b'{"n": 123456789012345678901234567890}')["n"] == 123456789012345678901234567890


_scalars = (st.none() | st.booleans() | st.integers() | st.integers(min_value=-2**70, max_value=2**70)
            | st.floats(allow_nan=False, allow_infinity=False) | st.text())
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                       max_leaves=30)


@settings(max_examples=example_count(300), deadline=None)
@given(body=st.dictionaries(st.text(), _values, max_size=5), ensure_ascii=st.booleans(), indent=st.sampled_from([None, 1]))
def test_any_json_object_reads_the_same_with_either_parser(body, ensure_ascii, indent):
    raw = json.dumps(body, ensure_ascii=ensure_ascii, indent=indent).encode()
    original = validation.orjson
    try:
        validation.orjson = None
        expected = _outcome(raw)
    finally:
        validation.orjson = original
    assert _outcome(raw) == expected


def test_a_servers_words_are_shown_with_control_characters_escaped():
    # A server's NUL or escape sequence never reaches a terminal raw, in any message that quotes it.
    from pytest_laya.wire.problems import printable, read_server_error

    assert read_server_error(500, "text/plain", b"boom\x00\x1b[31mred").detail == "boom\\x00\\x1b[31mred"
    assert read_server_error(422, "application/json", b'{"detail": "bad \\u0007 q"}').detail == "bad \\x07 q"
    assert printable("caf\u00e9 \u2014 ok") == "caf\u00e9 \u2014 ok"

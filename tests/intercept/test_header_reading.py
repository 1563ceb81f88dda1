"""How replay reads headers: a request's from httpx, a recorded response's from its cassette."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from pytest_laya.intercept.laya_route import _CaseInsensitive, _response_parts
from pytest_laya.intercept.request import Headers


@pytest.mark.parametrize("raw", [
    [(b"Content-Type", b"application/json"), (b"Accept", b"*/*")],
    [(b"X-Name", "café".encode()), (b"A", b"b")],  # utf-8: httpx reads the headers as utf-8
    [(b"X-Latin", b"\xff\xfe"), (b"B", b"c")],  # neither ascii nor utf-8: iso-8859-1
    [(b"a", b"1"), (b"A", b"2"), (b"X-A", b"3")],  # a repeated name, its values joined
], ids=["ascii", "utf-8", "latin-1", "repeated"])
def test_a_requests_headers_are_read_in_the_encoding_httpx_gives_them(raw):
    headers = httpx.Headers(raw)
    encoding = httpx.Headers(raw).encoding
    expected: dict[str, str] = {}
    for name, value in raw:
        key, text = name.decode(encoding).lower(), value.decode(encoding)
        expected[key] = text if key not in expected else f"{expected[key]}, {text}"
    read = Headers.of_httpx(headers)
    assert dict(read.items()) == expected
    assert read["CONTENT-TYPE" if "content-type" in expected else next(iter(expected))] is not None


@pytest.mark.parametrize(("recorded", "expected"), [
    ({"content-length": ["591"], "Content-Type": ["application/json"], "server-timing": ["a;dur=0", "b;dur=1"]},
     {"content-length": "591", "content-type": "application/json", "server-timing": "a;dur=0, b;dur=1"}),
    ({"A": "x", "a": ["y", "z"], b"B": [b"q"], 3: [4, None]},  # a hand-edited cassette's odd names and values
     {"a": "x, y, z", "b'b'": "b'q'", "3": "4, None"}),
    ({"Set-Cookie": ("a", "b")}, {"set-cookie": "a, b"}),
    ({}, {}),
    (None, {}),
], ids=["vcrpy", "odd", "tuple", "empty", "none"])
def test_a_recorded_responses_headers_are_lowered_and_answer_any_case(recorded: Any, expected: dict[str, str]):
    status, headers, body = _response_parts({"status": {"code": 200}, "headers": recorded, "body": {"string": b"{}"}})
    assert type(headers) is _CaseInsensitive and (status, body) == (200, b"{}")
    assert list(headers.items()) == list(expected.items())
    for name, value in expected.items():
        assert headers[name.upper()] == value and name.title() in headers

"""The header rules every part of the kit shares (pytest_laya.wire.headers)."""

from __future__ import annotations

import httpx
import pytest

from pytest_laya.wire.headers import answered_request_id, header_value, is_valid_request_id


@pytest.mark.parametrize("headers", [
    {"Retry-After": "3"},
    {"retry-after": "3"},
    {"RETRY-AFTER": "3", "Other": "x"},
    httpx.Headers({"Retry-After": "3"}),
])
def test_a_header_is_found_in_any_case_in_any_mapping(headers):
    assert header_value(headers, "Retry-After") == "3"
    assert header_value(headers, "retry-after") == "3"


def test_a_missing_header_is_none_and_a_recorded_list_comes_back_as_it_is():
    assert header_value({"Content-Type": "application/json"}, "content-encoding") is None
    assert header_value({"content-encoding": ["gzip", "deflate"]}, "Content-Encoding") == ["gzip", "deflate"]


def test_a_server_echoes_a_valid_request_id_and_makes_one_otherwise():
    assert answered_request_id("req-42") == "req-42"
    for supplied in (None, "", "has space", "x" * 129):
        made = answered_request_id(supplied)
        assert made != supplied and is_valid_request_id(made)

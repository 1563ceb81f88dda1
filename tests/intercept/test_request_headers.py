"""`intercept.request.Headers` reads as vcrpy's HeadersDict: any case, the first name's case kept."""

from __future__ import annotations

from pytest_laya.intercept.request import Headers


def test_items_give_each_header_once_in_the_case_it_was_first_set_with():
    headers = Headers([("Content-Type", "application/json"), ("x-request-id", ["a", "b"])])
    headers["content-type"] = "text/plain"
    assert list(headers.items()) == [("Content-Type", "text/plain"), ("x-request-id", "a")]
    assert ("Content-Type", "text/plain") in headers.items()
    assert len(headers.items()) == 2
    assert dict(headers) == {"Content-Type": "text/plain", "x-request-id": "a"}


def test_items_may_be_read_while_the_headers_change():
    headers = Headers([("a", "1"), ("b", "2")])
    for name, _ in headers.items():
        del headers[name]
    assert list(headers.items()) == []

"""The ids of one exchange, kept out of cassettes and given back on replay.

A server may echo the client's request id and trace id (``X-Request-Id``, ``traceparent``) in
its headers and inside its body. They change on every call, so a cassette stores fixed ones
(`without_request_ids`), and replay answers each request with its own (`echo_ids`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pytest_laya.cassettes.json_splice import KEEP, JsonPath, splice_body
from pytest_laya.cassettes.places import decision_part, is_name
from pytest_laya.cassettes.scrub import LEARNED_SECRET_MIN, RECORDED_REQUEST_ID, RECORDED_TRACEPARENT
from pytest_laya.wire.body import Body, keep_body
from pytest_laya.wire.headers import parse_traceparent

__all__ = ["echo_ids", "without_request_ids"]


def without_request_ids(response: dict[str, Any], request: Any) -> dict[str, Any]:
    """`response` with the ids of this exchange in its body replaced by the stored ones.

    A server may echo a request id and trace id inside the body as well as in the headers (a
    problem's ``request_id``, an ``instance`` such as ``/requests/<id>``): the client's own
    (``X-Request-Id``, ``traceparent`` of the request) or one it assigned (the response's). They
    change on every call, so re-recording an unchanged server would change the file; they are
    stored as `RECORDED_REQUEST_ID` and the recorded trace id instead. Only whole values are
    replaced: a JSON string equal to an id (a traceparent carrying the trace id becomes
    `RECORDED_TRACEPARENT`), a path segment of a problem's ``instance``, or a non-JSON body that
    is the id and nothing else; never a member name, a question id or an option name (`is_name`),
    never text that merely contains an id. Ids shorter than 8 characters are left alone (they
    could be any word). `response` is not modified: vcrpy still hands it to the caller.
    """
    body = response.get("body") if isinstance(response, dict) else None
    if not isinstance(body, dict) or body.get("string") is None:
        return response
    raw = body["string"]
    swaps = _id_swaps(request, response)
    if not swaps:
        return response
    view = Body.of(raw)
    data = view.raw
    if b"\\u" not in data and not any(old.encode("utf-8") in data for old in swaps):
        return response
    text = view.text
    if text is None:
        return response
    spliced = splice_body(view, _swapper(swaps))
    if spliced is None:
        swapped = swaps.get(text, text)
        spliced = view if swapped == text else Body(swapped.encode("utf-8"), text=swapped)
    if spliced.text == text:
        keep_body(view)  # parsed: scrubbing reads it next
        return response
    return {**response, "body": {**body, "string": keep_body(spliced)}}


def _id_swaps(request: Any, response: dict[str, Any]) -> dict[str, str]:
    """This exchange's request and trace ids (long enough to be ids), each with the stored one to put in its place."""
    request_headers = getattr(request, "headers", None) or {}  # vcrpy's are case-insensitive
    response_headers = {str(k).lower(): v for k, v in (response.get("headers") or {}).items()}

    def values(name: str) -> list[str]:
        found = [request_headers.get(name)] + [response_headers.get(name)]
        out: list[str] = []
        for value in found:
            out.extend(str(v).strip() for v in (value if isinstance(value, (list, tuple)) else [value]) if v)
        return out

    recorded_trace = RECORDED_TRACEPARENT.split("-")[1]
    swaps = {rid: RECORDED_REQUEST_ID for rid in values("x-request-id")
             if len(rid) >= LEARNED_SECRET_MIN and rid != RECORDED_REQUEST_ID}
    for value in values("traceparent"):
        trace = parse_traceparent(value)
        if trace and trace.trace_id != recorded_trace:
            swaps[trace.trace_id] = recorded_trace
    return swaps


def _swapper(swaps: dict[str, str]) -> Callable[[JsonPath, Any], Any]:
    """`splice`'s replacement of whole id values by the stored ones (see `without_request_ids`)."""

    def swap(path: JsonPath, value: Any) -> Any:
        if not isinstance(value, str) or is_name(path):
            return KEEP
        if value in swaps:
            return swaps[value]
        if decision_part(path) == ("instance",) and "/" in value:
            segments = value.split("/")
            if any(segment in swaps for segment in segments):
                return "/".join(swaps.get(segment, segment) for segment in segments)
        trace = parse_traceparent(value) if value.startswith("00-") else None
        if trace and trace.trace_id in swaps:
            return RECORDED_TRACEPARENT
        return KEEP

    return swap


def echo_ids(response: dict[str, Any], request: Any) -> dict[str, Any]:
    """The recorded response as this request gets it: its own X-Request-Id and trace id echoed."""
    request_id = request.headers.get("x-request-id")
    traceparent = request.headers.get("traceparent")
    if not request_id and not traceparent:  # nothing of the request's to echo: the recorded response itself
        return response
    headers = response.get("headers") or {}
    if not any(name.lower() in ("x-request-id", "traceparent") for name in headers):
        return response
    trace = parse_traceparent(str(traceparent or ""))
    if not request_id and not trace:
        return response
    echoed: dict[str, list[str]] = {}
    for name, values in headers.items():
        lower = name.lower()
        if lower == "x-request-id" and request_id:
            values = [str(request_id)]
        elif lower == "traceparent" and trace:
            mine = parse_traceparent(str(values[0])) if values else None
            span = mine.span_id if mine else RECORDED_TRACEPARENT.split("-")[2]
            values = [str(trace._replace(span_id=span))]
        echoed[name] = values
    return {**response, "headers": echoed}

"""What never reaches a cassette: secrets, and the values that change on every call.

Applied to recorded interactions, to loaded ones, and to each live request before matching, so
both sides of a comparison are scrubbed alike and a message built from them never shows a secret.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote, quote_plus, unquote, unquote_plus, urlsplit, urlunsplit

from pytest_laya.cassettes.matching import NOT_JSON, body_bytes, parse_json
from pytest_laya.wire.headers import parse_traceparent

__all__ = [
    "RECORDED_ORIGIN",
    "RECORDED_REQUEST_ID",
    "RECORDED_TRACEPARENT",
    "REDACTED",
    "REQUEST_HEADERS",
    "RESPONSE_HEADERS",
    "Scrubber",
]


#: Every stored request URL starts with this instead of the live scheme, host and port.
RECORDED_ORIGIN = "http://laya.invalid"


#: The stored value of every X-Request-Id (request and response).
RECORDED_REQUEST_ID = "recorded"


#: The stored value of every traceparent: a valid W3C trace context that never changes.
RECORDED_TRACEPARENT = "00-00000000000000000000000000000001-0000000000000001-01"


#: What replaces a secret.
REDACTED = "<redacted>"


#: Response headers kept in a cassette; everything else (Date, Server, Set-Cookie...) is dropped.
RESPONSE_HEADERS = frozenset({
    "content-type", "content-length", "retry-after", "server-timing", "x-request-id",
    "x-inference-time-ms", "www-authenticate", "traceparent", "allow",
})


#: Request headers kept in a cassette (Host, User-Agent, Accept-Encoding... are dropped).
REQUEST_HEADERS = frozenset({"content-type", "accept", "authorization", "x-request-id", "traceparent"})


LEARNED_SECRET_MIN = 8  # a credential read from an Authorization header, shorter ones are not scrubbed


_DUR = re.compile(r"(?i)(;\s*dur\s*=\s*)(\"[^\"]*\"|[^;,\s]*)")


class Scrubber:
    """Removes secrets and volatile values from requests and responses on their way into a cassette.

    It is applied to recorded interactions, to loaded ones, and to each live request before
    matching, so both sides of a comparison are scrubbed alike and an error message built from
    them never shows a secret.
    """

    def __init__(self, api_key: str | None, *, learn: bool) -> None:
        self._secrets: set[str] = set()
        self._learn = learn
        self._forms_of: tuple[frozenset[str], list[str]] = (frozenset(), [])
        if api_key:
            self._secrets.add(api_key)

    def _forms(self) -> list[str]:
        """Every spelling of every secret: raw, percent-encoded, JSON-escaped; longest first."""
        known = frozenset(self._secrets)
        if known != self._forms_of[0]:
            forms = {form for secret in known
                     for form in (secret, quote(secret, safe=""), quote_plus(secret), json.dumps(secret)[1:-1])}
            self._forms_of = (known, sorted((f for f in forms if f), key=len, reverse=True))
        return self._forms_of[1]

    def text(self, value: str) -> str:
        for form in self._forms():
            value = value.replace(form, REDACTED)
        return value

    def data(self, value: bytes) -> bytes:
        if not self._secrets:
            return value
        for form in self._forms():
            value = value.replace(form.encode("utf-8"), REDACTED.encode("utf-8"))
        parsed = parse_json(value)
        if parsed is not NOT_JSON and self._hidden_in(parsed):
            # Only escapes (``\u0073k-...``) still hide it: write the JSON again, scrubbed.
            value = json.dumps(self._json(parsed), ensure_ascii=False).encode("utf-8")
        return value

    def _hidden_in(self, value: Any) -> bool:
        if isinstance(value, str):
            return any(secret in value for secret in self._secrets)
        if isinstance(value, dict):
            return any(self._hidden_in(k) or self._hidden_in(v) for k, v in value.items())
        if isinstance(value, list):
            return any(self._hidden_in(v) for v in value)
        return False

    def _json(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(k): self._json(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._json(v) for v in value]
        return value

    def target(self, path: str, query: str) -> tuple[str, str]:
        """The path and query of a URL, scrubbed however the secret was percent-encoded."""
        path = self.text(path)
        if self._secrets and self._hidden_in(unquote(path)):
            path = quote(self.text(unquote(path)), safe="/")
        parts = []
        for part in query.split("&") if query else []:
            part = self.text(part)
            name, eq, value = part.partition("=")
            if self._secrets and (self._hidden_in(unquote_plus(name)) or self._hidden_in(unquote_plus(value))):
                part = quote_plus(self.text(unquote_plus(name))) + eq + quote_plus(self.text(unquote_plus(value)))
            parts.append(part)
        return path, "&".join(parts)

    def _redact_authorization(self, value: str) -> str:
        scheme, _, credentials = value.strip().partition(" ")
        credentials = credentials.strip()
        if self._learn and len(credentials) >= LEARNED_SECRET_MIN and credentials != REDACTED:
            self._secrets.add(credentials)
        return f"{scheme} {REDACTED}" if credentials else REDACTED

    def request(self, request: Any) -> Any:
        """vcrpy ``before_record_request``: `request` is already a copy."""
        items = [(str(name).lower(), ", ".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v))
                 for name, v in request.headers.items()]
        headers: dict[str, str] = {}
        for lower, value in items:  # first, so a credential is known before anything is scrubbed
            if lower == "authorization":
                headers[lower] = self._redact_authorization(value)
        for lower, value in items:
            if lower not in REQUEST_HEADERS or lower == "authorization":
                continue
            if lower == "x-request-id":
                value = RECORDED_REQUEST_ID
            elif lower == "traceparent":
                value = RECORDED_TRACEPARENT
            headers[lower] = self.text(value)
        request.headers = headers
        split = urlsplit(request.uri)
        path, query = self.target(split.path or "/", split.query)
        origin = urlsplit(RECORDED_ORIGIN)
        request.uri = urlunsplit((origin.scheme, origin.netloc, path, query, ""))
        request.body = self.data(body_bytes(request.body))
        return request

    def response(self, response: dict[str, Any]) -> dict[str, Any]:
        """vcrpy ``before_record_response``: `response` is already a copy."""
        body = response.get("body") or {}
        raw = body.get("string")
        if raw is not None:
            raw = self.data(body_bytes(raw))
            body["string"] = raw
            response["body"] = body
        status = response.get("status")
        if isinstance(status, dict) and isinstance(status.get("message"), str):
            status["message"] = self.text(status["message"])
        kept: dict[str, list[str]] = {}
        original = response.get("headers") or {}
        encoded = any(name.lower() == "content-encoding" for name in original)
        for name, values in original.items():
            lower = name.lower()
            if lower not in RESPONSE_HEADERS and not (lower == "content-encoding" and encoded):
                continue
            values = values if isinstance(values, list) else [values]
            cleaned = [self.text(str(v)) for v in values]
            if lower == "x-request-id":
                cleaned = [RECORDED_REQUEST_ID]
            elif lower == "traceparent":
                cleaned = [RECORDED_TRACEPARENT]
            elif lower == "x-inference-time-ms":
                cleaned = ["0"]
            elif lower == "server-timing":
                cleaned = [_DUR.sub(r"\g<1>0", v) for v in cleaned]
            elif lower == "content-length" and raw is not None:
                cleaned = [str(len(raw))]
            kept.setdefault(lower, []).extend(cleaned)
        response["headers"] = kept
        return response


def without_request_ids(response: dict[str, Any], request: Any) -> dict[str, Any]:
    """`response` with the ids of this exchange in its body replaced by the stored ones.

    A server may echo a request id and trace id inside the body as well as in the headers (a
    problem's ``request_id``, an ``instance`` such as ``/requests/<id>``): the client's own
    (``X-Request-Id``, ``traceparent`` of the request) or one it assigned (the response's). They
    change on every call, so re-recording an unchanged server would change the file; they are
    stored as `RECORDED_REQUEST_ID` and the recorded trace id instead. Ids shorter than 8
    characters are left alone (replacing them would rewrite unrelated text). `response` is not
    modified: vcrpy still hands it to the caller.
    """
    body = response.get("body") if isinstance(response, dict) else None
    raw = body.get("string") if isinstance(body, dict) else None
    if raw is None:
        return response
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
    if not swaps:
        return response
    data = body_bytes(raw)
    changed = data
    for old in sorted(swaps, key=len, reverse=True):
        changed = changed.replace(old.encode("utf-8"), swaps[old].encode("utf-8"))
    if changed == data:
        return response
    return {**response, "body": {**body, "string": changed}}


def echo_ids(response: dict[str, Any], request: Any) -> dict[str, Any]:
    """The recorded response as this request gets it: its own X-Request-Id and trace id echoed."""
    headers = response.get("headers") or {}
    if not any(name.lower() in ("x-request-id", "traceparent") for name in headers):
        return response
    request_id = request.headers.get("x-request-id")
    trace = parse_traceparent(str(request.headers.get("traceparent") or ""))
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

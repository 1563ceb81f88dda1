"""What never reaches a cassette: secrets, and the values that change on every call.

Applied to recorded interactions, to loaded ones, and to each live request before matching, so
both sides of a comparison are scrubbed alike and a message built from them never shows a secret.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any
from urllib.parse import quote, quote_plus, unquote, unquote_plus, urlsplit, urlunsplit

from pytest_laya.cassettes.config import CassetteConfig
from pytest_laya.cassettes.json_splice import KEEP, JsonPath, splice_body
from pytest_laya.cassettes.places import is_name, may_be_volatile, volatile_value
from pytest_laya.client.secret import revealed
from pytest_laya.wire.body import NOT_JSON, Body, body_bytes, body_of, set_body
from pytest_laya.wire.content_coding import BodyTooLarge, UndecodableBody, decode_body, recorded_coding
from pytest_laya.wire.pointer import escape as escape_pointer
from pytest_laya.wire.redaction import REDACTED

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



#: Response headers kept in a cassette; everything else (Date, Server, Set-Cookie...) is dropped.
RESPONSE_HEADERS = frozenset({
    "content-type", "content-length", "retry-after", "server-timing", "x-request-id",
    "x-inference-time-ms", "www-authenticate", "traceparent", "allow", "laya-spec",
})


#: Request headers kept in a cassette (Host, User-Agent, Accept-Encoding... are dropped).
REQUEST_HEADERS = frozenset({"content-type", "accept", "authorization", "x-request-id", "traceparent"})


LEARNED_SECRET_MIN = 8  # a credential read from an Authorization header, shorter ones are not scrubbed
# A secret this long is also replaced inside longer text (a problem's detail, a text body, a URL);
# a shorter one could be part of any word ("dev" in "device"), so only a whole value equal to it is.


_DUR = re.compile(r"(?i)(;\s*dur\s*=\s*)(\"[^\"]*\"|[^;,\s]*)")


#: The start of every stored request's URL.
_STORED_PREFIX = RECORDED_ORIGIN + "/"
#: The response headers a cassette stores with fixed values.
_STORED_VALUES = {"x-request-id": [RECORDED_REQUEST_ID], "traceparent": [RECORDED_TRACEPARENT],
                  "x-inference-time-ms": ["0"]}


def _zero_duration(match: re.Match[str]) -> str:
    """A Server-Timing ``dur`` as a cassette stores it: 0 (a function: a template is parsed per match)."""
    return match.group(1) + "0"


class Scrubber:
    """Removes secrets and volatile values from requests and responses on their way into a cassette.

    It is applied to recorded interactions, to loaded ones, and to each live request before
    matching, so both sides of a comparison are scrubbed alike and an error message built from
    them never shows a secret.
    """

    def __init__(self, api_key: Any, *, learn: bool, config: CassetteConfig | None = None) -> None:
        self._secrets: set[str] = set()
        self._learn = learn
        self._forms_of: tuple[frozenset[str], tuple[frozenset[str], list[str]]] = (frozenset(), (frozenset(), []))
        self.config = config or CassetteConfig()
        self._filtered_headers = {name.lower(): replacement for name, replacement in self.config.filter_headers}
        self._filtered_query = dict(self.config.filter_query_parameters)
        self._filtered_post = dict(self.config.filter_post_data_parameters)
        # What the filters put in place of a value. An interaction is scrubbed more than once (when
        # recorded, loaded, matched): a value already replaced is not a secret to learn, or the
        # project's own replacement would become <redacted> on the next pass.
        self._placed = {str(replacement) for _, replacement in (*self._filtered_headers.items(),
                                                                 *self._filtered_query.items(),
                                                                 *self._filtered_post.items())
                        if replacement is not None and not callable(replacement)}
        plain = revealed(api_key)
        if plain:
            self._secrets.add(plain)
        # No filter and no hook of the project's: while no secret is known either, scrubbing only
        # normalises, and what a cassette holds already (`_stored_request`, `_stored_response`)
        # comes out of it unchanged.
        self._normalises_only = not (self._filtered_headers or self._filtered_query or self._filtered_post
                                     or self.config.before_record_request or self.config.before_record_response)

    def keep_secret(self, value: str) -> None:
        """Scrub `value` from everything from now on (a filtered header, query or body value)."""
        if (isinstance(value, str) and len(value) >= LEARNED_SECRET_MIN and value != REDACTED
                and value not in self._placed):
            self._secrets.add(value)

    def _replacement(self, replacement: Any, key: str, value: Any, request: Any) -> Any:
        """vcrpy's rule: None drops the value, a callable computes it, anything else replaces it."""
        replaced = replacement(key, value, request) if callable(replacement) else replacement
        if replaced is not None:
            self._placed.add(str(replaced))
        return replaced

    def _forms(self) -> tuple[frozenset[str], list[str]]:
        """Every spelling of every secret (raw, percent-encoded, JSON-escaped): all of them, to
        compare whole values with, and those of the secrets long enough to be replaced inside
        longer text (`LEARNED_SECRET_MIN`), longest first."""
        known = frozenset(self._secrets)
        if known != self._forms_of[0]:
            def spellings(secret: str) -> set[str]:
                return {form for form in (secret, quote(secret, safe=""), quote_plus(secret), json.dumps(secret)[1:-1])
                        if form}
            whole = frozenset(form for secret in known for form in spellings(secret))
            inner = {form for secret in known if len(secret) >= LEARNED_SECRET_MIN for form in spellings(secret)}
            self._forms_of = (known, (whole, sorted(inner, key=len, reverse=True)))
        return self._forms_of[1]

    def text(self, value: str) -> str:
        """`value` scrubbed: `REDACTED` if it is a secret (in any spelling); a secret of
        `LEARNED_SECRET_MIN` characters or more replaced wherever it stands in it."""
        if not self._secrets:
            return value
        whole, inner = self._forms()
        if value in whole:
            return REDACTED
        for form in inner:
            if form in value:
                value = value.replace(form, REDACTED)
        return value

    def _hidden_in(self, value: str) -> bool:
        return self.text(value) != value

    def whole(self, value: str) -> str:
        """`value` as a cassette stores it: `REDACTED` as a whole if a secret stands in it (as
        `text` finds one), else unchanged. Never a part of a value: what is left around a
        secret is not kept, so no substring is rewritten and nothing hints at its length."""
        return REDACTED if self._secrets and self._hidden_in(value) else value

    def _json_secret(self, path: JsonPath, value: Any) -> Any:
        if not isinstance(value, str) or is_name(path):
            return KEEP
        scrubbed = self.whole(value)
        return KEEP if scrubbed == value else scrubbed

    def data(self, value: bytes, *, volatile: bool = False) -> bytes:
        """A body with its secrets replaced (see `body`)."""
        return self.body(Body.of(value), volatile=volatile).raw

    def body(self, view: Body, *, volatile: bool = False) -> Body:
        """A body with its secrets replaced (and, with `volatile`, its volatile places normalised:
        `normalise_volatile`, in the same pass): `view` itself when nothing changes. In a JSON
        body, only string values are looked at (never a member name, a question id or an option
        name: `is_name`), each as `text` does, and every other byte is kept; escapes hide nothing,
        as the values are compared decoded. Any other text is scrubbed as `text` does; other bytes
        lose the long secrets' spellings."""
        value = view.raw
        if not value:
            return view
        volatile = volatile and may_be_volatile(value)
        secrets = bool(self._secrets)
        if secrets:
            whole, inner = self._forms()
            secrets = b"\\u" in value or any(form.encode("utf-8") in value for form in whole)
        if not secrets and not volatile:
            return view
        text = view.text
        if text is None:
            hidden = secrets and any(form.encode("utf-8") in value for form in inner)
            return Body(REDACTED.encode("utf-8")) if hidden else view
        rule = self._json_secret if not volatile else volatile_value if not secrets else self._json_both
        spliced = splice_body(view, rule)
        if spliced is not None:
            return view if spliced.text == text else spliced
        scrubbed = self.whole(text) if secrets else text
        return view if scrubbed == text else Body(scrubbed.encode("utf-8"), text=scrubbed)

    def _json_both(self, path: JsonPath, value: Any) -> Any:
        normalised = volatile_value(path, value)
        scrubbed = self._json_secret(path, value if normalised is KEEP else normalised)
        return normalised if scrubbed is KEEP else scrubbed

    def target(self, path: str, query: str, request: Any = None) -> tuple[str, str]:
        """The path and query of a URL: filtered parameters dropped or replaced, and secrets
        scrubbed however they were percent-encoded (a short one only as a whole segment, name or value)."""
        path = self._path(path)
        if self._secrets and self._hidden_in(unquote(path)):
            path = quote(self._path(unquote(path)), safe="/")
        parts = []
        pairs = self._query_pairs(query)
        for name, eq, value in pairs:
            plain = unquote_plus(name)
            if plain in self._filtered_query:
                replaced = self._replacement(self._filtered_query[plain], plain, unquote_plus(value), request)
                if replaced is None:
                    continue
                value = quote_plus(str(replaced))
            name, value = self.whole(name), self.whole(value)
            if self._secrets and (self._hidden_in(unquote_plus(name)) or self._hidden_in(unquote_plus(value))):
                name, value = quote_plus(self.whole(unquote_plus(name))), quote_plus(self.whole(unquote_plus(value)))
            parts.append(name + eq + value)
        return path, "&".join(parts)

    def _path(self, path: str) -> str:
        scrubbed = "/".join(self.whole(segment) for segment in path.split("/"))
        # A secret with a "/" in it spans segments: the path is then the smallest whole value.
        return "/" + REDACTED if self._hidden_in(scrubbed) else scrubbed

    def shown_target(self, uri: str, headers: Any = None) -> str:
        """A request's path and query as a message may show them: filtered query parameters read
        ``<redacted>``, and every secret known here (the API key, the request's filtered header
        values and Authorization credential, from `headers`) is scrubbed in every spelling."""
        for name, value in (headers or {}).items():
            lower = str(name).lower()
            values = value if isinstance(value, (list, tuple)) else [value]
            for one in map(str, values):
                if lower == "authorization":
                    scheme, _, credentials = one.strip().partition(" ")
                    self.keep_secret(credentials.strip() or scheme)
                elif lower in self._filtered_headers:
                    self.keep_secret(one)
        split = urlsplit(uri)
        pairs = self._query_pairs(split.query)
        shown = [f"{name}={REDACTED}" if unquote_plus(name) in self._filtered_query else name + eq + value
                 for name, eq, value in pairs]
        path = self._path(split.path or "/")
        scrubbed = [(self.text(name), eq, self.text(value)) for name, eq, value in (part.partition("=") for part in shown)]
        if self._hidden_in(unquote(path)) or any(  # a secret still hides behind an escape
                self._hidden_in(unquote_plus(name)) or self._hidden_in(unquote_plus(value)) for name, _, value in scrubbed):
            path = self._path(unquote(path))
            scrubbed = [(self.text(unquote_plus(name)), eq, self.text(unquote_plus(value))) for name, eq, value in scrubbed]
        query = "&".join(name + eq + value for name, eq, value in scrubbed)
        return path + (f"?{query}" if query else "")

    def _query_pairs(self, query: str) -> list[tuple[str, str, str]]:
        """The query's parts as (name, "=", value), the filtered parameters' values learnt as secrets
        first, so that every spelling of them is scrubbed wherever it shows."""
        pairs = [part.partition("=") for part in query.split("&")] if query else []
        for name, _eq, value in pairs:
            if unquote_plus(name) in self._filtered_query:
                self.keep_secret(unquote_plus(value))
        return pairs

    def _redact_authorization(self, value: str) -> str:
        scheme, _, credentials = value.strip().partition(" ")
        credentials = credentials.strip()
        if self._learn:  # a value with no scheme is all credential
            self.keep_secret(credentials or scheme)
        return f"{scheme} {REDACTED}" if credentials else REDACTED

    def _post_data(self, view: Body, content_type: str, request: Any) -> Body:
        """`view` with the filtered form fields or JSON members (names, or JSON pointers) dropped or replaced."""
        if not self._filtered_post or not view.raw:
            return view
        if content_type.startswith("application/x-www-form-urlencoded"):
            kept = []
            for part in view.raw.decode("latin-1").split("&"):
                name, eq, value = part.partition("=")
                plain = unquote_plus(name)
                if plain in self._filtered_post:
                    self.keep_secret(unquote_plus(value))
                    replaced = self._replacement(self._filtered_post[plain], plain, unquote_plus(value), request)
                    if replaced is None:
                        continue
                    part = f"{name}={quote_plus(str(replaced))}"
                kept.append(part)
            return Body("&".join(kept).encode("latin-1"))
        if view.json is NOT_JSON or not isinstance(view.json, (dict, list)):
            return view
        parsed = copy.deepcopy(view.json)  # the view's value is shared: edit a copy
        changed = False
        for key, replacement in self._filtered_post.items():
            changed = self._filter_member(parsed, key, replacement, request) or changed
        if not changed:
            return view
        return Body(json.dumps(parsed, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))

    def _filter_member(self, document: Any, key: str, replacement: Any, request: Any) -> bool:
        """Drop or replace one member: a top-level name, or a JSON pointer (``/a/0/b``)."""
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in key[1:].split("/")] if key.startswith("/") else [key]
        parent = document
        for token in tokens[:-1]:
            if isinstance(parent, dict) and token in parent:
                parent = parent[token]
            elif isinstance(parent, list) and token.isdigit() and int(token) < len(parent):
                parent = parent[int(token)]
            else:
                return False
        last = tokens[-1]
        if isinstance(parent, dict) and last in parent:
            value = parent[last]
            if isinstance(value, str):
                self.keep_secret(value)
            replaced = self._replacement(replacement, escape_pointer(last) if key.startswith("/") else key, value, request)
            if replaced is None:
                del parent[last]
            else:
                parent[last] = replaced
            return True
        return False

    def _stored_request(self, request: Any) -> bool:
        """Whether `request` is as `request()` leaves it, when it only normalises: a cassette's own
        request (its origin, the kept headers in lower case with their stored ids, no credential,
        a body in bytes). The URL must also be one that splitting and joining again gives back
        whole: no fragment, no empty query, nothing `urlsplit` drops (tabs, line breaks)."""
        uri = request.uri
        if type(uri) is not str or not uri.startswith(_STORED_PREFIX) or "#" in uri or uri.endswith("?") \
                or not uri.isprintable() or type(request.body) is not bytes:
            return False
        for name, value in request.headers.items():
            if type(value) is not str or self._request_header(name, value) != value:
                return False
        return True

    def _request_header(self, lower: str, value: str) -> str | None:
        """A kept request header's value as a cassette stores it (stored ids fixed); None for one it
        does not keep here (Authorization is kept redacted, apart)."""
        if lower not in REQUEST_HEADERS or lower == "authorization":
            return None
        if lower == "x-request-id":
            value = RECORDED_REQUEST_ID
        elif lower == "traceparent":
            value = RECORDED_TRACEPARENT
        return self.whole(value)

    def request(self, request: Any) -> Any:
        """vcrpy ``before_record_request``: `request` is already a copy."""
        if self._normalises_only and not self._secrets and self._stored_request(request):
            return request
        items = [(str(name).lower(), ", ".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v))
                 for name, v in request.headers.items()]
        headers: dict[str, str] = {}
        for lower, value in items:  # first, so a credential is known before anything is scrubbed
            if lower == "authorization":
                headers[lower] = self._redact_authorization(value)
            if lower in self._filtered_headers:
                self.keep_secret(value)
        for lower, value in items:
            if lower in self._filtered_headers:
                replaced = self._replacement(self._filtered_headers[lower], lower, value, request)
                if replaced is not None:
                    headers[lower] = str(replaced)
                else:
                    headers.pop(lower, None)
                continue
            kept = self._request_header(lower, value)
            if kept is not None:
                headers[lower] = kept
        split = urlsplit(request.uri)
        view = self._post_data(body_of(request), headers.get("content-type", ""), request)
        path, query = self.target(split.path or "/", split.query, request)
        request.headers = headers
        origin = urlsplit(RECORDED_ORIGIN)
        request.uri = urlunsplit((origin.scheme, origin.netloc, path, query, ""))
        set_body(request, self.body(view))
        if self.config.before_record_request is not None:
            return self.config.before_record_request(request)
        return request

    def _stored_response(self, response: dict[str, Any]) -> bool:
        """Whether `response` is as `response()` leaves it, when it only normalises: a cassette's own
        response (kept headers only, in lower case, each a list of its values as stored; no content
        coding; a body in bytes with no volatile place in it)."""
        headers = response.get("headers")
        body = response.get("body")
        if type(headers) is not dict or (body is not None and type(body) is not dict):
            return False
        raw = body.get("string") if body is not None else None
        if raw is not None and (type(raw) is not bytes or may_be_volatile(raw)):
            return False
        for name, values in headers.items():  # each kept header already as `_response_header` writes it
            if name not in RESPONSE_HEADERS or self._response_header(name, values, raw) != values:
                return False
        return True

    def response(self, response: dict[str, Any]) -> dict[str, Any]:
        """vcrpy ``before_record_response``: `response` is already a copy."""
        if self._normalises_only and not self._secrets and self._stored_response(response):
            return response
        original = response.get("headers") or {}
        for name, values in original.items():
            if name.lower() in self._filtered_headers:
                for value in values if isinstance(values, list) else [values]:
                    self.keep_secret(str(value))
        original = decoded_for_cassette(response, original)
        body = response.get("body") or {}
        raw = body.get("string")
        if raw is not None:
            raw = self.body(Body.of(raw), volatile=True).raw
            body["string"] = raw
            response["body"] = body
        status = response.get("status")
        if isinstance(status, dict) and isinstance(status.get("message"), str):
            status["message"] = self.whole(status["message"])
        kept: dict[str, list[str]] = {}
        for name, values in original.items():
            lower = name.lower()
            if lower in self._filtered_headers:
                replaced = self._replacement(self._filtered_headers[lower], lower, values, None)
                if replaced is not None:
                    kept[lower] = [str(replaced)]
                continue
            if lower in RESPONSE_HEADERS:
                kept.setdefault(lower, []).extend(self._response_header(lower, values, raw))
        response["headers"] = kept
        if self.config.before_record_response is not None:
            hooked: dict[str, Any] = self.config.before_record_response(response)
            return hooked
        return response


    def _response_header(self, lower: str, values: Any, raw: bytes | None) -> list[str]:
        """A kept response header's values as a cassette stores them (volatile ones fixed)."""
        cleaned = [self.whole(str(v)) for v in (values if isinstance(values, list) else [values])]
        stored = _STORED_VALUES.get(lower)
        if stored is not None:
            return list(stored)
        if lower == "server-timing":
            return [_DUR.sub(_zero_duration, v) for v in cleaned]
        if lower == "content-length" and raw is not None:
            return [str(len(raw))]
        return cleaned


def decoded_for_cassette(response: dict[str, Any], headers: dict[str, Any]) -> dict[str, Any]:
    """Decode a recorded body (gzip, deflate) within the client's cap; the headers without the coding.

    A cassette stores what the client read, so replay needs no decoder; vcrpy's own decoding has
    no size bound, so a small compression bomb would grow to gigabytes while recording.
    """
    encoding = recorded_coding(headers)
    if not encoding:
        return headers
    from pytest_laya.cassettes.errors import CassetteError
    from pytest_laya.client.call import MAX_RESPONSE_BYTES

    body = response.get("body") or {}
    try:
        body["string"] = decode_body(body_bytes(body.get("string")), encoding, MAX_RESPONSE_BYTES)
    except BodyTooLarge:
        raise CassetteError(f"the response body decodes to more than {MAX_RESPONSE_BYTES} bytes "
                            f"(Content-Encoding: {encoding}); it was not recorded") from None
    except UndecodableBody as exc:
        raise CassetteError(f"the response body cannot be recorded: {exc}") from None
    response["body"] = body
    return {k: v for k, v in headers.items() if str(k).lower() != "content-encoding"}

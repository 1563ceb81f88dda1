"""Recorded served-Laya traffic: standard vcrpy YAML cassettes, one file per test.

This is the layer the pytest plugin builds its replay and record modes on; it imports neither
pytest nor vcrpy at import time (vcrpy patches many HTTP libraries when it loads, so it is
imported inside the functions that need it).

What differs from a plain `vcr.VCR`, and why (see docs/cassettes.md):

* **One authority for the mode.** `record=False` is vcrpy's ``none`` (nothing is ever sent to a
  server, nothing is ever written); `record=True` is ``all`` with the old cassette *not loaded*,
  so a refreshed cassette holds exactly what this run recorded. No keyword can change it.
* **Matching** on method, path, query and the canonical JSON body -- never on scheme, host or
  port (a cassette recorded against ``127.0.0.1:54321`` replays on any URL) and never on headers
  (``X-Request-Id``, ``traceparent``, ``Authorization`` and timings change on every call).
* **Secrets and noise are scrubbed when recording**: ``Authorization`` is redacted, the API key
  is replaced wherever it appears, response headers pass an allow-list, and volatile values are
  normalised so re-recording an unchanged server leaves the file byte-for-byte the same.
* **Replay keeps the client's echo check**: a recorded ``X-Request-Id`` comes back as the new
  request's id.
* **Clear misses** raised from inside the httpx transport, as `CassetteMissing`, `CassetteMiss`
  and `CassetteAlreadyPlayed` (plain exceptions, not `httpx.TransportError`, so the served
  client neither retries nor maps them); bad files as `CassetteError` naming the file.
* **Atomic, opt-in saving**: `CassetteHandle.discard()` (a failed test) keeps the old file; a
  save writes a temporary file in the same directory and `os.replace`s it.
* **Provenance** under vcrpy's own top-level ``metadata`` key, as ``metadata.pytest_laya``.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
import re
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import quote, quote_plus, unquote, unquote_plus, urlsplit, urlunsplit

if TYPE_CHECKING:  # pragma: no cover
    import vcr

__all__ = [
    "CassetteError",
    "CassetteMissing",
    "CassetteMiss",
    "CassetteAlreadyPlayed",
    "CassetteUnplayed",
    "CassetteHandle",
    "Unplayed",
    "laya_vcr",
    "use_cassette",
    "cassette_relpath",
    "canonical_body",
    "match_key",
    "RECORD_HINT",
    "RECORDED_ORIGIN",
    "RECORDED_REQUEST_ID",
    "RECORDED_TRACEPARENT",
    "REDACTED",
    "RESPONSE_HEADERS",
    "REQUEST_HEADERS",
]

#: What a miss tells the user to run; the plugin may pass its own wording to `laya_vcr`.
RECORD_HINT = "--laya-mode=record"
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
#: The version of the ``metadata.pytest_laya`` mapping.
PROVENANCE_FORMAT = 1
PROVENANCE_FIELDS = ("server", "identity", "spec", "laya_version")

_CASSETTE_SUFFIX = ".yaml"
_MATCH_ON = ("method", "path", "query", "laya_body")
_LEARNED_SECRET_MIN = 8  # a credential read from an Authorization header, shorter ones are not scrubbed
_SHOW_VALUE = 40
_SHOW_BODY = 160
_SHOW_DIFFS = 5
_MISSING: Any = object()
_DUR = re.compile(r"(?i)(;\s*dur\s*=\s*)(\"[^\"]*\"|[^;,\s]*)")
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.,=+\-\[\]]+")
_MAX_NAME = 120


# --------------------------------------------------------------------------- errors


class CassetteError(Exception):
    """A cassette that cannot be used; the base of every cassette error.

    Raised as such for an unreadable file (bad YAML, a refused YAML tag, a truncated cassette,
    no ``interactions``); `path` is the file. Not an `httpx.TransportError`: the served client
    lets it through untouched instead of retrying it or mapping it to a call error.
    """

    def __init__(self, message: str, *, path: str | os.PathLike[str] | None = None) -> None:
        super().__init__(message)
        self.path = None if path is None else Path(path)


class CassetteMissing(CassetteError):
    """Replay asked for a cassette file that does not exist."""


class CassetteMiss(CassetteError):
    """No recorded interaction matches the request; `differences` says how the closest differs."""

    def __init__(self, message: str, *, path: str | os.PathLike[str] | None, request: str,
                 closest: int | None, differences: list[str]) -> None:
        super().__init__(message, path=path)
        self.request = request
        self.closest = closest
        self.differences = differences


class CassetteAlreadyPlayed(CassetteError):
    """The request matches only interactions that this test already played."""

    def __init__(self, message: str, *, path: str | os.PathLike[str] | None, request: str) -> None:
        super().__init__(message, path=path)
        self.request = request


class CassetteUnplayed(CassetteError):
    """Strict replay ended with recorded interactions the test never asked for."""

    def __init__(self, message: str, *, path: str | os.PathLike[str] | None, unplayed: list["Unplayed"]) -> None:
        super().__init__(message, path=path)
        self.unplayed = unplayed


class Unplayed(NamedTuple):
    """A recorded interaction no request matched: method, path and a short body summary."""

    method: str
    path: str
    body: str

    def __str__(self) -> str:
        return f"{self.method} {self.path}" + (f" {self.body}" if self.body else "")


# --------------------------------------------------------------------------- bodies and diffs


def _body_bytes(body: Any) -> bytes:
    if body is None:
        return b""
    if isinstance(body, str):
        return body.encode("utf-8")
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    if hasattr(body, "getvalue"):  # BytesIO bodies of old cassettes
        return bytes(body.getvalue())
    if hasattr(body, "read"):
        return bytes(body.read())
    try:  # iterators of chunks
        chunks = list(body)
    except TypeError:
        return str(body).encode("utf-8")
    return b"".join(c.encode("utf-8") if isinstance(c, str) else bytes(c) for c in chunks)


_NOT_JSON: Any = object()


def _parse_json(raw: bytes) -> Any:
    if not raw.strip():
        return _NOT_JSON
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return _NOT_JSON


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_body(body: Any) -> bytes:
    """The form bodies are compared in: canonical JSON when `body` parses as JSON, else the bytes.

    Canonical JSON is ``json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)``,
    so key order, whitespace and ``\\u`` escapes never make two equal requests differ.
    """
    raw = _body_bytes(body)
    parsed = _parse_json(raw)
    return raw if parsed is _NOT_JSON else _canonical(parsed).encode("utf-8")


def _request_body(request: Any) -> bytes:
    # Cached per request object: a miss compares one request with every recorded one.
    cached = getattr(request, "_laya_canonical", None)
    if cached is None:
        cached = canonical_body(request.body)
        try:
            request._laya_canonical = cached
        except AttributeError:  # pragma: no cover - a request type without a __dict__
            pass
    return cached


def _laya_body_matcher(r1: Any, r2: Any) -> None:
    """vcrpy matcher: canonical JSON bodies (or bytes) must be equal."""
    if _request_body(r1) != _request_body(r2):
        raise AssertionError("the bodies differ (canonical JSON)")


_laya_body_matcher.__name__ = "laya_body"


def _pointer(parent: str, key: Any) -> str:
    return parent + "/" + str(key).replace("~", "~0").replace("/", "~1")


def _leaves(value: Any) -> int:
    if isinstance(value, dict):
        return max(1, sum(_leaves(v) for v in value.values()))
    if isinstance(value, list):
        return max(1, sum(_leaves(v) for v in value))
    return 1


def _json_diff(now: Any, recorded: Any, where: str, out: list[tuple[str, Any, Any]]) -> None:
    if isinstance(now, dict) and isinstance(recorded, dict):
        for key in sorted(set(now) | set(recorded), key=str):
            _json_diff(now.get(key, _MISSING), recorded.get(key, _MISSING), _pointer(where, key), out)
    elif isinstance(now, list) and isinstance(recorded, list):
        for index in range(max(len(now), len(recorded))):
            _json_diff(now[index] if index < len(now) else _MISSING,
                       recorded[index] if index < len(recorded) else _MISSING, _pointer(where, index), out)
    elif now is _MISSING or recorded is _MISSING or _canonical(now) != _canonical(recorded):
        out.append((where, recorded, now))


def _show(value: Any, limit: int = _SHOW_VALUE) -> str:
    if value is _MISSING:
        return "absent"
    text = _canonical(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _body_differences(now: bytes, recorded: bytes) -> tuple[int, list[str]]:
    """(how many leaves differ, readable differences) between two bodies."""
    if now == recorded:
        return 0, []
    parsed_now, parsed_recorded = _parse_json(now), _parse_json(recorded)
    if parsed_now is _NOT_JSON or parsed_recorded is _NOT_JSON:
        if parsed_now is _NOT_JSON and parsed_recorded is _NOT_JSON:
            what = f"body (not JSON: {len(recorded)} bytes recorded, {len(now)} bytes now)"
        elif parsed_now is _NOT_JSON:
            what = f"body (recorded JSON, now {'empty' if not now.strip() else 'not JSON'})"
        else:
            what = f"body (recorded {'empty' if not recorded.strip() else 'not JSON'}, now JSON)"
        return 1_000_000, [what]
    found: list[tuple[str, Any, Any]] = []
    _json_diff(parsed_now, parsed_recorded, "", found)
    weight = sum(max(_leaves(r) if r is not _MISSING else 1, _leaves(n) if n is not _MISSING else 1)
                 for _, r, n in found)
    shown = [f"body at {where or '/'} (recorded {_show(rec)}, now {_show(cur)})" for where, rec, cur in found]
    return weight, shown


def _summary(body: bytes) -> str:
    """A short, recognisable body: top-level members in the order sent, each value truncated."""
    if not body:
        return ""
    parsed = _parse_json(body)
    if parsed is _NOT_JSON:
        return f"<{len(body)} bytes, not JSON>"
    if isinstance(parsed, dict):
        text = ", ".join(f"{key}={_show(value)}" for key, value in parsed.items())
        return text if len(text) <= _SHOW_BODY else text[: _SHOW_BODY - 1] + "…"
    return _show(parsed, _SHOW_BODY)


def match_key(request: Any) -> tuple[Any, ...]:
    """What matching compares (vcrpy's method, path and query matchers, then the canonical body);
    never headers. Replay and verify both pair requests by it."""
    return (request.method, request.path, tuple(request.query), _request_body(request))


def _describe(request: Any) -> str:
    split = urlsplit(request.uri)
    return f"{request.method} {split.path or '/'}" + (f"?{split.query}" if split.query else "")


# --------------------------------------------------------------------------- scrubbing


class _Scrubber:
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
        parsed = _parse_json(value)
        if parsed is not _NOT_JSON and self._hidden_in(parsed):
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
        if self._learn and len(credentials) >= _LEARNED_SECRET_MIN and credentials != REDACTED:
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
        request.body = self.data(_body_bytes(request.body))
        return request

    def response(self, response: dict[str, Any]) -> dict[str, Any]:
        """vcrpy ``before_record_response``: `response` is already a copy."""
        body = response.get("body") or {}
        raw = body.get("string")
        if raw is not None:
            raw = self.data(_body_bytes(raw))
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


def _without_request_ids(response: dict[str, Any], request: Any) -> dict[str, Any]:
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
             if len(rid) >= _LEARNED_SECRET_MIN and rid != RECORDED_REQUEST_ID}
    for value in values("traceparent"):
        trace = _TRACEPARENT.fullmatch(value)
        if trace and trace.group(2) != recorded_trace:
            swaps[trace.group(2)] = recorded_trace
    if not swaps:
        return response
    data = _body_bytes(raw)
    changed = data
    for old in sorted(swaps, key=len, reverse=True):
        changed = changed.replace(old.encode("utf-8"), swaps[old].encode("utf-8"))
    if changed == data:
        return response
    return {**response, "body": {**body, "string": changed}}


def _echo(response: dict[str, Any], request: Any) -> dict[str, Any]:
    """The recorded response as this request gets it: its own X-Request-Id and trace id echoed."""
    headers = response.get("headers") or {}
    if not any(name.lower() in ("x-request-id", "traceparent") for name in headers):
        return response
    request_id = request.headers.get("x-request-id")
    trace = _TRACEPARENT.fullmatch(str(request.headers.get("traceparent") or "").strip())
    echoed: dict[str, list[str]] = {}
    for name, values in headers.items():
        lower = name.lower()
        if lower == "x-request-id" and request_id:
            values = [str(request_id)]
        elif lower == "traceparent" and trace:
            mine = _TRACEPARENT.fullmatch(str(values[0]).strip()) if values else None
            span = mine.group(3) if mine else RECORDED_TRACEPARENT.split("-")[2]
            values = [f"{trace.group(1)}-{trace.group(2)}-{span}-{trace.group(4)}"]
        echoed[name] = values
    return {**response, "headers": echoed}


# --------------------------------------------------------------------------- files


def _today() -> str:
    import datetime

    return datetime.datetime.now(datetime.timezone.utc).date().isoformat()


def _atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that a reader sees the old file or the new one, never a part."""
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.stat().st_mode & 0o777
    except OSError:
        mode = 0o644
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise CassetteError(f"could not write cassette {path}: {exc}; the previous file is unchanged",
                                path=path) from exc
        raise
    if hasattr(os, "O_DIRECTORY"):  # make the rename itself durable; best effort
        with contextlib.suppress(OSError):
            dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)


def _yaml_problem(path: Path, exc: Exception) -> CassetteError:
    import yaml

    mark = getattr(exc, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc)
    if isinstance(exc, yaml.constructor.ConstructorError):
        tag = re.search(r"tag '([^']+)'", str(problem))
        shown = tag.group(1).replace("tag:yaml.org,2002:", "!!") if tag else "an unknown tag"
        return CassetteError(
            f"cassette {path} uses the YAML tag {shown}{where}, which a cassette may not contain: "
            "it was loaded with a safe loader, so nothing in it ran. Delete the file and record it again.",
            path=path)
    return CassetteError(f"cassette {path} is not valid YAML: {problem}{where}; is it truncated? "
                         "Record it again.", path=path)


def _check_structure(path: Path, data: Any) -> None:
    def bad(what: str) -> CassetteError:
        return CassetteError(f"cassette {path} {what}", path=path)

    if not isinstance(data, dict):
        raise bad(f"is not a vcrpy cassette: the top level is {type(data).__name__}, expected a mapping "
                  "with 'interactions' and 'version'")
    if "interactions" not in data:
        raise bad("has no 'interactions' list: it is truncated or not a vcrpy cassette")
    if not isinstance(data["interactions"], list):
        raise bad(f"has 'interactions' of type {type(data['interactions']).__name__}, expected a list")
    if "version" not in data:
        # vcrpy writes `version` after `interactions` (keys are sorted), so a cut file lacks it.
        raise bad("has no 'version' key: the file is truncated (vcrpy writes it last)")
    if data["version"] != 1:
        raise bad(f"has format version {data['version']!r}; this vcrpy cassette format is 1")
    for number, interaction in enumerate(data["interactions"], start=1):
        request = interaction.get("request") if isinstance(interaction, dict) else None
        response = interaction.get("response") if isinstance(interaction, dict) else None
        problems = []
        if not isinstance(request, dict):
            problems.append("request")
        else:
            problems += [f"request.{k}" for k in ("method", "uri") if not isinstance(request.get(k), str)]
            problems += [f"request.{k}" for k in ("body", "headers") if k not in request]
            if "headers" in request and not isinstance(request["headers"], dict):
                problems.append("request.headers (a mapping)")
        if not isinstance(response, dict):
            problems.append("response")
        else:
            status = response.get("status")
            if not isinstance(status, dict) or not isinstance(status.get("code"), int):
                problems.append("response.status.code")
            if not isinstance(response.get("headers"), dict):
                problems.append("response.headers")
            body = response.get("body")
            if not isinstance(body, dict) or "string" not in body:
                problems.append("response.body.string")
        if problems:
            raise bad(f"interaction {number} lacks {', '.join(problems)}: the file is truncated or was edited")
    metadata = data.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise bad("has 'metadata' that is not a mapping")
    if isinstance(metadata, dict) and metadata.get("pytest_laya") is not None and not isinstance(metadata["pytest_laya"], dict):
        raise bad("has 'metadata.pytest_laya' that is not a mapping")


def _read_cassette(path: Path) -> dict[str, Any] | None:
    """The cassette at `path` parsed with vcrpy's safe loader and checked; None if there is none."""
    from vcr.serializers import yamlserializer
    import yaml

    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise CassetteError(f"cassette {path} is a directory, not a file", path=path) from None
    except OSError as exc:
        raise CassetteError(f"cassette {path} cannot be read: {exc}", path=path) from exc
    if not raw.strip():
        raise CassetteError(f"cassette {path} is empty: it was cut off while being written; record it again",
                            path=path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CassetteError(f"cassette {path} is not UTF-8 text ({exc})", path=path) from None
    try:
        data = yamlserializer.deserialize(text)
    except yaml.YAMLError as exc:
        raise _yaml_problem(path, exc) from None
    _check_structure(path, data)
    return data


class _Parsed:
    """A serializer that hands vcrpy data already parsed (so a file is parsed once)."""

    def __init__(self, data: Any) -> None:
        self._data = data

    def deserialize(self, _text: str) -> Any:
        return self._data

    @staticmethod
    def serialize(data: Any) -> Any:
        return data


def _render(requests: list[Any], responses: list[Any], metadata: Mapping[str, Any] | None) -> bytes:
    """The YAML text of a cassette, as plain vcrpy writes it, plus `metadata`."""
    from vcr import serialize
    from vcr.serializers import yamlserializer

    data = serialize.serialize({"requests": copy.deepcopy(requests), "responses": copy.deepcopy(responses)},
                               _Parsed)
    data = dict(data)
    if metadata:
        data["metadata"] = copy.deepcopy(dict(metadata))
    return yamlserializer.serialize(data).encode("utf-8")


class _Persister:
    """vcrpy persister: safe, checked loading; atomic writes; deferred when a handle decides.

    In record mode the old cassette is never loaded (it is replaced as a whole); in replay
    nothing is ever written.
    """

    def __init__(self, *, record: bool, deferred: bool) -> None:
        self.record = record
        self.deferred = deferred
        self.loaded: dict[str, Any] | None = None

    def load_cassette(self, cassette_path: Any, serializer: Any) -> tuple[list[Any], list[Any]]:
        from vcr import serialize
        from vcr.persisters.filesystem import CassetteNotFoundError

        path = Path(cassette_path)
        if self.record:
            raise CassetteNotFoundError()
        data = _read_cassette(path)
        if data is None:
            raise CassetteNotFoundError()
        try:
            requests, responses, *_ = serialize.deserialize("", _Parsed(data))
        except (TypeError, KeyError, ValueError, AttributeError) as exc:
            raise CassetteError(f"cassette {path} cannot be read as a vcrpy cassette: {exc}", path=path) from None
        self.loaded = data
        return requests, responses

    def save_cassette(self, cassette_path: Any, cassette_dict: Mapping[str, Any], serializer: Any) -> None:
        if not self.record or self.deferred:
            return  # replay never writes; a handle writes when the test passed
        text = _render(list(cassette_dict["requests"]), list(cassette_dict["responses"]),
                       cassette_dict.get("metadata"))
        _atomic_write(Path(cassette_path), text)


# --------------------------------------------------------------------------- vcrpy classes


@functools.lru_cache(maxsize=None)
def _classes() -> tuple[type, type]:
    """(LayaVCR, LayaCassette), built on first use so that importing this module loads no vcrpy."""
    import vcr
    from vcr import matchers
    from vcr.cassette import Cassette
    from vcr.record_mode import RecordMode

    class LayaCassette(Cassette):
        """A vcrpy cassette whose replay raises pytest-laya's misses and echoes X-Request-Id."""

        record_hint = RECORD_HINT

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._laya_lock = threading.RLock()
            # Match key -> indices of the interactions with that key, in recorded order; built on
            # the first lookup, so replay is a dict lookup whatever the cassette's length.
            self._laya_index: dict[tuple[Any, ...], list[int]] = {}
            self._laya_indexed = 0
            # vcrpy asks can_play_response_for and then play_response with the same request
            # object: scrub (deep copy + filter) it once, not once per call.
            self._laya_last: tuple[Any, Any] | None = None

        @property
        def _laya_path(self) -> Path:
            return Path(getattr(self, "_path", ""))

        def _laya_filtered(self, request: Any) -> Any:
            last = self._laya_last
            if last is not None and last[0] is request:
                return last[1]
            filtered = self.filter_request(request)
            self._laya_last = (request, filtered)
            return filtered

        def _laya_matches(self, filtered: Any) -> list[int]:
            """Indices of the interactions `filtered` matches: the rules of `_MATCH_ON`, as a lookup."""
            data = self.data
            if self._laya_indexed != len(data):
                if self._laya_indexed > len(data):  # pragma: no cover - vcrpy never shrinks data
                    self._laya_index, self._laya_indexed = {}, 0
                for i in range(self._laya_indexed, len(data)):
                    self._laya_index.setdefault(match_key(data[i][0]), []).append(i)
                self._laya_indexed = len(data)
            return self._laya_index.get(match_key(filtered), [])

        def can_play_response_for(self, request: Any) -> bool:
            if self.record_mode != RecordMode.NONE:
                return super().can_play_response_for(request)
            with self._laya_lock:
                filtered = self._laya_filtered(request)
                if not self.rewound:
                    raise CassetteMissing(
                        f"no cassette for this test at {self._laya_path} (record it with {self.record_hint}); "
                        f"the test asked for {_describe(filtered)}", path=self._laya_path)
                matches = self._laya_matches(filtered)
                if not matches:
                    raise self._laya_miss(filtered, _describe(filtered))
                if all(self.play_counts[i] for i in matches):
                    raise self._laya_already_played(_describe(filtered), matches)
                return True

        def play_response(self, request: Any) -> Any:
            if self.record_mode != RecordMode.NONE:
                return super().play_response(request)
            with self._laya_lock:
                filtered = self._laya_filtered(request)
                self._laya_last = None
                matches = self._laya_matches(filtered)
                for index in matches:
                    if not self.play_counts[index]:
                        break
                else:
                    # Another thread played the last match between the check and the play.
                    if not matches:
                        raise self._laya_miss(filtered, _describe(filtered))
                    raise self._laya_already_played(_describe(filtered), matches)
                stored, response = self.data[index]
                if index < getattr(self, "_loaded_count", len(self.data)):
                    # What vcrpy's own play_response keeps for drop_unused_requests.
                    self._played_interactions.append((stored, response))
                self.play_counts[index] += 1
            return _echo(response, request)

        def append(self, request: Any, response: Any) -> None:
            with self._laya_lock:
                super().append(request, _without_request_ids(response, request))

        def _laya_already_played(self, described: str, matches: list[int]) -> CassetteAlreadyPlayed:
            which = ", ".join(str(i + 1) for i in matches)
            times = "once" if len(matches) == 1 else f"{len(matches)} times"
            return CassetteAlreadyPlayed(
                f"{described}: the matching interaction was already played (recorded {times}: interaction "
                f"{which} of {len(self.data)} in {self._laya_path}); record the test again with "
                f"{self.record_hint} if it makes this request twice", path=self._laya_path, request=described)

        def _laya_miss(self, filtered: Any, described: str) -> CassetteMiss:
            where = f"in cassette {self._laya_path}"
            if not self.data:
                return CassetteMiss(
                    f"no recorded interaction matches {described}; the cassette {self._laya_path} has no "
                    f"interactions (the test made no request when it was recorded); record it again with "
                    f"{self.record_hint}", path=self._laya_path, request=described, closest=None, differences=[])
            now = _request_body(filtered)
            best: tuple[Any, ...] | None = None
            for index, (stored, _) in enumerate(self.data):
                differs: list[str] = []
                if filtered.method != stored.method:
                    differs.append(f"method (recorded {stored.method}, now {filtered.method})")
                try:
                    matchers.path(filtered, stored)
                except AssertionError:
                    differs.append(f"path (recorded {urlsplit(stored.uri).path}, now {urlsplit(filtered.uri).path})")
                try:
                    matchers.query(filtered, stored)
                except AssertionError:
                    differs.append(f"query (recorded {urlsplit(stored.uri).query!r}, now {urlsplit(filtered.uri).query!r})")
                weight, body_diffs = _body_differences(now, _request_body(stored))
                key = (len(differs), weight, index)
                if best is None or key < best[0]:
                    best = (key, index, stored, differs + body_diffs)
            assert best is not None
            _, index, stored, differences = best
            shown = differences[:_SHOW_DIFFS]
            more = f"; and {len(differences) - _SHOW_DIFFS} more" if len(differences) > _SHOW_DIFFS else ""
            message = (
                f"no recorded interaction matches {described} {where}; closest recorded request: "
                f"{_describe(stored)} (interaction {index + 1} of {len(self.data)}) differs in: "
                + "; ".join(shown) + more
                + f". If the request changed on purpose, record the test again with {self.record_hint}."
            )
            return CassetteMiss(message, path=self._laya_path, request=described, closest=index,
                                differences=differences)

        def laya_unplayed(self) -> list[Unplayed]:
            with self._laya_lock:
                return [Unplayed(r.method, urlsplit(r.uri).path or "/", _summary(_body_bytes(r.body)))
                        for i, (r, _) in enumerate(self.data) if not self.play_counts[i]]

    class LayaVCR(vcr.VCR):
        """A `vcr.VCR` configured for served Laya; its record mode cannot be overridden."""

        def __init__(self, *, record: bool, cassette_dir: str | os.PathLike[str] | None,
                     api_key: str | None, strict: bool, record_hint: str) -> None:
            self.laya_record = bool(record)
            self.laya_strict = bool(strict)
            self.laya_api_key = api_key
            self._laya_scrubber = _Scrubber(api_key, learn=True)
            self._laya_cassette_class = type("LayaCassette", (LayaCassette,), {"record_hint": record_hint})
            super().__init__(
                record_mode=RecordMode.ALL if self.laya_record else RecordMode.NONE,
                cassette_library_dir=None if cassette_dir is None else os.fspath(cassette_dir),
                path_transformer=vcr.VCR.ensure_suffix(_CASSETTE_SUFFIX),
                match_on=_MATCH_ON,
                before_record_request=self._laya_scrubber.request,
                before_record_response=self._laya_scrubber.response,
                decode_compressed_response=True,
                drop_unused_requests=True,
                record_on_exception=False,
            )
            self.register_matcher("laya_body", _laya_body_matcher)
            self.register_persister(_Persister(record=self.laya_record, deferred=False))

        def get_merged_config(self, **kwargs: Any) -> dict[str, Any]:
            for forbidden in ("record_mode", "allow_playback_repeats", "match_on", "serializer"):
                if forbidden in kwargs:
                    raise TypeError(f"{forbidden} is fixed by pytest-laya's cassettes (record={self.laya_record});"
                                    " the mode is chosen in one place only")
            config = super().get_merged_config(**kwargs)
            config["record_mode"] = RecordMode.ALL if self.laya_record else RecordMode.NONE
            config["allow_playback_repeats"] = False
            return config

        def use_cassette(self, path: Any = None, **kwargs: Any) -> Any:
            """vcrpy's context manager over one cassette file (no decorator form, no discard)."""
            if path is None or not isinstance(path, (str, os.PathLike)):
                raise TypeError("LayaVCR.use_cassette needs a cassette path")
            return self._laya_cassette_class.use(**self.get_merged_config(path=path, **kwargs))

        def cassette(self, path: str | os.PathLike[str], *,
                     provenance: Mapping[str, Any] | None = None) -> contextlib.AbstractContextManager[CassetteHandle]:
            """One test's cassette: a context manager giving a `CassetteHandle` (see `use_cassette`)."""
            return _session(self, path, provenance)

    return LayaVCR, LayaCassette


# --------------------------------------------------------------------------- the handle


class CassetteHandle:
    """One test's cassette while it is in use.

    `record` says which mode it is in. In record mode the file is written when the block
    ends, unless `discard()` was called or the block raised; in replay nothing is written and,
    with `strict`, a clean exit with unplayed interactions raises `CassetteUnplayed`.
    `outcome` says what happened: ``"written"``, ``"unchanged"`` (re-recorded identically, file
    untouched), ``"discarded"``, ``"replayed"``, or ``None`` while in use.
    """

    def __init__(self, *, path: Path, record: bool, strict: bool, cassette: Any, persister: _Persister,
                 provenance: Mapping[str, Any] | None, api_key: str | None) -> None:
        self.path = path
        self.record = record
        self.strict = strict
        self.cassette = cassette
        self.outcome: str | None = None
        self._persister = persister
        self._discarded = False
        self._scrub = _Scrubber(api_key, learn=False)
        self._provenance: dict[str, Any] = {}
        if provenance:
            self.set_provenance(**dict(provenance))

    # -- state

    @property
    def exists(self) -> bool:
        """Replay: whether a cassette file was loaded. Record: whether an old file is there now."""
        return self._persister.loaded is not None if not self.record else self.path.is_file()

    @property
    def interactions(self) -> int:
        return len(self.cassette)

    @property
    def played(self) -> int:
        return sum(1 for i in range(len(self.cassette)) if self.cassette.play_counts[i])

    @property
    def provenance(self) -> dict[str, Any] | None:
        """Replay: ``metadata.pytest_laya`` of the loaded file. Record: what will be written."""
        if self.record:
            return {"format": PROVENANCE_FORMAT, **self._provenance}
        loaded = self._persister.loaded
        meta = loaded.get("metadata") if loaded else None
        value = meta.get("pytest_laya") if isinstance(meta, dict) else None
        return dict(value) if isinstance(value, dict) else None

    def set_provenance(self, **fields: Any) -> None:
        """Record where the interactions came from: server, identity, spec, laya_version.

        Values must be plain data (str, numbers, bools, lists, mappings; a dataclass is turned
        into a mapping); None removes a field. Ignored in replay. The API key is scrubbed.
        """
        for name, value in fields.items():
            if name not in PROVENANCE_FIELDS:
                raise TypeError(f"unknown provenance field {name!r}; expected one of {', '.join(PROVENANCE_FIELDS)}")
            if value is None:
                self._provenance.pop(name, None)
            else:
                self._provenance[name] = self._plain(value, name)

    def _plain(self, value: Any, where: str) -> Any:
        import dataclasses

        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = dataclasses.asdict(value)
        if isinstance(value, Mapping):
            return {str(k): self._plain(v, f"{where}.{k}") for k, v in value.items() if v is not None}
        if isinstance(value, (list, tuple)):
            return [self._plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, str):
            return self._scrub.text(value)
        if value is None or isinstance(value, (bool, int, float)):
            return value
        raise TypeError(f"provenance {where} must be plain data, got {type(value).__name__}")

    def unplayed(self) -> list[Unplayed]:
        """Recorded interactions no request has matched yet (empty in record mode)."""
        return [] if self.record else self.cassette.laya_unplayed()

    def check_all_played(self) -> None:
        """Raise `CassetteUnplayed` if any recorded interaction was never played."""
        left = self.unplayed()
        if left:
            listed = "; ".join(str(u) for u in left)
            raise CassetteUnplayed(
                f"{len(left)} of {self.interactions} recorded interactions in {self.path} were never played: "
                f"{listed}. The test no longer makes these requests: record it again with "
                f"{self.cassette.record_hint}, or pass strict=False", path=self.path, unplayed=left)

    def discard(self) -> None:
        """Don't save what this run recorded (the test failed): the old cassette stays as it was."""
        self._discarded = True

    # -- ending

    def _finish(self, failed: bool) -> None:
        if not self.record:
            self.outcome = "replayed"
            if self.strict and not failed and not self._discarded:
                self.check_all_played()
            return
        if failed or self._discarded:
            self.outcome = "discarded"
            return
        self.outcome = self._commit()

    def _metadata(self, recorded: str) -> dict[str, Any]:
        return {"pytest_laya": {"format": PROVENANCE_FORMAT, **self._provenance, "recorded": recorded}}

    def _commit(self) -> str:
        requests, responses = self.cassette.requests, self.cassette.responses
        today = _today()
        text = _render(requests, responses, self._metadata(today))
        try:
            old = self.path.read_bytes()
        except OSError:
            old = None
        if old is not None:
            if old == text:
                return "unchanged"
            old_date = _recorded_date(self.path)
            if old_date and old_date != today and old == _render(requests, responses, self._metadata(old_date)):
                return "unchanged"  # same interactions: keep the date they were first recorded on
        _atomic_write(self.path, text)
        return "written"


_METADATA_LINE = re.compile(rb"^metadata:", re.MULTILINE)


def recorded_provenance(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """A cassette's ``metadata.pytest_laya`` (where it was recorded), or None if it has none.

    Cheap, so it can be asked before the cassette is opened: only the top-level ``metadata``
    block is parsed (a top-level key starts a line; recorded text never does, YAML indents or
    quotes it). A missing or unreadable file is None here; opening it reports the problem.
    """
    import yaml

    try:
        raw = Path(path).read_bytes()
    except OSError:
        return None
    found = _METADATA_LINE.search(raw)
    if found is None:
        return None
    tail = raw[found.start():]
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        data = yaml.load(tail[:_next_top_level_key(tail)], Loader=loader)
    except (yaml.YAMLError, UnicodeDecodeError):
        return None
    meta = data.get("metadata") if isinstance(data, dict) else None
    value = meta.get("pytest_laya") if isinstance(meta, dict) else None
    return dict(value) if isinstance(value, dict) else None


def _next_top_level_key(block: bytes) -> int:
    """Where the top-level mapping entry that starts `block` ends."""
    first_line_end = block.find(b"\n")
    if first_line_end < 0:
        return len(block)
    following = re.compile(rb"^[^\s#]", re.MULTILINE).search(block, first_line_end + 1)
    return len(block) if following is None else following.start()


def _recorded_date(path: Path) -> str | None:
    try:
        data = _read_cassette(path)
    except CassetteError:
        return None
    meta = (data or {}).get("metadata") or {}
    value = meta.get("pytest_laya", {}).get("recorded") if isinstance(meta.get("pytest_laya"), dict) else None
    return value if isinstance(value, str) else None


@contextlib.contextmanager
def _session(laya: Any, path: str | os.PathLike[str], provenance: Mapping[str, Any] | None) -> Iterator[CassetteHandle]:
    persister = _Persister(record=laya.laya_record, deferred=True)
    config = laya.get_merged_config(path=path, persister=persister)
    full = Path(config["path_transformer"](config["path"]) if config.get("path_transformer") else config["path"])
    manager = laya._laya_cassette_class.use(**config)
    cassette = manager.__enter__()
    handle = CassetteHandle(path=full, record=laya.laya_record, strict=laya.laya_strict, cassette=cassette,
                            persister=persister, provenance=provenance, api_key=laya.laya_api_key)
    failed = True
    try:
        yield handle
        failed = False
    finally:
        manager.__exit__(None, None, None)  # unpatches; the deferred persister writes nothing
        if failed:
            handle._finish(failed=True)
    handle._finish(failed=False)


# --------------------------------------------------------------------------- public entry points


def laya_vcr(*, record: bool, cassette_dir: str | os.PathLike[str] | None, api_key: str | None,
             strict: bool = True, record_hint: str = RECORD_HINT) -> "vcr.VCR":
    """A `vcr.VCR` for served-Laya cassettes (see the module docstring for what it changes).

    `record` is the only authority on the mode: False replays (vcrpy ``none``, no network, no
    writes), True records (vcrpy ``all``, the old file replaced as a whole). `api_key` is
    scrubbed from everything recorded. `strict` makes a clean replay with unplayed interactions
    fail. `.cassette(path, provenance=...)` gives a `CassetteHandle` context manager;
    `.use_cassette(path)` is vcrpy's own (atomic writes, no discard).
    """
    vcr_class, _ = _classes()
    return vcr_class(record=record, cassette_dir=cassette_dir, api_key=api_key, strict=strict,
                     record_hint=record_hint)


def use_cassette(path: str | os.PathLike[str], *, record: bool, api_key: str | None = None,
                 strict: bool = True, provenance: Mapping[str, Any] | None = None,
                 record_hint: str = RECORD_HINT) -> contextlib.AbstractContextManager[CassetteHandle]:
    """One test's cassette at `path` (``.yaml`` added if missing), as a `CassetteHandle`.

    Every httpx (and http.client, requests...) request made inside the block goes through the
    cassette: recorded, or answered from it, never from the network. In record mode the file
    is replaced when the block ends cleanly and `discard()` was not called.
    """
    path = Path(path)
    return laya_vcr(record=record, cassette_dir=None, api_key=api_key, strict=strict,
                    record_hint=record_hint).cassette(path, provenance=provenance)


def cassette_relpath(nodeid: str) -> PurePosixPath:
    """The cassette file of a test, relative to the cassette directory: ``<module>/<test>.yaml``.

    ``tests/unit/test_x.py::TestA::test_b[p-1]`` gives ``test_x/TestA.test_b[p-1].yaml``.
    Characters that are unsafe in file names become ``_``; very long names are shortened
    and keep a hash, so two tests never share a file.
    """
    file_part, _, test_part = nodeid.partition("::")
    module = PurePosixPath(file_part.replace("\\", "/")).name
    module = module[:-3] if module.endswith(".py") else module
    name = test_part.replace("::", ".") or "module"
    return PurePosixPath(_safe_name(module or "tests")) / (_safe_name(name) + _CASSETTE_SUFFIX)


def _safe_name(name: str) -> str:
    safe = _SAFE_NAME.sub("_", name).strip(".") or "_"
    if len(safe) > _MAX_NAME:
        import hashlib

        digest = hashlib.sha1(name.encode("utf-8")).hexdigest()[:10]
        safe = f"{safe[: _MAX_NAME - 11]}-{digest}"
    return safe

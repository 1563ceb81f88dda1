"""The protocol's headers, read and written the one way every part of the kit agrees on."""

from __future__ import annotations

import email.utils
import os
import re
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import NamedTuple, TypeVar

from pytest_laya.wire.spec_name import SpecName

__all__ = [
    "LoweredHeaders",
    "add_lowered",
    "REQUEST_ID_HEADER",
    "SPEC_HEADER",
    "SPEC_NAMES",
    "claimed_spec",
    "lower_headers",
    "TRACEPARENT_HEADER",
    "TraceContext",
    "parse_traceparent",
    "new_traceparent",
    "child_traceparent",
    "new_request_id",
    "is_valid_request_id",
    "answered_request_id",
    "parse_server_timing",
    "parse_retry_after",
    "header_value",
]

_V = TypeVar("_V")

REQUEST_ID_HEADER = "X-Request-Id"
TRACEPARENT_HEADER = "traceparent"
#: The response header by which a server says which of the kit's specs it implements.
SPEC_HEADER = "Laya-Spec"
SPEC_NAMES: tuple[str, ...] = (SpecName.CURRENT.value, SpecName.TARGET.value)
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16
# 1-128 visible ASCII characters: what the target spec allows and every proxy passes through.
_REQUEST_ID = re.compile(r"[\x21-\x7e]{1,128}")
_TIMING_PARAM = re.compile(r"""\s*([!#$%&'*+\-.^_`|~0-9A-Za-z]+)\s*(?:=\s*("(?:[^"\\]|\\.)*"|[^;,\s]*))?\s*""")


def new_request_id() -> str:
    """A fresh id for one decision (reused on its retry, so server logs line up)."""
    return uuid.uuid4().hex


def is_valid_request_id(value: str) -> bool:
    return bool(_REQUEST_ID.fullmatch(value))


def answered_request_id(supplied: str | None) -> str:
    """The request id a server answers with: the caller's `X-Request-Id` when it is a valid one,
    else a fresh one."""
    return supplied if supplied and is_valid_request_id(supplied) else new_request_id()


def parse_server_timing(value: str | None) -> dict[str, float]:
    """`Server-Timing` as {metric: duration in ms}; metrics without `dur` are omitted.

    Accepts the target's ``queue;dur=0.4, infer;dur=3.1`` and laya-serve's
    ``inference;dur=3.10``. Malformed entries are skipped rather than raised on: timing is
    information, never a reason to fail a decision (the spec validator reports bad formats).
    """
    timings: dict[str, float] = {}
    if not value:
        return timings
    for entry in value.split(","):
        parts = entry.split(";")
        name = parts[0].strip()
        if not name:
            continue
        for param in parts[1:]:
            match = _TIMING_PARAM.fullmatch(param)
            if match and match.group(1).lower() == "dur" and match.group(2):
                try:
                    timings[name] = float(match.group(2).strip('"'))
                except ValueError:
                    pass
    return timings


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a `Retry-After` (delta-seconds or HTTP-date); None if absent or bad."""
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():  # "²" and "٣" are digits to isdigit, not to float
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


class TraceContext(NamedTuple):
    """A W3C trace context (``traceparent``): version, trace id, parent span id, flags."""

    version: str
    trace_id: str
    span_id: str
    flags: str

    def __str__(self) -> str:
        return f"{self.version}-{self.trace_id}-{self.span_id}-{self.flags}"


def parse_traceparent(value: str | None) -> TraceContext | None:
    """The trace context in `value`, or None when W3C says to ignore it (Trace Context 3.2, 4.3).

    Refused: anything but four lower-case hex fields of 2-32-16-2 digits, version ``ff``, an
    all-zero trace id or parent id, and version 00 with anything after its flags. A later
    version is read by its first four fields. A receiver that refuses one starts a new trace.
    """
    match = _TRACEPARENT.fullmatch((value or "").strip())
    if match is None:
        return None
    version, trace_id, span_id, flags, rest = match.groups()
    if version == "ff" or trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN or (version == "00" and rest):
        return None
    return TraceContext(version, trace_id, span_id, flags)


def new_traceparent() -> str:
    """A fresh, sampled trace: one per decision, so a retry shows as the same operation."""
    return f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01"


def child_traceparent(values: str | list[str] | None) -> str | None:
    """The caller's trace continued with a span of our own, or None where W3C says not to.

    `values` is the request's traceparent header (or each of its lines: more than one is
    invalid). A later version is answered as version 00, keeping only the sampled flag.
    """
    if isinstance(values, list):
        if len(values) != 1:
            return None
        values = values[0]
    context = parse_traceparent(values)
    if context is None:
        return None
    flags = context.flags if context.version == "00" else f"{int(context.flags, 16) & 0x01:02x}"
    return f"00-{context.trace_id}-{os.urandom(8).hex()}-{flags}"


def header_value(headers: Mapping[str, _V], name: str) -> _V | None:
    """The value of header `name`, in any case, from any mapping of headers (a plain dict, a
    recorded cassette's, httpx's): the first one so named, or None."""
    wanted = name.lower()
    return next((value for key, value in headers.items() if str(key).lower() == wanted), None)


def claimed_spec(headers: Mapping[str, str] | None) -> str | None:
    """The spec a response says its server implements (`SPEC_HEADER`), or None if it says none."""
    if not headers:
        return None
    value = header_value(headers, SPEC_HEADER)
    value = value.strip().lower() if isinstance(value, str) else None
    return value if value in SPEC_NAMES else None


class LoweredHeaders(dict[str, str]):
    """Headers by lower-case name, repeated ones joined with ", " (`lower_headers`): read, never changed."""

    __slots__ = ()


def lower_headers(headers: Mapping[str, str] | Iterable[tuple[str, str]] | None) -> LoweredHeaders:
    """`headers` by lower-case name; headers lowered already are given back as they are (read-only)."""
    if isinstance(headers, LoweredHeaders):
        return headers
    out = LoweredHeaders()
    if headers is not None:
        add_lowered(out, headers.items() if hasattr(headers, "items") else headers)
    return out


def add_lowered(out: LoweredHeaders, items: Iterable[tuple[str | bytes, str | bytes]]) -> None:
    """Add header `items` to `out` by lower-case name, a repeated one joined with ", " (bytes read as latin-1)."""
    for key, value in items:
        name = (key.decode("latin-1") if isinstance(key, bytes) else key).lower()
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        out[name] = text if name not in out else out[name] + ", " + text

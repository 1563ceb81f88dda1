"""How a request finds its recorded interaction, and how a miss says what differs.

Matching is on method, path, query and the canonical JSON body, never on scheme, host or port
(a cassette recorded against one port replays on any) and never on headers (request ids, trace
contexts and timings change on every call).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from pytest_laya.wire.body import NOT_JSON, Body, body_of
from pytest_laya.wire.json_text import canonical_json
from pytest_laya.wire.pointer import join

__all__ = [
    "MATCH_ON",
    "canonical_body",
    "match_key",
]


MATCH_ON = ("method", "path", "query", "laya_body")


_SHOW_VALUE = 40


_SHOW_BODY = 160


SHOW_DIFFS = 5


_MISSING: Any = object()


def canonical_body(body: Any) -> bytes:
    """The form bodies are compared in: canonical JSON when `body` parses as JSON, else the bytes.

    Canonical JSON is ``json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)``,
    so key order, whitespace and ``\\u`` escapes never make two equal requests differ.
    """
    return Body.of(body).canonical


def request_body(request: Any) -> bytes:
    """`request`'s body as matching compares it, from the one view of it scrubbing read too (`body_of`)."""
    return body_of(request).canonical


def laya_body_matcher(r1: Any, r2: Any) -> None:
    """vcrpy matcher: canonical JSON bodies (or bytes) must be equal."""
    if request_body(r1) != request_body(r2):
        raise AssertionError("the bodies differ (canonical JSON)")


laya_body_matcher.__name__ = "laya_body"


def _leaves(value: Any) -> int:
    if isinstance(value, dict):
        return max(1, sum(_leaves(v) for v in value.values()))
    if isinstance(value, list):
        return max(1, sum(_leaves(v) for v in value))
    return 1


def _json_diff(now: Any, recorded: Any, where: str, out: list[tuple[str, Any, Any]]) -> None:
    if isinstance(now, dict) and isinstance(recorded, dict):
        for key in sorted(set(now) | set(recorded), key=str):
            _json_diff(now.get(key, _MISSING), recorded.get(key, _MISSING), join(where, key), out)
    elif isinstance(now, list) and isinstance(recorded, list):
        for index in range(max(len(now), len(recorded))):
            _json_diff(now[index] if index < len(now) else _MISSING,
                       recorded[index] if index < len(recorded) else _MISSING, join(where, index), out)
    elif now is _MISSING or recorded is _MISSING or canonical_json(now) != canonical_json(recorded):
        out.append((where, recorded, now))


def _inner(text: str) -> str:
    """A string as JSON shows it, without its quotes."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


def _show(value: Any, limit: int = _SHOW_VALUE) -> str:
    if value is _MISSING:
        return "absent"
    if isinstance(value, str):  # cut inside its quotes, so both stay
        inner = _inner(value)
        return f'"{inner}"' if len(inner) <= limit - 2 else f'"{inner[: limit - 3]}…"'
    text = canonical_json(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _windows(a: str, b: str, limit: int) -> tuple[str, str]:
    if len(a) <= limit and len(b) <= limit:
        return a, b
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    start = max(0, first - limit // 3)

    def window(text: str) -> str:
        part = text[start:start + limit]
        return ("…" if start else "") + part + ("…" if start + limit < len(text) else "")

    return window(a), window(b)


def show_difference(recorded: Any, now: Any, limit: int = _SHOW_VALUE) -> tuple[str, str]:
    """Both values as canonical JSON, each cut to a window around where they first differ.

    A long state that changed in its last words shows those words, not the first 40 characters
    that both sides share; two strings are cut inside their quotes (``"…the duplicate payment"``).
    """
    if recorded is _MISSING or now is _MISSING:
        return _show(recorded, limit), _show(now, limit)
    if isinstance(recorded, str) and isinstance(now, str):
        a, b = _windows(_inner(recorded), _inner(now), limit - 2)
        return f'"{a}"', f'"{b}"'
    return _windows(canonical_json(recorded), canonical_json(now), limit)


def body_differences(now: bytes, recorded: bytes) -> tuple[int, list[str]]:
    """(how many leaves differ, readable differences) between two bodies."""
    if now == recorded:
        return 0, []
    parsed_now, parsed_recorded = Body(now).json, Body(recorded).json
    if parsed_now is NOT_JSON or parsed_recorded is NOT_JSON:
        if parsed_now is NOT_JSON and parsed_recorded is NOT_JSON:
            what = f"body (not JSON: {len(recorded)} bytes recorded, {len(now)} bytes now)"
        elif parsed_now is NOT_JSON:
            what = f"body (recorded JSON, now {'empty' if not now.strip() else 'not JSON'})"
        else:
            what = f"body (recorded {'empty' if not recorded.strip() else 'not JSON'}, now JSON)"
        return 1_000_000, [what]
    found: list[tuple[str, Any, Any]] = []
    _json_diff(parsed_now, parsed_recorded, "", found)
    weight = sum(max(_leaves(r) if r is not _MISSING else 1, _leaves(n) if n is not _MISSING else 1)
                 for _, r, n in found)
    shown = []
    for where, rec, cur in found:
        was, is_now = show_difference(rec, cur)
        shown.append(f"body at {where or '/'} (recorded {was}, now {is_now})")
    return weight, shown


def body_summary(body: bytes) -> str:
    """A short, recognisable body: top-level members in the order sent, each value truncated."""
    if not body:
        return ""
    parsed = Body.of(body).json
    if parsed is NOT_JSON:
        return f"<{len(body)} bytes, not JSON>"
    if isinstance(parsed, dict):
        text = ", ".join(f"{key}={_show(value)}" for key, value in parsed.items())
        return text if len(text) <= _SHOW_BODY else text[: _SHOW_BODY - 1] + "…"
    return _show(parsed, _SHOW_BODY)


def match_key(request: Any) -> tuple[Any, ...]:
    """What matching compares (vcrpy's method, path and query matchers, then the canonical body);
    never headers. Replay and verify both pair requests by it."""
    return (request.method, request.path, tuple(request.query), request_body(request))


def describe(request: Any) -> str:
    split = urlsplit(request.uri)
    return f"{request.method} {split.path or '/'}" + (f"?{split.query}" if split.query else "")

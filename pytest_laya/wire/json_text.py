"""JSON as RFC 8259 has it, and the one canonical text of a JSON value.

Python's `json` also reads NaN, Infinity and repeated member names. A validator that let them
through would pass a body no other JSON reader agrees on: NaN passes every numeric bound, and of
two ``"answers"`` members one reader takes the first and another the last. `loads_strict`
refuses all three with a `ValueError` that names what it found.

`canonical_json` is the text two equal values share whatever their key order, spacing or
escapes: what cassette matching compares and what the fake hashes its answers from.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["canonical_json", "loads_strict"]


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        for key, _value in pairs:
            if key in seen:
                shown = key if len(key) <= 60 else key[:57] + "..."
                raise ValueError(f"the member name {shown!r} appears more than once in one object")
            seen.add(key)
    return found


#: One decoder for every strict parse (`json.loads` builds one per call when given hooks).
_STRICT = json.JSONDecoder(parse_constant=_no_constant, object_pairs_hook=_object)


def loads_strict(text: str | bytes) -> Any:
    """`json.loads`, refusing NaN, Infinity, -Infinity and repeated member names (`ValueError`)."""
    if isinstance(text, (bytes, bytearray)):
        text = text.decode(json.detect_encoding(text), "surrogatepass")  # as json.loads decodes bytes
    elif not isinstance(text, str) or text.startswith("\ufeff"):
        return json.loads(text)  # json.loads' own error: not JSON text, or a BOM
    return _STRICT.decode(text)


#: `json.dumps` with these options builds this encoder anew on every call; encoding keeps no state.
_CANONICAL = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)


def canonical_json(value: Any) -> str:
    """`value` as canonical JSON: sorted keys, no spaces, non-ASCII as is (not ``\\u`` escapes).

    A value JSON cannot hold (a set, a date) is written as its `str`, so any value has a text.
    """
    return _CANONICAL.encode(value)

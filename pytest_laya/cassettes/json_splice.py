"""Values of a JSON text replaced where they stand, every other byte kept as written.

A cassette keeps a body as the server wrote it (layout, escapes, number spelling), so that
re-recording an unchanged server rewrites no byte. Scrubbing therefore finds what to change
structurally, in the parsed document, and splices the new values into the text: it never
replaces text inside other text, so a member name or a value that merely contains a secret, an
id or the word ``timing`` is never touched.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from pytest_laya.wire.body import NOT_JSON, Body, Members

__all__ = ["KEEP", "JsonPath", "splice", "splice_body"]


#: A place in a document: member names and list indices from the top.
JsonPath = tuple[str | int, ...]


#: What a rule returns to leave a value as it is.
KEEP: Any = object()


class _New:
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")


def splice(text: str, rule: Callable[[JsonPath, Any], Any]) -> str | None:
    """`text` with each scalar for which ``rule(path, value)`` is not `KEEP` replaced by that
    result's JSON; None when `text` is not one JSON document (see `splice_body`)."""
    spliced = splice_body(Body(text.encode("utf-8"), text=text), rule)
    return None if spliced is None else spliced.text


def splice_body(body: Body, rule: Callable[[JsonPath, Any], Any]) -> Body | None:
    """`body` with each scalar for which ``rule(path, value)`` is not `KEEP` replaced by that
    result's JSON: `body` itself when nothing changes, else a new `Body` carrying its edited
    document (not parsed again); None when `body` is not one JSON document. `rule` sees strings,
    numbers, booleans and nulls, never member names (a repeated name's values each). Every byte
    outside the replaced values is kept."""
    document = body.document
    if document is NOT_JSON:
        return None
    text = body.text
    assert text is not None  # a document was parsed from it
    edits: dict[tuple[int, ...], Any] = {}
    try:
        _plan(document, (), (), rule, edits)
    except RecursionError:  # pragma: no cover - json.loads refuses deeper documents first
        return None
    if not edits:
        return body
    if () in edits:  # the whole document is one scalar
        start = _SPACE.match(text, 0).end()  # type: ignore[union-attr]
        _, end = _DECODER.raw_decode(text, start)
        spliced = text[:start] + _spelt(edits[()], text[start:end]) + text[end:]
        return Body(spliced.encode("utf-8"), text=spliced, document=edits[()])
    trie: dict[int, Any] = {}
    for ordinals, value in edits.items():
        node = trie
        for ordinal in ordinals[:-1]:
            node = node.setdefault(ordinal, {})
        node[ordinals[-1]] = _New(value)
    spans: list[tuple[int, int, Any]] = []
    _walk(text, _SPACE.match(text, 0).end(), trie, spans)  # type: ignore[union-attr]
    out, last = [], 0
    for start, end, value in spans:
        out.append(text[last:start])
        out.append(_spelt(value, text[start:end]))
        last = end
    out.append(text[last:])
    spliced = "".join(out)
    return Body(spliced.encode("utf-8"), text=spliced, document=_edited(document, trie))


def _edited(node: Any, trie: dict[int, Any]) -> Any:
    """A copy of `node` with the values `trie` names replaced (what the spliced text parses to)."""
    copied: Any = Members(node) if isinstance(node, Members) else list(node)
    for ordinal, child in trie.items():
        if isinstance(node, Members):
            name, old = copied[ordinal]
            copied[ordinal] = (name, child.value if isinstance(child, _New) else _edited(old, child))
        else:
            copied[ordinal] = child.value if isinstance(child, _New) else _edited(copied[ordinal], child)
    return copied


def _plan(node: Any, path: JsonPath, ordinals: tuple[int, ...], rule: Callable[[JsonPath, Any], Any],
          edits: dict[tuple[int, ...], Any]) -> None:
    if isinstance(node, Members):
        for index, (name, child) in enumerate(node):
            _plan(child, (*path, name), (*ordinals, index), rule, edits)
    elif isinstance(node, list):
        for index, child in enumerate(node):
            _plan(child, (*path, index), (*ordinals, index), rule, edits)
    else:
        new = rule(path, node)
        if new is not KEEP:
            edits[ordinals] = new


def _walk(text: str, pos: int, trie: dict[int, Any], spans: list[tuple[int, int, Any]]) -> int:
    """Past the object or list at `pos`, noting the spans of the values `trie` names."""
    close = "}" if text[pos] == "{" else "]"
    pos = _SPACE.match(text, pos + 1).end()  # type: ignore[union-attr]
    if text[pos] == close:
        return pos + 1
    ordinal = 0
    while True:
        if close == "}":
            _, pos = json.decoder.scanstring(text, pos + 1)  # type: ignore[attr-defined]
            pos = _SPACE.match(text, pos).end() + 1  # type: ignore[union-attr]  # past ':'
            pos = _SPACE.match(text, pos).end()  # type: ignore[union-attr]
        child = trie.get(ordinal)
        if isinstance(child, dict):
            pos = _walk(text, pos, child, spans)
        else:
            _, end = _DECODER.raw_decode(text, pos)
            if child is not None:
                spans.append((pos, end, child.value))
            pos = end
        ordinal += 1
        pos = _SPACE.match(text, pos).end()  # type: ignore[union-attr]
        if text[pos] != ",":
            return pos + 1
        pos = _SPACE.match(text, pos + 1).end()  # type: ignore[union-attr]


def _spelt(value: Any, old: str) -> str:
    """`value` as JSON, escaped as the server escaped: ASCII-only where the old value was."""
    return json.dumps(value, ensure_ascii=old.isascii(), allow_nan=False)

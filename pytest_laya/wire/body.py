"""`Body`: one HTTP body read once, its bytes, text and JSON each worked out when first asked for.

Scrubbing, matching and replay's indexing all read an interaction's body: scrubbing finds values
by where they stand in the document (`Body.document`, member names in order, a repeated name kept),
matching compares the canonical JSON of its value (`Body.json`, `Body.canonical`). A body is
parsed once, in the first form asked for: the value is derived from the document without parsing
again, so scrubbing, which asks first, and matching see the one parse. A body a step rewrites (a
secret replaced) gets a new `Body` that carries its edited document (`json_splice`), not a parse.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from pytest_laya.wire.json_text import canonical_json

__all__ = ["NOT_JSON", "Body", "Members", "body_bytes", "body_of", "forget_view", "keep_body", "set_body"]


#: What `Body.json` and `Body.document` are for a body that is not one JSON document (or is empty).
NOT_JSON: Any = object()


class Members(list[tuple[Any, Any]]):
    """A JSON object's (name, value) pairs in order, a repeated name kept (`Body.document`)."""


_UNSET: Any = object()
_BOM = b"\xef\xbb\xbf"


def body_bytes(body: Any) -> bytes:
    """A body as bytes, whatever a cassette or client holds it as (str, bytes, BytesIO, chunks)."""
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


def _loads(text: str | bytes, hook: Any = None) -> Any:
    """The one place a body is parsed (the tests count its calls)."""
    return json.loads(text, object_pairs_hook=hook)


def _value(node: Any) -> Any:
    """A document's value as ``json.loads`` gives it (of a repeated name, the last value, first place)."""
    kind = type(node)
    if kind is Members:
        return {name: _value(child) for name, child in node}
    if kind is list:
        return [_value(child) for child in node]
    return node


class Body:
    """One body's views: `raw` bytes, `text` (UTF-8, or None), `document`, `json`, `canonical`."""

    __slots__ = ("raw", "_text", "_document", "_json", "_canonical")

    def __init__(self, raw: bytes, *, text: str | None = _UNSET, document: Any = _UNSET) -> None:
        self.raw = raw
        self._text = text
        self._document = document
        self._json: Any = _UNSET
        self._canonical: bytes | None = None

    @classmethod
    def of(cls, body: Any) -> Body:
        """The view of `body` (a `Body`, bytes, str or what `body_bytes` reads); a view handed on
        by `keep_body` is found again by the very bytes object it was made of."""
        if type(body) is bytes:
            kept = _KEPT.get(id(body)) if _KEPT else None
            return kept if kept is not None and kept.raw is body else cls(body)
        if isinstance(body, Body):
            return body
        return cls(body_bytes(body))

    @property
    def text(self) -> str | None:
        """The body decoded as UTF-8; None when it is not UTF-8."""
        if self._text is _UNSET:
            try:
                self._text = self.raw.decode("utf-8")
            except UnicodeDecodeError:
                self._text = None
        return self._text

    @property
    def document(self) -> Any:
        """The parsed text with every object as `Members` (what scrubbing walks), or `NOT_JSON`."""
        if self._document is _UNSET:
            text = self.text
            if text is None or not text.strip():
                self._document = NOT_JSON
            else:
                try:
                    self._document = _loads(text, Members)
                except (ValueError, RecursionError):
                    self._document = NOT_JSON
        return self._document

    @property
    def json(self) -> Any:
        """The body's JSON value as ``json.loads(raw)`` gives it, or `NOT_JSON` (empty, or not JSON)."""
        if self._json is _UNSET:
            self._json = self._parsed()
        return self._json

    def _parsed(self) -> Any:
        raw = self.raw
        if not raw.strip():
            return NOT_JSON
        # ``json.loads`` reads bytes as UTF-8, -16 or -32 by their first bytes; only for UTF-8 text
        # without a BOM is it the document's text, and only then is the document's parse reused.
        same_text = not raw.startswith(_BOM) and b"\x00" not in raw[:4]
        if self._document is not _UNSET and same_text and self.text is not None:
            if self._document is NOT_JSON:
                return NOT_JSON
            try:
                return _value(self._document)
            except RecursionError:  # pragma: no cover - json.loads refuses deeper documents first
                pass
        try:
            return _loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return NOT_JSON

    @property
    def canonical(self) -> bytes:
        """What matching compares: the canonical JSON of `json` (`wire.json_text.canonical_json`),
        else the bytes as they are."""
        if self._canonical is None:
            value = self.json
            self._canonical = self.raw if value is NOT_JSON else canonical_json(value).encode("utf-8")
            # Matching needs nothing more, and a cassette's index keeps every request's view:
            # the parsed trees are let go (asked for again, they are parsed again).
            self._document = self._json = _UNSET
        return self._canonical


# Views handed from one step of an interaction to the next through bytes (a vcrpy response dict
# cannot carry one): the last few, each held with its bytes, so an id is never reused meanwhile.
_KEPT: dict[int, Body] = {}
_KEPT_MAX = 8
_KEPT_LOCK = threading.Lock()


def keep_body(view: Body) -> bytes:
    """`view`'s bytes, to put where a body goes: `Body.of` finds the view again by them."""
    with _KEPT_LOCK:
        _KEPT[id(view.raw)] = view
        while len(_KEPT) > _KEPT_MAX:
            del _KEPT[next(iter(_KEPT))]
    return view.raw


def body_of(request: Any) -> Body:
    """The view of a request's body (the kit's `Request` or vcrpy's), kept on the request while
    its body is the same object: a miss compares one request with every recorded one."""
    body = request.body
    kept: Body | None = getattr(request, "_laya_body", None)
    if kept is not None and kept.raw is body:
        return kept
    view = Body.of(body)
    try:
        request._laya_body = view
    except AttributeError:  # pragma: no cover - a request type without a __dict__
        pass
    return view


def forget_view(request: Any) -> None:
    """Drop the view `body_of` keeps on `request` (the next `body_of` makes it again)."""
    try:
        del request._laya_body
    except AttributeError:  # none kept, or a request type without a __dict__
        pass


def set_body(request: Any, view: Body) -> None:
    """Give `request` the body `view` holds, and keep the view on it (`body_of`)."""
    request.body = view.raw
    try:
        request._laya_body = view
    except AttributeError:  # pragma: no cover - a request type without a __dict__
        pass

"""`Request`: one HTTP request as routes and cassettes see it, without vcrpy.

It answers what vcrpy's ``vcr.request.Request`` answers (``method``, ``uri``, ``body`` as bytes,
case-insensitive ``headers``, ``path``, ``query`` as sorted pairs, ``host``, ``port``, ``scheme``),
so matching, scrubbing, miss messages and calls treat both alike: vcrpy's request on the recording
path, this one on the kit's own replay path, which never imports vcrpy.
"""

from __future__ import annotations

import functools
from collections.abc import ItemsView, Iterable, Iterator, Mapping, MutableMapping
from typing import Any
from urllib.parse import ParseResult, parse_qsl, urlparse

__all__ = ["Headers", "Request"]


class Headers(MutableMapping[str, Any]):
    """Request headers by any case, keeping the case a name was first set with (vcrpy's
    ``HeadersDict``: a list or tuple value keeps its first item)."""

    __slots__ = ("_store",)

    def __init__(self, items: Mapping[str, Any] | Iterable[tuple[str, Any]] = ()) -> None:
        self._store: dict[str, tuple[str, Any]] = {}
        pairs = items.items() if isinstance(items, Mapping) else items
        for name, value in pairs:
            self[name] = value

    def __setitem__(self, key: str, value: Any) -> None:
        if isinstance(value, (tuple, list)):
            value = value[0]
        old = self._store.get(key.lower())
        self._store[key.lower()] = (old[0] if old else key, value)

    def __getitem__(self, key: str) -> Any:
        return self._store[key.lower()][1]

    def get(self, key: str, default: Any = None) -> Any:  # one lookup, not a KeyError caught by Mapping.get
        found = self._store.get(key.lower())
        return default if found is None else found[1]

    def __delitem__(self, key: str) -> None:
        del self._store[key.lower()]

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self._store.values())

    def __len__(self) -> int:
        return len(self._store)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key.lower() in self._store

    def __repr__(self) -> str:
        return repr(dict(self.items()))

    def items(self) -> ItemsView[str, Any]:
        return _Items(self)

    def copy(self) -> Headers:
        copied = Headers.__new__(Headers)
        copied._store = dict(self._store)
        return copied

    @classmethod
    def of_httpx(cls, headers: Any) -> Headers:
        """An ``httpx.Headers``' names (lower-case) and values (repeated ones joined with ", "), as vcrpy reads them
        (in the headers' own encoding: ASCII, as nearly all are, is read as such without asking)."""
        raw = headers.raw
        try:
            store = _decoded_store(raw, "ascii")
        except UnicodeDecodeError:
            store = _decoded_store(raw, headers.encoding)
        made = cls.__new__(cls)
        made._store = store
        return made


def _decoded_store(raw: Iterable[tuple[bytes, bytes]], encoding: str) -> dict[str, tuple[str, Any]]:
    store: dict[str, tuple[str, Any]] = {}
    for raw_name, raw_value in raw:
        name, value = raw_name.decode(encoding).lower(), raw_value.decode(encoding)
        old = store.get(name)
        store[name] = (name, value if old is None else f"{old[1]}, {value}")
    return store


class _Items(ItemsView[str, Any]):
    """`Headers.items()`, iterated from its store (not a lookup per name: every exchange reads them)."""

    _mapping: Headers

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        return iter(list(self._mapping._store.values()))


@functools.lru_cache(maxsize=1024)  # a suite's requests go to a few URLs (and every recorded one to one)
def _parsed(uri: str) -> ParseResult:
    return urlparse(uri)  # urlparse, as vcrpy: a path's ;params are not its path


class Request:
    """A request with vcrpy's attributes; its body is bytes (a str is encoded as UTF-8)."""

    __slots__ = ("method", "_uri", "_split", "_body", "_headers", "_laya_body", "__weakref__")

    _laya_body: Any  # the body's view, set by `wire.body.body_of`

    def __init__(self, method: str, uri: str, body: bytes | str | None,
                 headers: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> None:
        self.method = method
        self.uri = uri
        self.body = body
        self.headers = headers

    @property
    def uri(self) -> str:
        return self._uri

    @uri.setter
    def uri(self, uri: str) -> None:
        self._uri = uri
        self._split: ParseResult = _parsed(uri)

    @property
    def body(self) -> bytes | None:
        return self._body

    @body.setter
    def body(self, value: bytes | str | None) -> None:
        self._body = value.encode("utf-8") if isinstance(value, str) else value

    @property
    def headers(self) -> Headers:
        return self._headers

    @headers.setter
    def headers(self, value: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> None:
        self._headers = value if isinstance(value, Headers) else Headers(value)

    @property
    def scheme(self) -> str:
        return self._split.scheme

    @property
    def host(self) -> str | None:
        return self._split.hostname

    @property
    def port(self) -> int | None:
        return self._split.port or {"https": 443, "http": 80}.get(self._split.scheme)

    @property
    def path(self) -> str:
        return self._split.path

    @property
    def query(self) -> list[tuple[str, str]]:
        query = self._split.query
        return sorted(parse_qsl(query)) if query else []  # a decision's URL has none: asked on every match

    @property
    def url(self) -> str:
        return self._uri

    def copy(self) -> Request:
        """A request of one's own (its headers copied; the rest is immutable)."""
        copied = Request.__new__(Request)
        copied.method, copied._uri, copied._split, copied._body = self.method, self._uri, self._split, self._body
        copied._headers = self._headers.copy()
        body = getattr(self, "_laya_body", None)  # the body's view (`wire.body.body_of`): the same bytes
        if body is not None:
            copied._laya_body = body
        return copied

    def __repr__(self) -> str:
        return f"<Request ({self.method}) {self.uri}>"

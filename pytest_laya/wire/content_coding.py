"""Response bodies decoded through their Content-Encoding, with a cap that holds as bytes are produced.

httpx decodes a `Content-Encoding` layer in one call per chunk read, so 1.8 KB of stacked gzip
(``Content-Encoding: gzip, gzip``) becomes 1 GiB in memory before any size check can run. Here
the raw bytes are read and every layer is an incremental decompressor asked for at most `STEP`
bytes at a time: the decoded body never exceeds the cap (plus one step), every layer's output
is bounded too (so a layer cannot spin on empty gzip members), and a deadline check runs
between steps. The client asks for ``gzip, deflate`` only, so this is what it decodes; any other
coding, or more than `MAX_LAYERS` of them, is refused. The client decodes what it reads here;
recording and the spec check decode a recorded body (`recorded_coding`) the same way.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable, Mapping
from typing import Any

from pytest_laya.wire.headers import header_value

__all__ = ["ACCEPT_ENCODING", "BodyDecoder", "BodyTooLarge", "MAX_LAYERS", "UndecodableBody", "content_codings",
           "decode_body", "recorded_coding"]

#: What the client sends as Accept-Encoding: the codings it decodes with a bound.
ACCEPT_ENCODING = "gzip, deflate"
#: Most stacked codings a response may carry; real servers send one.
MAX_LAYERS = 3
#: Decoded bytes asked of a decompressor at a time.
STEP = 64 * 1024


class BodyTooLarge(Exception):
    """The body, decoded, is over the cap."""


class UndecodableBody(Exception):
    """The body cannot be decoded as its Content-Encoding says."""


def content_codings(value: str | None) -> list[str]:
    """The codings of a Content-Encoding header in the order applied, identity dropped."""
    if not value:
        return []
    return [c for c in (part.strip().lower() for part in value.split(",")) if c and c != "identity"]


class _Layer:
    """One coding's incremental decompressor, its output bounded by `limit` bytes in total."""

    def __init__(self, coding: str, limit: int) -> None:
        self.coding = coding
        self.limit = limit
        self.produced = 0
        self._first = True
        self._obj = self._new()

    def _new(self, raw_deflate: bool = False) -> zlib._Decompress:
        if self.coding in ("gzip", "x-gzip"):
            return zlib.decompressobj(16 + zlib.MAX_WBITS)
        return zlib.decompressobj(-zlib.MAX_WBITS if raw_deflate else zlib.MAX_WBITS)

    def decode(self, data: bytes, sink: Callable[[bytes], None], check: Callable[[], None]) -> None:
        while data:
            try:
                out = self._obj.decompress(data, STEP)
            except zlib.error as exc:
                if self._first and self.coding == "deflate":
                    # Some servers send raw deflate (no zlib header) as "deflate"; httpx accepts both.
                    self._first = False
                    self._obj = self._new(raw_deflate=True)
                    continue
                raise UndecodableBody(f"the body is not valid {self.coding} ({exc})") from None
            self._first = False
            data = self._obj.unconsumed_tail
            if self._obj.eof:
                tail = self._obj.unused_data
                if tail and self.coding in ("gzip", "x-gzip"):
                    self._obj = self._new()  # the next gzip member
                    data = tail + data
                # Bytes after the end of a deflate stream are ignored, as httpx ignores them.
            self._emit(out, sink)
            check()

    def finish(self, sink: Callable[[bytes], None]) -> None:
        try:
            out = self._obj.flush()
        except zlib.error as exc:
            raise UndecodableBody(f"the body is not valid {self.coding} ({exc})") from None
        self._emit(out, sink)

    def _emit(self, out: bytes, sink: Callable[[bytes], None]) -> None:
        if out:
            self.produced += len(out)
            if self.produced > self.limit:
                raise BodyTooLarge
            sink(out)


class BodyDecoder:
    """Feed raw body chunks in; `body()` is the decoded body, never more than `limit` bytes.

    `feed` raises `BodyTooLarge` once the decoded body would pass `limit` (nothing beyond one
    `STEP` over it was ever held) and `UndecodableBody` for a coding the client does not know
    or bytes that are not what their coding says. `check` is called between decoding steps
    (the sync client ends there at its deadline).
    """

    def __init__(self, content_encoding: str | None, limit: int, check: Callable[[], None] = lambda: None) -> None:
        codings = content_codings(content_encoding)
        unknown = [c for c in codings if c not in ("gzip", "x-gzip", "deflate")]
        if unknown:
            raise UndecodableBody(f"Content-Encoding {unknown[0]!r} is not one the client accepts "
                                  f"(it sends Accept-Encoding: {ACCEPT_ENCODING})")
        if len(codings) > MAX_LAYERS:
            raise UndecodableBody(f"Content-Encoding stacks {len(codings)} codings; the client decodes at most {MAX_LAYERS}")
        self.codings = codings
        self.limit = limit
        self._check = check
        self._parts: list[bytes] = []
        self._size = 0
        self._raw = 0
        # Decoding runs from the last coding applied to the first. A middle layer's output is
        # the next layer's compressed input: bounded by the cap plus deflate's worst overhead.
        slack = limit // 64 + 1024
        self._layers = [_Layer(c, limit if i == 0 else limit + slack) for i, c in enumerate(codings)]
        self._layers.reverse()

    @property
    def size(self) -> int:
        return self._size

    def feed(self, raw: bytes) -> None:
        self._raw += len(raw)
        if self._raw > self.limit:
            raise BodyTooLarge
        self._into(0, raw)

    def finish(self) -> None:
        for index, layer in enumerate(self._layers):
            layer.finish(functools.partial(self._into_next, index))

    def _into_next(self, index: int, out: bytes) -> None:
        self._into(index + 1, out)

    def body(self) -> bytes:
        return b"".join(self._parts)

    def _into(self, index: int, data: bytes) -> None:
        if index == len(self._layers):
            self._size += len(data)
            if self._size > self.limit:
                raise BodyTooLarge
            self._parts.append(data)
            return
        self._layers[index].decode(data, lambda out: self._into(index + 1, out), self._check)


def decode_body(raw: bytes, content_encoding: str | None, limit: int) -> bytes:
    """`raw` decoded through its Content-Encoding (gzip, deflate; stacked up to `MAX_LAYERS`),
    never more than `limit` bytes; raises `BodyTooLarge` or `UndecodableBody`."""
    decoder = BodyDecoder(content_encoding, limit)
    for start in range(0, len(raw), STEP):
        decoder.feed(raw[start:start + STEP])
    decoder.finish()
    return decoder.body()



def recorded_coding(headers: Mapping[str, Any]) -> str | None:
    """The Content-Encoding of a recorded response, its values joined by ``", "`` (vcrpy keeps a
    header's values as a list), or None when it names none: what `decode_body` is given."""
    encoding = header_value(headers, "content-encoding")
    if not encoding:
        return None
    return ", ".join(map(str, encoding)) if isinstance(encoding, (list, tuple)) else str(encoding)

"""A cassette in the layout vcrpy writes, read straight into the requests and responses replay plays.

Replay needs of a file its head (``version`` and ``metadata``) and each interaction as a fresh
request and response of its own. The general way builds them in three passes: the YAML parsed
into a document (`yaml_loader`), the document checked field by field (`persist`), then copied
into fresh objects (`persist.fresh_interactions`). A file vcrpy or the kit wrote, and most a hand
has edited, has one layout (PyYAML's block style, keys sorted, strings single-quoted or plain),
in which each field can only be of the type the checks want: `read` matches each interaction
with one regular expression and builds its request and response from the fields, in one pass.

It gives what the general way gives, or nothing: a text it is not sure of (another layout, a
double-quoted or block scalar, a tag, an anchor, a plain scalar that is not a string where one
is wanted, any character but printable ASCII and line feeds) is None, and the general way reads
it and says what is wrong with it. Each value is decided by `yaml_loader`'s own rules (its plain
scalars' resolution, its folding of quoted lines). `tests/cassettes/test_direct_reader.py` holds
it to the general way on every cassette in the repository, on any cassette vcrpy writes, and on
those cassettes changed a character at a time.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from pytest_laya.cassettes.yaml_loader import NotPlain, folded, plain_scalar
from pytest_laya.cassettes.yaml_loader import load as load_yaml

__all__ = ["DirectRead", "read"]


class DirectRead(NamedTuple):
    """A cassette read directly: its head (the top level but the interactions), and each
    interaction's request and response, fresh (as `persist.fresh_interactions` makes them)."""

    head: dict[str, Any]
    requests: list[Any]
    responses: list[dict[str, Any]]


_START = "interactions:\n"
_QUOTED = r"'[^']*(?:''[^']*)*'"  # single-quoted, over as many lines as it takes
_QUOTED_LINE = r"'[^'\n]*(?:''[^'\n]*)*'"
_PLAIN_LINE = r"[^ '\"\n][^\n]*"  # then `yaml_loader.plain_scalar` decides, or refuses
_LINE = f"(?:{_QUOTED_LINE}|{_PLAIN_LINE})"
_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.-]*"  # a key `yaml_loader` reads as one, and an HTTP token
_HEADERS = rf"headers:(?: \{{\}}\n|\n((?:      {_NAME}:\n(?:      - {_LINE}\n)+)+))"
_INTERACTION = re.compile(
    rf"- request:\n    body: ({_QUOTED}|{_PLAIN_LINE})\n    {_HEADERS}    method: ({_LINE})\n    uri: ({_LINE})\n"
    rf"  response:\n    body:\n      string: ({_QUOTED}|{_PLAIN_LINE})\n    {_HEADERS}"
    rf"    status:\n      code: ([1-5][0-9][0-9])\n      message: ({_LINE})\n")
_HEADER = re.compile(rf"      ({_NAME}):\n((?:      - {_LINE}\n)+)")
_VALUE = re.compile(rf"      - ({_LINE})\n")
# What `persist` wants of a method: an HTTP token.
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")


class _NotRead(Exception):
    """A value `read` is not sure of: the general way reads the file."""


def _scalar(text: str) -> Any:
    """A scalar as `yaml_loader` reads it: a quoted one folded over its lines, a plain one resolved."""
    if text[0] != "'":
        try:
            return plain_scalar(text)
        except NotPlain:
            raise _NotRead from None
    inner = text[1:-1]
    if "\n---" in inner or "\n..." in inner:
        raise _NotRead  # a document marker in column 0: not one scalar
    lines = inner.split("\n")
    return folded([lines[0], *[line.lstrip(" ") for line in lines[1:]]])


def _text(text: str) -> str:
    value = _scalar(text)
    if type(value) is not str:
        raise _NotRead  # null, a number, a date...: the general way's check names it
    return value


def _headers(block: str | None) -> dict[str, list[str]]:
    if not block:
        return {}
    out: dict[str, list[str]] = {}
    for name, values in _HEADER.findall(block):
        # `_NAME` is a token already; the name must read as a string (not `on`, `null`, `1`), and as a key.
        if type(_scalar(name)) is not str or len(name) > 1024:
            raise _NotRead
        out[name] = [_text(value) for value in _VALUE.findall(values)]  # a repeated name: the last, as YAML keeps
    return out


#: Printable ASCII and the line feed: a text with any other character is `yaml_loader`'s to read.
_SURE = bytes(range(0x20, 0x7F)) + b"\n"


def read(text: str, request_class: Any) -> DirectRead | None:
    """`text`'s head and fresh requests (built by `request_class`, as `persist.fresh_interactions`
    builds them) and responses, or None when `text` is not in the layout read here. The head
    is as parsed: `persist` checks it."""
    if not text.startswith(_START) or not text.isascii() or text.encode("ascii").translate(None, _SURE):
        return None
    requests: list[Any] = []
    responses: list[dict[str, Any]] = []
    match = _INTERACTION.match
    position = len(_START)
    try:
        while (found := match(text, position)) is not None:
            body, request_headers, method, uri, content, response_headers, code, message = found.groups()
            request_body = _scalar(body)
            if request_body is not None and type(request_body) is not str:
                return None
            method, uri = _text(method), _text(uri)
            if not _TOKEN.match(method) or not uri or not uri.isprintable():
                return None
            requests.append(request_class(method, uri, request_body, _headers(request_headers)))
            responses.append({"body": {"string": _text(content).encode("utf-8")}, "headers": _headers(response_headers),
                              "status": {"code": int(code), "message": _text(message)}})
            position = found.end()
    except _NotRead:
        return None
    if not requests:
        return None
    try:
        head = load_yaml(text[position:])
    except Exception:  # noqa: BLE001 - the general way reads it, and words the error
        return None
    if type(head) is not dict or "interactions" in head:
        return None
    return DirectRead(head, requests, responses)

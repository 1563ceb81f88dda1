"""The YAML loader a cassette is parsed with: vcrpy's safe cassette loader, built faster.

Replay parses one cassette per test. With libyaml, the time goes less to parsing than to
PyYAML's Python around it: the resolver is asked about every scalar, then the constructor's
generic machinery runs for every node. `load` keeps vcrpy's loader (libyaml's parser and
composer, the same tags refused, the same few Python tags built) and does the common work
itself:

- a quoted scalar is a string without asking the resolver (which answers that too); a short
  plain scalar's tag is remembered per value (the same resolvers decide it the first time);
- mappings, sequences and strings are built directly, each node once (a node the file aliases
  many times is one object, as PyYAML builds it, so an alias bomb stays small);
- everything else (numbers, booleans, nulls, timestamps, binary, vcrpy's Python tags, merge
  keys, unhashable keys, anything nested too deep, and every refusal) is PyYAML's own
  constructor's, which decides as it always does.

`tests/cassettes/test_yaml_loader.py` holds it to vcrpy's loader, byte for byte.
"""

from __future__ import annotations

import functools
import itertools
import operator
import re
from typing import Any

import yaml
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

__all__ = ["NotPlain", "folded", "load", "plain_scalar"]

_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_MERGE = "tag:yaml.org,2002:merge"
_REMEMBERED = 4096  # plain scalars' tags kept (of values up to 64 characters)


class NotPlain(Exception):
    """Something the direct build is not sure it reproduces (a merge, an unhashable key, a layout
    or a plain scalar it does not read): PyYAML reads the document."""


def _python_str(loader: Any, node: Any) -> Any:
    return loader.construct_scalar(node)


def _python_tuple(loader: Any, node: Any) -> Any:
    return tuple(loader.construct_sequence(node))


def _bytesio(loader: Any, node: Any) -> Any:
    import io

    mapping = loader.construct_mapping(node, deep=True)
    state = mapping.get("state") or (b"",)
    data = state[0] if state else b""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return io.BytesIO(data or b"")


def _iterator(loader: Any, node: Any) -> Any:
    mapping = loader.construct_mapping(node, deep=True)
    args: Any = mapping.get("args") or ([],)
    return iter(args[0] if args else [])


@functools.cache
def _vcrpy_loader() -> Any:
    """vcrpy's safe cassette loader (``vcr.serializers.yamlserializer._CassetteLoader``), built here so
    that replay imports no vcrpy: libyaml's safe loader, plus the few benign Python tags vcrpy's
    cassettes hold (str, unicode, tuple, a BytesIO body, an iterator body), nothing else."""
    base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class VcrpyCassetteLoader(base):  # type: ignore[misc]  # PyYAML's loader classes are untyped
        pass

    for tag, construct in (("python/str", _python_str), ("python/unicode", _python_str),
                           ("python/tuple", _python_tuple), ("python/object/new:_io.BytesIO", _bytesio),
                           ("python/object/apply:builtins.iter", _iterator)):
        VcrpyCassetteLoader.add_constructor(f"tag:yaml.org,2002:{tag}", construct)
    return VcrpyCassetteLoader


@functools.cache
def _loader_class() -> Any:
    base: Any = _vcrpy_loader()
    tags: dict[str, str] = {}

    class CassetteLoader(base):  # type: ignore[misc]  # PyYAML's loader classes are untyped
        def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
            if kind is not ScalarNode or self.yaml_path_resolvers:
                return super().resolve(kind, value, implicit)
            if not implicit[0]:  # quoted, or the non-specific tag "!"
                return self.DEFAULT_SCALAR_TAG
            tag = tags.get(value)
            if tag is None:
                tag = super().resolve(kind, value, implicit)
                if len(value) <= 64:
                    if len(tags) >= _REMEMBERED:
                        tags.clear()
                    tags[value] = tag
            return tag

    return CassetteLoader


def load(text: str | bytes) -> Any:
    """`text` parsed as vcrpy's cassette loader parses it (the same data, the same errors)."""
    if isinstance(text, str):
        try:
            return _Block(text).document()
        except NotPlain:
            pass
    return _load_with_libyaml(text)


def _load_with_libyaml(text: str | bytes) -> Any:
    loader = _loader_class()(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        try:
            return _build(loader, node, {})
        except (NotPlain, RecursionError):
            return loader.construct_document(node)
    finally:
        loader.dispose()


def _build(loader: Any, node: Any, built: dict[int, Any]) -> Any:
    kind = type(node)
    if kind is ScalarNode:
        return node.value if node.tag == _STR else loader.construct_object(node, deep=True)
    done = built.get(id(node))
    if done is not None:
        return done
    if kind is MappingNode and node.tag == _MAP:
        mapping: dict[Any, Any] = {}
        built[id(node)] = mapping
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                raise NotPlain
            key = _build(loader, key_node, built)
            try:
                hash(key)
            except TypeError:
                raise NotPlain from None  # PyYAML's constructor refuses it, in its words
            mapping[key] = _build(loader, value_node, built)
        return mapping
    if kind is SequenceNode and node.tag == _SEQ:
        items: list[Any] = []
        built[id(node)] = items
        for item in node.value:
            items.append(_build(loader, item, built))
        return items
    return loader.construct_object(node, deep=True)


# -- the block layout a cassette is written in, read directly ------------------------------
#
# vcrpy writes cassettes in YAML's block style: one mapping key or sequence item per line,
# strings in single quotes (folded over lines) or plain. `_Block` reads exactly that layout and
# nothing else: a document it is not sure of (a tab, a comment, an anchor or alias, a tag, a
# double-quoted or block scalar, a plain scalar over several lines or with an indicator in it, a
# blank line between entries, a flow collection other than {} and [], a document marker...) is
# left to `_load_with_libyaml`. A plain scalar's type is decided by the loader's own resolver and
# built by PyYAML's own constructor, so `1` is an int, `null` None and `2001-01-01` a date there
# as everywhere.

_KEY = re.compile(r"([A-Za-z0-9_][A-Za-z0-9_.-]*):(?: (.*))?\Z")
# What a plain scalar may be here: no indicator first, no quote, comment or bracket anywhere,
# no ": " inside, no trailing space or colon (YAML would read those otherwise).
_PLAIN = re.compile(r"(?:[A-Za-z0-9_./~=+$^()]|-(?=[0-9.]))[^'\"#\[\]{}]*\Z")
# Only printable ASCII and line feeds are read here (vcrpy escapes anything else, in double
# quotes): no tab, carriage return, control character, byte order mark or other line break.
_UNSURE = re.compile(r"[^\n\x20-\x7e]")
_PLAIN_VALUES: dict[str, Any] = {}


def plain_scalar(text: str) -> Any:
    """A one-line plain scalar's value, as the loader's resolver and constructor decide it;
    `NotPlain` for one YAML could read otherwise here (an indicator, a quote, ": " inside...)."""
    found = _PLAIN_VALUES.get(text, NotPlain)  # only what passed the checks below is kept
    if found is NotPlain:
        if not _PLAIN.match(text) or ": " in text or text.endswith((":", " ")):
            raise NotPlain
        tag = _plain_resolver().resolve(ScalarNode, text, (True, False))
        if tag == _STR:
            found = text
        else:
            construct = _loader_class().yaml_constructors.get(tag)
            if construct is None:
                raise NotPlain
            found = construct(_CONSTRUCTOR, ScalarNode(tag, text))
        if len(text) <= 64:
            if len(_PLAIN_VALUES) >= _REMEMBERED:
                _PLAIN_VALUES.clear()
            _PLAIN_VALUES[text] = found  # ints, floats, bools, None, dates: all immutable
    return found


@functools.cache
def _plain_resolver() -> Any:
    """A resolver with the loader's implicit resolvers (and no path resolvers, as it has none)."""
    resolver = yaml.resolver.BaseResolver()
    resolver.yaml_implicit_resolvers = _loader_class().yaml_implicit_resolvers
    resolver.yaml_path_resolvers = {}
    return resolver


_CONSTRUCTOR = yaml.constructor.SafeConstructor()


class _Block:
    def __init__(self, text: str) -> None:
        if not text or _UNSURE.search(text):
            raise NotPlain
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()
        self.lines = lines
        # Each line without its leading spaces, and how many there were (all in C: map, not a loop).
        self.contents = list(map(str.lstrip, lines, itertools.repeat(" ", len(lines))))
        self.indents = list(map(operator.sub, map(len, lines), map(len, self.contents)))

    def document(self) -> Any:
        if not self.lines or self.indents[0] != 0:
            raise NotPlain
        value, end = self.block(0, 0)
        if end != len(self.lines):
            raise NotPlain
        return value

    def block(self, i: int, indent: int) -> tuple[Any, int]:
        content = self.contents[i]
        if not content or content.startswith(("---", "...")):
            raise NotPlain
        return self.sequence(i, indent) if content.startswith("- ") else self.mapping(i, indent)

    def mapping(self, i: int, indent: int) -> tuple[dict[Any, Any], int]:
        out: dict[Any, Any] = {}
        indents, contents, n = self.indents, self.contents, len(self.lines)
        key_match = _KEY.match
        while i < n and indents[i] == indent:
            found = key_match(contents[i])
            if found is None:
                raise NotPlain
            name, rest = found.groups()
            if len(name) > 1024:  # longer than YAML lets a key be
                raise NotPlain
            key = plain_scalar(name)
            if rest is None:  # "key:" and the value on the lines below
                i += 1
                if i < n and indents[i] > indent:
                    value, i = self.block(i, indents[i])
                elif i < n and indents[i] == indent and contents[i].startswith("- "):
                    value, i = self.sequence(i, indent)
                else:
                    value = None
            else:
                value, i = self.scalar(rest, i)
            out[key] = value
        if i < n and indents[i] > indent:
            raise NotPlain
        return out, i

    def sequence(self, i: int, indent: int) -> tuple[list[Any], int]:
        out: list[Any] = []
        indents, contents, n = self.indents, self.contents, len(self.lines)
        while i < n and indents[i] == indent and contents[i].startswith("- "):
            item = contents[i][2:]
            if _KEY.match(item):  # "- key: ...": a mapping whose keys line up after the dash
                indents[i], contents[i] = indent + 2, item
                value, i = self.mapping(i, indent + 2)
            else:
                value, i = self.scalar(item, i)
                if i < n and indents[i] > indent:
                    raise NotPlain
            out.append(value)
        return out, i

    def scalar(self, text: str, i: int) -> tuple[Any, int]:
        """The value `text` starts on line `i`; (it, the line after it)."""
        if text.startswith("'"):
            return self.single_quoted(text, i)
        if text.startswith('"'):
            return self.double_quoted(text, i)
        if text == "{}":
            return {}, i + 1
        if text == "[]":
            return [], i + 1
        value = plain_scalar(text)
        if i + 1 < len(self.lines) and self.indents[i + 1] > self.indents[i]:
            raise NotPlain  # a plain scalar going on over the next lines
        return value, i + 1

    def single_quoted(self, text: str, i: int) -> tuple[str, int]:
        # The scalar's lines, first one after the quote, until the quote that is not doubled.
        segment = text[1:]
        segments = [segment]
        contents, indents, n = self.contents, self.indents, len(self.lines)
        while True:
            closing = _closing_quote(segment)
            if closing is not None:
                if segment[closing + 1:]:
                    raise NotPlain  # something after the closing quote
                segments[-1] = segment[:closing]
                break
            i += 1
            if i >= n:
                raise NotPlain
            segment = contents[i]  # the line without its leading spaces
            if not indents[i] and segment.startswith(("---", "...")):
                raise NotPlain
            segments.append(segment)
        return folded(segments), i + 1


    def double_quoted(self, text: str, i: int) -> tuple[str, int]:
        # Scanned as PyYAML's scanner scans it (escapes, escaped line breaks, folding), from the
        # quote to the quote that ends it, over as many lines as it takes.
        rest = "\n".join([text[1:], *self.lines[i + 1:]])
        value, end = _double_quoted(rest)
        lines = rest.count("\n", 0, end)
        tail = rest[end:].split("\n", 1)[0]
        if tail:
            raise NotPlain  # something after the closing quote
        return value, i + lines + 1


_ESCAPES = {"0": "\0", "a": "\x07", "b": "\x08", "t": "\t", "\t": "\t", "n": "\n", "v": "\x0b", "f": "\x0c",
            "r": "\r", "e": "\x1b", " ": " ", '"': '"', "\\": "\\", "/": "/", "N": "\x85", "_": "\xa0",
            "L": "\u2028", "P": "\u2029"}
_CODES = {"x": 2, "u": 4, "U": 8}
_HEX = re.compile(r"[0-9A-Fa-f]+\Z")
_RUN = re.compile(r"[^\"\\ \n]*")


def _double_quoted(text: str) -> tuple[str, int]:
    """The double-quoted scalar `text` opens (after its quote): (its value, where its closing quote
    ends). PyYAML's scan_flow_scalar for double quotes; what it would refuse is left to libyaml."""
    chunks: list[str] = []
    pos, n = 0, len(text)
    while True:
        run = _RUN.match(text, pos)
        assert run is not None
        if run.end() > pos:
            chunks.append(run.group())
            pos = run.end()
        if pos >= n:
            raise NotPlain  # no closing quote
        ch = text[pos]
        if ch == '"':
            return "".join(chunks), pos + 1
        if ch == "\\":
            pos += 1
            ch = text[pos] if pos < n else ""
            if ch in _ESCAPES and ch:
                chunks.append(_ESCAPES[ch])
                pos += 1
            elif ch in _CODES and ch:
                digits = text[pos + 1:pos + 1 + _CODES[ch]]
                if len(digits) != _CODES[ch] or not _HEX.match(digits):
                    raise NotPlain
                code = int(digits, 16)
                if 0xD800 <= code <= 0xDFFF or code > 0x10FFFF:
                    raise NotPlain  # libyaml refuses what PyYAML's scanner would build
                chunks.append(chr(code))
                pos += 1 + _CODES[ch]
            elif ch == "\n":  # an escaped line break: nothing, then the empty lines after it
                breaks, pos = _breaks(text, pos + 1)
                chunks.extend(breaks)
            else:
                raise NotPlain
            continue
        # spaces, then a line break (folded) or more text
        start = pos
        while pos < n and text[pos] == " ":
            pos += 1
        if pos >= n:
            raise NotPlain
        if text[pos] == "\n":
            breaks, pos = _breaks(text, pos + 1)
            chunks.extend(breaks if breaks else [" "])
        else:
            chunks.append(text[start:pos])


def _breaks(text: str, pos: int) -> tuple[list[str], int]:
    """After a line break inside a quoted scalar: one newline per empty line, leading spaces skipped."""
    breaks: list[str] = []
    n = len(text)
    while True:
        if text.startswith(("---", "..."), pos):
            raise NotPlain  # a document marker: libyaml's error, not ours
        while pos < n and text[pos] == " ":
            pos += 1
        if pos < n and text[pos] == "\n":
            breaks.append("\n")
            pos += 1
        else:
            return breaks, pos


def _closing_quote(segment: str) -> int | None:
    at = segment.find("'")
    while at >= 0:
        if segment.startswith("''", at):
            at = segment.find("'", at + 2)
            continue
        return at
    return None


def folded(segments: list[str]) -> str:
    """A single-quoted scalar's lines joined as YAML folds them: a line break is a space, each
    empty line a newline; spaces around a break are dropped; '' is a quote."""
    if len(segments) == 1:
        return segments[0].replace("''", "'")
    middle = [segment.rstrip(" ") for segment in segments[1:-1]]
    if "" not in middle:  # no empty line: each break is one space (joined in C, not a loop)
        return " ".join([segments[0].rstrip(" "), *middle, segments[-1]]).replace("''", "'")
    out = [segments[0].rstrip(" ")]
    breaks = 0
    for segment in segments[1:-1]:
        if not segment.strip(" "):
            breaks += 1
            continue
        out.append("\n" * breaks if breaks else " ")
        breaks = 0
        out.append(segment.rstrip(" "))
    out.append("\n" * breaks if breaks else " ")
    out.append(segments[-1])
    return "".join(out).replace("''", "'")

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
from typing import Any

import yaml
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

__all__ = ["load"]

_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_MERGE = "tag:yaml.org,2002:merge"
_REMEMBERED = 4096  # plain scalars' tags kept (of values up to 64 characters)


class _NotPlain(Exception):
    """A mapping the direct build does not reproduce (a merge or an unhashable key)."""


@functools.cache
def _loader_class() -> type:
    try:
        from vcr.serializers.yamlserializer import _CassetteLoader as base
    except ImportError:  # pragma: no cover - a vcrpy without it: PyYAML's safe loader
        base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    tags: dict[str, str] = {}

    class CassetteLoader(base):  # type: ignore[misc, valid-type]
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
    loader = _loader_class()(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        try:
            return _build(loader, node, {})
        except (_NotPlain, RecursionError):
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
                raise _NotPlain
            key = _build(loader, key_node, built)
            try:
                hash(key)
            except TypeError:
                raise _NotPlain from None  # PyYAML's constructor refuses it, in its words
            mapping[key] = _build(loader, value_node, built)
        return mapping
    if kind is SequenceNode and node.tag == _SEQ:
        items: list[Any] = []
        built[id(node)] = items
        for item in node.value:
            items.append(_build(loader, item, built))
        return items
    return loader.construct_object(node, deep=True)

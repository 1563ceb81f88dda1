"""A cassette's text: byte-stable YAML as plain vcrpy writes it, whole or appended to."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

__all__ = ["GrowingCassetteText", "render", "render_appended"]


class _Parsed:
    """A serializer that hands vcrpy data already parsed (so a file is parsed once)."""

    def __init__(self, data: Any) -> None:
        self._data = data

    def deserialize(self, _text: str) -> Any:
        return self._data

    @staticmethod
    def serialize(data: Any) -> Any:
        return data


def _serialized(requests: list[Any], responses: list[Any]) -> dict[str, Any]:
    """vcrpy's cassette document of these interactions (``version`` and ``interactions``), of copies."""
    from vcr import serialize

    data: dict[str, Any] = serialize.serialize(
        {"requests": copy.deepcopy(requests), "responses": copy.deepcopy(responses)}, _Parsed)
    return data


def render(requests: list[Any], responses: list[Any], metadata: Mapping[str, Any] | None) -> bytes:
    """The YAML text of a cassette, as plain vcrpy writes it, plus `metadata`."""
    from vcr.serializers import yamlserializer

    data = dict(_serialized(requests, responses))
    if metadata:
        data["metadata"] = copy.deepcopy(dict(metadata))
    text: str = yamlserializer.serialize(data)
    return text.encode("utf-8")


def render_appended(old: Mapping[str, Any], requests: list[Any], responses: list[Any],
                    metadata: Mapping[str, Any] | None) -> bytes:
    """The YAML text of the cassette parsed as `old` with `requests` and `responses` appended.

    The old interactions are dumped from the file's own parse, never from what replaying made of
    them (scrubbed again, request ids taken out): they stay the values that were served, and a
    file vcrpy or the kit wrote keeps its old interactions byte for byte.
    """
    from vcr.serializers import yamlserializer

    new = _serialized(requests, responses)["interactions"]
    data = {key: value for key, value in old.items() if key != "metadata"}
    data["interactions"] = [*old["interactions"], *new]
    if metadata:
        data["metadata"] = copy.deepcopy(dict(metadata))
    text: str = yamlserializer.serialize(data)
    return text.encode("utf-8")


#: Where an interaction's text starts in a one-interaction dump.
_HEAD = "interactions:\n"


class GrowingCassetteText:
    """The text of a cassette saved again and again as it grows (the standalone recording proxy
    saves after every exchange), each interaction rendered once: a save costs the new
    interactions' rendering, not the whole file's. The bytes are `render`'s and
    `render_appended`'s; where per-interaction text could differ from a whole dump (a YAML anchor
    inside an interaction, an object shared by two, a top-level key sorting before
    ``interactions``), it renders the whole file as they do, from then on.

    Interactions are known by the identity of the objects they were rendered from: the cassette
    only appends, and an interaction that is no longer the one rendered at its place is rendered
    again from there on.
    """

    def __init__(self) -> None:
        self._keys: list[tuple[int, ...]] = []
        self._chunks: list[str] = []
        self._containers: set[int] = set()
        self._whole = False

    def render(self, requests: list[Any], responses: list[Any], metadata: Mapping[str, Any] | None) -> bytes:
        """`render(requests, responses, metadata)`."""
        sources: list[tuple[tuple[int, ...], Any]] = [((id(q), id(s)), (q, s)) for q, s in zip(requests, responses)]
        tail = {"version": 1, **({"metadata": dict(metadata)} if metadata else {})}
        text = None if self._whole else self._text(sources, tail)
        return text if text is not None else render(requests, responses, metadata)

    def render_appended(self, old: Mapping[str, Any], requests: list[Any], responses: list[Any],
                        metadata: Mapping[str, Any] | None) -> bytes:
        """`render_appended(old, requests, responses, metadata)`."""
        sources: list[tuple[tuple[int, ...], Any]] = [((id(item),), item) for item in old["interactions"]]
        sources += [((id(q), id(s)), (q, s)) for q, s in zip(requests, responses)]
        tail = {key: value for key, value in old.items() if key not in ("interactions", "metadata")}
        if metadata:
            tail["metadata"] = dict(metadata)
        text = None if self._whole else self._text(sources, tail)
        return text if text is not None else render_appended(old, requests, responses, metadata)

    @staticmethod
    def _item(source: Any) -> Any:
        """An old interaction (a parsed mapping) copied, or a recorded (request, response) serialized."""
        if isinstance(source, Mapping):
            return copy.deepcopy(source)
        request, response = source
        return _serialized([request], [response])["interactions"][0]

    def _text(self, sources: list[tuple[tuple[int, ...], Any]], tail: dict[str, Any]) -> bytes | None:
        from vcr.serializers import yamlserializer

        if not sources or any(key < "interactions" for key in tail):
            return None
        same = 0
        while same < min(len(sources), len(self._keys)) and sources[same][0] == self._keys[same]:
            same += 1
        if same < len(self._keys):  # not the interactions rendered before: start again
            self._keys, self._chunks, self._containers = [], [], set()
            same = 0
        for key, source in sources[same:]:
            containers = _containers(*source) if isinstance(source, tuple) else _containers(source)
            if containers & self._containers:  # shared with another interaction: a whole dump anchors it
                self._whole = True
                return None
            chunk: str = yamlserializer.serialize({"interactions": [self._item(source)]})
            if not chunk.startswith(_HEAD) or "&id" in chunk:
                self._whole = True
                return None
            self._containers |= containers
            self._keys.append(key)
            self._chunks.append(chunk[len(_HEAD):])
        rest: str = yamlserializer.serialize(copy.deepcopy(tail))
        return (_HEAD + "".join(self._chunks) + rest).encode("utf-8")


def _containers(*roots: Any) -> set[int]:
    """The identities of every dict, list and object inside `roots` (what YAML would anchor if
    another interaction held it too)."""
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        value = stack.pop()
        if isinstance(value, (str, bytes, int, float, bool)) or value is None or id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, Mapping):
            stack.extend(value.values())
        elif isinstance(value, (list, tuple, set)):
            stack.extend(value)
        elif hasattr(value, "__dict__"):
            stack.extend(vars(value).values())
    return seen

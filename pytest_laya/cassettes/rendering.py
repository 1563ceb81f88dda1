"""A cassette's text: byte-stable YAML as plain vcrpy writes it, whole or appended to."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

__all__ = ["render", "render_appended"]


class _Parsed:
    """A serializer that hands vcrpy data already parsed (so a file is parsed once)."""

    def __init__(self, data: Any) -> None:
        self._data = data

    def deserialize(self, _text: str) -> Any:
        return self._data

    @staticmethod
    def serialize(data: Any) -> Any:
        return data


def render(requests: list[Any], responses: list[Any], metadata: Mapping[str, Any] | None) -> bytes:
    """The YAML text of a cassette, as plain vcrpy writes it, plus `metadata`."""
    from vcr import serialize
    from vcr.serializers import yamlserializer

    data = serialize.serialize({"requests": copy.deepcopy(requests), "responses": copy.deepcopy(responses)},
                               _Parsed)
    data = dict(data)
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
    from vcr import serialize
    from vcr.serializers import yamlserializer

    new = serialize.serialize({"requests": copy.deepcopy(requests), "responses": copy.deepcopy(responses)},
                              _Parsed)["interactions"]
    data = {key: value for key, value in old.items() if key != "metadata"}
    data["interactions"] = [*old["interactions"], *new]
    if metadata:
        data["metadata"] = copy.deepcopy(dict(metadata))
    text: str = yamlserializer.serialize(data)
    return text.encode("utf-8")

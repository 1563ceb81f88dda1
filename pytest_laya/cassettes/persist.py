"""Cassette files: safe, checked loading; byte-stable rendering; atomic writes.

Files are plain vcrpy YAML cassettes, parsed with a safe loader and checked field by field, so a
truncated or hand-edited file is a `CassetteError` naming the file and the field. A save writes a
temporary file in the same directory and `os.replace`s it, so a reader sees the old file or the
new one, never a part.
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_laya.cassettes.errors import CassetteError

__all__ = [
    "recorded_provenance",
]


def today() -> str:
    import datetime

    return datetime.datetime.now(datetime.timezone.utc).date().isoformat()


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that a reader sees the old file or the new one, never a part."""
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.stat().st_mode & 0o777
    except OSError:
        mode = 0o644
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise CassetteError(f"could not write cassette {path}: {exc}; the previous file is unchanged",
                                path=path) from exc
        raise
    if hasattr(os, "O_DIRECTORY"):  # make the rename itself durable; best effort
        with contextlib.suppress(OSError):
            dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)


def _yaml_problem(path: Path, exc: Exception) -> CassetteError:
    import yaml

    mark = getattr(exc, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc)
    if isinstance(exc, yaml.constructor.ConstructorError):
        tag = re.search(r"tag '([^']+)'", str(problem))
        shown = tag.group(1).replace("tag:yaml.org,2002:", "!!") if tag else "an unknown tag"
        return CassetteError(
            f"cassette {path} uses the YAML tag {shown}{where}, which a cassette may not contain: "
            "it was loaded with a safe loader, so nothing in it ran. Delete the file and record it again.",
            path=path)
    return CassetteError(f"cassette {path} is not valid YAML: {problem}{where}; is it truncated? "
                         "Record it again.", path=path)


def _check_structure(path: Path, data: Any) -> None:
    def bad(what: str) -> CassetteError:
        return CassetteError(f"cassette {path} {what}", path=path)

    if not isinstance(data, dict):
        raise bad(f"is not a vcrpy cassette: the top level is {type(data).__name__}, expected a mapping "
                  "with 'interactions' and 'version'")
    if "interactions" not in data:
        raise bad("has no 'interactions' list: it is truncated or not a vcrpy cassette")
    if not isinstance(data["interactions"], list):
        raise bad(f"has 'interactions' of type {type(data['interactions']).__name__}, expected a list")
    if "version" not in data:
        # vcrpy writes `version` after `interactions` (keys are sorted), so a cut file lacks it.
        raise bad("has no 'version' key: the file is truncated (vcrpy writes it last)")
    if data["version"] != 1:
        raise bad(f"has format version {data['version']!r}; this vcrpy cassette format is 1")
    for number, interaction in enumerate(data["interactions"], start=1):
        request = interaction.get("request") if isinstance(interaction, dict) else None
        response = interaction.get("response") if isinstance(interaction, dict) else None
        problems = []
        if not isinstance(request, dict):
            problems.append("request")
        else:
            problems += [f"request.{k}" for k in ("method", "uri") if not isinstance(request.get(k), str)]
            problems += [f"request.{k}" for k in ("body", "headers") if k not in request]
            if "headers" in request and not isinstance(request["headers"], dict):
                problems.append("request.headers (a mapping)")
        if not isinstance(response, dict):
            problems.append("response")
        else:
            status = response.get("status")
            if not isinstance(status, dict) or not isinstance(status.get("code"), int):
                problems.append("response.status.code")
            if not isinstance(response.get("headers"), dict):
                problems.append("response.headers")
            body = response.get("body")
            if not isinstance(body, dict) or "string" not in body:
                problems.append("response.body.string")
        if problems:
            raise bad(f"interaction {number} lacks {', '.join(problems)}: the file is truncated or was edited")
    metadata = data.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise bad("has 'metadata' that is not a mapping")
    if isinstance(metadata, dict) and metadata.get("pytest_laya") is not None and not isinstance(metadata["pytest_laya"], dict):
        raise bad("has 'metadata.pytest_laya' that is not a mapping")


def read_cassette(path: Path) -> dict[str, Any] | None:
    """The cassette at `path` parsed with vcrpy's safe loader and checked; None if there is none."""
    from vcr.serializers import yamlserializer
    import yaml

    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise CassetteError(f"cassette {path} is a directory, not a file", path=path) from None
    except OSError as exc:
        raise CassetteError(f"cassette {path} cannot be read: {exc}", path=path) from exc
    if not raw.strip():
        raise CassetteError(f"cassette {path} is empty: it was cut off while being written; record it again",
                            path=path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CassetteError(f"cassette {path} is not UTF-8 text ({exc})", path=path) from None
    try:
        data = yamlserializer.deserialize(text)
    except yaml.YAMLError as exc:
        raise _yaml_problem(path, exc) from None
    _check_structure(path, data)
    return data


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
    return yamlserializer.serialize(data).encode("utf-8")


class Persister:
    """vcrpy persister: safe, checked loading; atomic writes; deferred when a handle decides.

    In record mode the old cassette is never loaded (it is replaced as a whole); in replay
    nothing is ever written.
    """

    def __init__(self, *, record: bool, deferred: bool) -> None:
        self.record = record
        self.deferred = deferred
        self.loaded: dict[str, Any] | None = None

    def load_cassette(self, cassette_path: Any, serializer: Any) -> tuple[list[Any], list[Any]]:
        from vcr import serialize
        from vcr.persisters.filesystem import CassetteNotFoundError

        path = Path(cassette_path)
        if self.record:
            raise CassetteNotFoundError()
        data = read_cassette(path)
        if data is None:
            raise CassetteNotFoundError()
        try:
            requests, responses, *_ = serialize.deserialize("", _Parsed(data))
        except (TypeError, KeyError, ValueError, AttributeError) as exc:
            raise CassetteError(f"cassette {path} cannot be read as a vcrpy cassette: {exc}", path=path) from None
        self.loaded = data
        return requests, responses

    def save_cassette(self, cassette_path: Any, cassette_dict: Mapping[str, Any], serializer: Any) -> None:
        if not self.record or self.deferred:
            return  # replay never writes; a handle writes when the test passed
        text = render(list(cassette_dict["requests"]), list(cassette_dict["responses"]),
                       cassette_dict.get("metadata"))
        atomic_write(Path(cassette_path), text)


_METADATA_LINE = re.compile(rb"^metadata:", re.MULTILINE)


def recorded_provenance(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """A cassette's ``metadata.pytest_laya`` (where it was recorded), or None if it has none.

    Cheap, so it can be asked before the cassette is opened: only the top-level ``metadata``
    block is parsed (a top-level key starts a line; recorded text never does, YAML indents or
    quotes it). A missing or unreadable file is None here; opening it reports the problem.
    """
    import yaml

    try:
        raw = Path(path).read_bytes()
    except OSError:
        return None
    found = _METADATA_LINE.search(raw)
    if found is None:
        return None
    tail = raw[found.start():]
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        data = yaml.load(tail[:_next_top_level_key(tail)], Loader=loader)
    except (yaml.YAMLError, UnicodeDecodeError):
        return None
    meta = data.get("metadata") if isinstance(data, dict) else None
    value = meta.get("pytest_laya") if isinstance(meta, dict) else None
    return dict(value) if isinstance(value, dict) else None


def _next_top_level_key(block: bytes) -> int:
    """Where the top-level mapping entry that starts `block` ends."""
    first_line_end = block.find(b"\n")
    if first_line_end < 0:
        return len(block)
    following = re.compile(rb"^[^\s#]", re.MULTILINE).search(block, first_line_end + 1)
    return len(block) if following is None else following.start()


def recorded_date(path: Path) -> str | None:
    try:
        data = read_cassette(path)
    except CassetteError:
        return None
    meta = (data or {}).get("metadata") or {}
    value = meta.get("pytest_laya", {}).get("recorded") if isinstance(meta.get("pytest_laya"), dict) else None
    return value if isinstance(value, str) else None

"""Cassette files: safe, checked loading; atomic writes (the text written is `rendering`'s).

Files are plain vcrpy YAML cassettes, parsed with a safe loader and checked field by field, so a
truncated or hand-edited file is a `CassetteError` naming the file and the field. Reading and
writing the bytes (regular files only, a size limit, atomic saves) is `disk`'s.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_laya.cassettes.disk import REPAIR, KeptByFile, atomic_write, read_limited
from pytest_laya.cassettes.errors import CassetteError
from pytest_laya.cassettes.rendering import render, render_appended

if TYPE_CHECKING:
    from pytest_laya.cassettes.direct_reader import DirectRead

__all__ = [
    "REPAIR",
    "atomic_write",
    "forget_parse",
    "interactions_of",
    "read_cassette",
    "read_direct",
    "read_limited",
    "recorded_provenance",
    "take_direct",
]


def today() -> str:
    import datetime

    return datetime.datetime.now(datetime.timezone.utc).date().isoformat()


def _yaml_problem(path: Path, exc: Exception, text: str) -> CassetteError:
    import yaml

    mark = getattr(exc, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc)
    if isinstance(exc, yaml.constructor.ConstructorError):
        tag = re.search(r"tag '([^']+)'", str(problem))
        shown = tag.group(1).replace("tag:yaml.org,2002:", "!!") if tag else "an unknown tag"
        return CassetteError(
            f"cassette {path} uses the YAML tag {shown}{where}, which a cassette may not contain: "
            f"it was loaded with a safe loader, so nothing in it ran. {REPAIR}", path=path)
    index = getattr(mark, "index", None)
    if mark is not None and index is not None and "\t" in text[max(0, index - 1):index + 1]:
        why = ("it has a tab there, and YAML does not allow tabs for indentation: the file was edited by hand. "
               "Replace the tab with spaces, or")
    elif index is not None and index >= len(text.rstrip()):
        why = "it ends in the middle of a value: it was cut off (truncated). Either"
    else:
        why = "the file was edited by hand or damaged. Fix that line, or"
    return CassetteError(f"cassette {path} is not valid YAML: {problem}{where}; {why} "
                         f"{REPAIR[len('To fix it, '):]}", path=path)


_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_REQUEST_FIELDS = ("method", "uri", "body", "headers")
# What replaying needs of the metadata.pytest_laya fields the kit reads (others are kept as they are).
_PROVENANCE_TYPES: dict[str, tuple[type, ...]] = {
    "format": (int,), "server": (str,), "spec": (str,), "recorded": (str,), "laya_version": (str,),
    "identity": (dict,), "converted_from": (str,), "health_from": (str,),
}


def _kind(value: Any) -> str:
    """How a wrong value is named in a message: its YAML-ish type and a short look at it."""
    name = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", bytes: "binary",
            list: "a list", dict: "a mapping", type(None): "null"}.get(type(value), type(value).__name__)
    if isinstance(value, (list, dict)):
        return name  # never repr a container: an alias bomb is billions of items deep
    shown = repr(value[:60] if isinstance(value, (str, bytes)) else value)
    return f"{name} ({shown[:40]}{'...' if len(shown) > 40 else ''})"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _text_problem(value: Any, *, ascii_only: bool) -> str | None:
    if not isinstance(value, str):
        return f"is {_kind(value)}, expected a string"
    if any(ch in value for ch in "\r\n\x00"):
        return "holds a line break or NUL, which no HTTP header can"
    if ascii_only and not value.isascii():
        return "is not ASCII text, which httpx cannot send as a header"
    return None


def _headers_problems(where: str, headers: Any, *, lists_only: bool) -> list[str]:
    if not isinstance(headers, dict):
        return [f"{where} is {_kind(headers)}, expected a mapping of header names to lists of values"]
    problems = []
    for name, values in headers.items():
        if not isinstance(name, str) or not _TOKEN.match(name):
            problems.append(f"{where} has the header name {_kind(name)}, expected a header name (a string such as content-type)")
            continue
        if isinstance(values, str) and not lists_only:
            values = [values]
        if not isinstance(values, list):
            expected = "a list of strings" if lists_only else "a string or a list of strings"
            problems.append(f"{where}[{name!r}] is {_kind(values)}, expected {expected} (vcrpy writes ['value'])")
            continue
        if not values:
            problems.append(f"{where}[{name!r}] is an empty list, expected at least one value (or no such header)")
        for index, value in enumerate(values):
            problem = _text_problem(value, ascii_only=True)
            if problem:
                problems.append(f"{where}[{name!r}][{index}] {problem}")
    return problems


def _interaction_problems(interaction: Any) -> tuple[list[str], list[str]]:
    """(missing fields, wrong fields) of one recorded interaction."""
    if not isinstance(interaction, dict):
        return [], [f"is {_kind(interaction)}, expected a mapping with 'request' and 'response'"]
    missing: list[str] = []
    wrong: list[str] = []
    request, response = interaction.get("request"), interaction.get("response")
    if "request" not in interaction:
        missing.append("request")
    elif not isinstance(request, dict):
        wrong.append(f"request is {_kind(request)}, expected a mapping")
    else:
        _request_problems(request, missing, wrong)
    if "response" not in interaction:
        missing.append("response")
    elif not isinstance(response, dict):
        wrong.append(f"response is {_kind(response)}, expected a mapping")
    else:
        _response_problems(response, missing, wrong)
    return missing, wrong


def _request_problems(request: dict[str, Any], missing: list[str], wrong: list[str]) -> None:
    missing += [f"request.{k}" for k in _REQUEST_FIELDS if k not in request]
    wrong += [f"request has the unknown field {k!r} (a request has {', '.join(_REQUEST_FIELDS)})"
              for k in request if k not in _REQUEST_FIELDS]
    method = request.get("method")
    if "method" in request and (not isinstance(method, str) or not _TOKEN.match(method)):
        wrong.append(f"request.method is {_kind(method)}, expected an HTTP method such as POST")
    uri = request.get("uri")
    if "uri" in request and (not isinstance(uri, str) or not uri or not uri.isprintable()):
        wrong.append(f"request.uri is {_kind(uri)}, expected a URL such as http://laya.invalid/v1/systemone")
    body = request.get("body")
    if "body" in request and body is not None and not isinstance(body, (str, bytes)):
        wrong.append(f"request.body is {_kind(body)}, expected a string (or null)")
    if "headers" in request:
        wrong += _headers_problems("request.headers", request["headers"], lists_only=False)


def _response_problems(response: dict[str, Any], missing: list[str], wrong: list[str]) -> None:
    status = response.get("status")
    if not isinstance(status, dict):
        (missing if status is None else wrong).append(
            "response.status.code" if status is None else f"response.status is {_kind(status)}, expected a mapping")
    else:
        _status_problems(status, missing, wrong)
    if "headers" not in response:
        missing.append("response.headers")
    else:
        wrong += _headers_problems("response.headers", response["headers"], lists_only=True)
    body = response.get("body")
    if not isinstance(body, dict) or "string" not in body:
        (missing if body is None or isinstance(body, dict) else wrong).append(
            "response.body.string" if body is None or isinstance(body, dict)
            else f"response.body is {_kind(body)}, expected a mapping with 'string'")
    elif not isinstance(body["string"], (str, bytes)):
        wrong.append(f"response.body.string is {_kind(body['string'])}, expected a string")


def _status_problems(status: dict[str, Any], missing: list[str], wrong: list[str]) -> None:
    code = status.get("code")
    if code is None:
        missing.append("response.status.code")
    elif not _is_int(code) or not 100 <= code <= 599:
        wrong.append(f"response.status.code is {_kind(code)}, expected an HTTP status, an integer in 100..599")
    if "message" not in status:
        missing.append("response.status.message")
    elif status["message"] is not None:
        problem = _text_problem(status["message"], ascii_only=True)
        if problem:
            wrong.append(f"response.status.message {problem} (a reason phrase such as OK)")


def _check_structure(path: Path, data: Any) -> None:
    """Every field vcrpy and the kit read, checked for its type and range: a `CassetteError` naming
    the file, the interaction and the field, so no hand edit reaches vcrpy or httpx as a crash."""

    def bad(what: str) -> CassetteError:
        return CassetteError(f"cassette {path} {what}", path=path)

    if not isinstance(data, dict):
        raise bad(f"is not a vcrpy cassette: the top level is {type(data).__name__}, expected a mapping "
                  f"with 'interactions' and 'version'. {REPAIR}")
    if "interactions" not in data:
        raise bad(f"has no 'interactions' list: it is truncated or not a vcrpy cassette. {REPAIR}")
    if not isinstance(data["interactions"], list):
        raise bad(f"has 'interactions' of type {type(data['interactions']).__name__}, expected a list. {REPAIR}")
    if "version" not in data:
        # vcrpy writes `version` after `interactions` (keys are sorted), so a cut file lacks it.
        raise bad(f"has no 'version' key: the file is truncated (vcrpy writes it last). {REPAIR}")
    if not _is_int(data["version"]) or data["version"] != 1:
        version = data["version"]
        shown = repr(version) if isinstance(version, (int, float, type(None))) else _kind(version)
        raise bad(f"has format version {shown}, and pytest-laya reads vcrpy's cassette format 1 only: it was "
                  f"written by another tool or edited. {REPAIR}")
    for number, interaction in enumerate(data["interactions"], start=1):
        missing, wrong = _interaction_problems(interaction)
        if missing:
            raise bad(f"interaction {number} lacks {', '.join(missing)}: the file is truncated or was edited. {REPAIR}")
        if wrong:
            raise bad(f"interaction {number}: {'; '.join(wrong)}. The file was edited: fix the field. {REPAIR}")
    metadata = data.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise bad(f"has 'metadata' that is not a mapping. {REPAIR}")
    provenance = metadata.get("pytest_laya") if isinstance(metadata, dict) else None
    if provenance is not None and not isinstance(provenance, dict):
        raise bad(f"has 'metadata.pytest_laya' that is not a mapping. {REPAIR}")
    for key, value in (provenance or {}).items():
        expected = _PROVENANCE_TYPES.get(key)
        if expected and value is not None and (not isinstance(value, expected) or isinstance(value, bool)):
            raise bad(f"has metadata.pytest_laya.{key} {_kind(value)}, expected "
                      f"{'a mapping' if expected == (dict,) else 'an integer' if expected == (int,) else 'a string'}. "
                      f"{REPAIR}")


#: Parsed cassettes. A test reads its file once for where it was recorded and again to open it,
#: and verify reads it twice too: the second read costs a stat.
_PARSED: KeptByFile[dict[str, Any]] = KeptByFile()


def read_cassette(path: Path) -> dict[str, Any] | None:
    """The cassette at `path` parsed as vcrpy's safe loader parses it, and checked; None if there is none.

    The result is shared with later reads of the unchanged file: treat it as read-only
    (`fresh_interactions` gives vcrpy objects of one's own).
    """
    return _PARSED.read(path, lambda: _parse_cassette(path))


def forget_parse(path: Path) -> None:
    """Drop the kept parse of `path`: its reader holds all it needs of it (replay's `_Loaded`), and
    a parse kept for nothing is thousands of objects every full garbage collection walks."""
    _PARSED.forget(path)
    _DIRECT.forget(path)


#: Files `direct_reader` read, by path, until replay takes their requests and responses (`take_direct`).
_DIRECT: KeptByFile[DirectRead] = KeptByFile()


def read_direct(path: Path) -> DirectRead | None:
    """The cassette at `path` read straight into fresh requests and responses (`direct_reader`:
    the layout vcrpy writes), its head checked as `read_cassette` checks it; None if there is no
    file or it is in another layout: `read_cassette` reads it then, and says what is wrong with
    it. Kept by path for `take_direct`; the head is shared, read-only."""
    return _DIRECT.read(path, lambda: _read_direct(path))


def take_direct(path: Path) -> DirectRead | None:
    """`read_direct(path)`, no longer kept: its requests and responses are the caller's own to change."""
    found = _DIRECT.take(path)
    return found if found is not None else _read_direct(path)


def _read_direct(path: Path) -> DirectRead | None:
    from pytest_laya.cassettes import derived, direct_reader
    from pytest_laya.intercept.request import Request

    raw = read_limited(path)
    if raw is None:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    found = direct_reader.read(text, Request)
    if found is None:
        return None
    try:
        _check_structure(path, {"interactions": [], **found.head})
    except CassetteError:
        return None  # `read_cassette` raises it, with the file's own parse
    derived.note_parsed(raw, found.head)  # the head's bytes, for its derived entry
    return found


def _parse_cassette(path: Path) -> dict[str, Any] | None:
    import yaml

    from pytest_laya.cassettes import derived, yaml_loader

    raw = read_limited(path)
    if raw is None:
        return None
    if not raw.strip():
        raise CassetteError(f"cassette {path} is empty: it was cut off while being written. {REPAIR}", path=path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CassetteError(f"cassette {path} is not UTF-8 text ({exc}): it is binary, or was saved in another "
                            f"encoding. {REPAIR}", path=path) from None
    try:
        data = yaml_loader.load(text)
    except yaml.YAMLError as exc:
        raise _yaml_problem(path, exc, text) from None
    _check_structure(path, data)
    checked: dict[str, Any] = data
    derived.note_parsed(raw, checked)  # its head kept for later runs if replay finds no secret in it
    return checked


def provenance_of(data: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``metadata.pytest_laya`` of parsed cassette data, as a copy of one's own (None if absent)."""
    meta = data.get("metadata") if data else None
    value = meta.get("pytest_laya") if isinstance(meta, dict) else None
    return _copied(value, {}) if isinstance(value, dict) else None


def fresh_interactions(data: Mapping[str, Any], request_class: Any = None) -> tuple[list[Any], list[dict[str, Any]]]:
    """vcrpy's (requests, responses) of parsed, checked cassette data, as vcrpy's own deserializer
    builds them (bodies as bytes), without touching `data`: the objects are the caller's to change.
    `request_class` builds the requests (vcrpy's ``Request`` by default; the kit's own replay
    passes `pytest_laya.intercept.request.Request`, which needs no vcrpy)."""
    if request_class is None:
        from vcr.request import Request

        request_class = Request
    requests, responses = [], []
    for interaction in data["interactions"]:
        requests.append(request_class(**interaction["request"]))
        response = _fresh_response(interaction["response"])
        body = response.get("body")
        if isinstance(body, dict) and isinstance(body.get("string"), str):
            with contextlib.suppress(UnicodeEncodeError):
                body["string"] = body["string"].encode("utf-8")
        responses.append(response)
    return requests, responses


def interactions_of(path: Path, data: Mapping[str, Any], request_class: Any = None) -> tuple[list[Any], list[dict[str, Any]]]:
    """`fresh_interactions(data, request_class)`, a `CassetteError` naming `path` when they cannot be built."""
    try:
        return fresh_interactions(data, request_class)
    except (TypeError, KeyError, ValueError, AttributeError, IndexError) as exc:
        raise CassetteError(f"cassette {path} cannot be read as a vcrpy cassette: {exc}. {REPAIR}", path=path) from None


_SCALARS = (str, int, float, bool, bytes, type(None))


def _fresh_response(response: dict[str, Any]) -> dict[str, Any]:
    """A copy of a checked response: its usual parts (a status and a body of scalars, headers as
    lists of strings) copied directly, anything else by `_copied`."""
    memo: dict[int, Any] = {}
    out: dict[str, Any] = {}
    for key, value in response.items():
        if key == "headers" and type(value) is dict and all(type(v) is list for v in value.values()):
            out[key] = {name: [v if type(v) is str else _copied(v, memo) for v in values] for name, values in value.items()}
        elif type(value) is dict and all(isinstance(v, _SCALARS) for v in value.values()):
            out[key] = dict(value)
        else:
            out[key] = _copied(value, memo)
    return out


def _copied(value: Any, memo: dict[int, Any]) -> Any:
    """A copy of YAML data (mappings and lists copied, scalars shared: they are immutable); a
    node the file aliases several times is copied once, so an alias bomb stays small."""
    if not isinstance(value, (dict, list)):
        return value
    done = memo.get(id(value))
    if done is not None:
        return done
    if isinstance(value, dict):
        mapping: dict[Any, Any] = {}
        memo[id(value)] = mapping
        for key, item in value.items():
            mapping[key] = _copied(item, memo)
        return mapping
    items: list[Any] = []
    memo[id(value)] = items
    items.extend(_copied(item, memo) for item in value)
    return items


class Persister:
    """vcrpy persister: safe, checked loading; atomic writes; deferred when a handle decides.

    In record mode the old cassette is not loaded (it is replaced as a whole) unless recording
    `appends` to it; in replay nothing is ever written.
    """

    def __init__(self, *, record: bool, deferred: bool, appends: bool = False) -> None:
        self.record = record
        self.deferred = deferred
        self.appends = appends
        self.loaded: dict[str, Any] | None = None

    def load_cassette(self, cassette_path: Any, serializer: Any) -> tuple[list[Any], list[Any]]:
        from vcr.persisters.filesystem import CassetteNotFoundError

        path = Path(cassette_path)
        if self.record and not self.appends:
            raise CassetteNotFoundError()
        data = self.read(path)
        if data is None:
            raise CassetteNotFoundError()
        try:
            return fresh_interactions(data)
        except (TypeError, KeyError, ValueError, AttributeError, IndexError) as exc:
            raise CassetteError(f"cassette {path} cannot be read as a vcrpy cassette: {exc}. {REPAIR}", path=path) from None

    def read(self, path: Path) -> dict[str, Any] | None:
        """Replay (or appending): the parsed cassette at `path` (shared, read-only), kept as `loaded`; None if absent."""
        data = read_cassette(path)
        if data is not None:
            self.loaded = data
        return data

    def save_cassette(self, cassette_path: Any, cassette_dict: Mapping[str, Any], serializer: Any) -> None:
        if not self.record or self.deferred:
            return  # replay never writes; a handle writes when the test passed
        text = render(list(cassette_dict["requests"]), list(cassette_dict["responses"]),
                       cassette_dict.get("metadata"))
        atomic_write(Path(cassette_path), text)

    def save_appended(self, path: Path, requests: list[Any], responses: list[Any]) -> None:
        """vcrpy's own save of an appending cassette: the loaded file (its metadata too) with these
        interactions appended (deferred: the handle writes)."""
        if self.deferred or not requests:
            return
        if self.loaded is None:
            atomic_write(path, render(requests, responses, None))
            return
        atomic_write(path, render_appended(self.loaded, requests, responses, self.loaded.get("metadata")))


_METADATA_LINE = re.compile(rb"^metadata:", re.MULTILINE)


def recorded_provenance(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """A cassette's ``metadata.pytest_laya`` (where it was recorded), or None if it has none.

    Cheap, so it can be asked before the cassette is opened: only the top-level ``metadata``
    block is parsed (a top-level key starts a line; recorded text never does, YAML indents or
    quotes it). A missing or unreadable file is None here; opening it reports the problem.
    """
    import yaml

    try:
        raw = read_limited(Path(path))
    except CassetteError:
        return None
    if raw is None:
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

"""The recorded traffic the tests iterate over: the system1 recordings and the shipped cassettes.

Two sources, each kept as it was recorded: `tests/data/system1/` (JSON copied byte for byte from
system1-agents; those servers cannot run here) and the cassettes the recording suite writes
(`cassettes/recording/`, the one pipeline for laya-serve and the reference server). A cassette
yields one `Recording` per interaction, its body the bytes the server sent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

ROOT = Path(__file__).resolve().parents[2]
SYSTEM1 = ROOT / "tests" / "data" / "system1"
CASSETTES = ROOT / "cassettes"
#: libyaml's loader where PyYAML has it: the same objects as SafeLoader's (checked on every shipped
#: cassette), at about a twentieth of the CPU; every module importing this reads every cassette.
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
LAYA_SERVE = CASSETTES / "laya-serve-0.4.15"
LAYA_SERVE_STRICT = CASSETTES / "laya-serve-0.4.15-strict"
REFERENCE = CASSETTES / "reference"


@dataclass(frozen=True)
class Recording:
    file: Path
    index: int  # the interaction's place in its cassette (0 for a JSON recording)
    method: str
    path: str
    status: int
    content_type: str
    headers: dict[str, str]
    body: Any  # parsed JSON, or the text when it is not JSON
    body_bytes: bytes
    request: Any  # the parsed JSON request body, or None when none (or no JSON) was sent
    request_bytes: bytes | None = None

    @property
    def case(self) -> str:
        """The case name: the file's stem (``noul``) or the system1 file's (``worker.noul``)."""
        return self.file.stem

    @property
    def id(self) -> str:
        suffix = f"#{self.index}" if self.index else ""
        return f"{self.file.parent.name}/{self.file.name}{suffix}"


def _parsed(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")


def _from_json(file: Path) -> Recording:
    raw = json.loads(file.read_text(encoding="utf-8"))
    # system1 recordings carry no method/path: their file names say which endpoint they hit.
    is_health = ".health" in file.name
    headers = {k.lower(): v for k, v in raw.get("response_headers", {}).items()}
    headers["content-type"] = raw["content_type"]
    body = raw["body"]
    body_bytes = body.encode("utf-8") if isinstance(body, str) else json.dumps(body, ensure_ascii=False).encode("utf-8")
    return Recording(file=file, index=0, method=raw.get("method", "GET" if is_health else "POST"),
                     path=raw.get("path", "/health" if is_health else "/v1/systemone"), status=raw["status"],
                     content_type=raw["content_type"], headers=headers, body=body, body_bytes=body_bytes,
                     request=raw.get("request"))


def _from_cassette(file: Path) -> list[Recording]:
    document = yaml.load(file.read_text(encoding="utf-8"), Loader=YAML_LOADER)
    found = []
    for index, interaction in enumerate(document["interactions"]):
        request, response = interaction["request"], interaction["response"]
        headers = {k.lower(): v[0] for k, v in (response.get("headers") or {}).items()}
        body = (response.get("body") or {}).get("string") or ""
        body_bytes = body.encode("utf-8") if isinstance(body, str) else bytes(body)
        sent = request.get("body") or None
        sent_bytes = sent.encode("utf-8") if isinstance(sent, str) else sent
        parsed_request = _parsed(sent_bytes) if sent_bytes else None
        found.append(Recording(
            file=file, index=index, method=request["method"], path=urlsplit(request["uri"]).path,
            status=response["status"]["code"], content_type=headers.get("content-type", "").split(";")[0],
            headers=headers, body=_parsed(body_bytes), body_bytes=body_bytes,
            request=parsed_request if not isinstance(parsed_request, str) else None, request_bytes=sent_bytes))
    return found


def _load(directory: Path) -> list[Recording]:
    if directory == SYSTEM1:
        return [_from_json(f) for f in sorted(directory.glob("*.json"))]
    return [r for f in sorted(directory.glob("*.yaml")) for r in _from_cassette(f)]


def recordings(*dirs: Path) -> list[Recording]:
    """Every recorded response of `dirs` (default: system1 and both laya-serve 0.4.15 sets)."""
    return [r for d in (dirs or (SYSTEM1, LAYA_SERVE, LAYA_SERVE_STRICT)) for r in _load(d)]


def recording(directory: Path, case: str, index: int = 0) -> Recording:
    """The `index`th interaction of case `case` in `directory` (a cassette set, or system1)."""
    if directory == SYSTEM1:
        return _from_json(directory / f"{case}.json")
    return _from_cassette(directory / f"{case}.yaml")[index]

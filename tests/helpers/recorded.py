"""The recorded traffic in tests/data, as one list of exchanges the tests can iterate over."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "data"
SYSTEM1 = DATA / "system1"
LAYA_SERVE = DATA / "laya-serve-0.4.15"


@dataclass(frozen=True)
class Recording:
    file: Path
    method: str
    path: str
    status: int
    content_type: str
    headers: dict[str, str]
    body: Any
    request: Any  # the parsed JSON request body, or None when none (or no JSON) was sent

    @property
    def id(self) -> str:
        return f"{self.file.parent.name}/{self.file.name}"

    @property
    def body_bytes(self) -> bytes:
        if isinstance(self.body, str):
            return self.body.encode("utf-8")
        return json.dumps(self.body, ensure_ascii=False).encode("utf-8")


def _load(file: Path) -> Recording:
    raw = json.loads(file.read_text(encoding="utf-8"))
    # system1 recordings carry no method/path: their file names say which endpoint they hit.
    is_health = ".health" in file.name
    headers = {k.lower(): v for k, v in raw.get("response_headers", {}).items()}
    headers["content-type"] = raw["content_type"]
    return Recording(
        file=file,
        method=raw.get("method", "GET" if is_health else "POST"),
        path=raw.get("path", "/health" if is_health else "/v1/systemone"),
        status=raw["status"],
        content_type=raw["content_type"],
        headers=headers,
        body=raw["body"],
        request=raw.get("request"),
    )


def recordings(*dirs: Path) -> list[Recording]:
    dirs = dirs or (SYSTEM1, LAYA_SERVE)
    return [_load(f) for d in dirs for f in sorted(d.glob("*.json"))]

"""Turn the system1 recordings (tests/data/system1/) into cassettes, one per recorded response.

Why: those recordings are the only traffic this project has from servers it cannot start here
(system1-omni's worker, the omni-jev proxy in front of it, the proxy with no worker, laya-serve
0.3.20). As cassettes, the contract suite and any user's tests replay real worker and proxy
answers through the served client, exactly as they replay the ones recorded here.

Each ``<prefix>.<case>.json`` becomes ``cassettes/system1/<kind>/<case>.yaml``, a standard vcrpy
cassette of one interaction:

* the response: the recorded status, the recorded media type, and the body. A text body is kept
  as it is; a JSON body is written the way these FastAPI servers (and the proxy, which forwards
  bodies unchanged) put it on the wire, Starlette's ``JSONResponse``: compact separators, UTF-8,
  the recorded key order. Content-Length is that body's length.
* the request: ``GET /health`` for ``.health`` recordings, else ``POST /v1/systemone`` with the
  recorded JSON body. Two recordings stored no request (``worker.malformed_json``: the body was
  not JSON; ``frontend.too_many_questions``: 65 questions); they get the stand-ins
  `MALFORMED_BODY` and `too_many_questions()`, the requests that produce those answers.
* the provenance (``metadata.pytest_laya``): the server kind, spec ``current``, laya 0.3.20 and the
  identity the recordings' README gives (none for ``frontend-down``: no Laya answered), the date
  it gives, and ``converted_from`` (the source file).
* a 200 decision is followed by the kind's recorded ``/health`` answer (``health_from``): after a
  200 without ``served_by`` the served client reads ``/health`` for the identity.
* ``frontend-down`` holds its one answer twice: the served client retries a 502 once, and the
  proxy answers every request that way while the worker is down.

The output is deterministic (no dates or ids of this run), so re-running changes nothing and
tests/cassettes/test_shipped_cassettes.py checks that the shipped files equal what this script makes from
the repository's copy of the recordings.

Usage (from the repository root)::

    .venv/bin/python scripts/convert_system1_recordings.py [--source tests/data/system1] [--out cassettes/system1]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from http import HTTPStatus
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = ROOT / "tests" / "data" / "system1"
DEFAULT_OUT = ROOT / "cassettes" / "system1"
#: File-name prefix of a recording -> the server kind (as the current spec's x-servers names it).
KINDS = {"worker": "worker", "frontend": "frontend", "frontend-down": "frontend-down", "laya-serve": "laya-serve-0.3.20"}
#: From tests/data/system1/README.md: every kind ran this checkpoint, on laya 0.3.20.
IDENTITY = {"checkpoint": "convaiinnovations/laya", "revision": "55cf4c4ebb4ebe31b2550e8bdf3bd21b99753851"}
LAYA_VERSION = "0.3.20"
RECORDED = "2026-10-01"
ORIGIN = "http://laya.invalid"
STATE = "I was charged twice for my order. Please refund the duplicate today."
#: Stand-in for the malformed body the worker refused (the recording did not keep it).
MALFORMED_BODY = '{"model": "english", "state": "' + STATE + '", "questions": {"refund": '


def too_many_questions() -> dict[str, Any]:
    """Stand-in for the 65-question request the proxy refused (the recording did not keep it)."""
    return {"model": "english", "state": STATE,
            "questions": {f"q{i:02d}": {"type": "noul", "instructions": f"Does the message mention topic {i}?"}
                          for i in range(65)}}


def _wire_json(value: Any) -> str:
    """JSON as Starlette's JSONResponse renders it (what FastAPI servers send)."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":"))


def _request_body(name: str, recording: dict[str, Any]) -> str:
    if "request" in recording:
        return json.dumps(recording["request"], ensure_ascii=False)
    if name == "worker.malformed_json":
        return MALFORMED_BODY
    if name == "frontend.too_many_questions":
        return json.dumps(too_many_questions(), ensure_ascii=False)
    raise ValueError(f"{name}: a POST recording without a request, and no stand-in for it")


def _split(name: str) -> tuple[str, str]:
    """(kind, case) of a recording's file stem, e.g. ``frontend-down.unreachable``."""
    prefix, _, case = name.partition(".")
    if prefix not in KINDS or not case:
        raise ValueError(f"{name}: unknown recording prefix {prefix!r}; expected one of {', '.join(KINDS)}")
    return KINDS[prefix], case


def _interaction(name: str, recording: dict[str, Any]) -> dict[str, Any]:
    body = recording["body"]
    text = body if isinstance(body, str) else _wire_json(body)
    is_health = name.endswith(".health")
    request = {
        "body": "" if is_health else _request_body(name, recording),
        "headers": {} if is_health else {"content-type": ["application/json"]},
        "method": "GET" if is_health else "POST",
        "uri": ORIGIN + ("/health" if is_health else "/v1/systemone"),
    }
    response = {
        "body": {"string": text},
        "headers": {"content-length": [str(len(text.encode("utf-8")))], "content-type": [recording["content_type"]]},
        "status": {"code": recording["status"], "message": HTTPStatus(recording["status"]).phrase},
    }
    return {"request": request, "response": response}


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def cassette_for(source: Path) -> tuple[Path, str]:
    """(path under the output directory, YAML text) of the cassette made from one recording."""
    from vcr.serializers import yamlserializer

    name = source.name[: -len(".json")]
    kind, case = _split(name)
    recording = _read(source)
    interactions = [_interaction(name, recording)]
    provenance: dict[str, Any] = {"format": 1, "server": kind, "spec": "current"}
    if kind != "frontend-down":  # with the worker down, no Laya answered
        provenance.update(laya_version=LAYA_VERSION, identity=dict(IDENTITY))
    provenance.update(recorded=RECORDED, converted_from=f"tests/data/system1/{source.name}")
    health = source.with_name(name.partition(".")[0] + ".health.json")
    if recording["status"] == 200 and case != "health" and health.is_file():
        # After a 200 without served_by the served client reads /health for the identity: the
        # kind's own recorded /health answer serves that read.
        interactions.append(_interaction(health.name[: -len(".json")], _read(health)))
        provenance["health_from"] = f"tests/data/system1/{health.name}"
    if kind == "frontend-down":
        # The served client retries a 502 once, and the proxy answers every request this way while
        # the worker is down: the recorded answer serves both attempts.
        interactions.append(copy.deepcopy(interactions[0]))  # a copy: YAML would write an alias
    data = {"interactions": interactions, "metadata": {"pytest_laya": provenance}, "version": 1}
    return Path(kind) / f"{case}.yaml", yamlserializer.serialize(data)


def convert(source_dir: Path) -> dict[Path, str]:
    """Every cassette the recordings in `source_dir` make, by path relative to the output."""
    out: dict[Path, str] = {}
    for source in sorted(source_dir.glob("*.json")):
        path, text = cassette_for(source)
        out[path] = text
    return out


def write(cassettes: dict[Path, str], out_dir: Path) -> list[Path]:
    """Write the cassettes and remove those of recordings that no longer exist."""
    written = []
    for relpath, text in sorted(cassettes.items()):
        path = out_dir / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        written.append(path)
    for stale in sorted(set(out_dir.glob("*/*.yaml")) - set(written)):
        stale.unlink()
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="the recordings (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the cassettes (default: %(default)s)")
    args = parser.parse_args(argv)
    for path in write(convert(args.source), args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

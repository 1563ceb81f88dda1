"""Verify mode: do the recorded answers still hold on a live server?

A cassette is only as good as the server it was recorded from. ``--laya-mode=verify`` runs each
test against a live server, as live mode does, while the test's cassette is kept aside; every
request the test sends (the very requests its cassette recorded, sent again by the same test, so
a held slot or a warming server is set up as when it was recorded) is paired with its recorded
interaction, and the live answer is compared with the recorded one:

* the status code and reason phrase, exactly;
* the response headers, exactly, after the normalisation cassettes already apply (the allow-list,
  ``X-Request-Id`` and ``traceparent`` stored as fixed values, Server-Timing and
  X-Inference-Time-Ms durations as 0, request ids inside bodies as ``recorded``). Content-Length
  is left out: it follows the body, which is compared with a tolerance;
* the body: JSON compared value by value, numbers within an absolute `tolerance` (default
  `DEFAULT_TOLERANCE`, for the float noise between machines and library builds), everything
  else exactly; any other body byte for byte.
* except, in a ``/health`` document, what the server happens to hold rather than what it is
  (`HEALTH_LOAD_MEMBERS`): laya-serve loads a checkpoint on first use and keeps a few, so
  ``loaded`` and ``cpu_fallbacks`` follow the requests it served before, whoever sent them
  (compared by kind only: a list stays a list), and ``revisions`` and ``checkpoint_devices``,
  keyed by loaded model, are compared for the models both documents list.

Pairing uses the cassette matching rule (method, path, query and canonical JSON body), in
recorded order, each recorded interaction used once. A recorded interaction the test no longer
sends, and a request the cassette lacks, are drift too: the cassette no longer describes the
test. Any drift names the cassette and how to record it again.

This module is pure comparison (no pytest, no vcrpy at import); the plugin captures the live
exchanges through a cassette in record mode that is never saved.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_laya.cassettes.matching import match_key
from pytest_laya.wire.body import NOT_JSON, Body, body_bytes
from pytest_laya.wire.pointer import join
from pytest_laya.wire.routes import HEALTH_PATH

__all__ = [
    "DEFAULT_TOLERANCE",
    "HEALTH_LOAD_MEMBERS",
    "InteractionCheck",
    "CassetteVerification",
    "compare_responses",
    "probability_pairs",
    "verify_interactions",
]

#: Probabilities (and every other number in a body) may differ by this much, absolutely.
DEFAULT_TOLERANCE = 1e-4
#: Headers verify does not compare: derived from the body, which is compared with the tolerance.
UNCOMPARED_HEADERS = frozenset({"content-length"})
#: /health members that depend on what the server has loaded (laya-serve 0.4.15, and the
#: reference server's copies of its fields): member -> how verify compares it. "kind": only its
#: JSON kind (a list stays a list); "shared keys": a map by loaded model, compared for the
#: models both documents list. Recorded from LayaServeProcess after different prior loads:
#: tests/plugin/test_verify.py.
HEALTH_LOAD_MEMBERS = {
    "loaded": "kind",
    "cpu_fallbacks": "kind",
    "revisions": "shared keys",
    "checkpoint_devices": "shared keys",
}
_SHOW = 60
_SHOW_DIFFERENCES = 8
_ABSENT: Any = object()
# ------------------------------------------------------------------------------ results


@dataclass(frozen=True)
class InteractionCheck:
    """One interaction's verdict. `number` is its 1-based place in the cassette (None for a request
    the cassette lacks); `differences` is empty when the live answer still matches."""

    number: int | None
    request: str
    differences: tuple[str, ...] = ()
    #: "compared", "not sent" (recorded, the test no longer sends it) or "not recorded".
    kind: str = "compared"
    #: Every probability in both answers, moved or not: (JSON pointer, recorded, live).
    probabilities: tuple[tuple[str, float, float], ...] = ()

    @property
    def matches(self) -> bool:
        return not self.differences

    def line(self) -> str:
        where = f"interaction {self.number}" if self.number is not None else "request"
        if self.matches:
            return f"{where} {self.request}: matches"
        shown = list(self.differences[:_SHOW_DIFFERENCES])
        if len(self.differences) > _SHOW_DIFFERENCES:
            shown.append(f"and {len(self.differences) - _SHOW_DIFFERENCES} more")
        return f"{where} {self.request}: " + "; ".join(shown)

    def to_json(self) -> dict[str, Any]:
        return {"number": self.number, "request": self.request, "kind": self.kind,
                "matches": self.matches, "differences": list(self.differences),
                "probabilities": [list(pair) for pair in self.probabilities]}


@dataclass(frozen=True)
class CassetteVerification:
    """Everything verify found for one cassette.

    `path` is the cassette as shown to the user, `rerecord` the command that records it again,
    `server` the live server it was compared with. `missing` means there was no cassette file.
    """

    path: str
    rerecord: str
    server: str
    tolerance: float
    checks: tuple[InteractionCheck, ...] = ()
    missing: bool = False

    @property
    def drifted(self) -> bool:
        return self.missing or any(not check.matches for check in self.checks)

    @property
    def matched(self) -> int:
        return sum(1 for check in self.checks if check.matches)

    def report(self) -> str:
        """The failure message: what changed, per interaction, and which cassette to re-record."""
        if self.missing:
            return (f"verify: there is no cassette at {self.path} to verify against {self.server}; "
                    f"record it: {self.rerecord}")
        lines = [f"cassette {self.path} no longer matches the live server {self.server} "
                 f"({len(self.checks) - self.matched} of {len(self.checks)} interactions differ; "
                 f"numbers compared within {self.tolerance:g}):"]
        lines += [f"  {check.line()}" for check in self.checks]
        lines.append(f"If the server changed on purpose, re-record the cassette: {self.rerecord}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {"cassette": self.path, "server": self.server, "rerecord": self.rerecord,
                "tolerance": self.tolerance, "missing": self.missing, "drifted": self.drifted,
                "interactions": [check.to_json() for check in self.checks]}


# ------------------------------------------------------------------------------ comparing


def _describe(request: Any) -> str:
    query = "&".join(f"{k}={v}" for k, v in request.query)
    return f"{request.method} {request.path or '/'}" + (f"?{query}" if query else "")


def _status(response: Mapping[str, Any]) -> tuple[Any, str]:
    status = response.get("status") or {}
    return status.get("code"), str(status.get("message") or "")


def _headers(response: Mapping[str, Any]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, values in (response.get("headers") or {}).items():
        values = values if isinstance(values, (list, tuple)) else [values]
        out.setdefault(str(name).lower(), []).extend(str(v) for v in values)
    return out


def _body(response: Mapping[str, Any]) -> bytes:
    return body_bytes((response.get("body") or {}).get("string"))


def _kind(value: Any) -> type:
    return float if _is_number(value) else type(value)


def _stable_health(recorded: Any, live: Any) -> tuple[Any, Any]:
    """Both /health documents with the members that follow the server's load reduced (`HEALTH_LOAD_MEMBERS`)."""
    if not (isinstance(recorded, dict) and isinstance(live, dict)):
        return recorded, live
    recorded, live = dict(recorded), dict(live)
    for name, how in HEALTH_LOAD_MEMBERS.items():
        if name not in recorded or name not in live:
            continue  # a member that comes or goes is a different server, not a different load
        mine, theirs = recorded[name], live[name]
        if how == "shared keys" and isinstance(mine, dict) and isinstance(theirs, dict):
            recorded[name] = {k: v for k, v in mine.items() if k in theirs}
            live[name] = {k: v for k, v in theirs.items() if k in mine}
        elif how == "kind" and _kind(mine) == _kind(theirs):
            recorded[name] = live[name] = None  # the same on both sides: no difference to report
    return recorded, live


def _show(value: Any) -> str:
    if value is _ABSENT:
        return "absent"
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= _SHOW else text[: _SHOW - 1] + "…"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _json_differences(recorded: Any, live: Any, where: str, tolerance: float, out: list[str]) -> None:
    if isinstance(recorded, dict) and isinstance(live, dict):
        for key in list(recorded) + [k for k in live if k not in recorded]:
            _json_differences(recorded.get(key, _ABSENT), live.get(key, _ABSENT), join(where, key), tolerance, out)
        return
    if isinstance(recorded, list) and isinstance(live, list):
        for index in range(max(len(recorded), len(live))):
            _json_differences(recorded[index] if index < len(recorded) else _ABSENT,
                              live[index] if index < len(live) else _ABSENT, join(where, index), tolerance, out)
        return
    if _is_number(recorded) and _is_number(live):
        gap = abs(float(recorded) - float(live))
        if not (gap <= tolerance) or not (math.isfinite(recorded) and math.isfinite(live)):
            out.append(f"body at {where or '/'} (recorded {_show(recorded)}, now {_show(live)}: "
                       f"differs by {gap:.4g}, more than {tolerance:g})")
        return
    if recorded is _ABSENT or live is _ABSENT or type(recorded) is not type(live) or recorded != live:
        out.append(f"body at {where or '/'} (recorded {_show(recorded)}, now {_show(live)})")


def _parse(raw: bytes) -> Any:
    value = Body(raw).json
    return _ABSENT if value is NOT_JSON else value


#: Where an answer holds a probability: a member of `probabilities`, or a member with one of these names.
PROBABILITY_MEMBERS = ("noul", "p", "confidence")


def probability_pairs(recorded: Mapping[str, Any], live: Mapping[str, Any]) -> list[tuple[str, float, float]]:
    """Every probability (a number in 0..1 under ``probabilities`` or named `PROBABILITY_MEMBERS`)
    that both JSON bodies hold at the same pointer: (pointer, recorded, live)."""
    pairs: list[tuple[str, float, float]] = []

    def walk(mine: Any, theirs: Any, where: str, probabilities: bool) -> None:
        if isinstance(mine, dict) and isinstance(theirs, dict):
            for key in mine:
                if key in theirs:
                    walk(mine[key], theirs[key], join(where, key), key == "probabilities")
        elif isinstance(mine, list) and isinstance(theirs, list):
            for index, (a, b) in enumerate(zip(mine, theirs)):
                walk(a, b, join(where, index), False)
        elif _is_number(mine) and _is_number(theirs) and (probabilities or where.rsplit("/", 1)[-1] in PROBABILITY_MEMBERS):
            if 0 <= mine <= 1 and 0 <= theirs <= 1:
                pairs.append((where, float(mine), float(theirs)))

    parsed_r, parsed_l = _parse(_body(recorded)), _parse(_body(live))
    if parsed_r is not _ABSENT and parsed_l is not _ABSENT:
        walk(parsed_r, parsed_l, "", False)
    return pairs


def compare_responses(recorded: Mapping[str, Any], live: Mapping[str, Any], *,
                      tolerance: float = DEFAULT_TOLERANCE, path: str | None = None) -> list[str]:
    """How the live response differs from the recorded one (both vcrpy response dicts, both
    already normalised by the cassette layer); empty when it still matches. `path` is the
    request's (a ``/health`` document's load members are compared as `HEALTH_LOAD_MEMBERS` says)."""
    differences: list[str] = []
    (code_r, message_r), (code_l, message_l) = _status(recorded), _status(live)
    if (code_r, message_r) != (code_l, message_l):
        differences.append(f"status (recorded {code_r} {message_r}, now {code_l} {message_l})".replace(" )", ")"))
    headers_r, headers_l = _headers(recorded), _headers(live)
    for name in list(headers_r) + [n for n in headers_l if n not in headers_r]:
        if name in UNCOMPARED_HEADERS:
            continue
        value_r, value_l = headers_r.get(name), headers_l.get(name)
        if value_r != value_l:
            shown_r = "absent" if value_r is None else repr(", ".join(value_r))
            shown_l = "absent" if value_l is None else repr(", ".join(value_l))
            differences.append(f"header {name} (recorded {shown_r}, now {shown_l})")
    body_r, body_l = _body(recorded), _body(live)
    if body_r != body_l:
        parsed_r, parsed_l = _parse(body_r), _parse(body_l)
        if parsed_r is not _ABSENT and parsed_l is not _ABSENT:
            if path == HEALTH_PATH:
                parsed_r, parsed_l = _stable_health(parsed_r, parsed_l)
            _json_differences(parsed_r, parsed_l, "", tolerance, differences)
        else:
            differences.append(f"body (recorded {_show(body_r.decode('utf-8', 'replace'))}, "
                               f"now {_show(body_l.decode('utf-8', 'replace'))})")
    return differences


def verify_interactions(recorded: Sequence[tuple[Any, Mapping[str, Any]]],
                        live: Sequence[tuple[Any, Mapping[str, Any]]], *, path: str, rerecord: str,
                        server: str, tolerance: float = DEFAULT_TOLERANCE,
                        missing: bool = False) -> CassetteVerification:
    """Pair the live exchanges with the recorded interactions and compare each pair.

    Both are ``(vcrpy Request, response dict)`` pairs, normalised by the cassette layer: the
    recorded ones as loaded from the cassette, the live ones as a recording would store them.
    """
    if not (tolerance >= 0 and math.isfinite(tolerance)):
        raise ValueError(f"the verify tolerance must be a finite number >= 0, got {tolerance!r}")
    if missing:
        return CassetteVerification(path=path, rerecord=rerecord, server=server, tolerance=tolerance, missing=True)
    free: dict[tuple[Any, ...], list[int]] = {}
    for index, (request, _) in enumerate(recorded):
        free.setdefault(match_key(request), []).append(index)
    verdicts: dict[int, InteractionCheck] = {}
    unrecorded: list[InteractionCheck] = []
    for request, response in live:
        slots = free.get(match_key(request))
        if not slots:
            unrecorded.append(InteractionCheck(
                None, _describe(request), ("the cassette has no recorded interaction for this request",),
                kind="not recorded"))
            continue
        index = slots.pop(0)
        verdicts[index] = InteractionCheck(index + 1, _describe(request),
                                           tuple(compare_responses(recorded[index][1], response, tolerance=tolerance,
                                                                 path=request.path)),
                                           probabilities=tuple(probability_pairs(recorded[index][1], response)))
    checks = [verdicts.get(index) or InteractionCheck(
        index + 1, _describe(request), ("the test no longer sends this request",), kind="not sent")
        for index, (request, _) in enumerate(recorded)]
    return CassetteVerification(path=path, rerecord=rerecord, server=server, tolerance=tolerance,
                                checks=tuple(checks + unrecorded))


@dataclass
class VerifyTotals:
    """What a whole verify run found, for the summary (merged across pytest-xdist workers)."""

    results: list[dict[str, Any]] = field(default_factory=list)

    def add(self, result: CassetteVerification) -> None:
        self.results.append(result.to_json())

    def lines(self) -> list[str]:
        cassettes = len(self.results)
        drifted = [r for r in self.results if r["drifted"]]
        interactions = sum(len(r["interactions"]) for r in self.results)
        matching = sum(1 for r in self.results for i in r["interactions"] if i["matches"])
        tolerances = sorted({r["tolerance"] for r in self.results})
        out = [f"verify: {cassettes} cassette{'s' if cassettes != 1 else ''}, {matching} of {interactions} "
               f"interactions match, {len(drifted)} cassette{'s' if len(drifted) != 1 else ''} drifted"
               + (f" (numbers within {', '.join(f'{t:g}' for t in tolerances)})" if tolerances else "")]
        for result in drifted:
            out.append(f"  re-record {result['cassette']}: {result['rerecord']}")
        return out

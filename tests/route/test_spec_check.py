"""The route's spec check below the plugin: each exchange held to its server's spec and counted,
with no pytest run around it (the plugin's `TestRoute` and the standalone proxy both use it)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_laya.route.modes import RouteKind
from pytest_laya.route.spec_check import LISTED_VIOLATIONS, SpecCheck
from pytest_laya.servers.handle import ServerHandle
from pytest_laya.specs.conformance import Conformance, SpecViolationError
from pytest_laya.wire.exchange import Exchange
from pytest_laya.wire.spec_name import SpecName


@dataclass
class Run:
    spec_document: SpecName | None = None
    conformance_mode: str = "enforce"
    api_key: Any = None
    progress: Any = None
    servers: dict[str, str] = field(default_factory=dict)
    notes: dict[str, list[str]] = field(default_factory=dict)
    conformance: Conformance = field(default_factory=Conformance)

    def health_of(self, server: Any) -> None:
        return None

    def tracker(self) -> Conformance:
        return self.conformance

    def note(self, section: str, line: str) -> None:
        self.notes.setdefault(section, []).append(line)

    def server_label(self, server: Any) -> str:
        return f"{server.kind} {server.url}"


@dataclass
class Route:
    server: ServerHandle
    nodeid: str = "test_x.py::test_x"
    kind: RouteKind = RouteKind.CAPTURE
    handle: Any = None
    cassette_path: Path | None = None
    enforce: bool = True
    fake: Any = None
    violations: list[str] = field(default_factory=list)


def _decision(probability: float) -> Exchange:
    body = {"model": "m", "answers": {"refund": {"type": "noul", "noul": probability, "confidence": 0.5}},
            "usage": {"input_tokens": 1, "output_tokens": 0}}
    sent = {"state": "Refund me.", "questions": {"refund": {"type": "noul", "instructions": "Refund?"}}}
    return Exchange(method="POST", url="http://laya.test/v1/systemone", path="/v1/systemone", status=200,
                    headers={"content-type": "application/json"}, body=json.dumps(body).encode(),
                    request_body=json.dumps(sent).encode(), elapsed_s=0.0)


def test_an_answer_that_breaks_the_spec_its_server_implements_fails_and_is_counted():
    run, route = Run(), Route(ServerHandle(url="http://laya.test", kind="live", spec="current"))
    check = SpecCheck(run, route)
    check(_decision(0.25))
    with pytest.raises(SpecViolationError, match="current"):
        check(_decision(1.5))
    assert check.claimed == "current" and run.servers == {"live http://laya.test": "current"}
    assert len(route.violations) == 1 and "/answers/refund/noul" in route.violations[0]


def test_the_run_lists_instead_when_it_only_reports_or_the_route_may_not_fail():
    run = Run(conformance_mode="report", spec_document=SpecName.CURRENT)
    route = Route(ServerHandle(url="http://laya.test", kind="live", spec="target"))
    SpecCheck(run, route)(_decision(1.5))  # --laya-spec current wins over what the server implements
    assert [line.split(": ", 1)[0] for line in run.notes[LISTED_VIOLATIONS]][:1] == ["test_x.py::test_x"]
    assert "(current spec)" in run.notes[LISTED_VIOLATIONS][0]

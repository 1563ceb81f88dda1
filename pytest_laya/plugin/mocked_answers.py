"""Decision answers that respx, pytest-httpx or an httpx ``MockTransport`` gave, held to the spec.

The switchboard never blocks a request another mock library answers in memory, and hands each
answer here: a ``/v1/systemone`` answer is checked against the spec it claims (its
``Laya-Spec`` header, else current; or ``--laya-spec``) and counted like any server's, so a
hand-written mock that breaks the spec fails the test with `SpecViolationError`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from pytest_laya.plugin.run import LayaRun
from pytest_laya.route.spec_check import LISTED_VIOLATIONS

__all__ = ["MOCKED_LABEL", "MockedAnswerCheck"]

#: How the summary and the report name answers that respx, pytest-httpx or a MockTransport gave.
MOCKED_LABEL = "mocked (respx, pytest-httpx, MockTransport)"


class MockedAnswerCheck:
    """A decision answer another mock library gave, held to the spec it claims (else current)
    like any server's: validation for free for respx and pytest-httpx users."""

    def __init__(self, run: LayaRun, refused: list[BaseException]) -> None:
        self.run = run
        self.refused = refused

    def __call__(self, request: Any, response: Any) -> None:
        from pytest_laya.intercept import exchange_of
        from pytest_laya.servers.claimed_spec import claimed_spec_of
        from pytest_laya.specs.conformance import SpecViolationError
        from pytest_laya.wire.routes import BATCH_PATH, DECIDE_PATH

        if str(request.method).upper() != "POST" or urlsplit(request.uri).path not in (DECIDE_PATH, BATCH_PATH):
            return
        exchange = exchange_of(request, response)
        chosen = self.run.spec_document
        if chosen is not None:
            spec, why = chosen.value, f"--laya-spec {chosen} was given"
        else:
            spec = claimed_spec_of(exchange.headers, None).name
            why = ("the mocked response says so in its Laya-Spec header" if spec == "target"
                   else "the mocked response claims no other (no Laya-Spec header)")
        label = MOCKED_LABEL if spec == "current" else f"{MOCKED_LABEL}, claiming {spec}"
        self.run.servers.setdefault(label, spec)
        violations = self.run.tracker().check(exchange, server=label, claimed=spec)
        if not violations:
            return
        enforced = self.run.conformance_mode == "enforce"
        error = SpecViolationError(exchange, spec, violations, claimed_by=why, target=urlsplit(request.uri).path,
                                   enforced=enforced)
        if not enforced:
            for violation in violations:
                self.run.note(LISTED_VIOLATIONS, f"{label} ({spec} spec): POST {exchange.path} -> "
                                                 f"{exchange.status}: {violation}")
            return
        self.refused.append(error)
        raise error

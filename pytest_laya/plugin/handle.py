"""`LayaServer`: the one per-test handle `laya_server` gives, in every mode.

Everything a `ServerHandle` is (`url`, `kind`, `spec`, `api_key`, `health()`, `identity()`,
`client()`), plus the test's `calls` whatever client made them and whatever the mode, and --
when the server is the fake (``--laya-mode=fake``, ``server="fake"`` or ``answers=``) -- the
fake's controls: `decide()` pins answers, `fail()`, `timeout()` and `delay()` script what the
next calls get, one step per call, in order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pytest

from pytest_laya.route.spec_check import answered_by_a_fault

if TYPE_CHECKING:  # pragma: no cover
    from pytest_laya.client import ServedLayaClient
    from pytest_laya.fake import FakeLayaServer
    from pytest_laya.fake.pins import Pin, QuestionsMatcher, StateMatcher
    from pytest_laya.plugin.routes import TestRoute
    from pytest_laya.plugin.run import LayaRun
    from pytest_laya.servers.handle import ServerHandle, ServerKind
    from pytest_laya.wire.calls import Calls
    from pytest_laya.wire.exchange import Exchange
    from pytest_laya.wire.health import Health
    from pytest_laya.wire.identity import ServedIdentity

__all__ = ["LayaServer", "skip_scripted_faults"]


def skip_scripted_faults(route: TestRoute, fake: FakeLayaServer) -> None:
    """`laya_fake_server`'s route checks its answers against the spec, but not one its fault
    script sent (``garbage_body()``, ``status(503)``...): the test asked for it, so it is no violation."""
    laya = route.laya
    observer = laya.observer if laya is not None else None
    if laya is None or observer is None:
        return

    def unless_scripted(exchange: Exchange) -> None:
        if not answered_by_a_fault(fake, exchange):
            observer(exchange)

    laya.observer = unless_scripted


class LayaServer:
    """The test's Laya server and what it saw: its `ServerHandle`'s face, `calls`, and on the fake its controls."""

    def __init__(self, route: TestRoute, request: pytest.FixtureRequest, run: LayaRun) -> None:
        self.route = route
        self.server: ServerHandle = route.server
        self._request = request
        self._run = run

    # -- the server (as `ServerHandle`)

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def kind(self) -> ServerKind:
        return self.server.kind

    @property
    def spec(self) -> str:
        return self.server.spec

    @property
    def api_key(self) -> Any:
        return self.server.api_key

    @property
    def model(self) -> str | None:
        return self.server.model

    @property
    def recorded_from(self) -> str | None:
        return self.server.recorded_from

    @property
    def label(self) -> str | None:
        return self.server.label

    def client(self, **kwargs: Any) -> ServedLayaClient:
        return self.server.client(**kwargs)

    def health(self) -> Health:
        return self.server.health()

    def identity(self) -> ServedIdentity | None:
        return self.server.identity()

    def __repr__(self) -> str:
        return f"<LayaServer {self.kind} {self.url} calls={len(self.calls)}>"

    @property
    def calls(self) -> Calls:
        """Every decision call the test made to this server, from any client, in the order sent,
        answered or not (`Call.outcome`), with ``assert_called_once_with``-style checks
        (`pytest_laya.wire.calls.Calls`)."""
        from pytest_laya.wire.calls import Calls

        laya = self.route.laya
        return laya.calls if laya is not None else Calls()

    # -- the fake's controls

    def decide(self, answers: Mapping[str, Any], *, state: StateMatcher = None, questions: QuestionsMatcher = None,
               times: int | None = None) -> Pin:
        """Pin answers by question id for this test: ``laya_server.decide({"team": "billing", "urgent": 0.95})``
        (docs/fake.md, "Forcing a decision"); checked and removed at the test's teardown."""
        from pytest_laya.plugin.markers import track_test_pin

        route = self._fake_route("decide")
        pin: Pin = route.fake.laya.pin(answers, state=state, questions=questions, times=times,
                                  where=f"laya_server.decide(...) in {self._request.node.nodeid}")
        track_test_pin(self._request, self._run, pin)
        return pin

    def fail(self, status: int, retry_after: int | None = None, code: str | None = None) -> LayaServer:
        """The next call gets HTTP `status` with the spec's error body (a 503 carries Retry-After,
        `retry_after` or 1 s; `code` picks the problem code, e.g. ``"not_ready"``)."""
        self._fake_route("fail").steps.fail(status, retry_after=retry_after, code=code)
        return self

    def timeout(self) -> LayaServer:
        """The next call times out: in memory, the client library's own timeout at once
        (``httpx.ReadTimeout``; `TimeoutError` for http.client and urllib; requests' ``ReadTimeout``);
        over a socket, a delay longer than any client waits."""
        self._fake_route("timeout").steps.timeout()
        return self

    def delay(self, seconds: float) -> LayaServer:
        """The next call is answered normally, `seconds` late (a real wait; `timeout()` needs none)."""
        self._fake_route("delay").steps.delay(seconds)
        return self

    def _fake_route(self, what: str) -> TestRoute:
        __tracebackhide__ = True
        if self.route.fake is None:
            pytest.fail(f"laya_server.{what}() scripts the fake, but this test's server is {self.kind} "
                        f"(--laya-mode={self._run.mode}): run with --laya-mode=fake, or mark the test "
                        f"@pytest.mark.laya(server='fake')", pytrace=False)
        return self.route

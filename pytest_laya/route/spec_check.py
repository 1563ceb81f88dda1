"""`SpecCheck`: a route's observer, holding each exchange to the spec its server claims.

Which spec: ``--laya-spec`` when given; else, for a replayed server, the spec its cassette was
recorded under; else the ``Laya-Spec`` header of the response, else the server's ``/health``
``spec``, else current. Every response is counted in the run's conformance tally; one that
breaks its spec raises `SpecViolationError` when the run enforces it and the route may fail its
test, and is listed in the summary otherwise.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pytest_laya.wire.spec_name import SpecName

if TYPE_CHECKING:  # pragma: no cover
    from pytest_laya.cassettes import CassetteHandle
    from pytest_laya.cassettes.derived import Extra
    from pytest_laya.route.modes import RouteKind
    from pytest_laya.servers.handle import ServerHandle
    from pytest_laya.specs.conformance import Conformance
    from pytest_laya.wire.exchange import Exchange
    from pytest_laya.wire.health import Health

__all__ = ["LISTED_VIOLATIONS", "RouteView", "RunTally", "SpecCheck", "answered_by_a_fault", "replay_verdicts", "replayed_spec"]

#: The summary section listing violations that failed no test (report mode, laya_fake_server).
LISTED_VIOLATIONS = "spec violations (listed, not failing)"


class RunTally(Protocol):
    """What a route needs of its run (`pytest_laya.plugin.LayaRun`): settings, and the tallies it adds to."""

    api_key: Any
    conformance_mode: str
    servers: dict[str, str]
    progress: Any

    @property
    def spec_document(self) -> SpecName | None: ...

    def health_of(self, server: Any) -> Health | None: ...

    def tracker(self) -> Conformance: ...

    def note(self, section: str, line: str) -> None: ...

    def server_label(self, server: Any) -> str: ...


class RouteView(Protocol):
    """What the check reads of its route (`pytest_laya.plugin.routes.TestRoute`) and the violations it adds."""

    nodeid: str
    server: ServerHandle
    kind: RouteKind
    handle: CassetteHandle | None
    cassette_path: Path | None
    enforce: bool
    fake: Any
    violations: list[str]


def answered_by_a_fault(fake: Any, exchange: Exchange) -> bool:
    """Whether the fake's answer to `exchange` was a fault the test scripted (its latest call with that body)."""
    sent = exchange.request_body
    for call in reversed(fake.calls):
        if call.content == sent:
            return bool(call.fault is not None)
    return False


class SpecCheck:
    """The route's observer: each exchange held to its claimed spec and counted in the run's tally."""

    def __init__(self, run: RunTally, route: RouteView) -> None:
        self.run = run
        self.route = route
        self.label = run.server_label(route.server)
        #: The spec the first exchange was held to (a recording's provenance names it).
        self.claimed: str | None = None
        # The claim that holds for every exchange of this server, once worked out (see `claim`).
        self._fixed: tuple[Any, tuple[str, str]] | None = None
        # Whether each spec describes a (method, path, status): asked of every exchange.
        self._described: dict[tuple[str, str, str, int], bool] = {}

    def _fixed_claim(self, server: Any) -> tuple[str, str] | None:
        """The claim that holds for every exchange of `server`, if one does (else each response says)."""
        chosen = self.run.spec_document
        if chosen is not None:
            return chosen.value, f"--laya-spec {chosen} was given"
        known = SpecName.document(server.spec)
        if known is None:
            return None
        if server.kind.replays:
            return known.value, "its cassette was recorded under it"
        return known.value, f"a {server.kind} server implements it"

    def claim(self, exchange: Exchange) -> tuple[str, str]:
        """(spec, why) for one exchange."""
        server = self.route.server
        fixed = self._fixed
        if fixed is not None and fixed[0] is server:
            return fixed[1]
        fixed_claim = self._fixed_claim(server)
        if fixed_claim is not None:
            self._fixed = (server, fixed_claim)
            return fixed_claim
        from pytest_laya.servers.claimed_spec import claimed_spec_of

        health = self.run.health_of(server) if not server.kind.replays else None
        claim = claimed_spec_of(exchange.headers, health)
        return claim.name, claim.of("the server")

    def __call__(self, exchange: Exchange) -> None:
        if self.run.progress is not None:
            self.run.progress.exchange(exchange)
        spec, why = self.claim(exchange)
        self.claimed = self.claimed or spec
        self.run.servers.setdefault(self.label, spec)
        if self.route.fake is not None and answered_by_a_fault(self.route.fake, exchange):
            return  # laya_server.fail(503): the test's own answer, a violation of neither spec
        path = exchange.path.split("?", 1)[0]
        asked = (spec, exchange.method, path, exchange.status)
        described = self._described.get(asked)
        if described is None:
            from pytest_laya.specs.conformance import SPECS

            described = self._described[asked] = SPECS[spec]().describes(exchange.method, path, exchange.status)
        if not described:
            # A route the spec lacks, answered other than its 404 or 405 (a 200 from /metrics).
            self.run.note("not checked: requests the specs do not describe",
                          f"{self.label}: {exchange.method} {path} -> {exchange.status}")
            return
        violations = self.run.tracker().check(exchange, server=self.label, claimed=spec)
        if exchange.method == "GET" and path == "/health" and exchange.status == 404:
            self.run.note("gaps", f"{self.label} has no /health (the current spec lets it; the target requires it)")
        if violations:
            self._violated(exchange, spec, why, violations)

    def _violated(self, exchange: Exchange, spec: str, why: str, violations: Any) -> None:
        from pytest_laya.specs.conformance import SpecViolationError

        route, handle = self.route, self.route.handle
        replayed = route.kind.replays and route.cassette_path is not None
        enforced = self.run.conformance_mode == "enforce" and route.enforce
        target = handle.shown_target(exchange.url) if handle is not None else exchange.path.split("?", 1)[0]
        error = SpecViolationError(exchange, spec, violations, cassette=str(route.cassette_path) if replayed else None,
                                   claimed_by=why, target=target, enforced=enforced)
        redact: Callable[[str], str] = handle.redact if handle is not None else str
        route.violations.append(redact(str(error)))
        if enforced:
            raise error
        summary = violations.summary()
        for violation in [*violations, *([summary] if summary else [])]:
            self.run.note(LISTED_VIOLATIONS, redact(f"{route.nodeid}: {self.label} ({spec} spec): "
                                                    f"{exchange.method} {target} -> {exchange.status}: {violation}"))


@functools.cache
def _specs_key() -> bytes:
    """The bundled specs' text, hashed: a verdict kept across runs is only as good as the specs it came from."""
    from pytest_laya.specs.conformance import SPECS

    digest = hashlib.sha256()
    for name, load in sorted(SPECS.items()):
        digest.update(name.encode() + b"\0" + Path(load().source).read_bytes() + b"\0")
    return digest.digest()


def replayed_spec(chosen: SpecName | None, provenance: Mapping[str, Any] | None) -> SpecName:
    """The spec a replayed server is held to before any response says: `chosen` (``--laya-spec``),
    else the one its cassette was recorded under (`provenance`: its ``metadata.pytest_laya``),
    else AUTO (each response's own claim)."""
    return chosen or SpecName.document((provenance or {}).get("spec")) or SpecName.AUTO


def _derive_verdicts(claimed_only: bool, chosen: SpecName | None, head: Any, interactions: Any) -> Any:
    """The verdicts on each replayed exchange as it will be played to a request like the recorded
    one: both specs' for a run that shows the conformance table, else its claimed spec's alone, as
    `SpecCheck.claim` claims it for a replay (`chosen`: ``--laya-spec``; else the spec the file
    was recorded under; else the response's own claim)."""
    from pytest_laya.cassettes.persist import provenance_of
    from pytest_laya.cassettes.request_ids import echo_ids
    from pytest_laya.intercept.laya_route import exchange_of
    from pytest_laya.servers.claimed_spec import claimed_spec_of
    from pytest_laya.specs.conformance import plain_verdicts

    try:
        exchanges = [exchange_of(request, echo_ids(response, request)) for request, response in interactions]
        if not claimed_only:
            return plain_verdicts(exchanges)
        fixed = replayed_spec(chosen, provenance_of(head))
        return plain_verdicts(exchanges, [fixed.value if fixed is not SpecName.AUTO else claimed_spec_of(e.headers, None).name
                                          for e in exchanges])
    except Exception:  # an exchange the check fails on: judged when it is played, where its error belongs
        return None


def replay_verdicts(*, claimed_only: bool = False, chosen: SpecName | None = None) -> Extra:
    """The spec verdicts a replayed file's entry in `cassettes.derived` keeps beside its interactions:
    a later run seeds `Conformance` with them and judges only exchanges that differ. `claimed_only`
    (a run that shows no conformance table, `Conformance.claimed_only`): the claimed spec's alone,
    the spec ``--laya-spec`` names being `chosen`; each kind of run keeps its own."""
    from pytest_laya.cassettes.derived import Extra
    from pytest_laya.specs.conformance import seed

    which = (b"claimed " + (chosen.value.encode() if chosen else b"-")) if claimed_only else b"both"
    return Extra("verdicts", lambda: _specs_key() + which, functools.partial(_derive_verdicts, claimed_only, chosen), seed)

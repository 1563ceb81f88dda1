"""Every exchange the kit sees, held to the spec its server claims and measured against both.

A response that breaks its server's spec fails the test (`SpecViolationError`); how well each
server meets each spec (operations and headers) is kept for the terminal summary and the JSON
report, so a run against today's servers also shows how far they are from the target. A run
that reads no table keeps only the claimed spec's rows (`Conformance(claimed_only=True)`).
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_laya.specs.spec import Spec, Violation, Violations
from pytest_laya.wire.exchange import Exchange
from pytest_laya.wire.headers import LoweredHeaders, lower_headers

__all__ = ["Conformance", "SpecViolationError", "SPECS", "plain_verdicts", "seed", "verdict_of", "verdicts_of"]

SPECS = {"current": Spec.current, "target": Spec.target}


class SpecViolationError(AssertionError):
    """A response broke the spec its server claims to implement."""

    def __init__(self, exchange: Exchange, spec: str, violations: list[Violation], *,
                 cassette: str | None = None, claimed_by: str | None = None, target: str | None = None,
                 enforced: bool = True) -> None:
        """`target` is the request's path and query as the message may show them (the project's
        filters applied; default `exchange.path`); `enforced` False: the run only reports violations,
        so the message does not advise doing so."""
        self.violations = violations
        self.cassette = cassette
        self.spec = spec
        listed = "\n".join(f"  {v}" for v in violations)
        summary = violations.summary() if isinstance(violations, Violations) else None
        if summary:
            listed += f"\n  {summary}"
        count = violations.total if isinstance(violations, Violations) else len(violations)
        counted = f"{count:,}" if not isinstance(violations, Violations) or violations.counted_all else f"at least {count:,}"
        source = ""
        if cassette:
            source = (f"\nThe response was replayed from the cassette {cassette}: record it again with "
                      f"--laya-record if the server changed, or fix the file if it was edited by hand.")
        why = ""
        if claimed_by:
            other = "current" if spec == "target" else "target"
            report = ", or --laya-conformance=report to list violations without failing" if enforced else ""
            why = (f"\nThe {spec} spec applies because {claimed_by}; pass --laya-spec {other} to hold this "
                   f"server to the {other} spec instead{report}.")
        super().__init__(
            f"{exchange.method} {target or exchange.path} -> {exchange.status} breaks the {spec} spec "
            f"({counted} violation{'s' if count != 1 else ''}):\n{listed}{source}{why}"
        )


@dataclass
class _Tally:
    operations: dict[str, bool] = field(default_factory=dict)
    headers: dict[str, bool] = field(default_factory=dict)
    exchanges: int = 0
    violations: int = 0

    def add(self, operation: str, documented: Sequence[str], violations: list[Violation]) -> None:
        self.exchanges += 1
        if not violations and _complete(violations):  # a conforming exchange: only what is new is noted
            if operation not in self.operations:
                self.operations[operation] = True
            headers = self.headers
            for key in _header_keys(operation, tuple(documented)):
                if key not in headers:
                    headers[key] = True
            return
        self.violations += violations.total if isinstance(violations, Violations) else len(violations)
        self.operations[operation] = self.operations.get(operation, True) and not violations
        broken = {v.where.split("/")[2] for v in violations if v.where.startswith("/headers/")}
        for name, key in zip(documented, _header_keys(operation, tuple(documented))):
            self.headers[key] = self.headers.get(key, True) and name not in broken


def _complete(violations: list[Violation]) -> bool:
    return not isinstance(violations, Violations) or (violations.counted_all and not violations.unlisted)


@functools.lru_cache(maxsize=256)
def _header_keys(operation: str, documented: tuple[str, ...]) -> tuple[str, ...]:
    """The tally's keys of an operation's documented headers (every conforming exchange notes them)."""
    return tuple(f"{operation} {name}" for name in documented)


#: One spec's verdict on an exchange: (spec name, operation, violations, documented headers).
Verdict = tuple[str, str, Violations, tuple[str, ...]]

#: Verdicts by exchange (`_fingerprint`): judging is a pure function of the exchange and the two
#: bundled specs, so an exchange seen before (a replayed one, judged in an earlier run: `seed`)
#: is not judged again. Bounded: memory stays flat over a run of any length.
_VERDICTS: OrderedDict[tuple[Any, ...], tuple[Verdict, ...]] = OrderedDict()
_VERDICTS_MAX = 1024
_REMEMBERED_BYTES = 16 * 1024  # an exchange's bodies at most, so the memo holds at most 16 MiB of them
_VERDICTS_LOCK = threading.Lock()


#: The violations of every verdict that has none, shared: a verdict is read, never changed
#: (`Conformance.check` gives its caller a copy).
_NO_VIOLATIONS = Violations()

#: Response headers a replayed response echoes from each request (`cassettes.request_ids.echo_ids`),
#: so their values differ on every call of a client that sends its own (the kit's).
_ECHOED = ("x-request-id", "traceparent")
#: What stands in a fingerprint for an echoed header's value that each spec accepts (no header value holds NUL).
_CONFORMING = "\0conforming"


def _fingerprint(exchange: Exchange, lowered: LoweredHeaders | None = None) -> tuple[Any, ...]:
    """All that `Spec.judge` reads of an exchange (`lowered`: its headers, lowered already); an echoed
    id both specs accept stands as `_CONFORMING` (`Spec.header_violations`: the verdict is the same
    for any such value)."""
    lowered = lower_headers(exchange.headers) if lowered is None else lowered
    headers: dict[str, str] = lowered
    for name in _ECHOED:
        value = dict.get(lowered, name)  # by its lower-case name, whatever lookup a subclass adds
        if value is not None and _conforms(exchange.method, exchange.path, exchange.status, name, value):
            if headers is lowered:
                headers = dict(lowered)  # lowered headers are read, never changed
            headers[name] = _CONFORMING
    return (exchange.method, exchange.path, exchange.status, tuple(headers.items()), exchange.body,
            exchange.request_body)


@functools.lru_cache(maxsize=1024)  # the recorded id of every replay of a client sending none
def _conforms(method: str, path: str, status: int, name: str, value: str) -> bool:
    """Whether every spec accepts `value` for the response header `name` on its own."""
    checks = _header_checks(method, path, status, name)
    return checks is not None and not any(check(value) for check in checks)


@functools.lru_cache(maxsize=256)
def _header_checks(method: str, path: str, status: int, name: str) -> tuple[Callable[[str], list[Violation]], ...] | None:
    checks = []
    for load in SPECS.values():
        check = load().header_check(method, path, status, name)
        if check is None:
            return None
        checks.append(check)
    return tuple(checks)


def _judged(exchange: Exchange, lowered: LoweredHeaders | None = None) -> tuple[Verdict, ...]:
    headers = lower_headers(exchange.headers) if lowered is None else lowered  # lowered once for both specs
    return tuple(_judged_by(name, exchange, headers) for name in SPECS)


def _judged_by(name: str, exchange: Exchange, headers: LoweredHeaders) -> Verdict:
    """One spec's verdict on `exchange` (`headers`: its headers, lowered)."""
    spec = SPECS[name]()
    path = exchange.path.split("?")[0]
    # A 404 or 405 to a route the spec lacks counts as its `x-unrouted` answer, not as a path.
    operation = f"{exchange.method} {path}" if spec.operation(exchange.method, path) else f"unrouted {exchange.status}"
    violations, documented = spec.judge(exchange.method, exchange.path, exchange.status, headers,
                                        exchange.body, request_body=exchange.request_body)
    if not violations and not violations.unlisted and violations.counted_all:
        violations = _NO_VIOLATIONS  # shared, as the verdicts `seed` reads back share it
    return name, operation, violations, tuple(documented)


def _remember(key: tuple[Any, ...], verdicts: tuple[Verdict, ...]) -> None:
    _remember_all(((key, verdicts),))


def _bodies_size(key: tuple[Any, ...]) -> int:
    """The bytes of an exchange's bodies in its fingerprint (the request's, the response's)."""
    body, request_body = key[4], key[5]
    return (len(body) if isinstance(body, (bytes, str)) else 0) + \
        (len(request_body) if isinstance(request_body, (bytes, str)) else 0)


def _remember_all(pairs: Sequence[tuple[tuple[Any, ...], tuple[Verdict, ...]]]) -> None:
    with _VERDICTS_LOCK:
        for key, verdicts in pairs:
            if _bodies_size(key) > _REMEMBERED_BYTES:
                continue
            _VERDICTS[key] = verdicts
            _VERDICTS.move_to_end(key)
        while len(_VERDICTS) > _VERDICTS_MAX:
            _VERDICTS.popitem(last=False)


def verdicts_of(exchange: Exchange) -> tuple[Verdict, ...]:
    """Both specs' verdicts on `exchange`, judged once per process (and per `seed`)."""
    lowered = lower_headers(exchange.headers)
    key = _fingerprint(exchange, lowered)
    try:
        with _VERDICTS_LOCK:
            found = _VERDICTS.get(key)
    except TypeError:  # a body given as parsed JSON: judged, not remembered
        return _judged(exchange, lowered)
    if found is None:
        found = _judged(exchange, lowered)
        _remember(key, found)
    return found


def verdict_of(exchange: Exchange, name: str) -> Verdict:
    """The verdict of the spec `name` on `exchange`: read from both specs' verdicts when they are
    known (judged before, or an earlier run's: `seed`), else judged by that spec alone, once per process."""
    lowered = lower_headers(exchange.headers)
    key = _fingerprint(exchange, lowered)
    one = (*key, name)
    try:
        with _VERDICTS_LOCK:
            found = _VERDICTS.get(key) or _VERDICTS.get(one)
    except TypeError:  # a body given as parsed JSON: judged, not remembered
        return _judged_by(name, exchange, lowered)
    if found is None:
        verdict = _judged_by(name, exchange, lowered)
        _remember(one, (verdict,))
        return verdict
    return next(verdict for verdict in found if verdict[0] == name)


def _copy(violations: Violations) -> Violations:
    copied = Violations(violations)
    copied.unlisted, copied.counted_all = violations.unlisted, violations.counted_all
    return copied


def plain_verdicts(exchanges: list[Exchange], claimed: list[str] | None = None) -> tuple[Any, ...]:
    """The verdicts on `exchanges` as built-in values, for a later process's `seed` (`cassettes.derived`):
    both specs', or (`claimed`: a spec for each exchange) the one each is held to."""
    def judged(exchange: Exchange, name: str | None) -> tuple[Verdict, ...]:
        return verdicts_of(exchange) if name is None else (verdict_of(exchange, name),)

    names: list[str | None] = list(claimed) if claimed is not None else [None] * len(exchanges)
    return tuple((key, tuple((name, operation, tuple((v.where, v.expected, v.actual, v.rule) for v in violations),
                              violations.unlisted, violations.counted_all, tuple(documented))
                             for name, operation, violations, documented in verdicts))
                 for key, verdicts in ((_fingerprint(e), judged(e, name)) for e, name in zip(exchanges, names)))


def seed(plain: Any) -> bool:
    """Remember verdicts `plain_verdicts` gave (an earlier run's: both specs', or one's, as
    `verdict_of` remembers one); False, and nothing kept, if `plain` is not such."""
    kept: list[tuple[tuple[Any, ...], tuple[Verdict, ...]]] = []
    names = sorted(SPECS)
    # The (name, operation, documented headers) of the file's verdicts repeat: each checked and kept once.
    parts: dict[Any, tuple[str, str, tuple[str, ...]]] = {}
    try:
        for key, verdicts in plain:
            if not isinstance(key, tuple) or len(key) != 6:
                return False
            rebuilt = []
            for name, operation, listed, unlisted, counted_all, documented in verdicts:
                if listed or unlisted or not counted_all:
                    violations = Violations(Violation(*map(str, v)) for v in listed)
                    violations.unlisted, violations.counted_all = int(unlisted), bool(counted_all)
                else:
                    violations = _NO_VIOLATIONS
                part = parts.get((name, operation, documented))
                if part is None:
                    part = parts[(name, operation, documented)] = (str(name), str(operation),
                                                                   tuple(str(d) for d in documented))
                rebuilt.append((part[0], part[1], violations, part[2]))
            judged = sorted(name for name, *_ in rebuilt)
            if judged == names:
                kept.append((key, tuple(rebuilt)))
            elif len(judged) == 1 and judged[0] in SPECS:
                kept.append(((*key, judged[0]), tuple(rebuilt)))
            else:
                return False
    except (TypeError, ValueError):
        return False
    _remember_all(kept)
    return True


class Conformance:
    """The conformance table: each server's exchanges against each spec.

    `claimed_only`: a run that shows no table (`pytest_laya.plugin.run.LayaRun.table_read`)
    holds each exchange to its claimed spec only, and its rows are those of the claimed specs:
    the other spec's verdicts are what only the table reads.
    """

    def __init__(self, *, claimed_only: bool = False) -> None:
        self._tallies: dict[tuple[str, str], _Tally] = defaultdict(_Tally)
        self.claimed_only = claimed_only

    def check(self, exchange: Exchange, *, server: str, claimed: str) -> Violations:
        """Record `exchange` against both specs (`claimed_only`: the claimed one); return the
        violations of the `claimed` one."""
        if self.claimed_only:
            name, operation, violations, documented = verdict_of(exchange, claimed)
            self._tallies[(server, name)].add(operation, documented, violations)
            return _copy(violations)
        claimed_violations = Violations()
        for name, operation, violations, documented in verdicts_of(exchange):
            self._tallies[(server, name)].add(operation, documented, violations)  # read, never kept
            if name == claimed:
                claimed_violations = _copy(violations)  # the caller's own
        return claimed_violations

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for (server, spec), tally in sorted(self._tallies.items()):
            out.append({
                "server": server,
                "spec": spec,
                "exchanges": tally.exchanges,
                "violations": tally.violations,
                "operations_met": sum(tally.operations.values()),
                "operations_seen": len(tally.operations),
                "headers_met": sum(tally.headers.values()),
                "headers_seen": len(tally.headers),
                "operations_failing": sorted(op for op, ok in tally.operations.items() if not ok),
                "operations": dict(sorted(tally.operations.items())),
                "headers": dict(sorted(tally.headers.items())),
            })
        return out

    def merge_rows(self, rows: list[dict[str, Any]]) -> None:
        """Fold in `rows()` of another `Conformance` (a pytest-xdist worker's), exactly.

        Exchanges and violations add up; an operation or a header is met only if it is met in
        every tally that saw it, so the merged counts are those one process would have seen.
        """
        for row in rows:
            if not isinstance(row.get("operations"), dict) or not isinstance(row.get("headers"), dict):
                raise ValueError("a conformance row without its 'operations' and 'headers' maps cannot be merged exactly")
            tally = self._tallies[(row["server"], row["spec"])]
            tally.exchanges += int(row["exchanges"])
            tally.violations += int(row["violations"])
            for operation, met in row["operations"].items():
                tally.operations[operation] = tally.operations.get(operation, True) and bool(met)
            for header, met in row["headers"].items():
                tally.headers[header] = tally.headers.get(header, True) and bool(met)


SpecViolationError.__module__ = "pytest_laya.specs"  # where users import it from, as tracebacks show it

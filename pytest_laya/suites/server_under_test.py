"""The server the HTTP contract checks: raw requests, each response held to the chosen spec.

Why raw requests: the contract has to send what no well-behaved client sends (malformed JSON, a
wrong media type, a body over the limit) and read the status and body exactly as they arrive.
Every response still goes through the plugin's observer, so it is validated against the spec
the run claims and counted in the conformance table like every response `laya_client` sees.

Under the current spec each response is also checked against the target, and the target rules
it breaks are collected (`ServerUnderTest.rule_gaps`): a run against today's servers shows how
far they are from the target, rule by rule, without failing on it. A check of a behaviour only
the target asks for reports the gap through `Check.target_gap`: xfailed with the reason under
the current spec, failed under the target.

A wrong status is the cause; the spec violations of that body follow from it. So a raw
response's violations wait until `Check.expect` has checked its status, and a refused decision's
wait for the client's error: each failure message names the status first, then the violations,
and says each thing once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import httpx
import pytest

from pytest_laya.client import DECIDE_PATH, Exchange, ServedLayaClient
from pytest_laya.client.base import loopback_direct, ssl_context
from pytest_laya.servers import ClaimedSpec, claimed_spec_of
from pytest_laya.specs import Spec
from pytest_laya.specs.conformance import SpecViolationError
from pytest_laya.suites.behaviour import Tolerance
from pytest_laya.wire.decision import Decision
from pytest_laya.wire.headers import REQUEST_ID_HEADER, new_request_id
from pytest_laya.wire.problems import printable
from pytest_laya.wire.redaction import MASK
from pytest_laya.wire.requests import MAX_BODY_BYTES, MAX_QUESTIONS, MAX_STATE_CHARS
from pytest_laya.wire.spec_name import SpecName
from pytest_laya.wire.urls import redact_url

__all__ = [
    "LIMIT_NAMES",
    "DOCUMENTED_LIMITS",
    "Limits",
    "parse_limit_options",
    "resolve_limits",
    "resolve_spec",
    "ServerUnderTest",
    "Check",
    "CONTRACT_SECTION",
    "KEY_OPTION",
    "key_option",
    "INVARIANCE_OPTION",
    "invariance_option",
    "BEHAVIOUR_GAPS_SECTION",
    "RULE_GAPS_SECTION",
    "MEASURED_SECTION",
]

JSON = "application/json"
HEALTH_PATH = "/health"
#: One request's time limit: generous, because a real model on a busy machine is slow.
REQUEST_TIMEOUT_S = 60.0
#: Summary sections (pytest-laya's terminal summary prints them before the conformance table).
CONTRACT_SECTION = "server contract"
BEHAVIOUR_GAPS_SECTION = "target gaps: behaviours only the target spec asks for (their checks xfailed)"
RULE_GAPS_SECTION = "target gaps: target-spec rules these responses broke"
MEASURED_SECTION = "behaviour measured"

#: The request limits the contract probes.
LIMIT_NAMES = ("max_questions", "max_state_chars", "max_body_bytes")
#: What each spec documents when the server publishes no limits: the current spec's Detail413
#: ("More than 64 questions, ..., a state over 50,000 characters, or a body over 2 MiB") and
#: the target's /health example (`limits`). tests/contract/test_server_contract.py holds them to the specs.
DOCUMENTED_LIMITS: Mapping[str, Mapping[str, int]] = {
    "current": {"max_questions": MAX_QUESTIONS, "max_state_chars": MAX_STATE_CHARS, "max_body_bytes": MAX_BODY_BYTES},
    "target": {"max_questions": MAX_QUESTIONS, "max_state_chars": MAX_STATE_CHARS, "max_body_bytes": MAX_BODY_BYTES},
}
#: How this run is given the server's key, for messages (``--laya-api-key`` unless a front end,
#: such as ``python -m pytest_laya check``, stashes its own flag here).
KEY_OPTION = pytest.StashKey[str]()
#: How this run asks for invariance, for messages (``--laya-require-invariance`` unless a front end stashes its own).
INVARIANCE_OPTION = pytest.StashKey[str]()
_BODY_SHOWN = 300
_LINE_MAX = 220


@dataclass(frozen=True)
class Limits:
    """The limits the contract holds the server to, and where each one came from."""

    max_questions: int
    max_state_chars: int
    max_body_bytes: int
    #: name -> "--laya-limit", "/health" or "the <spec> spec's defaults".
    sources: Mapping[str, str]

    def describe(self) -> str:
        """``max_questions 64, ... (from /health)``, each limit's source named once."""
        sources = {self.sources[name] for name in LIMIT_NAMES}
        if len(sources) == 1:
            return ", ".join(f"{name} {getattr(self, name)}" for name in LIMIT_NAMES) + f" (from {sources.pop()})"
        return ", ".join(f"{name} {getattr(self, name)} (from {self.sources[name]})" for name in LIMIT_NAMES)


def parse_limit_options(values: list[str]) -> dict[str, int]:
    """``["max_questions=32", ...]`` -> ``{"max_questions": 32}``; ValueError says what to fix."""
    limits: dict[str, int] = {}
    for value in values:
        name, sep, number = value.partition("=")
        name = name.strip()
        if not sep or name not in LIMIT_NAMES:
            raise ValueError(f"--laya-limit {value!r}: use NAME=N with NAME one of {', '.join(LIMIT_NAMES)}")
        try:
            limits[name] = int(number)
        except ValueError:
            raise ValueError(f"--laya-limit {value!r}: N must be a whole number") from None
        if limits[name] < 1:
            raise ValueError(f"--laya-limit {value!r}: N must be at least 1")
    return limits


def resolve_limits(spec_name: str, health: Any, overrides: Mapping[str, int]) -> Limits:
    """Each limit from --laya-limit, else from /health `limits`, else the chosen spec's default."""
    published = health.get("limits") if isinstance(health, Mapping) else None
    published = published if isinstance(published, Mapping) else {}
    values: dict[str, int] = {}
    sources: dict[str, str] = {}
    for name in LIMIT_NAMES:
        number = published.get(name)
        if name in overrides:
            values[name], sources[name] = overrides[name], "--laya-limit"
        elif isinstance(number, int) and not isinstance(number, bool) and number >= 1:
            values[name], sources[name] = number, "/health"
        else:
            values[name], sources[name] = DOCUMENTED_LIMITS[spec_name][name], f"the {spec_name} spec's defaults"
    return Limits(**values, sources=sources)


def key_option(config: pytest.Config) -> str:
    """The flag that gives this run the server's key, as the user typed the command."""
    return config.stash.get(KEY_OPTION, "--laya-api-key")


def invariance_option(config: pytest.Config) -> str:
    """The flag that requires invariance, as the user typed the command."""
    return config.stash.get(INVARIANCE_OPTION, "--laya-require-invariance")


class _OneLineStop:
    """Cuts a stop's traceback to `stop_run` on: pytest's terminal reporter formats the whole of
    it (about 70 frames, each with its arguments: 0.2-0.5 s of CPU) to print its one line."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        excinfo.traceback = excinfo.traceback.cut(path=__file__)


def stop_run(config: pytest.Config, message: str) -> NoReturn:
    """Ends the run with `message`, one line, and exit status 4 (a usage error)."""
    config.pluginmanager.register(_OneLineStop())
    pytest.exit(message, returncode=pytest.ExitCode.USAGE_ERROR)


def resolve_spec(chosen: str | None, first: Exchange, health: Any) -> ClaimedSpec:
    """The spec the run holds the server to: `chosen` (--laya-spec), else the one it claims.

    `first` is the run's first response (its GET /health) and `health` that document, if any;
    ``auto`` or None means: read the claim (`pytest_laya.servers.claimed_spec_of`).
    """
    named = SpecName.document(chosen)
    if named is not None:
        return ClaimedSpec(named.value, "chosen with --laya-spec")
    return claimed_spec_of(first.headers, health)


class ServerUnderTest:
    """One server, held to `spec_name`: raw requests and the served client, both observed."""

    def __init__(self, *, url: str, spec_name: str, api_key: Any,
                 observe: Callable[[Exchange], None] | None = None, timeout_s: float = REQUEST_TIMEOUT_S,
                 key_flag: str = "--laya-api-key") -> None:
        self.url = url
        #: The flag the user gives the key with, for the messages that ask for it.
        self.key_flag = key_flag
        self.spec_name = spec_name
        from pytest_laya.client.secret import Secret

        self.api_key = Secret.wrap(api_key)  # a Secret: printed as Secret('***'), revealed only to send
        self.timeout_s = timeout_s
        self._observe = observe
        # verify: httpx's own trust, from one context per process (a new one per client read the CA bundle).
        self._http = httpx.Client(timeout=httpx.Timeout(timeout_s), follow_redirects=False, verify=ssl_context(),
                                  mounts=loopback_direct(url))
        self._secrets = [self.api_key.reveal()] if self.api_key else []
        #: (where, expected) -> operation -> statuses of the responses that broke that target rule.
        self.rule_gaps: dict[tuple[str, str], dict[str, dict[int, None]]] = {}
        #: Measurement lines, noted in the summary after the gaps.
        self.measurements: list[str] = []
        #: The behaviour checks' tolerance: --laya-tolerance's (None: resolved from the server), resolved once.
        self.tolerance_given: float | None = None
        self.tolerance: Tolerance | None = None
        #: Whether option order and question interference fail past the tolerance (--laya-require-invariance).
        self.require_invariance = False
        #: The flag that asked for it, for messages.
        self.invariance_flag = "--laya-require-invariance"
        self._limits: Limits | None = None
        self.health: Any = None
        #: The status of the run's first GET /health (404: the server has none).
        self.health_status: int | None = None
        self._client: ServedLayaClient | None = None
        #: (path, message) of spec violations not reported yet, each waiting for its status to be checked.
        self._pending: list[tuple[str, str]] = []
        #: path -> the last response observed from it, as it came: the served client hands
        #: answers back in the order asked, whatever order the server sent them in.
        self.last_response: dict[str, Exchange] = {}

    @property
    def limits(self) -> Limits:
        """The limits the checks hold the server to, resolved once at the session's start."""
        if self._limits is None:
            raise RuntimeError("the server's limits are resolved when the session starts; none are set yet")
        return self._limits

    @limits.setter
    def limits(self, limits: Limits) -> None:
        self._limits = limits

    def hold_to(self, spec_name: str, observe: Callable[[Exchange], None]) -> None:
        """From now on, hold every response to `spec_name` through `observe` (the plugin's observer)."""
        self.spec_name = spec_name
        self._observe = observe

    # -- requests -----------------------------------------------------------------------

    def send(self, method: str, path: str, body: bytes | None = None, *, content_type: str | None = JSON,
             headers: Mapping[str, str] | None = None, auth: bool = True, observe: bool = True) -> Exchange:
        """One request as given; the response is validated (unless `observe` is False) and returned.

        Its violations, if any, are reported by `Check.expect` once the status is known right.
        """
        sent = {"Accept": "application/json, application/problem+json", "User-Agent": "pytest-laya-server-contract",
                REQUEST_ID_HEADER: new_request_id()}
        if content_type is not None and body is not None:
            sent["Content-Type"] = content_type
        if auth and self.api_key:
            sent["Authorization"] = f"Bearer {self.api_key.reveal()}"
        sent.update(headers or {})
        started = time.monotonic()
        try:
            response = self._http.request(method, self.url + path, content=body, headers=sent)
        except httpx.TransportError as exc:
            raise pytest.fail.Exception(f"{method} {path}: {self._failed_how(exc)} "
                                        f"({type(exc).__name__}: {self.redact(str(exc))})", pytrace=False) from None
        exchange = Exchange(method=method, url=self.url + path, path=path, status=response.status_code,
                            headers=response.headers, body=response.content, request_body=body,
                            elapsed_s=time.monotonic() - started)
        if observe:
            self.observe(exchange, defer=True)
        return exchange

    def _failed_how(self, exc: httpx.TransportError) -> str:
        """What a transport error means to the reader: a wait that ran out is not a dropped connection."""
        url = redact_url(self.url)
        if isinstance(exc, httpx.TimeoutException):
            return f"no response from {url} within {self.timeout_s:g} s"
        if isinstance(exc, httpx.ConnectError):
            return f"could not connect to {url}"
        return f"{url} closed the connection without a complete response"

    def post_at_once(self, payload: Any, count: int) -> list[Exchange]:
        """`payload` POSTed `count` times at once, each on its own thread; not observed (observe each after)."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=count) as pool:
            return list(pool.map(lambda _: self.post(payload, observe=False), range(count)))

    def key_refusal(self, health: Exchange, payload: Any) -> str | None:
        """Why no check can pass with this run's key (None: the server takes it, or needs none).

        A keyed server refuses every request without its key, but its /health may answer anyway
        (liveness), so unless `health` was refused, one decision (`payload`) is asked first.
        """
        x = health if health.status == 401 else self.post(payload, observe=False)
        if x.status != 401:
            return None
        if self.api_key:
            return (f"the server refused the API key given: {x.method} {x.path} answered 401; check the key "
                    f"passed with {self.key_flag} KEY (or LAYA_SERVED_API_KEY)")
        return (f"the server asks for an API key: {x.method} {x.path} without one answered 401; pass it with "
                f"{self.key_flag} KEY (or set LAYA_SERVED_API_KEY)")

    def post(self, payload: Any, path: str = DECIDE_PATH, **kwargs: Any) -> Exchange:
        """POST `payload` as JSON (the way a client would send it) to `path`."""
        return self.send("POST", path, json.dumps(payload, ensure_ascii=False).encode("utf-8"), **kwargs)

    def decide(self, state: Any, questions: Mapping[str, Any]) -> Decision:
        """A decision through the served client: parsed by its answer rules, every response observed.

        One client for the whole run, so its /health identity cache spares a read per decision.
        """
        if self._client is None:
            self._client = ServedLayaClient(self.url, api_key=self.api_key, timeout_s=self.timeout_s,
                                            on_exchange=self.observe)
        return self._client.decide(state, questions)

    def observe(self, exchange: Exchange, *, defer: bool = False) -> None:
        """Hold `exchange` to the chosen spec and collect its target gaps.

        A violation fails the check at once when the status is a success and `defer` is False (a
        decision the client accepted); otherwise it waits in `pending_violations`, to follow the
        message about the status.
        """
        self.last_response[exchange.path] = exchange
        if self.spec_name == "current":
            for v in Spec.target().violations(exchange.method, exchange.path, exchange.status,
                                              exchange.headers, exchange.body):
                seen = self.rule_gaps.setdefault((_general_pointer(v.where), v.expected), {})
                seen.setdefault(f"{exchange.method} {exchange.path}", {})[exchange.status] = None
        assert self._observe is not None, "hold_to() names the spec before the first observed request"
        try:
            self._observe(exchange)
            return
        except SpecViolationError as exc:
            message = self.redact(str(exc))
        if defer or not 200 <= exchange.status < 300:
            self._pending.append((exchange.path, message))
            return
        # Outside the handler, so the violations are printed once, with no chained traceback.
        pytest.fail(message, pytrace=False)

    def pending_violations(self) -> str:
        """The violations not reported yet, as one text (empty if none); they count as reported now."""
        text = "\n".join(message for _, message in self._pending)
        self._pending.clear()
        return text

    def forget_health_violations(self) -> None:
        """Drop the pending violations of the client's own /health reads (the health checks report those)."""
        self._pending = [(path, message) for path, message in self._pending if path != HEALTH_PATH]

    # -- words --------------------------------------------------------------------------

    def keep_secret(self, value: str) -> None:
        """Never show `value` (a token) in a message."""
        self._secrets.append(value)

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, MASK)
        return text

    def describe(self, exchange: Exchange) -> str:
        """``HTTP 200 application/json: {"model": ...}``, cut short and with tokens redacted."""
        media = exchange.headers.get("content-type", "no Content-Type")
        body = exchange.body[:_BODY_SHOWN].decode("utf-8", "replace")
        more = "..." if len(exchange.body) > _BODY_SHOWN else ""
        return self.redact(printable(f"HTTP {exchange.status} {media}: {body}") + more)

    def rule_gap_lines(self) -> list[str]:
        lines = []
        for (where, expected), seen in sorted(self.rule_gaps.items()):
            where_seen = "; ".join(f"{operation} {', '.join(map(str, sorted(statuses)))}"
                                   for operation, statuses in sorted(seen.items()))
            line = f"{where}: expected {expected} [{where_seen}]"
            lines.append(line if len(line) <= _LINE_MAX else line[: _LINE_MAX - 3] + "...")
        return lines

    def close(self) -> None:
        self._http.close()
        if self._client is not None:
            self._client.close()


def _general_pointer(where: str) -> str:
    """`where` with question ids and batch indexes generalised, so one rule is listed once."""
    parts = where.split("/")
    for i in range(1, len(parts) - 1):
        if parts[i] == "answers":
            parts[i + 1] = "<question>"
        elif parts[i] == "results" and parts[i + 1].isdigit():
            parts[i + 1] = "<i>"
    return "/".join(parts)


def json_body(exchange: Exchange) -> Any:
    """The body as JSON, or None when it is not JSON."""
    try:
        return json.loads(exchange.body)
    except ValueError:
        return None


class Check:
    """One check of the contract: the server, the run's notes, and how a target gap is reported."""

    def __init__(self, server: ServerUnderTest, note: Callable[[str, str], None], name: str) -> None:
        self.server = server
        self.name = name
        self._note = note

    @property
    def spec_name(self) -> str:
        return self.server.spec_name

    def measured(self, line: str) -> None:
        """Report a measurement in the summary (after the gaps)."""
        self.server.measurements.append(line)

    def fail(self, message: str) -> NoReturn:
        """Fail the check with `message`, followed by any spec violations not reported yet."""
        pending = self.server.pending_violations()
        if pending:
            message += "\nThe response also breaks the spec:\n" + pending
        pytest.fail(self.server.redact(message), pytrace=False)

    def conforms(self) -> None:
        """Fail on the spec violations not reported yet (the status was right, so they are the fault)."""
        pending = self.server.pending_violations()
        if pending:
            pytest.fail(pending, pytrace=False)

    def target_gap(self, what: str) -> NoReturn:
        """A behaviour only the target asks for is missing: xfailed under the current spec, failed under the target."""
        what = self.server.redact(what)
        if self.spec_name != "current":
            self.fail(what)
        self.conforms()  # a response that breaks the current spec fails, gap or not
        self._note(BEHAVIOUR_GAPS_SECTION, f"{self.name}: {what}")
        raise pytest.xfail.Exception(f"target gap: {what}", pytrace=False)  # a traceback no report shows costs ~0.1 s

    def expect(self, exchange: Exchange, status: int, what: str, *, code: str | None = None,
               today: tuple[int, ...] = ()) -> Any:
        """`exchange` must have `status` (under the target spec also the problem `code`); returns its JSON body.

        A status in `today` is what today's servers do where the target asks for `status`: under
        the current spec it is a target gap, not a failure.
        """
        body = json_body(exchange)
        if exchange.status == status:
            self.conforms()
            if code is not None and self.spec_name == "target":
                got = body.get("code") if isinstance(body, Mapping) else None
                if got != code:
                    self.fail(f"{what}: expected problem code {code!r}, got {got!r} ({self.server.describe(exchange)})")
            return body
        wanted = f"{status} {code}" if code else str(status)
        if self.spec_name == "current" and exchange.status in today:
            self.target_gap(f"{what}: answered {exchange.status}; the target asks for {wanted}")
        self.fail(f"{what}: expected HTTP {wanted}, got {self.server.describe(exchange)}")

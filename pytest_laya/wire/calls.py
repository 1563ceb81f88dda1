"""What a client sent and what it got back, as the protocol's own objects: `Call` and `Calls`.

A downstream service's tests must assert what the service asked Laya, not only what it did with
the answer. A `Call` is one ``/v1/systemone`` (or batch) request parsed into wire objects: its
state, its questions (`SentQuestion`: ``.type``, ``.instructions``, ``.criteria``), the model
it named, its headers with every credential redacted, and the response with its parsed
`Decision`. `Calls` is a list of them with ``assert_called_once_with``-style helpers whose
failures print a readable difference. Anything that sees an exchange (the fake, a cassette, an
interception layer) builds calls with `Call(...)`; parsing is lazy, so recording costs little
until a test looks. Protocol only: no httpx, no pytest.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pytest_laya.wire.decision import Decision, Provenance, parse_answers, parse_usage
from pytest_laya.wire.errors import LayaError
from pytest_laya.wire.headers import REQUEST_ID_HEADER, parse_server_timing
from pytest_laya.wire.identity import parse_served_by
from pytest_laya.wire.questions import normalize_questions
from pytest_laya.wire.redaction import REDACTED
from pytest_laya.wire.routes import BATCH_PATH

_T = TypeVar("_T")

__all__ = [
    "Call",
    "Calls",
    "SentQuestion",
    "redact_headers",
]

# Header names whose values are credentials. Authorization keeps its scheme ("Bearer <redacted>"),
# so a test can still assert that a bearer token was sent.
_SCHEMED = frozenset({"authorization", "proxy-authorization"})
_SECRET_NAME = re.compile(r"auth|token|secret|passw|api-?key|apikey|cookie|session|signature|credential", re.I)


@functools.lru_cache(maxsize=512)
def _secret_kind(name: str) -> int:
    """0: not a credential; 1: a scheme and credentials (Authorization); 2: a credential."""
    return 1 if name in _SCHEMED else 2 if _SECRET_NAME.search(name) else 0


def redact_headers(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> dict[str, str]:
    """Headers with lower-case names (repeats joined by ``", "``) and every credential redacted."""
    items = headers.items() if isinstance(headers, Mapping) else headers
    out: dict[str, str] = {}
    for name, value in items:
        name = str(name).lower()
        value = str(value)
        kind = _secret_kind(name)
        if kind == 1:
            scheme, _, credentials = value.strip().partition(" ")
            value = f"{scheme} {REDACTED}" if credentials.strip() else REDACTED
        elif kind == 2:
            value = REDACTED
        out[name] = f"{out[name]}, {value}" if name in out else value
    return out


@dataclass(frozen=True)
class SentQuestion:
    """One question as the client sent it: ``definition`` is the raw JSON object.

    `type`, `instructions` and `criteria` are read from it as sent (None where absent), so a
    test can assert ``call.questions["team"].criteria == {"billing": "...", "tech": "..."}``.
    """

    id: str
    definition: Any

    @property
    def type(self) -> Any:
        return self.definition.get("type") if isinstance(self.definition, Mapping) else None

    @property
    def instructions(self) -> Any:
        return self.definition.get("instructions") if isinstance(self.definition, Mapping) else None

    @property
    def criteria(self) -> Any:
        return self.definition.get("criteria") if isinstance(self.definition, Mapping) else None


_UNSET: Any = object()
#: What `Call.differences` (and the `Calls` assertions) compare, by keyword.
COMPARED = ("method", "path", "state", "states", "questions", "model", "headers", "body", "status", "request_id",
            "outcome")


def _json(raw: bytes | None) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None


class Call:
    """One decision request and its response, parsed on first use.

    Built from what crossed the wire: `method`, `path` (the request target, query included),
    the request `headers` (redacted here) and body bytes (`content`), and the response's
    `status`, `response_headers` and body (`response_content` bytes, or `response` already
    parsed). `status` is None when no response was sent (a reset connection, a timeout, a
    cassette miss); `outcome` then says why. The fake adds `fault` (the fault-script step that
    answered, e.g. ``"status(503)"``), `error` (why it refused a pinned answer) and `pinned`
    (the question ids a pin answered).
    """

    __slots__ = ("method", "path", "url", "_headers", "content", "status", "_response_headers", "_response_content",
                 "fault", "error", "pinned", "_outcome", "_cache")

    def __init__(
        self,
        *,
        method: str,
        path: str,
        headers: Mapping[str, str] | Iterable[tuple[str, str]] = (),
        content: bytes | None = None,
        status: int | None = None,
        response_headers: Mapping[str, str] | Iterable[tuple[str, str]] = (),
        response_content: bytes | None = None,
        response: Any = _UNSET,
        url: str | None = None,
        fault: str | None = None,
        error: str | None = None,
        pinned: Iterable[str] = (),
        outcome: str | None = None,
    ) -> None:
        self.method = method.upper()
        self.path = path
        self.url = url
        # Redacted on first use (recording stays cheap); the raw values are never shown.
        self._headers = headers
        self.content = content or b""
        self.status = status
        self._response_headers = response_headers
        self._response_content = response_content
        self.fault = fault
        self.error = error
        self.pinned = tuple(pinned)
        self._outcome = outcome
        # What is parsed from the call on first use; made then (most calls are never read).
        self._cache: dict[str, Any] | None = None if response is _UNSET else {"response": response}

    @property
    def outcome(self) -> str:
        """What became of the call: its status (``"200"``, ``"503"``), else why nothing came back
        (``"timeout"``, ``"CassetteMiss"``, ``"no response"``)."""
        if self._outcome is not None:
            return self._outcome
        return "no response" if self.status is None else str(self.status)

    def answered(self, *, status: int, response_headers: Iterable[tuple[str, str]], response_content: bytes | None) -> None:
        """Fill in the response of a call kept before it was answered (an interception layer does)."""
        self.status = status
        self._response_headers = response_headers
        self._response_content = response_content
        self._outcome = None
        self._cache = None

    def _cached(self, name: str, compute: Callable[[], _T]) -> _T:
        cache = self._cache
        if cache is None:
            cache = self._cache = {}
        try:
            return cache[name]  # type: ignore[no-any-return]
        except KeyError:
            value = cache[name] = compute()
            return value

    # -- the request

    @property
    def headers(self) -> dict[str, str]:
        """The request headers: lower-case names, every credential redacted (``Bearer <redacted>``)."""
        return self._cached("headers", lambda: redact_headers(self._headers))

    @property
    def response_headers(self) -> dict[str, str]:
        """The response headers, the same way."""
        return self._cached("response_headers", lambda: redact_headers(self._response_headers))

    @property
    def body(self) -> Any:
        """The request body parsed as JSON (None when it is not JSON)."""
        return self._cached("body", lambda: _json(self.content))

    @property
    def is_batch(self) -> bool:
        return self.path.split("?", 1)[0] == BATCH_PATH

    @property
    def state(self) -> Any:
        """The state asked about (None for a batch, or when the body has none: see `states`)."""
        body = self.body
        return body.get("state") if isinstance(body, Mapping) and not self.is_batch else None

    @property
    def states(self) -> tuple[Any, ...]:
        """Every state asked about: one, or a batch's."""
        body = self.body
        if not isinstance(body, Mapping):
            return ()
        if self.is_batch:
            states = body.get("states")
            return tuple(states) if isinstance(states, list) else ()
        return (body["state"],) if "state" in body else ()

    @property
    def questions(self) -> dict[str, SentQuestion]:
        """The questions as sent, by id, in the order sent."""
        def compute() -> dict[str, SentQuestion]:
            body = self.body
            raw = body.get("questions") if isinstance(body, Mapping) else None
            return {str(qid): SentQuestion(str(qid), q) for qid, q in raw.items()} if isinstance(raw, Mapping) else {}
        return self._cached("questions", compute)

    @property
    def model(self) -> Any:
        """The `model` the request named, or None."""
        body = self.body
        return body.get("model") if isinstance(body, Mapping) else None

    @property
    def request_id(self) -> str | None:
        """The X-Request-Id the request carried (None when it sent none)."""
        return self.headers.get(REQUEST_ID_HEADER.lower())

    # -- the response

    @property
    def response(self) -> Any:
        """The response body: parsed JSON, else its text; None when nothing was sent."""
        def compute() -> Any:
            raw = self._response_content
            if raw is None:
                return None
            parsed = _json(raw)
            return parsed if parsed is not None or raw.strip() == b"null" else raw.decode("utf-8", "replace")
        return self._cached("response", compute)

    @property
    def decision(self) -> Decision | None:
        """The answer as a `Decision`, when the call is a single decision answered 200 by rules-abiding answers."""
        def compute() -> Decision | None:
            if self.is_batch or self.status != 200 or not isinstance(self.response, Mapping):
                return None
            return self._decision(self.response)
        return self._cached("decision", compute)

    @property
    def decisions(self) -> tuple[Decision, ...]:
        """A batch's decisions, one per state (empty unless the batch was answered 200 in full)."""
        def compute() -> tuple[Decision, ...]:
            response = self.response
            if not self.is_batch or self.status != 200 or not isinstance(response, Mapping):
                return ()
            results = response.get("results")
            if not isinstance(results, list):
                return ()
            found = [self._decision(result, served_by=response.get("served_by")) for result in results]
            decided = [d for d in found if d is not None]
            return tuple(decided) if len(decided) == len(found) else ()
        return self._cached("decisions", compute)

    def _decision(self, body: Mapping[str, Any], served_by: Any = None) -> Decision | None:
        try:
            asked = normalize_questions({qid: q.definition for qid, q in self.questions.items()})
            answers = parse_answers(body.get("answers"), asked)
            usage = parse_usage(body.get("usage"))
            identity = parse_served_by(body.get("served_by", served_by))
        except LayaError:
            return None
        routing = body.get("routing")
        provenance = Provenance(
            url=self.url or self.path,
            request_id=self.response_headers.get(REQUEST_ID_HEADER.lower()) or self.request_id,
            served_by=identity,
            server_timing=parse_server_timing(self.response_headers.get("server-timing")),
            routing=routing if isinstance(routing, Mapping) else None,
        )
        model = identity.model if identity else (body.get("model") if isinstance(body.get("model"), str) else None)
        return Decision(answers=answers, usage=usage, model=model, provenance=provenance)

    # -- comparing

    def differences(self, **expected: Any) -> list[str]:
        """How this call differs from `expected` (keywords of `COMPARED`); empty when it matches.

        Only the keywords given are compared. `questions` takes a mapping of id -> definition
        (a dict or a ChoiceQuestion/ScoreQuestion/NoulQuestion), compared exactly, or a set of
        ids; `headers` a mapping whose every entry must be sent (any case; None: must be absent);
        everything else is compared exactly. `unittest.mock.ANY` matches anything, anywhere.
        """
        unknown = sorted(set(expected) - set(COMPARED))
        if unknown:
            raise TypeError(f"cannot compare a call on {', '.join(map(repr, unknown))}; use {', '.join(COMPARED)}")
        found: list[str] = []
        for name, want in expected.items():
            if name == "questions":
                found.extend(self._question_differences(want))
            elif name == "headers":
                found.extend(self._header_differences(want))
            elif name == "states":
                found.extend(_differences(_plain(want), list(self.states), "states"))
            else:
                found.extend(_differences(_plain(want), getattr(self, name), name))
        return found

    def _question_differences(self, want: Any) -> list[str]:
        sent = self.questions
        if isinstance(want, (set, frozenset)):
            missing = [qid for qid in sorted(want) if qid not in sent]
            extra = [qid for qid in sent if qid not in want]
            out = []
            if missing:
                out.append(f"questions: not sent {missing}")
            if extra:
                out.append(f"questions: sent {extra}, not expected")
            return out
        if not isinstance(want, Mapping):
            raise TypeError(f"questions= takes a mapping of id -> definition or a set of ids, got {type(want).__name__}")
        wire = {qid: _plain(q.to_wire() if hasattr(q, "to_wire") else q) for qid, q in want.items()}
        return _differences(wire, {qid: q.definition for qid, q in sent.items()}, "questions")

    def _header_differences(self, want: Any) -> list[str]:
        if not isinstance(want, Mapping):
            raise TypeError(f"headers= takes a mapping of name -> value, got {type(want).__name__}")
        out = []
        for name, value in want.items():
            sent = self.headers.get(str(name).lower())
            if value is None:
                if sent is not None:
                    out.append(f"headers/{str(name).lower()}: sent {sent!r}, expected absent")
            elif sent is None:
                out.append(f"headers/{str(name).lower()}: not sent (expected {value!r})")
            elif not (value == sent):
                out.append(f"headers/{str(name).lower()}: expected {value!r}, sent {sent!r}")
        return out

    def assert_matches(self, **expected: Any) -> None:
        """Raise AssertionError listing every difference from `expected` (see `differences`)."""
        __tracebackhide__ = True  # pytest shows the test's line, not this one
        found = self.differences(**expected)
        if found:
            raise AssertionError(f"{self.summary()} differs from what was expected:\n" + _lines(found))

    def summary(self) -> str:
        """One line: method, path, question ids, status (and fault or pin error)."""
        answered = self.outcome
        extra = f", {self.fault}" if self.fault else ""
        extra += f", pin error: {self.error}" if self.error else ""
        return f"{self.method} {self.path} questions={list(self.questions)} state={_short(self.state)} -> {answered}{extra}"

    def __repr__(self) -> str:
        return f"<Call {self.summary()}>"


class Calls(list["Call"]):
    """The calls a fake (or cassette) saw, oldest first, with assertions in unittest.mock's style.

    Each assertion compares the keywords it is given (`Call.differences`) and, when it fails,
    says which call differs where, or lists the calls there were.
    """

    @property
    def last(self) -> Call:
        if not self:
            raise AssertionError("no call was made")
        return self[-1]

    def assert_not_called(self) -> None:
        __tracebackhide__ = True
        if self:
            raise AssertionError(f"expected no call, got {len(self)}:\n{self._listing()}")

    def assert_call_count(self, count: int) -> None:
        __tracebackhide__ = True
        if len(self) != count:
            raise AssertionError(f"expected {count} call(s), got {len(self)}" + (f":\n{self._listing()}" if self else ""))

    def assert_called_once(self) -> None:
        __tracebackhide__ = True
        self.assert_call_count(1)

    def assert_called_once_with(self, **expected: Any) -> None:
        """Exactly one call, and it matches `expected`."""
        __tracebackhide__ = True
        if len(self) != 1:
            raise AssertionError(f"expected 1 call, got {len(self)}" + (f":\n{self._listing()}" if self else ""))
        self[0].assert_matches(**expected)

    def assert_called_with(self, **expected: Any) -> None:
        """The last call matches `expected`."""
        __tracebackhide__ = True
        self.last.assert_matches(**expected)

    def assert_any_call(self, **expected: Any) -> None:
        """Some call matches `expected`; else the closest one's differences are shown."""
        __tracebackhide__ = True
        if not self:
            raise AssertionError("expected a matching call, but no call was made")
        ranked = sorted(((call.differences(**expected), i) for i, call in enumerate(self)), key=lambda d: len(d[0]))
        found, index = ranked[0]
        if found:
            raise AssertionError(f"no call of {len(self)} matches; the closest, call {index + 1} "
                                 f"({self[index].summary()}), differs:\n" + _lines(found))

    def _listing(self) -> str:
        return "\n".join(f"  call {i + 1}: {call.summary()}" for i, call in enumerate(self))


# -- differences --------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """Tuples as lists, recursively: what JSON gives back, so (a, b) == [a, b] as expected."""
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _differences(want: Any, got: Any, where: str) -> list[str]:
    """Each place where `got` differs from `want`, by path (``questions/team/criteria``)."""
    if want == got:  # also ANY, on either side
        return []
    if isinstance(want, Mapping) and isinstance(got, Mapping):
        out = []
        for key, value in want.items():
            if key not in got:
                out.append(f"{where}/{key}: not sent (expected {_short(value, 200)})")
            else:
                out.extend(_differences(value, got[key], f"{where}/{key}"))
        out.extend(f"{where}/{key}: sent {_short(got[key], 200)}, not expected" for key in got if key not in want)
        return out
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        return [d for i, (w, g) in enumerate(zip(want, got)) for d in _differences(w, g, f"{where}/{i}")]
    return [f"{where}: expected {_short(want, 200)}, sent {_short(got, 200)}"]


def _lines(found: list[str]) -> str:
    return "\n".join(f"  {line}" for line in found)

"""Every case the shipped cassettes hold, once, for every server kind that records them.

A case is data: a decision asked through the plugin's `laya_client` (so the cassette holds what
a real client sends and reads, including laya-serve's /health read for identity), and/or raw
requests sent with httpx exactly as written (malformed JSON, a wrong media type, a body over the
limit: things the client never sends). `expected` says which statuses each server kind answers
with, so a server that changes behaviour fails here before its cassettes are re-recorded.

The tests in this directory run each case against each server kind; tests/cassettes/test_shipped_cassettes.py
reads these definitions too (the canary keys, and the decisions to replay and ask live). This is
the one source of recorded laya-serve traffic: the kit's tests read these cassettes
(tests/helpers/recorded.py), and tests/data/ holds only the system1 recordings, copied as given.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from recording_servers import admission_held

#: Server kinds (cassette sets) and the spec each is held to.
REFERENCE = "reference"
LAYA_SERVE = "laya-serve-0.4.15"
#: laya-serve with LAYA_JEV_STRICT=1: Jev's field set only in 200 answers (laya's serve.py
#: `_project_jev_strict`); errors, /health and headers are the default mode's.
LAYA_SERVE_STRICT = "laya-serve-0.4.15-strict"
SPEC_OF = {REFERENCE: "target", LAYA_SERVE: "current", LAYA_SERVE_STRICT: "current"}

#: The wrong API key a case sends. A canary, as the keyed servers' own key
#: (`recording_servers.SERVER_KEY`): neither may appear in any cassette, in any spelling
#: (tests/cassettes/test_shipped_cassettes.py looks).
WRONG_KEY = "sk-cassette-wrong-canary-40b7e2"
#: The name the tiny checkpoint is served as (the reference server's only model; one of laya-serve's).
MODEL = "tiny"

STATE = "I was charged twice for my order. Please refund the duplicate today."
STATE_TECHNICAL = "The app crashes every time I open the invoice page since yesterday's update."
STATE_GERMAN = ("Ich wurde für meine Bestellung zweimal belastet. Bitte erstatten Sie den doppelten "
                "Betrag noch heute, sonst kündige ich mein Abonnement.")

DEPARTMENT = {
    "type": "choice",
    "instructions": "Which team should handle this?",
    "criteria": {"billing": "Charges and refunds", "technical": "Software problems",
                 "shipping": "Deliveries and returns"},
}
DEPARTMENT_2 = {**DEPARTMENT, "criteria": {"billing": "Charges and refunds", "technical": "Software problems"}}
DEPARTMENT_12 = {**DEPARTMENT, "criteria": {
    "billing": "Charges, invoices and refunds", "technical": "Software problems and errors",
    "shipping": "Deliveries and tracking", "returns": "Returns and exchanges",
    "account": "Login, password and profile", "security": "Fraud and compromised accounts",
    "sales": "New purchases and quotes", "privacy": "Personal data requests",
    "accessibility": "Accessibility problems", "partnerships": "Resellers and partners",
    "feedback": "Suggestions and complaints", "other": "Anything else",
}}
URGENCY = {"type": "score", "instructions": "How urgent is the request?",
           "criteria": ["Not urgent", "Needs attention soon", "Needs attention immediately"]}
REFUND = {"type": "noul", "instructions": "Does the customer ask for a refund?"}
COMBINED = {"department": DEPARTMENT, "urgency": URGENCY, "refund": REFUND}


def long_state(min_chars: int) -> str:
    """A support thread of numbered messages, at least `min_chars` long (deterministic)."""
    lines = (
        "Customer: I was charged twice for order {n:04d} and the second charge is still pending.",
        "Agent: Thanks for reaching out. I can see two payments for order {n:04d}; let me check.",
        "Customer: It has been three days and my bank says the money has left my account.",
        "Agent: I have escalated the duplicate charge on order {n:04d} to our billing team.",
    )
    parts: list[str] = []
    n = 0
    while sum(len(p) + 1 for p in parts) < min_chars:
        parts.append(lines[n % len(lines)].format(n=1000 + n // len(lines)))
        n += 1
    return "\n".join(parts)


def body(questions: Mapping[str, Any] | None, state: Any = STATE, model: str | None = MODEL) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if model is not None:
        out["model"] = model
    if state is not None:
        out["state"] = state
    if questions is not None:
        out["questions"] = dict(questions)
    return out


@dataclass(frozen=True)
class Send:
    """One raw request. `json_body` is serialised here; `content` is sent as bytes, unparsed.

    `bearer`: ``"server"`` sends the server's own key when it has one, None sends no
    Authorization, anything else is sent as the token.
    """

    method: str
    path: str
    json_body: Any = None
    content: bytes | None = None
    content_type: str | None = "application/json"
    bearer: str | None = "server"

    def payload(self) -> bytes | None:
        if self.content is not None:
            return self.content
        return None if self.json_body is None else json.dumps(self.json_body, ensure_ascii=False).encode("utf-8")


@dataclass(frozen=True)
class Decide:
    """A decision through the plugin's `laya_client`."""

    state: Any
    questions: Mapping[str, Any]
    allow_truncation: bool = False


@dataclass(frozen=True)
class Case:
    """One cassette per server kind that records it.

    `server` is the configuration it needs: ``open``, ``keyed`` (an API key), ``busy`` (one
    admission slot, held by a stalled upload while `sends` go out) or ``warming`` (the
    reference server still loading while `sends` go out; `after_warm_up` is sent once it is
    ready). `expected` maps a server kind to the statuses of `sends` + `after_warm_up`.
    """

    name: str
    expected: Mapping[str, tuple[int, ...]]
    decide: Decide | None = None
    sends: tuple[Send, ...] = ()
    after_warm_up: tuple[Send, ...] = ()
    server: str = "open"

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(self.expected)


def _post(json_body: Any, **kwargs: Any) -> Send:
    return Send("POST", "/v1/systemone", json_body=json_body, **kwargs)


BOTH_200: dict[str, tuple[int, ...]] = {REFERENCE: (), LAYA_SERVE: ()}


def _both(status: int) -> dict[str, tuple[int, ...]]:
    return {REFERENCE: (status,), LAYA_SERVE: (status,)}


CASES: tuple[Case, ...] = (
    Case("health", _both(200), sends=(Send("GET", "/health"),)),
    Case("probes", {REFERENCE: (200, 200)}, sends=(Send("GET", "/livez"), Send("GET", "/readyz"))),
    Case("choice", BOTH_200, decide=Decide(STATE, {"department": DEPARTMENT})),
    Case("score", BOTH_200, decide=Decide(STATE, {"urgency": URGENCY})),
    Case("noul", BOTH_200, decide=Decide(STATE, {"refund": REFUND})),
    Case("combined", BOTH_200, decide=Decide(STATE, COMBINED)),
    Case("batch", _both(200), sends=(Send("POST", "/v1/systemone/batch",
                                          json_body={"model": MODEL, "states": [STATE, STATE_TECHNICAL],
                                                     "questions": COMBINED}),)),
    Case("long_state", BOTH_200, decide=Decide(long_state(10_000), COMBINED, allow_truncation=True)),
    Case("non_english_state", BOTH_200, decide=Decide(STATE_GERMAN, COMBINED)),
    Case("options_2", BOTH_200, decide=Decide(STATE, {"department": DEPARTMENT_2})),
    Case("options_12", BOTH_200, decide=Decide(STATE, {"department": DEPARTMENT_12})),
    Case("malformed_json", _both(400),
         sends=(_post(None, content=('{"model": "tiny", "state": "%s", "questions": {"refund": ' % STATE).encode()),)),
    Case("no_questions", _both(400), sends=(_post(body(None)),)),
    Case("no_state", _both(400), sends=(_post(body({"refund": REFUND}, state=None)),)),
    Case("invalid_question", _both(422), sends=(_post(body({"department": {
        "type": "ranking", "instructions": "Which team?", "criteria": {"billing": "Charges", "technical": "Bugs"}}})),)),
    Case("several_invalid_questions", _both(422), sends=(_post(body({
        "department": {"type": "ranking", "instructions": "Which team should handle this?",
                       "criteria": {"billing": "Charges", "technical": "Bugs"}},
        "urgency": {"type": "score", "instructions": "How urgent is the request?"},
    })),)),
    Case("too_many_questions", _both(413), sends=(_post(body({
        "q%02d" % i: {"type": "noul", "instructions": "Does the message mention topic %d?" % i} for i in range(65)})),)),
    Case("state_too_large", _both(413), sends=(_post(body({"refund": REFUND}, state=long_state(50_001)[:50_001])),)),
    # Over 2 MiB, the limit of both servers; one repeated letter, so git stores it in a few KB.
    Case("body_too_large", _both(413), sends=(_post(body({"refund": REFUND}, state="a" * (2 * 1024 * 1024 + 1))),)),
    Case("wrong_media_type", {REFERENCE: (415,), LAYA_SERVE: (200,)},
         sends=(_post(body({"refund": REFUND}), content_type="text/plain"),)),
    Case("unknown_model", {REFERENCE: (422,), LAYA_SERVE: (200,)},
         sends=(_post(body({"department": DEPARTMENT}, model="no-such-model")),)),
    Case("choice_without_criteria", _both(422), sends=(_post(body({"department": {
        "type": "choice", "instructions": "Which team should handle this?"}})),)),
    # Held to the spec's own answer for a route it lacks (`x-unrouted`), as every other answer is.
    Case("not_found", _both(404), sends=(Send("GET", "/nope"),)),
    Case("method_not_allowed", _both(405), sends=(Send("GET", "/v1/systemone"),)),
    Case("health_without_token", _both(200), server="keyed", sends=(Send("GET", "/health", bearer=None),)),
    Case("health_with_token", _both(200), server="keyed", sends=(Send("GET", "/health"),)),
    Case("keyed_choice", BOTH_200, server="keyed", decide=Decide(STATE, {"department": DEPARTMENT})),
    Case("missing_bearer", _both(401), server="keyed", sends=(_post(body({"refund": REFUND}), bearer=None),)),
    Case("wrong_bearer", _both(401), server="keyed", sends=(_post(body({"refund": REFUND}), bearer=WRONG_KEY),)),
    Case("overload", _both(503), server="busy", sends=(_post(body({"refund": REFUND})),)),
    Case("not_ready", {REFERENCE: (503, 503, 200, 200)}, server="warming",
         sends=(Send("GET", "/readyz"), _post(body({"refund": REFUND})), Send("GET", "/health")),
         after_warm_up=(Send("GET", "/readyz"),)),
)


#: What laya-serve in strict mode records: every answer shape, the errors and /health. Strict mode
#: changes only 200 answers, so each case answers as in the default mode.
STRICT_CASES = ("health", "choice", "score", "noul", "combined", "batch", "long_state", "unknown_model",
                "wrong_media_type", "malformed_json", "no_questions", "invalid_question", "too_many_questions",
                "health_without_token", "health_with_token", "keyed_choice", "missing_bearer")
CASES = tuple(
    dataclasses.replace(case, expected={**case.expected, LAYA_SERVE_STRICT: case.expected[LAYA_SERVE]})
    if case.name in STRICT_CASES else case
    for case in CASES
)


def cases_for(kind: str) -> list[Case]:
    return [case for case in CASES if kind in case.expected]


def decision_cases(kind: str) -> list[Case]:
    return [case for case in cases_for(kind) if case.decide is not None]


# ------------------------------------------------------------------------------ running a case


def case_params(kind: str) -> list[Any]:
    """`pytest.param`s of the cases `kind` records, each marked with its cassette file."""
    import pytest

    return [pytest.param(case, id=case.name, marks=pytest.mark.laya(cassette=f"{kind}/{case.name}.yaml"))
            for case in cases_for(kind)]


@functools.cache
def _tls_context() -> Any:
    """One TLS context for every case's client: a new one reads the CA bundle (~25 ms of CPU)."""
    import httpx

    return httpx.create_ssl_context()


def run(case: Case, kind: str, server: Any, client: Any) -> list[int]:
    """Play `case` against `server` (a `RunningServer`) and return the statuses of its sends.

    The decision goes through `client` (the plugin's `laya_client`, which holds every response
    to the spec); each raw response is held to the spec of `kind` here. Raises on a violation.
    """
    import httpx

    from pytest_laya import Spec

    spec = Spec.target() if SPEC_OF[kind] == "target" else Spec.current()
    statuses: list[int] = []
    if case.decide is not None:
        client.decide(case.decide.state, dict(case.decide.questions), allow_truncation=case.decide.allow_truncation)
    with httpx.Client(base_url=server.url, timeout=120.0, trust_env=False, verify=_tls_context()) as http:
        def send_all(sends: tuple[Send, ...]) -> None:
            for send in sends:
                statuses.append(_send(http, send, server.api_key, spec))

        if case.server == "busy":
            with admission_held(server, body({"refund": REFUND})):
                send_all(case.sends)
        else:
            send_all(case.sends)
        if case.after_warm_up:
            server.release_warm_up()
            send_all(case.after_warm_up)
    return statuses


def _send(http: Any, send: Send, server_key: str | None, spec: Any) -> int:
    headers: dict[str, str] = {}
    payload = send.payload()
    if payload is not None and send.content_type:
        headers["Content-Type"] = send.content_type
    token = server_key if send.bearer == "server" else send.bearer
    if token:
        headers["Authorization"] = f"Bearer {token}"
    response = http.request(send.method, send.path, content=payload, headers=headers)
    violations = spec.violations(send.method, send.path, response.status_code, response.headers, response.content)
    assert not violations, (f"{send.method} {send.path} -> {response.status_code} breaks the {spec.name} spec:\n"
                            + "\n".join(f"  {v}" for v in violations))
    return response.status_code

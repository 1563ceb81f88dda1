"""A broken twin for every check of the server contract (pytest_laya.suites.server).

Each twin is a loopback server (a `ScriptedServer`) that answers as the fake does, but for one
defect, written as a function rewriting the request it got or the fake's normal response.
`SERVER_TWINS` is the table: check name -> the twins that check must fail, and the words its
failure message must contain. tests/contract/test_server_contract_twins.py runs the whole suite
against each twin and holds it to exactly the failures the table names. A check that only
is only reported by default (option order, question interference: `REPORTED_BY_DEFAULT`) has
its twins here too, run with ``--laya-require-invariance``; without that flag, against the same
twin, the whole suite passes and the summary shows the measure.

Adding a check to the suite without a twin here fails the meta-test, which names the check.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_laya.fake import FakeLayaServer
from pytest_laya.faults import ReceivedRequest, Respond
from pytest_laya.suites.server import MIXED as CONTRACT_QUESTIONS
from pytest_laya.suites.server import STATE as CONTRACT_STATE
from pytest_laya.wire.headers import REQUEST_ID_HEADER

__all__ = ["KEY", "REPORTED_BY_DEFAULT", "SERVER_TWINS", "BrokenServer", "Measured", "answering"]

#: The key every twin is served with, so the two token checks run too.
KEY = "sk-twin-canary-5e07"
DECIDE = "/v1/systemone"
BATCH = "/v1/systemone/batch"

Fault = Callable[["Fakes", ReceivedRequest], Respond]


@dataclass(frozen=True)
class Fakes:
    """The fake's answers, with the key (`keyed`) and without one (`open`); never started."""

    keyed: FakeLayaServer
    open: FakeLayaServer
    #: Counts the decisions a fault has seen, for a fault that changes from one to the next.
    counter: Iterator[int] = field(default_factory=itertools.count)


@dataclass(frozen=True)
class BrokenServer:
    """A server with one defect, and what the suite must say about it."""

    defect: str
    fault: Fault
    #: Words the failure message of the check must contain.
    words: str
    #: The spec the run holds the server to, and the fake flavour that keeps it.
    spec: str = "target"
    flavor: str = "target"
    #: Checks that must fail beside the one the twin is for: the same defect, seen again.
    also_fails: tuple[str, ...] = ()
    #: More options for the run (``--laya-require-invariance`` for a check only reported by default).
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class Measured:
    """A check only reported by default: why, and a server that moves what it measures."""

    reason: str
    fault: Fault
    #: A line of the summary's "measured" section the run must print.
    summary: str


def answering(twin: BrokenServer | Measured) -> Callable[[ReceivedRequest], Respond]:
    """The `ScriptedServer` default for `twin`: the fake's answers, through the twin's fault."""
    flavor = twin.flavor if isinstance(twin, BrokenServer) else "target"
    fakes = Fakes(keyed=FakeLayaServer(api_key=KEY, flavor=flavor), open=FakeLayaServer(flavor=flavor))
    return lambda request: twin.fault(fakes, request)


# -- building blocks --------------------------------------------------------------------------

def _normal(fakes: Fakes, request: ReceivedRequest) -> Respond:
    return fakes.keyed.normal_response(request)


def _body(response: Respond) -> Any:
    return json.loads(response.payload)


def _with_body(response: Respond, body: Any) -> Respond:
    return Respond(response.status, body, headers=response.headers)


def _sent(request: ReceivedRequest) -> Any:
    try:
        return request.json()
    except ValueError:
        return None


def _resent(request: ReceivedRequest, payload: Any) -> ReceivedRequest:
    """`request` as if it had carried `payload`."""
    return dataclasses.replace(request, body=json.dumps(payload).encode("utf-8"))


def _decision_answers(body: Any) -> Iterator[dict[str, Any]]:
    """Every answer in a decision or batch body."""
    for answers in [body.get("answers", {})] + [r["answers"] for r in body.get("results", [])]:
        yield from answers.values()


def _answers_rewritten(change: Callable[[dict[str, Any]], None]) -> Fault:
    """A fault applying `change` to every answer of every 200 decision (single and batch)."""
    def fault(fakes: Fakes, request: ReceivedRequest) -> Respond:
        response = _normal(fakes, request)
        if response.status != 200 or not request.path.startswith(DECIDE):
            return response
        body = _body(response)
        for answer in _decision_answers(body):
            change(answer)
        return _with_body(response, body)
    return fault


def _refused_as(fakes: Fakes, request: ReceivedRequest, payload: Mapping[str, Any]) -> Respond:
    """The fake's refusal of `payload`, answered to `request` (same headers, same request id)."""
    response = _normal(fakes, _resent(request, dict(payload)))
    assert response.status >= 400, f"the fake answered {payload} with {response.status}, not a refusal"
    return response


def _publishing(limits: Mapping[str, int], fault: Fault | None = None) -> Fault:
    """/health publishes `limits`; everything else as `fault` (default: the fake) answers it.

    The fake keeps its own limits (64 questions, 50,000 characters, 2 MiB): a lower one
    published is a limit the server does not keep."""
    def published(fakes: Fakes, request: ReceivedRequest) -> Respond:
        response = (fault or _normal)(fakes, request)
        if request.path == "/health" and response.status == 200:
            body = _body(response)
            if "limits" in body:
                body["limits"] = {**body["limits"], **limits}
                return _with_body(response, body)
        return response
    return published


# -- the defects ----------------------------------------------------------------------------

def _health_status_degraded(fakes: Fakes, request: ReceivedRequest) -> Respond:
    # The health document says "degraded"; liveness only (no token) still says ok.
    response = _normal(fakes, request)
    if request.path != "/health" or len(_body(response)) == 1:
        return response
    return _with_body(response, {**_body(response), "status": "degraded"})


def _health_saying(**members: Any) -> Fault:
    """A fault giving the full /health document (not liveness only) these `members`."""
    def fault(fakes: Fakes, request: ReceivedRequest) -> Respond:
        response = _normal(fakes, request)
        body = _body(response)
        if request.path != "/health" or not members.keys() <= body.keys():
            return response
        return _with_body(response, {**body, **members})
    return fault


def _health_shows_everything_without_a_token(fakes: Fakes, request: ReceivedRequest) -> Respond:
    return (fakes.open if request.path == "/health" else fakes.keyed).normal_response(request)


def _health_needs_a_token(fakes: Fakes, request: ReceivedRequest) -> Respond:
    # /health without a token is refused, as every other route is: liveness needs a key.
    if request.path == "/health" and not request.header("authorization"):
        return _normal(fakes, dataclasses.replace(request, path=DECIDE, method="POST"))
    return _normal(fakes, request)


def _full_health_answered(response: Respond) -> Fault:
    """A fault answering the full health document (asked with the key) with `response`; liveness
    and decisions work."""
    def fault(fakes: Fakes, request: ReceivedRequest) -> Respond:
        if request.path == "/health" and request.header("authorization"):
            return response
        return _normal(fakes, request)
    return fault


def _health_another_methods_route(fakes: Fakes, request: ReceivedRequest) -> Respond:
    # /health exists for POST only: every GET is a 405, the key or not.
    if request.path == "/health":
        return Respond(405, {"detail": "Method Not Allowed"}, headers={"Allow": "POST"})
    return _normal(fakes, request)


# A proxy whose health backend is down.
_health_unavailable = _full_health_answered(Respond(502, "backend unavailable\n"))
# An HTML 500, which no spec allows. Behind laya-serve the answers carry no identity, so the client
# reads /health during the decision checks too: they must leave its violations to the health checks.
_health_crashes = _full_health_answered(Respond(500, "<html>Internal Server Error</html>", content_type="text/html"))


def _answers_grouped_by_type(fakes: Fakes, request: ReceivedRequest) -> Respond:
    # Yes/no answers first, then scores, then choices: one head per type, joined in its own order.
    response = _normal(fakes, request)
    if response.status != 200 or request.path != DECIDE:
        return response
    body = _body(response)
    rank = {"noul": 0, "score": 1, "choice": 2}
    body["answers"] = dict(sorted(body["answers"].items(), key=lambda item: rank[item[1]["type"]]))
    return _with_body(response, body)


def _least_probable_choice(answer: dict[str, Any]) -> None:
    if answer["type"] == "choice" and len(answer["probabilities"]) > 1:
        answer["choice"] = min(answer["probabilities"], key=answer["probabilities"].get)


def _probabilities_halved(answer: dict[str, Any]) -> None:
    if "probabilities" in answer:
        answer["probabilities"] = {k: round(p / 2, 4) for k, p in answer["probabilities"].items()}


def _noul_jitter(fakes: Fakes, request: ReceivedRequest) -> Respond:
    # Each request moves every yes/no answer by 0.004, up and down in turn: twice the same
    # request differs by 0.008 (over the 0.001 allowed), a batch from its states alone by no
    # more than the 0.01 padding may move it.
    if not request.path.startswith(DECIDE):
        return _normal(fakes, request)
    step = 0.004 if next(fakes.counter) % 2 else -0.004

    def jitter(answer: dict[str, Any]) -> None:
        if answer["type"] == "noul":
            answer["noul"] = round(min(1.0, max(0.0, answer["noul"] + step)), 4)
            answer["confidence"] = max(answer["noul"], round(1 - answer["noul"], 4))

    return _answers_rewritten(jitter)(fakes, request)


def _tie_broken_by_turns(fakes: Fakes, request: ReceivedRequest) -> Respond:
    # Every choice is a tie of its first two options, broken one way, then the other: twice the
    # same request moves no probability, yet decides differently.
    if not request.path.startswith(DECIDE):
        return _normal(fakes, request)
    turn = next(fakes.counter) % 2

    def tie(answer: dict[str, Any]) -> None:
        if answer["type"] != "choice":
            return
        keys = list(answer["probabilities"])
        if len(keys) == 2:
            answer["probabilities"] = {k: 0.5 for k in keys}
        else:
            rest = round(0.2 / (len(keys) - 2), 4)
            answer["probabilities"] = {k: 0.4 if i < 2 else rest for i, k in enumerate(keys)}
        answer["choice"] = keys[turn]
        answer["confidence"] = 0.0

    return _answers_rewritten(tie)(fakes, request)


#: The request id the `request-id-not-echoed` twin answers with, whatever the caller sent.
SERVER_CHOSEN_ID = "server-chosen-1"


def _request_id_not_echoed(fakes: Fakes, request: ReceivedRequest) -> Respond:
    response = _normal(fakes, request)
    return Respond(response.status, response.payload, headers={**(response.headers or {}), REQUEST_ID_HEADER: SERVER_CHOSEN_ID})


def _malformed_json_answered(fakes: Fakes, request: ReceivedRequest) -> Respond:
    if request.path == DECIDE and _sent(request) is None:
        return _normal(fakes, _resent(request, {"state": "x", "questions": {"q": {"type": "noul", "instructions": "?"}}}))
    return _normal(fakes, request)


def _no_questions_is_a_422(fakes: Fakes, request: ReceivedRequest) -> Respond:
    sent = _sent(request)
    if request.path == DECIDE and isinstance(sent, dict) and "questions" not in sent:
        return _refused_as(fakes, request, {**sent, "questions": {"q": {"type": "ranking", "instructions": "?"}}})
    return _normal(fakes, request)


def _empty_questions_answered(fakes: Fakes, request: ReceivedRequest) -> Respond:
    sent = _sent(request)
    if request.path == DECIDE and isinstance(sent, dict) and sent.get("questions") == {}:
        response = _normal(fakes, _resent(request, {**sent, "questions": {"q": {"type": "noul", "instructions": "?"}}}))
        return _with_body(response, {**_body(response), "answers": {}})
    return _normal(fakes, request)


def _all_invalid_is_a_400(fakes: Fakes, request: ReceivedRequest) -> Respond:
    # Only invalid questions: treated as nothing to answer (400), where the contract asks for a
    # 422 naming them. Beside a valid question, the 422 is right.
    response = _normal(fakes, request)
    sent = _sent(request)
    if (response.status == 422 and _body(response).get("code") == "invalid_question" and isinstance(sent, dict)
            and len(sent.get("questions") or {}) == 1):
        return _refused_as(fakes, request, {"state": "x"})
    return response


def _names_the_first_invalid_question_only(fakes: Fakes, request: ReceivedRequest) -> Respond:
    response = _normal(fakes, request)
    body = _body(response) if response.status == 422 else None
    if body and body.get("code") == "invalid_question" and len(body.get("errors", [])) > 1:
        return _with_body(response, {**body, "errors": body["errors"][:1]})
    return response


def _unknown_types_answered_as_noul(fakes: Fakes, request: ReceivedRequest) -> Respond:
    # A question of a type the server has never heard of is answered as yes/no; every other
    # malformation (a missing type, a choice without criteria) is still refused.
    sent = _sent(request)
    if not (request.path == DECIDE and isinstance(sent, dict) and isinstance(sent.get("questions"), dict)):
        return _normal(fakes, request)
    unknown = {qid: {**q, "type": "noul"} for qid, q in sent["questions"].items()
               if isinstance(q, dict) and isinstance(q.get("type"), str) and q["type"] not in ("choice", "score", "noul")}
    return _normal(fakes, _resent(request, {**sent, "questions": {**sent["questions"], **unknown}}) if unknown else request)


def _invalid_questions_refused(change: Callable[[dict[str, Any]], dict[str, Any]]) -> Fault:
    """A fault applying `change` to the body of every 422 ``invalid_question`` refusal."""
    def fault(fakes: Fakes, request: ReceivedRequest) -> Respond:
        response = _normal(fakes, request)
        body = _body(response) if response.status == 422 else None
        if body and body.get("code") == "invalid_question":
            return _with_body(response, change(body))
        return response
    return fault


def _questions_refused_from(count: int) -> Fault:
    """A fault refusing (413, as over the fake's own limit) a decision of `count` questions or more."""
    def fault(fakes: Fakes, request: ReceivedRequest) -> Respond:
        sent = _sent(request)
        if request.path == DECIDE and isinstance(sent, dict) and len(sent.get("questions") or {}) >= count:
            return _refused_as(fakes, request, {**sent, "questions": {f"q{i}": {"type": "noul", "instructions": "?"}
                                                                      for i in range(65)}})
        return _normal(fakes, request)
    return fault


def _state_refused_from(chars: int) -> Fault:
    """A fault refusing (413, as over the fake's own limit) a state of `chars` characters or more."""
    def fault(fakes: Fakes, request: ReceivedRequest) -> Respond:
        sent = _sent(request)
        if (request.path == DECIDE and isinstance(sent, dict) and isinstance(sent.get("state"), str)
                and len(sent["state"]) >= chars):
            return _refused_as(fakes, request, {**sent, "state": "x" * 50_001})
        return _normal(fakes, request)
    return fault


def _answers_cut_at(count: int) -> Fault:
    """A fault answering only the first `count - 1` questions of a decision of `count`, and
    refusing more (as a limit of `count` asks)."""
    def fault(fakes: Fakes, request: ReceivedRequest) -> Respond:
        response = _questions_refused_from(count + 1)(fakes, request)
        sent = _sent(request)
        if response.status != 200 or request.path != DECIDE or len(sent.get("questions") or {}) != count:
            return response
        body = _body(response)
        body["answers"] = dict(list(body["answers"].items())[: count - 1])
        return _with_body(response, body)
    return fault


def _invalid_questions_dropped_beside_valid_ones(fakes: Fakes, request: ReceivedRequest) -> Respond:
    # Beside a valid question, invalid ones are dropped silently and the rest answered; alone, refused.
    sent = _sent(request)
    if not (request.path == DECIDE and isinstance(sent, dict) and isinstance(sent.get("questions"), dict)):
        return _normal(fakes, request)
    valid = {qid: q for qid, q in sent["questions"].items()
             if _normal(fakes, _resent(request, {**sent, "questions": {qid: q}})).status == 200}
    if valid and len(valid) < len(sent["questions"]):
        return _normal(fakes, _resent(request, {**sent, "questions": valid}))
    return _normal(fakes, request)


def _request_id_must_be_a_uuid(fakes: Fakes, request: ReceivedRequest) -> Respond:
    # The target takes any 1-128 visible ASCII characters; this server only 32 hex digits.
    given = request.header(REQUEST_ID_HEADER)
    if request.path == DECIDE and given is not None and not (len(given) == 32 and all(c in "0123456789abcdef" for c in given)):
        return _refused_as(fakes, request, {"state": "x"})
    return _normal(fakes, request)


def _any_media_type_read_as_json(fakes: Fakes, request: ReceivedRequest) -> Respond:
    return _normal(fakes, dataclasses.replace(request, headers={**request.headers, "content-type": "application/json"}))


def _unknown_model_routed_anyway(fakes: Fakes, request: ReceivedRequest) -> Respond:
    sent = _sent(request)
    if isinstance(sent, dict) and "model" in sent:
        return _normal(fakes, _resent(request, {k: v for k, v in sent.items() if k != "model"}))
    return _normal(fakes, request)


def _any_token_accepted(fakes: Fakes, request: ReceivedRequest) -> Respond:
    return (fakes.open if request.path.startswith(DECIDE) else fakes.keyed).normal_response(request)


def _token_echoed_in_the_401(fakes: Fakes, request: ReceivedRequest) -> Respond:
    response = _normal(fakes, request)
    if response.status != 401:
        return response
    body = _body(response)
    return _with_body(response, {**body, "detail": f"{body.get('detail', 'unauthorized')}: got {request.header('authorization')!r}"})


def _missing_token_accepted(fakes: Fakes, request: ReceivedRequest) -> Respond:
    # A wrong token is refused, but a request with no Authorization header at all goes through.
    if request.path.startswith(DECIDE) and not request.header("authorization"):
        return fakes.open.normal_response(request)
    return _normal(fakes, request)


def _key_shown_in_the_401(fakes: Fakes, request: ReceivedRequest) -> Respond:
    # The 401 tells the caller the key it should have sent.
    response = _normal(fakes, request)
    if response.status != 401:
        return response
    return _with_body(response, {**_body(response), "detail": f"expected Authorization: Bearer {KEY}"})


def _batch_read_as_one_decision(fakes: Fakes, request: ReceivedRequest) -> Respond:
    # The batch route reads its body as a single decision's, which has no "states": a 400.
    if request.path == BATCH:
        return _normal(fakes, dataclasses.replace(request, path=DECIDE))
    return _normal(fakes, request)


def _batch_results(change: Callable[[list[Any]], list[Any]]) -> Fault:
    """A fault answering every 200 batch with `change` applied to its results; single decisions are whole."""
    def fault(fakes: Fakes, request: ReceivedRequest) -> Respond:
        response = _normal(fakes, request)
        if response.status != 200 or request.path != BATCH:
            return response
        body = _body(response)
        return _with_body(response, {**body, "results": change(body["results"])})
    return fault


# Each batch result leaves its last question unanswered.
_batch_results_missing_an_answer = _batch_results(
    lambda results: [{**result, "answers": dict(list(result["answers"].items())[:-1])} for result in results])


def _first_option_wins(answer: dict[str, Any]) -> None:
    if answer["type"] == "choice" and len(answer["probabilities"]) > 1:
        keys = list(answer["probabilities"])
        answer["probabilities"] = {k: 0.9 if i == 0 else round(0.1 / (len(keys) - 1), 4) for i, k in enumerate(keys)}
        answer["choice"] = keys[0]


def _noul_flips_beside_other_questions(fakes: Fakes, request: ReceivedRequest) -> Respond:
    sent = _sent(request)
    response = _normal(fakes, request)
    if response.status != 200 or not request.path.startswith(DECIDE) or len(sent["questions"]) < 2:
        return response
    body = _body(response)
    for answer in _decision_answers(body):
        if answer["type"] == "noul":
            answer["noul"] = round(1 - answer["noul"], 4)
    return _with_body(response, body)


class _Overlap:
    """Whether a decision overlapped another in flight: each waits up to `wait_s` for company.

    Only the suite's own decision (its state and its four questions) waits, so the other checks
    run at full speed; the identical requests the batching and replica checks send at once overlap.
    """

    def __init__(self, state: str, questions: Mapping[str, Any], wait_s: float = 0.5) -> None:
        self._state, self._questions, self._wait_s = state, list(questions), wait_s
        self._lock = threading.Condition()
        self._inflight = 0

    def __call__(self, request: ReceivedRequest) -> bool:
        sent = _sent(request)
        if request.path != DECIDE or not isinstance(sent, dict) or sent.get("state") != self._state \
                or list(sent.get("questions") or {}) != self._questions:
            return False
        with self._lock:
            self._inflight += 1
            self._lock.notify_all()
            company = self._lock.wait_for(lambda: self._inflight > 1, timeout=self._wait_s)
        # Leave once the others have seen the company too.
        time.sleep(0.05)
        with self._lock:
            self._inflight -= 1
        return company


def _answers_move_under_load() -> Fault:
    # Requests that overlap others (micro-batched together) get every yes/no answer 0.003 higher.
    overlapped = _Overlap(CONTRACT_STATE, CONTRACT_QUESTIONS)

    def fault(fakes: Fakes, request: ReceivedRequest) -> Respond:
        if not overlapped(request):
            return _normal(fakes, request)
        return _answers_rewritten(_noul_raised(0.003))(fakes, request)
    return fault


def _second_replica_differs() -> Fault:
    # Two replicas behind one address, told apart by served_by.device: requests overlapping others
    # are spread over both, and the second answers yes/no questions 0.003 higher.
    overlapped = _Overlap(CONTRACT_STATE, CONTRACT_QUESTIONS)
    turns = itertools.count()

    def fault(fakes: Fakes, request: ReceivedRequest) -> Respond:
        if not overlapped(request) or next(turns) % 2 == 0:
            return _normal(fakes, request)
        response = _answers_rewritten(_noul_raised(0.003))(fakes, request)
        body = _body(response)
        body["served_by"] = {**body["served_by"], "device": "cpu:1"}
        return _with_body(response, body)
    return fault


def _noul_raised(by: float) -> Callable[[dict[str, Any]], None]:
    def change(answer: dict[str, Any]) -> None:
        if answer["type"] == "noul":
            answer["noul"] = round(min(1.0, answer["noul"] + by), 4)
            answer["confidence"] = max(answer["noul"], round(1 - answer["noul"], 4))
    return change


def _batch_moves_answers(fakes: Fakes, request: ReceivedRequest) -> Respond:
    # A batch answers its states 0.002 higher on every yes/no question than each alone.
    response = _normal(fakes, request)
    if response.status != 200 or request.path != BATCH:
        return response
    body = _body(response)
    for answer in _decision_answers(body):
        _noul_raised(0.002)(answer)
    return _with_body(response, body)


# -- the tables -----------------------------------------------------------------------------

#: The checks that decide many times: a broken answer fails each of them.
BEHAVIOUR_CHECKS = ("test_batching_alone_and_in_a_batch", "test_batching_alone_and_among_concurrent_requests",
                    "test_determinism_the_same_request_again", "test_option_order_invariance",
                    "test_question_interference", "test_replicas_answer_alike")

#: check -> its broken twins. Every check of pytest_laya.suites.server is a key here (the
#: meta-test holds the table to the suite).
SERVER_TWINS: Mapping[str, tuple[BrokenServer, ...]] = {
    "test_health_answers_status_ok": (
        # The target spec's /health schema allows only "ok", so a spec violation would fail
        # first; the current spec allows any string, which leaves the check's own test.
        BrokenServer("health-status-degraded", _health_status_degraded,
                     'GET /health must be a JSON object with "status": "ok"', spec="current", flavor="laya-serve-0.4.15"),
        BrokenServer("health-unavailable", _health_unavailable, "GET /health: expected HTTP 200, got HTTP 502",
                     also_fails=("test_health_names_the_models_and_the_limits",)),
        # Under the target a server without /health fails, with the gap's words.
        BrokenServer("health-only-for-post", _health_another_methods_route,
                     "GET /health answered 405: the server has no /health; the target's health document says",
                     also_fails=("test_health_names_the_models_and_the_limits",
                                 "test_health_without_a_token_shows_liveness_only")),
    ),
    "test_health_names_the_models_and_the_limits": (
        # Either half of "ready and named" alone must fail the check.
        BrokenServer("health-not-ready", _health_saying(ready=False),
                     "a serving server's /health must say ready: true and name at least one model, got ready False, "
                     "models ['fake-laya']"),
        BrokenServer("health-names-no-model", _health_saying(models={}),
                     "a serving server's /health must say ready: true and name at least one model, got ready True, "
                     "models []"),
        BrokenServer("health-crashes-while-decisions-read-it", _health_crashes,
                     "GET /health: expected HTTP 200, got HTTP 500", spec="current", flavor="laya-serve-0.4.15",
                     also_fails=("test_health_answers_status_ok",)),
    ),
    "test_health_without_a_token_shows_liveness_only": (
        BrokenServer("health-shows-all-without-a-token", _health_shows_everything_without_a_token,
                     'GET /health without a token must show only {"status": "ok"}, got keys [\'limits\', \'models\','),
        BrokenServer("health-needs-a-token", _health_needs_a_token, "GET /health without a token: expected HTTP 200, got HTTP 401"),
    ),
    "test_a_decision_answers_every_question_in_order": (
        BrokenServer("answers-grouped-by-type", _answers_grouped_by_type,
                     "answers must come one per question in the order asked ['department', 'channel', 'urgency', 'refund'], "
                     "got ['refund', 'urgency', 'department', 'channel']"),
        # Broken answers fail every check that decides: the answer rules (the spec check's, named
        # by rule, and the client's) refuse them all.
        BrokenServer("least-probable-choice", _answers_rewritten(_least_probable_choice), "rule choice-most-probable",
                     also_fails=BEHAVIOUR_CHECKS),
        BrokenServer("probabilities-halved", _answers_rewritten(_probabilities_halved), "rule probabilities-sum",
                     also_fails=BEHAVIOUR_CHECKS),
    ),
    "test_determinism_the_same_request_again": (
        BrokenServer("noul-jitter", _noul_jitter, "determinism: the same request again (2 of 3): question 'refund' was answered",
                     also_fails=("test_batching_alone_and_in_a_batch", "test_batching_alone_and_among_concurrent_requests")),
        BrokenServer("tie-broken-by-turns", _tie_broken_by_turns,
                     # a tie broken one way, then the other: no probability moved, the decision did
                     "determinism: the same request again (2 of 3): question 'department' was answered '",
                     also_fails=("test_batching_alone_and_among_concurrent_requests",)),
    ),
    "test_the_request_id_is_echoed": (
        BrokenServer("request-id-not-echoed", _request_id_not_echoed,
                     f"', got X-Request-Id '{SERVER_CHOSEN_ID}' back; the target echoes the caller's request id"),
        BrokenServer("request-id-must-be-a-uuid", _request_id_must_be_a_uuid,
                     "a well-formed decision request: expected HTTP 200, got HTTP 400"),
    ),
    "test_malformed_json_is_a_400": (
        BrokenServer("malformed-json-answered", _malformed_json_answered,
                     "a body that is not valid JSON: expected HTTP 400 malformed_request, got HTTP 200"),
    ),
    "test_a_body_without_questions_is_a_400": (
        BrokenServer("no-questions-is-a-422", _no_questions_is_a_422,
                     "a body without 'questions': expected HTTP 400 malformed_request, got HTTP 422"),
    ),
    "test_empty_questions_are_a_400": (
        BrokenServer("empty-questions-answered", _empty_questions_answered,
                     "'questions': {} (nothing to answer): expected HTTP 400 malformed_request, got HTTP 200"),
    ),
    "test_an_unknown_question_type_is_a_422_naming_it": (
        BrokenServer("only-invalid-questions-is-a-400", _all_invalid_is_a_400,
                     "a question of unknown type 'ranking': expected HTTP 422 invalid_question, got HTTP 400"),
        BrokenServer("unknown-types-answered-as-noul", _unknown_types_answered_as_noul,
                     "a question of unknown type 'ranking': expected HTTP 422 invalid_question, got HTTP 200",
                     also_fails=("test_every_invalid_question_is_named",)),
        BrokenServer("invalid-questions-another-code",
                     _invalid_questions_refused(lambda body: {**body, "code": "invalid_request"}),
                     "a question of unknown type 'ranking': expected problem code 'invalid_question', "
                     "got 'invalid_request'", also_fails=("test_every_invalid_question_is_named",)),
        # The right status, a body the spec refuses: the violations are the failure.
        BrokenServer("invalid-questions-errors-without-question",
                     _invalid_questions_refused(lambda body: {**body, "errors": [
                         {k: v for k, v in e.items() if k != "question"} for e in body["errors"]]}),
                     # Its first words: the violations are the failure, not an afterthought to another.
                     "Failed: POST /v1/systemone -> 422 breaks the target spec (1 violation):\n"
                     "  /body/errors/0/question: expected a required property, got absent",
                     also_fails=("test_every_invalid_question_is_named",)),
        # Each invalid question named by its path in the request, not by its id.
        BrokenServer("invalid-questions-named-by-path",
                     _invalid_questions_refused(lambda body: {**body, "errors": [
                         {**e, "question": f"questions.{e['question']}"} for e in body["errors"]]}),
                     "the 422 must name the invalid question 'mood' in errors[], got ['questions.mood']",
                     also_fails=("test_every_invalid_question_is_named",)),
    ),
    "test_every_invalid_question_is_named": (
        BrokenServer("names-the-first-invalid-question-only", _names_the_first_invalid_question_only,
                     "the 422 must name exactly the invalid questions 'mood' and 'team' in errors[], got ['mood']"),
        BrokenServer("invalid-questions-dropped-beside-valid-ones", _invalid_questions_dropped_beside_valid_ones,
                     "two invalid questions ('mood', 'team') beside a valid one: expected HTTP 422 invalid_question, "
                     "got HTTP 200"),
    ),
    "test_too_many_questions_are_a_413": (
        BrokenServer("question-limit-published-not-kept", _publishing({"max_questions": 8}),
                     "9 questions (the limit is 8): expected HTTP 413 too_many_questions, got HTTP 200"),
        # One over is the case to probe: this server refuses 10 questions, not 9.
        BrokenServer("question-limit-off-by-one", _publishing({"max_questions": 8}, _questions_refused_from(10)),
                     "9 questions (the limit is 8): expected HTTP 413 too_many_questions, got HTTP 200"),
    ),
    "test_questions_at_the_limit_are_answered": (
        BrokenServer("questions-at-the-limit-refused", _publishing({"max_questions": 8}, _questions_refused_from(8)),
                     "8 questions (the limit is 8): expected HTTP 200, got HTTP 413",
                     # question interference asks 8 questions too (7 beside the target)
                     also_fails=("test_question_interference",)),
        BrokenServer("answers-cut-at-the-limit", _publishing({"max_questions": 8}, _answers_cut_at(8)),
                     "/body/answers: rule answers-asked: expected answers for ['q0', 'q1', 'q2', 'q3', 'q4', 'q5', 'q6', "
                     "'q7'], got none for ['q7']", also_fails=("test_question_interference",)),
    ),
    "test_a_state_over_the_limit_is_a_413": (
        BrokenServer("state-limit-published-not-kept", _publishing({"max_state_chars": 1000}),
                     "a state of 1001 characters (the limit is 1000): expected HTTP 413 state_too_large, got HTTP 200"),
        BrokenServer("state-limit-off-by-one", _publishing({"max_state_chars": 1000}, _state_refused_from(1002)),
                     "a state of 1001 characters (the limit is 1000): expected HTTP 413 state_too_large, got HTTP 200"),
    ),
    "test_a_state_at_the_limit_is_answered": (
        BrokenServer("state-at-the-limit-refused", _publishing({"max_state_chars": 1000}, _state_refused_from(1000)),
                     "a state of 1000 characters (the limit is 1000): expected HTTP 200, got HTTP 413"),
    ),
    "test_a_body_over_the_limit_is_a_413": (
        BrokenServer("body-limit-published-not-kept", _publishing({"max_body_bytes": 4096}),
                     "(the limit is 4096): expected HTTP 413 too_large, got HTTP 200"),
    ),
    "test_a_body_that_is_not_json_media_is_a_415": (
        BrokenServer("any-media-type-read-as-json", _any_media_type_read_as_json,
                     "a JSON body sent as Content-Type: text/plain: expected HTTP 415 unsupported_media_type, got HTTP 200"),
    ),
    "test_an_unknown_model_is_a_422": (
        BrokenServer("unknown-model-routed-anyway", _unknown_model_routed_anyway,
                     "model 'pytest-laya-no-such-model', which no server serves: expected HTTP 422 unknown_model, got HTTP 200"),
    ),
    "test_a_wrong_or_missing_token_is_a_401": (
        BrokenServer("any-token-accepted", _any_token_accepted,
                     "a decision request with a wrong bearer token: expected HTTP 401 unauthorized, got HTTP 200"),
        BrokenServer("token-echoed-in-the-401", _token_echoed_in_the_401,
                     "the 401 to a request with a wrong bearer token shows a token (redacted here as ***)"),
        BrokenServer("missing-token-accepted", _missing_token_accepted,
                     "a decision request with no Authorization header: expected HTTP 401 unauthorized, got HTTP 200"),
        BrokenServer("key-shown-in-the-401", _key_shown_in_the_401,
                     "the 401 to a request with a wrong bearer token shows a token (redacted here as ***)"),
    ),
    "test_batching_alone_and_in_a_batch": (
        BrokenServer("batch-moves-answers", _batch_moves_answers,
                     "batching: state 0 alone and in a batch of 3: question 'refund' was answered p "),
        BrokenServer("batch-results-reversed", _batch_results(lambda results: results[::-1]),
                     "batching: state 0 alone and in a batch of 3: question"),
        BrokenServer("batch-results-missing-an-answer", _batch_results_missing_an_answer,
                     "/body/results/0/answers: rule answers-asked: expected answers for ['department', 'channel', "
                     "'urgency', 'refund'], got none for ['refund']"),
        BrokenServer("batch-read-as-one-decision", _batch_read_as_one_decision,
                     "POST /v1/systemone/batch with 3 states: expected HTTP 200, got HTTP 400"),
        BrokenServer("batch-results-one-short", _batch_results(lambda results: results[:1]),
                     "a batch of 3 states must get 3 results in order, got HTTP 200"),
    ),
    "test_batching_alone_and_among_concurrent_requests": (
        BrokenServer("answers-move-under-load", _answers_move_under_load(),
                     "of 8 identical concurrent requests: question 'refund' was answered p "),
    ),
    "test_replicas_answer_alike": (
        BrokenServer("second-replica-differs", _second_replica_differs(),
                     "replicas: question 'refund' was answered p ",
                     also_fails=("test_batching_alone_and_among_concurrent_requests",)),
    ),
    "test_option_order_invariance": (
        BrokenServer("first-option-wins", _answers_rewritten(_first_option_wins),
                     "option order: 26 of 33 reorderings changed the choice (79%) over 3 questions, the reverse order "
                     "3 of 3; largest probability deviation 0.8", options=("--laya-require-invariance",)),
    ),
    "test_question_interference": (
        BrokenServer("noul-flips-beside-other-questions", _noul_flips_beside_other_questions,
                     "question interference: 2 of 8 answers decided differently beside 3 or 15 other questions than "
                     "alone", options=("--laya-require-invariance",)),
    ),
}

#: Checks that only report unless the run requires invariance (--laya-require-invariance): against
#: a server that moves what they measure, the whole suite passes and the summary shows the figure.
REPORTED_BY_DEFAULT: Mapping[str, Measured] = {
    "test_option_order_invariance": Measured(
        "real Laya leans on option order (25 of 33 flips on the tiny checkpoint), which no server can fix",
        _answers_rewritten(_first_option_wins),
        "  option order: 26 of 33 reorderings changed the choice (79%) over 3 questions, the reverse order 3 of 3; "
        "largest probability deviation 0.8* (reported)"),
    "test_question_interference": Measured(
        "a question's answer may legitimately shift beside others (a model may read them all)",
        _noul_flips_beside_other_questions,
        "  question interference: 2 of 8 answers decided differently beside 3 or 15 other questions than alone;* "
        "(reported)"),
}

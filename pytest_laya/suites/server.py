"""The HTTP contract of a served Laya: run it against any /v1/systemone server.

    pytest --pyargs pytest_laya.suites.server --laya-mode=live --laya-url URL \\
        [--laya-spec current|target] [--laya-api-key KEY] [--laya-limit NAME=N ...]
    python -m pytest_laya check URL [--spec auto|current|target] [--api-key KEY]

Each test is one check: status codes and bodies for good and bad requests, the advertised
limits, determinism, /health, batch and request ids. Without --laya-spec the server is held to
the spec it claims (`pytest_laya.servers.claimed_spec_of`: the Laya-Spec header of its first
response, else /health's "spec", else current). Every response is held to the chosen spec
by the plugin's observer and counted in the conformance table that ends pytest-laya's summary.
Under the current spec, a behaviour only the target asks for ends its check as xfailed with
the reason, and is listed under "target gaps" in the summary; under the target spec it fails.
Two checks only measure (option-order flips, question independence) and report in the summary.

What each check means and how to read a failure: docs/server-contract.md.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from pytest_laya.client import DECIDE_PATH
from pytest_laya.route.modes import Mode
from pytest_laya.servers import ServerHandle, ServerKind
from pytest_laya.servers.claimed_spec import DEFAULT_SPEC
from pytest_laya.suites.behaviour import Tolerance, option_orders, tolerance_for, with_fillers
from pytest_laya.suites.measures import Comparison, compare, decided, describe, probability_change
from pytest_laya.suites.server_under_test import (
    CONTRACT_SECTION,
    MEASURED_SECTION,
    RULE_GAPS_SECTION,
    Check,
    ServerUnderTest,
    invariance_option,
    json_body,
    key_option,
    parse_limit_options,
    resolve_limits,
    resolve_spec,
    stop_run,
)
from pytest_laya.wire.decision import Choice, Decision, parse_answers
from pytest_laya.wire.errors import LayaError
from pytest_laya.wire.questions import normalize_questions

BATCH_PATH = "/v1/systemone/batch"
#: Identical requests sent at once (batching under load, replicas): TGI's generate_load.
CONCURRENT = 8
#: Other questions asked beside a target question (question interference, krite §7).
FILLER_COUNTS = (3, 15)

STATE = "I was charged twice for my order last week. Please refund the duplicate payment today."
OTHER_STATE = "The app crashes every time I open the settings page on my phone."
MIXED: dict[str, dict[str, Any]] = {
    "department": {"type": "choice", "instructions": "Which team should handle this?",
                   "criteria": {"billing": "Charges, invoices and refunds", "technical": "Bugs and crashes",
                                "sales": "New orders and upgrades"}},
    "channel": {"type": "choice", "instructions": "How should we reply?", "criteria": ["email", "phone", "chat"]},
    "urgency": {"type": "score", "instructions": "How urgent is the request?",
                "criteria": ["Not urgent", "Needs attention soon", "Needs attention immediately"]},
    "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
}
GOOD = {"state": STATE, "questions": {"refund": MIXED["refund"]}}
#: (state, choice question) pairs whose options the option-order check permutes: every order of
#: 4, 3 and 3 options, 33 reorderings in all.
ORDER_PROBES: list[tuple[str, dict[str, Any]]] = [
    (STATE, {"type": "choice", "instructions": "Which team should handle this?",
             "criteria": {"billing": "Charges and refunds", "technical": "Software problems",
                          "sales": "New orders", "legal": "Contracts and complaints"}}),
    (OTHER_STATE, {"type": "choice", "instructions": "What kind of message is this?",
                   "criteria": {"bug": "Something is broken", "question": "How do I do something?",
                                "feature": "A request for something new"}}),
    ("Your service is terrible and I am never ordering again.",
     {"type": "choice", "instructions": "What is the customer's mood?", "criteria": ["angry", "neutral", "happy"]}),
]


# -- fixtures -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server_under_test(laya_run: Any, request: pytest.FixtureRequest) -> Iterator[ServerUnderTest]:
    """The server named by --laya-url (or the plugin's fake in --laya-mode=fake), held to its spec:
    --laya-spec's, or (without it, or with ``auto``) the one it claims."""
    if laya_run.mode is Mode.LIVE:
        url, kind, api_key = laya_run.url, ServerKind.LIVE, laya_run.api_key
    elif laya_run.mode.fakes:
        url, kind, api_key = request.getfixturevalue("_laya_session_fake").url, ServerKind.FAKE, None
    else:
        stop_run(request.config, f"the server contract checks a running server: add --laya-mode=live "
                                 f"--laya-url URL (this run is --laya-mode={laya_run.mode})")
    try:
        overrides = parse_limit_options(request.config.getoption("laya_limit") or [])
    except ValueError as exc:
        stop_run(request.config, str(exc))
    server = ServerUnderTest(url=url, spec_name=DEFAULT_SPEC, api_key=api_key, key_flag=key_option(request.config))
    server.tolerance_given = request.config.getoption("laya_tolerance")
    server.require_invariance = bool(request.config.getoption("laya_require_invariance"))
    server.invariance_flag = invariance_option(request.config)
    # Read once for the claimed spec and the limits; the health checks read it again, validated.
    first = server.send("GET", "/health", observe=False)
    refusal = server.key_refusal(first, GOOD)
    if refusal:  # every check would fail on the same 401: one line instead
        server.close()
        stop_run(request.config, refusal)
    server.health_status = first.status
    server.health = json_body(first) if first.status == 200 else None
    claim = resolve_spec(laya_run.spec, first, server.health)
    handle = ServerHandle(url=url, kind=kind, spec=claim.name, api_key=api_key)
    server.hold_to(claim.name, laya_run.spec_observer(handle))
    server.limits = resolve_limits(server.spec_name, server.health, overrides)
    laya_run.note(CONTRACT_SECTION, f"{kind} {url} held to the {claim.name} spec ({claim.reason}); "
                                    f"limits: {server.limits.describe()}")
    if first.status != 200:
        laya_run.note(CONTRACT_SECTION, f"no /health: GET /health answered {first.status}; identity comes from "
                                        "the answers, limits from the spec")
    try:
        yield server
    finally:
        for line in server.rule_gap_lines():
            laya_run.note(RULE_GAPS_SECTION, line)
        for line in server.measurements:
            laya_run.note(MEASURED_SECTION, line)
        server.close()


@pytest.fixture
def check(server_under_test: ServerUnderTest, laya_run: Any, request: pytest.FixtureRequest) -> Iterator[Check]:
    """This check's view of the server: its name, for the gaps it reports."""
    yield Check(server_under_test, laya_run.note, request.node.name)
    unreported = server_under_test.pending_violations()
    if unreported:  # every check reports its responses' violations; this says which one did not
        pytest.fail(f"{request.node.name} left spec violations unreported:\n{unreported}", pytrace=False)


def _decide(check: Check, state: Any, questions: Mapping[str, Any]) -> Decision:
    """A well-formed decision through the served client; any refusal or bad answer fails the check.

    A refusal's message comes first, then the spec violations of its body. A /health the client
    could not read is no failure here (the health checks report it).
    """
    try:
        decision = check.server.decide(state, questions)
    except LayaError as exc:
        error = exc  # failed outside the handler, so pytest shows one message, not a chain
    else:
        check.server.forget_health_violations()
        check.conforms()
        return decision
    check.fail(f"a well-formed decision request failed: {error}")


def _health(check: Check, what: str, *, auth: bool = True) -> Any:
    """GET /health, which must answer 200; a server without one (404, 405) is a target gap."""
    x = check.server.send("GET", "/health", auth=auth)
    if x.status in (404, 405):
        check.target_gap(f"GET /health answered {x.status}: the server has no /health; the target's health "
                         "document says whether it is ready, which weights serve each model, and the limits")
    return check.expect(x, 200, what)


def _answers(check: Check, raw: Any, questions: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Raw answers through the served client's answer rules; a broken one fails the check."""
    try:
        return parse_answers(raw, normalize_questions(questions))
    except LayaError as exc:
        error = exc
    check.fail(f"{where}: {error}")


def _strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value, unescaped (a detail's \\"mood\\" is "mood")."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for member in value.values():
            yield from _strings(member)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _needs_key(check: Check) -> None:
    if not check.server.api_key:
        pytest.skip(f"no {check.server.key_flag} given: the token checks need the server's key")


def _same(check: Check, what: str, reference: Decision, other: Mapping[str, Any],
          tolerance: Tolerance, *, same_decision: bool) -> None:
    for qid, answer in reference.answers.items():
        change = probability_change(answer, other[qid])
        if tolerance.exceeded_by(change) or (same_decision and decided(answer) != decided(other[qid])):
            check.fail(f"{what}: question {qid!r} was answered {describe(answer)}, then {describe(other[qid])} "
                       f"(a probability moved {change:.6f}; tolerance {tolerance.describe()})")


def _tolerance(check: Check) -> Tolerance:
    """The run's behaviour tolerance, resolved once from a decision (`behaviour.tolerance_for`)."""
    server = check.server
    if server.tolerance is None:
        server.tolerance = tolerance_for(server.tolerance_given, server.health, _decide(check, STATE, MIXED))
        check.measured(f"behaviour tolerance: {server.tolerance.describe()}")
    return server.tolerance


def _concurrently(check: Check, state: Any, questions: Mapping[str, Any],
                  count: int) -> list[tuple[Any, dict[str, Any]]]:
    """`count` identical decisions sent at once: each response's body and its parsed answers."""
    out = []
    what = f"{count} identical requests sent at once"
    for n, x in enumerate(check.server.post_at_once({"state": state, "questions": questions}, count)):
        check.server.observe(x, defer=True)  # one by one: the observer is not shared between threads
        body = check.expect(x, 200, f"request {n + 1} of {what}")
        out.append((body, _answers(check, body.get("answers") if isinstance(body, dict) else None, questions,
                                   f"request {n + 1} of {what}")))
    return out


def _invariance(check: Check, line: str, result: Comparison, tolerance: Tolerance) -> None:
    """Report an invariance measure; under --laya-require-invariance, fail past the tolerance."""
    required = check.server.require_invariance
    check.measured(line + (f" (tolerance {tolerance.value:g}, required)" if required else " (reported)"))
    if required and (tolerance.exceeded_by(result.max_change) or result.changed):
        check.fail(f"{line}: past the tolerance {tolerance.describe()}, and invariance is required "
                   f"({check.server.invariance_flag})")


# -- /health ------------------------------------------------------------------------------

def test_health_answers_status_ok(check: Check) -> None:
    body = _health(check, "GET /health")
    if not isinstance(body, dict) or body.get("status") != "ok":
        check.fail(f'GET /health must be a JSON object with "status": "ok", got {body!r}')


def test_health_names_the_models_and_the_limits(check: Check) -> None:
    body = _health(check, "GET /health")
    missing = [name for name in ("ready", "models", "limits") if not isinstance(body, dict) or name not in body]
    if missing:
        check.target_gap(f"/health has no {', '.join(missing)}; the target's health document says whether the "
                         "server is ready, which weights serve each model, and the request limits")
    if body["ready"] is not True or not body["models"]:
        check.fail(f"a serving server's /health must say ready: true and name at least one model, got "
                   f"ready {body['ready']!r}, models {sorted(body['models'])}")


def test_health_without_a_token_shows_liveness_only(check: Check) -> None:
    _needs_key(check)
    body = _health(check, "GET /health without a token", auth=False)
    if body != {"status": "ok"}:
        check.fail(f'GET /health without a token must show only {{"status": "ok"}}, got keys {sorted(body or {})}')


# -- good requests ------------------------------------------------------------------------

def test_a_decision_answers_every_question_in_order(check: Check) -> None:
    decision = _decide(check, STATE, MIXED)
    # The order as sent: the served client's Decision lists its answers in the order asked. The
    # client took the body, so it is an object whose answers are an object.
    order = list(json_body(check.server.last_response[DECIDE_PATH])["answers"])
    if order != list(MIXED):
        check.fail(f"answers must come one per question in the order asked {list(MIXED)}, got {order}")
    for qid, answer in decision.answers.items():
        if isinstance(answer, Choice) and answer.probabilities[answer.key] < max(answer.probabilities.values()):
            check.fail(f"question {qid!r}: the choice {answer.key!r} must be the most probable option, "
                       f"got probabilities {dict(answer.probabilities)}")


def test_the_request_id_is_echoed(check: Check) -> None:
    mine = "pytest-laya-contract-" + os.urandom(8).hex()
    x = check.server.post(GOOD, headers={"X-Request-Id": mine})
    check.expect(x, 200, "a well-formed decision request")
    echoed = x.headers.get("x-request-id")
    if echoed != mine:
        got = "no X-Request-Id" if echoed is None else f"X-Request-Id {echoed!r}"
        check.target_gap(f"sent X-Request-Id {mine!r}, got {got} back; the target echoes the caller's request id")


# -- bad requests -------------------------------------------------------------------------

def test_malformed_json_is_a_400(check: Check) -> None:
    x = check.server.send("POST", DECIDE_PATH, b'{"state": "I was charged twice.", "questions": ')
    check.expect(x, 400, "a body that is not valid JSON", code="malformed_request")


def test_a_body_without_questions_is_a_400(check: Check) -> None:
    x = check.server.post({"state": STATE})
    check.expect(x, 400, "a body without 'questions'", code="malformed_request")


def test_empty_questions_are_a_400(check: Check) -> None:
    x = check.server.post({"state": STATE, "questions": {}})
    check.expect(x, 400, "'questions': {} (nothing to answer)", code="malformed_request", today=(200,))


def test_an_unknown_question_type_is_a_422_naming_it(check: Check) -> None:
    ranking = {"type": "ranking", "instructions": "How does the customer feel?"}
    x = check.server.post({"state": STATE, "questions": {"mood": ranking}})
    body = check.expect(x, 422, "a question of unknown type 'ranking'", code="invalid_question")
    if check.spec_name == "target":
        named = {e.get("question") for e in body.get("errors", []) if isinstance(e, dict)}
        if named != {"mood"}:
            check.fail(f"the 422 must name the invalid question 'mood' in errors[], got {sorted(map(str, named))}")


def test_every_invalid_question_is_named(check: Check) -> None:
    questions = {
        "mood": {"type": "ranking", "instructions": "How does the customer feel?"},
        "team": {"type": "choice", "instructions": "Which team?"},  # a choice without criteria
        "refund": MIXED["refund"],
    }
    x = check.server.post({"state": STATE, "questions": questions})
    body = check.expect(x, 422, "two invalid questions ('mood', 'team') beside a valid one", code="invalid_question")
    # What it says: the strings of its JSON body (one that is not JSON broke the spec in expect()).
    # A question is named quoted in a message, or as a string of its own (FastAPI's `loc`).
    strings = list(_strings(body))
    said = " ".join(strings)
    if check.spec_name == "target":
        named = {e.get("question") for e in body.get("errors", []) if isinstance(e, dict)}
        if named != {"mood", "team"}:
            check.fail("the 422 must name exactly the invalid questions 'mood' and 'team' in errors[], "
                       f"got {sorted(map(str, named))}")
    elif not all(qid in strings or f"'{qid}'" in said or f'"{qid}"' in said for qid in ("mood", "team")):
        check.target_gap(f"the 422 names only some of the invalid questions ({check.server.describe(x)}); "
                         "the target names each one in errors[]")


def test_too_many_questions_are_a_413(check: Check) -> None:
    limit = check.server.limits.max_questions
    questions = {f"q{i}": {"type": "noul", "instructions": f"Is statement {i} true?"} for i in range(limit + 1)}
    x = check.server.post({"state": STATE, "questions": questions})
    check.expect(x, 413, f"{limit + 1} questions (the limit is {limit})", code="too_many_questions")


def test_questions_at_the_limit_are_answered(check: Check) -> None:
    limit = check.server.limits.max_questions
    questions = {f"q{i}": {"type": "noul", "instructions": f"Is statement {i} true?"} for i in range(limit)}
    body = check.expect(check.server.post({"state": STATE, "questions": questions}), 200,
                        f"{limit} questions (the limit is {limit})")
    if list(body.get("answers", {})) != list(questions):
        check.fail(f"{limit} questions must get {limit} answers in order, got {len(body.get('answers', {}))}")


def test_a_state_over_the_limit_is_a_413(check: Check) -> None:
    limit = check.server.limits.max_state_chars
    x = check.server.post({"state": "x" * (limit + 1), "questions": GOOD["questions"]})
    check.expect(x, 413, f"a state of {limit + 1} characters (the limit is {limit})", code="state_too_large")


def test_a_state_at_the_limit_is_answered(check: Check) -> None:
    limit = check.server.limits.max_state_chars
    state = (STATE + " ") * (limit // (len(STATE) + 1) + 1)
    x = check.server.post({"state": state[:limit], "questions": GOOD["questions"]})
    check.expect(x, 200, f"a state of {limit} characters (the limit is {limit})")


def test_a_body_over_the_limit_is_a_413(check: Check) -> None:
    limit = check.server.limits.max_body_bytes
    # Valid JSON padded with whitespace: only its size is wrong.
    body = json.dumps(GOOD).encode("utf-8") + b" " * limit
    x = check.server.send("POST", DECIDE_PATH, body)
    check.expect(x, 413, f"a body of {len(body)} bytes (the limit is {limit})", code="too_large")


def test_a_body_that_is_not_json_media_is_a_415(check: Check) -> None:
    x = check.server.post(GOOD, content_type="text/plain")
    check.expect(x, 415, "a JSON body sent as Content-Type: text/plain", code="unsupported_media_type", today=(200,))


def test_an_unknown_model_is_a_422(check: Check) -> None:
    x = check.server.post({**GOOD, "model": "pytest-laya-no-such-model"})
    check.expect(x, 422, "model 'pytest-laya-no-such-model', which no server serves", code="unknown_model", today=(200,))


def test_a_wrong_or_missing_token_is_a_401(check: Check) -> None:
    _needs_key(check)
    wrong = "pytest-laya-wrong-" + os.urandom(8).hex()
    check.server.keep_secret(wrong)
    for what, headers in (("a wrong bearer token", {"Authorization": f"Bearer {wrong}"}), ("no Authorization header", {})):
        x = check.server.post(GOOD, headers=headers, auth=False)
        check.expect(x, 401, f"a decision request with {what}", code="unauthorized")
        seen = x.body.decode("utf-8", "replace") + "\n".join(x.headers.values())
        if wrong in seen or (check.server.api_key is not None and check.server.api_key.reveal() in seen):
            check.fail(f"the 401 to a request with {what} shows a token (redacted here as ***): {check.server.describe(x)}")


# -- batch --------------------------------------------------------------------------------

def test_batching_alone_and_in_a_batch(check: Check) -> None:
    states = [STATE, OTHER_STATE, ORDER_PROBES[-1][0]]
    x = check.server.post({"states": states, "questions": MIXED}, path=BATCH_PATH, observe=False)
    if x.status in (404, 405):
        check.target_gap(f"POST {BATCH_PATH} answered {x.status}; the target answers several states in one request")
    check.server.observe(x, defer=True)
    body = check.expect(x, 200, f"POST {BATCH_PATH} with {len(states)} states")
    results = body.get("results") if isinstance(body, dict) else None
    if not isinstance(results, list) or len(results) != len(states):
        check.fail(f"a batch of {len(states)} states must get {len(states)} results in order, got {check.server.describe(x)}")
    tolerance = _tolerance(check)
    pairs = []
    for i, (state, result) in enumerate(zip(states, results)):
        batched = _answers(check, result.get("answers") if isinstance(result, dict) else None, MIXED, f"batch result {i}")
        alone = _decide(check, state, MIXED)
        _same(check, f"batching: state {i} alone and in a batch of {len(states)}", alone, batched, tolerance,
              same_decision=False)
        pairs += [(alone[qid], batched[qid]) for qid in MIXED]
    result = compare(pairs)
    check.measured(f"batching: {len(states)} states alone and in one POST {BATCH_PATH}: largest probability "
                   f"deviation {result.max_change:.6f} over {result.pairs} answers (tolerance {tolerance.value:g})")


def test_batching_alone_and_among_concurrent_requests(check: Check) -> None:
    alone = _decide(check, STATE, MIXED)
    tolerance = _tolerance(check)
    answers = [answers for _, answers in _concurrently(check, STATE, MIXED, CONCURRENT)]
    for n, other in enumerate(answers):
        _same(check, f"batching: the request alone and as {n + 1} of {CONCURRENT} identical concurrent requests",
              alone, other, tolerance, same_decision=True)
    result = compare((alone[qid], other[qid]) for other in answers for qid in MIXED)
    check.measured(f"batching: one request alone and {CONCURRENT} identical requests at once: largest probability "
                   f"deviation {result.max_change:.6f} (tolerance {tolerance.value:g})")


# -- behaviour: determinism, replicas, option order, interference --------------------------

def test_determinism_the_same_request_again(check: Check) -> None:
    first = _decide(check, STATE, MIXED)
    tolerance = _tolerance(check)
    again = [_decide(check, STATE, MIXED) for _ in range(2)]
    for n, other in enumerate(again):
        _same(check, f"determinism: the same request again ({n + 2} of 3)", first, other.answers, tolerance,
              same_decision=True)
    result = compare((first[qid], other[qid]) for other in again for qid in MIXED)
    check.measured(f"determinism: the same request 3 times: largest probability deviation {result.max_change:.6f} "
                   f"(tolerance {tolerance.value:g})")


def test_replicas_answer_alike(check: Check) -> None:
    tolerance = _tolerance(check)
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for body, answers in _concurrently(check, STATE, MIXED, CONCURRENT):
        served_by = body.get("served_by") if isinstance(body, dict) else None
        if served_by is not None:
            groups.setdefault(json.dumps(served_by, sort_keys=True), []).append(answers)
    if not groups:
        pytest.skip("replicas: the answers name no served_by, so replicas cannot be told apart")
    names = list(groups)
    first = groups[names[0]][0]
    largest = 0.0
    for name in names[1:]:
        other = groups[name][0]
        for qid, answer in first.items():
            change = probability_change(answer, other[qid])
            largest = max(largest, change)
            if tolerance.exceeded_by(change) or decided(answer) != decided(other[qid]):
                check.fail(f"replicas: question {qid!r} was answered {describe(answer)} by served_by {names[0]}, "
                           f"and {describe(other[qid])} by served_by {name} (a probability moved {change:.6f}; "
                           f"tolerance {tolerance.describe()})")
    check.measured(f"replicas: {len(groups)} served_by seen in {CONCURRENT} concurrent answers; largest probability "
                   f"deviation between them {largest:.6f} (tolerance {tolerance.value:g})")


def test_option_order_invariance(check: Check) -> None:
    tolerance = _tolerance(check)
    pairs, reversed_pairs = [], []
    for state, question in ORDER_PROBES:
        reference = _decide(check, state, {"q": question})["q"]
        for permuted, is_reverse in option_orders(question):
            pair = (reference, _decide(check, state, {"q": permuted})["q"])
            pairs.append(pair)
            if is_reverse:
                reversed_pairs.append(pair)
    result, reverse = compare(pairs), compare(reversed_pairs)
    line = (f"option order: {result.changed} of {result.pairs} reorderings changed the choice ({result.rate:.0%}) "
            f"over {len(ORDER_PROBES)} questions, the reverse order {reverse.changed} of {reverse.pairs}; largest "
            f"probability deviation {result.max_change:.4f}")
    _invariance(check, line, result, tolerance)


def test_question_interference(check: Check) -> None:
    tolerance = _tolerance(check)
    # No more questions than the server takes.
    counts = sorted({min(count, check.server.limits.max_questions - 1) for count in FILLER_COUNTS} - {0})
    pairs = []
    for qid, question in MIXED.items():
        alone = _decide(check, STATE, {qid: question})[qid]
        pairs += [(alone, _decide(check, STATE, with_fillers(qid, question, count))[qid]) for count in counts]
    result = compare(pairs)
    line = (f"question interference: {result.changed} of {result.pairs} answers decided differently beside "
            f"{' or '.join(map(str, counts))} other questions than alone; largest probability deviation "
            f"{result.max_change:.4f}")
    _invariance(check, line, result, tolerance)

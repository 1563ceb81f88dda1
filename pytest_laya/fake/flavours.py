"""The two ways the fake speaks: the target spec, and laya-serve 0.4.15 as recorded.

``"target"`` validates requests with `pytest_laya.wire.requests` (the reference server's one
implementation, so both refuse the same bodies in the same words) and answers problem+json with
stable codes, X-Request-Id, Server-Timing, ``served_by`` and the probes. ``"laya-serve-0.4.15"``
mimics laya-serve as recorded in ``cassettes/laya-serve-0.4.15``: ``{"detail"}`` errors with its
texts and order (the first problem only), ``model: "laya-rl-agent"``, its /health, and conforms to
the current spec.

Each flavour turns a request into ``(status, headers, JSON body)`` for an `Answerer` (the
`FakeLaya`), which supplies the answers; neither does any I/O.
"""

from __future__ import annotations

import http
import json
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from pytest_laya.faults import ReceivedRequest
from pytest_laya.wire.headers import REQUEST_ID_HEADER, SPEC_HEADER, answered_request_id
from pytest_laya.wire.pointer import question_pointer
from pytest_laya.wire.problems import PROBLEM_MEDIA_TYPE, Problem
from pytest_laya.wire.questions import QUESTION_TYPES, option_key
from pytest_laya.wire.requests import (
    MAX_BATCH_STATES,
    MAX_BODY_BYTES,
    MAX_OPTIONS,
    MAX_QUESTIONS,
    MAX_REQUEST_TOKENS,
    MAX_STATE_CHARS,
    check_media_type,
    check_nesting,
    has_lone_surrogate,
    parse_json_object,
    read_decision_request,
)
from pytest_laya.wire.routes import (
    BATCH_PATH,
    DECIDE_PATH,
    HEALTH_PATH,
    JSON_MEDIA_TYPE,
    LIVEZ_PATH,
    READYZ_PATH,
)

__all__ = ["FLAVORS", "TARGET", "LAYA_SERVE", "LIMITS", "LAYA_SERVE_MODEL_FIELD", "Answerer", "FakeResponse", "flavour"]

TARGET = "target"
LAYA_SERVE = "laya-serve-0.4.15"
FLAVORS: tuple[str, ...] = (TARGET, LAYA_SERVE)

#: What one request may carry (the target's /health advertises these; laya-serve's defaults).
LIMITS: Mapping[str, int] = {
    "max_questions": MAX_QUESTIONS,
    "max_state_chars": MAX_STATE_CHARS,
    "max_body_bytes": MAX_BODY_BYTES,
    "max_options": MAX_OPTIONS,
    "max_batch_states": MAX_BATCH_STATES,
    "max_request_tokens": MAX_REQUEST_TOKENS,
}
#: laya-serve's top-level `model`, whatever answered.
LAYA_SERVE_MODEL_FIELD = "laya-rl-agent"

#: (status, headers, JSON body or text) of one response.
FakeResponse = tuple[int, dict[str, str], Any]


class Answerer(Protocol):
    """What a flavour asks of the fake (`FakeLaya`): who answers, its limits, and the answers."""

    @property
    def model(self) -> str: ...

    @property
    def revision(self) -> str: ...

    @property
    def served_by(self) -> dict[str, Any]: ...

    @property
    def limits(self) -> Mapping[str, int]: ...

    def decide(self, state: Any, questions: Mapping[str, Mapping[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(answers in question order, usage) for already valid questions."""
        ...

# FakeLayaServer.status(code): the problem code each documented status gets in the target flavour.
_SCRIPTED_CODE: dict[int, str] = {
    400: "malformed_request",
    401: "unauthorized",
    408: "body_timeout",
    413: "too_large",
    415: "unsupported_media_type",
    422: "invalid_question",
    500: "inference_failed",
    502: "backend_unavailable",
    503: "overloaded",
    504: "backend_timeout",
}
# ... and the text laya-serve 0.4.15 (or omni-jev, for 502/504) sends with it.
_LAYA_SERVE_TEXT: dict[int, str] = {
    400: "request body must be valid JSON",
    401: "invalid or missing bearer token",
    408: "request body read timed out",
    413: "request body too large",
    500: "inference failed",
    503: "server busy, try again later",
}
_PROXY_TEXT: dict[int, str] = {502: "backend unavailable\n", 504: "backend timed out\n"}
_NOUL_KEYS = {"true", "false"}


def _gate(answers: Mapping[str, dict[str, Any]], min_confidence: float | Mapping[str, float]) -> None:
    """laya's abstention gate (``laya.confidence.apply_confidence_gate``) on the fake's answers.

    Each answer's `answer_confidence` (else `confidence`) against the threshold, or against the
    threshold of its option-count bucket (``choice:3-5``...; ``default``, then 0, for a bucket the
    map does not name): `abstention`, `abstention_threshold`, and `low_confidence` when below.
    """
    for answer in answers.values():
        threshold: Any = min_confidence
        if isinstance(min_confidence, Mapping):
            options = len(answer.get("probabilities") or ()) or 2
            size = "2" if options <= 2 else "3-5" if options <= 5 else "6-10" if options <= 10 else "11+"
            threshold = min_confidence.get(f"{answer['type']}:{size}", min_confidence.get("default", 0.0))
        confidence = answer.get("answer_confidence", answer["confidence"])
        if confidence < threshold:
            answer["low_confidence"] = True
        answer["abstention"] = "abstained" if confidence < threshold else "passed"
        answer["abstention_threshold"] = float(threshold)


def _total_usage(results: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, int]:
    return {"input_tokens": sum(u["input_tokens"] for _, u in results), "output_tokens": 0}


def _phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "Error"


class _TargetFlavour:
    """The target spec: what the reference server answers."""

    name = TARGET

    def health(self, laya: Answerer, *, authorized: bool) -> dict[str, Any]:
        if not authorized:
            return {"status": "ok"}
        return {"status": "ok", "spec": TARGET, "ready": True, "models": {laya.model: laya.served_by},
                "limits": dict(laya.limits)}

    def request(self, laya: Answerer, body: Any, *, batch: bool, request_id: str | None,
                parsed: bool = False) -> FakeResponse:
        """Answer a parsed body; `parsed` says `parse_json_object` already checked its text."""
        rid = answered_request_id(request_id)
        try:
            if not isinstance(body, Mapping):
                raise Problem("malformed_request", "request body must be a JSON object")
            if not parsed:
                check_nesting(body)
                if has_lone_surrogate(body):
                    raise Problem("malformed_request", "request body contains a lone surrogate or invalid UTF-8")
            # `max_len` / `head_max_len` are accepted and refused as the reference server does,
            # and have no effect: the fake has no token window and never cuts (docs/fake.md).
            checked = read_decision_request(body, laya.limits, served=[laya.model], batch=batch)
        except Problem as problem:
            return self.problem(problem, rid)
        started = time.perf_counter()
        results = [laya.decide(state, checked.questions) for state in checked.states]
        if checked.controls.min_confidence is not None:
            for answers, _ in results:
                _gate(answers, checked.controls.min_confidence)
        infer_ms = (time.perf_counter() - started) * 1000.0
        headers = {"Content-Type": JSON_MEDIA_TYPE, REQUEST_ID_HEADER: rid,
                   "Server-Timing": f"queue;dur=0.00, infer;dur={infer_ms:.2f}"}
        if batch:
            return 200, headers, {"model": laya.model, "results": [{"answers": a, "usage": u} for a, u in results],
                                  "total_usage": _total_usage(results), "served_by": laya.served_by}
        answers, usage = results[0]
        routing = {"model": laya.model, "repo": laya.model,
                   "reason": "explicit model" if checked.model is not None else "default model",
                   "detection": None, "workflow": None}
        return 200, headers, {"model": laya.model, "answers": answers, "usage": usage, "routing": routing,
                              "served_by": laya.served_by}

    def problem(self, problem: Problem, request_id: str | None, headers: Mapping[str, str] | None = None) -> FakeResponse:
        out = {"Content-Type": PROBLEM_MEDIA_TYPE, **problem.headers(), **(headers or {})}
        if request_id:
            out[REQUEST_ID_HEADER] = request_id
        return problem.status, out, problem.document(request_id)

    def refusal(self, laya: Answerer, status: int, *, detail: str | None, extra: dict[str, str],
                request_id: str | None, first: Any, code: str | None = None) -> FakeResponse:
        extra = {**extra, SPEC_HEADER: TARGET}
        rid = answered_request_id(request_id)
        if code is not None:
            return self.problem(Problem(code, detail or f"scripted by the test ({code})"), rid, extra)
        code = _SCRIPTED_CODE.get(status)
        scripted = f"scripted by FakeLayaServer.status({status})"
        if code == "invalid_question" and not isinstance(first, str):
            code = "unknown_model"
        if code is None:
            body: dict[str, Any] = {"type": "about:blank", "title": _phrase(status), "status": status,
                                    "detail": detail or scripted, "request_id": rid}
            return status, {"Content-Type": PROBLEM_MEDIA_TYPE, REQUEST_ID_HEADER: rid, **extra}, body
        errors = []
        if code == "invalid_question":
            errors = [{"question": first, "pointer": question_pointer(first),
                       "detail": detail or "refused by FakeLayaServer.status(422)"}]
        return self.problem(Problem(code, detail or scripted, errors=errors), rid, extra)

    def exchange(self, laya: Answerer, request: ReceivedRequest, *, authorized: bool) -> FakeResponse:
        """One HTTP request, routed as the reference server routes it, claiming the target spec."""
        status, headers, body = self._route(laya, request, authorized=authorized)
        return status, {**headers, SPEC_HEADER: TARGET}, body

    def _route(self, laya: Answerer, request: ReceivedRequest, *, authorized: bool) -> FakeResponse:
        rid = answered_request_id(request.header(REQUEST_ID_HEADER))
        path = request.path.split("?", 1)[0]
        routes = {DECIDE_PATH: "POST", BATCH_PATH: "POST", HEALTH_PATH: "GET", LIVEZ_PATH: "GET", READYZ_PATH: "GET"}
        if path not in routes:
            hint = f"; drop the trailing slash: {path.rstrip('/')}" if path.rstrip("/") in routes else ""
            return self.problem(Problem("not_found", f"no route {path}{hint}"), rid)
        if request.method != routes[path]:
            return self.problem(Problem("method_not_allowed", f"{path} takes {routes[path]}"), rid,
                                {"Allow": routes[path]})
        if path == LIVEZ_PATH:
            return 200, {"Content-Type": JSON_MEDIA_TYPE, REQUEST_ID_HEADER: rid}, {"status": "ok"}
        if path in (HEALTH_PATH, READYZ_PATH):
            return 200, {"Content-Type": JSON_MEDIA_TYPE, REQUEST_ID_HEADER: rid}, self.health(laya, authorized=authorized)
        try:
            if not authorized:
                raise Problem("unauthorized")
            check_media_type(request.header("content-type"))
            limit = laya.limits["max_body_bytes"]
            if len(request.body) > limit:
                raise Problem("too_large", f"the body is {len(request.body)} bytes, the limit is {limit}")
            body = parse_json_object(request.body)
        except Problem as problem:
            return self.problem(problem, rid)
        return self.request(laya, body, batch=path == BATCH_PATH, request_id=rid, parsed=True)


class _LayaServeRefusal(Exception):
    """What laya-serve refuses with: a status and its `{"detail"}` text."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


class _LayaServeFlavour:
    """laya-serve 0.4.15: its order, its words, the first problem only."""

    name = LAYA_SERVE

    def health(self, laya: Answerer, *, authorized: bool) -> dict[str, Any]:
        if not authorized:
            return {"status": "ok"}
        return {
            "status": "ok",
            "loaded": [laya.model],
            "revisions": {laya.model: laya.revision},
            "device": "cpu",
            "device_is_preference": False,
            "checkpoint_devices": {laya.model: "cpu"},
            "cpu_fallbacks": {laya.model: {"count": 0, "last_reason": None}},
        }

    def request(self, laya: Answerer, body: Any, *, batch: bool, request_id: str | None,
                parsed: bool = False) -> FakeResponse:
        try:
            states, questions, explicit = self._checked(laya, body, batch=batch)
        except _LayaServeRefusal as refusal:
            return refusal.status, {"Content-Type": JSON_MEDIA_TYPE}, {"detail": refusal.text}
        started = time.perf_counter()
        results = [laya.decide(state, questions) for state in states]
        infer_ms = (time.perf_counter() - started) * 1000.0
        headers = {"Content-Type": JSON_MEDIA_TYPE, "Server-Timing": f"inference;dur={infer_ms:.2f}",
                   "X-Inference-Time-Ms": f"{infer_ms:.2f}"}
        routing = self._routing(laya, explicit)
        singles = [{"model": LAYA_SERVE_MODEL_FIELD, "answers": a, "usage": u, "routing": routing} for a, u in results]
        if not batch:
            return 200, headers, singles[0]
        return 200, headers, {"results": singles, "total_usage": _total_usage(results)}

    @staticmethod
    def _routing(laya: Answerer, explicit: Any) -> dict[str, Any]:
        # laya-serve routes a name it does not serve as if none was given ("let the router
        # choose"), so a client that insists on another name sees routing.model differ.
        reason = f"explicit model={laya.model!r}" if explicit == laya.model else "default model"
        return {"model": laya.model, "repo": laya.model, "reason": reason, "detection": None, "workflow": None}

    def refusal(self, laya: Answerer, status: int, *, detail: str | None, extra: dict[str, str],
                request_id: str | None, first: Any, code: str | None = None) -> FakeResponse:
        if status in _PROXY_TEXT:
            text = detail if detail is not None else _PROXY_TEXT[status]
            return status, {"Content-Type": "text/plain; charset=utf-8", **extra}, text
        if detail is None:
            if status == 422:
                detail = (f"question {first!r}: refused by FakeLayaServer.status(422)" if first is not None
                          else "refused by FakeLayaServer.status(422)")
            else:
                detail = _LAYA_SERVE_TEXT.get(status, _phrase(status))
        return status, {"Content-Type": JSON_MEDIA_TYPE, **extra}, {"detail": detail}

    def exchange(self, laya: Answerer, request: ReceivedRequest, *, authorized: bool) -> FakeResponse:
        path = request.path.split("?", 1)[0]
        routes = {DECIDE_PATH: "POST", BATCH_PATH: "POST", HEALTH_PATH: "GET"}

        def detail(status: int, text: str, **headers: str) -> FakeResponse:
            return status, {"Content-Type": JSON_MEDIA_TYPE, **headers}, {"detail": text}

        if path not in routes:
            return detail(404, "Not Found")
        if request.method != routes[path]:
            return detail(405, "Method Not Allowed", Allow=routes[path])
        if path == HEALTH_PATH:
            return 200, {"Content-Type": JSON_MEDIA_TYPE}, self.health(laya, authorized=authorized)
        if not authorized:
            return detail(401, "invalid or missing bearer token")
        # laya-serve decides "too large" from Content-Length and parses any media type as JSON.
        if len(request.body) > laya.limits["max_body_bytes"]:
            return detail(413, "request body too large")
        try:
            body = json.loads(request.body)
        except (ValueError, RecursionError):
            return detail(400, "request body must be valid JSON")
        return self.request(laya, body, batch=path == BATCH_PATH, request_id=None)

    def _checked(self, laya: Answerer, body: Any, *, batch: bool) -> tuple[list[Any], dict[str, Any], Any]:
        limits = laya.limits
        if batch:
            if not isinstance(body, Mapping) or "questions" not in body or "states" not in body:
                raise _LayaServeRefusal(400, "request body must be an object with 'states' and 'questions' fields")
        elif not isinstance(body, Mapping) or "questions" not in body:
            raise _LayaServeRefusal(400, "request body must be an object with a 'questions' field")
        questions = body["questions"]
        if not isinstance(questions, Mapping):
            raise _LayaServeRefusal(400, "'questions' must be an object")
        if len(questions) > limits["max_questions"]:
            raise _LayaServeRefusal(413, f"too many questions ({len(questions)} > {limits['max_questions']})")
        if batch:
            states = body["states"]
            if not isinstance(states, list) or not states:
                raise _LayaServeRefusal(400, "'states' must be a non-empty list")
            if len(states) > limits["max_batch_states"]:
                raise _LayaServeRefusal(413, f"too many states ({len(states)} > {limits['max_batch_states']})")
        else:
            states = [body.get("state")]
        limit = limits["max_state_chars"]
        for state in states:
            chars = len(state) if isinstance(state, str) else len(json.dumps(state, default=str))
            if chars > limit:
                raise _LayaServeRefusal(413, f"state too large ({chars} > {limit} chars)")
        if has_lone_surrogate(body):
            raise _LayaServeRefusal(400, "request body contains an unpaired surrogate escape; those cannot be "
                                         "encoded as UTF-8")
        if any(state is None for state in states):
            raise _LayaServeRefusal(400, "'state' is required")
        for qid, definition in questions.items():
            problem = self._question_problem(qid, definition, limits["max_options"])
            if problem is not None:
                raise problem
        return states, dict(questions), body.get("model")

    @staticmethod
    def _question_problem(qid: str, q: Any, max_options: int) -> _LayaServeRefusal | None:
        """laya's `_check_question`: the first thing wrong with one question, in its words."""
        name = f"question {qid!r}"
        if not isinstance(q, Mapping):
            return _LayaServeRefusal(422, f"{name}: definition must be a dict, got {type(q).__name__}")
        qtype = q.get("type")
        if isinstance(qtype, (list, dict)):  # unhashable: laya raises TypeError, laya-serve a bare 500
            return _LayaServeRefusal(500, "inference failed")
        if qtype not in QUESTION_TYPES:
            return _LayaServeRefusal(422, f"{name}: unknown type {qtype!r}; use one of ['choice', 'noul', 'score']")
        if "instructions" not in q:
            return _LayaServeRefusal(422, f"{name}: no 'instructions'; add the text the model should answer")
        check = _CRITERIA_CHECKS[qtype]
        problem = check(q.get("criteria"), max_options)
        return _LayaServeRefusal(problem[0], f"{name}: {problem[1]}") if problem is not None else None


def _choice_criteria_problem(crit: Any, max_options: int) -> tuple[int, str] | None:
    if not isinstance(crit, (Mapping, list)):
        return 422, "a choice question takes 'criteria' as a dict of label -> description, or a list of labels"
    if not crit:
        return 422, "a choice question needs at least one criterion"
    if isinstance(crit, list):
        for i, label in enumerate(crit):
            if isinstance(label, (list, dict)):
                return 422, (f"choice label {i} is a {type(label).__name__}; a label is rendered as option "
                             "text and used as the answer key, so it must be a scalar (a string, number or "
                             f"None), got {label!r}")
    options = len(crit) if isinstance(crit, Mapping) else len({option_key(label) for label in crit})
    if options > max_options:
        return 413, f"too many options ({options} > {max_options})"
    return None


def _score_criteria_problem(crit: Any, max_options: int) -> tuple[int, str] | None:
    if not isinstance(crit, list):
        return 422, "a score question takes 'criteria' as a list of level descriptions, index 0 first"
    if not crit:
        return 422, "a score question needs at least one level"
    for i, level in enumerate(crit):
        if level is None:
            return 422, f"score level {i} is null; give every level a description, index 0 first"
    return None


def _noul_criteria_problem(crit: Any, max_options: int) -> tuple[int, str] | None:
    if crit is None:
        return None
    if not isinstance(crit, Mapping):
        return 422, "a noul question takes 'criteria' as a dict with optional 'true'/'false' descriptions, or omits it"
    keys = sorted({str(k).lower() for k in crit})
    if not set(keys) <= _NOUL_KEYS:
        return 422, (f"a noul question takes 'criteria' keyed only 'true'/'false' (either or both, and "
                     f"omitted is fine), got {keys!r}.")
    return None


# laya-serve's checks of one question type's criteria: (status, words) of the first problem, or None.
_CRITERIA_CHECKS: dict[str, Callable[[Any, int], tuple[int, str] | None]] = {
    "choice": _choice_criteria_problem, "score": _score_criteria_problem, "noul": _noul_criteria_problem,
}


_TARGET_FLAVOUR = _TargetFlavour()
_FLAVOURS: dict[str, _TargetFlavour | _LayaServeFlavour] = {TARGET: _TARGET_FLAVOUR, LAYA_SERVE: _LayaServeFlavour()}


def target_flavour() -> _TargetFlavour:
    """The target spec's flavour (its problem+json rendering)."""
    return _TARGET_FLAVOUR


def flavour(name: str) -> _TargetFlavour | _LayaServeFlavour:
    """The flavour called `name` (one of `FLAVORS`)."""
    try:
        return _FLAVOURS[name]
    except KeyError:
        raise ValueError(f"flavor must be one of {list(FLAVORS)}, got {name!r}") from None

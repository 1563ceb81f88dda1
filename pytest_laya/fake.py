"""A fake Laya server: useful, spec-valid decisions on a real loopback port, plus a fault script.

Downstream tests need a server that answers like a served Laya -- so their happy path runs over a
real socket -- and that can be told to fail in the ways deployments fail, so they can prove their
own error handling. Two layers:

* :class:`FakeLaya` computes answers and refusals from a request body; no I/O.
* :class:`FakeLayaServer` serves it over HTTP/1.1 on 127.0.0.1 (a :class:`~pytest_laya.faults.ScriptedServer`
  with the fake as its default handler). Its fault methods queue actions for the next
  request(s); once they are used up, normal answers resume.

Answers are *useful*, not uniform (docs/fake.md has the exact rules):

* every option gets a score that is a deterministic hash of ``[state, instructions, option key,
  option description]`` alone, mapped to [0, 1); probabilities are the softmax of the scores of a
  question's options at temperature :data:`TEMPERATURE`, rounded to 4 decimals by largest
  remainder so they sum to 1. Reordering options, reordering or adding other questions never
  changes an option's score, so the chosen option never flips.
* ties break in one documented order: the higher score wins, equal scores go to the option key
  that sorts first in Unicode code point order, whatever the request order.
* ``usage.input_tokens`` counts words and punctuation of the state and of every question, plus
  :data:`TOKENS_PER_QUESTION` per question.

Two flavors: ``"target"`` speaks the target spec (``Spec.target()``: problem+json errors with
stable codes and one ``errors[]`` entry per invalid question, X-Request-Id, Server-Timing,
``served_by``, /livez, /readyz); ``"laya-serve-0.4.15"`` mimics laya-serve 0.4.15 as recorded in
``tests/data/laya-serve-0.4.15`` (``{"detail"}`` errors with its texts, ``model:
"laya-rl-agent"``, its /health) and conforms to ``Spec.current()``.

Standard library plus pytest_laya's light modules only: importing this never loads torch, laya,
httpx or a web framework. The spec is read (lazily) only to check target-flavor questions.
"""

from __future__ import annotations

import hashlib
import hmac
import http
import json
import math
import os
import re
import time
from collections.abc import Mapping
from typing import Any

from .problems import PROBLEM_STATUS, PROBLEM_TITLES
from .target_requests import (
    RequestControls,
    RequestRefusal,
    check_nesting,
    check_questions,
    request_controls,
    request_states,
)
from .faults import (
    DEFAULT_GARBAGE,
    Action,
    Delay,
    Handler,
    ReceivedRequest,
    Refuse,
    ResetBeforeHeaders,
    ResetMidBody,
    Respond,
    ScriptedServer,
    Trickle,
    Truncate,
)
from .headers import REQUEST_ID_HEADER, is_valid_request_id, new_request_id

__all__ = [
    "FLAVORS",
    "TARGET",
    "LAYA_SERVE",
    "TEMPERATURE",
    "TOKENS_PER_QUESTION",
    "LIMITS",
    "FakeLaya",
    "FakeLayaServer",
    "count_tokens",
    "rank",
    "serve",
]

TARGET = "target"
LAYA_SERVE = "laya-serve-0.4.15"
FLAVORS: tuple[str, ...] = (TARGET, LAYA_SERVE)

#: Softmax temperature over option scores in [0, 1): three options get a top probability of
#: about 0.42-0.89 (median 0.63), so answers are decided but not certain.
TEMPERATURE = 0.25
#: Probabilities are sent in units of 1/10,000 (4 decimals) that add up to exactly 10,000.
_UNITS = 10_000
#: P(true) of a noul question lies in [_NOUL_LOW, _NOUL_LOW + _NOUL_SPAN) = [0.0201, 0.9799).
_NOUL_LOW = 0.0201
_NOUL_SPAN = 0.9598
#: Tokens added per question to its text's count (laya frames each question with markers).
TOKENS_PER_QUESTION = 4
#: What one request may carry (the target's /health advertises these; laya-serve's defaults).
LIMITS: Mapping[str, int] = {
    "max_questions": 64,
    "max_state_chars": 50_000,
    "max_body_bytes": 2 * 1024 * 1024,
    "max_options": 100,
    "max_batch_states": 64,
}
#: laya-serve's top-level `model`, whatever answered.
LAYA_SERVE_MODEL_FIELD = "laya-rl-agent"

_TOKEN = re.compile(r"\w+|[^\w\s]")
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_SERVER = "pytest-laya-fake"
_QUESTION_TYPES = ("choice", "score", "noul")
_NOUL_KEYS = {"true", "false"}

# FakeLayaServer.status(code): the problem code each documented status gets in the target flavor.
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

_JSON = "application/json"
_PROBLEM_JSON = "application/problem+json"


# --------------------------------------------------------------------------- the answer function


def _canonical(value: Any) -> str:
    """The canonical JSON text the hash reads: sorted keys, no spaces, UTF-8 as is."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)


def _unit(parts: list[Any]) -> float:
    """A number in [0, 1) that depends on `parts` only: blake2b-64 of their canonical JSON / 2**64."""
    data = _canonical(parts).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big") / 2.0**64


def count_tokens(value: Any) -> int:
    """Words and punctuation marks (``\\w+`` runs and single other non-space characters).

    Text counts as itself, JSON values (a state object, a list of turns) as their canonical
    JSON, ``None`` as 0.
    """
    if value is None:
        return 0
    text = value if isinstance(value, str) else _canonical(value)
    return len(_TOKEN.findall(text))


def _json_key(label: Any) -> str:
    # How a list label becomes an answer key: JSON's own spelling (True -> "true", 1.0 -> "1.0").
    return label if isinstance(label, str) else next(iter(json.loads(json.dumps({label: 0}))))


def _options(question: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(key, description) of each option of a valid choice or score question, in request order."""
    criteria = question.get("criteria")
    if question.get("type") == "score":
        return [(str(i), level) for i, level in enumerate(criteria)]
    if isinstance(criteria, Mapping):
        return [(_json_key(k), v) for k, v in criteria.items()]
    seen: dict[str, None] = {}
    for label in criteria:
        seen.setdefault(_json_key(label), None)
    return [(key, None) for key in seen]


def _noul_texts(question: Mapping[str, Any]) -> dict[str, Any]:
    criteria = question.get("criteria")
    lowered = {str(k).lower(): v for k, v in criteria.items()} if isinstance(criteria, Mapping) else {}
    return {"true": lowered.get("true"), "false": lowered.get("false")}


def rank(scores: Mapping[str, float]) -> list[str]:
    """Option keys best first: higher score first, equal scores by key in code point order."""
    return sorted(scores, key=lambda key: (-scores[key], key))


def _distribution(scores: Mapping[str, float]) -> tuple[list[str], dict[str, float], dict[str, float]]:
    """(ranked keys, exact softmax probabilities, probabilities rounded to 4 decimals summing to 1)."""
    order = rank(scores)
    top = scores[order[0]]
    weights = {key: math.exp((scores[key] - top) / TEMPERATURE) for key in order}
    total = math.fsum(weights.values())
    exact = {key: weights[key] / total for key in order}
    # Largest remainder: floor every share to 1e-4 units, then hand the units left over to the
    # largest remainders (ties in rank order). The sum is exactly 1 and the order never inverts.
    units = {key: math.floor(exact[key] * _UNITS) for key in order}
    position = {key: i for i, key in enumerate(order)}
    by_remainder = sorted(order, key=lambda key: (-(exact[key] * _UNITS - units[key]), position[key]))
    left = _UNITS - sum(units.values())
    for key in by_remainder[:max(left, 0)]:
        units[key] += 1
    for key in reversed(by_remainder):  # float noise only: never more than 10,000 units
        if left >= 0:
            break
        if units[key] > 0:
            units[key] -= 1
            left += 1
    return order, exact, {key: units[key] / _UNITS for key in order}


def _margin(order: list[str], exact: Mapping[str, float]) -> float:
    """Top probability minus the second one (1.0 for a single option)."""
    if len(order) < 2:
        return 1.0
    return round(min(1.0, max(0.0, exact[order[0]] - exact[order[1]])), 4)


def _certainty(order: list[str], exact: Mapping[str, float]) -> float:
    """1 - normalised entropy: 0 for a uniform answer, 1 for a certain one (laya-serve's x_jev_confidence)."""
    if len(order) < 2:
        return 1.0
    entropy = -math.fsum(p * math.log(p) for p in exact.values() if p > 0)
    return round(min(1.0, max(0.0, 1.0 - entropy / math.log(len(order)))), 4)


def _act_probability(top: float) -> float:
    return round(0.5 + 0.5 * top, 4)


def _gate(answers: Mapping[str, dict[str, Any]], min_confidence: float | Mapping[str, float]) -> None:
    """laya's abstention gate (``laya.confidence.apply_confidence_gate``) on the fake's answers.

    Each answer's `answer_confidence` (else `confidence`) against the threshold, or against the
    threshold of its option-count bucket (``choice:3-5``...; ``default``, then 0, for a bucket the
    map does not name): `abstention`, `abstention_threshold`, and `low_confidence` when below.
    """
    for answer in answers.values():
        threshold = min_confidence
        if isinstance(min_confidence, Mapping):
            options = len(answer.get("probabilities") or ()) or 2
            size = "2" if options <= 2 else "3-5" if options <= 5 else "6-10" if options <= 10 else "11+"
            threshold = min_confidence.get(f"{answer['type']}:{size}", min_confidence.get("default", 0.0))
        confidence = answer.get("answer_confidence", answer["confidence"])
        if confidence < threshold:
            answer["low_confidence"] = True
        answer["abstention"] = "abstained" if confidence < threshold else "passed"
        answer["abstention_threshold"] = float(threshold)


# --------------------------------------------------------------------------- refusals


class _Refusal(Exception):
    """A request the fake refuses: a target problem `code`, or laya-serve's status and text."""

    def __init__(self, code: str | None, detail: str | None, *, status: int | None = None,
                 errors: list[dict[str, str]] | None = None, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(detail or code or status)
        self.code = code
        self.status = status if status is not None else PROBLEM_STATUS[code]  # type: ignore[index]
        self.detail = detail
        self.errors = errors or []
        self.headers = dict(headers or {})


def _pointer(qid: str) -> str:
    return "/questions/" + qid.replace("~", "~0").replace("/", "~1")


def _pytype(value: Any) -> str:
    """The Python type name laya's messages use for a JSON value."""
    return type(value).__name__


class FakeLaya:
    """The answer generator: request bodies in, (status, headers, JSON body) out; no I/O.

    `model` is the served model name and checkpoint (`served_by.checkpoint`, `routing.model`),
    `revision` its revision; `flavor` is ``"target"`` or ``"laya-serve-0.4.15"``.
    """

    def __init__(self, *, model: str = "fake-laya", revision: str = "fake-0", flavor: str = TARGET) -> None:
        if flavor not in FLAVORS:
            raise ValueError(f"flavor must be one of {list(FLAVORS)}, got {flavor!r}")
        if not isinstance(model, str) or not model.strip():
            raise ValueError(f"model must be a non-empty string, got {model!r}")
        if not isinstance(revision, str) or not revision.strip():
            raise ValueError(f"revision must be a non-empty string, got {revision!r}")
        self.model = model
        self.revision = revision
        self.flavor = flavor
        self.limits: dict[str, int] = dict(LIMITS)

    def __repr__(self) -> str:
        return f"FakeLaya(model={self.model!r}, revision={self.revision!r}, flavor={self.flavor!r})"

    @property
    def served_by(self) -> dict[str, Any]:
        """The target spec's identity of the fake's weights."""
        return {"checkpoint": self.model, "revision": self.revision, "device": "cpu",
                "weights_dtype": "float32", "compiled": False}

    # ----------------------------------------------------------------- the answer function

    def option_scores(self, state: Any, question: Mapping[str, Any]) -> dict[str, float]:
        """Each option's score in [0, 1), in request order, for a valid choice or score question.

        The score of an option is ``blake2b-64(canonical JSON of [state, instructions, key,
        description]) / 2**64``; a list option and a score level's key have ``null`` / the level
        text as description. Nothing else enters it. Override or monkeypatch this to test the tie
        rule.
        """
        instructions = question.get("instructions")
        return {key: _unit([state, instructions, key, text]) for key, text in _options(question)}

    def noul_probability(self, state: Any, question: Mapping[str, Any]) -> float:
        """P(true) of a noul question, in [0.0201, 0.9799]: a hash of state, instructions and the true/false texts."""
        u = _unit([state, question.get("instructions"), _noul_texts(question)])
        return round(_NOUL_LOW + _NOUL_SPAN * u, 4)

    def answer_question(self, state: Any, question: Mapping[str, Any]) -> dict[str, Any]:
        """The answer to one valid question, in the fake's flavor."""
        laya_serve = self.flavor == LAYA_SERVE
        qtype = question.get("type")
        if qtype == "noul":
            p = self.noul_probability(state, question)
            confidence = round(max(p, 1.0 - p), 4)
            answer: dict[str, Any] = {"type": "noul", "noul": p, "confidence": confidence}
            if laya_serve:
                answer["answer_confidence"] = confidence
                answer["action"] = {"act_probability": _act_probability(confidence)}
            return answer
        scores = self.option_scores(state, question)
        order, exact, sent = _distribution(scores)
        probabilities = {key: sent[key] for key in scores}  # request order, as laya answers
        if qtype == "choice":
            answer = {"type": "choice", "choice": order[0], "probabilities": probabilities}
            criteria = question.get("criteria")
            if laya_serve and isinstance(criteria, list):
                # laya-serve answers a number or boolean list label with the label itself (8,
                # true) while keying probabilities "8", "true"; the target sends the key.
                labels: dict[str, Any] = {}
                for label in criteria:
                    labels.setdefault(_json_key(label), label)
                answer["choice"] = labels[order[0]]
        else:
            expected = round(math.fsum(int(key) * p for key, p in probabilities.items()), 4)
            legend = {str(i): level if isinstance(level, str) else _canonical(level)
                      for i, level in enumerate(question.get("criteria") or [])}
            answer = {"type": "score", "score": expected, "legend": legend, "probabilities": probabilities}
        answer["confidence"] = _margin(order, exact)
        if laya_serve:
            answer["answer_confidence"] = sent[order[0]]
            answer["action"] = {"act_probability": _act_probability(exact[order[0]])}
            answer["x_jev_confidence"] = _certainty(order, exact)
        return answer

    def question_tokens(self, question: Mapping[str, Any]) -> int:
        """Tokens one question adds to `input_tokens`: its texts plus TOKENS_PER_QUESTION."""
        tokens = TOKENS_PER_QUESTION + count_tokens(question.get("instructions"))
        qtype = question.get("type")
        if qtype == "noul":
            return tokens + sum(count_tokens(t) for t in _noul_texts(question).values())
        if qtype == "score":
            return tokens + sum(count_tokens(level) for _, level in _options(question))
        return tokens + sum(count_tokens(key) + count_tokens(text) for key, text in _options(question))

    def usage(self, state: Any, questions: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        """`usage` for one state: tokens of the state and of every question; nothing is ever cut."""
        state_tokens = count_tokens(state)
        input_tokens = state_tokens + sum(self.question_tokens(q) for q in questions.values())
        if self.flavor == LAYA_SERVE:
            return {"input_tokens": input_tokens, "output_tokens": 0, "state_tokens": state_tokens,
                    "state_tokens_dropped": 0, "truncated": False, "truncated_questions": []}
        return {"input_tokens": input_tokens, "output_tokens": 0, "state_tokens": state_tokens, "truncated": False}

    def decide(self, state: Any, questions: Mapping[str, Mapping[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(answers in question order, usage) for already valid questions."""
        answers = {qid: self.answer_question(state, q) for qid, q in questions.items()}
        return answers, self.usage(state, questions)

    # ----------------------------------------------------------------- requests

    def answer(self, body: Any, *, request_id: str | None = None) -> tuple[int, dict[str, str], Any]:
        """(status, headers, JSON body) for a parsed ``POST /v1/systemone`` body.

        Validates the body as the flavor's server does. In the target flavor `request_id` is
        echoed in ``X-Request-Id`` and in problems (a fresh one is made when it is absent or
        invalid); the laya-serve flavor sends no request id.
        """
        return self._request(body, batch=False, request_id=request_id)

    def answer_batch(self, body: Any, *, request_id: str | None = None) -> tuple[int, dict[str, str], Any]:
        """(status, headers, JSON body) for a parsed ``POST /v1/systemone/batch`` body."""
        return self._request(body, batch=True, request_id=request_id)

    def health(self, *, authorized: bool = True) -> dict[str, Any]:
        """The flavor's /health document; liveness only (``{"status": "ok"}``) when not `authorized`."""
        if not authorized:
            return {"status": "ok"}
        if self.flavor == LAYA_SERVE:
            return {
                "status": "ok",
                "loaded": [self.model],
                "revisions": {self.model: self.revision},
                "device": "cpu",
                "device_is_preference": False,
                "checkpoint_devices": {self.model: "cpu"},
                "cpu_fallbacks": {self.model: {"count": 0, "last_reason": None}},
            }
        return {"status": "ok", "ready": True, "models": {self.model: self.served_by}, "limits": dict(self.limits)}

    def refusal(
        self,
        status: int,
        *,
        detail: str | None = None,
        retry_after: int | None = None,
        request_id: str | None = None,
        questions: Any = None,
    ) -> tuple[int, dict[str, str], Any]:
        """A spec-correct error response with `status`, as the flavor's server words it.

        Target: problem+json with the code documented for `status` (422: ``invalid_question``
        naming the first of `questions`, or ``unknown_model`` when there are none). laya-serve:
        ``{"detail": ...}`` with laya-serve's text, and omni-jev's text/plain for 502 and 504.
        503 always carries Retry-After (1 s unless `retry_after` says otherwise); other statuses
        carry it when `retry_after` is given. A status with no documented meaning gets a
        generic body.
        """
        if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599:
            raise ValueError(f"status must be an error status 400..599, got {status!r}")
        if retry_after is not None and (isinstance(retry_after, bool) or not isinstance(retry_after, int) or retry_after < 0):
            raise ValueError(f"retry_after must be whole seconds >= 0, got {retry_after!r}")
        if retry_after is None and status == 503:
            retry_after = 1
        extra = {"Retry-After": str(retry_after)} if retry_after is not None else {}
        try:
            phrase = http.HTTPStatus(status).phrase
        except ValueError:
            phrase = "Error"
        first = next(iter(questions), None) if isinstance(questions, Mapping) else None
        if self.flavor == LAYA_SERVE:
            if status in _PROXY_TEXT:
                text = detail if detail is not None else _PROXY_TEXT[status]
                return status, {"Content-Type": "text/plain; charset=utf-8", **extra}, text
            if detail is None:
                if status == 422:
                    detail = (f"question {first!r}: refused by FakeLayaServer.status(422)" if first is not None
                              else "refused by FakeLayaServer.status(422)")
                else:
                    detail = _LAYA_SERVE_TEXT.get(status, phrase)
            return status, {"Content-Type": _JSON, **extra}, {"detail": detail}
        rid = request_id if request_id and is_valid_request_id(request_id) else new_request_id()
        code = _SCRIPTED_CODE.get(status)
        errors: list[dict[str, str]] = []
        if code == "invalid_question":
            if isinstance(first, str):
                errors = [{"question": first, "pointer": _pointer(first),
                           "detail": detail or "refused by FakeLayaServer.status(422)"}]
            else:
                code = "unknown_model"
        if code is None:
            body: dict[str, Any] = {"type": "about:blank", "title": phrase, "status": status,
                                    "detail": detail or f"scripted by FakeLayaServer.status({status})",
                                    "request_id": rid}
            return status, {"Content-Type": _PROBLEM_JSON, REQUEST_ID_HEADER: rid, **extra}, body
        refusal = _Refusal(code, detail or f"scripted by FakeLayaServer.status({status})", errors=errors, headers=extra)
        return self._render(refusal, rid)

    # ----------------------------------------------------------------- internals

    def _render(self, refusal: _Refusal, request_id: str | None) -> tuple[int, dict[str, str], Any]:
        if self.flavor == LAYA_SERVE:
            return refusal.status, {"Content-Type": _JSON, **refusal.headers}, {"detail": refusal.detail}
        code = refusal.code or "malformed_request"
        body: dict[str, Any] = {"type": f"/problems/{code}", "title": PROBLEM_TITLES[code], "status": refusal.status, "code": code}
        if refusal.detail:
            body["detail"] = refusal.detail
        if refusal.errors:
            body["errors"] = refusal.errors
        headers = {"Content-Type": _PROBLEM_JSON, **refusal.headers}
        if request_id:
            body["request_id"] = request_id
            headers[REQUEST_ID_HEADER] = request_id
        if code == "unauthorized":
            headers["WWW-Authenticate"] = "Bearer"
        return refusal.status, headers, body

    def _request(self, body: Any, *, batch: bool, request_id: str | None) -> tuple[int, dict[str, str], Any]:
        rid = None
        if self.flavor == TARGET:
            rid = request_id if request_id and is_valid_request_id(request_id) else new_request_id()
        try:
            controls = RequestControls()
            if self.flavor == TARGET:
                states, questions, explicit, controls = self._target_request(body, batch=batch)
            else:
                states, questions, explicit = self._laya_serve_request(body, batch=batch)
            started = time.perf_counter()
            results = [self.decide(state, questions) for state in states]
            if controls.min_confidence is not None:
                for answers, _ in results:
                    _gate(answers, controls.min_confidence)
            infer_ms = (time.perf_counter() - started) * 1000.0
        except _Refusal as refusal:
            return self._render(refusal, rid)
        if self.flavor == LAYA_SERVE:
            headers = {"Content-Type": _JSON, "Server-Timing": f"inference;dur={infer_ms:.2f}",
                       "X-Inference-Time-Ms": f"{infer_ms:.2f}"}
            routing = self._laya_serve_routing(explicit)
            singles = [{"model": LAYA_SERVE_MODEL_FIELD, "answers": a, "usage": u, "routing": routing} for a, u in results]
            if not batch:
                return 200, headers, singles[0]
            total = {"input_tokens": sum(u["input_tokens"] for _, u in results), "output_tokens": 0}
            return 200, headers, {"results": singles, "total_usage": total}
        headers = {"Content-Type": _JSON, REQUEST_ID_HEADER: rid or new_request_id(),
                   "Server-Timing": f"queue;dur=0.00, infer;dur={infer_ms:.2f}"}
        if batch:
            total = {"input_tokens": sum(u["input_tokens"] for _, u in results), "output_tokens": 0}
            return 200, headers, {"model": self.model, "results": [{"answers": a, "usage": u} for a, u in results],
                                  "total_usage": total, "served_by": self.served_by}
        answers, usage = results[0]
        routing = {"model": self.model, "repo": self.model,
                   "reason": "explicit model" if explicit else "default model", "detection": None, "workflow": None}
        return 200, headers, {"model": self.model, "answers": answers, "usage": usage, "routing": routing,
                              "served_by": self.served_by}

    def _laya_serve_routing(self, explicit: Any) -> dict[str, Any]:
        # laya-serve routes a name it does not serve as if none was given ("let the router
        # choose"), so a client that insists on another name sees routing.model differ.
        if explicit == self.model:
            return {"model": self.model, "repo": self.model, "reason": f"explicit model={self.model!r}",
                    "detection": None, "workflow": None}
        return {"model": self.model, "repo": self.model, "reason": "default model", "detection": None, "workflow": None}

    # -- target validation: the reference server's order and words --------------------------

    def _target_request(self, body: Any, *, batch: bool) -> tuple[list[Any], dict[str, Any], bool, RequestControls]:
        if not isinstance(body, Mapping):
            raise _Refusal("malformed_request", "request body must be a JSON object")
        try:
            check_nesting(body)
        except RequestRefusal as refusal:
            raise _Refusal(refusal.code, refusal.detail) from None
        if _has_lone_surrogate(body):
            raise _Refusal("malformed_request", "request body contains a lone surrogate or invalid UTF-8")
        model = body.get("model")
        if model is not None and (not isinstance(model, str) or model != self.model):
            raise _Refusal("unknown_model", f"model {model!r} is not served here; served: {self.model}")
        try:
            states = request_states(body, self.limits, batch=batch)
            questions = check_questions(body, self.limits)
            # Accepted and refused as the reference server does. `max_len` / `head_max_len` have
            # no effect here: the fake has no token window and never cuts (docs/fake.md).
            controls = request_controls(body)
        except RequestRefusal as refusal:
            raise _Refusal(refusal.code, refusal.detail, errors=refusal.errors) from None
        return states, questions, model is not None, controls

    # -- laya-serve validation: its order, its words, the first problem only ------------------

    def _laya_serve_request(self, body: Any, *, batch: bool) -> tuple[list[Any], dict[str, Any], Any]:
        def refuse(status: int, text: str) -> _Refusal:
            return _Refusal(None, text, status=status)

        if batch:
            if not isinstance(body, Mapping) or "questions" not in body or "states" not in body:
                raise refuse(400, "request body must be an object with 'states' and 'questions' fields")
        elif not isinstance(body, Mapping) or "questions" not in body:
            raise refuse(400, "request body must be an object with a 'questions' field")
        questions = body["questions"]
        if not isinstance(questions, Mapping):
            raise refuse(400, "'questions' must be an object")
        if len(questions) > self.limits["max_questions"]:
            raise refuse(413, f"too many questions ({len(questions)} > {self.limits['max_questions']})")
        if batch:
            states = body["states"]
            if not isinstance(states, list) or not states:
                raise refuse(400, "'states' must be a non-empty list")
            if len(states) > self.limits["max_batch_states"]:
                raise refuse(413, f"too many states ({len(states)} > {self.limits['max_batch_states']})")
        else:
            states = [body.get("state")]
        limit = self.limits["max_state_chars"]
        for state in states:
            chars = len(state) if isinstance(state, str) else len(json.dumps(state, default=str))
            if chars > limit:
                raise refuse(413, f"state too large ({chars} > {limit} chars)")
        if _has_lone_surrogate(body):
            raise refuse(400, "request body contains an unpaired surrogate escape; those cannot be encoded as UTF-8")
        if any(state is None for state in states):
            raise refuse(400, "'state' is required")
        for qid, definition in questions.items():
            problem = self._laya_serve_question_problem(qid, definition)
            if problem is not None:
                raise problem
        return states, dict(questions), body.get("model")

    def _laya_serve_question_problem(self, qid: str, q: Any) -> _Refusal | None:
        """laya's `_check_question`: the first thing wrong with one question, in its words."""
        name = f"question {qid!r}"

        def bad(text: str) -> _Refusal:
            return _Refusal(None, f"{name}: {text}", status=422)

        if not isinstance(q, Mapping):
            return bad(f"definition must be a dict, got {_pytype(q)}")
        qtype = q.get("type")
        if isinstance(qtype, (list, dict)):  # unhashable: laya raises TypeError, laya-serve a bare 500
            return _Refusal(None, "inference failed", status=500)
        if qtype not in _QUESTION_TYPES:
            return bad(f"unknown type {qtype!r}; use one of ['choice', 'noul', 'score']")
        if "instructions" not in q:
            return bad("no 'instructions'; add the text the model should answer")
        crit = q.get("criteria")
        if qtype == "choice":
            if not isinstance(crit, (Mapping, list)):
                return bad("a choice question takes 'criteria' as a dict of label -> description, or a list of labels")
            if not crit:
                return bad("a choice question needs at least one criterion")
            if isinstance(crit, list):
                for i, label in enumerate(crit):
                    if isinstance(label, (list, dict)):
                        return bad(f"choice label {i} is a {_pytype(label)}; a label is rendered as option text and "
                                   f"used as the answer key, so it must be a scalar (a string, number or None), got {label!r}")
            if len(_options(q)) > self.limits["max_options"]:
                return _Refusal(None, f"{name}: too many options ({len(_options(q))} > {self.limits['max_options']})",
                                status=413)
        elif qtype == "score":
            if not isinstance(crit, list):
                return bad("a score question takes 'criteria' as a list of level descriptions, index 0 first")
            if not crit:
                return bad("a score question needs at least one level")
            for i, level in enumerate(crit):
                if level is None:
                    return bad(f"score level {i} is null; give every level a description, index 0 first")
        elif crit is not None:
            if not isinstance(crit, Mapping):
                return bad("a noul question takes 'criteria' as a dict with optional 'true'/'false' descriptions, or omits it")
            keys = sorted({str(k).lower() for k in crit})
            if not set(keys) <= _NOUL_KEYS:
                return bad(f"a noul question takes 'criteria' keyed only 'true'/'false' (either or both, and omitted "
                           f"is fine), got {keys!r}.")
        return None


def _has_lone_surrogate(value: Any) -> bool:
    """Whether any string (key or value) in a parsed body cannot be encoded as UTF-8.

    Iterative: a body nested deeper than Python's recursion limit must be refused, not crash.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# --------------------------------------------------------------------------- the server


Exchange = tuple[int, dict[str, str], Any]


class FakeLayaServer:
    """A fake Laya on ``http://127.0.0.1:<free port>``, with a fault script.

    Use it as a context manager (or call :meth:`start` / :meth:`stop`) and point a client at
    :attr:`url`. Every request is answered by :class:`FakeLaya` in the chosen `flavor`, unless a
    fault method queued an action for it: each call queues actions for the next request(s), in
    arrival order and whatever their route, and normal answers resume once they are used up.
    With `api_key` set, decisions need ``Authorization: Bearer <api_key>``, and /health (and
    /readyz) show only liveness without it. Every request is kept in :attr:`requests`.
    """

    def __init__(
        self,
        *,
        flavor: str = TARGET,
        api_key: str | None = None,
        model: str = "fake-laya",
        revision: str = "fake-0",
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if api_key is not None and (not isinstance(api_key, str) or not api_key):
            raise ValueError("api_key must be a non-empty string or None")
        self.laya = FakeLaya(model=model, revision=revision, flavor=flavor)
        self._expected_auth = f"Bearer {api_key}".encode("utf-8") if api_key else None
        self._server = ScriptedServer(default=self._dispatch, host=host, port=port)

    # ----------------------------------------------------------------- lifecycle and state

    @property
    def flavor(self) -> str:
        return self.laya.flavor

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:PORT`` (after :meth:`start`)."""
        return self._server.url

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def requests(self) -> list[ReceivedRequest]:
        """Every request received, in arrival order."""
        return self._server.requests

    @property
    def errors(self) -> list[BaseException]:
        """Exceptions the fake raised while answering (a bug in the fake, or in a raw Handler)."""
        return self._server.errors

    @property
    def pending(self) -> int:
        """Fault-script actions not yet used."""
        return self._server.pending

    @property
    def listening(self) -> bool:
        """False while a :meth:`refuse` window is in effect."""
        return self._server.listening

    def start(self) -> "FakeLayaServer":
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    def __enter__(self) -> "FakeLayaServer":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> bool:
        return self._server.wait_for_requests(count, timeout)

    def __repr__(self) -> str:
        return f"<FakeLayaServer {self.flavor} {self._server!r}>"

    # ----------------------------------------------------------------- the fault script

    def refuse(self, for_s: float = 1.0) -> "FakeLayaServer":
        """Refuse connections for `for_s` seconds (ECONNREFUSED), then listen again.

        Queued on an empty script it starts at once; after other queued faults it starts once
        the request before it is answered (see :class:`~pytest_laya.faults.Refuse`).
        """
        self._server.enqueue(Refuse(for_s))
        return self

    def reset(self, *, mid_body: bool = False, after_bytes: int | None = None) -> "FakeLayaServer":
        """The next request's connection is reset (TCP RST): before any byte, or, with
        `mid_body`, after the headers and part of the real answer (`after_bytes`, default half)."""
        if not mid_body:
            if after_bytes is not None:
                raise ValueError("after_bytes applies to reset(mid_body=True) only")
            self._server.enqueue(ResetBeforeHeaders())
            return self
        if after_bytes is not None and (isinstance(after_bytes, bool) or not isinstance(after_bytes, int) or after_bytes < 0):
            raise ValueError(f"after_bytes must be an int >= 0, got {after_bytes!r}")

        def cut(request: ReceivedRequest) -> Action:
            response = self._dispatch(request)
            size = len(response.payload)
            return ResetMidBody(response, after_bytes=None if after_bytes is None else min(after_bytes, size - 1))

        self._server.enqueue(Handler(cut))
        return self

    def delay(self, seconds: float) -> "FakeLayaServer":
        """The next request is answered normally, `seconds` after it arrived."""
        self._server.enqueue(Delay(seconds, Handler(self._dispatch)))
        return self

    def trickle(self, *, chunk_size: int = 1, interval_s: float = 0.1) -> "FakeLayaServer":
        """The next real answer: headers at once, then `chunk_size` bytes every `interval_s`."""
        Trickle(Respond(200, b"x"), chunk_size=chunk_size, interval_s=interval_s)  # check the arguments now
        self._server.enqueue(Handler(lambda request: Trickle(self._dispatch(request), chunk_size=chunk_size,
                                                             interval_s=interval_s)))
        return self

    def status(self, code: int, *, retry_after: int | None = None, detail: str | None = None) -> "FakeLayaServer":
        """The next request gets HTTP `code` with the flavor's spec-correct error body.

        Target: problem+json with the documented code (503 ``overloaded``, 502
        ``backend_unavailable``, ...); laya-serve: ``{"detail": <laya-serve's text>}``, and for 502
        / 504 omni-jev's text/plain ``backend unavailable\\n`` / ``backend timed out\\n``. A 503
        always has Retry-After (`retry_after`, default 1). `detail` replaces the text.
        """
        self.laya.refusal(code, retry_after=retry_after)  # check the arguments now, not mid-request

        def respond(request: ReceivedRequest) -> Action:
            questions = None
            try:
                parsed = json.loads(request.body) if request.body else None
                questions = parsed.get("questions") if isinstance(parsed, dict) else None
            except ValueError:
                pass
            status, headers, body = self.laya.refusal(code, detail=detail, retry_after=retry_after,
                                                      request_id=request.header(REQUEST_ID_HEADER),
                                                      questions=questions)
            return self._respond(status, headers, body)

        self._server.enqueue(Handler(respond))
        return self

    def garbage_body(self, *, status: int = 200, body: bytes = DEFAULT_GARBAGE) -> "FakeLayaServer":
        """The next request gets a well-framed `status` that claims JSON and is not JSON."""
        try:
            json.loads(body)
        except ValueError:
            pass
        else:
            raise ValueError(f"garbage body {body!r} is valid JSON")

        def respond(request: ReceivedRequest) -> Action:
            headers = {"Content-Type": _JSON, "Connection": "close", "Server": _SERVER}
            if self.flavor == TARGET:
                headers[REQUEST_ID_HEADER] = self._request_id(request)
            return Respond(status, body, headers=headers)

        self._server.enqueue(Handler(respond))
        return self

    def truncate(self, after_bytes: int = 20) -> "FakeLayaServer":
        """The next real answer is cut after `after_bytes` body bytes and the connection closed
        cleanly (Content-Length promises more)."""
        if isinstance(after_bytes, bool) or not isinstance(after_bytes, int) or after_bytes < 0:
            raise ValueError(f"after_bytes must be an int >= 0, got {after_bytes!r}")

        def cut(request: ReceivedRequest) -> Action:
            response = self._dispatch(request)
            return Truncate(response, after_bytes=min(after_bytes, len(response.payload) - 1))

        self._server.enqueue(Handler(cut))
        return self

    def script(self, *actions: Action) -> "FakeLayaServer":
        """Queue raw :mod:`pytest_laya.faults` actions (Respond, Delay, Handler, ...)."""
        self._server.enqueue(*actions)
        return self

    def normal_response(self, request: ReceivedRequest) -> Respond:
        """The normal answer to `request`, as a Respond: a building block for raw scripts,
        e.g. ``server.script(Handler(lambda r: Trickle(server.normal_response(r), chunk_size=8)))``."""
        return self._dispatch(request)

    # ----------------------------------------------------------------- HTTP

    def _respond(self, status: int, headers: Mapping[str, str], body: Any) -> Respond:
        return Respond(status, body, headers={**headers, "Server": _SERVER})

    def _request_id(self, request: ReceivedRequest) -> str:
        supplied = request.header(REQUEST_ID_HEADER) or ""
        return supplied if is_valid_request_id(supplied) else new_request_id()

    def _authorized(self, request: ReceivedRequest) -> bool:
        if self._expected_auth is None:
            return True
        supplied = (request.header("authorization") or "").encode("latin-1", "replace")
        return hmac.compare_digest(supplied, self._expected_auth)

    def _dispatch(self, request: ReceivedRequest) -> Respond:
        if self.flavor == TARGET:
            status, headers, body = self._target_exchange(request)
            match = _TRACEPARENT.fullmatch((request.header("traceparent") or "").strip())
            if match:  # continue the caller's trace with a span of our own
                headers["traceparent"] = f"00-{match.group(2)}-{os.urandom(8).hex()}-{match.group(4)}"
        else:
            status, headers, body = self._laya_serve_exchange(request)
        return self._respond(status, headers, body)

    def _target_exchange(self, request: ReceivedRequest) -> Exchange:
        laya = self.laya
        rid = self._request_id(request)
        path = request.path.split("?", 1)[0]
        routes: dict[str, str] = {"/v1/systemone": "POST", "/v1/systemone/batch": "POST",
                                  "/health": "GET", "/livez": "GET", "/readyz": "GET"}

        def problem(code: str, detail: str | None = None) -> Exchange:
            return laya._render(_Refusal(code, detail), rid)

        if path not in routes:
            return 404, {"Content-Type": _PROBLEM_JSON, REQUEST_ID_HEADER: rid}, {
                "type": "about:blank", "title": "Not Found", "status": 404, "detail": f"no route {path}",
                "request_id": rid}
        if request.method != routes[path]:
            return 405, {"Content-Type": _PROBLEM_JSON, REQUEST_ID_HEADER: rid, "Allow": routes[path]}, {
                "type": "about:blank", "title": "Method Not Allowed", "status": 405,
                "detail": f"{path} takes {routes[path]}", "request_id": rid}
        if path == "/livez":
            return 200, {"Content-Type": _JSON, REQUEST_ID_HEADER: rid}, {"status": "ok"}
        if path in ("/health", "/readyz"):
            return 200, {"Content-Type": _JSON, REQUEST_ID_HEADER: rid}, laya.health(authorized=self._authorized(request))
        if not self._authorized(request):
            return problem("unauthorized")
        media = (request.header("content-type") or "").split(";")[0].strip().lower()
        if media != _JSON:
            return problem("unsupported_media_type", f"send the body as application/json, not {media or 'no Content-Type'}")
        limit = laya.limits["max_body_bytes"]
        if len(request.body) > limit:
            return problem("too_large", f"the body is {len(request.body)} bytes, the limit is {limit}")
        try:
            body = json.loads(request.body, parse_constant=_no_constants)
        except RecursionError:
            return problem("malformed_request", "request body is nested too deeply")
        except UnicodeError:
            return problem("malformed_request", "request body contains a lone surrogate or invalid UTF-8")
        except ValueError as exc:
            return problem("malformed_request", f"request body must be valid JSON ({exc})")
        if not isinstance(body, dict):
            return problem("malformed_request", "request body must be a JSON object")
        if path == "/v1/systemone":
            return laya.answer(body, request_id=rid)
        return laya.answer_batch(body, request_id=rid)

    def _laya_serve_exchange(self, request: ReceivedRequest) -> Exchange:
        laya = self.laya
        path = request.path.split("?", 1)[0]
        routes: dict[str, str] = {"/v1/systemone": "POST", "/v1/systemone/batch": "POST", "/health": "GET"}

        def detail(status: int, text: str, **headers: str) -> Exchange:
            return status, {"Content-Type": _JSON, **headers}, {"detail": text}

        if path not in routes:
            return detail(404, "Not Found")
        if request.method != routes[path]:
            return detail(405, "Method Not Allowed", Allow=routes[path])
        if path == "/health":
            return 200, {"Content-Type": _JSON}, laya.health(authorized=self._authorized(request))
        if not self._authorized(request):
            return detail(401, "invalid or missing bearer token")
        # laya-serve decides "too large" from Content-Length and parses any media type as JSON.
        if len(request.body) > laya.limits["max_body_bytes"]:
            return detail(413, "request body too large")
        try:
            body = json.loads(request.body)
        except (ValueError, RecursionError):
            return detail(400, "request body must be valid JSON")
        if path == "/v1/systemone":
            return laya.answer(body)
        return laya.answer_batch(body)


def serve(**kwargs: Any) -> FakeLayaServer:
    """A started :class:`FakeLayaServer` (stop it, or use ``with serve(...) as server``)."""
    return FakeLayaServer(**kwargs).start()


"""`FakeLaya`: the fake's answers (`scoring`), pins, calls and flavours behind one object, no I/O.

Every way the fake is reached -- the loopback server, the httpx transport, the http.client
shim -- answers through `FakeLaya.exchange`, so a pin or a recorded call means the same there.
"""

from __future__ import annotations

import functools
import hmac
import math
import threading
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

from pytest_laya.fake.flavours import LAYA_SERVE, LIMITS, TARGET, FakeResponse, flavour, target_flavour
from pytest_laya.fake.pins import (
    PINNED_PROBABILITY,
    Pin,
    PinBoard,
    PinError,
    QuestionsMatcher,
    StateMatcher,
)
from pytest_laya.fake.pins import SUM_TOLERANCE as PIN_SUM_TOLERANCE
from pytest_laya.fake.scoring import (
    NOUL_LOW,
    NOUL_SPAN,
    TEMPERATURE,
    TOKENS_PER_QUESTION,
    act_probability_of,
    certainty,
    count_tokens,
    hash_unit,
    json_key,
    noul_texts,
    option_texts,
    question_key,
    rank,
    rounded_to_sum_one,
    softmax_distribution,
    top_margin,
    value_key,
)
from pytest_laya.faults import ReceivedRequest
from pytest_laya.wire.calls import Call, Calls
from pytest_laya.wire.headers import REQUEST_ID_HEADER, answered_request_id, child_traceparent
from pytest_laya.wire.json_text import canonical_json
from pytest_laya.wire.pointer import question_pointer
from pytest_laya.wire.problems import Problem
from pytest_laya.wire.routes import BATCH_PATH, DECIDE_PATH, JSON_MEDIA_TYPE

if TYPE_CHECKING:  # pragma: no cover
    from pytest_laya.fake.shim import InProcessHost
    from pytest_laya.fake.transport import FakeLayaTransport

__all__ = [
    "IN_PROCESS_URL",
    "SERVER_NAME",
    "TEMPERATURE",
    "TOKENS_PER_QUESTION",
    "FakeLaya",
    "count_tokens",
    "rank",
]


#: The Server header every fake answer carries.
SERVER_NAME = "pytest-laya-fake"
#: Where `FakeLaya.intercept()` serves by default: ``.invalid`` never resolves, so a request
#: that misses the intercept fails instead of reaching a real host.
IN_PROCESS_URL = "http://laya.invalid"
_DECISION_PATHS = (DECIDE_PATH, BATCH_PATH)
# Entries the memo of question tokens and pinned answers holds before it starts afresh.
_MEMO_SIZE = 4096




class FakeLaya:
    """The answer generator: request bodies in, (status, headers, JSON body) out; no I/O.

    `model` is the served model name and checkpoint (`served_by.checkpoint`, `routing.model`),
    `revision` its revision; `flavor` is ``"target"`` or ``"laya-serve-0.4.15"``.
    """

    def __init__(self, *, model: str = "fake-laya", revision: str = "fake-0", flavor: str = TARGET) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ValueError(f"model must be a non-empty string, got {model!r}")
        if not isinstance(revision, str) or not revision.strip():
            raise ValueError(f"revision must be a non-empty string, got {revision!r}")
        self.model = model
        self.revision = revision
        self.flavor = flavor
        self._flavour = flavour(flavor)
        self.limits: dict[str, int] = dict(LIMITS)
        #: Every decision request answered through `exchange`, oldest first (`pytest_laya.wire.calls`).
        self.calls = Calls()
        self._calls_lock = threading.Lock()
        self._pins = PinBoard()
        self._local = threading.local()
        self._memory: dict[tuple[Any, ...], Any] = {}

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
        return {key: hash_unit([state, instructions, key, text]) for key, text in option_texts(question)}

    def noul_probability(self, state: Any, question: Mapping[str, Any]) -> float:
        """P(true) of a noul question, in [0.0201, 0.9799]: a hash of state, instructions and the true/false texts."""
        u = hash_unit([state, question.get("instructions"), noul_texts(question)])
        return round(NOUL_LOW + NOUL_SPAN * u, 4)

    def answer_question(self, state: Any, question: Mapping[str, Any]) -> dict[str, Any]:
        """The answer to one valid question, in the fake's flavor."""
        if question.get("type") == "noul":
            return self._noul_answer(self.noul_probability(state, question))
        scores = self.option_scores(state, question)
        order, exact, sent = softmax_distribution(scores)
        return self._option_answer(question, list(scores), order, exact, sent)

    def _noul_answer(self, p: float) -> dict[str, Any]:
        confidence = round(max(p, 1.0 - p), 4)
        answer: dict[str, Any] = {"type": "noul", "noul": p, "confidence": confidence}
        if self.flavor == LAYA_SERVE:
            answer["answer_confidence"] = confidence
            answer["action"] = {"act_probability": act_probability_of(confidence)}
        return answer

    def _option_answer(self, question: Mapping[str, Any], keys: list[str], order: list[str],
                       exact: Mapping[str, float], sent: Mapping[str, float]) -> dict[str, Any]:
        """A choice or score answer from its ranked keys and exact and sent probabilities."""
        laya_serve = self.flavor == LAYA_SERVE
        probabilities = {key: sent[key] for key in keys}  # request order, as laya answers
        if question.get("type") == "choice":
            answer: dict[str, Any] = {"type": "choice", "choice": order[0], "probabilities": probabilities}
            criteria = question.get("criteria")
            if laya_serve and isinstance(criteria, list):
                # laya-serve answers a number or boolean list label with the label itself (8,
                # true) while keying probabilities "8", "true"; the target sends the key.
                labels: dict[str, Any] = {}
                for label in criteria:
                    labels.setdefault(json_key(label), label)
                answer["choice"] = labels[order[0]]
        else:
            expected = round(math.fsum(int(key) * p for key, p in probabilities.items()), 4)
            legend = {str(i): level if isinstance(level, str) else canonical_json(level)
                      for i, level in enumerate(question.get("criteria") or [])}
            answer = {"type": "score", "score": expected, "legend": legend, "probabilities": probabilities}
        answer["confidence"] = top_margin(order, exact)
        if laya_serve:
            answer["answer_confidence"] = sent[order[0]]
            answer["action"] = {"act_probability": act_probability_of(exact[order[0]])}
            answer["x_jev_confidence"] = certainty(order, exact)
        return answer

    def pinned_answer(self, qid: str, question: Mapping[str, Any], value: Any) -> dict[str, Any]:
        """The full answer a pinned `value` gives one valid question; raises `PinError` if it cannot.

        A key or level gets `PINNED_PROBABILITY` and the other options share the rest equally;
        a distribution names some options' probabilities and the others share what is left
        (one naming every option must sum to 1). The choice (and a score's most likely level)
        is the most probable option, ties by key in code point order.
        """
        qtype = question.get("type")
        if qtype == "noul":
            if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1:
                return self._noul_answer(round(float(value), 4))
            raise PinError(f"question {qid!r} is a noul question: pin it with P(true), a number in [0, 1] "
                           f"(e.g. 0.91), not {value!r}", question=qid)
        keys = [key for key, _ in option_texts(question)]
        shown = keys if qtype == "choice" else [f"{key} {text!r}" for key, text in option_texts(question)]
        what = "options" if qtype == "choice" else "levels"
        if isinstance(value, Mapping):
            given = {self._pinned_key(qid, qtype, key, keys, shown): p for key, p in value.items()}
        else:
            given = {self._pinned_key(qid, qtype, value, keys, shown): PINNED_PROBABILITY if len(keys) > 1 else 1.0}
        rest = [key for key in keys if key not in given]
        left = 1.0 - math.fsum(given.values())
        if not rest and abs(left) > PIN_SUM_TOLERANCE:
            raise PinError(f"pinned distribution for {qid!r} names every one of its {what} and sums to "
                           f"{1.0 - left:.6g}, not 1", question=qid)
        exact = {key: given.get(key, max(left, 0.0) / len(rest) if rest else 0.0) for key in keys}
        order = rank(exact)
        return self._option_answer(question, keys, order, exact, rounded_to_sum_one(order, exact))

    @staticmethod
    def _pinned_key(qid: str, qtype: Any, value: Any, keys: list[str], shown: list[str]) -> str:
        if qtype == "score":
            level = int(value) if isinstance(value, str) and value.isdigit() else value
            if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level < len(keys):
                raise PinError(f"question {qid!r} is a score question with levels 0..{len(keys) - 1} "
                               f"({', '.join(shown)}): pin a level in that range, not {value!r}", question=qid)
            return str(level)
        key = value if isinstance(value, str) else json_key(value)
        if key not in keys:
            raise PinError(f"question {qid!r}: {value!r} is not among its options {keys}", question=qid)
        return key

    def question_tokens(self, question: Mapping[str, Any]) -> int:
        """Tokens one question adds to `input_tokens`: its texts plus TOKENS_PER_QUESTION."""
        tokens = TOKENS_PER_QUESTION + count_tokens(question.get("instructions"))
        qtype = question.get("type")
        if qtype == "noul":
            return tokens + sum(count_tokens(t) for t in noul_texts(question).values())
        if qtype == "score":
            return tokens + sum(count_tokens(level) for _, level in option_texts(question))
        return tokens + sum(count_tokens(key) + count_tokens(text) for key, text in option_texts(question))

    def usage(self, state: Any, questions: Mapping[str, Mapping[str, Any]],
              _keys: Mapping[str, str] | None = None) -> dict[str, Any]:
        """`usage` for one state: tokens of the state and of every question; nothing is ever cut."""
        state_tokens = count_tokens(state)
        keys = _keys if _keys is not None else {qid: question_key(q) for qid, q in questions.items()}
        input_tokens = state_tokens + sum(self._memo(("tokens", keys[qid]), functools.partial(self.question_tokens, q))
                                          for qid, q in questions.items())
        if self.flavor == LAYA_SERVE:
            return {"input_tokens": input_tokens, "output_tokens": 0, "state_tokens": state_tokens,
                    "state_tokens_dropped": 0, "truncated": False, "truncated_questions": []}
        return {"input_tokens": input_tokens, "output_tokens": 0, "state_tokens": state_tokens, "truncated": False}

    def decide(self, state: Any, questions: Mapping[str, Mapping[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(answers in question order, usage) for already valid questions, pins applied."""
        keys = {qid: question_key(q) for qid, q in questions.items()}
        if not self._pins.active:
            answers = {qid: self.answer_question(state, q) for qid, q in questions.items()}
            return answers, self.usage(state, questions, keys)
        plan = self._pins.plan(state, questions)
        answers = {}
        for qid, q in questions.items():
            if qid in plan:
                pin, value = plan[qid]
                try:
                    # A pinned answer depends on the question and the value only: computed once.
                    answer = self._memo(("pinned", qid, keys[qid], value_key(value)),
                                        functools.partial(self.pinned_answer, qid, q, value))
                except PinError as exc:
                    raise PinError(f"{pin!r}: {exc.summary}", question=qid, pin=pin) from None
                answers[qid] = {k: dict(v) if isinstance(v, dict) else v for k, v in answer.items()}
            else:
                answers[qid] = self.answer_question(state, q)
        used = getattr(self._local, "pins", None)
        if used is not None:
            used.update((qid, pin) for qid, (pin, _) in plan.items())
        return answers, self.usage(state, questions, keys)

    def _memo(self, key: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
        """`compute()`, remembered under `key` (a bounded memo: it starts afresh when full)."""
        try:
            return self._memory[key]
        except KeyError:
            pass
        value = compute()
        if len(self._memory) >= _MEMO_SIZE:
            self._memory.clear()
        self._memory[key] = value
        return value

    # ----------------------------------------------------------------- pins

    def pin(self, answers: Mapping[str, Any], *, state: StateMatcher = None, questions: QuestionsMatcher = None,
            times: int | None = None, where: str | None = None) -> Pin:
        """Force answers by question id until removed; returns the `Pin` (see `pytest_laya.fake.pins`).

        `answers` maps a question id to a choice key, a score level, a noul probability or a
        distribution. `state` (a substring, a compiled regex or a callable) and `questions` (a
        set of ids the request asks exactly, or a callable of the questions) narrow which
        requests it applies to; without `questions`, it applies to requests that ask at least
        one of its ids. `times` limits it to that many states. Pins are tried oldest first;
        each question takes its answer from the first matching pin naming it. Raises
        `PinError` for a pin that can never be right. `where` names the pin in messages (by
        default the caller's file:line).
        """
        return self._pins.pin(answers, state=state, questions=questions, times=times, where=where)

    @property
    def pins(self) -> tuple[Pin, ...]:
        """The pins in effect, oldest first."""
        return tuple(self._pins.active)

    def unpin_all(self) -> None:
        """Remove every pin (their calls and errors are kept for `check_pins`)."""
        for pin in list(self._pins.active):
            pin.remove()

    def check_pins(self, *, unused: bool = True, exclude: Collection[Pin] = ()) -> None:
        """Raise `PinError` for every pinned answer the fake could not give and, with `unused`,
        for every pin (still in effect) that never answered a request.

        The plugin's fixtures call this at teardown, so a pin mistake fails the test even when
        the code under test swallowed the 422 it got. Each mistake is raised once: what one call
        raised, the next does not. Pins in `exclude` are not checked.
        """
        skipped = set(map(id, exclude))
        chosen = [pin for pin in self._pins.every if id(pin) not in skipped]
        problems = list(dict.fromkeys(error for pin in chosen for error in pin._take_errors()))
        if unused:
            problems.extend(f"{pin!r} was never used: {self._asked_summary()}" for pin in chosen if pin._take_unused())
        if problems:
            raise PinError("pinned answers went wrong:\n" + "\n".join(f"  - {p}" for p in problems))

    def _asked_summary(self) -> str:
        asked = list(dict.fromkeys(tuple(call.questions) for call in self.calls))
        if not asked:
            return "no decision request reached the fake"
        shown = "; ".join(str(list(ids)) for ids in asked[:5]) + ("; ..." if len(asked) > 5 else "")
        return f"the fake answered {len(self.calls)} decision request(s), asking {shown}"

    # ----------------------------------------------------------------- requests

    def answer(self, body: Any, *, request_id: str | None = None) -> FakeResponse:
        """(status, headers, JSON body) for a parsed ``POST /v1/systemone`` body.

        Validates the body as the flavor's server does. In the target flavor `request_id` is
        echoed in ``X-Request-Id`` and in problems (a fresh one is made when it is absent or
        invalid); the laya-serve flavor sends no request id. Pins apply; a pinned answer the
        fake cannot give is a 422 (see `check_pins`).
        """
        return self._answering(lambda: self._flavour.request(self, body, batch=False, request_id=request_id),
                               request_id)[0]

    def answer_batch(self, body: Any, *, request_id: str | None = None) -> FakeResponse:
        """(status, headers, JSON body) for a parsed ``POST /v1/systemone/batch`` body."""
        return self._answering(lambda: self._flavour.request(self, body, batch=True, request_id=request_id),
                               request_id)[0]

    def _answering(self, respond: Callable[[], FakeResponse],
                   request_id: str | None) -> tuple[FakeResponse, str | None, dict[str, Pin]]:
        """`respond()` with pin errors turned into the flavor's 422: (response, pin error, pins used by id)."""
        used: dict[str, Pin] = {}
        self._local.pins = used
        try:
            return respond(), None, used
        except PinError as exc:
            if exc.pin is not None:
                exc.pin.errors.append(exc.summary)
            return self._pin_refusal(exc, request_id), exc.summary, used
        finally:
            self._local.pins = None

    def _pin_refusal(self, error: PinError, request_id: str | None) -> FakeResponse:
        detail = f"pytest-laya's fake could not give a pinned answer (the test's pin is wrong): {error.summary}"
        if self.flavor != TARGET:
            return 422, {"Content-Type": JSON_MEDIA_TYPE}, {"detail": detail}
        rid = answered_request_id(request_id)
        item = {"pointer": question_pointer(error.question) if error.question else "/questions", "detail": error.summary}
        if error.question:
            item["question"] = error.question
        return target_flavour().problem(Problem("invalid_request", detail, errors=[item]), rid)

    def exchange(self, request: ReceivedRequest, *, api_key: str | None = None, url: str | None = None,
                 fault: str | None = None) -> FakeResponse:
        """Answer one HTTP request as the flavor's server routes it, and record it in `calls`.

        The one path every transport takes: the loopback `FakeLayaServer`, the in-process httpx
        `transport()` and the http.client shim (`intercept()`). With `api_key`, decisions need
        ``Authorization: Bearer <api_key>``. `url` is the full URL, for the record; `fault`
        names the fault-script step this answer serves, if any.
        """
        authorized = api_key is None or _bearer_matches(request.header("authorization"), api_key)
        rid = request.header(REQUEST_ID_HEADER)
        (status, headers, body), error, used = self._answering(
            lambda: self._flavour.exchange(self, request, authorized=authorized), rid)
        if self.flavor == TARGET:
            trace = child_traceparent(request.header("traceparent"))
            if trace:  # continue the caller's trace with a span of our own
                headers["traceparent"] = trace
        headers["Server"] = SERVER_NAME
        self.record(request, status, headers, body, url=url, fault=fault, error=error, used=used)
        return status, headers, body

    def record(self, request: ReceivedRequest, status: int | None, headers: Mapping[str, str] | None = None,
               body: Any = None, *, url: str | None = None, fault: str | None = None, error: str | None = None,
               used: Mapping[str, Pin] | None = None) -> Call | None:
        """Add one decision request and what answered it to `calls` (other routes are not calls).

        `status` None: no response was sent (a reset). The fake's fault script records what it
        sent this way.
        """
        if request.method != "POST" or request.path.split("?", 1)[0] not in _DECISION_PATHS:
            return None
        call = Call(method=request.method, path=request.path, url=url, headers=request.headers, content=request.body,
                    status=status, response_headers=headers or (), response=body if status is not None else None,
                    fault=fault, error=error, pinned=used or ())
        with self._calls_lock:
            self.calls.append(call)
            for pin in dict.fromkeys((used or {}).values()):
                pin._answered(call)
        return call

    # ----------------------------------------------------------------- in process

    def transport(self, *, api_key: str | None = None) -> FakeLayaTransport:
        """An httpx transport (sync and async) that answers in this process, no socket.

        ``httpx.Client(transport=fake.transport(), base_url="http://laya.invalid")``: every
        request goes through `exchange`, as over the loopback server, and is recorded in
        `calls`. It is an ``httpx.MockTransport``, so vcrpy's httpx patch records and replays it.
        """
        from pytest_laya.fake.transport import FakeLayaTransport

        return FakeLayaTransport(self, api_key=api_key)

    def intercept(self, url: str = IN_PROCESS_URL, *, api_key: str | None = None) -> InProcessHost:
        """A context manager that serves `url`'s host in process to http.client, urllib and
        urllib3 (requests), through `exchange`: ``with fake.intercept("http://laya.invalid"):``.

        Only connections to that host and port are served; every other one is left alone. On
        exit the patches are undone (once the last active intercept exits). Plain http only.
        """
        from pytest_laya.fake.shim import InProcessHost

        return InProcessHost(url, lambda request, full_url: self.exchange(request, api_key=api_key, url=full_url))

    def health(self, *, authorized: bool = True) -> dict[str, Any]:
        """The flavor's /health document; liveness only (``{"status": "ok"}``) when not `authorized`."""
        return self._flavour.health(self, authorized=authorized)

    def refusal(
        self,
        status: int,
        *,
        detail: str | None = None,
        retry_after: int | None = None,
        request_id: str | None = None,
        questions: Any = None,
        code: str | None = None,
    ) -> FakeResponse:
        """A spec-correct error response with `status`, as the flavor's server words it.

        Target: problem+json with the code documented for `status` (422: ``invalid_question``
        naming the first of `questions`, or ``unknown_model`` when there are none). laya-serve:
        ``{"detail": ...}`` with laya-serve's text, and omni-jev's text/plain for 502 and 504.
        503 always carries Retry-After (1 s unless `retry_after` says otherwise); other statuses
        carry it when `retry_after` is given. A status with no documented meaning gets a
        generic body. `code` (target flavour) picks the problem code, which must be one of `status`'s.
        """
        if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599:
            raise ValueError(f"status must be an error status 400..599, got {status!r}")
        if code is not None:
            from pytest_laya.wire.problems import PROBLEM_STATUS

            codes = [name for name, number in PROBLEM_STATUS.items() if number == status]
            if self.flavor != TARGET:
                raise ValueError(f"code={code!r}: the {self.flavor} flavour sends no problem codes; leave code out")
            if code not in codes:
                raise ValueError(f"code={code!r} is not a problem code of HTTP {status}; use "
                                 + (", ".join(map(repr, codes)) if codes else "none (leave code out)"))
        if retry_after is not None and (isinstance(retry_after, bool) or not isinstance(retry_after, int) or retry_after < 0):
            raise ValueError(f"retry_after must be whole seconds >= 0, got {retry_after!r}")
        if retry_after is None and status == 503:
            retry_after = 1
        extra = {"Retry-After": str(retry_after)} if retry_after is not None else {}
        first = next(iter(questions), None) if isinstance(questions, Mapping) else None
        return self._flavour.refusal(self, status, detail=detail, extra=extra, request_id=request_id, first=first,
                                     code=code)


def _bearer_matches(header: str | None, api_key: str) -> bool:
    """``Authorization: Bearer <api_key>``, the scheme in any case (RFC 9110 11.1), in constant time."""
    scheme, _, credentials = (header or "").strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(credentials.strip().encode("latin-1", "replace"), api_key.encode("latin-1", "replace"))

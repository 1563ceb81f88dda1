"""The answer rules (`pytest_laya.wire.answer_rules`) as spec violations of a decision's 200.

A schema says what an answer may look like; only the question asked says what it must be: its
options, its levels, which questions need an answer. So a 200 from ``POST /v1/systemone`` (each
result of ``/v1/systemone/batch`` too) is held to the rules for the request that asked it, and
each broken rule is a violation named by rule (`Spec` makes each a `Violation`): ``/body/answers/q/probabilities: rule
probabilities-sum: expected a sum of 1 within 0.02, got 1.6000``. A question whose answer the
schema already faults is left to the schema's violations; a request whose questions no server
could answer (an invalid request answered 200) is not judged by them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from pytest_laya.wire import pointer as json_pointer
from pytest_laya.wire.answer_rules import answer_breaks, answers_hold, asked_breaks
from pytest_laya.wire.errors import LayaConfigError
from pytest_laya.wire.questions import AskedQuestion, normalize_questions

__all__ = ["DECISION_PATHS", "RuleViolation", "answer_violations"]

#: The operations whose 200 carries answers: ``answers`` itself, or one per batch result.
DECISION_PATHS = {"/v1/systemone": False, "/v1/systemone/batch": True}


#: Questions normalised, by the repr of their parsed JSON (one per value: its order, types and
#: values): a suite asks the same questions of many states, and normalising is a function of
#: that value. Bounded; the values are read, never changed.
_ASKED: dict[str, dict[str, AskedQuestion] | None] = {}
_ASKED_MAX = 256
_ASKED_LONGEST = 16 * 1024
_UNSEEN: Any = object()


def _asked(request_body: Any) -> dict[str, AskedQuestion] | None:
    parsed = isinstance(request_body, (bytes, bytearray, str))
    if parsed:
        try:
            request_body = json.loads(request_body)
        except (ValueError, RecursionError):
            return None
    questions = request_body.get("questions") if isinstance(request_body, Mapping) else None
    if not isinstance(questions, Mapping):
        return None
    key = None
    if parsed:  # JSON's own values, whose repr is one per value (order, types and all): equal reprs, equal questions
        try:
            key = repr(questions)
        except (ValueError, RecursionError):
            key = None
        found = _ASKED.get(key, _UNSEEN) if key is not None else _UNSEEN
        if found is not _UNSEEN:
            return found  # type: ignore[no-any-return]
    try:
        asked: dict[str, AskedQuestion] | None = normalize_questions(questions)
    except LayaConfigError:
        asked = None
    if key is not None and len(key) <= _ASKED_LONGEST:
        if len(_ASKED) >= _ASKED_MAX:
            _ASKED.clear()
        _ASKED[key] = asked
    return asked


def _faulted(where: str, schema_faults: list[str]) -> bool:
    return any(fault == where or fault.startswith(where + "/") for fault in schema_faults)


#: (where, expected, actual, rule) of one broken rule.
RuleViolation = tuple[str, str, str, str]


def _answers_violations(base: str, raw_answers: Any, asked: Mapping[str, AskedQuestion],
                        schema_faults: list[str]) -> Iterator[RuleViolation]:
    if not isinstance(raw_answers, Mapping) or any(base.startswith(f + "/") or f == base for f in schema_faults):
        return  # no answers object, or one the schema faults as a whole: its violations say so
    if not schema_faults and answers_hold(raw_answers, asked):
        return  # every rule kept: nothing to word
    breaks = list(asked_breaks(raw_answers, asked))
    for qid, question in asked.items():
        where = f"{base}/{json_pointer.escape(qid)}"
        if qid in raw_answers and not _faulted(where, schema_faults):
            breaks.extend(answer_breaks(question, raw_answers[qid]))
    for found in breaks:
        yield base + json_pointer.pointer(list(found.path)), found.expected, found.actual, found.rule


def answer_violations(path: str, status: int, body: Any, request_body: Any,
                      schema_faults: Iterable[str]) -> Iterator[RuleViolation]:
    """The answer rules' violations of one response (`body` parsed), none where they do not apply.

    `schema_faults` are the `where`s of the schema's violations of the same response.
    """
    batch = DECISION_PATHS.get(path.split("?", 1)[0])
    if batch is None or status != 200 or not isinstance(body, Mapping):
        return
    asked = _asked(request_body)
    if asked is None:
        return
    faults = list(schema_faults)
    if any(f in ("/body", "/body/answers", "/body/results") for f in faults):
        return
    if not batch:
        yield from _answers_violations("/body/answers", body.get("answers"), asked, faults)
        return
    results = body.get("results")
    for index, result in enumerate(results if isinstance(results, list) else []):
        if isinstance(result, Mapping):
            yield from _answers_violations(f"/body/results/{index}/answers", result.get("answers"), asked, faults)

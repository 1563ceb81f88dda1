"""From request bytes to `DecisionRequest`s, or a `Problem` that names everything wrong.

Checks run cheapest first and before anything walks a large structure: JSON, shape, counts and
sizes, then each question against the target spec's `Question` schema and the kit's own
question rules. Every invalid question is reported, not just the first.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pytest_laya.errors import LayaConfigError
from pytest_laya.questions import normalize_question
from pytest_laya.specs import Spec

from .engine import DecisionRequest
from .problems import Problem
from .settings import Limits

__all__ = ["parse_json_object", "decision_requests", "requested_model"]


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _check_text(value: Any, depth: int = 0) -> None:
    # A lone surrogate is legal JSON but cannot be encoded to UTF-8: the tokenizer would fail
    # deep inside inference and turn the client's mistake into a 500.
    if isinstance(value, str):
        value.encode("utf-8")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            key.encode("utf-8")
            _check_text(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check_text(item, depth + 1)


def parse_json_object(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw, parse_constant=_no_constants)
        _check_text(body)
    except RecursionError:
        raise Problem("malformed_request", "request body is nested too deeply") from None
    except UnicodeError:
        raise Problem("malformed_request", "request body contains a lone surrogate or invalid UTF-8") from None
    except ValueError as exc:
        raise Problem("malformed_request", f"request body must be valid JSON ({exc})") from None
    if not isinstance(body, dict):
        raise Problem("malformed_request", "request body must be a JSON object")
    return body


def _state_chars(state: Any) -> int:
    return len(state) if isinstance(state, str) else len(json.dumps(state, ensure_ascii=False))


def _check_state(state: Any, limits: Limits, where: str) -> None:
    if not isinstance(state, (str, dict, list)):
        raise Problem("malformed_request", f"{where} must be text, a JSON object or a list of turns")
    chars = _state_chars(state)
    if chars > limits.max_state_chars:
        raise Problem("state_too_large", f"{where} has {chars} characters, the limit is {limits.max_state_chars}")


def _question_errors(questions: Mapping[str, Any], limits: Limits) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(invalid-question errors, too-many-options errors), one entry per question at fault."""
    spec = Spec.target()
    invalid, oversized = [], []
    for qid, definition in questions.items():
        where = f"/questions/{qid.replace('~', '~0').replace('/', '~1')}"
        found = spec.schema_violations("#/components/schemas/Question", definition, where=where)
        if found:
            first = found[0]
            invalid.append({"question": qid, "pointer": first.where, "detail": f"expected {first.expected}, got {first.actual}"})
            continue
        try:
            asked = normalize_question(qid, definition)
        except LayaConfigError as exc:
            invalid.append({"question": qid, "pointer": where, "detail": exc.summary})
            continue
        if asked.type == "choice" and len(asked.option_keys) > limits.max_options:
            oversized.append({"question": qid, "pointer": f"{where}/criteria",
                              "detail": f"{len(asked.option_keys)} options, the limit is {limits.max_options}"})
    return invalid, oversized


def _questions(body: Mapping[str, Any], limits: Limits) -> dict[str, Any]:
    if "questions" not in body:
        raise Problem("malformed_request", "request body must have 'questions'")
    questions = body["questions"]
    if not isinstance(questions, dict):
        raise Problem("malformed_request", "'questions' must be an object of id -> question")
    if not questions:
        raise Problem("malformed_request", "'questions' is empty: ask at least one question")
    if len(questions) > limits.max_questions:
        raise Problem("too_many_questions", f"{len(questions)} questions, the limit is {limits.max_questions}")
    invalid, oversized = _question_errors(questions, limits)
    if oversized:
        raise Problem("too_large", "a choice question has more options than allowed", errors=oversized)
    if invalid:
        noun = "question is" if len(invalid) == 1 else "questions are"
        raise Problem("invalid_question", f"{len(invalid)} {noun} invalid", errors=invalid)
    return questions


def requested_model(body: Mapping[str, Any], served: list[str]) -> str | None:
    model = body.get("model")
    if model is None:
        return None
    if not isinstance(model, str) or model not in served:
        raise Problem("unknown_model", f"model {model!r} is not served here; served: {', '.join(served)}")
    return model


def decision_requests(body: Mapping[str, Any], limits: Limits, *, batch: bool) -> list[DecisionRequest]:
    """The requests one body asks for: one, or one per state of a batch."""
    if batch:
        states = body.get("states")
        if not isinstance(states, list) or not states:
            raise Problem("malformed_request", "a batch needs 'states', a non-empty list")
        if len(states) > limits.max_batch_states:
            raise Problem("too_large", f"{len(states)} states, the limit is {limits.max_batch_states}")
        for i, state in enumerate(states):
            _check_state(state, limits, f"states[{i}]")
    else:
        if "state" not in body:
            raise Problem("malformed_request", "request body must have 'state'")
        states = [body["state"]]
        _check_state(states[0], limits, "'state'")
    questions = _questions(body, limits)
    return [DecisionRequest(state=state, questions=questions) for state in states]

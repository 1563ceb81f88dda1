"""What the target spec refuses in a decision request, checked the one way every server here does.

The reference server and the fake both call this, so the same body gets the same problem code,
detail and `errors[]` from either. Checks run cheapest first: shape, counts and sizes, then each
question against the target's `Question` schema and the kit's question rules. Every invalid
question is reported, not just the first.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Union

from .errors import LayaConfigError
from .questions import normalize_question

__all__ = [
    "MAX_NESTING",
    "MAX_TOKEN_BUDGET",
    "MIN_CONFIDENCE_BUCKETS",
    "ROUTING_CONTROLS",
    "RequestControls",
    "RequestRefusal",
    "check_nesting",
    "check_state",
    "check_questions",
    "request_controls",
    "request_states",
]

#: Arrays and objects nested deeper than this are refused (400 malformed_request) before anything
#: walks the body. A decision needs a few levels; jsonschema (building its error text), json.dumps
#: and the servers' own checks recurse, and a body just under the interpreter's recursion limit
#: made them fail with a 500. A fixed bound also makes the refusal independent of stack depth.
MAX_NESTING = 128


class RequestRefusal(Exception):
    """A request the target spec refuses: a stable problem `code`, a detail, `errors[]`."""

    def __init__(self, code: str, detail: str, *, errors: list[dict[str, str]] | None = None) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.errors = errors or []


def check_nesting(body: Any, limit: int = MAX_NESTING) -> None:
    """Refuse a parsed body nested more than `limit` arrays/objects deep (the body is level 1).

    Iterative, so it works on any body the JSON parser accepted.
    """
    stack: list[tuple[Any, int]] = [(body, 1)]
    while stack:
        value, level = stack.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
        if children is None:
            continue
        if level > limit:
            raise RequestRefusal("malformed_request", f"request body is nested more than {limit} levels deep")
        stack.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))


def _pointer(qid: str) -> str:
    return "/questions/" + qid.replace("~", "~0").replace("/", "~1")


_STATE_ENCODER = json.JSONEncoder(ensure_ascii=False)


def _serialized_chars(state: Any, limit: int) -> int:
    """`len(json.dumps(state, ensure_ascii=False))`, but counting stops once past `limit`.

    json.dumps is one C call that held the GIL for 60-90 ms on a 2 MiB state, stalling a server's
    event loop; the encoder's chunked form is refused after reading just over `limit` characters.
    """
    chars = 0
    for chunk in _STATE_ENCODER.iterencode(state):
        chars += len(chunk)
        if chars > limit:
            break
    return chars


def check_state(state: Any, limits: Mapping[str, int], where: str) -> None:
    if not isinstance(state, (str, dict, list)):
        raise RequestRefusal("malformed_request", f"{where} must be text, a JSON object or a list of turns")
    limit = limits["max_state_chars"]
    if isinstance(state, str):
        if len(state) > limit:
            raise RequestRefusal("state_too_large", f"{where} has {len(state)} characters, the limit is {limit}")
    elif _serialized_chars(state, limit) > limit:
        raise RequestRefusal("state_too_large", f"{where} has more than {limit} characters as JSON, the limit is {limit}")


def _choice_options(definition: Any) -> int:
    """How many options a choice question offers (0 for anything else), without walking them."""
    if not isinstance(definition, Mapping) or definition.get("type") != "choice":
        return 0
    criteria = definition.get("criteria")
    return len(criteria) if isinstance(criteria, (Mapping, list)) else 0


def check_questions(body: Mapping[str, Any], limits: Mapping[str, int]) -> dict[str, Any]:
    """The request's questions, or a refusal naming every invalid (or oversized) one."""
    if "questions" not in body:
        raise RequestRefusal("malformed_request", "request body must have 'questions'")
    questions = body["questions"]
    if not isinstance(questions, Mapping):
        raise RequestRefusal("malformed_request", "'questions' must be an object of id -> question")
    if not questions:
        raise RequestRefusal("malformed_request", "'questions' is empty: ask at least one question")
    if len(questions) > limits["max_questions"]:
        raise RequestRefusal("too_many_questions", f"{len(questions)} questions, the limit is {limits['max_questions']}")
    from .specs import Spec  # lazy: only a target-spec check reads the spec

    spec = Spec.target()
    invalid: list[dict[str, str]] = []
    oversized: list[dict[str, str]] = []
    for qid, definition in questions.items():
        where = _pointer(qid)
        # Counted before anything walks the options: a 2 MiB body holds 300,000 of them.
        options = _choice_options(definition)
        if options > limits["max_options"]:
            oversized.append({"question": qid, "pointer": f"{where}/criteria",
                              "detail": f"{options} options, the limit is {limits['max_options']}"})
            continue
        found = spec.schema_violations("#/components/schemas/Question", definition, where=where)
        if found:
            first = found[0]
            invalid.append({"question": qid, "pointer": first.where, "detail": f"expected {first.expected}, got {first.actual}"})
            continue
        try:
            normalize_question(qid, definition)
        except LayaConfigError as exc:
            invalid.append({"question": qid, "pointer": where, "detail": exc.summary})
    if oversized:
        raise RequestRefusal("too_large", "a choice question has more options than allowed", errors=oversized)
    if invalid:
        noun = "question is" if len(invalid) == 1 else "questions are"
        raise RequestRefusal("invalid_question", f"{len(invalid)} {noun} invalid", errors=invalid)
    return dict(questions)


def request_states(body: Mapping[str, Any], limits: Mapping[str, int], *, batch: bool) -> list[Any]:
    """The states one body asks about: one, or one per state of a batch."""
    if batch:
        states = body.get("states")
        if not isinstance(states, list) or not states:
            raise RequestRefusal("malformed_request", "a batch needs 'states', a non-empty list")
        if len(states) > limits["max_batch_states"]:
            raise RequestRefusal("too_large", f"{len(states)} states, the limit is {limits['max_batch_states']}")
        for i, state in enumerate(states):
            check_state(state, limits, f"states[{i}]")
        return states
    if "state" not in body:
        raise RequestRefusal("malformed_request", "request body must have 'state'")
    check_state(body["state"], limits, "'state'")
    return [body["state"]]


# -- request controls: laya's per-call options, honoured or refused, never dropped -----------------

#: The largest `max_len` / `head_max_len` a request may ask for: laya-serve 0.4.15's default
#: `LAYA_MAX_TOKEN_BUDGET`, so a token window one server takes, the other takes too.
MAX_TOKEN_BUDGET = 8192

#: laya's routing controls. Each picks which of laya's checkpoints answers (English,
#: multilingual, typed-decisions) through laya's Router; a server of named checkpoints has no
#: such choice to make, so it refuses them rather than answer from a checkpoint nobody asked for.
ROUTING_CONTROLS: tuple[str, ...] = ("task", "lang", "lang_guess")

#: The keys a `min_confidence` map may use: laya 0.4.15's option-count buckets
#: (``laya.confidence.bucket_keys()``) and ``"default"``. Copied, not imported: this module must
#: not import laya; tests/test_request_controls.py holds the copy to laya's.
MIN_CONFIDENCE_BUCKETS: frozenset[str] = frozenset(
    [f"{qtype}:{size}" for qtype in ("choice", "score", "noul") for size in ("2", "3-5", "6-10", "11+")]
    + ["default"])


@dataclass(frozen=True)
class RequestControls:
    """The controls a request set that change its answers, validated; None where it set none.

    `max_len` / `head_max_len` are laya's per-call token windows (the whole sequence, and the
    question's part of it); `min_confidence` is laya's abstention gate, a threshold or a map of
    option-count bucket -> threshold.
    """

    max_len: int | None = None
    head_max_len: int | None = None
    min_confidence: Union[float, Mapping[str, float], None] = None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _threshold(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value) if 0.0 <= value <= 1.0 else None


def _min_confidence(value: Any) -> tuple[Union[float, dict[str, float], None], str | None]:
    """(the validated threshold or map, None), or (None, what is wrong): laya's own rule."""
    if isinstance(value, Mapping):
        if not value:
            return None, "a min_confidence map needs at least one bucket, e.g. {\"choice:2\": 0.6, \"default\": 0.4}"
        out: dict[str, float] = {}
        for key, threshold in value.items():
            if key not in MIN_CONFIDENCE_BUCKETS:
                return None, (f"min_confidence map key {_shown(key)} is not a bucket: use 'default' or one of "
                              "choice|score|noul followed by :2, :3-5, :6-10 or :11+")
            checked = _threshold(threshold)
            if checked is None:
                return None, f"min_confidence[{key!r}] must be a number from 0 to 1, got {_shown(threshold)}"
            out[key] = checked
        return out, None
    checked = _threshold(value)
    if checked is None:
        return None, f"min_confidence must be a number from 0 to 1 or a map of bucket -> number, got {_shown(value)}"
    return checked, None


def request_controls(body: Mapping[str, Any]) -> RequestControls:
    """The request's answer-changing controls, or a 422 ``invalid_request`` naming every bad one.

    laya's client (``laya.RemoteRouter``) and laya-serve 0.4.15 put laya's per-call options in
    the body. A server that ignored one would answer a different question than the one asked,
    so each is either honoured (`max_len`, `head_max_len`, `min_confidence`: laya-serve's checks,
    laya-serve's limit) or refused (the `ROUTING_CONTROLS`); null means not set, as laya reads it.
    """
    errors: list[dict[str, str]] = []
    budgets: dict[str, int] = {}
    for name in ("max_len", "head_max_len"):
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TOKEN_BUDGET:
            errors.append({"pointer": f"/{name}", "detail": f"{name} must be an integer from 1 to {MAX_TOKEN_BUDGET} "
                                                             f"(tokens), got {_shown(value)}"})
        else:
            budgets[name] = value
    min_confidence = None
    if body.get("min_confidence") is not None:
        min_confidence, wrong = _min_confidence(body["min_confidence"])
        if wrong:
            errors.append({"pointer": "/min_confidence", "detail": wrong})
    for name in ROUTING_CONTROLS:
        if body.get(name) is not None:
            errors.append({"pointer": f"/{name}", "detail": (
                f"{name} asks laya's router to pick a checkpoint, and this server does not route: name the "
                f"checkpoint with 'model' (GET /health lists them) and drop {name}")})
    if errors:
        raise RequestRefusal("invalid_request", "; ".join(e["detail"] for e in errors), errors=errors)
    return RequestControls(max_len=budgets.get("max_len"), head_max_len=budgets.get("head_max_len"),
                           min_confidence=min_confidence)

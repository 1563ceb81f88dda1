"""Decision requests as the target spec reads them: bytes in, checked parts or a `Problem` out.

The reference server and the fake both call `read_decision_request`, so one body gets the same
problem code, detail and `errors[]` from either, in the same order: JSON, nesting, text, model,
states, questions, controls. Every invalid question is named in `errors[]`; the detail names the
first. Standard library only (orjson when installed): no spec document is read at request time;
tests hold `question_problem` to the target spec's `Question` schema.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_laya.wire.controls import (
    DEFAULT_WINDOW_TOKENS,
    MAX_TOKEN_BUDGET,
    MIN_CONFIDENCE_BUCKETS,
    ROUTING_CONTROLS,
    RequestControls,
    check_token_budget,
    request_controls,
    requested_tokens,
)
from pytest_laya.wire.pointer import join, question_pointer
from pytest_laya.wire.problems import Problem
from pytest_laya.wire.questions import QUESTION_TYPES, option_key
from pytest_laya.wire.routes import JSON_MEDIA_TYPE

try:
    import orjson
except ImportError:  # the `reference` extra installs it; json alone gives the same answers, slower
    orjson = None  # type: ignore[assignment]

__all__ = [
    "MAX_BATCH_STATES",
    "MAX_BODY_BYTES",
    "MAX_NESTING",
    "MAX_OPTIONS",
    "MAX_QUESTIONS",
    "MAX_REQUEST_TOKENS",
    "MAX_STATE_CHARS",
    "MAX_TOKEN_BUDGET",
    "MIN_CONFIDENCE_BUCKETS",
    "ROUTING_CONTROLS",
    "CheckedRequest",
    "RequestControls",
    "check_media_type",
    "check_nesting",
    "check_questions",
    "check_state",
    "check_token_budget",
    "DEFAULT_WINDOW_TOKENS",
    "requested_tokens",
    "has_lone_surrogate",
    "parse_json_object",
    "question_problem",
    "read_decision_request",
    "request_controls",
    "request_states",
    "requested_model",
]

#: The default limit on a request body (2 MiB): laya-serve 0.4.15's, what both specs document,
#: and the default of the reference server, the fake and the recording proxy.
MAX_BODY_BYTES = 2 * 1024 * 1024
#: The other default limits of one request, one home for each: laya-serve 0.4.15's (the questions
#: and state the current spec's 413 names, the target's /health example), the reference server's
#: and the fake's defaults, and what the server contract probes when a server publishes none.
MAX_QUESTIONS = 64
MAX_STATE_CHARS = 50_000
MAX_OPTIONS = 100
MAX_BATCH_STATES = 64
#: States x questions x window tokens: every request the limits above admit at the default window.
MAX_REQUEST_TOKENS = 64 * DEFAULT_WINDOW_TOKENS
#: Arrays and objects nested deeper than this are refused (400 malformed_request) before anything
#: walks the body: a decision needs a few levels, and a fixed bound makes the refusal independent
#: of the interpreter's stack depth.
MAX_NESTING = 128
# -- bytes to a JSON object ------------------------------------------------------------------------

def check_media_type(content_type: str | None) -> None:
    """Refuse a body that is not sent as ``application/json`` (415)."""
    media = (content_type or "").split(";")[0].strip().lower()
    if media != JSON_MEDIA_TYPE:
        raise Problem("unsupported_media_type", f"send the body as application/json, not {media or 'no Content-Type'}")


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# A lone surrogate is legal JSON but cannot be encoded as UTF-8 (the tokenizer would fail deep in
# inference). Decoded strictly, the bytes cannot carry one, so it can only come from a
# \uD800-\uDFFF escape: a body without such an escape needs no walk of its strings.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")

# orjson reads an integer beyond 64 bits as a float where json keeps it exact: a body with a run
# of 19 digits anywhere goes to json.loads. bytes.translate and `in` find one quickly.
_DIGITS_AS_ZEROS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_WIDE_INTEGER = b"0" * 19


def _loads(text: str, utf8: bytes | None) -> Any:
    """`json.loads`, with orjson where it gives the same value (it holds the GIL for less time).

    Whatever orjson refuses (NaN, 1e400, lone surrogates, deep nesting, syntax errors) goes to
    json.loads, which accepts or refuses it and words the error.
    """
    if orjson is not None and utf8 is not None and _WIDE_INTEGER not in utf8.translate(_DIGITS_AS_ZEROS):
        try:
            return orjson.loads(utf8)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text, parse_constant=_no_constants)


def has_lone_surrogate(value: Any) -> bool:
    """Whether any string (key or value) in a parsed body cannot be encoded as UTF-8. Iterative."""
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


def check_nesting(body: Any, limit: int = MAX_NESTING) -> None:
    """Refuse a parsed body nested more than `limit` arrays/objects deep (the body is level 1)."""
    stack: list[tuple[Any, int]] = [(body, 1)]
    while stack:
        value, level = stack.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
        if children is None:
            continue
        if level > limit:
            raise Problem("malformed_request", f"request body is nested more than {limit} levels deep")
        stack.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object, or a 400 ``malformed_request`` saying why not."""
    try:
        encoding = json.detect_encoding(raw)
        text = raw.decode(encoding)  # strict, so orjson never sees invalid UTF-8
        body = _loads(text, raw if encoding == "utf-8" else None)
    except RecursionError:
        raise Problem("malformed_request", "request body is nested too deeply") from None
    except UnicodeError:
        raise Problem("malformed_request", "request body contains a lone surrogate or invalid UTF-8") from None
    except ValueError as exc:
        raise Problem("malformed_request", f"request body must be valid JSON ({exc})") from None
    check_nesting(body)
    if _SURROGATE_ESCAPE.search(text) and has_lone_surrogate(body):
        raise Problem("malformed_request", "request body contains a lone surrogate or invalid UTF-8")
    if not isinstance(body, dict):
        raise Problem("malformed_request", "request body must be a JSON object")
    return body


# -- states -----------------------------------------------------------------------------------------

_STATE_ENCODER = json.JSONEncoder(ensure_ascii=False)


def _serialized_chars(state: Any, limit: int) -> int:
    """`len(json.dumps(state, ensure_ascii=False))`, but counting stops once past `limit`, so a
    huge state is refused without serialising all of it in one GIL-holding call."""
    chars = 0
    for chunk in _STATE_ENCODER.iterencode(state):
        chars += len(chunk)
        if chars > limit:
            break
    return chars


def check_state(state: Any, limits: Mapping[str, int], where: str) -> None:
    if not isinstance(state, (str, dict, list)):
        raise Problem("malformed_request", f"{where} must be text, a JSON object or a list of turns")
    limit = limits["max_state_chars"]
    if isinstance(state, str):
        if len(state) > limit:
            raise Problem("state_too_large", f"{where} has {len(state)} characters, the limit is {limit}")
    elif _serialized_chars(state, limit) > limit:
        raise Problem("state_too_large", f"{where} has more than {limit} characters as JSON, the limit is {limit}")


def request_states(body: Mapping[str, Any], limits: Mapping[str, int], *, batch: bool) -> list[Any]:
    """The states one body asks about: one, or one per state of a batch."""
    if batch:
        states = body.get("states")
        if not isinstance(states, list) or not states:
            raise Problem("malformed_request", "a batch needs 'states', a non-empty list")
        if len(states) > limits["max_batch_states"]:
            raise Problem("too_large", f"{len(states)} states, the limit is {limits['max_batch_states']}")
        for i, state in enumerate(states):
            check_state(state, limits, f"states[{i}]")
        return states
    if "state" not in body:
        raise Problem("malformed_request", "request body must have 'state'")
    check_state(body["state"], limits, "'state'")
    return [body["state"]]


# -- questions --------------------------------------------------------------------------------------

_TYPES_SHOWN = ", ".join(QUESTION_TYPES)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object" if isinstance(value, Mapping) else type(value).__name__


def _choice_problem(where: str, criteria: Any) -> tuple[str, str] | None:
    if isinstance(criteria, Mapping):
        if not criteria:
            return join(where, "criteria"), "a choice question needs at least one option in 'criteria'"
        for key, description in criteria.items():
            if description is not None and not isinstance(description, str):
                return (join(join(where, "criteria"), key),
                        f"option {key!r} must be described by a string or null, got {_kind(description)}")
        return None
    if not isinstance(criteria, list):
        return (join(where, "criteria"), "a choice question takes 'criteria' as an object of option -> description "
                f"or a list of options, got {_kind(criteria)}")
    if not criteria:
        return join(where, "criteria"), "a choice question needs at least one option in 'criteria'"
    seen: dict[Any, int] = {}
    for i, label in enumerate(criteria):
        if label is None or not isinstance(label, (str, int, float)):
            return join(join(where, "criteria"), i), f"option {i} must be a string, number or boolean, got {_kind(label)}"
        key = option_key(label)
        # JSON equality too: 1 and 1.0 are one item to the schema's uniqueItems, though spelled apart.
        number = ("number", label) if isinstance(label, (int, float)) and not isinstance(label, bool) else None
        earlier = seen.get(key, seen.get(number)) if number is not None else seen.get(key)
        if earlier is not None:
            return (join(join(where, "criteria"), i),
                    f"option {i} ({label!r}) repeats option {earlier}; every option needs its own key")
        seen[key] = i
        if number is not None:
            seen[number] = i
    return None


def _score_problem(where: str, criteria: Any) -> tuple[str, str] | None:
    if not isinstance(criteria, list) or not criteria:
        return (join(where, "criteria"), "a score question takes 'criteria' as a non-empty list of level "
                f"descriptions, index 0 first, got {_kind(criteria) if criteria != [] else 'an empty list'}")
    for i, level in enumerate(criteria):
        if not isinstance(level, str):
            return join(join(where, "criteria"), i), f"score level {i} must be described by a string, got {_kind(level)}"
    return None


def _noul_problem(where: str, definition: Mapping[str, Any]) -> tuple[str, str] | None:
    if "criteria" not in definition:
        return None
    criteria = definition["criteria"]
    if not isinstance(criteria, Mapping):
        return (join(where, "criteria"), "a noul question takes 'criteria' as an object with optional 'true' and "
                f"'false' descriptions, or none, got {_kind(criteria)}")
    for key, description in criteria.items():
        if key not in ("true", "false"):
            return (join(join(where, "criteria"), key),
                    f"a noul question's criteria are keyed only 'true' and 'false', not {key!r}")
        if not isinstance(description, str):
            return join(join(where, "criteria"), key), f"criteria {key!r} must be a string, got {_kind(description)}"
    return None


def question_problem(question_id: str, definition: Any) -> tuple[str, str] | None:
    """The first thing the target spec refuses in one question: (JSON pointer, what is wrong).

    The rules of the target's `Question` schema (type, instructions, criteria per type) and of
    option keys (two labels with one JSON spelling are one key). None when it is valid.
    """
    where = question_pointer(question_id)
    if not isinstance(definition, Mapping):
        return where, f"a question must be an object with 'type' and 'instructions', got {_kind(definition)}"
    qtype = definition.get("type")
    if "type" not in definition:
        return join(where, "type"), f"the question has no 'type'; use one of {_TYPES_SHOWN}"
    if not isinstance(qtype, str) or qtype not in QUESTION_TYPES:
        return join(where, "type"), f"unknown type {_shown(qtype)}; use one of {_TYPES_SHOWN}"
    instructions = definition.get("instructions")
    if "instructions" not in definition:
        return join(where, "instructions"), "the question has no 'instructions'; add the text the model should answer"
    if not isinstance(instructions, str) or not instructions.strip():
        return (join(where, "instructions"),
                f"'instructions' must be text with at least one non-space character, got {_kind(instructions)}"
                + (" (blank)" if isinstance(instructions, str) else ""))
    if qtype == "noul":
        return _noul_problem(where, definition)
    if "criteria" not in definition:
        return join(where, "criteria"), f"a {qtype} question needs 'criteria'"
    if qtype == "choice":
        return _choice_problem(where, definition["criteria"])
    return _score_problem(where, definition["criteria"])


def _choice_options(definition: Any) -> int:
    """How many options a choice question offers (0 for anything else), without walking them."""
    if not isinstance(definition, Mapping) or definition.get("type") != "choice":
        return 0
    criteria = definition.get("criteria")
    return len(criteria) if isinstance(criteria, (Mapping, list)) else 0


def check_questions(body: Mapping[str, Any], limits: Mapping[str, int]) -> dict[str, Any]:
    """The request's questions, or a refusal naming every invalid (or oversized) one."""
    if "questions" not in body:
        raise Problem("malformed_request", "request body must have 'questions'")
    questions = body["questions"]
    if not isinstance(questions, Mapping):
        raise Problem("malformed_request", "'questions' must be an object of id -> question")
    if not questions:
        raise Problem("malformed_request", "'questions' is empty: ask at least one question")
    if len(questions) > limits["max_questions"]:
        raise Problem("too_many_questions", f"{len(questions)} questions, the limit is {limits['max_questions']}")
    invalid: list[dict[str, str]] = []
    oversized: list[dict[str, str]] = []
    for qid, definition in questions.items():
        # Counted before anything walks the options: a 2 MiB body holds 300,000 of them.
        options = _choice_options(definition)
        if options > limits["max_options"]:
            oversized.append({"question": qid, "pointer": join(question_pointer(qid), "criteria"),
                              "detail": f"{options} options, the limit is {limits['max_options']}"})
            continue
        found = question_problem(qid, definition)
        if found is not None:
            invalid.append({"question": qid, "pointer": found[0], "detail": found[1]})
    if oversized:
        raise Problem("too_large", f"question {oversized[0]['question']!r} has more options than allowed: "
                      f"{oversized[0]['detail']}" + _more(oversized), errors=oversized)
    if invalid:
        raise Problem("invalid_question", f"question {invalid[0]['question']!r}: {invalid[0]['detail']}" + _more(invalid),
                      errors=invalid)
    return dict(questions)


def _more(found: Sequence[Mapping[str, str]]) -> str:
    if len(found) == 1:
        return ""
    return f"; and {len(found) - 1} more (see errors)"


# -- the model asked for ------------------------------------------------------------------------------

def requested_model(body: Mapping[str, Any], served: Sequence[str]) -> str | None:
    """The `model` the body names, if any; a name this server does not serve is a 422."""
    model = body.get("model")
    if model is None:
        return None
    if not isinstance(model, str) or model not in served:
        raise Problem("unknown_model", f"model {model!r} is not served here; served: {', '.join(served)}")
    return model


# -- the whole request --------------------------------------------------------------------------------

@dataclass(frozen=True)
class CheckedRequest:
    """A decision (or batch) request the target spec accepts: what to ask about, and how."""

    states: list[Any]
    questions: dict[str, Any]
    controls: RequestControls
    #: The `model` the body named (a served one), or None.
    model: str | None


def read_decision_request(body: Mapping[str, Any], limits: Mapping[str, int], *, served: Sequence[str],
                          batch: bool) -> CheckedRequest:
    """Check a parsed body (see `parse_json_object`) in the target's order; raises `Problem`."""
    model = requested_model(body, served)
    states = request_states(body, limits, batch=batch)
    questions = check_questions(body, limits)
    controls = request_controls(body)
    check_token_budget(len(states), len(questions), controls.max_len, limits)
    return CheckedRequest(states=states, questions=questions, controls=controls, model=model)

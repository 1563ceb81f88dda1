"""From request bytes to `DecisionRequest`s, or a `Problem` that names everything wrong.

JSON first (here), then the target spec's shape, size and per-question checks and laya's request
controls, which live in `pytest_laya.target_requests` so the fake refuses the same bodies in the
same words.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from pytest_laya.target_requests import (
    RequestRefusal,
    check_nesting,
    check_questions,
    request_controls,
    request_states,
)

try:
    import orjson
except ImportError:  # the `reference` extra installs it; json alone gives the same answers, slower
    orjson = None

from .engine import DecisionRequest
from .problems import Problem
from .settings import DEFAULT_WINDOW_TOKENS, Limits

__all__ = ["parse_json_object", "decision_requests", "requested_model", "requested_tokens"]


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


# Decoded strictly, the bytes cannot carry a lone surrogate (json.loads on bytes would let UTF-8
# encoded ones through), so one can only come from a \uD800-\uDFFF escape: a body without such an
# escape needs no walk of its strings, which on a 2 MiB body of small items is most of the cost.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


# orjson reads an integer beyond 64 bits as a float where json keeps it exact: a body with a
# run of 19 digits anywhere (even inside a string) goes to json.loads. bytes.translate and `in`
# find one in about 2 ms on 2 MiB, where re took 20-40 ms.
_DIGITS_AS_ZEROS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_WIDE_INTEGER = b"0" * 19


def _loads(text: str, utf8: bytes | None) -> Any:
    """`json.loads` as the server has always read bodies, with orjson where it agrees.

    json.loads is one C call that holds the GIL: on a 1.8 MB body of 150,000 small keys it held
    it for 70-160 ms, stalling `/livez` past its 100 ms budget; orjson takes about 30 ms.
    `utf8` is the body when it is UTF-8 (orjson reads nothing else). Whatever orjson refuses
    (NaN, 1e400, lone surrogates, deep nesting, every syntax error) goes to json.loads, which
    accepts or refuses it and words the error exactly as before.
    """
    if orjson is not None and utf8 is not None and _WIDE_INTEGER not in utf8.translate(_DIGITS_AS_ZEROS):
        try:
            return orjson.loads(utf8)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text, parse_constant=_no_constants)


def parse_json_object(raw: bytes) -> dict[str, Any]:
    try:
        encoding = json.detect_encoding(raw)
        text = raw.decode(encoding)  # strict, so orjson never sees invalid UTF-8
        body = _loads(text, raw if encoding == "utf-8" else None)
        check_nesting(body)
        if _SURROGATE_ESCAPE.search(text):
            _check_text(body)
    except RequestRefusal as refusal:
        raise Problem(refusal.code, refusal.detail) from None
    except RecursionError:
        raise Problem("malformed_request", "request body is nested too deeply") from None
    except UnicodeError:
        raise Problem("malformed_request", "request body contains a lone surrogate or invalid UTF-8") from None
    except ValueError as exc:
        raise Problem("malformed_request", f"request body must be valid JSON ({exc})") from None
    if not isinstance(body, dict):
        raise Problem("malformed_request", "request body must be a JSON object")
    return body


def requested_model(body: Mapping[str, Any], served: list[str]) -> str | None:
    model = body.get("model")
    if model is None:
        return None
    if not isinstance(model, str) or model not in served:
        raise Problem("unknown_model", f"model {model!r} is not served here; served: {', '.join(served)}")
    return model


def requested_tokens(states: int, questions: int, max_len: int | None) -> int:
    """The tokens a request may make laya run: one sequence per (state, question), each at most
    the token window long (`max_len`, else `DEFAULT_WINDOW_TOKENS`)."""
    return states * questions * (DEFAULT_WINDOW_TOKENS if max_len is None else max_len)


def _check_token_budget(states: int, questions: int, max_len: int | None, limits: Limits) -> None:
    asked = requested_tokens(states, questions, max_len)
    if asked <= limits.max_request_tokens:
        return
    window = DEFAULT_WINDOW_TOKENS if max_len is None else max_len
    shape = f"{questions} questions" + (f" x {states} states" if states > 1 else "")
    detail = (f"{shape} x a window of {window} tokens (max_len{'' if max_len is not None else ', the default'}) "
              f"is {asked} tokens of inference; the limit is {limits.max_request_tokens} (max_request_tokens in "
              f"/health limits): lower max_len, or send fewer questions{' or states' if states > 1 else ''}")
    raise Problem("too_large", detail, errors=[{"pointer": "/max_len" if max_len is not None else "/questions",
                                                "detail": detail}])


def decision_requests(body: Mapping[str, Any], limits: Limits, *, batch: bool) -> list[DecisionRequest]:
    """The requests one body asks for: one, or one per state of a batch, each with its controls,
    within the request token budget."""
    bounds = limits.to_json()
    try:
        states = request_states(body, bounds, batch=batch)
        questions = check_questions(body, bounds)
        controls = request_controls(body)
    except RequestRefusal as refusal:
        raise Problem(refusal.code, refusal.detail, errors=refusal.errors) from None
    _check_token_budget(len(states), len(questions), controls.max_len, limits)
    return [DecisionRequest(state=state, questions=questions, max_len=controls.max_len,
                            head_max_len=controls.head_max_len, min_confidence=controls.min_confidence)
            for state in states]

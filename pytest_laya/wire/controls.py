"""laya's per-call controls in a request: honoured or refused, never silently dropped.

laya's client (``laya.RemoteRouter``) and laya-serve 0.4.15 put laya's per-call options in the
request body. A server that ignored one would answer a different question than the one asked, so
each is either honoured (`max_len`, `head_max_len`, `min_confidence`: laya-serve's checks and
limit) or refused (the `ROUTING_CONTROLS`). Also here: the tokens of inference a request may ask
for, and its budget.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_laya.wire.problems import Problem

__all__ = [
    "DEFAULT_WINDOW_TOKENS",
    "MAX_TOKEN_BUDGET",
    "MIN_CONFIDENCE_BUCKETS",
    "ROUTING_CONTROLS",
    "RequestControls",
    "check_token_budget",
    "request_controls",
    "requested_tokens",
]


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


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
#: not import laya; tests/wire/test_request_controls.py holds the copy to laya's.
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
    min_confidence: float | Mapping[str, float] | None = None


def _threshold(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value) if 0.0 <= value <= 1.0 else None


def _min_confidence(value: Any) -> tuple[float | dict[str, float] | None, str | None]:
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
        raise Problem("invalid_request", "; ".join(e["detail"] for e in errors), errors=errors)
    return RequestControls(max_len=budgets.get("max_len"), head_max_len=budgets.get("head_max_len"),
                           min_confidence=min_confidence)


# -- the work one request asks for -----------------------------------------------------------------

#: The token window laya uses when a request sets no `max_len` (the tiny checkpoint's and laya's default).
DEFAULT_WINDOW_TOKENS = 512


def requested_tokens(states: int, questions: int, max_len: int | None) -> int:
    """The tokens a request may make laya run: one sequence per (state, question), each at most
    the token window long (`max_len`, else `DEFAULT_WINDOW_TOKENS`)."""
    return states * questions * (DEFAULT_WINDOW_TOKENS if max_len is None else max_len)


def check_token_budget(states: int, questions: int, max_len: int | None, limits: Mapping[str, int]) -> None:
    """Refuse (413 ``too_large``) a request that asks for more tokens of inference than
    ``max_request_tokens`` allows, saying what to lower; no limit, no check."""
    limit = limits.get("max_request_tokens")
    asked = requested_tokens(states, questions, max_len)
    if limit is None or asked <= limit:
        return
    window = DEFAULT_WINDOW_TOKENS if max_len is None else max_len
    shape = f"{questions} questions" + (f" x {states} states" if states > 1 else "")
    detail = (f"{shape} x a window of {window} tokens (max_len{'' if max_len is not None else ', the default'}) "
              f"is {asked} tokens of inference; the limit is {limit} (max_request_tokens in /health limits): "
              f"lower max_len, or send fewer questions{' or states' if states > 1 else ''}")
    raise Problem("too_large", detail, errors=[{"pointer": "/max_len" if max_len is not None else "/questions",
                                                "detail": detail}])

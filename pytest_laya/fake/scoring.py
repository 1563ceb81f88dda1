"""The fake's answer function: option scores, distributions, confidences and token counts, no I/O.

Every option gets a score that is a deterministic hash of ``[state, instructions, option key,
option description]`` alone, mapped to [0, 1); probabilities are the softmax of the scores of a
question's options at temperature `TEMPERATURE`, rounded to 4 decimals by largest remainder so
they sum to 1. Reordering options, or reordering or adding other questions, never changes an
option's score. Ties break in one documented order: the higher score wins, equal scores go to
the key that sorts first in code point order. ``usage.input_tokens`` counts words and
punctuation of the state and of every question, plus `TOKENS_PER_QUESTION` per question.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from pytest_laya.wire.json_text import canonical_json

__all__ = ["TEMPERATURE", "TOKENS_PER_QUESTION", "count_tokens", "rank"]


#: Softmax temperature over option scores in [0, 1): three options get a top probability of
#: about 0.42-0.89 (median 0.63), so answers are decided but not certain.
TEMPERATURE = 0.25


#: Probabilities are sent in units of 1/10,000 (4 decimals) that add up to exactly 10,000.
_UNITS = 10_000


#: P(true) of a noul question lies in [NOUL_LOW, NOUL_LOW + NOUL_SPAN) = [0.0201, 0.9799).
NOUL_LOW = 0.0201


NOUL_SPAN = 0.9598


#: Tokens added per question to its text's count (laya frames each question with markers).
TOKENS_PER_QUESTION = 4


_TOKEN = re.compile(r"\w+|[^\w\s]")


def hash_unit(parts: list[Any]) -> float:
    """A number in [0, 1) that depends on `parts` only: blake2b-64 of their canonical JSON / 2**64."""
    data = canonical_json(parts).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big") / 2.0**64


_KEY_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str)


def question_key(question: Mapping[str, Any]) -> str:
    """One question's JSON as sent (key order kept): what its tokens and pinned answers depend on."""
    return _KEY_ENCODER.encode(question)


def value_key(value: Any) -> Any:
    return ("map", json.dumps(value, sort_keys=True, default=str)) if isinstance(value, Mapping) else (type(value), value)


def count_tokens(value: Any) -> int:
    """Words and punctuation marks (``\\w+`` runs and single other non-space characters).

    Text counts as itself, JSON values (a state object, a list of turns) as their canonical
    JSON, ``None`` as 0.
    """
    if value is None:
        return 0
    text = value if isinstance(value, str) else canonical_json(value)
    return len(_TOKEN.findall(text))


def json_key(label: Any) -> str:
    # How a list label becomes an answer key: JSON's own spelling (True -> "true", 1.0 -> "1.0").
    return label if isinstance(label, str) else next(iter(json.loads(json.dumps({label: 0}))))


def option_texts(question: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(key, description) of each option of a valid choice or score question, in request order."""
    criteria = question.get("criteria") or ()
    if question.get("type") == "score":
        return [(str(i), level) for i, level in enumerate(criteria)]
    if isinstance(criteria, Mapping):
        return [(json_key(k), v) for k, v in criteria.items()]
    seen: dict[str, None] = {}
    for label in criteria:
        seen.setdefault(json_key(label), None)
    return [(key, None) for key in seen]


def noul_texts(question: Mapping[str, Any]) -> dict[str, Any]:
    criteria = question.get("criteria")
    lowered = {str(k).lower(): v for k, v in criteria.items()} if isinstance(criteria, Mapping) else {}
    return {"true": lowered.get("true"), "false": lowered.get("false")}


def rank(scores: Mapping[str, float]) -> list[str]:
    """Option keys best first: higher score first, equal scores by key in code point order."""
    return sorted(scores, key=lambda key: (-scores[key], key))


def softmax_distribution(scores: Mapping[str, float]) -> tuple[list[str], dict[str, float], dict[str, float]]:
    """(ranked keys, exact softmax probabilities, probabilities rounded to 4 decimals summing to 1)."""
    order = rank(scores)
    top = scores[order[0]]
    weights = {key: math.exp((scores[key] - top) / TEMPERATURE) for key in order}
    total = math.fsum(weights.values())
    exact = {key: weights[key] / total for key in order}
    return order, exact, rounded_to_sum_one(order, exact)


def rounded_to_sum_one(order: list[str], exact: Mapping[str, float]) -> dict[str, float]:
    """`exact` (keys ranked by `order`) rounded to 4 decimals that sum to exactly 1."""
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
    return {key: units[key] / _UNITS for key in order}


def top_margin(order: list[str], exact: Mapping[str, float]) -> float:
    """Top probability minus the second one (1.0 for a single option)."""
    if len(order) < 2:
        return 1.0
    return round(min(1.0, max(0.0, exact[order[0]] - exact[order[1]])), 4)


def certainty(order: list[str], exact: Mapping[str, float]) -> float:
    """1 - normalised entropy: 0 for a uniform answer, 1 for a certain one (laya-serve's x_jev_confidence)."""
    if len(order) < 2:
        return 1.0
    entropy = -math.fsum(p * math.log(p) for p in exact.values() if p > 0)
    return round(min(1.0, max(0.0, 1.0 - entropy / math.log(len(order)))), 4)


def act_probability_of(top: float) -> float:
    return round(0.5 + 0.5 * top, 4)

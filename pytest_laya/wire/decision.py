"""What a decision is, and how a server's answer becomes one (or is refused).

The answer rules live here, not in the client: a probability outside [0, 1], a distribution that
does not sum to 1 within `SUM_TOLERANCE`, an option the question never offered, or a missing
answer all raise `LayaCallError` (code ``bad_answer``). A test therefore never sees a Decision
that a real Laya could not have produced, whichever mode delivered the bytes.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_laya.wire.errors import LayaCallError
from pytest_laya.wire.identity import ServedIdentity
from pytest_laya.wire.questions import AskedQuestion, option_key

__all__ = [
    "SUM_TOLERANCE",
    "Choice",
    "Score",
    "Noul",
    "Answer",
    "Usage",
    "Provenance",
    "Decision",
    "parse_answers",
    "parse_usage",
]

# Servers round each probability to 4 decimals, so 12 options may miss 1.0 by 6e-4; 0.02 is the
# limit s1a's client and the contract suite agree on.
SUM_TOLERANCE = 0.02


@dataclass(frozen=True)
class Choice:
    """The chosen option `key`, every offered option's probability, and calibrated confidence."""

    key: str
    probabilities: Mapping[str, float]
    confidence: float
    type: str = field(default="choice", init=False)


@dataclass(frozen=True)
class Score:
    """The most probable `level`, the `expected` level, and per-level probabilities."""

    level: int
    expected: float
    probabilities: Mapping[int, float]
    legend: Mapping[int, str]
    confidence: float
    type: str = field(default="score", init=False)


@dataclass(frozen=True)
class Noul:
    """`p` is P(true) for a yes/no question.

    `confidence` is None when the server sent none: Jev's noul answer is `type` and `noul` only,
    and laya-serve with ``LAYA_JEV_STRICT=1`` (and the reference server's ``--jev-strict``) send
    just that. Choice and score answers always carry one.
    """

    p: float
    confidence: float | None = None
    type: str = field(default="noul", init=False)


Answer = Choice | Score | Noul


@dataclass(frozen=True)
class Usage:
    input_tokens: int
    output_tokens: int = 0
    # Whatever else the server counted (state_tokens, truncated, ...), as sent.
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def truncated(self) -> bool:
        """Whether the server dropped input to fit its token window."""
        return bool(self.extra.get("truncated")) or bool(self.extra.get("truncated_questions"))


@dataclass(frozen=True)
class Provenance:
    """Where a decision came from, for logs, cassettes and failure messages."""

    url: str
    request_id: str | None
    served_by: ServedIdentity | None
    server_timing: Mapping[str, float] = field(default_factory=dict)
    routing: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Decision:
    """One answer per asked question, in the order asked."""

    answers: Mapping[str, Answer]
    usage: Usage
    model: str | None
    provenance: Provenance

    def __getitem__(self, question_id: str) -> Answer:
        return self.answers[question_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self.answers)

    def __len__(self) -> int:
        return len(self.answers)


def _bad(message: str) -> LayaCallError:
    return LayaCallError(message, code="bad_answer")


def _unit_number(qid: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _bad(f"answer {qid!r}: {name} must be a number, got {value!r}")
    if not 0.0 <= value <= 1.0:
        raise _bad(f"answer {qid!r}: {name} {value!r} is outside [0, 1]")
    return float(value)


def _distribution(qid: str, raw: Any, expected_keys: tuple[str, ...]) -> dict[str, float]:
    if not isinstance(raw, Mapping):
        raise _bad(f"answer {qid!r}: probabilities must be an object, got {type(raw).__name__}")
    got = set(raw)
    if got != set(expected_keys):
        missing = [k for k in expected_keys if k not in got]
        foreign = sorted(got - set(expected_keys))
        what = []
        if missing:
            what.append(f"missing {missing}")
        if foreign:
            what.append(f"not offered {foreign}")
        raise _bad(f"answer {qid!r}: probabilities must cover exactly the offered options ({'; '.join(what)})")
    probs = {k: _unit_number(qid, f"probability of {k!r}", raw[k]) for k in expected_keys}
    total = math.fsum(probs.values())
    if abs(total - 1.0) > SUM_TOLERANCE:
        raise _bad(f"answer {qid!r}: probabilities sum to {total:.4f}, not 1 within {SUM_TOLERANCE}")
    return probs


def _parse_one(asked: AskedQuestion, raw: Any) -> Answer:
    qid = asked.id
    if not isinstance(raw, Mapping):
        raise _bad(f"answer {qid!r} must be an object, got {type(raw).__name__}")
    if raw.get("type", asked.type) != asked.type:
        raise _bad(f"answer {qid!r} has type {raw.get('type')!r}, but a {asked.type} question was asked")
    if asked.type == "noul":
        if "noul" not in raw:
            raise _bad(f"answer {qid!r} has no 'noul' probability")
        confidence = _unit_number(qid, "confidence", raw["confidence"]) if "confidence" in raw else None
        return Noul(p=_unit_number(qid, "noul", raw["noul"]), confidence=confidence)
    if "confidence" not in raw:
        raise _bad(f"answer {qid!r} has no confidence")
    confidence = _unit_number(qid, "confidence", raw["confidence"])
    probs = _distribution(qid, raw.get("probabilities"), asked.option_keys)
    if asked.type == "choice":
        key = raw.get("choice")
        if type(key) is not str and isinstance(key, (int, float)) and option_key(key) in asked.label_keys:
            # laya (in process and laya-serve 0.4.15) answers a number or boolean list label with
            # the label itself, 7 or true, while keying its probabilities "7" and "true".
            key = option_key(key)
        if key not in probs:
            raise _bad(f"answer {qid!r}: choice {key!r} is not among the options {list(asked.option_keys)}")
        return Choice(key=key, probabilities=probs, confidence=confidence)
    levels = {int(k): p for k, p in probs.items()}
    top = max(levels.values())
    level = min(i for i, p in levels.items() if p == top)  # ties: the lowest level
    expected = raw.get("score")
    if isinstance(expected, bool) or not isinstance(expected, (int, float)) or not math.isfinite(expected):
        raise _bad(f"answer {qid!r}: score must be the expected level as a number, got {expected!r}")
    mean = math.fsum(i * p for i, p in levels.items())
    if abs(expected - mean) > SUM_TOLERANCE * max(1, len(levels) - 1) + 1e-3:
        raise _bad(f"answer {qid!r}: score {expected} disagrees with its probabilities (expected level {mean:.4f})")
    legend_raw = raw.get("legend")
    legend = dict(asked.legend)
    if isinstance(legend_raw, Mapping):
        legend.update({int(k): str(v) for k, v in legend_raw.items() if str(k).isdigit()})
    return Score(level=level, expected=float(expected), probabilities=levels, legend=legend, confidence=confidence)


def parse_answers(raw_answers: Any, asked: Mapping[str, AskedQuestion]) -> dict[str, Answer]:
    """Typed answers in question order; raises `LayaCallError` (``bad_answer``) on any rule broken."""
    if not isinstance(raw_answers, Mapping):
        raise _bad(f"'answers' must be an object, got {type(raw_answers).__name__}")
    missing = [qid for qid in asked if qid not in raw_answers]
    if missing:
        raise _bad(f"no answer for question(s) {missing}")
    extra = sorted(set(raw_answers) - set(asked))
    if extra:
        raise _bad(f"answers for questions nobody asked: {extra}")
    return {qid: _parse_one(q, raw_answers[qid]) for qid, q in asked.items()}


def parse_usage(raw: Any) -> Usage:
    if not isinstance(raw, Mapping):
        raise _bad(f"'usage' must be an object, got {type(raw).__name__}")
    tokens = raw.get("input_tokens")
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise _bad(f"usage.input_tokens must be a non-negative integer, got {tokens!r}")
    out = raw.get("output_tokens", 0)
    if isinstance(out, bool) or not isinstance(out, int) or out < 0:
        raise _bad(f"usage.output_tokens must be a non-negative integer, got {out!r}")
    extra = {k: v for k, v in raw.items() if k not in ("input_tokens", "output_tokens")}
    return Usage(input_tokens=tokens, output_tokens=out, extra=extra)

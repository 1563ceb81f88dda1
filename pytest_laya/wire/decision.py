"""What a decision is, and how a server's answer becomes one (or is refused).

An answer that breaks one of the answer rules (`pytest_laya.wire.answer_rules`: a probability
outside [0, 1], a distribution that does not sum to 1 within `SUM_TOLERANCE`, an option the
question never offered, a choice that is not the most probable, a missing answer) raises
`LayaCallError` (code ``bad_answer``), and so does every other malformed answer. A test therefore
never sees a Decision that a real Laya could not have produced, whichever mode delivered the bytes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_laya.wire.answer_rules import SUM_TOLERANCE, RuleBreak, answers_breaks, answers_hold, shown
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


def _first_break(breaks: Iterator[RuleBreak]) -> None:
    found = next(breaks, None)
    if found is not None:
        raise _bad(found.message())


def _parse_one(asked: AskedQuestion, raw: Mapping[str, Any]) -> Answer:
    """The typed answer; `raw` has kept every rule (`answer_breaks`)."""
    confidence = float(raw["confidence"]) if "confidence" in raw else None
    if asked.type == "noul":
        return Noul(p=float(raw["noul"]), confidence=confidence)
    assert confidence is not None
    probs = {k: float(raw["probabilities"][k]) for k in asked.option_keys}
    if asked.type == "choice":
        key = raw["choice"]
        return Choice(key=key if type(key) is str else option_key(key), probabilities=probs, confidence=confidence)
    levels = {int(k): p for k, p in probs.items()}
    top = max(levels.values())
    level = min(i for i, p in levels.items() if p == top)  # ties: the lowest level
    legend = dict(asked.legend)
    legend.update({int(k): v for k, v in (raw.get("legend") or {}).items()})
    return Score(level=level, expected=float(raw["score"]), probabilities=levels, legend=legend, confidence=confidence)


def parse_answers(raw_answers: Any, asked: Mapping[str, AskedQuestion]) -> dict[str, Answer]:
    """Typed answers in question order; raises `LayaCallError` (``bad_answer``) naming the first
    answer rule broken (`pytest_laya.wire.answer_rules`)."""
    if not answers_hold(raw_answers, asked):
        _first_break(answers_breaks(raw_answers, asked))
    return {qid: _parse_one(q, raw_answers[qid]) for qid, q in asked.items()}


def parse_usage(raw: Any) -> Usage:
    if not isinstance(raw, Mapping):
        raise _bad(f"'usage' must be an object, got {type(raw).__name__}")
    tokens = raw.get("input_tokens")
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise _bad(f"usage.input_tokens must be a non-negative integer, got {shown(tokens)}")
    out = raw.get("output_tokens", 0)
    if isinstance(out, bool) or not isinstance(out, int) or out < 0:
        raise _bad(f"usage.output_tokens must be a non-negative integer, got {shown(out)}")
    extra = {k: v for k, v in raw.items() if k not in ("input_tokens", "output_tokens")}
    return Usage(input_tokens=tokens, output_tokens=out, extra=extra)

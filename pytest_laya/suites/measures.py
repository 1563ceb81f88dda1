"""What the server contract measures and reports without failing on: how answers move.

A model may legitimately lean on option order or on the other questions in a request (Laya's
sequential option layout does); a caller still needs to know by how much before it shuffles
options or batches questions. These functions compare typed answers (`pytest_laya.wire.decision`)
to the same question asked two ways; the suite turns the result into one summary line each.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pytest_laya.wire.decision import Answer, Choice, Noul, Score

__all__ = ["Comparison", "compare", "decided", "describe", "probability_change"]


def decided(answer: Answer) -> object:
    """What the answer decides: the chosen key, the most probable level, or the yes/no side."""
    if isinstance(answer, Choice):
        return answer.key
    if isinstance(answer, Score):
        return answer.level
    if isinstance(answer, Noul):
        return answer.p >= 0.5
    raise TypeError(f"not an answer: {answer!r}")


def describe(answer: Answer) -> str:
    """An answer in a few words, for failure messages: ``'billing' (billing 0.9, technical 0.1)``."""
    if isinstance(answer, Noul):
        return f"p {answer.p:g}"
    probabilities = ", ".join(f"{k} {p:g}" for k, p in answer.probabilities.items())
    decision = repr(answer.key) if isinstance(answer, Choice) else f"level {answer.level}"
    return f"{decision} ({probabilities})"


def probability_change(a: Answer, b: Answer) -> float:
    """The largest change of one probability between two answers to the same question."""
    if isinstance(a, Noul) and isinstance(b, Noul):
        return abs(a.p - b.p)
    if isinstance(a, (Choice, Score)) and type(a) is type(b):
        pa, pb = a.probabilities, b.probabilities
        if set(pa) != set(pb):
            raise ValueError(f"the answers cover different options: {sorted(pa)} vs {sorted(pb)}")
        return max(abs(pa[k] - pb[k]) for k in pa)  # type: ignore[index]
    raise TypeError(f"answers of different types: {a!r} vs {b!r}")


@dataclass(frozen=True)
class Comparison:
    """`pairs` answers compared, `changed` of them decided differently, `max_change` the largest probability move."""

    pairs: int
    changed: int
    max_change: float

    @property
    def rate(self) -> float:
        return self.changed / self.pairs if self.pairs else 0.0


def compare(pairs: Iterable[tuple[Answer, Answer]]) -> Comparison:
    """Compare each (reference, other) pair of answers to the same question."""
    count = changed = 0
    largest = 0.0
    for reference, other in pairs:
        count += 1
        changed += decided(reference) != decided(other)
        largest = max(largest, probability_change(reference, other))
    return Comparison(pairs=count, changed=changed, max_change=round(largest, 6))

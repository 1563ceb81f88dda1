"""`decision_problems`: every way one decision breaks the DecisionModel contract for its questions.

The per-decision check the contract's test methods share (`pytest_laya.contract.decision_model`);
use it on any decision, e.g. ones replayed from cassettes. The rules and their words are the
wire layer's answer rules (`pytest_laya.wire.answer_rules`: [0, 1], the sum, the offered and most
probable choice, the most probable level, the expected level), as the client and the spec check
apply them; a problem reads ``answer 'q': `` and the rule's own sentence.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pytest_laya.wire.answer_rules import (
    RuleBreak,
    distribution_breaks,
    expectation_break,
    finite_number,
    most_probable_break,
    offered_break,
    unit_break,
)
from pytest_laya.wire.questions import AskedQuestion, Questions, normalize_questions

__all__ = ["CHECKS", "decision_problems"]

#: What `decision_problems` can check, by name.
CHECKS: tuple[str, ...] = ("answers", "choice_coverage", "choice_distribution", "chosen", "score", "noul", "confidence")


def _number(value: Any) -> bool:
    return finite_number(value) is not None


def _said(where: str, found: RuleBreak | None) -> list[str]:
    """A broken answer rule in the contract's words: where, then the rule's own sentence."""
    return [] if found is None else [f"{where}: {found.detail}"]


def _distribution_problems(where: str, probs: Mapping[Any, Any]) -> list[str]:
    # The answer rules' probability-range and probabilities-sum, as the client applies them.
    return [f"{where}: {found.detail}" for found in distribution_breaks((), probs)]


def _choice_problems(q: AskedQuestion, a: Any, checks: Iterable[str]) -> list[str]:
    where = f"answer {q.id!r}"
    probs = getattr(a, "probabilities", None)
    if not isinstance(probs, Mapping):
        return [f"{where}: probabilities must be a mapping, got {type(probs).__name__}"]
    problems: list[str] = []
    if "choice_coverage" in checks and set(probs) != set(q.option_keys):
        missing = [k for k in q.option_keys if k not in probs]
        foreign = sorted(map(str, set(probs) - set(q.option_keys)))
        problems.append(f"{where}: probabilities must cover exactly the offered options {list(q.option_keys)}"
                        f" (missing {missing}, not offered {foreign})")
    if "choice_distribution" in checks:
        problems += _distribution_problems(where, probs)
    if "chosen" in checks:
        key = getattr(a, "key", None)
        if key not in q.option_keys:
            problems += _said(where, offered_break((), key, list(q.option_keys)))
        elif key not in probs or not _number(probs[key]):
            problems.append(f"{where}: chose {key!r} but gave it no probability")
        elif all(_number(p) for p in probs.values()):
            problems += _said(where, most_probable_break((), "choice-most-probable", "choice", "option", key, probs))
    return problems


def _score_problems(q: AskedQuestion, a: Any) -> list[str]:
    where = f"answer {q.id!r}"
    probs = getattr(a, "probabilities", None)
    if not isinstance(probs, Mapping):
        return [f"{where}: probabilities must be a mapping, got {type(probs).__name__}"]
    levels = list(range(len(q.option_keys)))
    if set(probs) != set(levels):
        return [f"{where}: probabilities must cover exactly the levels {levels}, got {sorted(probs, key=str)}"]
    problems = _distribution_problems(where, probs)
    if problems:
        return problems
    level, expected = getattr(a, "level", None), getattr(a, "expected", None)
    if level not in probs:
        problems.append(f"{where}: level {level!r} is not one of the levels {levels}")
    else:
        problems += _said(where, most_probable_break((), "level-most-probable", "level", "level", level, probs))
    problems += _said(where, expectation_break((), expected, probs, name="expected level"))
    legend = getattr(a, "legend", None)
    if isinstance(legend, Mapping) and not set(legend) <= set(levels):
        problems.append(f"{where}: legend names levels {sorted(set(legend) - set(levels), key=str)} the question does not have")
    return problems


def decision_problems(questions: Questions, decision: Any, *, checks: Iterable[str] = CHECKS) -> list[str]:
    """Every way `decision` breaks the contract for `questions` (empty: it keeps it).

    `checks` picks among `CHECKS`: ``answers`` (one answer per question, in the order asked, each
    of the type asked), ``choice_coverage`` (probabilities cover exactly the offered options),
    ``choice_distribution`` (each in [0, 1], summing to 1 within `SUM_TOLERANCE`), ``chosen``
    (the chosen option is offered and most probable), ``score`` (levels cover the criteria, the
    level is most probable, the expected level matches the probabilities), ``noul`` (P(true) in
    [0, 1]) and ``confidence`` (every confidence in [0, 1]; a noul answer may have none).
    """
    checks = frozenset(checks)
    unknown = checks - set(CHECKS)
    if unknown:
        raise ValueError(f"unknown checks {sorted(unknown)}; use some of {list(CHECKS)}")
    asked = normalize_questions(questions)
    answers = getattr(decision, "answers", None)
    if not isinstance(answers, Mapping):
        return [f"the decision has no answers mapping (got {type(decision).__name__})"]
    problems: list[str] = []
    if "answers" in checks and list(answers) != list(asked):
        problems.append(f"answers {list(answers)} are not one per question in the order asked {list(asked)}")
    for qid, q in asked.items():
        if qid not in answers:
            continue
        a = answers[qid]
        if getattr(a, "type", None) != q.type:
            if "answers" in checks:
                problems.append(f"answer {qid!r} is a {getattr(a, 'type', type(a).__name__)}, but a {q.type} question was asked")
            continue
        confidence = getattr(a, "confidence", None)
        # A noul answer may come without one (Jev's noul is `type` and `noul` only).
        if "confidence" in checks and not (q.type == "noul" and confidence is None):
            problems += _said(f"answer {qid!r}", unit_break((), "confidence-range", "confidence", confidence))
        if q.type == "choice":
            problems += _choice_problems(q, a, checks)
        elif q.type == "score" and "score" in checks:
            problems += _score_problems(q, a)
        elif q.type == "noul" and "noul" in checks:
            problems += _said(f"answer {qid!r}", unit_break((), "probability-range", "P(true)", getattr(a, "p", None)))
    return problems

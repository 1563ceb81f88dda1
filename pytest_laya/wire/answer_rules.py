"""The answer rules: what a server's answers must be for a Laya to have given them.

Written once, here, and used by every checker: the client refuses an answer that breaks one
(`wire/decision.py`, ``LayaCallError`` code ``bad_answer``), the spec check names it beside the
schema's violations (``/body/answers/q: rule probabilities-sum: ...``), and the DecisionModel
contract holds typed decisions to the same numbers. Nothing here raises on bad input: every
check yields `RuleBreak`s, lazily, so a caller can stop at the first or count them all.

The rules, by name:

- ``answers-asked``: one answer for each asked question, and none for a question nobody asked.
- ``answer-shape``: an answer is an object of the asked type, with the members that type needs
  (choice and score: ``probabilities`` and ``confidence``; score: ``score``; noul: ``noul``).
- ``probability-range``: every probability (and a noul's ``noul``) is a finite number in [0, 1].
- ``confidence-range``: ``confidence``, where given, is a finite number in [0, 1].
- ``options-offered``: ``probabilities`` covers exactly the offered options (score: the levels).
- ``probabilities-sum``: the probabilities sum to 1 within `SUM_TOLERANCE`.
- ``choice-offered``: ``choice`` names an offered option.
- ``choice-most-probable``: no option is more probable than ``choice`` by more than
  `TIE_TOLERANCE`; options that tie within it may each be the choice.
- ``level-most-probable``: the same of a typed score answer's ``level`` (the client's `Score`,
  a model's own), which the wire does not carry.
- ``score-expectation``: ``score`` (the expected level) is a level between the first and the
  last, and the mean of the level probabilities within `expectation_tolerance` (the sum
  tolerance spread over the levels).

Each rule's words are written here too (`RuleBreak.detail`): the client's errors, the spec
check's violations and the DecisionModel contract's problems (`contract/answer_checks.py`) say
a broken rule the same way, naming the value as the reader knows it (``score`` on the wire, the
``expected level`` of a typed answer).
- ``score-legend``: a ``legend``, where given, maps level indices of the question to text.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_laya.wire.questions import AskedQuestion, option_key

__all__ = [
    "RULES",
    "SUM_TOLERANCE",
    "TIE_TOLERANCE",
    "RuleBreak",
    "answers_breaks",
    "answers_hold",
    "answer_breaks",
    "asked_breaks",
    "choice_breaks",
    "distribution_breaks",
    "expectation_break",
    "expectation_tolerance",
    "finite_number",
    "most_probable_break",
    "offered_break",
    "shown",
    "unit_break",
]

# Servers round each probability to 4 decimals, so 12 options may miss 1.0 by 6e-4; 0.02 is the
# limit s1a's client and the contract suite agree on.
SUM_TOLERANCE = 0.02
#: Rounding to 4 decimals never reorders options, only makes them equal; this much is a tie.
TIE_TOLERANCE = 1e-4

RULES: Mapping[str, str] = {
    "answers-asked": "one answer for each asked question, none for a question nobody asked",
    "answer-shape": "an object of the asked type with the members that type needs",
    "probability-range": "each probability a finite number in [0, 1]",
    "confidence-range": "confidence a finite number in [0, 1]",
    "options-offered": "probabilities cover exactly the offered options",
    "probabilities-sum": f"probabilities sum to 1 within {SUM_TOLERANCE}",
    "choice-offered": "choice names an offered option",
    "choice-most-probable": f"no option more probable than the choice by more than {TIE_TOLERANCE}",
    "level-most-probable": f"no level more probable than a typed score's level by more than {TIE_TOLERANCE}",
    "score-expectation": "score is a level, the mean level of its probabilities",
    "score-legend": "legend keys are the question's level indices",
}

_LEVEL = re.compile(r"(0|[1-9][0-9]{0,5})")
_SHOWN = 60


@dataclass(frozen=True)
class RuleBreak:
    """One broken rule. `path` leads from the answers object to the broken value
    (``("q", "probabilities", "a")``); `detail` says it as a sentence of its own."""

    path: tuple[str, ...]
    rule: str
    expected: str
    actual: str
    detail: str

    @property
    def question(self) -> str | None:
        return self.path[0] if self.path else None

    def message(self) -> str:
        """The client's words: ``answer 'q': probabilities sum to 1.6000, not 1 within 0.02 (rule probabilities-sum)``."""
        where = f"answer {self.path[0]!r}: " if self.path else ""
        return f"{where}{self.detail} (rule {self.rule})"


def shown(value: Any) -> str:
    """A value as a message may quote it: bounded, whatever it is (a 5,000-digit number included)."""
    if isinstance(value, int) and not isinstance(value, bool) and not -(10**_SHOWN) < value < 10**_SHOWN:
        return f"an integer of more than {_SHOWN} digits"
    if isinstance(value, (dict, list)) and len(value) > _SHOWN:
        return f"a {type(value).__name__} of {len(value)} items"
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # an integer too long for str(), somewhere inside
        return f"a {type(value).__name__} that cannot be shown"
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def finite_number(value: Any) -> float | None:
    """`value` as a float if it is a finite JSON number (not a bool, not an integer beyond 2**53), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int) and not -(2**53) <= value <= 2**53:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def unit_break(path: tuple[str, ...], rule: str, name: str, value: Any) -> RuleBreak | None:
    """`rule` (``probability-range``, ``confidence-range``) for one value, called `name` in the words."""
    number = finite_number(value)
    return None if _in_unit(number) else _unit_broken(path, rule, name, value, number)


def _in_unit(number: float | None) -> bool:
    """Whether a `finite_number` is one in [0, 1]."""
    return number is not None and 0.0 <= number <= 1.0


def _unit_broken(path: tuple[str, ...], rule: str, name: str, value: Any, number: float | None) -> RuleBreak:
    """`unit_break`'s break, for a `value` that is no finite number (`number` None) or outside [0, 1]."""
    if number is None:
        return RuleBreak(path, rule, "a finite number in [0, 1]", shown(value), f"{name} must be a number, got {shown(value)}")
    return RuleBreak(path, rule, "a number in [0, 1]", shown(value), f"{name} {shown(value)} is outside [0, 1]")


def distribution_breaks(path: tuple[str, ...], probabilities: Mapping[Any, Any]) -> Iterator[RuleBreak]:
    """``probability-range`` for each value, then (when all are in range) ``probabilities-sum``."""
    in_range = True
    for key, value in probabilities.items():
        number = finite_number(value)
        if not _in_unit(number):  # `unit_break`'s test; the words written only for a break
            in_range = False
            yield _unit_broken(path + ("probabilities", str(key)), "probability-range", f"probability of {shown(key)}",
                               value, number)
    if in_range:
        total = math.fsum(float(p) for p in probabilities.values())
        if not _sums_to_one(total):
            yield RuleBreak(path + ("probabilities",), "probabilities-sum", f"a sum of 1 within {SUM_TOLERANCE}",
                            f"{total:.4f}", f"probabilities sum to {total:.4f}, not 1 within {SUM_TOLERANCE}")


def choice_breaks(path: tuple[str, ...], key: Any, probabilities: Mapping[Any, Any]) -> Iterator[RuleBreak]:
    """``choice-offered`` and ``choice-most-probable`` for a chosen `key` among valid `probabilities`."""
    if not _offered(key, probabilities):
        yield offered_break(path, key, list(probabilities))
        return
    found = most_probable_break(path + ("choice",), "choice-most-probable", "choice", "option", key, probabilities)
    if found is not None:
        yield found


def offered_break(path: tuple[str, ...], key: Any, options: list[Any]) -> RuleBreak:
    """``choice-offered``: the chosen `key` is none of `options`."""
    offered = shown(options)
    return RuleBreak(path + ("choice",), "choice-offered", f"one of the options {offered}", shown(key),
                     f"choice {shown(key)} is not among the options {offered}")


def most_probable_break(path: tuple[str, ...], rule: str, name: str, noun: str, key: Any,
                        probabilities: Mapping[Any, Any]) -> RuleBreak | None:
    """`rule` (``choice-most-probable``, ``level-most-probable``): no `noun` of `probabilities` (valid
    numbers, `key` among them) is more probable than `key` by more than `TIE_TOLERANCE`."""
    chosen = float(probabilities[key])
    top = max(probabilities, key=lambda k: float(probabilities[k]))
    if float(probabilities[top]) - chosen <= TIE_TOLERANCE:
        return None
    return RuleBreak(path, rule, f"the most probable {noun} {shown(top)} (p={probabilities[top]})",
                     f"{shown(key)} (p={chosen})",
                     f"{name} {shown(key)} (p={chosen}) is not the most probable {noun}: {shown(top)} is "
                     f"(p={probabilities[top]})")


def expectation_tolerance(levels: int) -> float:
    """How far a score may be from its probabilities' mean: the sum tolerance over the levels, and rounding."""
    return SUM_TOLERANCE * max(1, levels - 1) + 1e-3


def expectation_break(path: tuple[str, ...], expected: Any, levels: Mapping[int, float], *,
                      name: str = "score") -> RuleBreak | None:
    """``score-expectation`` (or ``answer-shape`` for a score that is no number) for valid `levels`;
    `path` leads to the value, called `name` in the words."""
    number = finite_number(expected)
    if number is None:
        return RuleBreak(path, "answer-shape", "the expected level as a number", shown(expected),
                         f"{name} must be a number, got {shown(expected)}")
    mean = math.fsum(i * float(p) for i, p in levels.items())
    last = max(levels, default=0)
    if not -1e-9 <= number <= last + 1e-9 or abs(number - mean) > expectation_tolerance(len(levels)):
        return RuleBreak(path, "score-expectation", f"the mean level {mean:.4f}", shown(expected),
                         f"{name} {shown(expected)} disagrees with its probabilities (their mean is {mean:.4f})")
    return None


def _shape(path: tuple[str, ...], expected: str, actual: str, detail: str) -> RuleBreak:
    return RuleBreak(path, "answer-shape", expected, actual, detail)


def _coverage_break(path: tuple[str, ...], got: Mapping[Any, Any], offered: tuple[str, ...]) -> RuleBreak | None:
    if len(got) == len(offered) and all(k in got for k in offered):
        return None
    missing = [k for k in offered if k not in got]
    wanted = set(offered)
    foreign = sorted(str(k) for k in got if k not in wanted)
    what = ([f"missing {shown(missing)}"] if missing else []) + ([f"not offered {shown(foreign)}"] if foreign else [])
    return RuleBreak(path + ("probabilities",), "options-offered", f"exactly the options {shown(list(offered))}",
                     "; ".join(what), f"probabilities must cover exactly the offered options ({'; '.join(what)})")


def answer_breaks(asked: AskedQuestion, raw: Any) -> Iterator[RuleBreak]:
    """Every rule one wire answer to `asked` breaks."""
    path = (asked.id,)
    if not isinstance(raw, Mapping):
        yield _shape(path, "an object", type(raw).__name__, f"must be an object, got {type(raw).__name__}")
        return
    if raw.get("type", asked.type) != asked.type:
        yield _shape(path + ("type",), repr(asked.type), shown(raw.get("type")),
                     f"has type {shown(raw.get('type'))}, but a {asked.type} question was asked")
        return
    yield from _confidence_breaks(asked, path, raw)
    if asked.type == "noul":
        yield from _noul_breaks(path, raw)
    else:
        yield from _option_breaks(asked, path, raw)


def _confidence_breaks(asked: AskedQuestion, path: tuple[str, ...], raw: Mapping[str, Any]) -> Iterator[RuleBreak]:
    if "confidence" in raw:
        found = unit_break(path + ("confidence",), "confidence-range", "confidence", raw["confidence"])
        if found is not None:
            yield found
    elif asked.type != "noul":  # Jev's noul answer is `type` and `noul` only
        yield _shape(path + ("confidence",), "a confidence", "absent", "has no confidence")


def _noul_breaks(path: tuple[str, ...], raw: Mapping[str, Any]) -> Iterator[RuleBreak]:
    if "noul" not in raw:
        yield _shape(path + ("noul",), "P(true) as 'noul'", "absent", "has no 'noul' probability")
        return
    found = unit_break(path + ("noul",), "probability-range", "noul", raw["noul"])
    if found is not None:
        yield found


def _option_breaks(asked: AskedQuestion, path: tuple[str, ...], raw: Mapping[str, Any]) -> Iterator[RuleBreak]:
    """A choice or score answer's breaks: its distribution first, then what it says of it."""
    probabilities = raw.get("probabilities")
    if not isinstance(probabilities, Mapping):
        yield _shape(path + ("probabilities",), "an object", type(probabilities).__name__,
                     f"probabilities must be an object, got {type(probabilities).__name__}")
        return
    coverage = _coverage_break(path, probabilities, asked.option_keys)
    if coverage is not None:
        yield coverage
        return
    broken = False
    for found in distribution_breaks(path, probabilities):
        broken = broken or found.rule == "probability-range"
        yield found
    if broken:
        return
    if asked.type == "choice":
        yield from choice_breaks(path, _chosen_key(asked, raw), probabilities)
        return
    levels = {int(k): float(p) for k, p in probabilities.items()}
    expectation = expectation_break(path + ("score",), raw.get("score"), levels)
    if expectation is not None:
        yield expectation
    legend = raw.get("legend")
    if legend is not None:
        yield from _legend_breaks(path + ("legend",), legend, len(levels))


def _chosen_key(asked: AskedQuestion, raw: Mapping[str, Any]) -> Any:
    """A choice answer's ``choice`` as the key its probabilities use: laya answers a number or
    boolean list label with the label itself (7, true) while keying its probabilities "7" and
    "true"; accepted for those labels only."""
    key = raw.get("choice")
    if type(key) is not str and (isinstance(key, bool) or finite_number(key) is not None):
        spelled = option_key(key)
        key = spelled if spelled in asked.label_keys else key
    return key


def _offered(key: Any, probabilities: Mapping[Any, Any]) -> bool:
    """``choice-offered``'s test: `key` names an option of `probabilities`."""
    return isinstance(key, (str, int, float)) and key in probabilities


def _sums_to_one(total: float) -> bool:
    """``probabilities-sum``'s test of a distribution's `total`."""
    return abs(total - 1.0) <= SUM_TOLERANCE


def _legend_breaks(path: tuple[str, ...], legend: Any, levels: int) -> Iterator[RuleBreak]:
    if not isinstance(legend, Mapping):
        yield RuleBreak(path, "score-legend", "an object of level index -> text", type(legend).__name__,
                        f"legend must be an object of level index -> text, got {type(legend).__name__}")
        return
    for key, text in legend.items():
        if not (isinstance(key, str) and _LEVEL.fullmatch(key) and int(key) < levels and isinstance(text, str)):
            yield RuleBreak(path + (str(key),), "score-legend", f"a level index below {levels} naming its text",
                            f"{shown(key)}: {shown(text)}",
                            f"legend entry {shown(key)}: {shown(text)} is not a level index of the question with its text")


def answers_breaks(raw_answers: Any, asked: Mapping[str, AskedQuestion]) -> Iterator[RuleBreak]:
    """Every rule a whole ``answers`` object breaks, for the questions `asked`, in question order."""
    if not isinstance(raw_answers, Mapping):
        yield RuleBreak((), "answer-shape", "an object", type(raw_answers).__name__,
                        f"'answers' must be an object, got {type(raw_answers).__name__}")
        return
    yield from asked_breaks(raw_answers, asked)
    for qid, question in asked.items():
        if qid in raw_answers:
            yield from answer_breaks(question, raw_answers[qid])


def answers_hold(raw_answers: Any, asked: Mapping[str, AskedQuestion]) -> bool:
    """Whether `answers_breaks` finds nothing, found without writing a break: the rules' accept
    path, for the common answer that keeps them all (a False is worded by `answers_breaks`)."""
    if not isinstance(raw_answers, Mapping) or len(raw_answers) != len(asked):
        return False
    for qid, question in asked.items():
        raw = raw_answers.get(qid, _ABSENT)
        if raw is _ABSENT or not _answer_holds(question, raw):
            return False
    return True


_ABSENT: Any = object()


def _answer_holds(asked: AskedQuestion, raw: Any) -> bool:
    """Whether `answer_breaks(asked, raw)` finds nothing; each test is that function's, in its order."""
    if type(raw) is not dict and not isinstance(raw, Mapping):
        return False
    kind = asked.type
    if raw.get("type", kind) != kind:
        return False
    if "confidence" in raw:
        if not _in_unit(finite_number(raw["confidence"])):
            return False
    elif kind != "noul":
        return False
    if kind == "noul":
        return "noul" in raw and _in_unit(finite_number(raw["noul"]))
    return _options_hold(asked, raw)


def _options_hold(asked: AskedQuestion, raw: Mapping[str, Any]) -> bool:
    """Whether `_option_breaks(asked, (), raw)` finds nothing."""
    probabilities = raw.get("probabilities")
    if type(probabilities) is not dict and not isinstance(probabilities, Mapping):
        return False
    if _coverage_break((), probabilities, asked.option_keys) is not None:
        return False
    numbers: list[float] = []
    for value in probabilities.values():
        number = finite_number(value)
        if number is None or not _in_unit(number):
            return False
        numbers.append(number)
    if not _sums_to_one(math.fsum(numbers)):
        return False
    if asked.type == "choice":
        key = _chosen_key(asked, raw)
        return _offered(key, probabilities) and most_probable_break(
            (), "choice-most-probable", "choice", "option", key, probabilities) is None
    levels = {int(k): float(p) for k, p in probabilities.items()}
    if expectation_break((), raw.get("score"), levels) is not None:
        return False
    legend = raw.get("legend")
    return legend is None or next(_legend_breaks((), legend, len(levels)), None) is None


def asked_breaks(raw_answers: Mapping[str, Any], asked: Mapping[str, AskedQuestion]) -> Iterator[RuleBreak]:
    """``answers-asked``: a missing answer, or answers to questions nobody asked."""
    missing = [qid for qid in asked if qid not in raw_answers]
    if missing:
        yield RuleBreak((), "answers-asked", f"answers for {shown(list(asked))}", f"none for {shown(missing)}",
                        f"no answer for question(s) {shown(missing)}")
    extra = sorted(str(qid) for qid in raw_answers if qid not in asked)
    if extra:
        yield RuleBreak((), "answers-asked", f"answers for {shown(list(asked))} only", f"answers for {shown(extra)}",
                        f"answers for questions nobody asked: {shown(extra)}")

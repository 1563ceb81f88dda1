"""Question definitions: what a caller asks, checked before anything goes on the wire.

Callers may pass plain Jev-shaped dicts (what every server accepts) or the small dataclasses
below; both normalise to the same wire dict. Mistakes a server would reject with a 4xx are caught
here as `LayaConfigError`, so a test learns what to fix without a round trip, and the answer
parser knows exactly which options each question offered.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pytest_laya.wire.errors import LayaConfigError

__all__ = [
    "QUESTION_TYPES",
    "QuestionType",
    "ChoiceQuestion",
    "ScoreQuestion",
    "NoulQuestion",
    "QuestionSpec",
    "Questions",
    "AskedQuestion",
    "normalize_question",
    "normalize_questions",
    "option_key",
]

QuestionType = Literal["choice", "score", "noul"]
QUESTION_TYPES: tuple[str, ...] = ("choice", "score", "noul")


@dataclass(frozen=True)
class ChoiceQuestion:
    """Pick one option. `criteria` maps each option key to its description, or lists keys."""

    instructions: str
    criteria: Mapping[str, str | None] | Sequence[str]

    def to_wire(self) -> dict[str, Any]:
        crit = dict(self.criteria) if isinstance(self.criteria, Mapping) else list(self.criteria)
        return {"type": "choice", "instructions": self.instructions, "criteria": crit}


@dataclass(frozen=True)
class ScoreQuestion:
    """Rate on ordered levels; `criteria[i]` describes level i, index 0 first."""

    instructions: str
    criteria: Sequence[str]

    def to_wire(self) -> dict[str, Any]:
        return {"type": "score", "instructions": self.instructions, "criteria": list(self.criteria)}


@dataclass(frozen=True)
class NoulQuestion:
    """Yes or no; the answer is P(true). `criteria` may describe "true" and "false"."""

    instructions: str
    criteria: Mapping[str, str] | None = None

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"type": "noul", "instructions": self.instructions}
        if self.criteria is not None:
            wire["criteria"] = dict(self.criteria)
        return wire


QuestionSpec = ChoiceQuestion | ScoreQuestion | NoulQuestion | Mapping[str, Any]
Questions = Mapping[str, QuestionSpec]


@dataclass(frozen=True)
class AskedQuestion:
    """One normalised question: its wire form and the option keys an answer must cover."""

    id: str
    type: str
    wire: Mapping[str, Any]
    # choice: option keys as the server will spell them; score: "0".."K-1"; noul: ().
    option_keys: tuple[str, ...]
    # score only: level index -> description, for answers that carry no legend.
    legend: Mapping[int, str]
    # choice only: the keys of list labels that are numbers or booleans (criteria [7, true] ->
    # {"7", "true"}). laya keys their probabilities "7" but answers `choice` with the label
    # itself (7), and the answer rules accept that for these keys only.
    label_keys: frozenset[str] = frozenset()


def option_key(label: Any) -> str:
    """The key an option is answered under: a string label as it is, any other in JSON's spelling.

    A list label becomes a dict key on the server, and JSON spells keys its own way
    (7 -> "7", True -> "true", 1.0 -> "1.0"); ask json itself rather than guess.
    """
    return label if type(label) is str else next(iter(json.loads(json.dumps({label: 0}))))


def _fail(qid: str, what: str) -> LayaConfigError:
    return LayaConfigError(f"question {qid!r}: {what}", code="invalid_question")


def _choice_keys(qid: str, crit: Any) -> tuple[tuple[str, ...], frozenset[str]]:
    """The option keys, and those of them that came from number or boolean list labels."""
    if isinstance(crit, Mapping):
        labels = list(crit.keys())
    elif isinstance(crit, Sequence) and not isinstance(crit, (str, bytes)):
        labels = list(crit)
    else:
        raise _fail(qid, "a choice question takes 'criteria' as a dict of key -> description or a list of keys")
    if not labels:
        raise _fail(qid, "a choice question needs at least one option in 'criteria'")
    seen: dict[str, int] = {}  # key -> its option index: a list here made a 10,000-option question take a second
    for i, label in enumerate(labels):
        if label is None or not isinstance(label, (str, int, float, bool)):
            raise _fail(qid, f"option {i} must be a string, number or bool, got {label!r}")
        key = option_key(label)
        if key in seen:
            raise _fail(qid, f"option {i} ({label!r}) repeats option {seen[key]}; every option needs its own key")
        seen[key] = i
    # A mapping's keys reach the server as JSON object keys, strings, so only a list keeps a
    # number or a boolean as such.
    labels_kept = not isinstance(crit, Mapping)
    return tuple(seen), frozenset(option_key(label) for label in labels if labels_kept and type(label) is not str)


def normalize_question(qid: Any, spec: QuestionSpec) -> AskedQuestion:
    """Check one definition; raises `LayaConfigError` (``invalid_question``) naming what to fix."""
    if not isinstance(qid, str) or not qid.strip():
        raise LayaConfigError(f"question ids must be non-empty strings, got {qid!r}", code="invalid_question")
    wire = spec.to_wire() if hasattr(spec, "to_wire") else spec
    if not isinstance(wire, Mapping):
        raise _fail(qid, f"a definition must be a dict or a ChoiceQuestion/ScoreQuestion/NoulQuestion, got {type(spec).__name__}")
    wire = dict(wire)
    qtype = wire.get("type")
    if qtype not in QUESTION_TYPES:
        raise _fail(qid, f"unsupported type {qtype!r}; use one of {list(QUESTION_TYPES)}")
    ins = wire.get("instructions")
    if ins is None or (isinstance(ins, (str, list, dict)) and not (ins.strip() if isinstance(ins, str) else ins)):
        raise _fail(qid, "'instructions' must be given and not empty")
    crit = wire.get("criteria")
    legend: dict[int, str] = {}
    label_keys: frozenset[str] = frozenset()
    if qtype == "choice":
        keys, label_keys = _choice_keys(qid, crit)
    elif qtype == "score":
        if not isinstance(crit, Sequence) or isinstance(crit, (str, bytes)) or not crit:
            raise _fail(qid, "a score question takes 'criteria' as a non-empty list of level descriptions, index 0 first")
        if any(level is None for level in crit):
            raise _fail(qid, "every score level needs a description (found null)")
        keys = tuple(str(i) for i in range(len(crit)))
        legend = {i: str(level) for i, level in enumerate(crit)}
    else:
        if crit is not None:
            if not isinstance(crit, Mapping) or not {str(k).lower() for k in crit} <= {"true", "false"}:
                raise _fail(qid, "a noul question takes 'criteria' keyed only 'true'/'false', or none")
        keys = ()
    return AskedQuestion(id=qid, type=qtype, wire=wire, option_keys=keys, legend=legend, label_keys=label_keys)


def normalize_questions(questions: Questions) -> dict[str, AskedQuestion]:
    """Check every definition and return them in the caller's order.

    Raises `LayaConfigError` (code ``no_questions`` or ``invalid_question``) naming the first
    problem; nothing is sent for a request that no server could answer.
    """
    if not isinstance(questions, Mapping):
        raise LayaConfigError(
            f"questions must be a mapping of id -> definition, got {type(questions).__name__}",
            code="invalid_question",
        )
    if not questions:
        raise LayaConfigError("no questions: ask at least one question", code="no_questions")
    return {qid: normalize_question(qid, spec) for qid, spec in questions.items()}

"""The behaviour a decision server (or model) promises, as requests and tolerances: no pytest, no I/O.

Five properties, measured the way krite-bench (§7), avrik's bench and TGI's load test measure
them (docs/server-contract.md, "Behaviour"):

- option order: a choice question with its options permuted (every order for K <= 5, else
  `SEEDED_ORDERS` seeded ones) must get the same probability per option;
- question interference: a question alone, beside 3 and beside 15 other questions;
- batching: one request alone, in a batch, and among concurrent identical requests;
- determinism: the same request again;
- replicas: answers grouped by the ``served_by`` that names who answered.

The first two are properties of the model as much as of the server (real Laya leans on option
order), so a run reports them and fails on them only when asked (`--require-invariance`); the
other three are the server's own promise and fail past the tolerance.

The tolerance (`Tolerance`): the one given, else the one the server states (/health
``answer_tolerance``), else by the precision it names (`PRECISION_TOLERANCES`, krite's), never
finer than the answers' own rounding: a server that rounds to 4 decimals turns float noise of
1e-6 into a step of its last digit now and then (`rounding_step`).
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_laya.wire.decision import Decision, Noul

__all__ = [
    "FILLERS",
    "PRECISION_TOLERANCES",
    "SEEDED_ORDERS",
    "Tolerance",
    "option_orders",
    "resolve_tolerance",
    "rounding_step",
    "tolerance_for",
    "with_fillers",
]

#: krite-bench §7: largest probability deviation allowed, by the weights' precision.
PRECISION_TOLERANCES: Mapping[str, float] = {
    "float64": 1e-5, "float32": 1e-5, "float16": 1e-3, "bfloat16": 1e-3,
}
#: Where the precision is unknown: the strictest (float32's).
DEFAULT_TOLERANCE = 1e-5
#: Every order for at most this many options; seeded orders above it (krite §7).
ALL_ORDERS_UP_TO = 5
SEEDED_ORDERS = 24
#: Float noise on top of a tolerance (a difference of two 4-decimal numbers is not exactly 1e-4).
SLACK = 1e-9

#: Questions asked beside a target question (question interference): none shares an id with a
#: probe's, and they mix the three types.
FILLERS: Mapping[str, Mapping[str, Any]] = {
    f"filler_{i:02d}": question for i, question in enumerate(list[Mapping[str, Any]]([
        {"type": "noul", "instructions": "Is the message written in English?"},
        {"type": "choice", "instructions": "Which channel did it come through?", "criteria": ["email", "chat", "phone"]},
        {"type": "score", "instructions": "How polite is the message?", "criteria": ["rude", "neutral", "polite"]},
        {"type": "noul", "instructions": "Does the message mention money?"},
        {"type": "choice", "instructions": "Which product is it about?", "criteria": ["app", "website", "card"]},
        {"type": "noul", "instructions": "Is a manager asked for?"},
        {"type": "score", "instructions": "How long is the message?", "criteria": ["short", "medium", "long"]},
        {"type": "noul", "instructions": "Does it contain a question?"},
        {"type": "choice", "instructions": "What time of day is it about?", "criteria": ["morning", "afternoon", "night"]},
        {"type": "noul", "instructions": "Is an order number given?"},
        {"type": "score", "instructions": "How sure is the writer?", "criteria": ["unsure", "fairly sure", "certain"]},
        {"type": "noul", "instructions": "Is this a repeat contact?"},
        {"type": "choice", "instructions": "Which region?", "criteria": ["europe", "americas", "asia", "other"]},
        {"type": "noul", "instructions": "Does the writer thank anyone?"},
        {"type": "noul", "instructions": "Is a deadline mentioned?"},
    ]))
}


@dataclass(frozen=True)
class Tolerance:
    """The largest probability deviation the behaviour checks allow, and where it came from."""

    value: float
    source: str

    def exceeded_by(self, deviation: float) -> bool:
        return deviation > self.value + SLACK

    def describe(self) -> str:
        return f"{self.value:g} ({self.source})"


def rounding_step(probabilities: Iterable[float]) -> float | None:
    """The step the server rounds probabilities to (1e-4 for 4 decimals), or None when it does not
    round to 6 decimals or fewer."""
    values = list(probabilities)
    if not values:
        return None
    for decimals in range(7):
        scale = 10 ** decimals
        if all(abs(v * scale - round(v * scale)) < 1e-6 for v in values):
            return 10.0 ** -decimals if decimals else None  # 0/1 only: nothing to tell
    return None


def resolve_tolerance(given: float | None, stated: Any, dtypes: Iterable[str], step: float | None) -> Tolerance:
    """`given` (the command line), else `stated` (the server's /health ``answer_tolerance``), else
    the coarsest tolerance of the weights' `dtypes`, at least one rounding `step`."""
    if given is not None:
        return Tolerance(given, "given")
    if isinstance(stated, (int, float)) and not isinstance(stated, bool) and math.isfinite(stated) and stated >= 0:
        return Tolerance(float(stated), "the server's /health answer_tolerance")
    named = sorted({d for d in dtypes if d in PRECISION_TOLERANCES})
    value = max((PRECISION_TOLERANCES[d] for d in named), default=DEFAULT_TOLERANCE)
    source = f"{'/'.join(named)} weights" if named else "no precision named: float32's"
    if step is not None and step > value:
        return Tolerance(step, f"{source}, but answers rounded to {round(-math.log10(step))} decimals "
                               "move by one step of their last digit")
    return Tolerance(value, source)


def tolerance_for(given: float | None, health: Any, decision: Decision) -> Tolerance:
    """`resolve_tolerance` for a server: its /health (`health`, or None) and one of its decisions,
    whose ``served_by`` names the weights' precision and whose probabilities show its rounding."""
    health = health if isinstance(health, Mapping) else {}
    models = health.get("models")
    dtypes = [m.get("weights_dtype") for m in models.values() if isinstance(m, Mapping)] \
        if isinstance(models, Mapping) else []
    served_by = decision.provenance.served_by
    if served_by is not None:
        dtypes.append(served_by.weights_dtype)
    probabilities = [p for answer in decision.answers.values()
                     for p in ([answer.p] if isinstance(answer, Noul) else answer.probabilities.values())]
    return resolve_tolerance(given, health.get("answer_tolerance"), [d for d in dtypes if isinstance(d, str)],
                             rounding_step(probabilities))


def option_orders(question: Mapping[str, Any], seed: int = 0) -> list[tuple[Mapping[str, Any], bool]]:
    """The question with its options in other orders, each with whether it is the reverse order:
    every order for K <= 5 options, else `SEEDED_ORDERS` seeded ones (the reverse among them)."""
    criteria = question["criteria"]
    items = list(criteria.items()) if isinstance(criteria, Mapping) else list(criteria)
    identity = tuple(range(len(items)))
    if len(items) <= ALL_ORDERS_UP_TO:
        orders: Sequence[tuple[int, ...]] = [p for p in itertools.permutations(identity) if p != identity]
    else:
        rng = random.Random(seed)
        chosen = {identity[::-1]}
        while len(chosen) < SEEDED_ORDERS:
            shuffled = list(identity)
            rng.shuffle(shuffled)
            if tuple(shuffled) != identity:
                chosen.add(tuple(shuffled))
        orders = sorted(chosen)
    out: list[tuple[Mapping[str, Any], bool]] = []
    for order in orders:
        permuted = [items[i] for i in order]
        out.append(({**question, "criteria": dict(permuted) if isinstance(criteria, Mapping) else permuted},
                    order == identity[::-1]))
    return out


def with_fillers(qid: str, question: Mapping[str, Any], count: int) -> dict[str, Any]:
    """`question` (as `qid`) beside `count` filler questions: after them for 3 or fewer, first otherwise,
    so both a question asked last and one asked first are seen."""
    fillers = dict(itertools.islice(FILLERS.items(), count))
    if count <= 3:
        return {**fillers, qid: question}
    return {qid: question, **fillers}

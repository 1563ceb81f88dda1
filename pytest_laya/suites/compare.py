"""Two deciders asked the same questions, answer by answer: ``python -m pytest_laya compare A B``.

A side is a served Laya (``http(s)://...``), a directory of cassettes (its recorded answers), or
Laya in this process (``laya:PATH``, through `pytest_laya.models.LayaModel`). Both get the same
cases: the user's (a JSON Lines file), else every decision recorded in a cassette side, else
`PROBES`. Per answer: the largest probability deviation, whether the decision flipped, how far
a score's expected level shifted. Per side: p50 latency and, where cases carry expected labels,
accuracy and the Brier score. The comparison fails past the tolerance (`behaviour.Tolerance`:
the one given, else by the sides' precision and rounding) or below a required accuracy.

No pytest here; `pytest_laya.__main__` is the command line.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_laya.suites.behaviour import Tolerance, resolve_tolerance, rounding_step
from pytest_laya.suites.measures import decided, describe, probability_change
from pytest_laya.wire.decision import Answer, Noul, Score, parse_answers
from pytest_laya.wire.errors import LayaError
from pytest_laya.wire.questions import normalize_questions

__all__ = ["PROBES", "Case", "Comparison", "CompareError", "Side", "compare_sides", "open_side", "read_cases"]

DECIDE_PATH = "/v1/systemone"

_TEAM = {"type": "choice", "instructions": "Which team should handle this?",
         "criteria": {"billing": "Charges, invoices and refunds", "technical": "Bugs and crashes",
                      "shipping": "Deliveries and tracking", "sales": "New orders and upgrades"}}
_URGENCY = {"type": "score", "instructions": "How urgent is the request?",
            "criteria": ["Not urgent", "Needs attention soon", "Needs attention immediately"]}
_REFUND = {"type": "noul", "instructions": "Does the customer ask for a refund?"}
_MOOD = {"type": "choice", "instructions": "What is the customer's mood?", "criteria": ["angry", "neutral", "happy"]}
#: The built-in cases: support messages in four languages, each asked four questions.
PROBES: tuple[tuple[Any, Mapping[str, Any]], ...] = tuple(
    (state, {"team": _TEAM, "urgency": _URGENCY, "refund": _REFUND, "mood": _MOOD}) for state in (
        "I was charged twice for my order last week. Please refund the duplicate payment today.",
        "The app crashes every time I open the settings page on my phone.",
        "Where is my parcel? The tracking page has not changed for five days.",
        "We would like a quote for 200 more licences before the end of the quarter.",
        "Your service is terrible and I am never ordering again.",
        "Thanks, the new version works perfectly!",
        "Mein Konto wurde zweimal belastet, bitte erstatten Sie den Betrag.",
        "Mon colis n'est jamais arrivé et personne ne répond.",
        "No puedo iniciar sesión en mi cuenta desde ayer.",
        {"ticket": "Order 7 never arrived", "tier": "gold"},
    ))


class CompareError(Exception):
    """Bad input or a side that cannot answer: the message says what to do."""


@dataclass(frozen=True)
class Case:
    """One request both sides answer, and the labels it should get (question id -> expected)."""

    state: Any
    questions: Mapping[str, Any]
    expected: Mapping[str, Any] = field(default_factory=dict)
    name: str = ""


@dataclass(frozen=True)
class Answered:
    answers: Mapping[str, Answer]
    latency_ms: float | None
    weights_dtype: str | None = None


def _key(state: Any, questions: Mapping[str, Any]) -> str:
    return json.dumps([state, questions], sort_keys=True, ensure_ascii=False)


class Side:
    """One decider under comparison: `answer` gives a case's typed answers and how long it took."""

    def __init__(self, name: str) -> None:
        self.name = name

    def cases(self) -> list[Case] | None:
        """The cases this side brings (a cassette side's recorded decisions), or None."""
        return None

    def answer(self, case: Case) -> Answered:
        raise NotImplementedError

    def close(self) -> None:
        pass


class _Decider(Side):
    """A side with a `decide(state, questions) -> Decision` (a served Laya, or Laya in process)."""

    def __init__(self, name: str, model: Any) -> None:
        super().__init__(name)
        self._model = model

    def answer(self, case: Case) -> Answered:
        started = time.perf_counter()
        try:
            decision = self._model.decide(case.state, case.questions)
        except LayaError as exc:
            raise CompareError(f"{self.name} could not answer case {case.name}: {exc}") from None
        served_by = decision.provenance.served_by
        return Answered(dict(decision.answers), (time.perf_counter() - started) * 1000.0,
                        served_by.weights_dtype if served_by is not None else None)

    def close(self) -> None:
        self._model.close()


class _Cassettes(Side):
    """The 200 decisions recorded in a directory's cassettes (``*.yaml``, recursively)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(str(directory))
        from pytest_laya.cassettes import yaml_loader

        self._recorded: dict[str, Mapping[str, Any]] = {}
        self._cases: list[Case] = []
        self.skipped = 0  # batch interactions and refusals: not single decisions
        files = sorted(directory.rglob("*.yaml"))
        if not files:
            raise CompareError(f"{directory} holds no cassettes (*.yaml): give a cassette directory, a URL or laya:PATH")
        for path in files:
            try:
                document = yaml_loader.load(path.read_bytes())
            except Exception as exc:  # noqa: BLE001 -- a broken file is named, whatever broke it
                raise CompareError(f"{path}: not a readable cassette ({type(exc).__name__}: {exc})") from None
            interactions = document.get("interactions") if isinstance(document, Mapping) else None
            for n, interaction in enumerate(interactions or []):
                self._read(path, n, interaction)

    def _read(self, path: Path, n: int, interaction: Any) -> None:
        request, response = interaction.get("request") or {}, interaction.get("response") or {}
        uri = str(request.get("uri", ""))
        if request.get("method") != "POST" or not uri.endswith((DECIDE_PATH, DECIDE_PATH + "/batch")):
            return
        if not uri.endswith(DECIDE_PATH) or (response.get("status") or {}).get("code") != 200:
            self.skipped += 1  # a batch, or a refusal: no single decision to compare
            return
        try:
            sent = json.loads(request.get("body") or "")
            body = response.get("body") or {}
            got = json.loads(body.get("string") or "" if isinstance(body, Mapping) else body)
        except (TypeError, ValueError):
            self.skipped += 1
            return
        state, questions = sent.get("state"), sent.get("questions")
        if not isinstance(questions, Mapping) or not questions:
            self.skipped += 1
            return
        key = _key(state, questions)
        if key not in self._recorded:
            self._recorded[key] = got.get("answers") or {}
            self._cases.append(Case(state, questions, name=f"{path.name}#{n + 1}"))

    def cases(self) -> list[Case]:
        return list(self._cases)

    def answer(self, case: Case) -> Answered:
        raw = self._recorded.get(_key(case.state, case.questions))
        if raw is None:
            raise CompareError(f"{self.name} recorded no answer to case {case.name}: compare a cassette directory "
                               "on the decisions it recorded (leave out --cases)")
        try:
            return Answered(parse_answers(raw, normalize_questions(case.questions)), None)
        except LayaError as exc:
            raise CompareError(f"{self.name}: the recorded answer to case {case.name} is broken: {exc}") from None


def open_side(spec: str, *, api_key: str | None = None) -> Side:
    """A side from the command line: ``http(s)://HOST[:PORT]``, ``laya:PATH`` or a cassette directory."""
    if spec.startswith(("http://", "https://")):
        from pytest_laya.models import ServedLayaModel

        try:
            # A comparison, not a contract: a state cut to the window is compared as it was answered.
            return _Decider(spec, ServedLayaModel(spec.rstrip("/"), api_key=api_key, allow_truncation=True))
        except LayaError as exc:
            raise CompareError(f"{spec}: {exc}") from None
    if spec.startswith("laya:"):
        from pytest_laya.models import LayaModel

        try:
            return _Decider(spec, LayaModel(spec[len("laya:"):], allow_truncation=True))
        except LayaError as exc:
            raise CompareError(f"{spec}: {exc}") from None
    path = Path(spec)
    if path.is_dir():
        return _Cassettes(path)
    raise CompareError(f"{spec!r} is neither a URL (http://...), laya:PATH nor a cassette directory")


def read_cases(path: Path) -> list[Case]:
    """A JSON Lines file: one ``{"state", "questions", "expected"?: {question: label}, "id"?}`` per line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise CompareError(f"--cases {path}: cannot read it ({exc.strerror or exc})") from None
    cases = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise CompareError(f"--cases {path} line {n}: not JSON ({exc})") from None
        if not isinstance(item, Mapping) or "state" not in item or not isinstance(item.get("questions"), Mapping) \
                or not item["questions"]:
            raise CompareError(f'--cases {path} line {n}: give an object with "state" and a non-empty "questions" '
                               'object (and optionally "expected": {question: label})')
        expected = item.get("expected") or {}
        unknown = sorted(set(expected) - set(item["questions"])) if isinstance(expected, Mapping) else None
        if unknown is None or unknown:
            raise CompareError(f'--cases {path} line {n}: "expected" must map asked question ids to labels'
                               + (f"; {unknown} were not asked" if unknown else ""))
        cases.append(Case(item["state"], item["questions"], expected, str(item.get("id", f"line {n}"))))
    if not cases:
        raise CompareError(f"--cases {path}: no cases in it")
    return cases


# -- comparing --------------------------------------------------------------------------------

def _score_shift(a: Answer, b: Answer) -> float | None:
    return b.expected - a.expected if isinstance(a, Score) and isinstance(b, Score) else None


def _hit_and_brier(answer: Answer, label: Any) -> tuple[bool, float]:
    """Whether `answer` decided `label`, and its Brier score against it."""
    if isinstance(answer, Noul):
        truth = label in (True, "true", "yes", 1)
        return (answer.p >= 0.5) == truth, (answer.p - (1.0 if truth else 0.0)) ** 2
    probabilities: Mapping[Any, float] = answer.probabilities
    if isinstance(answer, Score):
        try:
            label = int(label)
        except (TypeError, ValueError):
            pass
    brier = sum((p - (1.0 if str(k) == str(label) else 0.0)) ** 2 for k, p in probabilities.items())
    return str(decided(answer)) == str(label), brier


@dataclass
class Row:
    case: str
    question: str
    a: Answer
    b: Answer
    deviation: float
    flipped: bool
    score_shift: float | None


@dataclass
class SideFigures:
    name: str
    latencies_ms: list[float] = field(default_factory=list)
    hits: int = 0
    labelled: int = 0
    brier: float = 0.0

    @property
    def p50_ms(self) -> float | None:
        return statistics.median(self.latencies_ms) if self.latencies_ms else None

    @property
    def accuracy(self) -> float | None:
        return self.hits / self.labelled if self.labelled else None

    def describe(self) -> str:
        p50 = f"p50 {self.p50_ms:.1f} ms over {len(self.latencies_ms)} decisions" if self.p50_ms is not None \
            else "no latency (recorded answers)"
        labels = (f"; accuracy {self.accuracy:.3f}, Brier {self.brier / self.labelled:.4f} over {self.labelled} "
                  "labelled answers") if self.labelled else ""
        return p50 + labels


@dataclass
class Comparison:
    rows: list[Row]
    tolerance: Tolerance
    sides: tuple[SideFigures, SideFigures]
    min_accuracy: float | None = None

    @property
    def flips(self) -> int:
        return sum(row.flipped for row in self.rows)

    @property
    def largest(self) -> Row | None:
        return max(self.rows, key=lambda row: row.deviation, default=None)

    def problems(self) -> list[str]:
        out = []
        largest = self.largest
        if self.flips:
            out.append(f"{self.flips} of {len(self.rows)} answers decided differently")
        if largest is not None and self.tolerance.exceeded_by(largest.deviation):
            out.append(f"largest probability deviation {largest.deviation:.6f} is past the tolerance "
                       f"{self.tolerance.value:g}")
        for side in self.sides:
            if self.min_accuracy is not None and side.accuracy is not None and side.accuracy < self.min_accuracy:
                out.append(f"{side.name}: accuracy {side.accuracy:.3f} is below --min-accuracy {self.min_accuracy:g}")
        return out

    def lines(self) -> Iterator[str]:
        """The table (one row per answer), then the figures and the verdict."""
        a, b = self.sides
        yield f"A = {a.name}"
        yield f"B = {b.name}"
        header = ("case", "question", "A decided", "B decided", "deviation", "flip", "score shift")
        table = [header] + [(row.case, row.question, _decision_words(row.a), _decision_words(row.b),
                             f"{row.deviation:.6f}", "FLIP" if row.flipped else "",
                             "" if row.score_shift is None else f"{row.score_shift:+.4f}") for row in self.rows]
        widths = [max(len(r[i]) for r in table) for i in range(len(header))]
        for r in table:
            yield "  ".join(cell.ljust(width) for cell, width in zip(r, widths)).rstrip()
        largest = self.largest
        same = len(self.rows) - self.flips
        where = f" (case {largest.case}, question {largest.question!r})" if largest and largest.deviation else ""
        yield (f"agreement: {same} of {len(self.rows)} answers decided the same"
               f" ({same / len(self.rows):.0%})" if self.rows else "agreement: no answers compared")
        yield (f"largest probability deviation: {largest.deviation if largest else 0.0:.6f}{where}; "
               f"tolerance {self.tolerance.describe()}")
        yield f"A: {a.describe()}"
        yield f"B: {b.describe()}"
        problems = self.problems()
        yield ("result: DIFFERENT: " + "; ".join(problems)) if problems else \
            "result: the same within the tolerance"

    def to_json(self) -> dict[str, Any]:
        a, b = self.sides
        return {
            "a": a.name, "b": b.name,
            "tolerance": {"value": self.tolerance.value, "source": self.tolerance.source},
            "agreement": (len(self.rows) - self.flips) / len(self.rows) if self.rows else None,
            "largest_deviation": self.largest.deviation if self.largest else 0.0,
            "sides": [{"name": s.name, "p50_ms": s.p50_ms, "latencies_ms": s.latencies_ms, "accuracy": s.accuracy,
                       "brier": s.brier / s.labelled if s.labelled else None, "labelled": s.labelled}
                      for s in self.sides],
            "problems": self.problems(),
            "decisions": [{"case": r.case, "question": r.question, "a": _answer_json(r.a), "b": _answer_json(r.b),
                           "deviation": r.deviation, "flipped": r.flipped, "score_shift": r.score_shift}
                          for r in self.rows],
        }


def _decision_words(answer: Answer) -> str:
    if isinstance(answer, Noul):
        return f"{'yes' if answer.p >= 0.5 else 'no'} {answer.p:.4f}"
    if isinstance(answer, Score):
        return f"level {answer.level} (expected {answer.expected:.3f})"
    return f"{answer.key} {answer.probabilities[answer.key]:.4f}"


def _answer_json(answer: Answer) -> dict[str, Any]:
    if isinstance(answer, Noul):
        return {"type": "noul", "p": answer.p}
    out: dict[str, Any] = {"type": answer.type, "probabilities": {str(k): p for k, p in answer.probabilities.items()},
                           "decided": decided(answer), "described": describe(answer)}
    if isinstance(answer, Score):
        out["expected"] = answer.expected
    return out


def compare_sides(a: Side, b: Side, cases: Sequence[Case], *, tolerance: float | None = None,
                  min_accuracy: float | None = None) -> Comparison:
    """Ask both sides every case and compare their answers, question by question."""
    figures = (SideFigures(a.name), SideFigures(b.name))
    rows: list[Row] = []
    dtypes: set[str] = set()
    probabilities: list[float] = []
    for n, case in enumerate(cases, 1):
        name = case.name or str(n)
        case = Case(case.state, case.questions, case.expected, name)
        got = [side.answer(case) for side in (a, b)]
        for side, answered in zip(figures, got):
            if answered.latency_ms is not None:
                side.latencies_ms.append(round(answered.latency_ms, 3))
            if answered.weights_dtype:
                dtypes.add(answered.weights_dtype)
            for qid, label in case.expected.items():
                hit, brier = _hit_and_brier(answered.answers[qid], label)
                side.hits += hit
                side.labelled += 1
                side.brier += brier
        for qid in case.questions:
            first, second = got[0].answers[qid], got[1].answers[qid]
            for answer in (first, second):
                probabilities += [answer.p] if isinstance(answer, Noul) else list(answer.probabilities.values())
            rows.append(Row(name, qid, first, second, round(probability_change(first, second), 6),
                            decided(first) != decided(second), _score_shift(first, second)))
    resolved = resolve_tolerance(tolerance, None, sorted(dtypes), rounding_step(probabilities))
    return Comparison(rows, resolved, figures, min_accuracy)


"""Pinned answers: canned decisions a test forces the fake to give, by question id.

``FakeLaya.pin({"team": "billing", "refund": 0.91})`` (``FakeLayaServer.decide(...)``) makes
every matching request answer ``team`` with the choice ``billing`` and ``refund`` with P(true)
0.91; questions no pin names keep the fake's stable answers. A pin may match on the state
(a substring, a compiled regex or a callable) and on the question set (a set of ids, or a
callable), and may apply a limited number of `times`. Pins are tried in the order they were
made; for each question the first matching pin that names it wins.

Mistakes are `PinError`s: at the call where the call can know (a probability outside [0, 1],
a negative level, a value of the wrong kind), and at request time otherwise (a key that is not
among the question's options, a level out of range, a question id the request does not ask).
A request-time error is answered with a 422 naming the pin, kept on the pin and on the fake,
and raised again by `FakeLaya.check_pins()` (the plugin's fixtures call it at teardown), so a
service that swallows HTTP errors cannot hide it.
"""

from __future__ import annotations

import math
import os
import re
import sys
import threading
from collections.abc import Callable, Collection, Mapping
from types import FrameType
from typing import Any, Union

from pytest_laya.wire.calls import Call, Calls
from pytest_laya.wire.errors import LayaConfigError
from pytest_laya.wire.json_text import canonical_json

__all__ = [
    "PINNED_PROBABILITY",
    "Pin",
    "PinError",
    "StateMatcher",
    "QuestionsMatcher",
    "check_answers",
]

#: The probability a pinned choice key or score level gets; the other options share the rest
#: equally (a single option gets 1).
PINNED_PROBABILITY = 0.9
# A pinned distribution that names every option must sum to 1 within this.
SUM_TOLERANCE = 1e-6

StateMatcher = Union[str, "re.Pattern[str]", Callable[[Any], Any], None]  # noqa: UP007 - a string member
QuestionsMatcher = Collection[str] | Callable[[Mapping[str, Any]], Any] | None

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class PinError(LayaConfigError):
    """A pinned answer the fake cannot give: the test's pin is wrong, not the request.

    `question` is the question id concerned and `pin` the `Pin`, when there are.
    """

    def __init__(self, message: str, *, question: str | None = None, pin: Pin | None = None) -> None:
        self.question = question
        self.pin = pin
        super().__init__(message, code="invalid_pin")


def _kind_of(value: Any) -> str:
    return type(value).__name__


_VALUE_HELP = ("pin a choice with its option key ('billing'), a score with its level (2), a noul question with "
               "P(true) (0.91), or any of them with a distribution ({'billing': 0.7, 'tech': 0.3})")


def _check_value(qid: str, value: Any) -> Any:
    """`value` checked for what can be known without the question; distributions as {str: float}."""
    if isinstance(value, bool):
        raise PinError(f"pinned answer for {qid!r} is {value!r}: a noul question is pinned with a probability "
                       f"such as 0.95 (yes) or 0.05 (no); {_VALUE_HELP}", question=qid)
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        if value < 0:
            raise PinError(f"pinned answer for {qid!r} is {value}: a score level is 0 or more and a probability lies "
                           f"in [0, 1]", question=qid)
        return value
    if isinstance(value, float):
        if not math.isfinite(value) or not 0.0 <= value <= 1.0:
            raise PinError(f"pinned probability for {qid!r} is {value!r}, outside [0, 1]", question=qid)
        return value
    if isinstance(value, Mapping):
        if not value:
            raise PinError(f"pinned distribution for {qid!r} is empty; {_VALUE_HELP}", question=qid)
        out: dict[str, float] = {}
        for key, p in value.items():
            if isinstance(key, bool) or not isinstance(key, (str, int)):
                raise PinError(f"pinned distribution for {qid!r}: key {key!r} must be an option key (str) or a score "
                               f"level (int)", question=qid)
            if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p) or not 0.0 <= p <= 1.0:
                raise PinError(f"pinned distribution for {qid!r}: the probability of {key!r} is {p!r}, outside "
                               f"[0, 1]", question=qid)
            out[str(key)] = float(p)
        total = math.fsum(out.values())
        if total > 1.0 + SUM_TOLERANCE:
            raise PinError(f"pinned distribution for {qid!r} sums to {total:.6g}, more than 1", question=qid)
        return out
    raise PinError(f"pinned answer for {qid!r} is a {_kind_of(value)} ({value!r}); {_VALUE_HELP}", question=qid)


def check_answers(answers: Any) -> dict[str, Any]:
    """The pinned answers, checked as far as they can be without a request; raises `PinError`."""
    if not isinstance(answers, Mapping) or not answers:
        raise PinError(f"pinned answers are a non-empty mapping of question id -> answer, got {answers!r}; e.g. "
                       "{'team': 'billing', 'refund': 0.91}")
    out = {}
    for qid, value in answers.items():
        if not isinstance(qid, str) or not qid:
            raise PinError(f"pinned answers are keyed by question id (a non-empty string), got {qid!r}")
        out[qid] = _check_value(qid, value)
    return out


def _check_state_matcher(state: Any) -> Any:
    if state is None or isinstance(state, (str, re.Pattern)) or callable(state):
        return state
    raise PinError(f"state= takes a substring, a compiled regex (re.compile(...)) or a callable(state) -> bool, "
                   f"got {_kind_of(state)} {state!r}")


def _check_questions_matcher(questions: Any) -> Any:
    if questions is None or callable(questions):
        return questions
    if isinstance(questions, (str, bytes)) or not isinstance(questions, Collection):
        raise PinError(f"questions= takes a set of question ids (the request asks exactly these) or a "
                       f"callable(questions) -> bool, got {questions!r}")
    ids = frozenset(questions)
    if not ids or not all(isinstance(q, str) for q in ids):
        raise PinError(f"questions= takes a non-empty set of question ids (strings), got {questions!r}")
    return ids


def _caller() -> str:
    """file:line of the first frame outside pytest_laya: where the test made the pin."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR + os.sep):
        frame = frame.f_back
    if frame is None:  # pragma: no cover - called from inside the package only
        return "unknown"
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


class Pin:
    """One set of pinned answers, and what became of it.

    `calls` lists the calls it answered (at least one of their questions), `used` how many
    states it answered, `errors` why the fake could not give its answers. `remove()` (or
    leaving ``with fake.pin(...):``) stops it; `active` says whether it still applies.
    """

    def __init__(self, board: PinBoard, answers: Any, *, state: StateMatcher = None, questions: QuestionsMatcher = None,
                 times: int | None = None, where: str | None = None) -> None:
        self.answers: Mapping[str, Any] = check_answers(answers)
        self._given = dict(answers)
        self.state = _check_state_matcher(state)
        self.questions = _check_questions_matcher(questions)
        if times is not None and (isinstance(times, bool) or not isinstance(times, int) or times < 1):
            raise PinError(f"times= takes a whole number of requests >= 1 (or None: every request), got {times!r}")
        self.times = times
        self.where = where or _caller()
        self.calls = Calls()
        self.errors: list[str] = []
        self.used = 0
        self._board = board
        self._removed = False
        self._reported = 0  # errors already raised by a check
        self._unused_reported = False

    @property
    def active(self) -> bool:
        return not self._removed and (self.times is None or self.used < self.times)

    def remove(self) -> None:
        """Stop applying this pin (its calls and errors are kept)."""
        self._removed = True
        self._board.remove(self)

    def __enter__(self) -> Pin:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        scope = []
        if self.state is not None:
            scope.append(f"state={self.state.pattern!r}" if isinstance(self.state, re.Pattern) else f"state={self.state!r}")
        if self.questions is not None:
            scope.append(f"questions={sorted(self.questions)!r}" if isinstance(self.questions, frozenset)
                         else f"questions={self.questions!r}")
        if self.times is not None:
            scope.append(f"times={self.times}")
        return f"pin {self._given!r}{' ' + ' '.join(scope) if scope else ''} (pinned at {self.where})"

    # -- matching

    def matches(self, state: Any, questions: Mapping[str, Any]) -> bool:
        """Whether this pin applies to one state of a request asking `questions`.

        Without `questions=`, a pin applies to requests that ask at least one of its ids.
        """
        if self.questions is None:
            if not any(qid in questions for qid in self.answers):
                return False
        elif isinstance(self.questions, frozenset):
            if self.questions != frozenset(questions):
                return False
        elif not self._call(self.questions, dict(questions), "questions"):
            return False
        if self.state is None:
            return True
        if callable(self.state) and not isinstance(self.state, re.Pattern):
            return bool(self._call(self.state, state, "state"))
        text = state if isinstance(state, str) else canonical_json(state)
        if isinstance(self.state, re.Pattern):
            return self.state.search(text) is not None
        return self.state in text

    def _call(self, matcher: Callable[[Any], Any], value: Any, what: str) -> Any:
        try:
            return matcher(value)
        except Exception as exc:
            raise PinError(f"{self!r}: its {what}= matcher raised {type(exc).__name__}: {exc}", pin=self) from exc

    def _answered(self, call: Call) -> None:
        self.calls.append(call)

    def _take_errors(self) -> list[str]:
        """The errors no check has raised yet (from now on, raised)."""
        new = self.errors[self._reported:]
        self._reported = len(self.errors)
        return new

    def _take_unused(self) -> bool:
        """Whether this pin is in effect and never used, and no check said so yet (from now on, said)."""
        if self.used or self.errors or self._removed or self._unused_reported:
            return False
        self._unused_reported = True
        return True


class PinBoard:
    """The pins of one fake, in order, and every pin it ever had (for their errors)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.active: list[Pin] = []
        self.every: list[Pin] = []

    def pin(self, answers: Any, *, state: StateMatcher = None, questions: QuestionsMatcher = None,
            times: int | None = None, where: str | None = None) -> Pin:
        """A new `Pin` of `answers`, in effect after every earlier one; raises `PinError` for a pin that can never be right."""
        return self.add(Pin(self, answers, state=state, questions=questions, times=times, where=where))

    def add(self, pin: Pin) -> Pin:
        with self._lock:
            self.active.append(pin)
            self.every.append(pin)
        return pin

    def remove(self, pin: Pin) -> None:
        with self._lock:
            if pin in self.active:
                self.active.remove(pin)

    def plan(self, state: Any, questions: Mapping[str, Any]) -> dict[str, tuple[Pin, Any]]:
        """{question id: (pin, pinned value)} for one state; raises `PinError` for a pin naming an unasked question."""
        with self._lock:
            candidates = [pin for pin in self.active if pin.active]
        chosen: dict[str, tuple[Pin, Any]] = {}
        for pin in candidates:
            if not pin.matches(state, questions):
                continue
            unknown = [qid for qid in pin.answers if qid not in questions]
            if unknown:
                raise PinError(f"{pin!r} names {_ids(unknown)} that this request does not ask; it asks "
                               f"{list(questions)}", question=unknown[0], pin=pin)
            supplied = False
            for qid, value in pin.answers.items():
                if qid not in chosen:
                    chosen[qid] = (pin, value)
                    supplied = True
            if supplied:
                with self._lock:
                    if not pin.active:  # a concurrent request used its last time
                        for qid in [q for q, (p, _) in chosen.items() if p is pin]:
                            del chosen[qid]
                        continue
                    pin.used += 1
        return chosen


def _ids(ids: list[str]) -> str:
    return f"question {ids[0]!r}" if len(ids) == 1 else f"questions {ids!r}"

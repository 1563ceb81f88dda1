"""Hypothesis strategies for Laya decisions, so a project can property-test its own request
building and answer parsing: valid requests, invalid requests by kind (each with the problem the
target spec requires), and valid answers for a given question set, in either flavour.

Needs hypothesis (``pip install 'pytest-laya[hypothesis]'``)::

    from hypothesis import given
    from pytest_laya import strategies as laya_st

    @given(laya_st.responses(MY_QUESTIONS))
    def test_my_parser_reads_every_valid_answer(body):
        route(body)                       # must never raise

Everything is drawn within the target spec's limits (`pytest_laya.fake.LIMITS`) and hits their
edges on purpose (64 questions, 100 options, a state of exactly 50,000 characters, P(true) of 0
and 1). What counts as valid and which problem each invalid kind gets are
`pytest_laya.wire.requests`' rules, the one validation the fake and the reference server share;
the kit's tests hold every kind here to it.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

try:
    from hypothesis import strategies as st
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError("pytest_laya.strategies needs hypothesis: pip install 'pytest-laya[hypothesis]' "
                      "(or hypothesis>=6)") from exc

from pytest_laya.fake.flavours import FLAVORS, LIMITS, TARGET
from pytest_laya.wire.problems import PROBLEM_STATUS
from pytest_laya.wire.questions import option_key
from pytest_laya.wire.requests import (
    MAX_NESTING,
    MAX_TOKEN_BUDGET,
    MIN_CONFIDENCE_BUCKETS,
    ROUTING_CONTROLS,
    requested_tokens,
)
from pytest_laya.wire.routes import JSON_MEDIA_TYPE

__all__ = [
    "INVALID_KINDS",
    "InvalidRequest",
    "choice_questions",
    "invalid_requests",
    "noul_questions",
    "question_ids",
    "question_sets",
    "questions",
    "requests",
    "responses",
    "score_questions",
    "states",
    "texts",
]

_NO_SURROGATES = st.characters(exclude_categories=["Cs"])


def texts(*, min_size: int = 0, max_size: int = 40, blank: bool = True) -> st.SearchStrategy[str]:
    """Unicode text that UTF-8 can carry (no lone surrogates); `blank=False`: some non-space character."""
    drawn = st.text(_NO_SURROGATES, min_size=min_size, max_size=max_size)
    return drawn if blank else drawn.filter(lambda s: s.strip())


def states(*, max_chars: int = LIMITS["max_state_chars"]) -> st.SearchStrategy[Any]:
    """A state: text (empty, unicode, or exactly `max_chars` long), a JSON object, or a list of turns."""
    turn = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system"]), "content": texts()})
    return st.one_of(
        texts(max_size=200),
        st.builds(lambda c, n: (c * n)[:n], texts(min_size=1, max_size=3), st.sampled_from([max_chars, max_chars - 1])),
        st.dictionaries(texts(max_size=10), st.one_of(texts(), st.integers(-10**6, 10**6), st.booleans(), st.none()),
                        max_size=4),
        st.lists(turn, min_size=1, max_size=4),
    )


def question_ids() -> st.SearchStrategy[str]:
    """Question ids: non-blank unicode, including ``/`` and ``~`` (which JSON pointers escape)."""
    return st.one_of(st.sampled_from(["team", "refund", "urgency", "a/b", "x~y"]), texts(min_size=1, max_size=12,
                                                                                          blank=False))


def _size(small: int, edge: int) -> st.SearchStrategy[int]:
    """Mostly small sizes, sometimes the limit itself and one below it."""
    return st.one_of(st.integers(1, max(1, min(small, edge))), st.sampled_from(sorted({max(1, edge - 1), edge})))


@st.composite
def choice_questions(draw: st.DrawFn, *, max_options: int = LIMITS["max_options"]) -> dict[str, Any]:
    """A valid choice question: criteria as an object (described or null) or a list of labels
    (strings, integers, booleans), 1 to `max_options` options with distinct keys."""
    n = draw(_size(6, max_options))
    if n > 6:
        keys: list[Any] = [f"option-{i}" for i in range(n)]
    else:
        label = st.one_of(texts(min_size=1, max_size=12), st.integers(-999, 999), st.booleans())
        keys = draw(st.lists(label, min_size=n, max_size=n, unique_by=option_key))
    instructions = draw(texts(min_size=1, max_size=60, blank=False))
    if draw(st.booleans()):
        described = draw(st.lists(st.one_of(texts(max_size=30), st.none()), min_size=len(keys), max_size=len(keys)))
        return {"type": "choice", "instructions": instructions,
                "criteria": {option_key(k): d for k, d in zip(keys, described)}}
    return {"type": "choice", "instructions": instructions, "criteria": keys}


@st.composite
def score_questions(draw: st.DrawFn, *, max_levels: int = 11) -> dict[str, Any]:
    """A valid score question: 1 to `max_levels` level descriptions, index 0 first."""
    levels = draw(st.lists(texts(max_size=30), min_size=1, max_size=max_levels))
    return {"type": "score", "instructions": draw(texts(min_size=1, max_size=60, blank=False)), "criteria": levels}


@st.composite
def noul_questions(draw: st.DrawFn) -> dict[str, Any]:
    """A valid noul question, with no criteria, or criteria describing "true" and/or "false"."""
    question: dict[str, Any] = {"type": "noul", "instructions": draw(texts(min_size=1, max_size=60, blank=False))}
    keys: tuple[str, ...] = draw(st.sampled_from([(), ("true",), ("false",), ("true", "false")]))
    with_criteria: bool = draw(st.booleans())
    if keys or with_criteria:
        question["criteria"] = {key: draw(texts(max_size=30)) for key in keys}
    return question


def questions(*, types: Collection[str] = ("choice", "score", "noul"),
              max_options: int = LIMITS["max_options"]) -> st.SearchStrategy[dict[str, Any]]:
    """One valid question of one of `types`."""
    made = {"choice": choice_questions(max_options=max_options), "score": score_questions(), "noul": noul_questions()}
    unknown = sorted(set(types) - set(made))
    if unknown or not types:
        raise ValueError(f"types takes some of {sorted(made)}, got {sorted(types)}")
    return st.one_of([made[t] for t in made if t in types])


@st.composite
def question_sets(draw: st.DrawFn, *, max_questions: int = LIMITS["max_questions"],
                  types: Collection[str] = ("choice", "score", "noul"),
                  max_options: int = LIMITS["max_options"]) -> dict[str, dict[str, Any]]:
    """A valid ``questions`` object: 1 to `max_questions` questions of any mix of `types`."""
    n = draw(_size(5, max_questions))
    if n > 5:  # at the limit: short generated ids, small questions, so the body stays well under its limit
        ids = [f"q{i}" for i in range(n)]
        return {qid: draw(questions(types=types, max_options=min(max_options, 4))) for qid in ids}
    ids = draw(st.lists(question_ids(), min_size=n, max_size=n, unique=True))
    return {qid: draw(questions(types=types, max_options=max_options)) for qid in ids}


@st.composite
def requests(draw: st.DrawFn, *, batch: bool = False, models: Sequence[str] = (), controls: bool = True,
             limits: Mapping[str, int] = LIMITS) -> dict[str, Any]:
    """A valid ``POST /v1/systemone`` body (or a batch's, with `batch`), as the target spec reads it.

    `models`: names the body may send as `model` (it sends none when empty); `controls`: may
    send laya's per-call options (``min_confidence``, ``max_len``, ``head_max_len``).
    """
    body: dict[str, Any] = {}
    state_strategy = states(max_chars=limits["max_state_chars"])
    if batch:
        body["states"] = draw(st.lists(state_strategy, min_size=1, max_size=limits["max_batch_states"])
                              if draw(st.booleans()) else st.lists(texts(), min_size=limits["max_batch_states"],
                                                                   max_size=limits["max_batch_states"]))
    else:
        body["state"] = draw(state_strategy)
    body["questions"] = draw(question_sets(max_questions=limits["max_questions"], max_options=limits["max_options"]))
    wants_model: bool = draw(st.booleans())
    if models and wants_model:
        body["model"] = draw(st.sampled_from(list(models)))
    if controls and draw(st.booleans()):
        if draw(st.booleans()):
            body["min_confidence"] = draw(st.one_of(
                st.floats(0, 1), st.dictionaries(st.sampled_from(sorted(MIN_CONFIDENCE_BUCKETS)), st.floats(0, 1),
                                                 min_size=1, max_size=3)))
        for name in ("max_len", "head_max_len"):
            if draw(st.booleans()):
                body[name] = draw(st.sampled_from([1, 64, MAX_TOKEN_BUDGET]))
    _within_token_budget(body, limits)
    return body


def _within_token_budget(body: dict[str, Any], limits: Mapping[str, int]) -> None:
    """Drop states, then questions, until the request asks for no more tokens than the budget."""
    budget = limits.get("max_request_tokens")
    if budget is None:
        return
    while requested_tokens(len(body.get("states") or [None]), len(body["questions"]), body.get("max_len")) > budget:
        if len(body.get("states") or ()) > 1:
            body["states"].pop()
        else:
            del body["questions"][next(reversed(body["questions"]))]


# -- invalid requests -------------------------------------------------------------------------------


@dataclass(frozen=True)
class InvalidRequest:
    """A request the target spec refuses, and how: `status` and problem `code` (and the question
    id the problem names in ``errors[]``, for ``invalid_question`` and ``too_large`` options).

    `body` is the bytes to send with `content_type`; `json` the parsed body, when it is JSON.
    """

    kind: str
    body: bytes
    code: str
    content_type: str = JSON_MEDIA_TYPE
    question: str | None = None

    @property
    def status(self) -> int:
        return PROBLEM_STATUS[self.code]

    @property
    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            return None


def _dumps(body: Any) -> bytes:
    return json.dumps(body, ensure_ascii=False).encode("utf-8")


def _with_question(body: dict[str, Any], qid: str, question: Any) -> dict[str, Any]:
    return {**body, "questions": {**body["questions"], qid: question}}


# kind -> (the problem code, how to break a valid body drawn by `requests()`)
def _breakers(limits: Mapping[str, int]) -> dict[str, tuple[str, Any]]:
    bad_id = "broken"

    def question(q: Any) -> Any:
        return lambda draw, body: (_with_question(body, bad_id, q), bad_id)

    def raw(make: Any) -> Any:
        return make

    return {
        "not_json": ("malformed_request", raw(lambda draw, body: (b'{"state": "x", "questions": ', None))),
        "not_an_object": ("malformed_request", raw(lambda draw, body: (_dumps([body]), None))),
        "too_deep": ("malformed_request", raw(lambda draw, body: (
            _dumps({**body, "extra": None})[:-1] + b', "deep": ' + b"[" * (MAX_NESTING + 1) + b"]" * (MAX_NESTING + 1)
            + b"}", None))),
        "lone_surrogate": ("malformed_request", raw(lambda draw, body: (
            _dumps({**body, "state": "x"}).replace(b'"state": "x"', b'"state": "\\ud800"'), None))),
        "wrong_media_type": ("unsupported_media_type", raw(lambda draw, body: (_dumps(body), None))),
        "body_too_large": ("too_large", raw(lambda draw, body: (
            _dumps({**body, "padding": "x" * (limits["max_body_bytes"] + 1)}), None))),
        "no_state": ("malformed_request", lambda draw, body: ({k: v for k, v in body.items() if k != "state"}, None)),
        "state_not_text": ("malformed_request", lambda draw, body: (
            {**body, "state": draw(st.sampled_from([None, 42, 1.5, True]))}, None)),
        "state_too_large": ("state_too_large", lambda draw, body: (
            {**body, "state": "x" * (limits["max_state_chars"] + 1)}, None)),
        "no_questions": ("malformed_request", lambda draw, body: (
            {k: v for k, v in body.items() if k != "questions"}, None)),
        "questions_not_object": ("malformed_request", lambda draw, body: (
            {**body, "questions": draw(st.sampled_from([[], "team", 3, None]))}, None)),
        "empty_questions": ("malformed_request", lambda draw, body: ({**body, "questions": {}}, None)),
        "too_many_questions": ("too_many_questions", lambda draw, body: (
            {**body, "questions": {f"q{i}": {"type": "noul", "instructions": "?"}
                                   for i in range(limits["max_questions"] + 1)}}, None)),
        "over_token_budget": ("too_large", lambda draw, body: (
            {**body, "max_len": MAX_TOKEN_BUDGET,
             "questions": {f"q{i}": {"type": "noul", "instructions": "?"}
                           for i in range(limits["max_request_tokens"] // MAX_TOKEN_BUDGET + 1)}}, None)),
        "question_not_object": ("invalid_question", question("Which team?")),
        "no_type": ("invalid_question", question({"instructions": "Which team?", "criteria": ["a"]})),
        "unknown_type": ("invalid_question", question({"type": "ranking", "instructions": "?", "criteria": ["a"]})),
        "no_instructions": ("invalid_question", question({"type": "noul"})),
        "blank_instructions": ("invalid_question", question({"type": "noul", "instructions": " \t"})),
        "choice_without_criteria": ("invalid_question", question({"type": "choice", "instructions": "?"})),
        "empty_options": ("invalid_question", question({"type": "choice", "instructions": "?", "criteria": {}})),
        "duplicate_options": ("invalid_question", question({"type": "choice", "instructions": "?",
                                                            "criteria": ["a", "b", "a"]})),
        "null_option": ("invalid_question", question({"type": "choice", "instructions": "?", "criteria": ["a", None]})),
        "option_described_by_a_number": ("invalid_question", question({"type": "choice", "instructions": "?",
                                                                       "criteria": {"a": 1}})),
        "score_without_levels": ("invalid_question", question({"type": "score", "instructions": "?", "criteria": []})),
        "score_level_not_text": ("invalid_question", question({"type": "score", "instructions": "?",
                                                               "criteria": ["low", None]})),
        "noul_criteria_not_true_false": ("invalid_question", question({"type": "noul", "instructions": "?",
                                                                       "criteria": {"yes": "y"}})),
        "too_many_options": ("too_large", question({"type": "choice", "instructions": "?",
                                                    "criteria": [f"o{i}" for i in range(limits["max_options"] + 1)]})),
        "unknown_model": ("unknown_model", lambda draw, body: (
            {**body, "model": "no-such-model-" + draw(st.text("0123456789abcdef", min_size=6, max_size=6))}, None)),
        "bad_min_confidence": ("invalid_request", lambda draw, body: (
            {**body, "min_confidence": draw(st.sampled_from([1.5, -0.1, "high", {"choice:7": 0.5}, {}]))}, None)),
        "bad_max_len": ("invalid_request", lambda draw, body: (
            {**body, draw(st.sampled_from(["max_len", "head_max_len"])): draw(st.sampled_from(
                [0, MAX_TOKEN_BUDGET + 1, 1.5, "64", True]))}, None)),
        "routing_control": ("invalid_request", lambda draw, body: (
            {**body, draw(st.sampled_from(list(ROUTING_CONTROLS))): "en"}, None)),
    }


#: Every kind `invalid_requests` draws, and the target problem code each must get.
INVALID_KINDS: dict[str, str] = {kind: code for kind, (code, _) in _breakers(LIMITS).items()}


def invalid_requests(kinds: Collection[str] | None = None, *,
                     limits: Mapping[str, int] = LIMITS) -> st.SearchStrategy[InvalidRequest]:
    """A single decision request with exactly one thing the target spec refuses, of one of `kinds`
    (default: every kind in `INVALID_KINDS`), as an `InvalidRequest` with the status and code the
    target requires.
    """
    breakers = _breakers(limits)
    chosen = sorted(breakers) if kinds is None else list(kinds)
    unknown = sorted(set(chosen) - set(breakers))
    if unknown or not chosen:
        raise ValueError(f"unknown invalid request kind(s) {unknown}; use some of {sorted(breakers)}")

    @st.composite
    def draw_one(draw: st.DrawFn) -> InvalidRequest:
        kind = draw(st.sampled_from(chosen))
        code, breaker = breakers[kind]
        # A small valid body to break: the one defect must be the first problem found.
        valid = {"state": draw(texts(max_size=40)), "questions": draw(question_sets(max_questions=3, max_options=5))}
        broken, question = breaker(draw, valid)
        body = broken if isinstance(broken, bytes) else _dumps(broken)
        content_type = "text/plain" if kind == "wrong_media_type" else JSON_MEDIA_TYPE
        return InvalidRequest(kind=kind, body=body, code=code, content_type=content_type, question=question)

    return draw_one()


# -- answers ------------------------------------------------------------------------------------------


def _wire(question: Any) -> Any:
    return question.to_wire() if hasattr(question, "to_wire") else question


@st.composite
def _distribution(draw: st.DrawFn, keys: list[str]) -> dict[str, float]:
    """Probabilities over `keys` summing to 1: spread, peaked, or all on one key."""
    shape = draw(st.sampled_from(["spread", "certain", "tie"]))
    if shape == "certain" or len(keys) == 1:
        top = draw(st.sampled_from(keys))
        return {key: 1.0 if key == top else 0.0 for key in keys}
    if shape == "tie":
        return {key: 1.0 / len(keys) for key in keys}
    weights = draw(st.lists(st.integers(0, 1000), min_size=len(keys), max_size=len(keys)).filter(any))
    total = sum(weights)
    return {key: w / total for key, w in zip(keys, weights)}


def responses(questions: Mapping[str, Any], *, flavor: str = TARGET, model: str = "fake-laya",
              state: Any = "") -> st.SearchStrategy[dict[str, Any]]:
    """A valid 200 body answering `questions` (id -> definition, as sent) in `flavor`'s shape.

    ``"target"`` bodies conform to the target spec, ``"laya-serve-0.4.15"`` ones to the current
    spec (laya-serve's fields); every answer keeps the answer rules (`pytest_laya.wire.decision`):
    any choice, level or P(true) (0 and 1 included), any distribution, ties, single options.
    Built by the fake's own answer code with the drawn answers pinned, so they are exactly
    what `FakeLaya.pin` would give. Raises `LayaConfigError` for questions no server could answer.
    """
    from pytest_laya.wire.questions import normalize_questions

    if flavor not in FLAVORS:
        raise ValueError(f"flavor must be one of {list(FLAVORS)}, got {flavor!r}")
    wire = {qid: _wire(q) for qid, q in questions.items()}
    asked = normalize_questions(wire)  # a question set no server could answer is the caller's mistake
    return _answers(asked, wire, flavor, model, state)


# Built once, not per `responses` call or draw: hypothesis inspects a composite's source when it
# is made, and a strategy built inside a draw is built again on every draw.
_P_TRUE = st.one_of(st.sampled_from([0.0, 1.0, 0.5]), st.floats(0, 1))
_TOKENS = st.integers(0, 2**31 - 1)


@st.composite
def _answers(draw: st.DrawFn, asked: Mapping[str, Any], wire: Mapping[str, Any], flavor: str, model: str,
             state: Any) -> dict[str, Any]:
    from pytest_laya.fake import FakeLaya

    pinned: dict[str, Any] = {}
    for qid, q in asked.items():
        if q.type == "noul":
            pinned[qid] = draw(_P_TRUE)
        elif draw(st.booleans()):
            pinned[qid] = draw(st.sampled_from(list(q.option_keys))) if q.type == "choice" else draw(
                st.integers(0, len(q.option_keys) - 1))
        else:
            pinned[qid] = draw(_distribution(list(q.option_keys)))
    fake = FakeLaya(model=model, flavor=flavor)
    fake.pin(pinned, where="pytest_laya.strategies.responses")
    status, _, answered = fake.answer({"state": state, "questions": wire})
    body: dict[str, Any] = answered
    if status != 200:  # pragma: no cover - normalize_questions refused what the fake would
        raise ValueError(f"questions {list(wire)} cannot be answered: {body}")
    usage = body["usage"]
    if draw(st.booleans()):
        usage["input_tokens"] = draw(_TOKENS)
    usage["state_tokens"] = min(usage["state_tokens"], usage["input_tokens"])
    return body

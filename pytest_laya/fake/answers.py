"""The fake's answer function: useful, stable answers computed from the request alone, no I/O.

Every option gets a score that is a deterministic hash of ``[state, instructions, option key,
option description]`` alone, mapped to [0, 1); probabilities are the softmax of the scores of a
question's options at temperature `TEMPERATURE`, rounded to 4 decimals by largest remainder so
they sum to 1. Reordering options, or reordering or adding other questions, never changes an
option's score. Ties break in one documented order: the higher score wins, equal scores go to
the key that sorts first in code point order. ``usage.input_tokens`` counts words and
punctuation of the state and of every question, plus `TOKENS_PER_QUESTION` per question.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from pytest_laya.fake.flavours import LAYA_SERVE, LIMITS, TARGET, Exchange, flavour

__all__ = [
    "TEMPERATURE",
    "TOKENS_PER_QUESTION",
    "FakeLaya",
    "count_tokens",
    "rank",
]


#: Softmax temperature over option scores in [0, 1): three options get a top probability of
#: about 0.42-0.89 (median 0.63), so answers are decided but not certain.
TEMPERATURE = 0.25
#: Probabilities are sent in units of 1/10,000 (4 decimals) that add up to exactly 10,000.
_UNITS = 10_000
#: P(true) of a noul question lies in [_NOUL_LOW, _NOUL_LOW + _NOUL_SPAN) = [0.0201, 0.9799).
_NOUL_LOW = 0.0201
_NOUL_SPAN = 0.9598
#: Tokens added per question to its text's count (laya frames each question with markers).
TOKENS_PER_QUESTION = 4
_TOKEN = re.compile(r"\w+|[^\w\s]")


def _canonical(value: Any) -> str:
    """The canonical JSON text the hash reads: sorted keys, no spaces, UTF-8 as is."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)


def _unit(parts: list[Any]) -> float:
    """A number in [0, 1) that depends on `parts` only: blake2b-64 of their canonical JSON / 2**64."""
    data = _canonical(parts).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big") / 2.0**64


def count_tokens(value: Any) -> int:
    """Words and punctuation marks (``\\w+`` runs and single other non-space characters).

    Text counts as itself, JSON values (a state object, a list of turns) as their canonical
    JSON, ``None`` as 0.
    """
    if value is None:
        return 0
    text = value if isinstance(value, str) else _canonical(value)
    return len(_TOKEN.findall(text))


def _json_key(label: Any) -> str:
    # How a list label becomes an answer key: JSON's own spelling (True -> "true", 1.0 -> "1.0").
    return label if isinstance(label, str) else next(iter(json.loads(json.dumps({label: 0}))))


def _options(question: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(key, description) of each option of a valid choice or score question, in request order."""
    criteria = question.get("criteria")
    if question.get("type") == "score":
        return [(str(i), level) for i, level in enumerate(criteria)]
    if isinstance(criteria, Mapping):
        return [(_json_key(k), v) for k, v in criteria.items()]
    seen: dict[str, None] = {}
    for label in criteria:
        seen.setdefault(_json_key(label), None)
    return [(key, None) for key in seen]


def _noul_texts(question: Mapping[str, Any]) -> dict[str, Any]:
    criteria = question.get("criteria")
    lowered = {str(k).lower(): v for k, v in criteria.items()} if isinstance(criteria, Mapping) else {}
    return {"true": lowered.get("true"), "false": lowered.get("false")}


def rank(scores: Mapping[str, float]) -> list[str]:
    """Option keys best first: higher score first, equal scores by key in code point order."""
    return sorted(scores, key=lambda key: (-scores[key], key))


def _distribution(scores: Mapping[str, float]) -> tuple[list[str], dict[str, float], dict[str, float]]:
    """(ranked keys, exact softmax probabilities, probabilities rounded to 4 decimals summing to 1)."""
    order = rank(scores)
    top = scores[order[0]]
    weights = {key: math.exp((scores[key] - top) / TEMPERATURE) for key in order}
    total = math.fsum(weights.values())
    exact = {key: weights[key] / total for key in order}
    # Largest remainder: floor every share to 1e-4 units, then hand the units left over to the
    # largest remainders (ties in rank order). The sum is exactly 1 and the order never inverts.
    units = {key: math.floor(exact[key] * _UNITS) for key in order}
    position = {key: i for i, key in enumerate(order)}
    by_remainder = sorted(order, key=lambda key: (-(exact[key] * _UNITS - units[key]), position[key]))
    left = _UNITS - sum(units.values())
    for key in by_remainder[:max(left, 0)]:
        units[key] += 1
    for key in reversed(by_remainder):  # float noise only: never more than 10,000 units
        if left >= 0:
            break
        if units[key] > 0:
            units[key] -= 1
            left += 1
    return order, exact, {key: units[key] / _UNITS for key in order}


def _margin(order: list[str], exact: Mapping[str, float]) -> float:
    """Top probability minus the second one (1.0 for a single option)."""
    if len(order) < 2:
        return 1.0
    return round(min(1.0, max(0.0, exact[order[0]] - exact[order[1]])), 4)


def _certainty(order: list[str], exact: Mapping[str, float]) -> float:
    """1 - normalised entropy: 0 for a uniform answer, 1 for a certain one (laya-serve's x_jev_confidence)."""
    if len(order) < 2:
        return 1.0
    entropy = -math.fsum(p * math.log(p) for p in exact.values() if p > 0)
    return round(min(1.0, max(0.0, 1.0 - entropy / math.log(len(order)))), 4)


def _act_probability(top: float) -> float:
    return round(0.5 + 0.5 * top, 4)


class FakeLaya:
    """The answer generator: request bodies in, (status, headers, JSON body) out; no I/O.

    `model` is the served model name and checkpoint (`served_by.checkpoint`, `routing.model`),
    `revision` its revision; `flavor` is ``"target"`` or ``"laya-serve-0.4.15"``.
    """

    def __init__(self, *, model: str = "fake-laya", revision: str = "fake-0", flavor: str = TARGET) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ValueError(f"model must be a non-empty string, got {model!r}")
        if not isinstance(revision, str) or not revision.strip():
            raise ValueError(f"revision must be a non-empty string, got {revision!r}")
        self.model = model
        self.revision = revision
        self.flavor = flavor
        self._flavour = flavour(flavor)
        self.limits: dict[str, int] = dict(LIMITS)

    def __repr__(self) -> str:
        return f"FakeLaya(model={self.model!r}, revision={self.revision!r}, flavor={self.flavor!r})"

    @property
    def served_by(self) -> dict[str, Any]:
        """The target spec's identity of the fake's weights."""
        return {"checkpoint": self.model, "revision": self.revision, "device": "cpu",
                "weights_dtype": "float32", "compiled": False}

    # ----------------------------------------------------------------- the answer function

    def option_scores(self, state: Any, question: Mapping[str, Any]) -> dict[str, float]:
        """Each option's score in [0, 1), in request order, for a valid choice or score question.

        The score of an option is ``blake2b-64(canonical JSON of [state, instructions, key,
        description]) / 2**64``; a list option and a score level's key have ``null`` / the level
        text as description. Nothing else enters it. Override or monkeypatch this to test the tie
        rule.
        """
        instructions = question.get("instructions")
        return {key: _unit([state, instructions, key, text]) for key, text in _options(question)}

    def noul_probability(self, state: Any, question: Mapping[str, Any]) -> float:
        """P(true) of a noul question, in [0.0201, 0.9799]: a hash of state, instructions and the true/false texts."""
        u = _unit([state, question.get("instructions"), _noul_texts(question)])
        return round(_NOUL_LOW + _NOUL_SPAN * u, 4)

    def answer_question(self, state: Any, question: Mapping[str, Any]) -> dict[str, Any]:
        """The answer to one valid question, in the fake's flavor."""
        laya_serve = self.flavor == LAYA_SERVE
        qtype = question.get("type")
        if qtype == "noul":
            p = self.noul_probability(state, question)
            confidence = round(max(p, 1.0 - p), 4)
            answer: dict[str, Any] = {"type": "noul", "noul": p, "confidence": confidence}
            if laya_serve:
                answer["answer_confidence"] = confidence
                answer["action"] = {"act_probability": _act_probability(confidence)}
            return answer
        scores = self.option_scores(state, question)
        order, exact, sent = _distribution(scores)
        probabilities = {key: sent[key] for key in scores}  # request order, as laya answers
        if qtype == "choice":
            answer = {"type": "choice", "choice": order[0], "probabilities": probabilities}
            criteria = question.get("criteria")
            if laya_serve and isinstance(criteria, list):
                # laya-serve answers a number or boolean list label with the label itself (8,
                # true) while keying probabilities "8", "true"; the target sends the key.
                labels: dict[str, Any] = {}
                for label in criteria:
                    labels.setdefault(_json_key(label), label)
                answer["choice"] = labels[order[0]]
        else:
            expected = round(math.fsum(int(key) * p for key, p in probabilities.items()), 4)
            legend = {str(i): level if isinstance(level, str) else _canonical(level)
                      for i, level in enumerate(question.get("criteria") or [])}
            answer = {"type": "score", "score": expected, "legend": legend, "probabilities": probabilities}
        answer["confidence"] = _margin(order, exact)
        if laya_serve:
            answer["answer_confidence"] = sent[order[0]]
            answer["action"] = {"act_probability": _act_probability(exact[order[0]])}
            answer["x_jev_confidence"] = _certainty(order, exact)
        return answer

    def question_tokens(self, question: Mapping[str, Any]) -> int:
        """Tokens one question adds to `input_tokens`: its texts plus TOKENS_PER_QUESTION."""
        tokens = TOKENS_PER_QUESTION + count_tokens(question.get("instructions"))
        qtype = question.get("type")
        if qtype == "noul":
            return tokens + sum(count_tokens(t) for t in _noul_texts(question).values())
        if qtype == "score":
            return tokens + sum(count_tokens(level) for _, level in _options(question))
        return tokens + sum(count_tokens(key) + count_tokens(text) for key, text in _options(question))

    def usage(self, state: Any, questions: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        """`usage` for one state: tokens of the state and of every question; nothing is ever cut."""
        state_tokens = count_tokens(state)
        input_tokens = state_tokens + sum(self.question_tokens(q) for q in questions.values())
        if self.flavor == LAYA_SERVE:
            return {"input_tokens": input_tokens, "output_tokens": 0, "state_tokens": state_tokens,
                    "state_tokens_dropped": 0, "truncated": False, "truncated_questions": []}
        return {"input_tokens": input_tokens, "output_tokens": 0, "state_tokens": state_tokens, "truncated": False}

    def decide(self, state: Any, questions: Mapping[str, Mapping[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(answers in question order, usage) for already valid questions."""
        answers = {qid: self.answer_question(state, q) for qid, q in questions.items()}
        return answers, self.usage(state, questions)

    # ----------------------------------------------------------------- requests

    def answer(self, body: Any, *, request_id: str | None = None) -> Exchange:
        """(status, headers, JSON body) for a parsed ``POST /v1/systemone`` body.

        Validates the body as the flavor's server does. In the target flavor `request_id` is
        echoed in ``X-Request-Id`` and in problems (a fresh one is made when it is absent or
        invalid); the laya-serve flavor sends no request id.
        """
        return self._flavour.request(self, body, batch=False, request_id=request_id)

    def answer_batch(self, body: Any, *, request_id: str | None = None) -> Exchange:
        """(status, headers, JSON body) for a parsed ``POST /v1/systemone/batch`` body."""
        return self._flavour.request(self, body, batch=True, request_id=request_id)

    def health(self, *, authorized: bool = True) -> dict[str, Any]:
        """The flavor's /health document; liveness only (``{"status": "ok"}``) when not `authorized`."""
        return self._flavour.health(self, authorized=authorized)

    def refusal(
        self,
        status: int,
        *,
        detail: str | None = None,
        retry_after: int | None = None,
        request_id: str | None = None,
        questions: Any = None,
    ) -> Exchange:
        """A spec-correct error response with `status`, as the flavor's server words it.

        Target: problem+json with the code documented for `status` (422: ``invalid_question``
        naming the first of `questions`, or ``unknown_model`` when there are none). laya-serve:
        ``{"detail": ...}`` with laya-serve's text, and omni-jev's text/plain for 502 and 504.
        503 always carries Retry-After (1 s unless `retry_after` says otherwise); other statuses
        carry it when `retry_after` is given. A status with no documented meaning gets a
        generic body.
        """
        if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599:
            raise ValueError(f"status must be an error status 400..599, got {status!r}")
        if retry_after is not None and (isinstance(retry_after, bool) or not isinstance(retry_after, int) or retry_after < 0):
            raise ValueError(f"retry_after must be whole seconds >= 0, got {retry_after!r}")
        if retry_after is None and status == 503:
            retry_after = 1
        extra = {"Retry-After": str(retry_after)} if retry_after is not None else {}
        first = next(iter(questions), None) if isinstance(questions, Mapping) else None
        return self._flavour.refusal(self, status, detail=detail, extra=extra, request_id=request_id, first=first)

"""Ticket routing for Acme support, decided by a served Laya.

`SupportTriage` is what Acme's code uses: `route(ticket)` asks Laya three questions in one
forward pass and turns the answer into a `Routing`. It is also a DecisionModel (it passes
`decide` through to the model it wraps), so Acme's tests hold it to pytest-laya's
`DecisionModelContract`: whatever Acme adds on top, the decisions it hands on are Laya's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["QUESTIONS", "Routing", "SupportTriage"]

QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team should handle this ticket?",
             "criteria": {"billing": "Payments, refunds, invoices", "shipping": "Deliveries and returns",
                          "tech": "Bugs, log-in problems, the app"}},
    "urgency": {"type": "score", "instructions": "How urgent is this ticket?",
                "criteria": ["can wait", "today", "within the hour"]},
    "refund": {"type": "noul", "instructions": "Does the customer ask for their money back?"},
}


@dataclass(frozen=True)
class Routing:
    team: str
    urgent: bool
    refund_requested: bool
    confidence: float


class SupportTriage:
    """Routes tickets; wraps any DecisionModel (a `ServedLayaModel` in production)."""

    name = "acme-support-triage"

    def __init__(self, model: Any, *, urgent_from: float = 1.5) -> None:
        self._model = model
        self._urgent_from = urgent_from

    # -- the DecisionModel interface, passed through ---------------------------------------

    @property
    def question_types(self) -> tuple[str, ...]:
        return tuple(self._model.question_types)

    @property
    def deterministic(self) -> bool:
        return bool(self._model.deterministic)

    @property
    def model(self) -> str | None:
        return self._model.model

    def decide(self, state: Any, questions: Any) -> Any:
        return self._model.decide(state, questions)

    async def adecide(self, state: Any, questions: Any) -> Any:
        return await self._model.adecide(state, questions)

    def close(self) -> None:
        self._model.close()

    # -- what Acme adds ------------------------------------------------------------------

    def route(self, ticket: str) -> Routing:
        return routing_from(self.decide(ticket, QUESTIONS), urgent_from=self._urgent_from)


def routing_from(decision: Any, *, urgent_from: float = 1.5) -> Routing:
    """A `Routing` from a decision on `QUESTIONS` (urgent: expected urgency level >= `urgent_from`)."""
    team, urgency, refund = decision["team"], decision["urgency"], decision["refund"]
    return Routing(team=team.key, urgent=urgency.expected >= urgent_from, refund_requested=refund.p >= 0.5,
                   # A Jev-strict server sends no confidence on a noul answer (None).
                   confidence=min(c for c in (team.confidence, refund.confidence) if c is not None))

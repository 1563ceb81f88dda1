"""From a checked request body to the engine's `DecisionRequest`s.

Everything the target spec refuses is checked in `pytest_laya.wire.requests`, which the fake
calls too, so both refuse the same bodies in the same words; this module only hands the result
to the engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_laya.wire.requests import read_decision_request

from .engine import DecisionRequest
from .settings import Limits

__all__ = ["decision_requests"]


def decision_requests(body: Mapping[str, Any], limits: Limits, served: list[str], *,
                      batch: bool) -> tuple[str | None, list[DecisionRequest]]:
    """(the model the body named, the requests it asks for: one, or one per state of a batch)."""
    checked = read_decision_request(body, limits.to_json(), served=served, batch=batch)
    controls = checked.controls
    return checked.model, [
        DecisionRequest(state=state, questions=checked.questions, max_len=controls.max_len,
                        head_max_len=controls.head_max_len, min_confidence=controls.min_confidence)
        for state in checked.states]

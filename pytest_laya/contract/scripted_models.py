"""Test doubles: decision models that answer every decision with scripted raw answers.

The answer-validation checks of `DecisionModelContract` need a model whose raw answers (Laya's
wire form) they choose; give the contract one of these factories as its
`scripted_decision_model` fixture. Each runs the real reading path of its model kind: the
served client's (over an `httpx.MockTransport`, no socket) or `LayaModel`'s (no laya, no torch).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

__all__ = ["scripted_laya_model", "scripted_served_model"]


def _scripted_body(answers: Mapping[str, Any]) -> dict[str, Any]:
    return {"answers": copy.deepcopy(dict(answers)), "usage": {"input_tokens": 1, "output_tokens": 0}}


def scripted_served_model(answers: Mapping[str, Any], *, name: str = "served-laya (scripted)") -> Any:
    """A `ServedLayaModel` whose server answers every decision with exactly `answers`.

    The "server" is an `httpx.MockTransport`, so the bytes go through the served client's whole
    reading path (media type, JSON, the answer rules) with no socket. Give it to
    `DecisionModelContract` as ``scripted_decision_model = lambda self: scripted_served_model``
    inside a fixture.
    """
    import httpx

    from pytest_laya.models import ServedLayaModel

    body = {**_scripted_body(answers), "served_by": {"checkpoint": "scripted", "revision": "scripted"}}

    def respond(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=body)

    return ServedLayaModel("http://scripted.invalid", name=name, transport=httpx.MockTransport(respond))


class _ScriptedLayaAgent:
    """Stands in for a laya Agent: ``predict`` returns the scripted answers, whatever was asked."""

    revision = "scripted"
    device = "cpu"

    def __init__(self, answers: Mapping[str, Any]) -> None:
        self._answers = copy.deepcopy(dict(answers))

    def predict(self, state: Any, questions: Mapping[str, Any]) -> dict[str, Any]:
        return {"model": "laya-rl-agent", **_scripted_body(self._answers)}


def scripted_laya_model(answers: Mapping[str, Any], *, name: str = "laya-in-process (scripted)") -> Any:
    """A `LayaModel` whose agent answers every decision with exactly `answers` (no laya, no torch)."""
    from pytest_laya.models import LayaModel

    return LayaModel("scripted", agent=_ScriptedLayaAgent(answers), name=name)

"""The DecisionModel interface: what any implementation of Laya's decisions looks like to a test.

In-process Laya, a served Laya, or a downstream adapter all answer `decide(state, questions)`
with the same `Decision`, so one contract suite (`pytest_laya.contract`, coming with the contract
issue) can hold them all to the same rules. `ServedLayaModel` is the served client behind it.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from .client import AsyncServedLayaClient, ServedLayaClient
from .decision import Decision
from .questions import QUESTION_TYPES, Questions

__all__ = ["DecisionModel", "ServedLayaModel"]


@runtime_checkable
class DecisionModel(Protocol):
    """One forward pass answers typed questions about a state."""

    #: A name that tells implementations apart in records and reports.
    name: str
    #: Question types it answers (a subset of choice, score, noul).
    question_types: tuple[str, ...]
    #: Whether the same request always gets the same answer.
    deterministic: bool

    @property
    def model(self) -> str | None:
        """The identity of the weights (`checkpoint@revision`), once known."""

    def decide(self, state: Any, questions: Questions) -> Decision: ...

    async def adecide(self, state: Any, questions: Questions) -> Decision: ...

    def close(self) -> None:
        """Release resources; calling it twice is safe."""


class ServedLayaModel:
    """A served Laya as a `DecisionModel`, over `ServedLayaClient` (any mode of the plugin)."""

    question_types = QUESTION_TYPES
    deterministic = True

    def __init__(self, url: str | None = None, *, name: str = "served-laya", **client_options: Any) -> None:
        self.name = name
        self._options = client_options
        self._client = ServedLayaClient(url, **client_options)
        self._last_model: str | None = None
        self._closed = False

    @property
    def model(self) -> str | None:
        return self._last_model

    @property
    def client(self) -> ServedLayaClient:
        return self._client

    def decide(self, state: Any, questions: Questions) -> Decision:
        decision = self._client.decide(state, questions)
        self._last_model = decision.model
        return decision

    async def adecide(self, state: Any, questions: Questions) -> Decision:
        # One async client per call: an httpx.AsyncClient belongs to the event loop it was used
        # on, and callers (pytest-asyncio's per-test loops) do not share one.
        async with AsyncServedLayaClient(self._client.url, **self._options) as client:
            decision = await client.decide(state, questions)
        self._last_model = decision.model
        return decision

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._client.close()

    def __repr__(self) -> str:
        return f"ServedLayaModel({self.name!r}, {self._client!r})"

"""Watching the forward passes a ``LayaEngine`` runs, whichever forward runs them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


def watch_passes(engine: Any, model: str, monkeypatch: pytest.MonkeyPatch,
                 seen: Callable[[dict[str, Any]], None]) -> None:
    """Call ``seen(batch)`` with each collated pass ``engine`` runs on ``model`` from now on:
    through its lean forward (``PackedForward``) where it serves with one, else laya's
    ``Agent._forward``."""
    lean = engine._forwards.get(model)
    run = lean if lean is not None else engine._agents[model]._forward

    def watched(batch: dict[str, Any]) -> Any:
        seen(batch)
        return run(batch)

    if lean is not None:
        monkeypatch.setitem(engine._forwards, model, watched)
    else:
        monkeypatch.setattr(engine._agents[model], "_forward", watched)

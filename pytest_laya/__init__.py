"""pytest-laya: test kit for served Laya.

Layers, each usable without the ones above it: wire types (`questions`, `decision`, `headers`,
`problems`, `health`), spec validation (`specs`), the served client (`client`), decision models
(`models`) and their contract suite (`contract`), and the pytest plugin (`plugin`). Public names
are imported lazily so that `import pytest_laya` (and so pytest start-up with the plugin
installed) costs next to nothing and never loads torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0.dev0"

_EXPORTS = {
    "LayaError": "errors",
    "LayaConfigError": "errors",
    "LayaCallError": "errors",
    "ChoiceQuestion": "questions",
    "ScoreQuestion": "questions",
    "NoulQuestion": "questions",
    "Decision": "decision",
    "Choice": "decision",
    "Score": "decision",
    "Noul": "decision",
    "Usage": "decision",
    "Provenance": "decision",
    "ServedIdentity": "decision",
    "Health": "health",
    "Spec": "specs",
    "Violation": "specs",
    "SpecError": "specs",
    "ServedLayaClient": "client",
    "AsyncServedLayaClient": "client",
    "Exchange": "client",
    "DecisionModel": "models",
    "ServedLayaModel": "models",
    "LayaModel": "models",
    "DecisionModelContract": "contract",
}

__all__ = sorted(_EXPORTS) + ["__version__"]

if TYPE_CHECKING:
    from .client import AsyncServedLayaClient, Exchange, ServedLayaClient
    from .contract import DecisionModelContract
    from .decision import Choice, Decision, Noul, Provenance, Score, ServedIdentity, Usage
    from .errors import LayaCallError, LayaConfigError, LayaError
    from .health import Health
    from .models import DecisionModel, LayaModel, ServedLayaModel
    from .questions import ChoiceQuestion, NoulQuestion, ScoreQuestion
    from .specs import Spec, SpecError, Violation


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_laya' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__

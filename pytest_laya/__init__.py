"""pytest-laya: a test kit for served Laya.

Layers, each usable without the ones above it (docs/architecture.md):

1. `pytest_laya.wire`: the protocol (questions, decisions, identity, health, headers,
   problems, request validation), no I/O;
2. `pytest_laya.specs`: the two OpenAPI documents, validation, conformance tallies;
3. `pytest_laya.client`: the served client, sync and async, one policy;
4. `pytest_laya.fake`, `pytest_laya.faults`, `pytest_laya.cassettes`, `pytest_laya.servers`:
   servers to test against, and recorded traffic;
5. `pytest_laya.models`, `pytest_laya.contract`, `pytest_laya.suites`: decision models and
   the contract suites they run;
6. `pytest_laya.plugin`: the pytest plugin.

Public names are imported lazily so that `import pytest_laya` (and so pytest start-up with the
plugin installed) costs next to nothing and never loads torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0.dev0"

_EXPORTS = {
    "LayaError": "pytest_laya.wire.errors",
    "LayaConfigError": "pytest_laya.wire.errors",
    "LayaCallError": "pytest_laya.wire.errors",
    "ChoiceQuestion": "pytest_laya.wire.questions",
    "ScoreQuestion": "pytest_laya.wire.questions",
    "NoulQuestion": "pytest_laya.wire.questions",
    "Decision": "pytest_laya.wire.decision",
    "Choice": "pytest_laya.wire.decision",
    "Score": "pytest_laya.wire.decision",
    "Noul": "pytest_laya.wire.decision",
    "Usage": "pytest_laya.wire.decision",
    "Provenance": "pytest_laya.wire.decision",
    "ServedIdentity": "pytest_laya.wire.identity",
    "Health": "pytest_laya.wire.health",
    "Exchange": "pytest_laya.wire.exchange",
    "Spec": "pytest_laya.specs",
    "Violation": "pytest_laya.specs",
    "SpecError": "pytest_laya.specs",
    "SpecViolationError": "pytest_laya.specs",
    "ServedLayaClient": "pytest_laya.client",
    "AsyncServedLayaClient": "pytest_laya.client",
    "FakeLaya": "pytest_laya.fake",
    "FakeLayaServer": "pytest_laya.fake",
    "ScriptedServer": "pytest_laya.faults",
    "ServerHandle": "pytest_laya.servers",
    "LayaServeProcess": "pytest_laya.servers",
    "use_cassette": "pytest_laya.cassettes",
    "CassetteError": "pytest_laya.cassettes.errors",
    "CassetteMiss": "pytest_laya.cassettes.errors",
    "CassetteMissing": "pytest_laya.cassettes.errors",
    "NetworkBlocked": "pytest_laya.intercept.switchboard",
    "answer": "pytest_laya.fake.mock_answers",
    "httpx_callback": "pytest_laya.fake.mock_answers",
    "respx_side_effect": "pytest_laya.fake.mock_answers",
    "DecisionModel": "pytest_laya.models",
    "ServedLayaModel": "pytest_laya.models",
    "LayaModel": "pytest_laya.models",
    "DecisionModelContract": "pytest_laya.contract",
}

__all__ = sorted(_EXPORTS) + ["__version__"]

if TYPE_CHECKING:  # pragma: no cover
    from pytest_laya.cassettes import use_cassette
    from pytest_laya.cassettes.errors import CassetteError, CassetteMiss, CassetteMissing
    from pytest_laya.client import AsyncServedLayaClient, ServedLayaClient
    from pytest_laya.contract import DecisionModelContract
    from pytest_laya.fake import FakeLaya, FakeLayaServer
    from pytest_laya.fake.mock_answers import answer, httpx_callback, respx_side_effect
    from pytest_laya.faults import ScriptedServer
    from pytest_laya.intercept.switchboard import NetworkBlocked
    from pytest_laya.models import DecisionModel, LayaModel, ServedLayaModel
    from pytest_laya.servers import LayaServeProcess, ServerHandle
    from pytest_laya.specs import Spec, SpecError, SpecViolationError, Violation
    from pytest_laya.wire.decision import Choice, Decision, Noul, Provenance, Score, Usage
    from pytest_laya.wire.errors import LayaCallError, LayaConfigError, LayaError
    from pytest_laya.wire.exchange import Exchange
    from pytest_laya.wire.health import Health
    from pytest_laya.wire.identity import ServedIdentity
    from pytest_laya.wire.questions import ChoiceQuestion, NoulQuestion, ScoreQuestion


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_laya' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__

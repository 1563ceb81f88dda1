"""The DecisionModel contract: the checks every decision model must pass, as a class to subclass.

A downstream project proves that its adapter behaves like Laya by subclassing the contract and
giving it a `decision_model` fixture::

    from pytest_laya.contract import DecisionModelContract

    class TestMyAdapter(DecisionModelContract):
        @pytest.fixture
        def decision_model(self):
            model = MyAdapter(...)
            yield model
            model.close()

Three modules, one job each:

- `decision_model`: `DecisionModelContract` and the requests it sends;
- `answer_checks`: `decision_problems`, every way one decision breaks the contract (use it on any
  decision, e.g. ones replayed from cassettes);
- `scripted_models`: test doubles that answer with scripted raw answers, for the contract's
  answer-validation checks (`scripted_served_model`, `scripted_laya_model`).
"""

from __future__ import annotations

from pytest_laya.contract.answer_checks import CHECKS, decision_problems
from pytest_laya.contract.decision_model import (
    BEHAVIOUR_PROPERTIES,
    CONTRACT_REQUESTS,
    ORDER_QUESTIONS,
    DecisionModelContract,
    ScriptedModelFactory,
    run_coroutine,
)
from pytest_laya.contract.scripted_models import scripted_laya_model, scripted_served_model

__all__ = [
    "BEHAVIOUR_PROPERTIES",
    "CHECKS",
    "CONTRACT_REQUESTS",
    "ORDER_QUESTIONS",
    "DecisionModelContract",
    "ScriptedModelFactory",
    "decision_problems",
    "run_coroutine",
    "scripted_laya_model",
    "scripted_served_model",
]

"""Every decision in the shipped cassettes (`cassettes/`) keeps the DecisionModel contract.

The cassettes were recorded from real servers; replaying each recorded decision through
`ServedLayaModel` and `decision_problems` shows that what a user replays is an answer a real
Laya gives: every offered option covered, distributions that sum to 1, a most probable choice,
consistent score levels, identities set. No server runs here and nothing loads torch.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pytest_laya.cassettes import use_cassette
from pytest_laya.contract import decision_problems
from pytest_laya.models import ServedLayaModel
from pytest_laya.servers import REPLAY_URL
from tests.helpers.recorded import YAML_LOADER

SHIPPED = Path(__file__).resolve().parents[2] / "cassettes"


def shipped_decisions() -> list[tuple[Path, int, dict, bool]]:
    """(cassette, interaction index, request body, whether the answer names its weights) of every
    recorded 200 decision a client accepts."""
    found = []
    for path in sorted(SHIPPED.rglob("*.yaml")):
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=YAML_LOADER) or {}
        reads_health = any(i["request"]["uri"].endswith("/health") for i in data.get("interactions") or ())
        for index, interaction in enumerate(data.get("interactions") or ()):
            request, response = interaction["request"], interaction["response"]
            if (request["method"], request["uri"].rsplit("/", 2)[-2:], response["status"]["code"]) != (
                    "POST", ["v1", "systemone"], 200):
                continue
            media = (request.get("headers") or {}).get("content-type", ["application/json"])[0]
            if media.split(";")[0].strip() != "application/json":
                continue  # a raw request no client sends (the server contract's wrong media type)
            body = json.loads(request["body"])
            answer = json.loads(response["body"]["string"])
            routed = (answer.get("routing") or {}).get("model")
            if body.get("model") is not None and routed not in (None, body["model"]):
                continue  # a server that ignored the model asked for: the client refuses it (model_ignored)
            if "served_by" not in answer and not reads_health:
                continue  # a raw request: a client would have read /health too, and none is recorded
            found.append((path, index, body, "served_by" in answer or "routing" in answer))
    return found


DECISIONS = shipped_decisions()


def test_the_shipped_cassettes_hold_recorded_decisions():
    assert len(DECISIONS) >= 5, f"expected recorded decisions under {SHIPPED}"


@pytest.mark.parametrize(("cassette", "index", "body", "named"), DECISIONS,
                         ids=[f"{c.relative_to(SHIPPED).with_suffix('').as_posix()}#{i}" for c, i, _, _ in DECISIONS])
def test_every_shipped_decision_keeps_the_contract(cassette, index, body, named):
    with use_cassette(cassette, record=False, strict=False):
        with ServedLayaModel(REPLAY_URL, model=body.get("model"), name=f"replayed {cassette.stem}",
                             allow_truncation=True) as model:
            decision = model.decide(body["state"], body["questions"])
    assert decision_problems(body["questions"], decision) == []
    if named:
        assert decision.model and "@" in decision.model
    else:  # laya-serve's strict mode names no weights (no routing, no served_by): unknown, not guessed
        assert decision.model is None


def test_a_noul_without_confidence_keeps_the_contract_and_a_choice_without_one_does_not():
    from pytest_laya.wire.decision import Choice, Decision, Noul, Provenance, Usage

    questions = {"refund": {"type": "noul", "instructions": "Refund?"},
                 "team": {"type": "choice", "instructions": "Team?", "criteria": ["billing", "technical"]}}

    def decision(choice_confidence):
        team = Choice(key="billing", probabilities={"billing": 0.6, "technical": 0.4}, confidence=choice_confidence)
        return Decision(answers={"refund": Noul(p=0.7), "team": team}, usage=Usage(input_tokens=1), model=None,
                        provenance=Provenance(url="x", request_id=None, served_by=None))

    assert decision_problems(questions, decision(0.2)) == []
    assert decision_problems(questions, decision(None)) == ["answer 'team': confidence must be a number, got None"]

"""`pytest_laya.strategies`, held to the one validation and to the specs.

Valid requests must pass `wire.requests` (the target's rules), the client's question checks and
both flavours of the fake; each invalid kind must get exactly the problem it declares, from
`wire.requests` and from the fake over HTTP; drawn answers must conform to their flavour's spec
and keep the answer rules.
"""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_laya import LayaConfigError
from pytest_laya import strategies as laya_st
from pytest_laya.fake import FLAVORS, LAYA_SERVE, LIMITS, TARGET, FakeLaya
from pytest_laya.specs import Spec
from pytest_laya.wire.decision import parse_answers
from pytest_laya.wire.problems import PROBLEM_STATUS, Problem
from pytest_laya.wire.questions import normalize_questions
from pytest_laya.wire.requests import check_media_type, parse_json_object, read_decision_request
from tests.helpers.properties import example_count

SERVED = ["fake-laya"]
FAST = settings(max_examples=example_count(25), deadline=None, suppress_health_check=list(HealthCheck))
CLIENTS = {flavor: httpx.Client(transport=FakeLaya(flavor=flavor).transport(), base_url="http://laya.invalid")
           for flavor in FLAVORS}


def target_problem(body: bytes, content_type: str) -> Problem | None:
    """What the target refuses in a request, in the order its servers check."""
    try:
        check_media_type(content_type)
        if len(body) > LIMITS["max_body_bytes"]:
            raise Problem("too_large")
        read_decision_request(parse_json_object(body), LIMITS, served=SERVED, batch=False)
    except Problem as problem:
        return problem
    return None


@FAST
@given(body=laya_st.requests(models=SERVED))
def test_valid_requests_pass_the_target_rules_the_client_and_both_fakes(body):
    read_decision_request(body, LIMITS, served=SERVED, batch=False)
    normalize_questions(body["questions"])
    for flavor, client in CLIENTS.items():
        response = client.post("/v1/systemone", json=body)
        assert response.status_code == 200, (flavor, response.text)
        parse_answers(response.json()["answers"], normalize_questions(body["questions"]))


@settings(max_examples=example_count(15), deadline=None, suppress_health_check=list(HealthCheck))
@given(body=laya_st.requests(batch=True))
def test_valid_batches_pass_the_target_rules(body):
    checked = read_decision_request(body, LIMITS, served=SERVED, batch=True)
    assert 1 <= len(checked.states) <= LIMITS["max_batch_states"]
    assert CLIENTS[TARGET].post("/v1/systemone/batch", json=body).status_code == 200


@pytest.mark.parametrize("kind", sorted(laya_st.INVALID_KINDS))
@settings(max_examples=example_count(4), deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_each_invalid_kind_gets_the_problem_it_declares(kind, data):
    invalid = data.draw(laya_st.invalid_requests([kind]))
    assert invalid.kind == kind and invalid.code == laya_st.INVALID_KINDS[kind]
    assert invalid.status == PROBLEM_STATUS[invalid.code]
    problem = target_problem(invalid.body, invalid.content_type)
    assert problem is not None and problem.code == invalid.code, (kind, problem and problem.detail)
    response = CLIENTS[TARGET].post("/v1/systemone", content=invalid.body, headers={"Content-Type": invalid.content_type})
    assert (response.status_code, response.json()["code"]) == (invalid.status, invalid.code)
    if invalid.question is not None:
        assert response.json()["errors"][0]["question"] == invalid.question


def test_unknown_invalid_kinds_are_refused():
    with pytest.raises(ValueError, match="unknown invalid request kind"):
        laya_st.invalid_requests(["typo"])


HEADERS = {TARGET: {"content-type": "application/json", "x-request-id": "req-1",
                    "server-timing": "queue;dur=0.00, infer;dur=0.10"},
           LAYA_SERVE: {"content-type": "application/json"}}


@pytest.mark.parametrize("flavor", FLAVORS)
@FAST
@given(data=st.data())
def test_drawn_answers_conform_to_their_flavours_spec_and_the_answer_rules(flavor, data):
    questions = data.draw(laya_st.question_sets(max_questions=6))
    body = data.draw(laya_st.responses(questions, flavor=flavor))
    spec = Spec.target() if flavor == TARGET else Spec.current()
    found = spec.violations("POST", "/v1/systemone", 200, HEADERS[flavor], json.dumps(body).encode())
    assert found == [], "\n".join(map(str, found))
    parsed = parse_answers(body["answers"], normalize_questions(questions))
    assert list(parsed) == list(questions)


def test_drawn_answers_reach_the_edges():
    questions = {"refund": {"type": "noul", "instructions": "Refund?"},
                 "team": {"type": "choice", "instructions": "Team?", "criteria": ["billing", "tech"]}}
    seen_p: set[float] = set()
    certain = []

    @settings(max_examples=example_count(150), deadline=None, database=None)
    @given(body=laya_st.responses(questions))
    def collect(body):
        seen_p.add(body["answers"]["refund"]["noul"])
        certain.append(1.0 in body["answers"]["team"]["probabilities"].values())

    collect()
    assert {0.0, 1.0} <= seen_p and any(certain)


def test_answers_for_questions_no_server_could_answer_are_refused():
    with pytest.raises(LayaConfigError, match="question 'q': unsupported type 'ranking'"):
        laya_st.responses({"q": {"type": "ranking", "instructions": "?"}})


def test_without_hypothesis_the_import_says_what_to_install():
    code = "import sys; sys.modules['hypothesis'] = None; import pytest_laya.strategies"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode != 0
    assert "pytest_laya.strategies needs hypothesis: pip install 'pytest-laya[hypothesis]'" in result.stderr

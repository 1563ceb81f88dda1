"""Pinned answers on the fake, over its real loopback port: forced, full, spec-valid, and loud when wrong.

Every 200 is validated against its flavor's spec and read by the served client's answer rules,
so a pinned answer is one a real Laya could have sent.
"""

from __future__ import annotations

import json
import math
import re

import httpx
import pytest

from pytest_laya import LayaCallError, LayaConfigError, ServedLayaClient
from pytest_laya.fake import FLAVORS, LAYA_SERVE, PINNED_PROBABILITY, TARGET, FakeLaya, FakeLayaServer, PinError
from pytest_laya.faults import ReceivedRequest
from pytest_laya.specs import Spec
from pytest_laya.wire.decision import parse_answers
from pytest_laya.wire.questions import normalize_questions

SPECS = {TARGET: Spec.target, LAYA_SERVE: Spec.current}
STATE = "I was charged twice for my order. Please refund the duplicate."
TEAM = {"type": "choice", "instructions": "Which team should handle this?",
        "criteria": {"billing": "Charges and refunds", "technical": "Software problems", "shipping": "Deliveries"}}
URGENCY = {"type": "score", "instructions": "How urgent is it?", "criteria": ["Not urgent", "Soon", "Now"]}
REFUND = {"type": "noul", "instructions": "Does the customer ask for a refund?"}
QUESTIONS = {"team": TEAM, "urgency": URGENCY, "refund": REFUND}


@pytest.fixture(params=FLAVORS)
def server(request):
    with FakeLayaServer(flavor=request.param) as fake:
        yield fake
    assert not fake.errors


@pytest.fixture(scope="module")
def http():
    with httpx.Client(timeout=5) as client:
        yield client


def ask(http, server, questions=QUESTIONS, state=STATE, path="/v1/systemone", **extra):
    body = {"questions": questions, **({"states": state} if path.endswith("batch") else {"state": state}), **extra}
    response = http.post(server.url + path, json=body)
    found = SPECS[server.flavor]().violations("POST", path, response.status_code, response.headers, response.content)
    assert found == [], "\n".join(map(str, found))
    return response


def answers(http, server, questions=QUESTIONS, state=STATE):
    response = ask(http, server, questions, state)
    assert response.status_code == 200, response.text
    body = response.json()["answers"]
    parse_answers(body, normalize_questions(questions))  # the client's answer rules hold
    return body


# --------------------------------------------------------------------------- forcing answers


def test_each_type_is_forced_and_the_rest_keep_their_stable_answers(http, server):
    default = answers(http, server)
    pin = server.decide({"team": "shipping", "urgency": 2})
    got = answers(http, server)
    assert got["team"]["choice"] == "shipping" and got["team"]["probabilities"]["shipping"] == PINNED_PROBABILITY
    assert math.isclose(sum(got["team"]["probabilities"].values()), 1.0)
    assert got["team"]["probabilities"]["billing"] == got["team"]["probabilities"]["technical"] == 0.05
    assert got["team"]["confidence"] == 0.85  # top minus second
    assert max(got["urgency"]["probabilities"], key=got["urgency"]["probabilities"].get) == "2"
    assert got["urgency"]["score"] == 1.85 and got["urgency"]["legend"] == {"0": "Not urgent", "1": "Soon", "2": "Now"}
    assert got["refund"] == default["refund"]  # not pinned: the stable answer
    pin.remove()
    server.decide({"refund": 0.91})
    got = answers(http, server)
    assert got["refund"]["noul"] == 0.91 and got["refund"]["confidence"] == 0.91
    assert got["team"] == default["team"]
    if server.flavor == LAYA_SERVE:
        assert got["refund"]["answer_confidence"] == 0.91 and got["refund"]["action"] == {"act_probability": 0.955}


def test_a_distribution_is_pinned_as_given_and_the_rest_share_what_is_left(http, server):
    server.decide({"team": {"technical": 0.6, "billing": 0.3}, "urgency": {0: 0.2, 1: 0.2, 2: 0.6}})
    got = answers(http, server)
    assert got["team"]["probabilities"] == {"billing": 0.3, "technical": 0.6, "shipping": 0.1}
    assert got["team"]["choice"] == "technical" and got["team"]["confidence"] == 0.3
    assert got["urgency"]["probabilities"] == {"0": 0.2, "1": 0.2, "2": 0.6} and got["urgency"]["score"] == 1.4


def test_ties_in_a_pinned_distribution_go_to_the_key_that_sorts_first(http, server):
    server.decide({"team": {"shipping": 0.5, "billing": 0.5}})
    got = answers(http, server)
    assert got["team"]["choice"] == "billing" and got["team"]["confidence"] == 0.0


def test_certain_answers_and_single_options(http, server):
    only = {"type": "choice", "instructions": "Which?", "criteria": ["only"]}
    server.decide({"team": {"billing": 1.0}, "refund": 0.0, "only": "only"})
    got = answers(http, server, {**QUESTIONS, "only": only})
    assert got["team"]["probabilities"] == {"billing": 1.0, "technical": 0.0, "shipping": 0.0}
    assert got["refund"]["noul"] == 0.0 and got["refund"]["confidence"] == 1.0
    assert got["only"]["probabilities"] == {"only": 1.0} and got["only"]["confidence"] == 1.0


def test_number_labels_are_pinned_by_label_and_answered_as_each_flavor_does(http, server):
    server.decide({"n": 8})
    got = answers(http, server, {"n": {"type": "choice", "instructions": "How many?", "criteria": [7, 8]}})
    assert got["n"]["choice"] == (8 if server.flavor == LAYA_SERVE else "8")


def test_a_client_sees_the_pinned_decision(server):
    server.decide({"team": "technical", "refund": 0.95})
    with ServedLayaClient(server.url) as client:
        decision = client.decide(STATE, QUESTIONS)
    assert decision["team"].key == "technical" and decision["refund"].p == 0.95


# --------------------------------------------------------------------------- matchers


def test_state_matchers_substring_regex_and_callable(http, server):
    server.decide({"team": "billing"}, state="charged")
    server.decide({"team": "shipping"}, state=re.compile(r"parcel|package"))
    server.decide({"team": "technical"}, state=lambda s: isinstance(s, dict) and s.get("app") == "crash")
    assert answers(http, server, state="I was charged twice")["team"]["choice"] == "billing"
    assert answers(http, server, state="Where is my package?")["team"]["choice"] == "shipping"
    assert answers(http, server, state={"app": "crash"})["team"]["choice"] == "technical"
    stable = FakeLaya(flavor=server.flavor).answer({"state": "Hello", "questions": QUESTIONS})[2]["answers"]
    assert answers(http, server, state="Hello")["team"] == stable["team"]


def test_question_set_matchers(http, server):
    server.decide({"team": "shipping"}, questions={"team"})
    server.decide({"team": "technical"}, questions=lambda qs: "refund" in qs)
    assert answers(http, server, {"team": TEAM})["team"]["choice"] == "shipping"
    assert answers(http, server, {"team": TEAM, "refund": REFUND})["team"]["choice"] == "technical"
    assert len(server.pins) == 2 and all(pin.used == 1 for pin in server.pins)


def test_first_match_wins_per_question_and_pins_merge(http, server):
    server.decide({"team": "billing"})
    server.decide({"team": "shipping", "refund": 0.2})  # team is taken; refund still applies
    got = answers(http, server)
    assert got["team"]["choice"] == "billing" and got["refund"]["noul"] == 0.2


def test_a_pin_applies_the_number_of_times_it_was_given_then_the_next_one_does(http, server):
    first = server.decide({"team": "shipping"}, times=2)
    server.decide({"team": "technical"})
    chosen = [answers(http, server)["team"]["choice"] for _ in range(3)]
    assert chosen == ["shipping", "shipping", "technical"]
    assert first.used == 2 and not first.active and len(first.calls) == 2


def test_a_pin_without_a_question_matcher_leaves_other_requests_alone(http, server):
    default = answers(http, server, {"urgency": URGENCY})
    server.decide({"team": "billing"})
    assert answers(http, server, {"urgency": URGENCY}) == default
    assert answers(http, server)["team"]["choice"] == "billing"


def test_removing_a_pin_and_the_with_block(http, server):
    default = answers(http, server)["team"]["choice"]
    other = next(k for k in TEAM["criteria"] if k != default)
    with server.decide({"team": other}):
        assert answers(http, server)["team"]["choice"] == other
    assert answers(http, server)["team"]["choice"] == default and server.pins == ()


def test_a_batch_is_pinned_state_by_state(http, server):
    server.decide({"refund": 0.99}, state="refund")
    response = ask(http, server, {"refund": REFUND}, ["please refund me", "where is it?"], path="/v1/systemone/batch")
    results = response.json()["results"]
    assert results[0]["answers"]["refund"]["noul"] == 0.99 and results[1]["answers"]["refund"]["noul"] != 0.99


# --------------------------------------------------------------------------- invalid pins


@pytest.mark.parametrize(("answers_", "message"), [
    ({"refund": 1.5}, "pinned probability for 'refund' is 1.5, outside [0, 1]"),
    ({"refund": float("nan")}, "pinned probability for 'refund' is nan, outside [0, 1]"),
    ({"urgency": -1}, "pinned answer for 'urgency' is -1: a score level is 0 or more"),
    ({"refund": True}, "pinned answer for 'refund' is True: a noul question is pinned with a probability"),
    ({"team": ["billing"]}, "pinned answer for 'team' is a list"),
    ({"team": {"billing": 0.7, "technical": 0.5}}, "pinned distribution for 'team' sums to 1.2, more than 1"),
    ({"team": {"billing": 2}}, "the probability of 'billing' is 2, outside [0, 1]"),
    ({}, "pinned answers are a non-empty mapping"),
    ({"": "x"}, "keyed by question id"),
])
def test_a_pin_that_can_never_be_right_fails_at_the_call(answers_, message):
    with pytest.raises(PinError, match=re.escape(message)):
        FakeLaya().pin(answers_)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"state": 3}, "state= takes a substring, a compiled regex"),
    ({"questions": "team"}, "questions= takes a set of question ids"),
    ({"times": 0}, "times= takes a whole number of requests >= 1"),
])
def test_bad_matchers_fail_at_the_call(kwargs, message):
    with pytest.raises(PinError, match=re.escape(message)):
        FakeLaya().pin({"team": "billing"}, **kwargs)


def test_pin_errors_are_config_errors():
    assert issubclass(PinError, LayaConfigError)


@pytest.mark.parametrize(("pin", "message"), [
    ({"team": "sales"}, "question 'team': 'sales' is not among its options ['billing', 'technical', 'shipping']"),
    ({"urgency": 3}, "question 'urgency' is a score question with levels 0..2 (0 'Not urgent', 1 'Soon', 2 'Now'): "
                     "pin a level in that range, not 3"),
    ({"refund": "yes"}, "question 'refund' is a noul question: pin it with P(true), a number in [0, 1]"),
    ({"team": {"billing": 0.5, "technical": 0.2, "shipping": 0.2}},
     "pinned distribution for 'team' names every one of its options and sums to 0.9, not 1"),
    ({"team": "billing", "teem": "billing"}, "names question 'teem' that this request does not ask; it asks "
                                             "['team', 'urgency', 'refund']"),
])
def test_a_pin_wrong_for_the_request_is_a_422_kept_and_raised_again(http, server, pin, message):
    made = server.decide(pin)
    response = ask(http, server)
    assert response.status_code == 422
    said = response.json()["detail"]
    assert said.startswith("pytest-laya's fake could not give a pinned answer (the test's pin is wrong): pin ")
    assert message in said and "(pinned at test_pins.py:" in said
    if server.flavor == TARGET:
        assert response.json()["code"] == "invalid_request" and response.json()["errors"][0]["detail"] in said
    assert len(made.errors) == 1 and message in made.errors[0]
    assert server.calls[-1].status == 422 and message in server.calls[-1].error
    with pytest.raises(PinError, match=re.escape(message)):
        server.check_pins()
    server.check_pins()  # each mistake is raised once


def test_the_fake_raises_pin_errors_when_its_block_ends(http):
    with pytest.raises(PinError, match="'sales' is not among its options"):
        with FakeLayaServer() as server:
            server.decide({"team": "sales"})
            with ServedLayaClient(server.url) as client:
                with pytest.raises(LayaCallError, match="is not among its options"):
                    client.decide(STATE, QUESTIONS)  # the client says so too, with the server's detail


def test_an_unused_pin_is_a_mistake_unless_it_was_removed(http):
    with pytest.raises(PinError, match=r"pin \{'team': 'billing'\} \(pinned at test_pins.py:\d+\) was never used: "
                                       r"the fake answered 1 decision request\(s\), asking \['urgency'\]"):
        with FakeLayaServer() as server:
            server.decide({"team": "billing"})
            answers(http, server, {"urgency": URGENCY})
    with FakeLayaServer() as server:
        server.decide({"team": "billing"}).remove()
    server.check_pins()
    server.check_pins(unused=False)


def test_a_matcher_that_raises_is_a_pin_error(http, server):
    server.decide({"team": "billing"}, state=lambda s: s["missing"])
    assert ask(http, server).status_code == 422
    with pytest.raises(PinError, match=r"its state= matcher raised TypeError"):
        server.check_pins()
    server.unpin_all()
    server.check_pins()  # raised once: not again


# --------------------------------------------------------------------------- calls


def test_calls_hold_what_was_sent_and_what_came_back(http, server):
    pin = server.decide({"team": "billing"})
    response = http.post(server.url + "/v1/systemone", json={"state": STATE, "questions": QUESTIONS},
                         headers={"Authorization": "Bearer not-a-real-key-42", "X-Request-Id": "req-7"})
    http.get(server.url + "/health")  # not a decision: not a call
    [made] = server.calls
    assert made.state == STATE and made.questions["team"].criteria == TEAM["criteria"]
    assert made.headers["authorization"] == "Bearer <redacted>" and made.request_id == "req-7"
    assert made.status == 200 and made.response == response.json() and made.pinned == ("team",)
    assert made.decision["team"].key == "billing" and made.url == server.url + "/v1/systemone"
    assert pin.calls == [made]
    server.calls.assert_called_once_with(state=STATE, questions=QUESTIONS)


def test_faults_are_calls_too(http):
    with FakeLayaServer() as server:
        server.status(503, retry_after=0).reset()
        assert http.post(server.url + "/v1/systemone", json={"state": "s", "questions": QUESTIONS}).status_code == 503
        with pytest.raises(httpx.TransportError):
            http.post(server.url + "/v1/systemone", json={"state": "s", "questions": QUESTIONS})
        answers(http, server)
    assert [(c.fault, c.status) for c in server.calls] == [("status(503)", 503), ("reset()", None), (None, 200)]
    assert server.calls[0].response["code"] == "overloaded"


def test_a_server_never_started_still_lends_its_answers():
    # The contract suite's broken servers borrow an unstarted fake's normal_response().
    fake = FakeLayaServer()
    fake.decide({"refund": 0.3})
    body = json.dumps({"state": STATE, "questions": {"refund": REFUND}}).encode()
    response = fake.normal_response(ReceivedRequest(method="POST", path="/v1/systemone",
                                                    headers={"content-type": "application/json"}, body=body))
    assert response.status == 200 and json.loads(response.payload)["answers"]["refund"]["noul"] == 0.3
    assert fake.calls[-1].url is None and fake.calls[-1].decision["refund"].p == 0.3

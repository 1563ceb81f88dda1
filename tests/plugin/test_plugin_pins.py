"""Pinned answers through the plugin, run with pytester: the marker, `laya_fake_server.decide`,
calls and their assertions, and pin mistakes failing the test even when the code swallowed them."""

from __future__ import annotations

import httpcore  # noqa: F401
import httpx  # noqa: F401
import pytest
import vcr  # noqa: F401
import vcr.stubs.httpx_stubs  # noqa: F401
import yaml  # noqa: F401

# pytester's in-process runs drop modules first imported inside them; importing these here keeps
# one copy of each class (and of yaml's loaders), so exceptions map the same in every inner run.
import pytest_laya.fake  # noqa: F401
import pytest_laya.specs  # noqa: F401
import pytest_laya.wire.calls  # noqa: F401
from tests.helpers.pytester_runs import run

pytest_plugins = ["pytester"]

QUESTIONS = """
QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team?",
             "criteria": {"billing": "Charges", "tech": "Bugs", "sales": "Buying"}},
    "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
}
"""

SERVICE = QUESTIONS + """
import httpx

def route(url, text):
    '''The service under test: it swallows Laya's errors and falls back to a default queue.'''
    try:
        response = httpx.post(url + "/v1/systemone", json={"state": text, "questions": QUESTIONS}, timeout=5)
        response.raise_for_status()
    except httpx.HTTPError:
        return "default"
    answers = response.json()["answers"]
    if answers["refund"]["noul"] > 0.8:
        return "ticket"
    return "billing-queue" if answers["team"]["choice"] == "billing" else "default"
"""


def lit(text: str) -> str:
    """`text` as an fnmatch pattern that matches it literally (``[`` opens a class there)."""
    return text.replace("[", "[[]")


def test_the_marker_pins_laya_client_in_fake_mode_for_that_test_only(pytester):
    pytester.makepyfile(test_it=QUESTIONS + """
import pytest
from pytest_laya.fake import FakeLaya

@pytest.mark.laya(answers={"team": "sales", "refund": 0.97})
def test_pinned(laya_client):
    decision = laya_client.decide("I was charged twice.", QUESTIONS)
    assert decision["team"].key == "sales" and decision["refund"].p == 0.97

def test_not_pinned_afterwards(laya_client):
    decision = laya_client.decide("I was charged twice.", QUESTIONS)
    stable = FakeLaya().answer({"state": "I was charged twice.", "questions": QUESTIONS})[2]["answers"]
    assert decision["team"].key == stable["team"]["choice"] and decision["refund"].p == stable["refund"]["noul"]
""")
    run(pytester, "--laya-mode=fake").assert_outcomes(passed=2)


def test_the_marker_makes_the_fake_the_server_in_replay_mode(pytester):
    pytester.makepyfile(test_it=QUESTIONS + """
import pytest

@pytest.mark.laya(answers={"team": "tech"})
def test_pinned(laya_client, laya_server, laya_cassette):
    assert laya_server.kind == "fake" and laya_cassette is None
    assert laya_client.decide("My app crashes.", QUESTIONS)["team"].key == "tech"
""")
    result = run(pytester)  # replay, the default: no cassette needed
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize(("marker", "message"), [
    ("answers={'refund': 1.5}", "@pytest.mark.laya(answers=...): pinned probability for 'refund' is 1.5, "
                                "outside [[]0, 1[]]*"),
    ("answers={'refund': 0.5}, server='live'", "@pytest.mark.laya(answers=...) pins the fake's answers, so it cannot "
                                               "apply to server='live'; drop one of them"),
    ("answers='billing'", "@pytest.mark.laya(answers=...): pinned answers are a non-empty mapping*"),
])
def test_a_bad_marker_pin_fails_the_run_at_start_up(pytester, marker, message):
    pytester.makepyfile(test_it=f"""
import pytest

@pytest.mark.laya({marker})
def test_x(laya_client):
    pass
""")
    result = run(pytester, "--laya-mode=fake")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: test_it.py::test_x: {message}"])


def test_each_branch_of_a_service_is_forced_and_what_it_sent_is_asserted(pytester):
    pytester.makepyfile(service=SERVICE)
    pytester.makepyfile(test_it="""
import pytest
from service import QUESTIONS, route

def test_refund_opens_a_ticket(laya_fake_server):
    laya_fake_server.decide({"refund": 0.91})
    assert route(laya_fake_server.url, "Refund me") == "ticket"
    laya_fake_server.calls.assert_called_once_with(state="Refund me", questions=QUESTIONS)

def test_billing_goes_to_its_queue(laya_fake_server):
    pin = laya_fake_server.decide({"team": "billing", "refund": 0.1})
    assert route(laya_fake_server.url, "Charged twice") == "billing-queue"
    assert pin.calls[-1].questions["team"].criteria == {"billing": "Charges", "tech": "Bugs", "sales": "Buying"}

@pytest.mark.laya(answers={"team": "tech", "refund": 0.2})
def test_the_rest_goes_to_default(laya_fake_server):
    assert route(laya_fake_server.url, "My app crashes") == "default"
    assert laya_fake_server.calls[-1].decision["team"].key == "tech"
""")
    run(pytester).assert_outcomes(passed=3)


def test_a_failed_call_assertion_shows_what_differs(pytester):
    pytester.makepyfile(service=SERVICE)
    pytester.makepyfile(test_it="""
from service import QUESTIONS, route

def test_sent(laya_fake_server):
    laya_fake_server.decide({"refund": 0.91})
    route(laya_fake_server.url, "Refund me")
    wanted = {**QUESTIONS, "team": {**QUESTIONS["team"], "criteria": ["billing", "tech"]}}
    laya_fake_server.calls.assert_called_once_with(state="Refund me please", questions=wanted)
""")
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([lit(line) for line in [
        "*AssertionError: POST /v1/systemone questions=['team', 'refund'] state='Refund me' -> 200 differs from what "
        "was expected:",
        "*  state: expected 'Refund me please', sent 'Refund me'",
        "*  questions/team/criteria: expected ['billing', 'tech'], sent {'billing': 'Charges', 'tech': 'Bugs', "
        "'sales': 'Buying'}",
    ]])
    assert "calls.py" not in result.stdout.str()  # the failure points at the test, not into the kit


def test_a_pin_the_service_swallowed_still_fails_the_test(pytester):
    pytester.makepyfile(service=SERVICE)
    pytester.makepyfile(test_it="""
from service import route

def test_typo(laya_fake_server):
    laya_fake_server.decide({"team": "biling"})
    assert route(laya_fake_server.url, "Charged twice") == "default"   # the 422 was swallowed
""")
    result = run(pytester)
    result.assert_outcomes(passed=1, errors=1)
    assert "During handling" not in result.stdout.str()
    result.stdout.fnmatch_lines([lit(line) for line in [
        "pinned answers went wrong:",
        "*- pin {'team': 'biling'} (pinned at test_it.py:4): question 'team': 'biling' is not among its options "
        "['billing', 'tech', 'sales']*",
    ]])


def test_a_marker_pin_wrong_for_the_request_fails_the_test_in_fake_mode(pytester):
    pytester.makepyfile(test_it=QUESTIONS + """
import pytest

@pytest.mark.laya(answers={"tem": "billing", "team": "billing"})
def test_typo(laya_client):
    try:
        laya_client.decide("Charged twice", QUESTIONS)
    except Exception:
        pass   # swallowed

def test_next_is_clean(laya_client):
    laya_client.decide("Charged twice", QUESTIONS)
""")
    result = run(pytester, "--laya-mode=fake")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines([lit("*- pin {'tem': 'billing', 'team': 'billing'} (pinned at @pytest.mark.laya("
                                     "answers=...) on test_it.py::test_typo) names question 'tem' that this request "
                                     "does not ask; it asks ['team', 'refund']*")])


def test_an_unused_pin_fails_the_test_unless_not_strict(pytester):
    pytester.makepyfile(test_it=QUESTIONS + """
import pytest

def test_unused(laya_fake_server):
    laya_fake_server.decide({"team": "billing"})

@pytest.mark.laya(answers={"team": "billing"})
def test_unused_marker(laya_client):
    pass

@pytest.mark.laya(strict=False)
def test_unused_but_not_strict(laya_fake_server):
    laya_fake_server.decide({"team": "billing"})

def test_failed_anyway(laya_fake_server):
    laya_fake_server.decide({"team": "billing"})
    assert False, "the test's own failure"
""")
    result = run(pytester, "--laya-mode=fake")
    result.assert_outcomes(passed=3, failed=1, errors=2)
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_unused *", "*was never used: no decision request reached "
                                 "the fake*", "*ERROR at teardown of test_unused_marker *"])
    assert "ERROR at teardown of test_failed_anyway" not in result.stdout.str()


def test_the_marker_pins_every_fake_the_test_gets_and_one_use_is_enough(pytester):
    pytester.makepyfile(test_it=QUESTIONS + """
import httpx
import pytest

@pytest.mark.laya(answers={"team": "sales"})
def test_both(laya_client, laya_fake_server):
    assert laya_client.decide("s", QUESTIONS)["team"].key == "sales"      # the session's fake
    with httpx.Client(transport=laya_fake_server.transport(), base_url="http://laya.invalid") as client:
        assert client.post("/v1/systemone", json={"state": "s", "questions": QUESTIONS}).json()["answers"]["team"]["choice"] == "sales"

@pytest.mark.laya(answers={"team": "sales"})
def test_only_the_session_fake_asked(laya_client, laya_fake_server):
    assert laya_client.decide("s", QUESTIONS)["team"].key == "sales"
""")
    run(pytester, "--laya-mode=fake").assert_outcomes(passed=2)

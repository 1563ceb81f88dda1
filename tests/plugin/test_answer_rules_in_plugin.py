"""The answer rules join the spec check, for a user's own client, in every mode (issue 31).

A hand-edited cassette whose choice probabilities sum to 1.6, or whose choice is not the most
probable option, fits the OpenAPI shape: before, it replayed into the user's own httpx client
with no error. The plugin now holds every decision's answers to the rules for the request that
asked them, and fails the test naming the rule.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from pytest_laya.fake import FakeLayaServer
from pytest_laya.faults import Respond, ScriptedServer
from tests.helpers.pytester_runs import cassette_data, report_of, run

pytest_plugins = ["pytester"]

OWN_HTTPX = """
import httpx

BODY = {"state": "I was charged twice. Refund me.",
        "questions": {"team": {"type": "choice", "instructions": "Which team?", "criteria": ["billing", "tech"]}}}


def test_team(laya_url):
    with httpx.Client() as client:
        answer = client.post(laya_url + "/v1/systemone", json=BODY).raise_for_status().json()
    assert answer["answers"]["team"]["choice"] in ("billing", "tech")
"""
CASSETTE = ("cassettes", "test_it", "test_team.yaml")


@pytest.fixture
def laya_serve_like():
    with FakeLayaServer(flavor="laya-serve-0.4.15") as server:
        yield server


def edit_answer(path, **members: Any) -> None:
    """A hand edit of the recorded `team` answer, as a user would make one."""
    data = cassette_data(path)
    body = data["interactions"][0]["response"]["body"]
    answer = json.loads(body["string"])
    answer["answers"]["team"].update(members)
    body["string"] = json.dumps(answer)
    path.write_text(yaml.safe_dump(data, sort_keys=True))


@pytest.mark.parametrize(("members", "named"), [
    ({"choice": "billing", "probabilities": {"billing": 0.8, "tech": 0.8}},
     "/body/answers/team/probabilities: rule probabilities-sum: expected a sum of 1 within 0.02, got 1.6000"),
    ({"choice": "tech", "probabilities": {"billing": 0.9, "tech": 0.1}},
     "/body/answers/team/choice: rule choice-most-probable: expected the most probable option 'billing' (p=0.9), "
     "got 'tech' (p=0.1)"),
])
def test_an_impossible_answer_replayed_into_the_users_own_client_fails_naming_the_rule(
        pytester, laya_serve_like, members, named):
    pytester.makepyfile(test_it=OWN_HTTPX)
    run(pytester, "--laya-record", f"--laya-url={laya_serve_like.url}").assert_outcomes(passed=1)
    edit_answer(pytester.path.joinpath(*CASSETTE), **members)
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*SpecViolationError*breaks the current spec (1 violation)*", f"*{named}*",
                                 "*replayed from the cassette *test_team.yaml*"])
    # In report mode the violation is listed by rule and the test goes on.
    report = pytester.path / "laya.json"
    run(pytester, "--laya-conformance=report", f"--laya-report={report}").assert_outcomes(passed=1)
    [test] = report_of(report)["tests"]
    assert any(named in violation for violation in test["violations"])


def test_a_live_server_answering_the_impossible_fails_naming_the_rule(pytester):
    answer = {"model": "m", "usage": {"input_tokens": 3, "output_tokens": 0}, "answers": {
        "team": {"type": "choice", "choice": "billing", "probabilities": {"billing": 0.8, "tech": 0.8}, "confidence": 0.5}}}
    pytester.makepyfile(test_it=OWN_HTTPX)
    with ScriptedServer(default=Respond(200, answer)) as server:
        result = run(pytester, "--laya-mode=live", f"--laya-url={server.url}")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*/body/answers/team/probabilities: rule probabilities-sum*"])


def test_a_hostile_cassette_fails_with_bounded_text(pytester, laya_serve_like):
    # 100,000 out-of-range probabilities: before, 43 s and 8.5 MB to the terminal and the JUnit XML.
    pytester.makepyfile(test_it=OWN_HTTPX)
    run(pytester, "--laya-record", f"--laya-url={laya_serve_like.url}").assert_outcomes(passed=1)
    edit_answer(pytester.path.joinpath(*CASSETTE), probabilities={f"o{i}": 2 for i in range(100_000)})
    junit = pytester.path / "junit.xml"
    result = run(pytester, f"--junitxml={junit}")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*breaks the current spec (at least * violations)*", "*... and at least * more*"])
    assert len(result.stdout.str().encode()) < 100_000
    assert junit.stat().st_size < 100_000

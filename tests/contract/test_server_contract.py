"""The server contract (pytest_laya.suites.server) run as users run it, against real servers.

The reference server on the tiny checkpoint must pass it under the target spec, laya-serve
0.4.15 (default and LAYA_JEV_STRICT=1) under the current spec with its target gaps listed, each
held to the spec it claims when no --laya-spec is given, and deliberately broken servers must
fail it, each on the check that names what is broken: a contract that cannot fail proves nothing.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import version
from importlib.util import find_spec
from pathlib import Path
from typing import Any

# pytester's in-process runs drop modules first imported inside them; importing the network
# stack here keeps one copy of each class, so exceptions map the same in every inner run.
import httpcore  # noqa: F401
import pytest

try:  # numpy refuses a second import in one process; an inner run must not import it first
    import numpy  # noqa: F401
except ImportError:  # pragma: no cover - without the reference extra
    pass

from pytest_laya import LayaCallError, Spec
from pytest_laya.__main__ import main, pytest_arguments
from pytest_laya.fake import FakeLayaServer
from pytest_laya.faults import Delay, ReceivedRequest, ResetBeforeHeaders, Respond, ScriptedServer
from pytest_laya.plugin import LayaRun
from pytest_laya.specs.conformance import SpecViolationError
from pytest_laya.suites.measures import compare, decided, describe, probability_change
from pytest_laya.suites.server_under_test import (
    DOCUMENTED_LIMITS,
    ServerUnderTest,
    _general_pointer,
    parse_limit_options,
    resolve_limits,
)
from pytest_laya.wire.decision import Choice, Noul, Score
from pytest_laya.wire.exchange import Exchange
from tests.contract.server_twins import KEY as TWIN_KEY
from tests.contract.server_twins import SERVER_CHOSEN_ID, SERVER_TWINS, answering
from tests.helpers.pytester_runs import WITHOUT_UNUSED_PLUGINS, run
from tests.helpers.servers import LAYA_SERVE_KEY  # noqa: E402

KEY = LAYA_SERVE_KEY  # the shared keyed laya-serve processes' key (tests/conftest.py)
SUITE = ("--pyargs", "pytest_laya.suites.server")
#: The checks of the suite, and those that need --laya-api-key.
CHECKS = 24
TOKEN_CHECKS = 2
#: The replicas check, skipped against a server whose answers name no served_by (laya-serve 0.4.15).
REPLICA_CHECKS = 1
#: The checks laya-serve 0.4.15 passes only as target gaps.
LAYA_SERVE_GAPS = [
    "test_health_names_the_models_and_the_limits",
    "test_the_request_id_is_echoed",
    "test_empty_questions_are_a_400",
    "test_every_invalid_question_is_named",
    "test_a_body_that_is_not_json_media_is_a_415",
    "test_an_unknown_model_is_a_422",
]


def run_suite(pytester, *args):
    """The server contract's suite, in process (tests/helpers/pytester_runs.py's `run`)."""
    return run(pytester, *SUITE, *args)


def check_command(pytester, url, *extra, api_key=KEY):
    """What `python -m pytest_laya check URL --api-key KEY -- EXTRA` runs (no --spec: auto), in process."""
    return pytester.runpytest(*pytest_arguments(url, api_key=api_key, extra=extra))


def failure_section(result) -> str:
    """The FAILURES section of an inner run: the short summary after it repeats each message in full
    when pytest sees CI set, so "printed once" is counted here."""
    return result.stdout.str().split("short test summary info")[0]


def failed_checks(result) -> list[str]:
    return sorted(report.nodeid.split("::")[-1] for report in result.reprec.getreports("pytest_runtest_logreport")
                  if report.failed)


# -- servers: the reference servers and laya-serves every module shares (tests/conftest.py) ---

@pytest.fixture
def reference(request):
    pytest.importorskip("laya", reason="needs the reference extra")
    return request.getfixturevalue("laya_reference_server")


@pytest.fixture
def reference_keyed(keyed_reference_server):
    return keyed_reference_server


@pytest.fixture(scope="module")
def laya_serve(laya_serves):
    return laya_serves(api_key=KEY)


@pytest.fixture(scope="module")
def laya_serve_strict(laya_serves):
    return laya_serves(jev_strict=True, api_key=KEY)


# -- (a) the reference server: the whole target contract -----------------------------------

def test_the_reference_server_meets_the_target_contract_it_claims(pytester, reference):
    result = run_suite(pytester, "--laya-mode=live", f"--laya-url={reference.url}", "-rs")
    result.assert_outcomes(passed=CHECKS - TOKEN_CHECKS, skipped=TOKEN_CHECKS)
    out = result.stdout.str()
    assert "target gaps" not in out
    result.stdout.fnmatch_lines(["*SKIPPED*no --laya-api-key given: the token checks need the server's key*"])
    result.stdout.fnmatch_lines([
        "server contract:",
        f"  live {reference.url} held to the target spec (its Laya-Spec header says target); limits: "
        "max_questions 64, max_state_chars 50000, max_body_bytes 2097152 (from /health)",
        "behaviour measured:",
        # The reference server states the tolerance it keeps (laya's 4th decimal) and keeps it.
        "  behaviour tolerance: 0.0001 (the server's /health answer_tolerance)",
        "  batching: 3 states alone and in one POST /v1/systemone/batch: largest probability deviation 0.0000* "
        "over 12 answers (tolerance 0.0001)",
        "  batching: one request alone and 8 identical requests at once: largest probability deviation 0.0000* "
        "(tolerance 0.0001)",
        "  determinism: the same request 3 times: largest probability deviation 0.000000 (tolerance 0.0001)",
        "  replicas: 1 served_by seen in 8 concurrent answers; *",
        "  option order: * of 33 reorderings changed the choice (*%) over 3 questions, the reverse order * of 3; "
        "largest probability deviation * (reported)",
        "  question interference: * of 8 answers decided differently beside 3 or 15 other questions than alone;* "
        "(reported)",
        "conformance (each server's responses, against each spec):",
        f"  live {reference.url}*target   operations 3/3, headers 10/10, 0 violations in * responses",
    ])


def test_with_an_api_key_every_check_runs_and_the_key_is_never_shown(pytester, reference_keyed):
    report = pytester.path / "laya.json"
    result = run_suite(pytester, "--laya-mode=live", f"--laya-url={reference_keyed.url}", "--laya-spec=target",
                       f"--laya-api-key={KEY}", f"--laya-report={report}", "-v")
    result.assert_outcomes(passed=CHECKS)
    result.stdout.fnmatch_lines(["*test_health_without_a_token_shows_liveness_only PASSED*",
                                 "*test_a_wrong_or_missing_token_is_a_401 PASSED*"])
    assert KEY not in result.stdout.str() + result.stderr.str() + report.read_text()
    notes = json.loads(report.read_text())["notes"]
    assert sorted(notes) == ["behaviour measured", "server contract"]  # no target gaps


# -- (b) laya-serve 0.4.15 through python -m pytest_laya check URL, no --spec: held to the current
# spec (it claims none), its target gaps listed. One contract run per configuration (each is
# seconds of real inference); the explicit --laya-spec choice is test_the_summary_says_which_spec_*'s.

@pytest.mark.parametrize("which", ["laya_serve", "laya_serve_strict"])
def test_check_without_a_spec_holds_laya_serve_to_the_current_spec_listing_only_target_gaps(pytester, request, which):
    server = request.getfixturevalue(which)
    result = check_command(pytester, server.url, "-rx")
    result.assert_outcomes(passed=CHECKS - len(LAYA_SERVE_GAPS) - REPLICA_CHECKS, xfailed=len(LAYA_SERVE_GAPS),
                           skipped=REPLICA_CHECKS)
    result.stdout.fnmatch_lines([
        f"  live {server.url} held to the current spec (it claims none, with no Laya-Spec header and no \"spec\" in /health); *",
        "target gaps: behaviours only the target spec asks for (their checks xfailed):",
        *[f"  {name}: *" for name in LAYA_SERVE_GAPS],
        "target gaps: target-spec rules these responses broke:",
        "  /headers/x-request-id: expected header X-Request-Id (required) [GET /health 200; POST /v1/systemone 200, 400, 401, 413, 422*",
        "behaviour measured:",
        # laya-serve rounds to 4 decimals and names no precision.
        "  behaviour tolerance: 0.0001 (no precision named: float32's, but answers rounded to 4 decimals move by "
        "one step of their last digit)",
        "conformance (each server's responses, against each spec):",
        f"  live {server.url}*current  operations 3/3, headers 7/7, 0 violations in * responses",
        f"  live {server.url}*target   operations 0/3*",
    ])
    result.stdout.fnmatch_lines([f"XFAIL *{name} - target gap: *" for name in LAYA_SERVE_GAPS])
    result.stdout.fnmatch_lines(["*test_a_body_that_is_not_json_media_is_a_415: a JSON body sent as Content-Type: "
                                 "text/plain: answered 200; the target asks for 415 unsupported_media_type"])
    assert KEY not in result.stdout.str() + result.stderr.str()


def test_check_without_a_spec_holds_the_reference_server_to_the_target_it_claims(pytester, reference_keyed):
    result = check_command(pytester, reference_keyed.url)
    result.assert_outcomes(passed=CHECKS)
    result.stdout.fnmatch_lines([f"  live {reference_keyed.url} held to the target spec (its Laya-Spec header says target); *"])
    assert "target gaps" not in result.stdout.str()


# -- (b'') a keyed server without its key: one usage error, not a failure per check ----------

@pytest.mark.parametrize("which", ["reference_keyed", "laya_serve"])
def test_check_without_the_key_of_a_keyed_server_is_one_usage_error(pytester, request, monkeypatch, which):
    monkeypatch.delenv("LAYA_SERVED_API_KEY", raising=False)
    server = request.getfixturevalue(which)
    result = check_command(pytester, server.url, api_key=None)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines(["*the server asks for an API key: POST /v1/systemone without one answered 401; "
                                 "pass it with --api-key KEY (or set LAYA_SERVED_API_KEY)*"])
    assert "FAILED" not in result.stdout.str() and "api_key=" not in result.stdout.str()
    assert not result.parseoutcomes().get("failed")


def test_a_wrong_key_is_one_usage_error_under_pytest_too_and_never_shown(pytester, reference_keyed, monkeypatch):
    monkeypatch.delenv("LAYA_SERVED_API_KEY", raising=False)
    wrong = "sk-wrong-key-31f0c7"
    result = run_suite(pytester, "--laya-mode=live", f"--laya-url={reference_keyed.url}", f"--laya-api-key={wrong}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines(["*the server refused the API key given: POST /v1/systemone answered 401; "
                                 "check the key passed with --laya-api-key KEY (or LAYA_SERVED_API_KEY)*"])
    assert wrong not in result.stdout.str() + result.stderr.str()


# -- (c) broken servers fail, on the check that names the fault ------------------------------
# A broken server for every check, each failing exactly that check: test_server_contract_twins.py.

def _answer_body(response: Respond) -> dict:
    return json.loads(response.payload)


def _rewritten(response: Respond, body: dict) -> Respond:
    return Respond(response.status, body, headers=response.headers)


def test_a_response_that_breaks_the_chosen_spec_fails_with_its_violations(pytester):
    fake = FakeLayaServer()

    def without_served_by(request: ReceivedRequest) -> Respond:
        response = fake.normal_response(request)
        if response.status != 200 or request.path != "/v1/systemone":
            return response
        body = _answer_body(response)
        body.pop("served_by")
        return _rewritten(response, body)

    with ScriptedServer(default=without_served_by) as broken:
        result = run_suite(pytester, "--laya-mode=live", f"--laya-url={broken.url}", "--laya-spec=target")
    assert "test_a_decision_answers_every_question_in_order" in failed_checks(result)
    result.stdout.fnmatch_lines(["*POST /v1/systemone -> 200 breaks the target spec*", "*/body/served_by: expected a required property*"])


def test_a_wrong_status_is_reported_before_the_spec_violations_of_its_body_and_each_once(pytester):
    fake = FakeLayaServer()

    def malformed_json_is_a_404(request: ReceivedRequest) -> Respond:
        response = fake.normal_response(request)
        if request.path == "/v1/systemone" and response.status == 400:
            return Respond(404, _answer_body(response), headers=response.headers)
        return response

    with ScriptedServer(default=malformed_json_is_a_404) as broken:
        result = run_suite(pytester, "--laya-mode=live", f"--laya-url={broken.url}", "-k", "malformed_json")
    assert failed_checks(result) == ["test_malformed_json_is_a_400"]
    out = failure_section(result)
    result.stdout.fnmatch_lines(["a body that is not valid JSON: expected HTTP 400 malformed_request, got HTTP 404 *",
                                 "The response also breaks the spec:",
                                 "POST /v1/systemone -> 404 breaks the target spec (1 violation):",
                                 "  /status: expected one of *, got 404"])
    assert out.count("/status: expected one of") == 1 and "During handling" not in out


@pytest.mark.parametrize(("path", "check"), [("/v1/systemone", "a_decision_answers_every_question_in_order"),
                                             ("/v1/systemone/batch", "batching_alone_and_in_a_batch")])
def test_a_body_that_breaks_the_spec_is_printed_once(pytester, path, check):
    fake = FakeLayaServer()

    def without_model(request: ReceivedRequest) -> Respond:
        response = fake.normal_response(request)
        if response.status == 200 and request.path == path:
            body = _answer_body(response)
            body.pop("model")
            return _rewritten(response, body)
        return response

    with ScriptedServer(default=without_model) as broken:
        result = run_suite(pytester, "--laya-mode=live", f"--laya-url={broken.url}", "-k", check)
    assert failed_checks(result) == [f"test_{check}"]
    out = failure_section(result)
    assert out.count("/body/model: expected a required property") == 1 and "During handling" not in out


@pytest.mark.parametrize("batch_status", [404, 405])
def test_a_server_without_health_is_a_gap_never_a_failed_decision(pytester, batch_status):
    # No batch endpoint either: 404 (no route) or 405 (a route for another method) both say so.
    fake = FakeLayaServer(flavor="laya-serve-0.4.15")  # never started: only its answers are used

    def no_health(request: ReceivedRequest) -> Respond:
        if request.path == "/health":
            return Respond(404, {"detail": "Not Found"})
        if request.path == "/v1/systemone/batch":
            return Respond(batch_status, {"detail": "Not Found" if batch_status == 404 else "Method Not Allowed"})
        return fake.normal_response(request)

    with ScriptedServer(default=no_health) as jev:
        result = run_suite(pytester, "--laya-mode=live", f"--laya-url={jev.url}", "-rx")
    health_checks = ["test_health_answers_status_ok", "test_health_names_the_models_and_the_limits"]
    result.assert_outcomes(passed=CHECKS - TOKEN_CHECKS - REPLICA_CHECKS - len(LAYA_SERVE_GAPS) - 2,
                           skipped=TOKEN_CHECKS + REPLICA_CHECKS, xfailed=len(LAYA_SERVE_GAPS) + 2)
    result.stdout.fnmatch_lines([
        f"  live {jev.url} held to the current spec (it claims none, *",
        "  no /health: GET /health answered 404; identity comes from the answers, limits from the spec",
        "target gaps: behaviours only the target spec asks for (their checks xfailed):",
        *[f"  {name}: GET /health answered 404: the server has no /health; the target's health document says "
          "whether it is ready, which weights serve each model, and the limits" for name in health_checks],
        # The gaps' words, each as the summary shows it.
        "  test_the_request_id_is_echoed: sent X-Request-Id 'pytest-laya-contract-*', got no X-Request-Id back; "
        "the target echoes the caller's request id",
        f"  test_batching_alone_and_in_a_batch: POST /v1/systemone/batch answered {batch_status}; the target "
        "answers several states in one request",
    ])


def test_the_summary_says_which_spec_the_server_is_held_to_and_why(pytester):
    fake = FakeLayaServer()  # the target flavour claims target in its Laya-Spec header and its /health

    def claim_in_health_only(request: ReceivedRequest) -> Respond:
        response = fake.normal_response(request)
        headers = {k: v for k, v in (response.headers or {}).items() if k.lower() != "laya-spec"}
        return Respond(response.status, response.body, headers=headers, content_type=response.content_type)

    with ScriptedServer(default=fake.normal_response) as claiming, \
            ScriptedServer(default=claim_in_health_only) as health_only:
        chosen = run_suite(pytester, "--laya-mode=live", f"--laya-url={claiming.url}", "--laya-spec=current")
        claimed = run_suite(pytester, "--laya-mode=live", f"--laya-url={claiming.url}")
        from_health = run_suite(pytester, "--laya-mode=live", f"--laya-url={health_only.url}")
    chosen.stdout.fnmatch_lines([f"  live {claiming.url} held to the current spec (chosen with --laya-spec); limits: *"])
    claimed.stdout.fnmatch_lines([f"  live {claiming.url} held to the target spec (its Laya-Spec header says target); *"])
    from_health.stdout.fnmatch_lines([f'  live {health_only.url} held to the target spec (its /health says "spec": "target"); *'])
    # A target server held to the current spec breaks no target rule: no rule gap is listed.
    assert "target-spec rules these responses broke" not in chosen.stdout.str()


def test_under_the_target_spec_a_target_gap_fails_with_its_words(pytester):
    # A target server in every way but one: it answers with its own request id, not the caller's.
    [twin] = [t for t in SERVER_TWINS["test_the_request_id_is_echoed"] if t.defect == "request-id-not-echoed"]
    with ScriptedServer(default=answering(twin)) as server:
        result = run_suite(pytester, "--laya-mode=live", f"--laya-url={server.url}", "--laya-spec=target",
                           f"--laya-api-key={TWIN_KEY}", "-k", "request_id_is_echoed")
    assert failed_checks(result) == ["test_the_request_id_is_echoed"]
    result.stdout.fnmatch_lines([f"*sent X-Request-Id 'pytest-laya-contract-*', got X-Request-Id '{SERVER_CHOSEN_ID}' back; "
                                 "the target echoes the caller's request id*"])


def test_without_a_key_the_token_checks_skip_and_say_which_flag_gives_it(pytester):
    with FakeLayaServer() as fake:
        result = run_suite(pytester, "--laya-mode=live", f"--laya-url={fake.url}", "-rs", "-k", "token")
    result.assert_outcomes(skipped=TOKEN_CHECKS, deselected=CHECKS - TOKEN_CHECKS)
    result.stdout.fnmatch_lines([f"SKIPPED [[]{TOKEN_CHECKS}[]] *: no --laya-api-key given: the token checks need the server's key"])


def test_a_health_document_without_the_targets_members_is_a_target_gap_named_in_words(pytester):
    with FakeLayaServer(flavor="laya-serve-0.4.15") as jev:
        result = run_suite(pytester, "--laya-mode=live", f"--laya-url={jev.url}", "-k", "health_names")
    result.assert_outcomes(xfailed=1, deselected=CHECKS - 1)
    result.stdout.fnmatch_lines(["target gaps: *",
                                 "  test_health_names_the_models_and_the_limits: /health has no ready, models, limits; "
                                 "the target's health document says whether the server is ready, which weights serve "
                                 "each model, and the request limits"])


# -- limits and usage errors ---------------------------------------------------------------

def test_a_limit_given_as_an_option_is_the_one_checked(pytester):
    # The fake refuses only over 64 questions: held to a limit of 8, it fails that check alone.
    result = run_suite(pytester, "--laya-mode=fake", "--laya-limit", "max_questions=8")
    assert failed_checks(result) == ["test_too_many_questions_are_a_413"]
    result.stdout.fnmatch_lines(["*9 questions (the limit is 8): expected HTTP 413 too_many_questions, got HTTP 200*",
                                 "*limits: max_questions 8 (from --laya-limit), max_state_chars 50000 (from /health)*"])


@pytest.mark.parametrize("args, words", [
    (["--laya-mode=fake", "--laya-limit", "max_questons=8"], "--laya-limit 'max_questons=8': use NAME=N with NAME one of max_questions, max_state_chars, max_body_bytes"),
    (["--laya-mode=fake", "--laya-limit", "max_questions=0"], "--laya-limit 'max_questions=0': N must be at least 1"),
    (["--laya-mode=replay"], "the server contract checks a running server: add --laya-mode=live --laya-url URL (this run is --laya-mode=replay)"),
])
def test_a_run_that_cannot_check_anything_stops_with_one_line(pytester, args, words):
    result = run_suite(pytester, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines([f"*{words}*"])
    # The reporters get the stop's traceback from the suite's stop_run on (it and pytest.exit),
    # not pytest's ~70 frames, each formatted with its arguments for that one line.
    [stop] = [call.excinfo for call in result.reprec.getcalls("pytest_keyboard_interrupt")]
    assert len(stop.traceback) == 2
    assert stop.traceback[0].path == Path(find_spec("pytest_laya.suites.server_under_test").origin)


def test_limits_come_from_the_option_then_health_then_the_spec():
    limits = resolve_limits("current", {"limits": {"max_questions": 16, "max_state_chars": True}}, {"max_body_bytes": 1024})
    assert (limits.max_questions, limits.max_state_chars, limits.max_body_bytes) == (16, 50_000, 1024)
    assert resolve_limits("current", {"limits": {"max_questions": 1}}, {}).max_questions == 1  # the least usable
    assert limits.sources == {"max_questions": "/health", "max_state_chars": "the current spec's defaults",
                              "max_body_bytes": "--laya-limit"}
    assert parse_limit_options(["max_questions=3", "max_body_bytes=10"]) == {"max_questions": 3, "max_body_bytes": 10}
    with pytest.raises(ValueError, match="N must be a whole number"):
        parse_limit_options(["max_questions=many"])


@pytest.mark.parametrize(("value", "words"), [
    ("max_questions", "--laya-limit 'max_questions': use NAME=N with NAME one of max_questions, max_state_chars, "
                      "max_body_bytes"),
    ("questions=3", "--laya-limit 'questions=3': use NAME=N with NAME one of"),
    ("max_questions=2.5", "--laya-limit 'max_questions=2.5': N must be a whole number"),
    ("max_questions=0", "--laya-limit 'max_questions=0': N must be at least 1"),
    ("max_questions=3=4", "--laya-limit 'max_questions=3=4': N must be a whole number"),
])
def test_a_limit_option_that_cannot_be_read_says_what_to_write(value, words):
    with pytest.raises(ValueError) as raised:
        parse_limit_options(["max_state_chars=9", value])
    assert str(raised.value).startswith(words)
    assert parse_limit_options([" max_state_chars =9"]) == {"max_state_chars": 9}
    assert parse_limit_options(["max_questions=1"]) == {"max_questions": 1}  # the least there is


@pytest.mark.parametrize("health", [
    None, "ok", {"limits": None}, {"limits": {"max_questions": 0, "max_state_chars": -5, "max_body_bytes": "2 MiB"}},
    {"limits": {"max_questions": 8.0, "max_state_chars": False}},
])
def test_limits_a_health_document_does_not_publish_usably_are_the_specs(health):
    limits = resolve_limits("target", health, {})
    assert (limits.max_questions, limits.max_state_chars, limits.max_body_bytes) == (64, 50_000, 2 * 1024 * 1024)
    assert limits.describe() == ("max_questions 64, max_state_chars 50000, max_body_bytes 2097152 "
                                 "(from the target spec's defaults)")


def test_limits_from_several_places_say_where_each_came_from():
    limits = resolve_limits("current", {"limits": {"max_questions": 16}}, {"max_body_bytes": 1024})
    assert limits.describe() == ("max_questions 16 (from /health), max_state_chars 50000 (from the current spec's "
                                 "defaults), max_body_bytes 1024 (from --laya-limit)")
    # An option wins over what /health publishes.
    assert resolve_limits("current", {"limits": {"max_questions": 16}}, {"max_questions": 4}).max_questions == 4


def test_the_documented_default_limits_are_what_the_specs_say():
    described = Spec.current().document["components"]["responses"]["Detail413"]["description"]
    assert "More than 64 questions" in described and "50,000 characters" in described and "2 MiB" in described
    assert DOCUMENTED_LIMITS["current"] == {"max_questions": 64, "max_state_chars": 50_000, "max_body_bytes": 2 * 1024 * 1024}
    example = Spec.target().document["paths"]["/health"]["get"]["responses"]["200"]["content"]["application/json"]
    published = example["examples"]["full"]["value"]["limits"]
    assert DOCUMENTED_LIMITS["target"] == {name: published[name] for name in DOCUMENTED_LIMITS["target"]}


# -- measurements ----------------------------------------------------------------------------

def test_on_the_fake_the_measurements_are_exactly_zero_even_where_invariance_is_required(pytester):
    # The fake's answers depend on neither option order nor the other questions, by construction:
    # a fair server passes every behaviour check, invariance required or not.
    result = run_suite(pytester, "--laya-mode=fake", "--laya-require-invariance")
    result.assert_outcomes(passed=CHECKS - TOKEN_CHECKS, skipped=TOKEN_CHECKS)
    result.stdout.fnmatch_lines([
        "  option order: 0 of 33 reorderings changed the choice (0%) over 3 questions, the reverse order 0 of 3; "
        "largest probability deviation 0.0000 (tolerance 0.0001, required)",
        "  question interference: 0 of 8 answers decided differently beside 3 or 15 other questions than alone; "
        "largest probability deviation 0.0000 (tolerance 0.0001, required)",
    ])


def test_compare_counts_changed_decisions_and_the_largest_move():
    a = Choice(key="x", probabilities={"x": 0.6, "y": 0.4}, confidence=0.2)
    b = Choice(key="y", probabilities={"x": 0.45, "y": 0.55}, confidence=0.1)
    n1, n2 = Noul(p=0.7, confidence=0.7), Noul(p=0.68, confidence=0.68)
    s = Score(level=1, expected=1.0, probabilities={0: 0.2, 1: 0.6, 2: 0.2}, legend={}, confidence=0.4)
    result = compare([(a, b), (n1, n2), (s, s)])
    assert (result.pairs, result.changed, result.max_change) == (3, 1, 0.15)
    assert compare([]).rate == 0.0


def test_what_an_answer_decides_and_how_far_two_answers_moved():
    yes, no = Noul(p=0.5, confidence=0.0), Noul(p=0.4999, confidence=0.0)
    assert (decided(yes), decided(no)) == (True, False)  # an even noul decides yes
    with pytest.raises(TypeError, match="not an answer: 'billing'"):
        decided("billing")
    a = Choice(key="x", probabilities={"x": 0.6, "y": 0.4}, confidence=0.2)
    with pytest.raises(ValueError, match=r"the answers cover different options: \['x', 'y'\] vs \['x', 'z'\]"):
        probability_change(a, Choice(key="x", probabilities={"x": 0.6, "z": 0.4}, confidence=0.2))
    with pytest.raises(TypeError, match="answers of different types: Choice.* vs Noul"):
        probability_change(a, yes)
    with pytest.raises(TypeError, match="answers of different types: Noul.* vs Choice"):
        probability_change(yes, a)
    # The largest move is kept to six places: a move of 1e-7 is no move.
    assert compare([(yes, Noul(p=0.5000001, confidence=0.0))]).max_change == 0.0
    assert compare([(yes, Noul(p=0.500001, confidence=0.0))]).max_change == 1e-6


def test_answers_are_described_by_their_decision_and_probabilities():
    # The words of the independence check's failure message.
    assert describe(Choice(key="billing", probabilities={"billing": 0.9, "technical": 0.1}, confidence=0.8)) == \
        "'billing' (billing 0.9, technical 0.1)"
    assert describe(Score(level=2, expected=1.5, probabilities={1: 0.5, 2: 0.5}, legend={}, confidence=0.0)) == \
        "level 2 (1 0.5, 2 0.5)"
    assert describe(Noul(p=0.25, confidence=0.5)) == "p 0.25"


@contextlib.contextmanager
def held(url: str = "http://127.0.0.1:9", *, spec: str = "target", api_key: str | None = None,
         **options: Any) -> Iterator[ServerUnderTest]:
    """A ServerUnderTest of `url` held to `spec` with no observer, closed afterwards."""
    server = ServerUnderTest(url=url, spec_name=spec, api_key=api_key, **options)
    server.hold_to(spec, lambda exchange: None)
    try:
        yield server
    finally:
        server.close()


def test_a_response_is_described_by_its_status_media_type_and_the_start_of_its_body():
    # The words every failed check ends with: "expected HTTP 400 ..., got <this>".
    with held(api_key="sk-described-31f0") as server:
        server.keep_secret("sk-described-31f0")

        def answered(headers, body):
            return server.describe(Exchange(method="POST", url="http://127.0.0.1:9/v1/systemone", path="/v1/systemone",
                                            status=404, headers=headers, body=body, request_body=None, elapsed_s=0.0))

        assert answered({}, b"caf\xe9") == "HTTP 404 no Content-Type: caf\ufffd"
        assert answered({"content-type": "text/plain"}, b"x" * 300) == "HTTP 404 text/plain: " + "x" * 300
        assert answered({"content-type": "text/plain"}, b"x" * 301) == "HTTP 404 text/plain: " + "x" * 300 + "..."
        assert answered({}, b"") == "HTTP 404 no Content-Type: "
        assert answered({}, b'{"detail": "Bearer sk-described-31f0"}') == 'HTTP 404 no Content-Type: {"detail": "Bearer ***"}'


def test_a_server_that_drops_the_connection_is_not_reported_as_a_wait_that_ran_out():
    with ScriptedServer(default=ResetBeforeHeaders()) as dropping, held(dropping.url, timeout_s=30) as server, \
            pytest.raises(pytest.fail.Exception) as failed:
        server.send("GET", "/health")
    assert str(failed.value).startswith(f"GET /health: {dropping.url} closed the connection without a complete response (")
    assert "within" not in str(failed.value) and failed.value.__suppress_context__


def test_a_server_that_stops_answering_fails_the_check_naming_the_request_and_the_wait():
    key = "sk-silent-77aa"
    with ScriptedServer(default=Delay(5.0, Respond(200, {}))) as silent, \
            held(silent.url, api_key=key, timeout_s=0.3) as server, pytest.raises(pytest.fail.Exception) as failed:
        server.send("GET", "/health")
    assert str(failed.value) == f"GET /health: no response from {silent.url} within 0.3 s (ReadTimeout: timed out)"
    assert not failed.value.pytrace  # shown as its message alone, with no traceback into the kit
    assert key not in str(failed.value)


def test_the_suites_requests_say_what_sent_them_and_what_they_accept():
    # A server's operator can tell the suite's traffic apart (User-Agent) and every answer is JSON.
    with ScriptedServer(default=Respond(200, {"status": "ok"})) as server, \
            held(server.url, api_key="sk-agent-test-1234") as suite:
        suite.send("GET", "/health", observe=False)
        suite.post({"state": "s", "questions": {}}, observe=False)
        redacted = suite.redact("answered: Bearer sk-agent-test-1234")
    health, post = server.requests
    assert redacted == "answered: Bearer ***"
    for request in (health, post):
        assert request.header("user-agent") == "pytest-laya-server-contract"
        assert request.header("accept") == "application/json, application/problem+json"
        assert request.header("authorization") == "Bearer sk-agent-test-1234"
    assert post.header("content-type") == "application/json" and post.json() == {"state": "s", "questions": {}}


def test_the_suite_never_follows_a_redirect():
    # A redirect is the server's answer to judge, and following it would carry the key elsewhere.
    with ScriptedServer(default=Respond(307, b"", headers={"Location": "/elsewhere"})) as server, \
            held(server.url) as suite:
        answered = suite.send("GET", "/health", observe=False)
    assert answered.status == 307 and [r.path for r in server.requests] == ["/health"]


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2"])
def test_the_suite_goes_where_the_served_client_goes_whatever_the_proxy(proxy_from, host):
    # Its raw requests and its decisions reach the same server: loopback directly, as the client does.
    with ScriptedServer(default=Respond(502, "the proxy was used\n")) as proxy, \
            ScriptedServer(default=Respond(200, {"status": "ok"}), host=host) as server:
        proxy_from(proxy.url)
        with held(server.url) as suite:
            answered = suite.send("GET", "/health", observe=False)
    assert answered.status == 200 and proxy.requests == []


def test_a_decision_is_bounded_by_the_runs_wait_not_the_clients_default():
    # The served client's own default is 5 s; the suite waits what it was given (60 s unless told):
    # here 0.3 s, against a server answering in 1 s.
    with ScriptedServer(default=Delay(1.0, Respond(200, {}))) as slow, held(slow.url, timeout_s=0.3) as server, \
            pytest.raises(LayaCallError) as failed:
        server.decide("state", {"q": {"type": "noul", "instructions": "Is it?"}})
    assert failed.value.code == "deadline_exceeded" and "0.3s deadline" in str(failed.value)


def test_target_rules_broken_under_the_current_spec_are_listed_once_per_rule_with_where_they_were_seen():
    with held(spec="current") as server:
        def seen(path, status, body):
            server.observe(Exchange(method="POST", url="http://127.0.0.1:9" + path, path=path, status=status,
                                    headers={"content-type": "application/json"}, body=json.dumps(body).encode(),
                                    request_body=None, elapsed_s=0.0))

        # laya-serve's refusals: {"detail": ...}, where the target asks for a problem document.
        seen("/v1/systemone", 422, {"detail": "bad question"})
        seen("/v1/systemone", 413, {"detail": "too many questions"})
        seen("/v1/systemone/batch", 422, {"detail": "bad question"})
        lines = server.rule_gap_lines()
        # A body the current spec takes and the target does not (no served_by): its rule is listed too.
        seen("/v1/systemone", 200, {"answers": {"q": {"type": "noul", "noul": 0.5}}})
        with_body = server.rule_gap_lines()
    assert lines == [
        "/headers/content-type: expected one of ['application/problem+json'] "
        "[POST /v1/systemone 413, 422; POST /v1/systemone/batch 422]",
        "/headers/x-request-id: expected header X-Request-Id (required) "
        "[POST /v1/systemone 413, 422; POST /v1/systemone/batch 422]",
    ]
    assert "/body/served_by: expected a required property [POST /v1/systemone 200]" in with_body


def test_a_rule_gap_line_longer_than_the_summary_width_is_cut_to_it():
    seen = {"POST /v1/systemone": {422: None}}
    with held(spec="current") as server:
        server.rule_gaps = {("/body/a", "x" * 177): seen, ("/body/b", "y" * 178): seen}  # 220 and 221 characters
        whole, cut = server.rule_gap_lines()
    assert whole == f"/body/a: expected {'x' * 177} [POST /v1/systemone 422]" and len(whole) == 220
    assert cut == f"/body/b: expected {'y' * 178} [POST /v1/systemone 422]"[:217] + "..." and len(cut) == 220


@pytest.mark.parametrize("where, general", [
    ("/body/answers/q1/probabilities/x", "/body/answers/<question>/probabilities/x"),
    ("/body/results/0/answers/ticket-7/key", "/body/results/<i>/answers/<question>/key"),
    ("/body/results/first/answers", "/body/results/first/answers"),  # not an index; nothing after "answers"
    ("/answers/q/p", "/answers/<question>/p"),
    ("answers/q/p", "answers/q/p"),  # a pointer starts with "/": the first part is never a member
    ("/body/results/12", "/body/results/<i>"),
])
def test_a_rule_gap_is_listed_once_whatever_the_question_or_batch_index(where, general):
    assert _general_pointer(where) == general


# -- the summary notes cross pytest-xdist ----------------------------------------------------

def test_summary_notes_merge_from_workers_once_each():
    controller = LayaRun(mode="live", url=None, api_key=None, spec=None, cassette_dir=None, strict=True, report=None, checkpoint=None)
    worker = LayaRun(mode="live", url=None, api_key=None, spec=None, cassette_dir=None, strict=True, report=None, checkpoint=None)
    controller.note("server contract", "shared line")
    worker.note("server contract", "shared line")
    worker.note("measured", "a measurement")
    controller.merge(json.loads(json.dumps(worker.export())))
    assert controller.notes == {"server contract": ["shared line"], "measured": ["a measurement"]}


# -- (d) python -m pytest_laya check -------------------------------------------------------

def test_python_m_pytest_laya_check_runs_the_contract_end_to_end(reference_keyed, tmp_path):
    done = subprocess.run([sys.executable, "-m", "pytest_laya", "check", reference_keyed.url,
                           "--api-key", KEY], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert f"{CHECKS} passed" in done.stdout
    assert "held to the target spec (its Laya-Spec header says target)" in done.stdout
    assert "conformance (each server's responses, against each spec):" in done.stdout
    assert KEY not in done.stdout + done.stderr
    assert not (tmp_path / ".pytest_cache").exists()
    # The header names what is checked, not pytest's rootdir and config file of this isolated run.
    header = done.stdout.split("test session starts")[1].split("collected")[0]
    assert f"python -m pytest_laya check {reference_keyed.url}: the HTTP contract of a served Laya" in header
    assert "rootdir:" not in header and "configfile:" not in header and "dev/null" not in done.stdout
    # Progress lines show no path into the installed package.
    assert "suites/server.py" not in done.stdout.split("pytest-laya ==")[0]


@pytest.mark.parametrize("argv, words", [
    ([], "say what to run: check URL"),
    (["check"], "the following arguments are required: URL"),
    (["check", "localhost:8000"], "URL must be an http(s) URL such as http://127.0.0.1:8000, got 'localhost:8000'"),
    (["check", "http://127.0.0.1:8000", "--spec", "future"], "argument --spec: invalid choice: 'future'"),
    (["check", "http://127.0.0.1:8000/v1/systemone"], "URL must be an http(s) URL such as http://127.0.0.1:8000, got "
     "'http://127.0.0.1:8000/v1/systemone': it ends in /v1/systemone, which the client adds itself: drop it"),
    (["check", "http://127.0.0.1:8000", "--tolerance", "small"], "argument --tolerance: invalid float value: 'small'"),
    (["check", "http://127.0.0.1:8000", "--tolerance", "-1"], "--tolerance must be a number >= 0, got -1.0"),
])
def test_check_usage_errors_are_one_line(capsys, argv, words):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err and "usage: python -m pytest_laya check URL" in err


def test_check_hands_pytest_the_suite_and_the_key_only_as_its_option():
    args = pytest_arguments("http://127.0.0.1:8000", spec="target", api_key=KEY, extra=["-k", "health"])
    assert args[:5] == ["--pyargs", "pytest_laya.suites.server", "--laya-mode=live",
                        "--laya-url=http://127.0.0.1:8000", "--laya-spec=target"]
    # auto, the default, passes no --laya-spec: the suite reads the server's claim.
    assert not [a for a in pytest_arguments("http://127.0.0.1:8000") if a.startswith("--laya-spec")]
    assert [a for a in args if KEY in a] == [f"--laya-api-key={KEY}"]
    assert args[-2:] == ["-k", "health"] and "no:cacheprovider" in args
    # The behaviour options, only when given.
    assert not [a for a in args if "tolerance" in a or "invariance" in a]
    more = pytest_arguments("http://127.0.0.1:8000", tolerance=1e-3, require_invariance=True)
    assert "--laya-tolerance=0.001" in more and "--laya-require-invariance" in more


def test_check_speaks_its_own_words_in_process(pytester, monkeypatch):
    # The command's plugin (suites/check_command.py) in this process, over a keyed fake: the
    # header names the command and the URL, and a missing key is asked for by the command's flag.
    monkeypatch.delenv("LAYA_SERVED_API_KEY", raising=False)
    with FakeLayaServer(api_key=KEY) as fake:
        result = check_command(pytester, fake.url, "-k", "health_answers_status_ok")
        without_key = check_command(pytester, fake.url, api_key=None)
    assert result.ret == pytest.ExitCode.OK
    header = result.stdout.str().split("test session starts")[1].split("collected")[0]
    assert f"python -m pytest_laya check {fake.url}: the HTTP contract of a served Laya (pytest_laya.suites.server); " \
           f"pytest-laya {version('pytest-laya')}, " in header
    assert f"pytest {pytest.__version__}, Python " in header and "rootdir:" not in header
    assert "suites/server.py" not in result.stdout.str().split("server contract:")[0]
    assert without_key.ret == pytest.ExitCode.USAGE_ERROR
    without_key.stdout.fnmatch_lines(["*pass it with --api-key KEY (or set LAYA_SERVED_API_KEY)*"])
    assert "--laya-api-key" not in without_key.stdout.str()
    # -q: no header at all.
    with FakeLayaServer() as fake:
        quiet = check_command(pytester, fake.url, "-q", "-k", "health_answers_status_ok")
    assert "python -m pytest_laya check" not in quiet.stdout.str()


def test_every_exchange_observed_is_the_request_sent_with_its_answer_and_its_time():
    # What the observer gets (the plugin's report, a user's own observer) is the exchange as it happened.
    seen: list[Exchange] = []
    with ScriptedServer(default=Delay(0.2, Respond(200, {"status": "ok"}))) as server, held(server.url) as suite:
        suite.hold_to("target", seen.append)
        suite.post({"state": "s", "questions": {}})
    [exchange] = seen
    assert exchange.url == server.url + "/v1/systemone" and exchange.path == "/v1/systemone"
    assert exchange.request_body == b'{"state": "s", "questions": {}}'
    assert 0.2 <= exchange.elapsed_s < 5.0


def _held_to_the_target_spec(exchange: Exchange) -> None:
    """The plugin's observer in short: a response that breaks the target spec raises."""
    violations = Spec.target().violations(exchange.method, exchange.path, exchange.status, exchange.headers, exchange.body)
    if violations:
        raise SpecViolationError(exchange, "target", violations)


def test_a_broken_success_fails_at_once_and_broken_refusals_wait_each_on_its_own_line():
    def answered(status: int, body: Any) -> Exchange:
        return Exchange(method="POST", url="http://127.0.0.1:9/v1/systemone", path="/v1/systemone", status=status,
                        headers={"content-type": "application/json"}, body=json.dumps(body).encode(),
                        request_body=None, elapsed_s=0.0)

    refusals = [answered(400, {"detail": "bad state"}), answered(422, {"detail": "bad question"})]
    with held() as server:
        server.hold_to("target", _held_to_the_target_spec)
        for refusal in refusals:
            server.observe(refusal)  # a refusal's violations follow the words about its status
        waiting = server.pending_violations()
        assert server.pending_violations() == ""  # reported once
        with pytest.raises(pytest.fail.Exception) as failed:
            server.observe(answered(200, {"answers": {"q": {"type": "noul", "noul": 0.5}}}))  # no served_by
    expected = []
    for refusal in refusals:
        with pytest.raises(SpecViolationError) as broken:
            _held_to_the_target_spec(refusal)
        expected.append(str(broken.value))
    assert waiting == "\n".join(expected) and waiting.count("breaks the target spec") == 2
    assert str(failed.value).startswith("POST /v1/systemone -> 200 breaks the target spec")
    assert not failed.value.pytrace  # the violations alone, no traceback into the kit


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_a_failed_check_is_named_with_its_reason_in_80_columns_and_the_servers_bytes_escaped(pytester, monkeypatch,
                                                                                           workers):
    monkeypatch.setenv("COLUMNS", "80")
    fake = FakeLayaServer()

    def raw_bytes_for_bad_json(request: ReceivedRequest) -> Respond:
        response = fake.normal_response(request)
        if request.path == "/v1/systemone" and response.status == 400:
            return Respond(404, b"nope\x00\x1b[31mred", headers={"Content-Type": "text/plain"})
        return response

    with ScriptedServer(default=raw_bytes_for_bad_json) as broken:
        result = pytester.runpytest(*pytest_arguments(broken.url, extra=[*WITHOUT_UNUSED_PLUGINS, *workers, "-k", "malformed_json"]))
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    summary = out.split("short test summary info")[1].splitlines()[1:]
    assert summary[0].endswith("FAILED test_malformed_json_is_a_400")  # the check's name, no path
    reason = " ".join(line.strip() for line in summary[1:3])
    assert reason == ("a body that is not valid JSON: expected HTTP 400 malformed_request, got HTTP 404 "
                      "text/plain: nope\\x00\\x1b[31mred")
    assert all(len(line) <= 80 for line in summary)
    assert "\x00" not in out and "\x1b[31mred" not in out and "server.py" not in out


def test_a_spec_failure_in_check_summary_shows_its_violations_not_only_the_line_that_introduces_them(pytester,
                                                                                                      monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    fake = FakeLayaServer()

    def noul_out_of_range(request: ReceivedRequest) -> Respond:
        response = fake.normal_response(request)
        if request.path == "/v1/systemone" and response.status == 200:
            body = json.loads(json.dumps(response.body))  # a copy: the fake's own answer stays as it is
            for answer in body["answers"].values():
                if answer.get("type") == "noul":
                    answer["noul"] = 1.5
            return Respond(200, body, headers=response.headers)
        return response

    with ScriptedServer(default=noul_out_of_range) as broken:
        result = pytester.runpytest(*pytest_arguments(broken.url, extra=["-k", "every_question_in_order"]))
    summary = result.stdout.str().split("short test summary info")[1].splitlines()[1:]
    assert summary[0].endswith("FAILED test_a_decision_answers_every_question_in_order")
    reason = " ".join(line.strip() for line in summary[1:] if not line.startswith("="))
    assert reason == "POST /v1/systemone -> 200 breaks the target spec (1 violation): /body/answers/refund/noul: expected <= 1, got 1.5"
    assert all(len(line) <= 80 for line in summary)


def test_check_help_shows_the_pytest_passthrough(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["check", "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "[-- PYTEST_ARGS...]" in out and "Arguments after -- go to pytest unchanged" in out


def test_check_names_an_unreachable_server_by_its_url_argument_not_laya_url(capsys):
    from pytest_laya.faults import closed_loopback_url

    url = closed_loopback_url()
    assert main(["check", url]) == pytest.ExitCode.USAGE_ERROR
    err = capsys.readouterr().err
    assert err == f"ERROR: URL {url} cannot be reached (connection_refused): start the server or fix the URL\n"

"""Every check of the server contract fails its broken twin, with a message naming the defect.

The table is `SERVER_TWINS` (tests/contract/server_twins.py): each twin is a loopback server
answering as the fake does but for one defect. The suite runs in full against each (pytester,
as a user runs it, with a key so the token checks run): exactly the checks the table names fail,
and the check's failure message says the table's words. The two measurement checks cannot fail
only with --laya-require-invariance (`REPORTED_BY_DEFAULT`): without it, against a server that
moves what they measure, they pass and the summary shows the measurement. The meta-test compares the tables with the suite's own checks.
"""

from __future__ import annotations

# pytester's in-process runs drop modules first imported inside them; importing the network
# stack here keeps one copy of each class, so exceptions map the same in every inner run.
import httpcore  # noqa: F401
import pytest

from pytest_laya.fake import FakeLayaServer
from pytest_laya.faults import ReceivedRequest, Respond, ScriptedServer
from pytest_laya.suites import server as server_suite
from tests.contract.server_twins import KEY, REPORTED_BY_DEFAULT, SERVER_TWINS, BrokenServer, answering
from tests.contract.twin_coverage import checks_of, coverage_problems

TABLE = "SERVER_TWINS in tests/contract/server_twins.py"
CHECKS = checks_of(server_suite)
CASES = [pytest.param(check, twin, id=twin.defect) for check, twins in SERVER_TWINS.items() for twin in twins]


def run_suite(pytester, url: str, spec: str, *more: str):
    # --tb=native: pytest formats every target gap's xfail as a traceback before reporting it as
    # xfailed, and its own styles parse the suite's modules for each entry (about a fifth of a
    # run's CPU). A check's own failure reads the same in any style (pytrace=False), and a crash
    # inside a check still shows the kit's paths, which the checks below look for.
    return pytester.runpytest("-p", "no:asyncio", "-p", "no:cacheprovider", "--tb=native", "--pyargs",
                              "pytest_laya.suites.server", "--laya-mode=live", f"--laya-url={url}",
                              f"--laya-spec={spec}", f"--laya-api-key={KEY}", *more)


def test_every_check_of_the_server_contract_has_a_broken_twin():
    problems = coverage_problems("pytest_laya.suites.server", CHECKS, TABLE, SERVER_TWINS)
    # A check reported by default is shown failing where invariance is required.
    problems += [f"{check} is reported by default, but no twin fails it under --laya-require-invariance"
                 for check in REPORTED_BY_DEFAULT
                 if not any("--laya-require-invariance" in twin.options for twin in SERVER_TWINS.get(check, ()))]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("check, twin", CASES)
def test_the_suite_fails_each_broken_server_on_exactly_the_check_for_its_defect(pytester, check: str, twin: BrokenServer):
    with ScriptedServer(default=answering(twin)) as broken:
        result = run_suite(pytester, broken.url, twin.spec, *twin.options)
    failed = [report for report in result.reprec.getreports("pytest_runtest_logreport") if report.failed]
    reports = {report.nodeid.split("::")[-1]: report.longrepr for report in failed}
    # The exception's own text: where the words stand in it matters, not the check's source.
    failures = {name: longrepr.reprcrash.message for name, longrepr in reports.items()}
    assert sorted(failures) == sorted({check, *twin.also_fails}), f"{twin.defect}: {failures}"
    # Each fails in the check itself, not in a fixture's teardown afterwards (an error, not a failure).
    assert all(report.when == "call" for report in failed), [(r.nodeid, r.when) for r in failed]
    # The check's own failure (pytest.fail without a traceback), not a crash inside the check,
    # whose traceback would show the check's source, words included; no kit source at all.
    assert reports[check].reprcrash.message.startswith("Failed: "), failures[check]
    assert "pytest_laya/suites/" not in str(reports[check]), str(reports[check])
    assert twin.words in failures[check], failures[check]
    assert KEY not in result.stdout.str()


@pytest.mark.parametrize("check", sorted(REPORTED_BY_DEFAULT))
def test_without_require_invariance_a_measure_is_reported_not_failed(pytester, check: str):
    measured = REPORTED_BY_DEFAULT[check]
    with ScriptedServer(default=answering(measured)) as server:
        result = run_suite(pytester, server.url, "target")
    result.assert_outcomes(passed=len(CHECKS))
    result.stdout.fnmatch_lines(["behaviour measured:", measured.summary])


@pytest.mark.parametrize(("refusal", "outcome"), [
    (Respond(422, {"detail": "question 'mood': unknown type 'ranking'; question 'team': a choice needs criteria"}),
     "passed"),
    (Respond(422, {"detail": 'invalid questions: "mood" (unknown type), "team" (no criteria)'}), "passed"),
    # FastAPI's shape: a list of errors, each question named in one of them.
    (Respond(422, {"detail": [
        {"loc": ["body", "questions", "mood", "type"], "msg": "question 'mood': unknown type", "type": "value_error"},
        {"loc": ["body", "questions", "team"], "msg": "question 'team': no criteria", "type": "value_error"}]}),
     "passed"),
    # Pydantic's own errors: each question named only in its `loc`.
    (Respond(422, {"detail": [
        {"loc": ["body", "questions", "mood", "type"], "msg": "Input should be 'choice', 'score' or 'noul'",
         "type": "literal_error"},
        {"loc": ["body", "questions", "team", "criteria"], "msg": "Field required", "type": "missing"}]}), "passed"),
    # laya-serve names the first invalid question only.
    (Respond(422, {"detail": "question 'mood': unknown type 'ranking'"}), "xfailed"),
    # Text is no JSON detail: the current spec's violation fails the check before its words are read.
    (Respond(422, "invalid questions: 'mood', 'team'\n", content_type="text/plain"), "failed"),
])
def test_under_the_current_spec_naming_only_some_invalid_questions_is_a_target_gap(pytester, refusal: Respond,
                                                                                   outcome: str):
    # A current-spec 422 is free text: each invalid question must appear in it, in either quote.
    fake = FakeLayaServer(flavor="laya-serve-0.4.15")

    def respond(request: ReceivedRequest) -> Respond:
        response = fake.normal_response(request)
        if response.status == 422 and b"'mood'" in response.payload and b'"team"' in request.body:
            return refusal
        return response

    with ScriptedServer(default=respond) as server:
        result = run_suite(pytester, server.url, "current", "-rx", "-k", "test_every_invalid_question_is_named")
    result.assert_outcomes(**{outcome: 1})
    if outcome == "xfailed":
        result.stdout.fnmatch_lines(["*target gap: the 422 names only some of the invalid questions (HTTP 422*); "
                                     "the target names each one in errors[]"])
    if outcome == "failed":
        result.stdout.fnmatch_lines(["*POST /v1/systemone -> 422 breaks the current spec*"])


def test_a_required_invariance_failure_names_the_flag_of_the_command_that_was_run(pytester, capsys):
    # `check` takes --require-invariance; the pytest suite --laya-require-invariance.
    from pytest_laya.__main__ import main

    twin = SERVER_TWINS["test_option_order_invariance"][0]
    with ScriptedServer(default=answering(twin)) as broken:
        suite = run_suite(pytester, broken.url, twin.spec, "--laya-require-invariance", "-k", "option_order")
        suite.stdout.fnmatch_lines(["*invariance is required (--laya-require-invariance)*"])
        capsys.readouterr()
        status = main(["check", broken.url, "--api-key", KEY, "--require-invariance", "--", "-k", "option_order"])
    out = capsys.readouterr().out
    assert status == pytest.ExitCode.TESTS_FAILED
    assert "invariance is required (--require-invariance)" in " ".join(out.split()), out
    assert "--laya-require-invariance" not in out

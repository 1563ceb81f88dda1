"""The contract run as a downstream suite runs it: a correct adapter passes it whatever the async
setup, and a model that cannot be checked in full is told why.

Each run is a real pytest run of a downstream-style suite (pytester). The models are pure
Python (tests/contract/decision_model_twins.py, over `FakeLaya` answers), so these runs never
load torch, and they run with pytest-asyncio in strict mode, in auto mode and not loaded at all.
A broken model for every check, each failing exactly that check: test_contract_twins.py.

`decision_problems` is public: a user runs it on any decision (one replayed from a cassette, one
from their own adapter), so an odd answer object comes back as a message naming the answer and
what is wrong, never as a crash. The scripted models are what a downstream class gives as
`scripted_decision_model`: they answer exactly what they were given. (Both found missing by
mutation testing, docs/testing.md.)
"""

from __future__ import annotations

import asyncio
import re
from types import SimpleNamespace

import pytest

from pytest_laya.contract import (
    DecisionModelContract,
    decision_problems,
    run_coroutine,
    scripted_laya_model,
    scripted_served_model,
)
from pytest_laya.wire.decision import SUM_TOLERANCE

CONTRACT_TESTS = sorted(name for name in dir(DecisionModelContract) if name.startswith("test_"))

SUITES = '''
import pytest

from pytest_laya import DecisionModelContract
from tests.contract.contract_classes import ContractWith
from tests.contract.decision_model_twins import ChoiceOnlyModel, FakeLayaModel, LaxModel


class TestFakeLayaAdapter(ContractWith):
    model = scripted = FakeLayaModel


class TestChoiceOnlyAdapter(ContractWith):
    model = scripted = ChoiceOnlyModel


class TestWithoutAScriptedModel(DecisionModelContract):
    @pytest.fixture
    def decision_model(self):
        return FakeLayaModel()


class TestLaxAboutMalformedAnswers(ContractWith):
    model = scripted = LaxModel


class TestNoFixture(DecisionModelContract):
    pass
'''

SCRIPTED = {
    "test_an_answer_with_an_option_never_offered_is_a_call_error",
    "test_an_answer_missing_an_option_is_a_call_error",
    "test_an_answer_with_a_probability_outside_unit_range_is_a_call_error",
    "test_an_answer_whose_probabilities_do_not_sum_to_one_is_a_call_error",
}


#: What each answer-validation check's failure calls its malformed answers.
SCRIPTED_WHAT = {
    "test_an_answer_with_an_option_never_offered_is_a_call_error": "foreign key",
    "test_an_answer_missing_an_option_is_a_call_error": "short distribution",
    "test_an_answer_with_a_probability_outside_unit_range_is_a_call_error": "out of range",
    "test_an_answer_whose_probabilities_do_not_sum_to_one_is_a_call_error": "not summing to one",
}


def outcomes(reprec) -> dict[str, dict[str, set[str]]]:
    """class name -> outcome -> test names, from an inline run's call (and setup) reports."""
    table: dict[str, dict[str, set[str]]] = {}
    for report in reprec.getreports("pytest_runtest_logreport"):
        if report.when == "teardown" or (report.when == "setup" and report.passed):
            continue
        _, cls, test = report.nodeid.split("::")
        table.setdefault(cls, {}).setdefault(report.outcome, set()).add(test)
    return table


@pytest.fixture
def suite(pytester):
    pytester.makepyfile(test_adapters=SUITES)
    # pytest-asyncio (when loaded) warns on every run without it; the checks have no async fixtures.
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.syspathinsert()
    return pytester


@pytest.mark.parametrize("asyncio_setup", [("-p", "no:asyncio"), ("-o", "asyncio_mode=strict"), ("-o", "asyncio_mode=auto")],
                         ids=["no-pytest-asyncio", "asyncio-strict", "asyncio-auto"])
def test_a_correct_adapter_passes_every_check_whatever_the_async_setup(suite, asyncio_setup):
    reprec = suite.inline_run(*asyncio_setup, "-p", "no:cacheprovider", "-k", "TestFakeLayaAdapter or TestChoiceOnlyAdapter")
    table = outcomes(reprec)
    assert table["TestFakeLayaAdapter"] == {"passed": set(CONTRACT_TESTS)}
    # A choice-only model is not failed for score or noul: those checks do not apply to it.
    choice_only = table["TestChoiceOnlyAdapter"]
    assert "failed" not in choice_only
    assert choice_only["skipped"] == {"test_score_level_and_expected_value_match_the_probabilities",
                                      "test_noul_p_and_confidence_are_in_unit_range"}


def test_a_choice_only_model_must_refuse_score_and_noul_questions_and_is_told_why(suite):
    result = suite.runpytest("-p", "no:cacheprovider", "-rs", "-k", "TestChoiceOnlyAdapter")
    result.stdout.fnmatch_lines(["*choice-only-adapter declares question_types ('choice',): it answers no score questions*"])


def contract_over_twin(pytester, defect: str) -> None:
    """A downstream-style module running the contract on the twin named `defect`, with no scripted model."""
    pytester.makepyfile(test_undeclared=f"""
import pytest

from pytest_laya import DecisionModelContract
from tests.contract.decision_model_twins import twin_named


class TestTwin(DecisionModelContract):
    @pytest.fixture
    def decision_model(self):
        return twin_named({defect!r}).model()
""")
    pytester.syspathinsert()


def test_a_model_declaring_no_question_types_is_told_so_and_every_question_check_skips_saying_why(pytester):
    contract_over_twin(pytester, "no-question-types")
    result = pytester.runpytest("-p", "no:asyncio", "-p", "no:cacheprovider", "-rfs")
    result.assert_outcomes(failed=2, passed=1, skipped=17)  # declarations, and the refusal of undeclared types
    result.stdout.fnmatch_lines(["*AssertionError: question_types must name some of *, each once; got ()"])
    # Every check that sends questions says why it cannot.
    reasons = {line.split(": ", 1)[1]: line.split()[1] for line in result.stdout.lines if line.startswith("SKIPPED")}
    assert reasons == {
        # (one entry per reason: the behaviour checks' skips, from their own lines, are counted apart)
        "undeclared-adapter declares question_types (): it answers none of the contract's questions": "[1]",
        "undeclared-adapter declares question_types (): it answers no choice questions": "[1]",
        "undeclared-adapter declares question_types (): it answers no score questions": "[1]",
        "undeclared-adapter declares question_types (): it answers no noul questions": "[1]",
        "no scripted_decision_model fixture: give the class one (a factory answers -> model) so the answer-validation "
        "checks can run": "[4]",
    }, reasons


def test_without_a_scripted_model_the_answer_validation_checks_skip_and_say_why(suite):
    result = suite.runpytest("-p", "no:cacheprovider", "-rs", "-k", "TestWithoutAScriptedModel")
    result.assert_outcomes(passed=len(CONTRACT_TESTS) - len(SCRIPTED), skipped=len(SCRIPTED))
    result.stdout.fnmatch_lines(["*no scripted_decision_model fixture: give the class one (a factory answers -> model)*"])


def test_a_model_that_turns_malformed_answers_into_decisions_fails_every_answer_validation_check(suite):
    table = outcomes(suite.inline_run("-p", "no:cacheprovider", "-k", "TestLaxAboutMalformedAnswers"))
    assert table["TestLaxAboutMalformedAnswers"]["failed"] == SCRIPTED
    result = suite.runpytest("-p", "no:cacheprovider", "-k", "TestLaxAboutMalformedAnswers and never_offered")
    result.stdout.fnmatch_lines(["*'choice': 'sales'*became a Decision*instead of raising LayaCallError*"])


def test_a_subclass_without_a_decision_model_fixture_is_told_what_to_add(suite):
    result = suite.runpytest("-p", "no:cacheprovider", "-k", "TestNoFixture and identity")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*TestNoFixture subclasses DecisionModelContract but has no decision_model fixture*"])


def test_the_async_check_runs_even_from_inside_a_running_event_loop():
    async def from_async_code():
        # An async-first runner calls sync tests with its loop running; asyncio.run cannot nest.
        return run_coroutine(lambda: asyncio.sleep(0, result="answered"))

    assert asyncio.run(from_async_code()) == "answered"


# --------------------------------------------------------------------------- decision_problems and the scripted models

URGENCY = {"urgency": {"type": "score", "instructions": "Urgency?", "criteria": ["low", "medium", "high"]}}


def score_decision(**answer) -> SimpleNamespace:
    return SimpleNamespace(answers={"urgency": SimpleNamespace(type="score", confidence=0.5, **answer)})


@pytest.mark.parametrize(("answer", "problem"), [
    ({}, "probabilities must be a mapping, got NoneType"),
    ({"probabilities": {0: 0.5, 1: 0.5, 2: 0.5}, "level": 0, "expected": 1.0},
     "probabilities sum to 1.5000, not 1 within 0.02"),
    ({"probabilities": [0.2, 0.5, 0.3]}, "probabilities must be a mapping, got list"),
    ({"probabilities": {0: 0.5, 1: 0.5}}, "probabilities must cover exactly the levels [0, 1, 2], got [0, 1]"),
    # Levels of mixed types (a model that names them): reported, not a TypeError from sorting them.
    ({"probabilities": {0: 0.5, "high": 0.5}}, "probabilities must cover exactly the levels [0, 1, 2], got [0, 'high']"),
    ({"probabilities": {0: 0.2, 1: 0.5, 2: 0.3}, "level": 0, "expected": 1.1},
     "level 0 (p=0.2) is not the most probable level: 1 is (p=0.5)"),
])
def test_a_broken_score_answer_is_reported_by_name_never_raised(answer, problem):
    assert decision_problems(URGENCY, score_decision(**answer)) == [f"answer 'urgency': {problem}"]


def test_a_score_answer_without_a_level_or_expected_value_is_reported_twice():
    answer = score_decision(probabilities={0: 0.2, 1: 0.5, 2: 0.3})
    assert decision_problems(URGENCY, answer) == ["answer 'urgency': level None is not one of the levels [0, 1, 2]",
                                                  "answer 'urgency': expected level must be a number, got None"]


# How far the expected level may stray from the probabilities' mean: SUM_TOLERANCE per step
# between the lowest and highest level, and 0.001 for the 4-decimal rounding of each.
THREE_LEVELS_BOUND = SUM_TOLERANCE * 2 + 1e-3
CERTAINLY_LOW = {0: 1.0, 1: 0.0, 2: 0.0}
CERTAINLY_HIGH = {0: 0.0, 1: 0.0, 2: 1.0}


@pytest.mark.parametrize(("answer", "problem"), [
    # Inside the tolerance, to its edge: kept.
    ({"probabilities": {0: 0.2, 1: 0.5, 2: 0.3}, "level": 1, "expected": 1.14}, None),
    ({"probabilities": CERTAINLY_LOW, "level": 0, "expected": THREE_LEVELS_BOUND}, None),
    ({"probabilities": CERTAINLY_LOW, "level": 0, "expected": 0}, None),
    ({"probabilities": CERTAINLY_LOW, "level": 0, "expected": -1e-9}, None),
    ({"probabilities": CERTAINLY_HIGH, "level": 2, "expected": 2}, None),
    ({"probabilities": CERTAINLY_HIGH, "level": 2, "expected": 2 + 1e-9}, None),
    # A level within 1e-9 of the most probable is the most probable (a tie, rounded).
    ({"probabilities": {0: 0.5 - 1e-9, 1: 0.5, 2: 0.0}, "level": 0, "expected": 0.5}, None),
    # Past it, or outside the levels however close to the mean: reported.
    ({"probabilities": {0: 0.2, 1: 0.5, 2: 0.3}, "level": 1, "expected": 1.142},
     "expected level 1.142 disagrees with its probabilities (their mean is 1.1000)"),
    ({"probabilities": CERTAINLY_LOW, "level": 0, "expected": -0.03},
     "expected level -0.03 disagrees with its probabilities (their mean is 0.0000)"),
    ({"probabilities": CERTAINLY_HIGH, "level": 2, "expected": 2.03},
     "expected level 2.03 disagrees with its probabilities (their mean is 2.0000)"),
    ({"probabilities": CERTAINLY_LOW, "level": 0, "expected": "low"}, "expected level must be a number, got 'low'"),
    ({"probabilities": CERTAINLY_LOW, "level": 0, "expected": True}, "expected level must be a number, got True"),
    ({"probabilities": CERTAINLY_LOW, "level": 0, "expected": 0, "legend": {0: "low", 2: "high", 3: "urgent"}},
     "legend names levels [3] the question does not have"),
    # Levels a model names by word beside numbers: listed, not a TypeError from sorting them.
    ({"probabilities": CERTAINLY_LOW, "level": 0, "expected": 0, "legend": {0: "low", "top": "high", 3: "urgent"}},
     "legend names levels [3, 'top'] the question does not have"),
])
def test_the_expected_level_and_legend_are_held_to_the_probabilities_and_the_levels(answer, problem):
    assert decision_problems(URGENCY, score_decision(**answer)) == ([f"answer 'urgency': {problem}"] if problem else [])


def test_with_two_levels_the_expected_level_may_stray_one_step_of_tolerance():
    yes_no = {"ok": {"type": "score", "instructions": "OK?", "criteria": ["no", "yes"]}}
    answer = SimpleNamespace(type="score", confidence=0.5, probabilities={0: 0.0, 1: 1.0}, level=1)
    assert decision_problems(yes_no, SimpleNamespace(answers={"ok": SimpleNamespace(**vars(answer), expected=0.98)})) == []
    assert decision_problems(yes_no, SimpleNamespace(answers={"ok": SimpleNamespace(**vars(answer), expected=0.97)})) == [
        "answer 'ok': expected level 0.97 disagrees with its probabilities (their mean is 1.0000)"]


@pytest.mark.parametrize(("make", "name"), [
    (scripted_served_model, "served-laya (scripted)"),
    (scripted_laya_model, "laya-in-process (scripted)"),
])
def test_a_scripted_model_answers_exactly_what_it_was_given(make, name):
    answers = {"q": {"type": "noul", "noul": 0.25, "confidence": 0.5}}
    model = make(answers)
    answers["q"]["noul"] = 0.9  # the caller's dict, changed afterwards: the model keeps its own copy
    try:
        for _ in range(2):  # and answers the same each time
            decision = model.decide("s", {"q": {"type": "noul", "instructions": "Refund?"}})
            assert (decision["q"].p, decision["q"].confidence) == (0.25, 0.5)
            assert (decision.usage.input_tokens, decision.usage.output_tokens) == (1, 0)
        assert model.name == name
        assert decision.model == model.model == "scripted@scripted"
    finally:
        model.close()


# A decision that breaks every check once: each check alone reports exactly its own problem.
EVERY_TYPE = {
    "team": {"type": "choice", "instructions": "Which team?", "criteria": ["billing", "technical", "sales"]},
    "urgency": URGENCY["urgency"],
    "refund": {"type": "noul", "instructions": "Refund?"},
}
BROKEN_EVERYWHERE = SimpleNamespace(answers={
    "refund": SimpleNamespace(type="noul", p=1.5, confidence=None),
    "team": SimpleNamespace(type="choice", key="technical", confidence=1.2,
                            probabilities={"billing": 0.5, "technical": 0.2, "other": 0.1}),
    "urgency": SimpleNamespace(type="score", confidence=0.5, probabilities={0: 0.2, 1: 0.5, 2: 0.3}, level=0,
                               expected=1.1),
})
EACH_CHECK_ALONE = {
    "answers": ["answers ['refund', 'team', 'urgency'] are not one per question in the order asked "
                "['team', 'urgency', 'refund']"],
    "choice_coverage": ["answer 'team': probabilities must cover exactly the offered options "
                        "['billing', 'technical', 'sales'] (missing ['sales'], not offered ['other'])"],
    "choice_distribution": ["answer 'team': probabilities sum to 0.8000, not 1 within 0.02"],
    "chosen": ["answer 'team': choice 'technical' (p=0.2) is not the most probable option: 'billing' is (p=0.5)"],
    "score": ["answer 'urgency': level 0 (p=0.2) is not the most probable level: 1 is (p=0.5)"],
    "noul": ["answer 'refund': P(true) 1.5 is outside [0, 1]"],
    "confidence": ["answer 'team': confidence 1.2 is outside [0, 1]"],
}


@pytest.mark.parametrize("check", sorted(EACH_CHECK_ALONE))
def test_decision_problems_reports_only_the_checks_asked_for(check):
    assert decision_problems(EVERY_TYPE, BROKEN_EVERYWHERE, checks=(check,)) == EACH_CHECK_ALONE[check]
    assert decision_problems(EVERY_TYPE, BROKEN_EVERYWHERE, checks=()) == []


def test_decision_problems_reports_every_check_by_default_in_the_order_asked():
    problems = decision_problems(EVERY_TYPE, BROKEN_EVERYWHERE)
    assert problems == [*EACH_CHECK_ALONE["answers"], *EACH_CHECK_ALONE["confidence"], *EACH_CHECK_ALONE["choice_coverage"],
                        *EACH_CHECK_ALONE["choice_distribution"], *EACH_CHECK_ALONE["chosen"], *EACH_CHECK_ALONE["score"],
                        *EACH_CHECK_ALONE["noul"]]


def test_decision_problems_names_an_unknown_check_an_answer_of_another_type_and_a_decision_without_answers():
    with pytest.raises(ValueError, match=r"unknown checks \['order'\]; use some of \['answers', 'choice_coverage'"):
        decision_problems(EVERY_TYPE, BROKEN_EVERYWHERE, checks=("answers", "order"))
    swapped = SimpleNamespace(answers={"team": SimpleNamespace(type="noul", p=0.5, confidence=0.5)})
    assert decision_problems({"team": EVERY_TYPE["team"]}, swapped) == [
        "answer 'team' is a noul, but a choice question was asked"]
    assert decision_problems({"team": EVERY_TYPE["team"]}, swapped, checks=("noul", "confidence")) == []
    assert decision_problems(EVERY_TYPE, {"team": None}) == ["the decision has no answers mapping (got dict)"]
    # A choice answer with an offered key but no probability for it, or a non-number one.
    for probabilities in ({"billing": 0.5, "sales": 0.5}, {"billing": 0.5, "technical": "0.3", "sales": 0.2}):
        gap = SimpleNamespace(answers={"team": SimpleNamespace(type="choice", key="technical", confidence=0.5,
                                                               probabilities=probabilities)})
        assert decision_problems({"team": EVERY_TYPE["team"]}, gap, checks=("chosen",)) == [
            "answer 'team': chose 'technical' but gave it no probability"]
    # Another option's probability not a number: the distribution check's to report, never a crash here.
    odd = SimpleNamespace(answers={"team": SimpleNamespace(type="choice", key="billing", confidence=0.5,
                                                           probabilities={"billing": 0.5, "technical": "0.3", "sales": 0.2})})
    assert decision_problems({"team": EVERY_TYPE["team"]}, odd, checks=("chosen",)) == []


SCRIPTED_MISTAKES = '''
from pytest_laya.wire.errors import LayaCallError, LayaConfigError
from tests.contract.contract_classes import ContractWith
from tests.contract.decision_model_twins import ChoosesTheLeastProbable, FakeLayaModel


class RefusesEverything(FakeLayaModel):
    def decide(self, state, questions):
        raise LayaCallError("the script is empty", code="bad_answer")


def raising(error):
    class Raising(FakeLayaModel):
        def decide(self, state, questions):
            try:
                return super().decide(state, questions)
            except LayaCallError as exc:
                raise error(f"refused: {exc.code}") from None
    return Raising


class NoulOnly(FakeLayaModel):
    question_types = ("noul",)


class Base(ContractWith):
    model = FakeLayaModel


class TestRefusesWellFormed(Base):
    scripted = RefusesEverything


class TestBreaksWellFormed(Base):
    scripted = ChoosesTheLeastProbable


class TestConfigErrorForMalformed(Base):
    scripted = raising(lambda message: LayaConfigError(message, code="invalid_question"))


class TestValueErrorForMalformed(Base):
    scripted = raising(ValueError)


class TestScriptsNoulOnly(Base):
    scripted = NoulOnly
'''


@pytest.mark.parametrize(("cls", "words"), [
    ("TestRefusesWellFormed", "a well-formed scripted choice answer was refused (the script is empty [bad_answer]): "
                              "the scripted model does not answer what it is given"),
    ("TestBreaksWellFormed", "a well-formed scripted choice answer came back broken: [\"answer 'q': choice 'technical' "
                             "(p=0.3) is not the most probable option: 'billing' is (p=0.7)\"]"),
    ("TestConfigErrorForMalformed", "raised LayaConfigError (refused: bad_answer [invalid_question]), not LayaCallError: "
                                    "a bad answer is the call failing, not the caller's setup"),
    ("TestValueErrorForMalformed", "raised ValueError (refused: bad_answer), not LayaCallError"),
])
def test_a_scripted_model_that_misbehaves_fails_the_answer_checks_saying_how(pytester, cls, words):
    pytester.makepyfile(test_scripted=SCRIPTED_MISTAKES)
    pytester.syspathinsert()
    reprec = pytester.inline_run("-p", "no:asyncio", "-p", "no:cacheprovider", "-k", f"{cls} and call_error")
    failed = {r.nodeid.split("::")[-1]: r.longrepr.reprcrash.message
              for r in reprec.getreports("pytest_runtest_logreport") if r.failed}
    assert set(failed) == SCRIPTED, failed
    for check, message in failed.items():
        head, *lines = message.splitlines()
        assert head == f"Failed: malformed answers ({SCRIPTED_WHAT[check]}) must raise LayaCallError:", message
        # One line per malformed answer the check scripts (or one for the refused well-formed one).
        assert lines and all(line.startswith("  ") for line in lines), message
        assert any(words in line for line in lines), message
    if cls == "TestConfigErrorForMalformed":  # each of the three malformed choices and scores, on its line
        lines = failed["test_an_answer_with_an_option_never_offered_is_a_call_error"].splitlines()[1:]
        assert len(lines) == 3 and all(re.fullmatch(r"  \{'type': '(choice|score)'.*\} " + re.escape(words), line)
                                       for line in lines), lines


def test_answer_checks_skip_when_the_scripted_model_answers_none_of_their_types(pytester):
    pytester.makepyfile(test_scripted=SCRIPTED_MISTAKES)
    pytester.syspathinsert()
    result = pytester.runpytest("-p", "no:asyncio", "-p", "no:cacheprovider", "-rs", "-k", "TestScriptsNoulOnly and call_error")
    result.assert_outcomes(skipped=3, passed=1)  # the out-of-range check scripts yes/no answers too
    result.stdout.fnmatch_lines(["*the scripted model answers none of the question types this check scripts (foreign_key)*",
                                 "*(short_distribution)*", "*(not_summing_to_one)*"])


def test_decision_problems_reports_answers_missing_their_members_by_name_never_raising():
    # Answer objects from an adapter that left members out: each gap is a problem, not an AttributeError.
    bare = SimpleNamespace(answers={
        "team": SimpleNamespace(type="choice"),
        "urgency": SimpleNamespace(),
        "refund": SimpleNamespace(type="noul"),
    })
    assert decision_problems(EVERY_TYPE, bare) == [
        "answer 'team': confidence must be a number, got None",
        "answer 'team': probabilities must be a mapping, got NoneType",
        "answer 'urgency' is a SimpleNamespace, but a score question was asked",
        "answer 'refund': P(true) must be a number, got None",
    ]
    listed = SimpleNamespace(answers={"team": SimpleNamespace(type="choice", key="billing", confidence=0.5,
                                                              probabilities=[0.5, 0.3, 0.2])})
    assert decision_problems({"team": EVERY_TYPE["team"]}, listed) == [
        "answer 'team': probabilities must be a mapping, got list"]
    keyless = SimpleNamespace(answers={"team": SimpleNamespace(type="choice", confidence=0.5,
                                                               probabilities={"billing": 0.5, "technical": 0.3, "sales": 0.2})})
    assert decision_problems({"team": EVERY_TYPE["team"]}, keyless) == [
        "answer 'team': choice None is not among the options ['billing', 'technical', 'sales']"]


def test_decision_problems_judges_every_answer_after_a_missing_or_mistyped_one():
    later_broken = {"team": SimpleNamespace(type="choice", key="billing", confidence=0.5,
                                            probabilities={"billing": 0.5, "technical": 0.3, "sales": 0.2}),
                    "refund": SimpleNamespace(type="noul", p=2.0, confidence=0.5)}
    mistyped = SimpleNamespace(answers={"urgency": SimpleNamespace(type="noul", p=0.5, confidence=0.5), **later_broken})
    missing = SimpleNamespace(answers=later_broken)
    questions = {"urgency": URGENCY["urgency"], "team": EVERY_TYPE["team"], "refund": EVERY_TYPE["refund"]}
    assert decision_problems(questions, mistyped, checks=("answers", "noul")) == [
        "answer 'urgency' is a noul, but a score question was asked", "answer 'refund': P(true) 2.0 is outside [0, 1]"]
    assert decision_problems(questions, missing, checks=("noul",)) == ["answer 'refund': P(true) 2.0 is outside [0, 1]"]


def test_a_chosen_option_within_1e_9_of_the_most_probable_is_the_most_probable():
    tie = SimpleNamespace(answers={"team": SimpleNamespace(type="choice", key="billing", confidence=0.5,
                                                           probabilities={"billing": 0.5 - 1e-9, "technical": 0.5, "sales": 0.0})})
    assert decision_problems({"team": EVERY_TYPE["team"]}, tie, checks=("chosen",)) == []


def test_a_check_reports_every_request_after_one_the_model_refused(pytester):
    pytester.makepyfile(test_both="""
import pytest

from pytest_laya import DecisionModelContract
from tests.contract.decision_model_twins import ProbabilitiesNotSummingToOne, RefusesConversationStates


class RefusesAndMiscounts(RefusesConversationStates, ProbabilitiesNotSummingToOne):
    pass


class TestBoth(DecisionModelContract):
    @pytest.fixture
    def decision_model(self):
        return RefusesAndMiscounts()
""")
    pytester.syspathinsert()
    reprec = pytester.inline_run("-p", "no:asyncio", "-p", "no:cacheprovider", "-k", "sum_to_one")
    [failed] = [r for r in reprec.getreports("pytest_runtest_logreport") if r.failed]
    lines = failed.longrepr.reprcrash.message.splitlines()
    assert lines[1:] == [
        "  en-choice-2: answer 'team': probabilities sum to 0.6000, not 1 within 0.02",
        "  de-choice-3: answer 'team': probabilities sum to 0.6000, not 1 within 0.02",
        "  en-conversation-choice-12: decide raised LayaCallError: this adapter reads text states only [bad_request]",
        "  en-json-state-mixed: answer 'team': probabilities sum to 0.6000, not 1 within 0.02",
    ]


def test_a_model_that_does_not_declare_determinism_is_not_held_to_it_and_is_told_why(pytester):
    contract_over_twin(pytester, "no-determinism")
    result = pytester.runpytest("-p", "no:asyncio", "-p", "no:cacheprovider", "-rs", "-k", "identically")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED * undeclared-adapter does not declare deterministic = True"])

"""The test for the contract is that it can fail: broken models run through it, and it names why.

Each run is a real pytest run of a downstream-style suite (pytester). The models are pure
Python (`FakeLaya` answers, or hand-built Decisions), so these runs never load torch, and they
run with pytest-asyncio in strict mode, in auto mode and not loaded at all.
"""

from __future__ import annotations

import asyncio

import pytest

from pytest_laya.contract import DecisionModelContract, run_coroutine

CONTRACT_TESTS = sorted(name for name in dir(DecisionModelContract) if name.startswith("test_"))

#: Models a downstream project might have written, right and wrong, all without torch.
MODELS = '''
import asyncio

from pytest_laya.wire.decision import Choice, Decision, Noul, Provenance, Score, Usage, parse_answers, parse_usage
from pytest_laya.fake import FakeLaya
from pytest_laya.wire.questions import normalize_questions


class FakeLayaModel:
    """A correct adapter: FakeLaya's answers, read with the foundation's answer rules."""

    name = "fake-laya-adapter"
    question_types = ("choice", "score", "noul")
    deterministic = True

    def __init__(self, raw_answers=None):
        self.raw_answers = raw_answers
        self.closed = 0

    @property
    def model(self):
        return "fake-laya@fake-0"

    def decide(self, state, questions):
        asked = normalize_questions(questions)
        if not set(q.type for q in asked.values()) <= set(self.question_types):
            from pytest_laya.wire.errors import LayaConfigError
            raise LayaConfigError("this adapter answers only " + ", ".join(self.question_types), code="invalid_question")
        answers, usage = FakeLaya().decide(state, {q.id: dict(q.wire) for q in asked.values()})
        raw = self.raw_answers if self.raw_answers is not None else answers
        return Decision(answers=parse_answers(raw, asked), usage=parse_usage(usage), model=self.model,
                        provenance=Provenance(url="adapter:", request_id=None, served_by=None))

    async def adecide(self, state, questions):
        await asyncio.sleep(0)
        return self.decide(state, questions)

    def close(self):
        self.closed += 1


class ChoiceOnlyModel(FakeLayaModel):
    name = "choice-only-adapter"
    question_types = ("choice",)


class BrokenModel(FakeLayaModel):
    """Builds its Decisions by hand and gets choice answers wrong in the way `defect` says."""

    name = "broken-adapter"

    def __init__(self, defect):
        super().__init__()
        self.defect = defect

    def decide(self, state, questions):
        good = super().decide(state, questions)
        answers = {}
        for qid, answer in good.answers.items():
            if isinstance(answer, Choice):
                probs = dict(answer.probabilities)
                key = answer.key
                if self.defect == "sum":
                    probs = {k: round(p * 0.6, 4) for k, p in probs.items()}
                else:
                    key = "not-offered"
                answer = Choice(key=key, probabilities=probs, confidence=answer.confidence)
            answers[qid] = answer
        return Decision(answers=answers, usage=good.usage, model=good.model, provenance=good.provenance)


class LaxModel(FakeLayaModel):
    """Takes whatever raw answers it is given, unchecked: the mistake the answer rules prevent."""

    name = "lax-adapter"

    def decide(self, state, questions):
        asked = normalize_questions(questions)
        if self.raw_answers is None:
            return super().decide(state, questions)
        answers = {}
        for qid, raw in self.raw_answers.items():
            if raw["type"] == "choice":
                answers[qid] = Choice(key=raw["choice"], probabilities=raw["probabilities"], confidence=raw["confidence"])
            elif raw["type"] == "score":
                levels = {int(k): p for k, p in raw["probabilities"].items()}
                answers[qid] = Score(level=max(levels, key=levels.get), expected=raw["score"], probabilities=levels,
                                     legend={}, confidence=raw["confidence"])
            else:
                answers[qid] = Noul(p=raw["noul"], confidence=raw["confidence"])
        return Decision(answers=answers, usage=Usage(input_tokens=1), model=self.model,
                        provenance=Provenance(url="adapter:", request_id=None, served_by=None))
'''

SUITES = '''
import asyncio

import pytest

from models import BrokenModel, ChoiceOnlyModel, FakeLayaModel, LaxModel
from pytest_laya import DecisionModelContract


class TestFakeLayaAdapter(DecisionModelContract):
    @pytest.fixture
    def decision_model(self):
        return FakeLayaModel()

    @pytest.fixture
    def scripted_decision_model(self):
        return FakeLayaModel


class TestChoiceOnlyAdapter(DecisionModelContract):
    @pytest.fixture
    def decision_model(self):
        return ChoiceOnlyModel()

    @pytest.fixture
    def scripted_decision_model(self):
        return ChoiceOnlyModel


class TestProbabilitiesNotSummingToOne(DecisionModelContract):
    @pytest.fixture
    def decision_model(self):
        return BrokenModel("sum")


class TestChoiceNotOffered(DecisionModelContract):
    @pytest.fixture
    def decision_model(self):
        return BrokenModel("choice")


class TestLaxAboutMalformedAnswers(DecisionModelContract):
    @pytest.fixture
    def decision_model(self):
        return LaxModel()

    @pytest.fixture
    def scripted_decision_model(self):
        return LaxModel


class TestNoFixture(DecisionModelContract):
    pass
'''

SCRIPTED = {
    "test_an_answer_with_an_option_never_offered_is_a_call_error",
    "test_an_answer_missing_an_option_is_a_call_error",
    "test_an_answer_with_a_probability_outside_unit_range_is_a_call_error",
    "test_an_answer_whose_probabilities_do_not_sum_to_one_is_a_call_error",
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
    pytester.makepyfile(models=MODELS, test_adapters=SUITES)
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


def test_probabilities_not_summing_to_one_fail_the_run_and_are_named(suite):
    result = suite.runpytest("-p", "no:cacheprovider", "-k", "TestProbabilitiesNotSummingToOne")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "FAILED *TestProbabilitiesNotSummingToOne::test_choice_probabilities_are_in_unit_range_and_sum_to_one*",
    ])
    result.stdout.fnmatch_lines(["*broken-adapter broke the contract (choice_distribution):*",
                                 "*de-choice-3: answer 'team': probabilities sum to 0.6000, not 1 within 0.02*"])
    table = outcomes(suite.inline_run("-p", "no:cacheprovider", "-k", "TestProbabilitiesNotSummingToOne"))
    cls = table["TestProbabilitiesNotSummingToOne"]
    assert cls["failed"] == {"test_choice_probabilities_are_in_unit_range_and_sum_to_one"}
    # It has no scripted model: the answer-validation checks say so instead of passing.
    assert cls["skipped"] == SCRIPTED


def test_a_choice_not_offered_fails_the_run_and_is_named(suite):
    result = suite.runpytest("-p", "no:cacheprovider", "-k", "TestChoiceNotOffered")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "FAILED *TestChoiceNotOffered::test_the_chosen_option_is_offered_and_most_probable*",
    ])
    result.stdout.fnmatch_lines(["*en-choice-2: answer 'team': chose 'not-offered', which the question never offered*"])
    table = outcomes(suite.inline_run("-p", "no:cacheprovider", "-k", "TestChoiceNotOffered"))
    assert table["TestChoiceNotOffered"]["failed"] == {"test_the_chosen_option_is_offered_and_most_probable"}


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

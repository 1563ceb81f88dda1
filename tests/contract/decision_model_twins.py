"""Decision models for testing `DecisionModelContract`: a correct one, and a broken twin per check.

All are pure Python over `FakeLaya`'s answers (no torch). `FakeLayaModel` is a correct adapter
that reads raw answers with the foundation's answer rules; each broken twin is that adapter
with one defect. `DECISION_MODEL_TWINS` is the table: check name -> the twins that check must
fail, and the words its failure message must contain. tests/contract/test_contract_twins.py
runs the whole contract on each twin and holds it to exactly the failures the table names.

Adding a check to the contract without a twin here fails the meta-test, which names the check.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_laya.fake import FakeLaya
from pytest_laya.wire.decision import Choice, Decision, Noul, Provenance, Score, Usage, parse_answers, parse_usage
from pytest_laya.wire.errors import LayaCallError, LayaConfigError
from pytest_laya.wire.questions import QUESTION_TYPES, AskedQuestion, normalize_questions

__all__ = ["DECISION_MODEL_TWINS", "BrokenModel", "ChoiceOnlyModel", "FakeLayaModel", "LaxModel", "twin_named"]


class FakeLayaModel:
    """A correct adapter: FakeLaya's answers (or scripted raw ones), read with the answer rules."""

    name = "fake-laya-adapter"
    question_types: tuple[str, ...] = ("choice", "score", "noul")
    deterministic: Any = True

    def __init__(self, raw_answers: Mapping[str, Any] | None = None) -> None:
        self.raw_answers = raw_answers
        self.closed = 0

    @property
    def model(self) -> str:
        return "fake-laya@fake-0"

    def refuse_undeclared(self, asked: Mapping[str, AskedQuestion]) -> None:
        if not {q.type for q in asked.values()} <= set(self.question_types):
            raise LayaConfigError("this adapter answers only " + ", ".join(self.question_types), code="invalid_question")

    def wire_answers(self, raw: Mapping[str, Any], asked: Mapping[str, AskedQuestion]) -> Mapping[str, Any]:
        """The raw answers the answer rules read (a twin 'repairs' them here)."""
        return raw

    def decide(self, state: Any, questions: Any) -> Decision:
        asked = normalize_questions(questions)
        self.refuse_undeclared(asked)
        answers, usage = FakeLaya().decide(state, {q.id: dict(q.wire) for q in asked.values()})
        raw = self.raw_answers if self.raw_answers is not None else answers
        return Decision(answers=parse_answers(self.wire_answers(raw, asked), asked), usage=parse_usage(usage),
                        model=self.model, provenance=Provenance(url="adapter:", request_id=None, served_by=None))

    async def adecide(self, state: Any, questions: Any) -> Decision:
        await asyncio.sleep(0)
        return self.decide(state, questions)

    def close(self) -> None:
        self.closed += 1


class ChoiceOnlyModel(FakeLayaModel):
    name = "choice-only-adapter"
    question_types = ("choice",)


class LaxModel(FakeLayaModel):
    """Takes whatever raw answers it is given, unchecked: the mistake the answer rules prevent."""

    name = "lax-adapter"

    def decide(self, state: Any, questions: Any) -> Decision:
        if self.raw_answers is None:
            return super().decide(state, questions)
        answers: dict[str, Any] = {}
        for qid, raw in self.raw_answers.items():
            if raw["type"] == "choice":
                answers[qid] = Choice(key=raw["choice"], probabilities=raw["probabilities"], confidence=raw["confidence"])
            elif raw["type"] == "score":
                levels = {int(k): p for k, p in raw["probabilities"].items()}
                answers[qid] = Score(level=max(levels, key=lambda k: levels[k]), expected=raw["score"],
                                     probabilities=levels, legend={}, confidence=raw["confidence"])
            else:
                answers[qid] = Noul(p=raw["noul"], confidence=raw["confidence"])
        return Decision(answers=answers, usage=Usage(input_tokens=1), model=self.model,
                        provenance=Provenance(url="adapter:", request_id=None, served_by=None))


# -- broken twins: each the correct adapter with one defect -----------------------------------

class _Rewriting(FakeLayaModel):
    """Builds its answers by hand from the correct ones (so the answer rules never see them)."""

    name = "broken-adapter"

    def rewrite(self, answer: Any) -> Any:
        return answer

    def decide(self, state: Any, questions: Any) -> Decision:
        good = super().decide(state, questions)
        return dataclasses.replace(good, answers={qid: self.rewrite(a) for qid, a in good.answers.items()})


def _choices(change: Callable[[Choice], Choice]) -> Callable[[Any, Any], Any]:
    return lambda self, a: change(a) if isinstance(a, Choice) else a


def _scores(change: Callable[[Score], Score]) -> Callable[[Any, Any], Any]:
    return lambda self, a: change(a) if isinstance(a, Score) else a


def _least_probable(probabilities: Mapping[Any, float]) -> Any:
    return min(probabilities, key=lambda k: probabilities[k])


class DeterminismAsAString(FakeLayaModel):
    deterministic = "yes"


class BlankName(FakeLayaModel):
    name = "  "


class RepeatsAQuestionType(FakeLayaModel):
    question_types = ("choice", "score", "choice")


class _Declaring:
    """The correct adapter declaring only the attributes given: one left out is missing, not None."""

    def __init__(self, **declared: Any) -> None:
        self._adapter = FakeLayaModel()
        self.__dict__.update(declared)

    @property
    def model(self) -> str:
        return self._adapter.model

    def decide(self, state: Any, questions: Any) -> Decision:
        return self._adapter.decide(state, questions)

    async def adecide(self, state: Any, questions: Any) -> Decision:
        return await self._adapter.adecide(state, questions)

    def close(self) -> None:
        self._adapter.close()


def _declaring_all_but(missing: str) -> Callable[[], Any]:
    declared = {"name": "undeclared-adapter", "question_types": FakeLayaModel.question_types, "deterministic": True}
    return lambda: _Declaring(**{k: v for k, v in declared.items() if k != missing})


class IdentityWithoutRevision(FakeLayaModel):
    @property
    def model(self) -> str:
        return "fake-laya"


class DecisionNamesOtherWeights(FakeLayaModel):
    """Its decisions name a revision the model itself does not."""

    def decide(self, state: Any, questions: Any) -> Decision:
        return dataclasses.replace(super().decide(state, questions), model="fake-laya@fake-1")


class PadsChoicesWithAnOptionNeverOffered(_Rewriting):
    rewrite = _choices(lambda a: dataclasses.replace(a, probabilities={**a.probabilities, "other": 0.0}))


class ProbabilitiesNotSummingToOne(_Rewriting):
    rewrite = _choices(lambda a: dataclasses.replace(a, probabilities={k: round(p * 0.6, 4) for k, p in a.probabilities.items()}))


class ChoosesAnOptionNeverOffered(_Rewriting):
    rewrite = _choices(lambda a: dataclasses.replace(a, key="not-offered"))


class ChoosesTheLeastProbable(_Rewriting):
    rewrite = _choices(lambda a: dataclasses.replace(a, key=_least_probable(a.probabilities)))


class ScoreLevelLeastProbable(_Rewriting):
    rewrite = _scores(lambda a: dataclasses.replace(a, level=_least_probable(a.probabilities)))


class ExpectedLevelOneBased(_Rewriting):
    rewrite = _scores(lambda a: dataclasses.replace(a, expected=a.expected + 1))


class LevelsOneBased(_Rewriting):
    rewrite = _scores(lambda a: dataclasses.replace(a, level=a.level + 1, expected=a.expected + 1,
                                                    probabilities={k + 1: p for k, p in a.probabilities.items()}))


class NoulAsAPercentage(_Rewriting):
    def rewrite(self, answer: Any) -> Any:
        return dataclasses.replace(answer, p=round(answer.p * 100, 2)) if isinstance(answer, Noul) else answer


class ChoiceConfidenceAsAPercentage(_Rewriting):
    rewrite = _choices(lambda a: dataclasses.replace(a, confidence=round(a.confidence * 100, 2)))


class AnswersInIdOrder(FakeLayaModel):
    def decide(self, state: Any, questions: Any) -> Decision:
        good = super().decide(state, questions)
        return dataclasses.replace(good, answers=dict(sorted(good.answers.items())))


class AnswersEmptyQuestions(FakeLayaModel):
    """Answers ``{}`` with nothing, as laya itself does, instead of refusing it."""

    def decide(self, state: Any, questions: Any) -> Decision:
        if questions == {}:
            return Decision(answers={}, usage=Usage(input_tokens=1), model=self.model,
                            provenance=Provenance(url="adapter:", request_id=None, served_by=None))
        return super().decide(state, questions)


class EmptyQuestionsRaiseValueError(FakeLayaModel):
    """Refuses ``{}`` with a bare ValueError instead of LayaConfigError."""

    def decide(self, state: Any, questions: Any) -> Decision:
        if questions == {}:
            raise ValueError("questions must not be empty")
        return super().decide(state, questions)


class AnswersEmptyQuestionsWithADict(FakeLayaModel):
    """Answers ``{}`` with a plain dict (not even a Decision)."""

    def decide(self, state: Any, questions: Any) -> Any:
        return {} if questions == {} else super().decide(state, questions)


class AnswersTypesItDoesNotDeclare(FakeLayaModel):
    """Declares choice questions only, and answers score and noul ones anyway."""

    question_types = ("choice",)

    def refuse_undeclared(self, asked: Mapping[str, AskedQuestion]) -> None:
        pass


def _of_unknown_type(questions: Any) -> dict[str, Any]:
    """The questions whose type is a string that is none of Laya's (one without a type is not here)."""
    return {qid: q for qid, q in questions.items() if isinstance(q.get("type"), str) and q["type"] not in QUESTION_TYPES}


class AnswersUnknownTypesAsNoul(FakeLayaModel):
    """Answers a question of a type it has never heard of as a yes/no question (one without a
    type is still refused)."""

    def decide(self, state: Any, questions: Any) -> Decision:
        unknown = {qid: {**q, "type": "noul"} for qid, q in _of_unknown_type(questions).items()}
        return super().decide(state, {**questions, **unknown})


class UnknownTypeRaisesValueError(FakeLayaModel):
    """Refuses a question of an unknown type with a bare ValueError instead of LayaConfigError."""

    def decide(self, state: Any, questions: Any) -> Decision:
        for q in _of_unknown_type(questions).values():
            raise ValueError(f"no such question type: {q['type']!r}")
        return super().decide(state, questions)


class DropsOptionsNeverOffered(FakeLayaModel):
    """'Repairs' raw answers: drops probabilities of options never offered, picks the top one."""

    def wire_answers(self, raw: Mapping[str, Any], asked: Mapping[str, AskedQuestion]) -> Mapping[str, Any]:
        fixed = {}
        for qid, answer in raw.items():
            answer = dict(answer)
            if "probabilities" in answer:
                keys = set(asked[qid].option_keys) if asked[qid].type == "choice" else {str(i) for i in range(len(asked[qid].option_keys))}
                answer["probabilities"] = {k: p for k, p in answer["probabilities"].items() if k in keys}
                if answer.get("choice") is not None and answer["choice"] not in keys:
                    answer["choice"] = max(answer["probabilities"], key=answer["probabilities"].get)
            fixed[qid] = answer
        return fixed


class PadsMissingOptions(FakeLayaModel):
    """'Repairs' raw answers: an option or level with no probability gets 0."""

    def wire_answers(self, raw: Mapping[str, Any], asked: Mapping[str, AskedQuestion]) -> Mapping[str, Any]:
        fixed = {}
        for qid, answer in raw.items():
            answer = dict(answer)
            if "probabilities" in answer:
                keys = asked[qid].option_keys if asked[qid].type == "choice" else [str(i) for i in range(len(asked[qid].option_keys))]
                answer["probabilities"] = {**{k: 0.0 for k in keys}, **answer["probabilities"]}
            fixed[qid] = answer
        return fixed


class ClampsIntoUnitRange(FakeLayaModel):
    """'Repairs' raw answers: every probability and confidence clamped into [0, 1]."""

    def wire_answers(self, raw: Mapping[str, Any], asked: Mapping[str, AskedQuestion]) -> Mapping[str, Any]:
        def clamp(value: Any) -> Any:
            return min(1.0, max(0.0, value)) if isinstance(value, (int, float)) else value

        fixed = {}
        for qid, answer in raw.items():
            answer = {k: clamp(v) if k in ("noul", "confidence") else v for k, v in answer.items()}
            if "probabilities" in answer:
                answer["probabilities"] = {k: clamp(p) for k, p in answer["probabilities"].items()}
            fixed[qid] = answer
        return fixed


class RenormalisesProbabilities(FakeLayaModel):
    """'Repairs' raw answers: probabilities divided by their sum."""

    def wire_answers(self, raw: Mapping[str, Any], asked: Mapping[str, AskedQuestion]) -> Mapping[str, Any]:
        fixed = {}
        for qid, answer in raw.items():
            answer = dict(answer)
            total = sum(answer.get("probabilities", {}).values())
            if total > 0:
                answer["probabilities"] = {k: p / total for k, p in answer["probabilities"].items()}
            fixed[qid] = answer
        return fixed


class NoulDriftsBetweenCalls(_Rewriting):
    """Claims determinism; each call moves every yes/no answer by 0.01 more than the last."""

    calls = 0

    def rewrite(self, answer: Any) -> Any:
        return dataclasses.replace(answer, p=(answer.p + 0.01 * self.calls) % 1) if isinstance(answer, Noul) else answer

    def decide(self, state: Any, questions: Any) -> Decision:
        self.calls += 1
        return super().decide(state, questions)


class FirstOptionFavoured(_Rewriting):
    """The first option listed gets 0.9 of every choice, whatever it is."""

    def rewrite(self, answer: Any) -> Any:
        if not isinstance(answer, Choice) or len(answer.probabilities) < 2:
            return answer
        keys = list(answer.probabilities)
        rest = 0.1 / (len(keys) - 1)
        return dataclasses.replace(answer, key=keys[0], probabilities={k: 0.9 if i == 0 else rest
                                                                       for i, k in enumerate(keys)})


class NoulFlipsBesideOtherQuestions(_Rewriting):
    """A yes/no answer turns over when other questions are asked with it."""

    def decide(self, state: Any, questions: Any) -> Decision:
        good = super().decide(state, questions)
        if len(good.answers) < 2:
            return good
        return dataclasses.replace(good, answers={qid: dataclasses.replace(a, p=round(1 - a.p, 4))
                                                  if isinstance(a, Noul) else a for qid, a in good.answers.items()})


class TokenCountDrifts(FakeLayaModel):
    """Claims determinism; the answers repeat, but each call counts one more input token."""

    calls = 0

    def decide(self, state: Any, questions: Any) -> Decision:
        self.calls += 1
        decision = super().decide(state, questions)
        return dataclasses.replace(decision, usage=dataclasses.replace(decision.usage, input_tokens=self.calls))


class AsyncPathRoundsProbabilities(FakeLayaModel):
    """adecide rounds choice probabilities to two decimals; decide does not."""

    async def adecide(self, state: Any, questions: Any) -> Decision:
        decision = await super().adecide(state, questions)
        rounded = {qid: dataclasses.replace(a, probabilities={k: round(p, 2) for k, p in a.probabilities.items()})
                   if isinstance(a, Choice) else a for qid, a in decision.answers.items()}
        return dataclasses.replace(decision, answers=rounded)


class AsyncPathReturnsTheAnswers(FakeLayaModel):
    """adecide returns the answers mapping, not the Decision."""

    async def adecide(self, state: Any, questions: Any) -> Any:
        return (await super().adecide(state, questions)).answers


class AsyncPathReversesTheAnswers(FakeLayaModel):
    """Not deterministic; adecide gives the answers in reverse order."""

    deterministic = False

    async def adecide(self, state: Any, questions: Any) -> Decision:
        decision = await super().adecide(state, questions)
        return dataclasses.replace(decision, answers=dict(reversed(list(decision.answers.items()))))


class AsyncPathAnswersEmptyQuestions(FakeLayaModel):
    """decide refuses ``{}``; adecide answers it with nothing."""

    async def adecide(self, state: Any, questions: Any) -> Decision:
        if questions == {}:
            return Decision(answers={}, usage=Usage(input_tokens=1), model=self.model,
                            provenance=Provenance(url="adapter:", request_id=None, served_by=None))
        return await super().adecide(state, questions)


class RefusesConversationStates(FakeLayaModel):
    """A text-only adapter: a conversation (a list of turns) as the state is refused as a failed call."""

    def decide(self, state: Any, questions: Any) -> Decision:
        if isinstance(state, list):
            raise LayaCallError("this adapter reads text states only", code="bad_request")
        return super().decide(state, questions)


class CloseTwiceRaises(FakeLayaModel):
    def close(self) -> None:
        super().close()
        if self.closed > 1:
            raise RuntimeError("fake-laya-adapter is already closed")


# -- the table ------------------------------------------------------------------------------

@dataclass(frozen=True)
class BrokenModel:
    """A decision model with one defect, and what the contract must say about it."""

    defect: str
    model: Callable[[], Any]
    #: Words the failure message of the check must contain.
    words: str
    #: The `scripted_decision_model` factory: the correct adapter unless the defect is in reading answers.
    scripted: Callable[[Mapping[str, Any]], Any] = FakeLayaModel
    #: Checks that must fail beside the one the twin is for: the same defect, seen again.
    also_fails: tuple[str, ...] = ()


def _repairing(model: type[FakeLayaModel], defect: str, words: str) -> BrokenModel:
    return BrokenModel(defect, model, words, scripted=model)


#: check -> its broken twins. Every test_ method of DecisionModelContract is a key here (the
#: meta-test holds the table to the contract).
DECISION_MODEL_TWINS: Mapping[str, tuple[BrokenModel, ...]] = {
    "test_it_declares_a_name_question_types_and_determinism": (
        BrokenModel("determinism-as-a-string", DeterminismAsAString, "deterministic must be True or False, got 'yes'"),
        BrokenModel("no-name", _declaring_all_but("name"), "name must be a non-empty string, got None"),
        BrokenModel("blank-name", BlankName, "name must be a non-empty string, got '  '"),
        # Declaring no types, it answers every type anyway, so the refusal check fails too.
        BrokenModel("no-question-types", _declaring_all_but("question_types"),
                    "question_types must name some of ['choice', 'score', 'noul'], each once; got ()",
                    also_fails=("test_unsupported_question_types_are_a_config_error",)),
        BrokenModel("repeats-a-question-type", RepeatsAQuestionType,
                    "question_types must name some of ['choice', 'score', 'noul'], each once; got ('choice', 'score', 'choice')"),
        BrokenModel("no-determinism", _declaring_all_but("deterministic"), "deterministic must be True or False, got None"),
    ),
    "test_identity_is_set": (
        BrokenModel("identity-without-revision", IdentityWithoutRevision,
                    "model must name the weights as checkpoint@revision once a decision was made; got 'fake-laya'"),
        BrokenModel("decision-names-other-weights", DecisionNamesOtherWeights,
                    "the decision names the weights 'fake-laya@fake-1', the model says 'fake-laya@fake-0'"),
    ),
    "test_choice_probabilities_cover_exactly_the_offered_options": (
        BrokenModel("pads-choices-with-an-option-never-offered", PadsChoicesWithAnOptionNeverOffered,
                    "en-choice-2: answer 'team': probabilities must cover exactly the offered options "
                    "['billing', 'technical'] (missing [], not offered ['other'])"),
    ),
    "test_choice_probabilities_are_in_unit_range_and_sum_to_one": (
        # Every check that sends the conversation request (a choice question) fails the same way.
        BrokenModel("refuses-conversation-states", RefusesConversationStates,
                    "en-conversation-choice-12: decide raised LayaCallError: this adapter reads text states only "
                    "[bad_request]", also_fails=("test_choice_probabilities_cover_exactly_the_offered_options",
                                                 "test_the_chosen_option_is_offered_and_most_probable",
                                                 "test_every_confidence_is_in_unit_range")),
        BrokenModel("probabilities-not-summing-to-one", ProbabilitiesNotSummingToOne,
                    # The whole head of the message: the model, the check, each broken request on its line.
                    "broken-adapter broke the contract (choice_distribution):\n"
                    "  en-choice-2: answer 'team': probabilities sum to 0.6000, not 1 within 0.02\n"
                    "  de-choice-3: answer 'team': probabilities sum to 0.6000, not 1 within 0.02"),
    ),
    "test_the_chosen_option_is_offered_and_most_probable": (
        BrokenModel("chooses-an-option-never-offered", ChoosesAnOptionNeverOffered,
                    "en-choice-2: answer 'team': choice 'not-offered' is not among the options ["),
        BrokenModel("chooses-the-least-probable", ChoosesTheLeastProbable, "is not the most probable option: "),
    ),
    "test_score_level_and_expected_value_match_the_probabilities": (
        BrokenModel("score-level-least-probable", ScoreLevelLeastProbable, "is not the most probable level: "),
        BrokenModel("expected-level-one-based", ExpectedLevelOneBased, "disagrees with its probabilities (their mean is"),
        BrokenModel("levels-one-based", LevelsOneBased, "en-score-5: answer 'anger': probabilities must cover exactly "
                    "the levels [0, 1, 2, 3, 4], got [1, 2, 3, 4, 5]"),
    ),
    "test_noul_p_and_confidence_are_in_unit_range": (
        BrokenModel("noul-as-a-percentage", NoulAsAPercentage, "fr-score-3-noul: answer 'refund': P(true)"),
    ),
    "test_every_confidence_is_in_unit_range": (
        BrokenModel("choice-confidence-as-a-percentage", ChoiceConfidenceAsAPercentage,
                    "en-choice-2: answer 'team': confidence"),
    ),
    "test_one_answer_per_question_in_the_order_asked": (
        BrokenModel("answers-in-id-order", AnswersInIdOrder,
                    "AssertionError: fake-laya-adapter answered ['alpha', 'beta', 'kappa', 'mid', 'omega', 'zeta'] to "
                    "['zeta', 'alpha', 'mid', 'beta', 'omega', 'kappa']: [\"answers ['alpha', 'beta', 'kappa', 'mid', "
                    "'omega', 'zeta'] are not one per question in the order asked "
                    "['zeta', 'alpha', 'mid', 'beta', 'omega', 'kappa']"),
    ),
    "test_empty_questions_are_a_config_error": (
        # adecide is decide here, so the async check's refusal of {} fails too.
        BrokenModel("answers-empty-questions", AnswersEmptyQuestions,
                    "decide('Any state.', {}) returned {} instead of raising LayaConfigError",
                    also_fails=("test_sync_and_async_paths_agree",)),
        BrokenModel("empty-questions-raise-value-error", EmptyQuestionsRaiseValueError,
                    "decide('Any state.', {}) raised ValueError (questions must not be empty), not LayaConfigError",
                    also_fails=("test_sync_and_async_paths_agree",)),
        BrokenModel("answers-empty-questions-with-a-dict", AnswersEmptyQuestionsWithADict,
                    "decide('Any state.', {}) returned {} instead of raising LayaConfigError",
                    also_fails=("test_sync_and_async_paths_agree",)),
    ),
    "test_unsupported_question_types_are_a_config_error": (
        BrokenModel("answers-types-it-does-not-declare", AnswersTypesItDoesNotDeclare,
                    "a score question (not in question_types) was answered instead of raising LayaConfigError\n"
                    "  a noul question (not in question_types) was answered instead of raising LayaConfigError"),
        BrokenModel("unknown-type-raises-value-error", UnknownTypeRaisesValueError,
                    "an unknown type raised ValueError (no such question type: 'essay'), not LayaConfigError"),
        BrokenModel("answers-unknown-types-as-noul", AnswersUnknownTypesAsNoul,
                    "an unknown type was answered instead of raising LayaConfigError"),
    ),
    "test_an_answer_with_an_option_never_offered_is_a_call_error": (
        _repairing(DropsOptionsNeverOffered, "drops-options-never-offered", "'choice': 'sales'"),
    ),
    "test_an_answer_missing_an_option_is_a_call_error": (
        _repairing(PadsMissingOptions, "pads-missing-options", "{'billing': 1.0}"),
    ),
    "test_an_answer_with_a_probability_outside_unit_range_is_a_call_error": (
        _repairing(ClampsIntoUnitRange, "clamps-into-unit-range", "'noul': 1.5"),
    ),
    "test_an_answer_whose_probabilities_do_not_sum_to_one_is_a_call_error": (
        _repairing(RenormalisesProbabilities, "renormalises-probabilities", "{'billing': 0.5, 'technical': 0.3}"),
    ),
    "test_option_order_does_not_change_the_answer": (
        BrokenModel("first-option-favoured", FirstOptionFavoured,
                    "option order ['technical', 'billing', 'shipping']: question 'q' was answered 'billing' (billing "
                    "0.9, technical 0.05, shipping 0.05), then 'technical' (technical 0.9, billing 0.05, shipping 0.05)"),
    ),
    "test_other_questions_do_not_change_an_answer": (
        BrokenModel("noul-flips-beside-other-questions", NoulFlipsBesideOtherQuestions,
                    "question interference (alone, then beside 20 other questions): question 'zeta' was answered p "),
    ),
    "test_a_deterministic_model_answers_the_same_request_identically": (
        # It claims determinism, so the async check, which then wants equal answers, fails too;
        # and a question asked alone, then beside others, is asked twice.
        BrokenModel("noul-drifts-between-calls", NoulDriftsBetweenCalls, "the same request was answered differently",
                    also_fails=("test_sync_and_async_paths_agree", "test_other_questions_do_not_change_an_answer")),
        # The answers alone repeat: the token count is part of what must.
        BrokenModel("token-count-drifts", TokenCountDrifts, "the same request was answered differently",
                    also_fails=("test_sync_and_async_paths_agree",)),
    ),
    "test_sync_and_async_paths_agree": (
        BrokenModel("async-path-rounds-probabilities", AsyncPathRoundsProbabilities, ": adecide answered"),
        BrokenModel("async-path-returns-the-answers", AsyncPathReturnsTheAnswers, ": adecide returned dict, not a Decision"),
        # Not deterministic, so only the order of the answers is compared (the order check reads decide).
        BrokenModel("async-path-reverses-the-answers", AsyncPathReversesTheAnswers,
                    "fr-score-3-noul: adecide answered the questions ['refund', 'urgency'], decide ['urgency', 'refund']"),
        BrokenModel("async-path-answers-empty-questions", AsyncPathAnswersEmptyQuestions,
                    "adecide('Any state.', {}) returned {} instead of raising LayaConfigError"),
    ),
    "test_close_twice_is_safe": (
        BrokenModel("close-twice-raises", CloseTwiceRaises,
                    "close() a second time raised RuntimeError: fake-laya-adapter is already closed"),
    ),
}


def twin_named(defect: str) -> BrokenModel:
    """The twin whose `defect` is `defect` (the inner suites look their model up by it)."""
    return next(twin for twins in DECISION_MODEL_TWINS.values() for twin in twins if twin.defect == defect)

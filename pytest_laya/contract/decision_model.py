"""`DecisionModelContract`: the checks every DecisionModel must pass, as a class to subclass.

Every check is one test method, named for what it checks, so a report reads as a list of
promises kept or broken. The checks ask only the question types the model declares in
`question_types`, so a model that answers only choice questions is not failed for score ones;
each decision is judged by `answer_checks.decision_problems`.

The answer-validation checks (a malformed answer must raise `LayaCallError`, never become a
Decision) need a model whose raw answers the suite can script: give the class a
`scripted_decision_model` fixture that returns a factory ``answers -> model`` (the kit's own are
in `scripted_models`). Without one, those checks are skipped with a reason that says so.

Everything here is synchronous test code: the async path runs under `asyncio.run` on a thread
of its own when needed (`run_coroutine`), so the contract works with pytest-asyncio in strict or
auto mode, or without it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import functools
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

import pytest

from pytest_laya.contract.answer_checks import decision_problems
from pytest_laya.wire.decision import Decision
from pytest_laya.wire.errors import LayaCallError, LayaConfigError, LayaError
from pytest_laya.wire.questions import QUESTION_TYPES
from pytest_laya.wire.samples import SampleRequest, sample_request

__all__ = [
    "BEHAVIOUR_PROPERTIES",
    "CONTRACT_REQUESTS",
    "ORDER_QUESTIONS",
    "DecisionModelContract",
    "ScriptedModelFactory",
    "run_coroutine",
]

#: The requests the checks send: English and non-English, text, JSON and conversation states,
#: 2 to 12 options, every question type (a subset of `pytest_laya.wire.samples`).
#: Six, so that the whole contract costs a few dozen decisions per model.
CONTRACT_REQUESTS: tuple[SampleRequest, ...] = tuple(sample_request(name) for name in (
    "en-choice-2", "de-choice-3", "fr-score-3-noul", "en-conversation-choice-12", "en-score-5", "en-json-state-mixed",
))

#: Two questions of each type, interleaved, with ids in no sorted order: answers must come back
#: one per question, in exactly this order.
ORDER_STATE = "My package is late, the tracking link is broken, and it is a birthday present."
ORDER_QUESTIONS: Mapping[str, Mapping[str, Any]] = {
    "zeta": {"type": "noul", "instructions": "Is the customer in a hurry?"},
    "alpha": {"type": "choice", "instructions": "Main topic?", "criteria": ["delivery", "website", "billing"]},
    "mid": {"type": "score", "instructions": "Urgency?", "criteria": ["low", "medium", "high", "critical"]},
    "beta": {"type": "choice", "instructions": "Channel?", "criteria": {"email": "Email", "chat": "Chat", "phone": "Phone"}},
    "omega": {"type": "noul", "instructions": "Should an agent call back?"},
    "kappa": {"type": "score", "instructions": "How angry is the customer?", "criteria": ["calm", "annoyed", "furious"]},
}

#: The behaviour a model is held to, each by its own check; a subclass opts out by leaving one out.
BEHAVIOUR_PROPERTIES: frozenset[str] = frozenset({"option_order", "question_interference", "determinism"})
#: Choice questions whose options the option-order check reorders (every order: 5 and 23).
ORDER_PROBES: tuple[tuple[str, Mapping[str, Any]], ...] = (
    ("I was charged twice for my order. Please refund the duplicate today.",
     {"type": "choice", "instructions": "Which team should handle this?",
      "criteria": {"billing": "Charges and refunds", "technical": "Software", "shipping": "Parcels"}}),
    ("Your service is terrible and I am never ordering again.",
     {"type": "choice", "instructions": "What is the customer's mood?", "criteria": ["angry", "sad", "neutral", "happy"]}),
)

#: One valid question of each type, for the config-error and answer-validation checks.
_EXAMPLE_QUESTIONS: Mapping[str, Mapping[str, Any]] = {
    "choice": {"type": "choice", "instructions": "Which team?", "criteria": {"billing": "Charges", "technical": "Software"}},
    "score": {"type": "score", "instructions": "How urgent?", "criteria": ["low", "medium", "high"]},
    "noul": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
}
_SCRIPT_STATE = "I was charged twice for my order."
#: A raw answer of each type that a real Laya could give to `_EXAMPLE_QUESTIONS`.
_WELL_FORMED: Mapping[str, Mapping[str, Any]] = {
    "choice": {"type": "choice", "choice": "billing", "probabilities": {"billing": 0.7, "technical": 0.3}, "confidence": 0.4},
    "score": {"type": "score", "score": 1.1, "probabilities": {"0": 0.2, "1": 0.5, "2": 0.3}, "confidence": 0.3},
    "noul": {"type": "noul", "noul": 0.8, "confidence": 0.8},
}
#: Raw answers no real Laya gives, by what is wrong with them: (question type, raw answer).
_MALFORMED: Mapping[str, Sequence[tuple[str, Mapping[str, Any]]]] = {
    "foreign_key": (
        ("choice", {"type": "choice", "choice": "sales", "probabilities": {"billing": 0.6, "technical": 0.4}, "confidence": 0.4}),
        ("choice", {"type": "choice", "choice": "billing",
                    "probabilities": {"billing": 0.5, "technical": 0.3, "sales": 0.2}, "confidence": 0.4}),
        ("score", {"type": "score", "score": 1.1, "probabilities": {"0": 0.2, "1": 0.5, "7": 0.3}, "confidence": 0.3}),
    ),
    "short_distribution": (
        ("choice", {"type": "choice", "choice": "billing", "probabilities": {"billing": 1.0}, "confidence": 0.4}),
        ("score", {"type": "score", "score": 0.6, "probabilities": {"0": 0.4, "1": 0.6}, "confidence": 0.3}),
    ),
    "out_of_range": (
        ("noul", {"type": "noul", "noul": 1.5, "confidence": 0.8}),
        ("noul", {"type": "noul", "noul": 0.8, "confidence": -0.2}),
        ("choice", {"type": "choice", "choice": "billing", "probabilities": {"billing": 1.3, "technical": -0.3},
                    "confidence": 0.4}),
    ),
    "not_summing_to_one": (
        ("choice", {"type": "choice", "choice": "billing", "probabilities": {"billing": 0.5, "technical": 0.3},
                    "confidence": 0.4}),
        ("score", {"type": "score", "score": 1.0, "probabilities": {"0": 0.5, "1": 0.5, "2": 0.5}, "confidence": 0.3}),
    ),
}

#: A scripted model factory: raw answers (question id -> answer, Laya's wire form) -> a model
#: that answers every request with exactly them.
ScriptedModelFactory = Callable[[Mapping[str, Any]], Any]
# --------------------------------------------------------------------------- helpers


def run_coroutine(make: Callable[[], Awaitable[Any]]) -> Any:
    """Run ``make()`` to completion from synchronous code, whatever loop the caller is in.

    No running loop here (a plain sync test, pytest-asyncio in strict or auto mode, or no
    pytest-asyncio at all): `asyncio.run`. A loop already running in this thread: a fresh loop on
    a worker thread, because `asyncio.run` cannot nest.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_awaited(make))
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="laya-contract") as pool:
        return pool.submit(lambda: asyncio.run(_awaited(make))).result()


async def _awaited(make: Callable[[], Awaitable[Any]]) -> Any:
    return await make()


def _only(questions: Mapping[str, Mapping[str, Any]], types: Iterable[str]) -> dict[str, Any]:
    allowed = set(types)
    return {qid: copy.deepcopy(dict(q)) for qid, q in questions.items() if q.get("type") in allowed}


def _usable(requests: Sequence[SampleRequest], types: Iterable[str],
            wanted: str | None = None) -> list[tuple[str, Any, dict[str, Any]]]:
    """(id, state, questions) of each request, cut to the types the model answers."""
    out = []
    for request in requests:
        questions = _only(request.questions, types)
        if questions and (wanted is None or any(q["type"] == wanted for q in questions.values())):
            out.append((request.id, copy.deepcopy(request.state), questions))
    return out


def _comparable(decision: Decision) -> tuple[Any, Any]:
    return dict(decision.answers), getattr(decision.usage, "input_tokens", None)


def _named(model: Any) -> str:
    """The model's name for a message; the model itself where it declares none (a check says so)."""
    return str(getattr(model, "name", model))


def _refused_as_config_error(call: Callable[[], Any], what: str) -> None:
    """`call` must raise `LayaConfigError`; anything else fails the check, saying what happened."""
    try:
        result = call()
    except LayaConfigError:
        return
    except Exception as exc:  # noqa: BLE001 - the contract reports, it does not crash
        wrong = f"raised {type(exc).__name__} ({exc}), not LayaConfigError"
    else:
        answered = dict(result.answers) if isinstance(result, Decision) else result
        wrong = f"returned {answered!r} instead of raising LayaConfigError: nothing to answer is the caller's mistake"
    pytest.fail(f"{what} {wrong}", pytrace=False)  # outside the handler: one message, no chained traceback


# --------------------------------------------------------------------------- the contract


class DecisionModelContract:
    """The DecisionModel contract; subclass it (as ``Test...``) and give it a `decision_model` fixture.

    `decision_model` must be function-scoped (the close check closes it): build anything
    expensive (a loaded checkpoint, a server) in a wider fixture and wrap it per test. Optional:
    `scripted_decision_model`, a factory ``answers -> model`` for the answer-validation checks,
    and `contract_requests`, the requests the checks send (default `CONTRACT_REQUESTS`).

    The behaviour checks hold the model to `behaviour_properties` within `behaviour_tolerance`
    (the largest probability deviation, laya's rounding step by default). Opt out of one by
    naming the rest, e.g. for a model that leans on option order, as real Laya does::

        behaviour_properties = DecisionModelContract.behaviour_properties - {"option_order"}
    """

    contract_requests: ClassVar[Sequence[SampleRequest]] = CONTRACT_REQUESTS
    behaviour_properties: ClassVar[frozenset[str]] = BEHAVIOUR_PROPERTIES
    behaviour_tolerance: ClassVar[float] = 1e-4

    @pytest.fixture
    def decision_model(self) -> Any:
        pytest.fail(f"{type(self).__name__} subclasses DecisionModelContract but has no decision_model fixture: "
                    "add one that yields the model to check (and closes it)", pytrace=False)

    @pytest.fixture
    def scripted_decision_model(self) -> ScriptedModelFactory | None:
        """None: this model's raw answers cannot be scripted, and the answer-validation checks skip."""
        return None

    # -- helpers (not tests) ----------------------------------------------------------------

    def _types(self, model: Any) -> tuple[str, ...]:
        return tuple(t for t in QUESTION_TYPES if t in tuple(getattr(model, "question_types", ()) or ()))

    def _requests(self, model: Any, wanted: str | None = None) -> list[tuple[str, Any, dict[str, Any]]]:
        usable = _usable(self.contract_requests, self._types(model), wanted)
        if not usable:
            what = f"no {wanted} questions" if wanted else "none of the contract's questions"
            pytest.skip(f"{_named(model)} declares question_types {self._types(model)}: it answers {what}")
        return usable

    def _check(self, model: Any, checks: Iterable[str], wanted: str | None = None) -> None:
        """Send each request with `wanted` questions (any, if None); judge the `wanted` answers only."""
        checks = tuple(checks)
        broken: list[str] = []
        for rid, state, questions in self._requests(model, wanted):
            try:
                decision = model.decide(state, questions)
            except LayaError as exc:
                broken.append(f"{rid}: decide raised {type(exc).__name__}: {exc}")
                continue
            judged = _only(questions, (wanted,)) if wanted else questions
            broken += [f"{rid}: {p}" for p in decision_problems(judged, decision, checks=checks)]
        if broken:
            pytest.fail(f"{_named(model)} broke the contract ({', '.join(checks)}):\n  "
                        + "\n  ".join(broken), pytrace=False)

    def _scripted(self, factory: ScriptedModelFactory | None) -> ScriptedModelFactory:
        if factory is None:
            pytest.skip("no scripted_decision_model fixture: give the class one (a factory answers -> model) "
                        "so the answer-validation checks can run")
        return factory

    def _expect_call_errors(self, factory: ScriptedModelFactory | None, what: str) -> None:
        make = self._scripted(factory)
        failures: list[str] = []
        ran = False
        for qtype, raw in _MALFORMED[what]:
            questions = {"q": dict(_EXAMPLE_QUESTIONS[qtype])}
            well_formed = make({"q": copy.deepcopy(dict(_WELL_FORMED[qtype]))})
            try:
                if qtype not in self._types(well_formed):
                    continue
                ran = True
                try:
                    baseline = well_formed.decide(_SCRIPT_STATE, questions)
                except LayaError as exc:
                    failures.append(f"a well-formed scripted {qtype} answer was refused ({exc}): "
                                    "the scripted model does not answer what it is given")
                    continue
                problems = decision_problems(questions, baseline)
                if problems:
                    failures.append(f"a well-formed scripted {qtype} answer came back broken: {problems}")
            finally:
                well_formed.close()
            model = make({"q": copy.deepcopy(dict(raw))})
            try:
                decision = model.decide(_SCRIPT_STATE, questions)
            except LayaCallError:
                continue
            except LayaError as exc:
                failures.append(f"{raw} raised {type(exc).__name__} ({exc}), not LayaCallError: "
                                "a bad answer is the call failing, not the caller's setup")
            except Exception as exc:  # noqa: BLE001 - the contract reports, it does not crash
                failures.append(f"{raw} raised {type(exc).__name__} ({exc}), not LayaCallError")
            else:
                failures.append(f"{raw} became a Decision ({dict(decision.answers)}) instead of raising LayaCallError")
            finally:
                model.close()
        if not ran:
            pytest.skip(f"the scripted model answers none of the question types this check scripts ({what})")
        if failures:
            pytest.fail(f"malformed answers ({what.replace('_', ' ')}) must raise LayaCallError:\n  "
                        + "\n  ".join(failures), pytrace=False)

    # -- declarations and identity ----------------------------------------------------------

    def test_it_declares_a_name_question_types_and_determinism(self, decision_model: Any) -> None:
        name = getattr(decision_model, "name", None)
        assert isinstance(name, str) and name.strip(), f"name must be a non-empty string, got {name!r}"
        types = tuple(getattr(decision_model, "question_types", ()) or ())
        assert types and set(types) <= set(QUESTION_TYPES) and len(set(types)) == len(types), (
            f"question_types must name some of {list(QUESTION_TYPES)}, each once; got {types!r}")
        deterministic = getattr(decision_model, "deterministic", None)
        assert isinstance(deterministic, bool), f"deterministic must be True or False, got {deterministic!r}"

    def test_identity_is_set(self, decision_model: Any) -> None:
        rid, state, questions = self._requests(decision_model)[0]
        decision = decision_model.decide(state, questions)
        identity = decision_model.model
        assert isinstance(identity, str) and identity.strip() and "@" in identity, (
            f"model must name the weights as checkpoint@revision once a decision was made; got {identity!r}")
        assert decision.model == identity, (
            f"the decision names the weights {decision.model!r}, the model says {identity!r}")

    # -- answers ----------------------------------------------------------------------------

    def test_choice_probabilities_cover_exactly_the_offered_options(self, decision_model: Any) -> None:
        self._check(decision_model, ("choice_coverage",), "choice")

    def test_choice_probabilities_are_in_unit_range_and_sum_to_one(self, decision_model: Any) -> None:
        self._check(decision_model, ("choice_distribution",), "choice")

    def test_the_chosen_option_is_offered_and_most_probable(self, decision_model: Any) -> None:
        self._check(decision_model, ("chosen",), "choice")

    def test_score_level_and_expected_value_match_the_probabilities(self, decision_model: Any) -> None:
        self._check(decision_model, ("score",), "score")

    def test_noul_p_and_confidence_are_in_unit_range(self, decision_model: Any) -> None:
        self._check(decision_model, ("noul", "confidence"), "noul")

    def test_every_confidence_is_in_unit_range(self, decision_model: Any) -> None:
        self._check(decision_model, ("confidence",))

    def test_one_answer_per_question_in_the_order_asked(self, decision_model: Any) -> None:
        questions = _only(ORDER_QUESTIONS, self._types(decision_model))
        if not questions:
            pytest.skip(f"{_named(decision_model)} declares question_types {self._types(decision_model)}: "
                        "it answers none of the contract's questions")
        decision = decision_model.decide(ORDER_STATE, questions)
        problems = decision_problems(questions, decision, checks=("answers",))
        assert not problems, f"{_named(decision_model)} answered {list(decision.answers)} to {list(questions)}: {problems}"

    # -- refusals ---------------------------------------------------------------------------

    def test_empty_questions_are_a_config_error(self, decision_model: Any) -> None:
        _refused_as_config_error(lambda: decision_model.decide("Any state.", {}), "decide('Any state.', {})")

    def test_unsupported_question_types_are_a_config_error(self, decision_model: Any) -> None:
        cases: dict[str, Any] = {"an unknown type": {"type": "essay", "instructions": "Write an essay."}}
        for qtype in QUESTION_TYPES:
            if qtype not in self._types(decision_model):
                cases[f"a {qtype} question (not in question_types)"] = dict(_EXAMPLE_QUESTIONS[qtype])
        wrong: list[str] = []
        for what, question in cases.items():
            try:
                decision_model.decide("Any state.", {"q": question})
            except LayaConfigError:
                continue
            except Exception as exc:  # noqa: BLE001
                wrong.append(f"{what} raised {type(exc).__name__} ({exc}), not LayaConfigError")
            else:
                wrong.append(f"{what} was answered instead of raising LayaConfigError")
        assert not wrong, "\n".join(wrong)

    def test_an_answer_with_an_option_never_offered_is_a_call_error(self, scripted_decision_model: Any) -> None:
        self._expect_call_errors(scripted_decision_model, "foreign_key")

    def test_an_answer_missing_an_option_is_a_call_error(self, scripted_decision_model: Any) -> None:
        self._expect_call_errors(scripted_decision_model, "short_distribution")

    def test_an_answer_with_a_probability_outside_unit_range_is_a_call_error(self, scripted_decision_model: Any) -> None:
        self._expect_call_errors(scripted_decision_model, "out_of_range")

    def test_an_answer_whose_probabilities_do_not_sum_to_one_is_a_call_error(self, scripted_decision_model: Any) -> None:
        self._expect_call_errors(scripted_decision_model, "not_summing_to_one")

    # -- behaviour --------------------------------------------------------------------------

    def _behaviour(self, model: Any, prop: str) -> None:
        """Skip unless the class holds the model to `prop` (one of `BEHAVIOUR_PROPERTIES`)."""
        if prop not in self.behaviour_properties:
            pytest.skip(f"{type(self).__name__} opts out of {prop.replace('_', ' ')} (behaviour_properties)")

    def _alike(self, what: str, qid: str, first: Any, second: Any) -> str | None:
        """Why two answers to one question differ past `behaviour_tolerance` or decide differently, or None."""
        from pytest_laya.suites.measures import decided, describe, probability_change

        change = probability_change(first, second)
        if change > self.behaviour_tolerance + 1e-9 or decided(first) != decided(second):
            return (f"{what}: question {qid!r} was answered {describe(first)}, then {describe(second)} "
                    f"(a probability moved {change:.6f}; behaviour_tolerance {self.behaviour_tolerance:g})")
        return None

    def test_option_order_does_not_change_the_answer(self, decision_model: Any) -> None:
        self._behaviour(decision_model, "option_order")
        if "choice" not in self._types(decision_model):
            pytest.skip(f"{_named(decision_model)} declares question_types {self._types(decision_model)}: it answers "
                        "no choice questions")
        from pytest_laya.suites.behaviour import option_orders

        for state, question in ORDER_PROBES:
            first = decision_model.decide(state, {"q": question})["q"]
            for permuted, _ in option_orders(question):
                why = self._alike(f"option order {list(permuted['criteria'])}", "q", first,
                                  decision_model.decide(state, {"q": permuted})["q"])
                if why:
                    pytest.fail(why, pytrace=False)

    def test_other_questions_do_not_change_an_answer(self, decision_model: Any) -> None:
        self._behaviour(decision_model, "question_interference")
        from pytest_laya.suites.behaviour import FILLERS

        types = self._types(decision_model)
        questions = _only(ORDER_QUESTIONS, types)
        if not questions:
            pytest.skip(f"{_named(decision_model)} declares question_types {types}: it answers none of the "
                        "contract's questions")
        together = decision_model.decide(ORDER_STATE, {**_only(FILLERS, types), **questions})
        for qid, question in questions.items():
            why = self._alike(f"question interference (alone, then beside {len(together) - 1} other questions)",
                              qid, decision_model.decide(ORDER_STATE, {qid: question})[qid], together[qid])
            if why:
                pytest.fail(why, pytrace=False)

    def test_a_deterministic_model_answers_the_same_request_identically(self, decision_model: Any) -> None:
        self._behaviour(decision_model, "determinism")
        if not getattr(decision_model, "deterministic", False):
            pytest.skip(f"{_named(decision_model)} does not declare deterministic = True")
        for rid, state, questions in self._requests(decision_model)[:3]:
            first = _comparable(decision_model.decide(state, questions))
            second = _comparable(decision_model.decide(copy.deepcopy(state), copy.deepcopy(questions)))
            assert first == second, f"{rid}: the same request was answered differently:\n{first}\n{second}"

    def test_sync_and_async_paths_agree(self, decision_model: Any) -> None:
        for rid, state, questions in self._requests(decision_model)[:3]:
            sync = decision_model.decide(state, questions)
            async_ = run_coroutine(functools.partial(decision_model.adecide, state, questions))
            assert isinstance(async_, Decision), f"{rid}: adecide returned {type(async_).__name__}, not a Decision"
            if getattr(decision_model, "deterministic", False):
                assert _comparable(async_) == _comparable(sync), (
                    f"{rid}: adecide answered {dict(async_.answers)}, decide {dict(sync.answers)}")
            else:
                assert list(async_.answers) == list(sync.answers), (
                    f"{rid}: adecide answered the questions {list(async_.answers)}, decide {list(sync.answers)}")
        _refused_as_config_error(lambda: run_coroutine(lambda: decision_model.adecide("Any state.", {})),
                                 "adecide('Any state.', {})")

    def test_close_twice_is_safe(self, decision_model: Any) -> None:
        rid, state, questions = self._requests(decision_model)[0]
        decision_model.decide(state, questions)
        decision_model.close()
        try:
            decision_model.close()
        except Exception as exc:  # noqa: BLE001 - the contract reports, it does not crash
            error = exc
        else:
            return
        pytest.fail(f"close() a second time raised {type(error).__name__}: {error}; closing twice must be safe",
                    pytrace=False)

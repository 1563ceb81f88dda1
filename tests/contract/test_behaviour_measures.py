"""The behaviour checks' requests and tolerance (pytest_laya.suites.behaviour), without a server."""

from __future__ import annotations

import pytest

from pytest_laya.suites.behaviour import (
    FILLERS,
    SEEDED_ORDERS,
    option_orders,
    resolve_tolerance,
    rounding_step,
    with_fillers,
)

CHOICE = {"type": "choice", "instructions": "Which team?", "criteria": {"a": "A", "b": "B", "c": "C"}}


def test_up_to_five_options_every_other_order_is_asked_once():
    orders = option_orders(CHOICE)
    assert len(orders) == 5  # 3! - 1
    assert len({tuple(q["criteria"]) for q, _ in orders}) == 5 and ("a", "b", "c") not in {tuple(q["criteria"]) for q, _ in orders}
    assert [list(q["criteria"]) for q, reverse in orders if reverse] == [["c", "b", "a"]]
    # Descriptions travel with their option; list criteria stay lists.
    assert all(q["criteria"]["a"] == "A" for q, _ in orders)
    listed = option_orders({**CHOICE, "criteria": ["x", "y", "z", "w", "v"]})
    assert len(listed) == 119 and all(isinstance(q["criteria"], list) for q, _ in listed)


def test_above_five_options_seeded_orders_the_reverse_among_them():
    question = {**CHOICE, "criteria": [f"o{i}" for i in range(8)]}
    orders = option_orders(question)
    assert len(orders) == SEEDED_ORDERS and sum(reverse for _, reverse in orders) == 1
    assert [q["criteria"] for q, _ in orders] == [q["criteria"] for q, _ in option_orders(question)]  # seeded
    assert question["criteria"] not in [q["criteria"] for q, _ in orders]


def test_fillers_sit_around_the_target_question():
    three = with_fillers("refund", {"type": "noul", "instructions": "Refund?"}, 3)
    assert list(three)[-1] == "refund" and len(three) == 4
    fifteen = with_fillers("refund", {"type": "noul", "instructions": "Refund?"}, 15)
    assert list(fifteen)[0] == "refund" and len(fifteen) == 16 and len(FILLERS) == 15


@pytest.mark.parametrize(("values", "step"), [
    ([0.1234, 0.8766], 1e-4),
    ([0.12, 0.88], 1e-2),
    ([0.123456789, 0.876543211], None),
    ([0.0, 1.0], None),
    ([], None),
])
def test_the_rounding_step_of_answers(values, step):
    assert rounding_step(values) == (pytest.approx(step) if step else None)


def test_the_tolerance_given_then_stated_then_by_precision_at_least_one_rounding_step():
    assert resolve_tolerance(0.01, 1e-4, ["float32"], 1e-4).value == 0.01
    stated = resolve_tolerance(None, 1e-4, ["float32"], None)
    assert (stated.value, stated.source) == (1e-4, "the server's /health answer_tolerance")
    assert resolve_tolerance(None, "1e-4", ["float32"], None).value == 1e-5  # not a number: not a statement
    assert resolve_tolerance(None, None, ["float32"], None).value == 1e-5
    assert resolve_tolerance(None, None, ["float32", "bfloat16"], None).value == 1e-3  # the coarsest named
    rounded = resolve_tolerance(None, None, [], 1e-4)
    assert rounded.value == 1e-4 and "rounded to 4 decimals" in rounded.source
    assert resolve_tolerance(None, None, ["float16"], 1e-4).value == 1e-3
    assert rounded.exceeded_by(2e-4) and not rounded.exceeded_by(0.5432 - 0.5431)

"""Every check of DecisionModelContract fails its broken twin, with a message naming the defect.

The table is `DECISION_MODEL_TWINS` (tests/contract/decision_model_twins.py). A downstream-style
suite (pytester) runs the whole contract on each twin: exactly the checks the table names fail,
each by its own assert or pytest.fail, saying the table's words. The meta-test compares the table
with the contract's own checks, so a check added without a twin fails here by name.
"""

from __future__ import annotations

import pytest

from pytest_laya.contract import DecisionModelContract
from tests.contract.decision_model_twins import DECISION_MODEL_TWINS, BrokenModel
from tests.contract.twin_coverage import checks_of, coverage_problems

TABLE = "DECISION_MODEL_TWINS in tests/contract/decision_model_twins.py"
CASES = [pytest.param(check, twin, id=twin.defect) for check, twins in DECISION_MODEL_TWINS.items() for twin in twins]

#: The downstream-style suite: one class, named for the twin's defect.
SUITE = ("from pytest_laya import DecisionModelContract\nfrom tests.contract.contract_classes import ContractWith\n"
         "from tests.contract.decision_model_twins import twin_named\n")
CLASS = '''

class {cls}(ContractWith):
    model = twin_named({defect!r}).model
    scripted = twin_named({defect!r}).scripted
'''


def class_name(twin: BrokenModel) -> str:
    return "Test_" + twin.defect.replace("-", "_")


def failures_of(pytester, twin: BrokenModel) -> dict[str, str]:
    """check -> its failure's crash message (the exception's own text, not its traceback), of a
    downstream-style run of the whole contract on `twin` alone.

    One run per twin (about a tenth of a second each), not one shared run: a check's mutation is
    then judged by every twin's test, also when a tool runs only the tests that reached it."""
    pytester.makepyfile(test_twins=SUITE + CLASS.format(cls=class_name(twin), defect=twin.defect))
    reprec = pytester.inline_run("-p", "no:asyncio", "-p", "no:cacheprovider")
    reports = [r for r in reprec.getreports("pytest_runtest_logreport") if r.when == "call" or not r.passed]
    assert len({r.nodeid for r in reports}) == len(checks_of(DecisionModelContract)), "not every check ran"
    failures = {}
    for report in reports:
        if report.failed:
            message = report.longrepr.reprcrash.message
            # A pytest.fail of the contract's shows its message alone, not the contract's source.
            assert not message.startswith("Failed: ") or "contract.py" not in str(report.longrepr), report.longrepr
            failures[report.nodeid.split("::")[-1]] = message
    return failures


def test_every_check_of_the_contract_has_a_broken_twin():
    problems = coverage_problems("DecisionModelContract", checks_of(DecisionModelContract), TABLE, DECISION_MODEL_TWINS)
    assert not problems, "\n".join(problems)


def test_a_check_added_without_a_twin_is_named_and_a_stale_twin_too():
    checks = checks_of(DecisionModelContract)
    added = coverage_problems("DecisionModelContract", [*checks, "test_a_new_promise"], TABLE, DECISION_MODEL_TWINS)
    assert added == ["DecisionModelContract has checks without a broken twin: test_a_new_promise. Add a broken "
                     f"implementation for each to {TABLE}, with the words its failure must say"]
    removed = coverage_problems("DecisionModelContract", [c for c in checks if c != "test_identity_is_set"], TABLE,
                                DECISION_MODEL_TWINS)
    assert removed == [f"{TABLE} names checks DecisionModelContract does not have: test_identity_is_set"]


@pytest.mark.parametrize("check, twin", CASES)
def test_the_contract_fails_each_broken_model_on_exactly_the_check_for_its_defect(pytester, check: str, twin: BrokenModel):
    failures = failures_of(pytester, twin)
    assert sorted(failures) == sorted({check, *twin.also_fails}), f"{twin.defect}: {failures}"
    # The check's own failure (its assert or pytest.fail), saying the words: a crash inside the check
    # would show the check's source, words included, in its traceback but not in its message.
    assert failures[check].startswith(("AssertionError", "Failed: ")), failures[check]
    assert twin.words in failures[check], failures[check]


def test_a_class_opts_out_of_one_behaviour_property_and_keeps_the_others(pytester):
    # The option-order twin passes once its class leaves option_order out; the others still run.
    pytester.makepyfile(test_twins=SUITE + CLASS.format(cls="Test_opted_out", defect="first-option-favoured")
                        + '    behaviour_properties = DecisionModelContract.behaviour_properties - {"option_order"}\n')
    result = pytester.runpytest("-p", "no:asyncio", "-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(passed=len(checks_of(DecisionModelContract)) - 1, skipped=1)
    result.stdout.fnmatch_lines(["*Test_opted_out opts out of option order (behaviour_properties)*"])

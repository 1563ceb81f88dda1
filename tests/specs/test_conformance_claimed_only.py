"""A run that reads no conformance table holds each exchange to its claimed spec only
(`Conformance(claimed_only=True)`): the test sees the same violations, the table is what it loses."""

from __future__ import annotations

import pytest

from pytest_laya.specs import conformance
from pytest_laya.specs.conformance import Conformance, plain_verdicts, seed
from tests.helpers.judged_exchanges import ANSWER, exchange, judging

#: Breaks the target spec only (the current spec has no served_by).
NO_SERVED_BY = {key: value for key, value in ANSWER.items() if key != "served_by"}


@pytest.fixture
def judged(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of each spec that judges an exchange."""
    return judging(monkeypatch, lambda spec, headers: spec.name)


@pytest.mark.parametrize("claimed", ["current", "target"])
def test_the_claimed_spec_alone_judges_and_finds_what_both_would(judged, claimed):
    both, alone = Conformance(), Conformance(claimed_only=True)
    found = [str(v) for v in both.check(exchange(NO_SERVED_BY), server="replay", claimed=claimed)]
    conformance._VERDICTS.clear()
    judged.clear()
    assert [str(v) for v in alone.check(exchange(NO_SERVED_BY), server="replay", claimed=claimed)] == found
    assert judged == [claimed]
    assert bool(found) is (claimed == "target")


def test_its_rows_are_the_claimed_specs_rows(judged):
    tally = Conformance(claimed_only=True)
    tally.check(exchange(ANSWER), server="replay", claimed="current")
    tally.check(exchange(NO_SERVED_BY), server="live", claimed="target")
    assert {(row["server"], row["spec"], row["exchanges"], row["violations"]) for row in tally.rows()} == {
        ("replay", "current", 1, 0), ("live", "target", 1, 1)}


def test_an_exchange_is_judged_once_per_process_and_spec(judged):
    tally = Conformance(claimed_only=True)
    for _ in range(3):
        tally.check(exchange(ANSWER), server="replay", claimed="target")
    tally.check(exchange(ANSWER), server="replay", claimed="current")
    assert judged == ["target", "current"]
    assert tally.rows()[1]["exchanges"] == 3


def test_verdicts_an_earlier_run_kept_are_read_not_judged(judged):
    plain = plain_verdicts([exchange(NO_SERVED_BY)])  # both specs, as the derived cache keeps them
    conformance._VERDICTS.clear()
    judged.clear()
    assert seed(plain)
    violations = Conformance(claimed_only=True).check(exchange(NO_SERVED_BY), server="replay", claimed="target")
    assert [v.where for v in violations] == ["/body/served_by"]
    assert judged == []

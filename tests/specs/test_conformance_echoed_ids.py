"""A replayed response echoes each request's own X-Request-Id and trace id (`cassettes.request_ids.echo_ids`):
its verdict is judged once for every id both specs accept, and a value either spec refuses is still found."""

from __future__ import annotations

import pytest

from pytest_laya.specs.conformance import Conformance
from tests.helpers.judged_exchanges import TRACE, judging
from tests.helpers.judged_exchanges import exchange as decision_exchange


def exchange(request_id: str, traceparent: str = TRACE):
    return decision_exchange(request_id=request_id, traceparent=traceparent)


@pytest.fixture
def judged(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The X-Request-Id of every exchange each spec judges."""
    return judging(monkeypatch, lambda spec, headers: headers["x-request-id"])


def test_exchanges_differing_only_in_an_accepted_echoed_id_are_judged_once(judged):
    tally = Conformance()
    first = tally.check(exchange("id-0001-first"), server="replay", claimed="target")
    second = tally.check(exchange("id-0002-second", TRACE.replace("00f067aa", "11f067aa")), server="replay",
                         claimed="target")
    assert list(first) == list(second) == []
    assert judged == ["id-0001-first", "id-0001-first"]  # both specs, once
    assert {row["spec"]: row["exchanges"] for row in tally.rows()} == {"current": 2, "target": 2}


def test_an_echoed_id_the_target_spec_refuses_is_still_found_after_an_accepted_one(judged):
    tally = Conformance()
    assert not tally.check(exchange("id-0001-first"), server="replay", claimed="target")
    refused = tally.check(exchange("has spaces, not an id"), server="replay", claimed="target")
    assert [v.where for v in refused] == ["/headers/x-request-id"]
    assert tally.rows()[1]["headers"]["POST /v1/systemone x-request-id"] is False

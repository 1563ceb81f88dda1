"""A replayed response echoes each request's own X-Request-Id and trace id (`cassettes.request_ids.echo_ids`):
its verdict is judged once for every id both specs accept, and a value either spec refuses is still found."""

from __future__ import annotations

import json

import pytest

from pytest_laya.specs import conformance
from pytest_laya.specs.conformance import Conformance
from pytest_laya.specs.spec import Spec
from pytest_laya.wire.exchange import Exchange

SENT = {"state": "I was charged twice.", "questions": {"refund": {"type": "noul", "instructions": "Refund?"}}}
ANSWER = {"model": "fake-laya", "answers": {"refund": {"type": "noul", "noul": 0.25, "confidence": 0.75}},
          "usage": {"input_tokens": 12, "output_tokens": 0, "state_tokens": 6, "truncated": False},
          "served_by": {"checkpoint": "fake-laya", "revision": "fake-0", "device": "cpu", "weights_dtype": "float32",
                        "compiled": False}}
TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def exchange(request_id: str, traceparent: str = TRACE) -> Exchange:
    return Exchange(method="POST", url="http://laya.test/v1/systemone", path="/v1/systemone", status=200,
                    headers={"content-type": "application/json", "x-request-id": request_id, "laya-spec": "target",
                             "server-timing": "queue;dur=0, infer;dur=1", "traceparent": traceparent},
                    body=json.dumps(ANSWER).encode(), request_body=json.dumps(SENT).encode(), elapsed_s=0.0)


@pytest.fixture
def judged(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The X-Request-Id of every exchange each spec judges (the memo of verdicts emptied first)."""
    monkeypatch.setattr(conformance, "_VERDICTS", type(conformance._VERDICTS)())
    seen: list[str] = []
    real = Spec.judge

    def counting(self, method, path, status, headers, body, **kwargs):
        seen.append(headers["x-request-id"])
        return real(self, method, path, status, headers, body, **kwargs)

    monkeypatch.setattr(Spec, "judge", counting)
    return seen


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

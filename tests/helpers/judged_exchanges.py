"""A decision exchange to hold to the specs, and a count of which exchanges the specs judge."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from pytest_laya.specs import conformance
from pytest_laya.specs.spec import Spec
from pytest_laya.wire.exchange import Exchange

SENT = {"state": "I was charged twice.", "questions": {"refund": {"type": "noul", "instructions": "Refund?"}}}
ANSWER = {"model": "fake-laya", "answers": {"refund": {"type": "noul", "noul": 0.25, "confidence": 0.75}},
          "usage": {"input_tokens": 12, "output_tokens": 0, "state_tokens": 6, "truncated": False},
          "served_by": {"checkpoint": "fake-laya", "revision": "fake-0", "device": "cpu", "weights_dtype": "float32",
                        "compiled": False}}
TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def exchange(answer: dict[str, Any] = ANSWER, *, request_id: str = "id-0001-first", traceparent: str = TRACE) -> Exchange:
    """A 200 to POST /v1/systemone answering `SENT` with `answer`, echoing the request's ids."""
    return Exchange(method="POST", url="http://laya.test/v1/systemone", path="/v1/systemone", status=200,
                    headers={"content-type": "application/json", "x-request-id": request_id, "laya-spec": "target",
                             "server-timing": "queue;dur=0, infer;dur=1", "traceparent": traceparent},
                    body=json.dumps(answer).encode(), request_body=json.dumps(SENT).encode(), elapsed_s=0.0)


def judging(monkeypatch: pytest.MonkeyPatch, noted: Callable[[Spec, Any], str]) -> list[str]:
    """`noted(spec, headers)` of every exchange a spec judges from now on (the memo of verdicts emptied first)."""
    monkeypatch.setattr(conformance, "_VERDICTS", type(conformance._VERDICTS)())
    seen: list[str] = []
    real = Spec.judge

    def counting(self: Spec, method: str, path: str, status: int, headers: Any, body: Any, **kwargs: Any) -> Any:
        seen.append(noted(self, headers))
        return real(self, method, path, status, headers, body, **kwargs)

    monkeypatch.setattr(Spec, "judge", counting)
    return seen

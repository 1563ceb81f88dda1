"""An `Engine` whose behaviour a test scripts: answers, delays, failures, readiness.

The reference server's HTTP behaviour (problems, admission, probes, timing) is tested against
this, and its answers against real laya in tests/integration/test_reference_parity.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence

from pytest_laya_reference.engine import DecisionRequest, DecisionResult, ModelIdentity

IDENTITY = ModelIdentity(checkpoint="scripted", revision="sha256:" + "0" * 64, device="cpu",
                         weights_dtype="float32", compiled=False)


def _answer(question: Mapping) -> dict:
    kind = question["type"]
    if kind == "noul":
        return {"type": "noul", "noul": 0.75, "confidence": 0.5}
    crit = question["criteria"]
    keys = [str(k) for k in crit] if kind == "choice" else [str(i) for i in range(len(crit))]
    probs = {k: round(1 / len(keys), 4) for k in keys}
    probs[keys[0]] = round(1 - sum(probs[k] for k in keys[1:]), 4)
    if kind == "choice":
        return {"type": "choice", "choice": keys[0], "probabilities": probs, "confidence": 0.1}
    return {"type": "score", "score": sum(int(k) * p for k, p in probs.items()), "probabilities": probs,
            "legend": {str(i): str(level) for i, level in enumerate(crit)}, "confidence": 0.1}


class ScriptedEngine:
    def __init__(self, *, names: Sequence[str] = ("tiny",), delay_s: float = 0.0, fail_with: BaseException | None = None,
                 ready_gate: threading.Event | None = None) -> None:
        self.names = list(names)
        self.delay_s = delay_s
        self.fail_with = fail_with
        self.ready_gate = ready_gate
        self.calls: list[int] = []
        self._ready = False

    @property
    def models(self) -> Mapping[str, ModelIdentity]:
        return {name: IDENTITY for name in self.names} if self._ready else {}

    @property
    def default_model(self) -> str:
        return self.names[0]

    @property
    def ready(self) -> bool:
        return self._ready

    def configured(self) -> list[str]:
        return list(self.names)

    def load(self) -> None:
        if self.ready_gate is not None:
            self.ready_gate.wait(30)
        self._ready = True

    def predict(self, model: str, requests: Sequence[DecisionRequest]) -> list[DecisionResult]:
        self.calls.append(len(requests))
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.fail_with is not None:
            raise self.fail_with
        return [DecisionResult(answers={qid: _answer(q) for qid, q in r.questions.items()},
                               usage={"input_tokens": 10 + len(str(r.state)), "output_tokens": 0})
                for r in requests]

    def close(self) -> None:
        pass

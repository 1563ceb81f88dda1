"""The strict Jev answer shape (``--jev-strict``, ``LAYA_JEV_STRICT=1``), as laya-serve has it.

Each answer keeps its type's Jev fields only and gains `latency_ms`; `served_by` and `model`
stay, nothing is recomputed. A request that sets `min_confidence`, which Jev's shape cannot
report, is refused (422 ``invalid_request``, `refuse_unhonoured`): a control is honoured or
refused, never dropped. The field lists: docs/reference-server.md, "Jev-strict answers".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_laya.wire.problems import Problem

__all__ = ["ANSWER_FIELDS", "jev_strict_payload", "refuse_unhonoured", "strict_answers", "strict_usage"]

#: Why a strict server refuses `min_confidence`, as its problem says.
MIN_CONFIDENCE_REFUSED = (
    "min_confidence cannot be honoured: this server answers in Jev's strict shape (--jev-strict, "
    "LAYA_JEV_STRICT=1), which has no member to say an answer fell below the threshold (laya's "
    "low_confidence and abstention), so the gate would be dropped silently; drop min_confidence, "
    "or ask a server that is not in strict mode")

#: The fields of each answer type in Jev's wire contract.
ANSWER_FIELDS: Mapping[str, tuple[str, ...]] = {
    "choice": ("type", "choice", "probabilities", "confidence"),
    "score": ("type", "score", "probabilities", "confidence", "legend"),
    "noul": ("type", "noul"),
}


def strict_answers(answers: Mapping[str, Any]) -> dict[str, Any]:
    """Each answer cut to its type's Jev fields (an answer of unknown type passes unchanged)."""
    out: dict[str, Any] = {}
    for qid, answer in answers.items():
        fields = ANSWER_FIELDS.get(str(answer.get("type"))) if isinstance(answer, Mapping) else None
        out[qid] = answer if fields is None else {name: answer[name] for name in fields if name in answer}
    return out


def strict_usage(usage: Mapping[str, Any]) -> dict[str, int]:
    return {"input_tokens": usage.get("input_tokens", 0), "output_tokens": usage.get("output_tokens", 0)}


def jev_strict_payload(payload: Mapping[str, Any], *, batch: bool, latency_ms: float) -> dict[str, Any]:
    """A 200 body (single or batch) in Jev's field set, with `model`, `served_by` and whole `latency_ms`."""
    if batch:
        results = [{"model": r["model"], "answers": strict_answers(r["answers"]), "usage": strict_usage(r["usage"])}
                   for r in payload["results"]]
        shaped: dict[str, Any] = {"model": payload["model"], "results": results, "total_usage": payload["total_usage"]}
    else:
        shaped = {"model": payload["model"], "answers": strict_answers(payload["answers"]),
                  "usage": strict_usage(payload["usage"])}
    return {**shaped, "served_by": payload["served_by"], "latency_ms": round(latency_ms)}


def refuse_unhonoured(requests: Sequence[Any]) -> None:
    """Raise the 422 ``invalid_request`` for a control strict mode cannot honour (`min_confidence`)."""
    if any(getattr(r, "min_confidence", None) is not None for r in requests):
        raise Problem("invalid_request", MIN_CONFIDENCE_REFUSED,
                      errors=[{"pointer": "/min_confidence", "detail": MIN_CONFIDENCE_REFUSED}])

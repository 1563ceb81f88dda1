"""Property-based fuzzing of the reference server (real Laya, tiny checkpoint) against the target spec.

schemathesis reads `specs/laya-systemone.openapi.yaml`, generates valid and invalid requests for
every operation (its examples, coverage and fuzzing phases), and sends them over a real loopback
socket. Every response must:

- pass schemathesis's own response checks (no server error, documented status, content type,
  headers and body schema) and `Spec.target().violations` (the kit's validator);
- be a 5xx only when it is a documented 503 (`overloaded` / `not_ready`, with Retry-After);
- for a request whose body breaks the spec, be a 4xx whose problem `code` is one the body's own
  defects explain (`expected_codes` works that out from the spec's schemas, not from the
  server's code); a valid body is answered 200 unless a documented limit or `model` explains
  the refusal.

Invalid headers are not refused: the spec's `X-Request-Id` is "echoed; generated when absent" and
a malformed W3C `traceparent` must be ignored (W3C Trace Context, section 3.2), so the check
there is that the response carries a fresh, valid request id and no echoed trace.

`LAYA_FUZZ_EXAMPLES` (default 12 per operation and mode, 120 under `LAYA_PROPERTIES=thorough`)
and `LAYA_FUZZ_SEED` size and seed a run; `scripts/fuzz_reference_server.py` runs this file with
more examples and prints the tally that `LAYA_FUZZ_REPORT` (a JSON path) receives.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis", reason="needs the dev extra")
pytest.importorskip("laya", reason="needs the reference extra")

from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from pytest_laya import Spec  # noqa: E402
from pytest_laya_reference.settings import Limits, ServerSettings  # noqa: E402
from pytest_laya_reference.tiny_checkpoint import embedded_checkpoint_dir  # noqa: E402
from tests.helpers.properties import example_count  # noqa: E402
from tests.helpers.servers import reference_server  # noqa: E402

SPEC_PATH = Path(__file__).resolve().parents[2] / "specs" / "laya-systemone.openapi.yaml"
EXAMPLES = int(os.environ.get("LAYA_FUZZ_EXAMPLES") or example_count(12))
SEED = int(os.environ.get("LAYA_FUZZ_SEED", "20260"))
SERVED_MODELS = ("tiny",)
LIMITS = Limits()
# schemathesis's response checks; `not_a_server_error` only where the 5xx is not a documented 503.
CONFORMANCE_CHECKS = [status_code_conformance, content_type_conformance, response_headers_conformance,
                      response_schema_conformance]
DOCUMENTED_503 = {(503, "overloaded"), (503, "not_ready")}

config = schemathesis.Config.from_dict({
    "seed": SEED,
    "generation": {"mode": "all", "max-examples": EXAMPLES, "database": "none"},
})
schema = schemathesis.openapi.from_path(SPEC_PATH, config=config)

# (operation, mode of the body or "-", status, problem code or "-") -> cases; the script reads it.
TALLY: Counter[tuple[str, str, int, str]] = Counter()


@pytest.fixture(scope="module")
def reference():
    models = {name: str(embedded_checkpoint_dir()) for name in SERVED_MODELS}
    with reference_server(ServerSettings(), models=models, device="cpu") as server:
        yield server
    report = os.environ.get("LAYA_FUZZ_REPORT")
    if report:
        rows = [{"operation": op, "body": mode, "status": status, "code": code, "cases": n}
                for (op, mode, status, code), n in sorted(TALLY.items())]
        Path(report).write_text(json.dumps({"examples": EXAMPLES, "seed": SEED, "cases": sum(TALLY.values()),
                                            "rows": rows}, indent=1))


# -- the oracle: which refusals a body's own defects explain -------------------------------------

def _has_lone_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return any(0xD800 <= ord(ch) <= 0xDFFF for ch in value)
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    return False


def _state_defects(state: Any, codes: set[str]) -> None:
    if not isinstance(state, (str, dict, list)):
        codes.add("malformed_request")
        return
    chars = len(state) if isinstance(state, str) else len(json.dumps(state, ensure_ascii=False))
    if chars > LIMITS.max_state_chars:
        codes.add("state_too_large")


MIN_CONFIDENCE_BUCKETS = {"default"} | {f"{t}:{n}" for t in ("choice", "score", "noul") for n in ("2", "3-5", "6-10", "11+")}
TOKEN_BUDGET = 8192  # laya-serve's default LAYA_MAX_TOKEN_BUDGET, the spec's MaxLen maximum


def _threshold(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and 0 <= value <= 1


def _control_defects(body: dict, codes: set[str]) -> None:
    """laya's request controls (the spec's MaxLen, HeadMaxLen, MinConfidence, RoutingControl)."""
    for name in ("max_len", "head_max_len"):
        value = body.get(name)
        # An integer as laya-serve reads it: 64.0 is refused, though JSON Schema calls it one.
        if value is not None and (type(value) is not int or not 1 <= value <= TOKEN_BUDGET):
            codes.add("invalid_request")
    threshold = body.get("min_confidence")
    if isinstance(threshold, dict):
        if not threshold or any(k not in MIN_CONFIDENCE_BUCKETS or not _threshold(v) for k, v in threshold.items()):
            codes.add("invalid_request")
    elif threshold is not None and not _threshold(threshold):
        codes.add("invalid_request")
    # This server serves named checkpoints and does not route: laya's routing controls are refused.
    if any(body.get(name) is not None for name in ("task", "lang", "lang_guess")):
        codes.add("invalid_request")


def laya_only_codes(raw: bytes) -> set[str]:
    """Refusals a valid body may still get from laya itself, each laya's own 422 `invalid_question`:
    a token window too small for a question's options (the oracle cannot foresee it without a
    tokenizer), and list labels that are one answer key to laya though JSON tells them apart
    (``[false, 0.0]``, ``[true, 1]``: laya keys its answers by the labels as Python values)."""
    try:
        body = json.loads(raw)
    except ValueError:
        return set()
    if not isinstance(body, dict):
        return set()
    if body.get("max_len") is not None or body.get("head_max_len") is not None:
        return {"invalid_question"}
    questions = body.get("questions")
    if isinstance(questions, dict) and any(_labels_collide_in_python(q) for q in questions.values()):
        return {"invalid_question"}
    return set()


def _labels_collide_in_python(question: object) -> bool:
    labels = question.get("criteria") if isinstance(question, dict) else None
    if not isinstance(labels, list) or not all(isinstance(label, (str, int, float)) for label in labels):
        return False
    return len(set(labels)) != len(labels)


def _body_state_defects(path: str, body: dict, codes: set[str]) -> None:
    """The state (or a batch's states) a body carries."""
    if path.endswith("/batch"):
        states = body.get("states")
        if not isinstance(states, list) or not states:
            codes.add("malformed_request")
            return
        if len(states) > LIMITS.max_batch_states:
            codes.add("too_large")
        for state in states:
            _state_defects(state, codes)
    elif "state" not in body:
        codes.add("malformed_request")
    else:
        _state_defects(body["state"], codes)


def _question_defects(questions: dict, codes: set[str]) -> None:
    if len(questions) > LIMITS.max_questions:
        codes.add("too_many_questions")
    spec = Spec.target()
    for qid, question in questions.items():
        # The spec's Question schema, plus the one rule it states in prose: an id names a question.
        if not qid.strip() or spec.schema_violations("#/components/schemas/Question", question):
            codes.add("invalid_question")
        elif question.get("type") == "choice" and len(question["criteria"]) > LIMITS.max_options:
            codes.add("too_large")


def _over_token_budget(path: str, body: dict, questions: dict) -> bool:
    """The spec's Limits.max_request_tokens: states x questions x window (max_len, else 512)."""
    states = body.get("states") if path.endswith("/batch") else [body.get("state")]
    window = body.get("max_len") if type(body.get("max_len")) is int and body["max_len"] >= 1 else 512
    return (isinstance(states, list) and len(states) <= LIMITS.max_batch_states
            and len(questions) <= LIMITS.max_questions
            and len(states) * len(questions) * window > LIMITS.max_request_tokens)


def expected_codes(path: str, raw: bytes, content_type: str | None) -> set[str]:
    """Every problem code that some defect of this request body justifies (empty: a valid body).

    Worked out from the target spec's request schemas and the advertised limits, so a server
    that refuses for a reason the body does not have, or answers a body it should refuse, fails.
    """
    codes: set[str] = set()
    if (content_type or "").split(";")[0].strip().lower() != "application/json":
        return {"unsupported_media_type"}  # the media type is checked before the body is read
    if len(raw) > LIMITS.max_body_bytes:
        codes.add("too_large")
    try:
        body = json.loads(raw)
    except ValueError:
        return codes | {"malformed_request"}
    if not isinstance(body, dict) or _has_lone_surrogate(body):
        return codes | {"malformed_request"}
    if body.get("model") is not None and body["model"] not in SERVED_MODELS:
        codes.add("unknown_model")
    _control_defects(body, codes)
    _body_state_defects(path, body, codes)
    questions = body.get("questions")
    if not isinstance(questions, dict) or not questions:
        codes.add("malformed_request")
        return codes
    _question_defects(questions, codes)
    if _over_token_budget(path, body, questions):
        codes.add("too_large")
    return codes


# -- the test ----------------------------------------------------------------------------------

def _body_mode(case) -> str:
    from schemathesis.core.parameters import ParameterLocation

    component = case.meta.components.get(ParameterLocation.BODY) if case.meta else None
    return component.mode.value if component is not None else "-"


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])
def test_every_response_conforms_and_every_refusal_is_explained(case, reference):
    response = case.call(base_url=reference.url, timeout=30)
    path = case.operation.path
    headers = {name.lower(): ", ".join(values) for name, values in response.headers.items()}
    problem = response.json() if headers.get("content-type") == "application/problem+json" else {}
    code = problem.get("code", "-")
    mode = _body_mode(case)
    TALLY[(f"{case.method.upper()} {path}", mode, response.status_code, code)] += 1

    if case.method.upper() != case.operation.method.upper():
        # schemathesis's unsupported-method probes: a method the spec does not document at all.
        assert response.status_code == 405 and headers.get("allow") and headers.get("x-request-id"), response.text
        return
    shed = (response.status_code, code) in DOCUMENTED_503
    case.validate_response(response, checks=CONFORMANCE_CHECKS + ([] if shed else [not_a_server_error]))
    violations = Spec.target().violations(case.method, path, response.status_code, headers, response.content)
    assert violations == [], "\n".join(map(str, violations))

    if response.status_code >= 500:
        assert shed, response.text
        return
    sent_id = (case.headers or {}).get("X-Request-Id")
    if sent_id is not None and headers["x-request-id"] != sent_id:
        # An invalid id is replaced by a generated one; a valid one is always echoed.
        assert not (1 <= len(str(sent_id)) <= 128 and str(sent_id).isascii() and str(sent_id).isprintable()
                    and " " not in str(sent_id)), f"valid X-Request-Id {sent_id!r} was not echoed"
    if case.method.upper() != "POST":
        assert response.status_code == 200, response.text
        return
    raw = response.request.body or b""
    raw = raw.encode("utf-8") if isinstance(raw, str) else raw
    explained = expected_codes(path, raw, response.request.headers.get("content-type"))
    if not explained:
        tolerated = laya_only_codes(raw)
        assert response.status_code == 200 or (response.status_code == 422 and code in tolerated), \
            f"a valid body was refused: {response.text}"
    else:
        assert response.status_code in (400, 413, 415, 422), f"{explained} expected for {raw[:300]!r}, got {response.status_code}: {response.text}"
        assert code in explained, f"refused with {code!r}, but the body's defects explain only {sorted(explained)}"


# -- the oracle itself: it must tell a valid body from each kind of defect ----------------------

NOUL = {"type": "noul", "instructions": "Refund?"}


@pytest.mark.parametrize(("path", "body", "codes"), [
    ("/v1/systemone", {"state": "x", "questions": {"q": NOUL}}, set()),
    ("/v1/systemone", {"state": "x", "questions": {"q": NOUL}, "model": None}, set()),
    ("/v1/systemone", {"state": "x", "questions": {"q": NOUL}, "model": "klingon"}, {"unknown_model"}),
    ("/v1/systemone", {"questions": {"q": NOUL}}, {"malformed_request"}),
    ("/v1/systemone", {"state": 5, "questions": {"q": NOUL}}, {"malformed_request"}),
    ("/v1/systemone", {"state": "x", "questions": {}}, {"malformed_request"}),
    ("/v1/systemone", {"state": "x", "questions": {" ": NOUL}}, {"invalid_question"}),
    ("/v1/systemone", {"state": "x", "questions": {"q": {"type": "noul"}}}, {"invalid_question"}),
    ("/v1/systemone", {"state": "x" * 50_001, "questions": {"q": NOUL}}, {"state_too_large"}),
    ("/v1/systemone", {"state": "x", "questions": {f"q{i}": NOUL for i in range(65)}}, {"too_many_questions"}),
    ("/v1/systemone", {"state": "x", "questions": {"q": {"type": "choice", "instructions": "?",
                                                         "criteria": [str(i) for i in range(101)]}}}, {"too_large"}),
    ("/v1/systemone/batch", {"states": ["a"], "questions": {"q": NOUL}}, set()),
    ("/v1/systemone/batch", {"states": [], "questions": {"q": NOUL}}, {"malformed_request"}),
    ("/v1/systemone/batch", {"states": ["a"] * 65, "questions": {"q": NOUL}}, {"too_large"}),
    ("/v1/systemone", {"state": "x", "questions": {"q": NOUL}, "max_len": 64, "head_max_len": 16,
                       "min_confidence": {"choice:2": 0.5, "default": 0}}, set()),
    ("/v1/systemone", {"state": "x", "questions": {"q": NOUL}, "max_len": None, "lang": None}, set()),
    ("/v1/systemone", {"state": "x", "questions": {"q": NOUL}, "max_len": 64.0}, {"invalid_request"}),
    ("/v1/systemone", {"state": "x", "questions": {"q": NOUL}, "head_max_len": 8193}, {"invalid_request"}),
    ("/v1/systemone", {"state": "x", "questions": {"q": NOUL}, "min_confidence": {"choice:7": 0.5}}, {"invalid_request"}),
    ("/v1/systemone", {"state": "x", "questions": {"q": NOUL}, "min_confidence": True}, {"invalid_request"}),
    ("/v1/systemone/batch", {"states": ["a"], "questions": {"q": NOUL}, "lang": "de"}, {"invalid_request"}),
    ("/v1/systemone", {"state": "x", "questions": {"q": {"type": "choice", "instructions": "?", "criteria": [7, True, 1.5]}}}, set()),
    ("/v1/systemone", {"state": "x", "questions": {f"q{i}": NOUL for i in range(4)}, "max_len": 8192}, set()),
    ("/v1/systemone", {"state": "x", "questions": {f"q{i}": NOUL for i in range(5)}, "max_len": 8192}, {"too_large"}),
    ("/v1/systemone/batch", {"states": ["a"] * 64, "questions": {f"q{i}": NOUL for i in range(2)}}, {"too_large"}),
])
def test_the_oracle_explains_each_defect_and_nothing_else(path, body, codes):
    assert expected_codes(path, json.dumps(body).encode(), "application/json") == codes


def test_the_oracle_puts_media_type_and_json_first():
    assert expected_codes("/v1/systemone", b"{}", "text/plain") == {"unsupported_media_type"}
    assert expected_codes("/v1/systemone", b'{"state": ', "application/json; charset=utf-8") == {"malformed_request"}
    assert expected_codes("/v1/systemone", b'{"state": "\\ud800", "questions": {}}', "application/json") == {"malformed_request"}


@pytest.mark.parametrize("labels", [[False, 0.0], [True, 1]])
def test_labels_that_are_one_key_to_laya_are_its_refusal_and_the_oracle_allows_it(reference, labels):
    """The target spec tells ``false`` from ``0.0``; laya keys its answers by Python value and
    refuses them as one repeated label. The oracle must allow that refusal of a valid body."""
    import httpx

    body = {"state": "A customer writes in.", "questions": {"q": {"type": "choice", "instructions": "Which?", "criteria": labels}}}
    raw = json.dumps(body).encode()
    assert expected_codes("/v1/systemone", raw, "application/json") == set()
    response = httpx.post(f"{reference.url}/v1/systemone", content=raw,
                          headers={"content-type": "application/json"}, timeout=30)
    assert response.status_code == 422 and response.json()["code"] == "invalid_question", response.text
    assert laya_only_codes(raw) == {"invalid_question"}

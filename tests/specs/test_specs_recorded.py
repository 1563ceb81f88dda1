"""The current spec is true to recorded traffic; the target spec names what today's servers lack.

Recorded traffic: tests/data/system1/ (copied as given) and the shipped cassettes of laya-serve
0.4.15 (default and LAYA_JEV_STRICT=1) and of the reference server.
"""

from __future__ import annotations

import pytest

from pytest_laya.specs import Spec
from tests.helpers.recorded import LAYA_SERVE, LAYA_SERVE_STRICT, REFERENCE, SYSTEM1, recording, recordings

ALL = recordings()
# Every recorded answer, a 404 to an unknown path and a 405 included (the spec's `x-unrouted`).
DOCUMENTED = ALL
WITH_REQUEST = [r for r in DOCUMENTED if r.request is not None]
REFERENCE_RECORDINGS = recordings(REFERENCE)
#: The reference server's success answers: what today's clients read from it.
REFERENCE_SUCCESSES = [r for r in REFERENCE_RECORDINGS if r.status == 200
                       and r.path in ("/v1/systemone", "/v1/systemone/batch", "/health")]


def test_every_shared_recording_was_copied():
    names = {p.name for p in SYSTEM1.glob("*.json")}
    assert len(names) == 15
    assert {"worker.health.json", "frontend-down.unreachable.json", "laya-serve.combined.json"} <= names


def test_laya_serve_recordings_cover_the_cases_the_spec_is_checked_against():
    default = {p.stem for p in LAYA_SERVE.glob("*.yaml")}
    assert {"choice", "score", "noul", "combined", "batch", "health", "overload", "malformed_json",
            "too_many_questions", "missing_bearer", "invalid_question", "not_found", "method_not_allowed"} <= default
    strict = {p.stem for p in LAYA_SERVE_STRICT.glob("*.yaml")}
    assert {"choice", "score", "noul", "batch", "health", "malformed_json", "invalid_question", "missing_bearer"} <= strict


@pytest.mark.parametrize("rec", DOCUMENTED, ids=lambda r: r.id)
def test_every_recorded_response_conforms_to_the_current_spec(rec):
    violations = Spec.current().violations(rec.method, rec.path, rec.status, rec.headers, rec.body_bytes)
    assert violations == [], "\n".join(map(str, violations))


@pytest.mark.parametrize("rec", WITH_REQUEST, ids=lambda r: r.id)
def test_stored_requests_fail_the_request_schema_exactly_when_refused_as_invalid(rec):
    violations = Spec.current().request_violations(rec.method, rec.path, rec.request)
    if rec.status in (400, 422):
        assert violations, f"{rec.id} got {rec.status} but its request passes the schema"
    else:
        assert violations == [], "\n".join(map(str, violations))


UNROUTED = [r for r in ALL if r.status in (404, 405) and Spec.current().operation(r.method, r.path) is None]


def test_404_and_405_to_routes_the_spec_lacks_were_recorded():
    assert {(r.status, r.path) for r in UNROUTED} >= {(404, "/nope"), (405, "/v1/systemone")}


@pytest.mark.parametrize("rec", UNROUTED, ids=lambda r: r.id)
def test_a_404_or_405_to_a_route_the_spec_lacks_is_held_to_its_problem_shape(rec):
    spec = Spec.current()
    assert spec.describes(rec.method, rec.path, rec.status)
    assert spec.violations(rec.method, rec.path, rec.status, rec.headers, rec.body_bytes) == []
    [wrong] = spec.violations(rec.method, rec.path, rec.status, rec.headers, b'{"error": "gone"}')
    assert wrong.where == "/body/detail" and wrong.rule.startswith("#/components/responses/")


@pytest.mark.parametrize("rec", DOCUMENTED, ids=lambda r: r.id)
def test_todays_servers_miss_the_target_request_id(rec):
    # No server today sends X-Request-Id: the target spec must say so for every response.
    where = {v.where for v in Spec.target().violations(rec.method, rec.path, rec.status, rec.headers, rec.body_bytes)}
    assert "/headers/x-request-id" in where


def test_target_reports_missing_served_by_and_plain_detail_errors():
    ok = recording(LAYA_SERVE, "combined")
    where = {v.where for v in Spec.target().violations(ok.method, ok.path, ok.status, ok.headers, ok.body_bytes)}
    assert "/body/served_by" in where
    refused = recording(SYSTEM1, "worker.unauthorized")
    where = {v.where for v in Spec.target().violations(refused.method, refused.path, refused.status, refused.headers, refused.body_bytes)}
    assert "/headers/content-type" in where  # {"detail"} is not application/problem+json


def test_strict_mode_answers_carry_jevs_field_set_only():
    # What LAYA_JEV_STRICT=1 changes, as recorded: a client reading these needs the current spec's
    # noul-without-confidence rule, and nothing else of laya's additions is there to lean on.
    body = recording(LAYA_SERVE_STRICT, "combined").body
    assert set(body) == {"model", "answers", "usage"} and set(body["usage"]) == {"input_tokens", "output_tokens"}
    assert {qid: set(a) for qid, a in body["answers"].items()} == {
        "department": {"type", "choice", "probabilities", "confidence"},
        "urgency": {"type", "score", "probabilities", "confidence", "legend"},
        "refund": {"type", "noul"},
    }


@pytest.mark.parametrize("rec", REFERENCE_SUCCESSES, ids=lambda r: r.id)
def test_the_reference_servers_success_answers_conform_to_the_current_spec_too(rec):
    # Today's clients keep working against it (its errors differ by design: problem+json).
    violations = Spec.current().violations(rec.method, rec.path, rec.status, rec.headers, rec.body_bytes)
    assert violations == [], "\n".join(map(str, violations))


def test_the_reference_servers_errors_differ_from_the_current_spec_by_design():
    refused = [r for r in REFERENCE_RECORDINGS if r.status >= 400 and (r.method, r.path) == ("POST", "/v1/systemone")]
    assert len(refused) >= 10
    for rec in refused:
        where = {v.where for v in Spec.current().violations(rec.method, rec.path, rec.status, rec.headers, rec.body_bytes)}
        # problem+json, not {"detail"} as application/json; 415 is a status no server here sends.
        assert "/headers/content-type" in where or where == {"/status"}, (rec.id, where)

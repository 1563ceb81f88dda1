"""The current spec is true to recorded traffic; the target spec names what today's servers lack."""

from __future__ import annotations

import pytest

from pytest_laya.specs import Spec
from tests.helpers.recorded import LAYA_SERVE, SYSTEM1, recordings

ALL = recordings()
# Routes the current spec does not claim (404/405 probes) are checked separately below.
DOCUMENTED = [r for r in ALL if r.status not in (404, 405)]
WITH_REQUEST = [r for r in DOCUMENTED if r.request is not None]


def test_every_shared_recording_was_copied():
    names = {p.name for p in SYSTEM1.glob("*.json")}
    assert len(names) == 15
    assert {"worker.health.json", "frontend-down.unreachable.json", "laya-serve.combined.json"} <= names


def test_laya_serve_recordings_cover_the_cases_the_spec_is_checked_against():
    cases = {p.name.split(".")[1] for p in LAYA_SERVE.glob("*.json")}
    assert {"choice", "score", "noul", "combined", "batch", "health", "overload", "malformed_json",
            "too_many_questions", "missing_bearer", "invalid_question"} <= cases


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


@pytest.mark.parametrize("rec", [r for r in ALL if r.status in (404, 405)], ids=lambda r: r.id)
def test_undocumented_routes_are_violations_not_exceptions(rec):
    violations = Spec.current().violations(rec.method, rec.path, rec.status, rec.headers, rec.body_bytes)
    assert violations and violations[0].where in ("/path", "/method")


@pytest.mark.parametrize("rec", DOCUMENTED, ids=lambda r: r.id)
def test_todays_servers_miss_the_target_request_id(rec):
    # No server today sends X-Request-Id: the target spec must say so for every response.
    where = {v.where for v in Spec.target().violations(rec.method, rec.path, rec.status, rec.headers, rec.body_bytes)}
    assert "/headers/x-request-id" in where


def test_target_reports_missing_served_by_and_plain_detail_errors():
    by_name = {r.file.name: r for r in ALL}
    ok = by_name["laya-serve.combined.json"]
    where = {v.where for v in Spec.target().violations(ok.method, ok.path, ok.status, ok.headers, ok.body_bytes)}
    assert "/body/served_by" in where
    refused = by_name["worker.unauthorized.json"]
    where = {v.where for v in Spec.target().violations(refused.method, refused.path, refused.status, refused.headers, refused.body_bytes)}
    assert "/headers/content-type" in where  # {"detail"} is not application/problem+json

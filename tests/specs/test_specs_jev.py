"""What Jev servers really vary on, admitted by the current spec (and the target where it says so);
what no server sends, still refused."""

from __future__ import annotations

import pytest

from pytest_laya.specs import Spec

JSON = {"content-type": "application/json"}
CHOICE = {"type": "choice", "choice": "a", "probabilities": {"a": 0.7, "b": 0.3}, "confidence": 0.4}
SCORE = {"type": "score", "score": 0.3, "probabilities": {"0": 0.7, "1": 0.3}, "confidence": 0.2,
         "legend": {"0": "low", "1": "high"}}
SERVED_BY = {"checkpoint": "tiny", "revision": "sha256:00", "device": "cpu", "weights_dtype": "float32",
             "compiled": False}


def body(**changes):
    out = {"model": "laya-rl-agent", "answers": {"q": CHOICE}, "usage": {"input_tokens": 12, "output_tokens": 0}}
    out.update(changes)
    return out


def where(spec, payload, status=200, headers=JSON, method="POST", path="/v1/systemone"):
    return sorted(v.where for v in spec.violations(method, path, status, headers, payload))


@pytest.mark.parametrize("value", [
    "inference;dur=3.10",                          # laya-serve 0.4.15
    "queue;dur=0.10, infer;dur=13.14",             # the reference server
    'cache;desc="Cache Read";dur=23.2, miss',      # W3C's examples: quoted values, no parameters
    "total ; dur = 1",                             # optional whitespace around ; and =
])
def test_any_well_formed_server_timing_meets_the_current_spec(value):
    assert where(Spec.current(), body(), headers={**JSON, "Server-Timing": value}) == []


@pytest.mark.parametrize("value", ["", "inference;dur=", "queue dur=1", ";dur=1", "a;dur=1,", 'x;desc="open'])
def test_a_malformed_server_timing_breaks_the_current_spec(value):
    assert where(Spec.current(), body(), headers={**JSON, "Server-Timing": value}) == ["/headers/server-timing"]


@pytest.mark.parametrize("spec", ["current", "target"])
def test_a_noul_answer_without_confidence_meets_both_specs(spec):
    payload = body(answers={"r": {"type": "noul", "noul": 0.7}}, served_by=SERVED_BY)
    headers = {**JSON, "X-Request-Id": "r1", "Server-Timing": "queue;dur=0, infer;dur=1"}
    assert where(getattr(Spec, spec)(), payload, headers=headers) == []


@pytest.mark.parametrize("answer", [CHOICE, SCORE], ids=["choice", "score"])
def test_choice_and_score_answers_still_need_a_confidence(answer):
    broken = {k: v for k, v in answer.items() if k != "confidence"}
    assert "/body/answers/q/confidence" in where(Spec.current(), body(answers={"q": broken}))


@pytest.mark.parametrize("extra", [{}, {"latency_ms": 13}, {"latency_ms": 13.14}, {"timing": {"queue": 0.1, "infer": 13}}])
def test_latency_in_the_body_as_a_number_or_a_timing_object_or_neither(extra):
    assert where(Spec.current(), body(**extra)) == []


@pytest.mark.parametrize("extra, pointer", [
    ({"latency_ms": "13"}, "/body/latency_ms"),
    ({"latency_ms": -1}, "/body/latency_ms"),
    ({"timing": {"infer": "13ms"}}, "/body/timing/infer"),
    ({"timing": 13}, "/body/timing"),
])
def test_latency_of_a_shape_no_server_sends_is_refused(extra, pointer):
    assert where(Spec.current(), body(**extra)) == [pointer]


def test_fastapi_validation_errors_meet_the_current_spec():
    detail = [{"type": "missing", "loc": ["body", "state"], "msg": "Field required", "input": None}]
    assert where(Spec.current(), {"detail": detail}, status=422) == []
    assert where(Spec.current(), {"detail": "request body must be valid JSON"}, status=400) == []


@pytest.mark.parametrize("detail", [[], ["state is required"], [{"msg": "no loc"}], 7])
def test_error_details_of_other_shapes_are_refused(detail):
    assert where(Spec.current(), {"detail": detail}, status=422)


def test_a_server_without_health_answers_a_documented_404():
    assert where(Spec.current(), {"detail": "Not Found"}, status=404, method="GET", path="/health") == []
    assert where(Spec.target(), {"detail": "Not Found"}, status=404, method="GET", path="/health") == ["/status"]


@pytest.mark.parametrize("spec", ["current", "target"])
def test_the_spec_claim_is_current_or_target_in_header_and_health(spec):
    chosen = getattr(Spec, spec)()
    headers = {**JSON, "X-Request-Id": "r1", "Laya-Spec": "target"}
    health = {"status": "ok", "spec": "target", "ready": True, "models": {"tiny": SERVED_BY},
              "limits": {"max_questions": 64, "max_state_chars": 50000, "max_body_bytes": 2097152, "max_options": 100}}
    assert where(chosen, health, headers=headers, method="GET", path="/health") == []
    bad = where(chosen, {**health, "spec": "v2"}, headers={**headers, "Laya-Spec": "v2"}, method="GET", path="/health")
    assert "/headers/laya-spec" in bad and any(w.endswith("/spec") or w == "/body" for w in bad)

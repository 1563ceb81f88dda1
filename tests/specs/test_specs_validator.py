"""`Spec.violations`: what users of the validator rely on, one behaviour per test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_laya.specs import Spec, SpecError, Violation

OK_BODY = {
    "model": "laya-rl-agent",
    "answers": {
        "q": {"type": "choice", "choice": "a", "probabilities": {"a": 0.7, "b": 0.3}, "confidence": 0.4},
    },
    "usage": {"input_tokens": 12, "output_tokens": 0},
}
JSON = {"content-type": "application/json"}


def v(spec, body, status=200, headers=JSON, method="POST", path="/v1/systemone"):
    return spec.violations(method, path, status, headers, body)


def test_a_conforming_response_has_no_violations():
    assert v(Spec.current(), OK_BODY) == []


@pytest.mark.parametrize("form", ["parsed", "str", "bytes"])
def test_body_may_be_bytes_text_or_parsed_json(form):
    bad = json.loads(json.dumps(OK_BODY))
    bad["answers"]["q"]["probabilities"]["a"] = 1.5
    body = {"parsed": bad, "str": json.dumps(bad), "bytes": json.dumps(bad).encode()}[form]
    assert [str(x) for x in v(Spec.current(), body)] == ["/body/answers/q/probabilities/a: expected <= 1, got 1.5"]


def test_violation_says_where_what_was_expected_and_what_came():
    body = dict(OK_BODY, usage={"output_tokens": 0})
    [found] = v(Spec.current(), body)
    assert isinstance(found, Violation)
    assert (found.where, found.expected, found.actual) == ("/body/usage/input_tokens", "a required property", "absent")
    assert found.rule.startswith("#/paths/~1v1~1systemone/post/responses/200")


def test_each_missing_required_property_is_named_once():
    # jsonschema reports one `required` error per missing name; each names its own property.
    target = Spec.target()
    headers = {**JSON, "x-request-id": "r"}
    found = [x.where for x in target.violations("POST", "/v1/systemone", 200, headers, {"answers": {}})]
    assert sorted(w for w in found if w.startswith("/body/")) == ["/body/model", "/body/served_by", "/body/usage"]
    [health] = target.violations("GET", "/health", 200, headers, {"status": "ok", "loaded": []})
    assert "/ready a required property; /models a required property; /limits a required property" in health.expected


def test_every_problem_is_reported_not_just_the_first():
    body = dict(OK_BODY, model=3, usage={"input_tokens": -1, "output_tokens": 0})
    where = {x.where for x in v(Spec.current(), body)}
    assert where == {"/body/model", "/body/usage/input_tokens"}


def test_wrong_variant_is_reported_on_its_discriminator():
    body = json.loads(json.dumps(OK_BODY))
    body["answers"]["q"]["type"] = "ranking"
    [found] = v(Spec.current(), body)
    assert found.where == "/body/answers/q/type"
    assert "choice" in found.expected and found.actual == '"ranking"'


def test_errors_inside_the_meant_variant_are_reported_precisely():
    body = json.loads(json.dumps(OK_BODY))
    del body["answers"]["q"]["choice"]
    assert [x.where for x in v(Spec.current(), body)] == ["/body/answers/q/choice"]


def test_unknown_path_and_method_are_violations_not_exceptions():
    [path] = v(Spec.current(), OK_BODY, path="/v2/nothing")
    assert path.where == "/path" and "/v1/systemone" in path.expected
    [method] = v(Spec.current(), OK_BODY, method="DELETE")
    assert method.where == "/method" and "POST" in method.expected


def test_query_strings_do_not_hide_the_route():
    assert v(Spec.current(), OK_BODY, path="/v1/systemone?trace=1") == []


def test_undocumented_status_is_a_violation():
    [found] = v(Spec.current(), {"detail": "nope"}, status=418)
    assert found.where == "/status" and "'200'" in found.expected and found.actual == "418"


def test_media_type_must_be_documented_for_the_status():
    found = v(Spec.target(), {"detail": "x"}, status=400, headers={**JSON, "x-request-id": "r1"})
    [found] = found
    assert found.where == "/headers/content-type"
    assert "application/problem+json" in found.expected


def test_raw_body_without_content_type_is_a_violation():
    [found] = v(Spec.current(), json.dumps(OK_BODY), headers={})
    assert found.where == "/headers/content-type" and found.actual == "absent"


def test_invalid_json_is_a_violation():
    [found] = v(Spec.current(), b'{"answers": ', headers=JSON)
    assert found.where == "/body" and "invalid JSON" in found.actual


def test_text_plain_proxy_answer_validates_as_text():
    assert v(Spec.current(), b"backend unavailable\n", status=502, headers={"Content-Type": "text/plain; charset=utf-8"}) == []


def test_required_headers_are_checked_for_presence_and_format():
    spec = Spec.target()
    problem = {"type": "/problems/overloaded", "title": "Overloaded", "status": 503, "code": "overloaded"}
    ph = {"content-type": "application/problem+json"}
    where = {x.where for x in v(spec, problem, status=503, headers=ph)}
    assert where == {"/headers/x-request-id", "/headers/retry-after"}
    bad = v(spec, problem, status=503, headers={**ph, "X-Request-Id": "has space", "Retry-After": "soon"})
    assert {x.where for x in bad} == {"/headers/x-request-id", "/headers/retry-after"}
    assert all("matching" in x.expected for x in bad)
    assert v(spec, problem, status=503, headers={**ph, "x-request-id": "abc-123", "retry-after": "2"}) == []


def test_header_names_are_case_insensitive_and_may_come_as_pairs():
    spec = Spec.current()
    pairs = [("Content-Type", "application/json"), ("Server-Timing", "inference;dur=3.5")]
    assert spec.violations("POST", "/v1/systemone", 200, pairs, OK_BODY) == []
    [bad] = spec.violations("POST", "/v1/systemone", 200, [*pairs[:1], ("SERVER-TIMING", "total;dur=")], OK_BODY)
    assert bad.where == "/headers/server-timing"


def test_target_problem_code_must_fit_the_status():
    spec = Spec.target()
    headers = {"content-type": "application/problem+json", "x-request-id": "r1"}
    wrong = {"type": "/problems/overloaded", "title": "x", "status": 413, "code": "overloaded"}
    [found] = v(spec, wrong, status=413, headers=headers)
    assert found.where == "/body/code" and "too_many_questions" in found.expected


def test_target_invalid_question_must_name_every_question():
    spec = Spec.target()
    headers = {"content-type": "application/problem+json", "x-request-id": "r1"}
    problem = {"type": "/problems/invalid_question", "title": "Invalid question", "status": 422, "code": "invalid_question"}
    assert [x.where for x in v(spec, problem, status=422, headers=headers)] == ["/body/errors"]
    problem["errors"] = [{"pointer": "/questions/q1/type", "detail": "unknown type"}]
    assert [x.where for x in v(spec, problem, status=422, headers=headers)] == ["/body/errors/0/question"]
    problem["errors"][0]["question"] = "q1"
    assert v(spec, problem, status=422, headers=headers) == []


def test_request_violations():
    spec = Spec.current()
    good = {"state": "hi", "questions": {"q": {"type": "noul", "instructions": "?"}}}
    assert spec.request_violations("POST", "/v1/systemone", good) == []
    assert spec.request_violations("POST", "/v1/systemone", json.dumps(good).encode()) == []
    [missing] = spec.request_violations("POST", "/v1/systemone", {"state": "hi"})
    assert missing.where == "/body/questions"
    [route] = spec.request_violations("POST", "/nope", good)
    assert route.where == "/path"
    [bad_json] = spec.request_violations("POST", "/v1/systemone", b"{not json")
    assert bad_json.where == "/body"


def test_target_refuses_empty_questions_that_today_is_answered():
    body = {"state": "hi", "questions": {}}
    assert Spec.current().request_violations("POST", "/v1/systemone", body) == []
    assert [x.where for x in Spec.target().request_violations("POST", "/v1/systemone", body)] == ["/body/questions"]


def test_conforming_bodies_take_the_compiled_path_and_a_rejection_builds_its_validator_once():
    # The compiled predicates accept conforming traffic without building a jsonschema validator
    # (what keeps replay fast); a rejection builds one per schema, then reuses it.
    spec = Spec.from_path(Spec.current().source, check_schemas=False)
    for _ in range(2):
        assert v(spec, OK_BODY) == []
    assert spec._validators == {}
    bad = json.loads(json.dumps(OK_BODY))
    bad["answers"]["q"]["confidence"] = 4.0
    assert [x.where for x in v(spec, bad)] == ["/body/answers/q/confidence"]
    compiled = dict(spec._validators)
    assert len(compiled) == 1
    assert [x.where for x in v(spec, bad)] == ["/body/answers/q/confidence"]
    assert spec._validators == compiled and all(spec._validators[k] is compiled[k] is not None for k in compiled)


def test_a_format_the_kit_checks_stays_on_the_compiled_path():
    linked = {"openapi": "3.1.0", "info": {"title": "f", "version": "1"}, "paths": {"/x": {"get": {"responses": {
        "200": {"description": "ok", "content": {"application/json": {"schema": {
            "type": "object", "properties": {"next": {"type": "string", "format": "uri-reference"}}}}}}}}}}}
    spec = Spec(linked, name="f")
    assert v(spec, {"next": "/page/2"}, method="GET", path="/x") == []
    assert spec._validators == {}  # accepted without jsonschema
    assert [x.where for x in v(spec, {"next": "/page 2"}, method="GET", path="/x")] == ["/body/next"]


def test_remembered_routes_stay_bounded():
    spec = Spec.from_path(Spec.current().source, check_schemas=False)
    sizes = set()
    for n in range(600):
        spec.operation("GET", f"/v1/unknown/{n}")
        sizes.add(len(spec._routed))
    assert max(sizes) == 512 and min(sizes) == 1  # full, then cleared and refilled


def test_the_bundled_documents_are_found_in_a_checkout_and_in_a_wheel():
    from pytest_laya.specs.spec import CURRENT_SPEC_FILE, TARGET_SPEC_FILE, _bundled_path

    root = Path(__file__).resolve().parents[2]
    for name in (CURRENT_SPEC_FILE, TARGET_SPEC_FILE):
        found = _bundled_path(name)
        # A checkout has them in specs/; an installed wheel inside the package (tests/integration/test_packaging.py).
        assert found.is_file() and found.name == name
        assert found in (root / "specs" / name, root / "pytest_laya" / "specs" / "documents" / name)


def test_is_valid_is_no_violations():
    spec = Spec.current()
    assert spec.is_valid("POST", "/v1/systemone", 200, JSON, OK_BODY)
    assert not spec.is_valid("POST", "/v1/systemone", 200, JSON, {**OK_BODY, "answers": []})
    assert not spec.is_valid("GET", "/v1/systemone", 200, JSON, OK_BODY)
    assert not spec.is_valid("POST", "/nowhere", 200, JSON, OK_BODY)
    assert not spec.is_valid("POST", "/v1/systemone", 200, {}, json.dumps(OK_BODY))
    assert spec.is_valid("POST", "/v1/systemone", 200, JSON, json.dumps(OK_BODY))


def test_current_and_target_are_loaded_once():
    assert Spec.current() is Spec.current()
    assert Spec.target() is Spec.target()
    assert Spec.current().name == "current" and Spec.target().name == "target"


# -- bad spec files: one clear error naming the file and the problem --------------------

def test_missing_spec_file(tmp_path):
    path = tmp_path / "absent.yaml"
    with pytest.raises(SpecError, match=r"cannot read spec .*absent\.yaml"):
        Spec.from_path(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("openapi: 3.1.0\npaths: {a: [\n", "is not valid YAML"),
        ("- just\n- a list\n", r"expected an OpenAPI document \(a mapping\), got list"),
        ("openapi: 3.1.0\npaths: {/x: [get]}\n", r"paths\['/x'\] must be a mapping"),
        ("openapi: 3.1.0\npaths: {/x: {get: {responses: {'200': {description: ok, content: {application/json: "
         "{schema: {allOf: [{$ref: 'other.yaml#/a'}]}}}}}}}}\n",
         r"only local \$refs are supported, found 'other.yaml#/a' at "
         r"/paths/~1x/get/responses/200/content/application~1json/schema/allOf/0$"),
        ("openapi: 3.0.3\npaths: {/x: {get: {responses: {}}}}\n", "expected 'openapi: 3.1.x'"),
        ("openapi: 3.1.0\ninfo: {title: t, version: '1'}\n", "no 'paths'"),
        ("openapi: 3.1.0\npaths: {/x: {get: {summary: s}}}\n", "GET /x has no 'responses'"),
        ("openapi: 3.1.0\npaths: {/x: {get: {responses: {'200': {$ref: '#/components/responses/Gone'}}}}}\n",
         "points to nothing"),
        ("openapi: 3.1.0\npaths: {/x: {get: {responses: {'200': {$ref: 'other.yaml#/a'}}}}}\n",
         "only local \\$refs"),
        ("openapi: 3.1.0\npaths: {/x: {get: {responses: {}}}}\ncomponents: {schemas: {Bad: {type: 12}}}\n",
         "components/schemas/Bad is not a valid JSON Schema"),
        ("openapi: 3.1.0\npaths: !!python/object/apply:os.system ['echo pwned']\n", "is not valid YAML"),
    ],
)
def test_invalid_spec_file(tmp_path, text, message):
    path = tmp_path / "broken.openapi.yaml"
    path.write_text(text)
    with pytest.raises(SpecError, match=message) as info:
        Spec.from_path(path)
    assert str(path) in str(info.value)


def test_any_component_schema_can_be_checked_with_a_pointer_prefix():
    spec = Spec.target()
    bad = {"type": "choice", "instructions": "Which?", "criteria": []}
    [found] = spec.schema_violations("#/components/schemas/Question", bad, where="/questions/q1")
    assert found.where == "/questions/q1/criteria"
    assert spec.schema_violations("#/components/schemas/Question", {"type": "noul", "instructions": "?"}) == []
    with pytest.raises(SpecError, match="points to nothing"):
        spec.schema_violations("#/components/schemas/Nope", {})
    with pytest.raises(ValueError, match="local JSON pointer"):
        spec.schema_violations("components/schemas/Question", {})


def test_each_body_is_judged_on_its_own_bytes_whatever_was_checked_before():
    # A body is parsed once for both specs; another body, even equal-looking, is parsed for itself.
    bad_body = json.loads(json.dumps(OK_BODY))
    bad_body["answers"]["q"]["confidence"] = 4.0  # as many bytes as the good 0.4
    good, bad = json.dumps(OK_BODY).encode(), json.dumps(bad_body).encode()
    for body, broken in ((good, False), (bad, True), (good, False), (bytes(bytearray(bad)), True), (bad, True)):
        for spec in (Spec.current(), Spec.target()):
            found = v(spec, body, headers={**JSON, "x-request-id": "r-1"})
            assert any(x.where == "/body/answers/q/confidence" for x in found) is broken, (spec.name, found)


def test_judge_is_violations_and_documented_headers_in_one():
    from tests.helpers.recorded import recordings

    for rec in recordings()[:40]:
        for spec in (Spec.current(), Spec.target()):
            args = (rec.method, rec.path, rec.status, rec.headers, rec.body_bytes)
            assert spec.judge(*args) == (spec.violations(*args), spec.documented_headers(rec.method, rec.path, rec.status))
    assert Spec.target().judge("GET", "/nowhere", 200, {}, b"") == (Spec.target().violations("GET", "/nowhere", 200, {}, b""), [])


def test_a_spec_file_is_named_after_its_file_and_read_as_utf8(tmp_path):
    text = (
        "openapi: 3.1.0\ninfo: {title: 'caf\u00e9', version: '1'}\npaths: {/x: {get: {responses: {'200': {description: ok}}}}}\n"
        "components: {schemas: {Odd: {type: 12}}}\n")
    path = tmp_path / "shop.v2.openapi.yaml"
    path.write_bytes(text.encode("utf-8"))
    # check_schemas=False loads a document whose schemas are not checked against the meta-schema.
    spec = Spec.from_path(path, check_schemas=False)
    assert (spec.name, spec.source, spec.document["info"]["title"]) == ("shop.v2", str(path), "caf\u00e9")
    assert Spec.from_path(path, name="mine", check_schemas=False).name == "mine"
    with pytest.raises(SpecError, match="components/schemas/Odd is not a valid JSON Schema"):
        Spec.from_path(path)
    path.write_bytes(b"openapi: 3.1.0\ninfo: {title: '\xff'}\n")
    with pytest.raises(SpecError, match=r"spec .*shop\.v2\.openapi\.yaml is not UTF-8 text: 'utf-8' codec can't decode"):
        Spec.from_path(path)
    with pytest.raises(SpecError, match=r"cannot read spec .*: Is a directory$"):
        Spec.from_path(tmp_path)


# -- 404 and 405 to routes the spec lacks: held to the spec's `x-unrouted` answers (issue 31) ------

PROBLEM = {"content-type": "application/problem+json", "x-request-id": "r1"}


@pytest.mark.parametrize(("method", "path", "status", "headers", "body"), [
    ("GET", "/metrics", 404, JSON, b'{"detail": "Not Found"}'),
    ("GET", "/v1/systemone", 405, {**JSON, "allow": "POST"}, b'{"detail": "Method Not Allowed"}'),
])
def test_a_404_or_405_to_a_route_the_current_spec_lacks_is_held_to_fastapis_detail(method, path, status, headers, body):
    spec = Spec.current()
    assert spec.describes(method, path, status)
    assert spec.violations(method, path, status, headers, body) == []
    assert [x.where for x in spec.violations(method, path, status, headers, b'{"error": "no"}')] == ["/body/detail"]
    assert [x.where for x in spec.violations(method, path, status, {"content-type": "text/html"}, b"<h1>no</h1>")] == [
        "/headers/content-type"]


def test_the_target_spec_asks_a_problem_with_its_code_and_allow_on_a_405():
    spec = Spec.target()
    found = spec.violations("GET", "/nope", 404, PROBLEM, json.dumps(
        {"type": "/problems/not_found", "title": "Not found", "status": 404, "code": "not_found"}).encode())
    assert found == []
    wrong = json.dumps({"type": "/problems/x", "title": "X", "status": 405, "code": "not_found"}).encode()
    assert sorted(x.where for x in spec.violations("GET", "/v1/systemone", 405, PROBLEM, wrong)) == [
        "/body/code", "/headers/allow"]


@pytest.mark.parametrize(("method", "path", "status", "where"), [
    ("GET", "/metrics", 405, "/path"),          # an unknown path answers 404, not 405
    ("GET", "/metrics", 200, "/path"),
    ("DELETE", "/v1/systemone", 404, "/method"),  # a known path's other method answers 405
])
def test_any_other_answer_to_a_route_the_spec_lacks_is_still_a_route_violation(method, path, status, where):
    spec = Spec.current()
    assert not spec.describes(method, path, status)
    assert [x.where for x in spec.violations(method, path, status, JSON, b'{"detail": "x"}')] == [where]

"""Both spec documents are valid OpenAPI 3.1, and every example in them is true to its schema."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate as validate_openapi
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from pytest_laya.specs import Spec

SPECS = {"current": Spec.current, "target": Spec.target}
TARGET_CODES = {
    "malformed_request", "unauthorized", "too_large", "too_many_questions", "state_too_large",
    "unsupported_media_type", "invalid_question", "unknown_model", "inference_failed",
    "backend_unavailable", "backend_timeout", "overloaded", "not_ready", "body_timeout",
}


@pytest.mark.parametrize("name", SPECS)
def test_spec_passes_openapi_spec_validator(name):
    validate_openapi(dict(SPECS[name]().document))


@pytest.mark.parametrize("name", SPECS)
def test_bundled_spec_passes_the_full_load_check(name):
    # Loading a bundled spec skips the meta-schema check of its schemas (start-up cost); this is
    # the check it skips, so a broken schema in a shipped document still fails here.
    bundled = SPECS[name]()
    checked = Spec(bundled.document, name=name, source=bundled.source, check_schemas=True)
    assert checked.operations() == bundled.operations()


def test_a_schema_the_meta_schema_rejects_fails_a_checked_load_only():
    from pytest_laya.specs import SpecError

    document = copy.deepcopy(dict(Spec.current().document))
    document["components"]["schemas"]["Broken"] = {"type": "no-such-type"}
    with pytest.raises(SpecError, match="components/schemas/Broken is not a valid JSON Schema"):
        Spec(document, name="broken")
    Spec(document, name="broken", check_schemas=False)  # the bundled documents' way: structure and refs only


def _deref(doc: dict, node: Any) -> Any:
    while isinstance(node, dict) and "$ref" in node:
        target: Any = doc
        for token in node["$ref"][2:].split("/"):
            target = target[token.replace("~1", "/").replace("~0", "~")]
        node = target
    return node


def _examples(doc: dict) -> Iterator[tuple[str, dict, Any]]:
    """(where, schema, example) for every example the document gives."""
    def walk(node: Any, where: str) -> Iterator[tuple[str, dict, Any]]:
        if isinstance(node, dict):
            schema = node.get("schema")
            if isinstance(schema, dict):
                if "example" in node:
                    yield where + "/example", schema, node["example"]
                for name, ex in (node.get("examples") or {}).items():
                    ex = _deref(doc, ex)
                    if isinstance(ex, dict) and "value" in ex:
                        yield f"{where}/examples/{name}", schema, ex["value"]
            if isinstance(node.get("examples"), list) and ("type" in node or "properties" in node or "allOf" in node):
                for i, value in enumerate(node["examples"]):
                    yield f"{where}/examples/{i}", node, value
            for key, value in node.items():
                yield from walk(value, f"{where}/{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                yield from walk(value, f"{where}/{i}")
    yield from walk(doc, "#")


@pytest.mark.parametrize("name", SPECS)
def test_every_example_validates_against_its_schema(name):
    doc = SPECS[name]().document
    found = list(_examples(doc))
    assert len(found) >= 5, f"the {name} spec should illustrate its schemas with examples"
    # The whole document is registered so the examples' $refs resolve as traffic's do.
    registry = Registry().with_resource("urn:doc", Resource.from_contents(doc, default_specification=DRAFT202012))
    failures = [
        f"{where}: {error.message}"
        for where, schema, example in found
        for error in Draft202012Validator(_absolutize(schema), registry=registry).iter_errors(example)
    ]
    assert failures == []


def test_a_wrong_example_would_be_caught():
    doc = Spec.target().document
    registry = Registry().with_resource("urn:doc", Resource.from_contents(doc, default_specification=DRAFT202012))
    schema = _absolutize({"$ref": "#/components/schemas/ServedBy"})
    assert list(Draft202012Validator(schema, registry=registry).iter_errors({"checkpoint": ""}))


def _absolutize(node: Any) -> Any:
    """`schema` with its local refs pointing into the registered document."""
    if isinstance(node, dict):
        return {k: ("urn:doc" + v if k == "$ref" and isinstance(v, str) and v.startswith("#") else _absolutize(v))
                for k, v in node.items()}
    if isinstance(node, list):
        return [_absolutize(v) for v in node]
    return node


def test_target_marks_every_operation_header_and_schema_with_x_status():
    doc = Spec.target().document
    missing = [f"{op.method.upper()} {op.path}" for op in Spec.target().operations() if op.status not in ("implemented", "planned")]
    for kind in ("headers", "schemas", "parameters"):
        for name, item in doc["components"][kind].items():
            if item.get("x-status") not in ("implemented", "planned"):
                missing.append(f"components/{kind}/{name}")
    assert missing == []


def test_target_has_every_stable_problem_code():
    codes = set(Spec.target().document["components"]["schemas"]["ErrorCode"]["enum"])
    assert TARGET_CODES <= codes


def test_target_has_probes_batch_and_advertised_limits():
    spec = Spec.target()
    for method, path in [("GET", "/livez"), ("GET", "/readyz"), ("GET", "/health"), ("POST", "/v1/systemone/batch")]:
        assert spec.operation(method, path) is not None, f"{method} {path}"
    limits = spec.document["components"]["schemas"]["Limits"]["required"]
    assert {"max_questions", "max_state_chars", "max_body_bytes", "max_options"} <= set(limits)


def test_current_lists_known_gaps():
    gaps = Spec.current().document["x-known-gaps"]
    assert {"no-problem-json", "no-request-id", "no-served-by"} <= {g["id"] for g in gaps}
    assert all(g.get("summary") for g in gaps)


def test_the_servers_problem_table_is_the_target_specs():
    from pytest_laya.wire.problems import PROBLEM_STATUS, PROBLEM_TITLES

    assert set(PROBLEM_STATUS) == set(Spec.target().document["components"]["schemas"]["ErrorCode"]["enum"])
    assert set(PROBLEM_TITLES) == set(PROBLEM_STATUS)

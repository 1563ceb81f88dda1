"""The compiled accept-path agrees with jsonschema: it never accepts what jsonschema rejects."""

from __future__ import annotations

import copy
import decimal
import enum
import fractions
import json
import random
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator, validators
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from pytest_laya.specs import Spec, schema_compiler, schema_source
from pytest_laya.specs.spec import _format_checker
from pytest_laya.wire.pointer import escape as _escape
from tests.helpers.properties import example_count
from tests.helpers.recorded import LAYA_SERVE, LAYA_SERVE_STRICT, REFERENCE, SYSTEM1, recordings

_formats = _format_checker()
CHECKS = {name: func for name, (func, _raises) in _formats.checkers.items()}
URI = "urn:test:schema-compiler"


def _ref(validator: Any, ref: str, instance: Any, schema: Any) -> Iterator[Any]:
    resolver = validator._resolver
    lookups = _LOOKUPS.get(id(resolver))
    if lookups is None:  # dropped with its resolver, so the module keeps no judge's resolvers alive
        lookups = _LOOKUPS[id(resolver)] = {}
        weakref.finalize(resolver, _LOOKUPS.pop, id(resolver), None)
    if ref not in lookups:
        lookups[ref] = resolver.lookup(ref)
    resolved = lookups[ref]
    yield from validator.descend(instance, resolved.contents, resolver=resolved.resolver)


#: id(resolver) -> {reference: what it resolves to}, while that resolver lives.
_LOOKUPS: dict[int, dict[str, Any]] = {}
#: jsonschema's Draft 2020-12 validator with that `$ref`: one class for the module (building a
#: validator class is an attrs class build, about 10 ms, which each reference paid).
_JUDGE = validators.extend(Draft202012Validator, {"$ref": _ref})
#: id(document) -> (document, its crawled registry), for the specs' documents only, which are
#: judged under many pointers and never changed (a test may change its own between judgements).
_SPEC_REGISTRIES: dict[int, tuple[Any, Registry]] = {}


def reference(document: Any, pointer: str) -> Draft202012Validator:
    """What specs.py does: the whole document as one resource, a $ref to the pointer.

    jsonschema judges; only the lookup behind its `$ref` is done once per resolver and
    reference (parsing the URI, walking the pointer: a third of the mutation checks' time), and
    a spec document's registry is built once. With no `$id` or `$dynamicRef` in these documents, a
    reference always resolves to the same place.
    """
    known = _SPEC_REGISTRIES.get(id(document))
    if known is None or known[0] is not document:
        resource = Resource.from_contents(document, default_specification=DRAFT202012)
        known = (document, Registry().with_resource(URI, resource).crawl())
        if any(document is spec.document for spec in SPECS.values()):
            _SPEC_REGISTRIES[id(document)] = known
    return _JUDGE({"$ref": f"{URI}#{pointer}"}, registry=known[1], format_checker=_formats)


def compile_schema(document: Any, pointer: str, **kwargs: Any):
    """The accept path both ways, the compiler's closures and the source `schema_source` writes of
    them, held to one answer (or one exception) on every instance a test asks about."""
    found = schema_compiler.compiled(document, pointer, **kwargs)
    if found is None:
        assert schema_source.compiled_predicate(document, pointer, **kwargs) is None, (document, pointer)
        return None
    compiler, root = found
    closures = schema_compiler.guarded(root)
    written = schema_source.generated(compiler, pointer)
    assert written is not None, "a schema the compiler compiles is written as source"
    source = schema_compiler.guarded(written)  # as `compiled_predicate` gives it

    def both(instance: Any) -> bool:
        answer = closures(instance)
        assert source(instance) is answer, f"the written source says {not answer} on {instance!r}"
        return answer

    return both


def pair(document: Any, pointer: str):
    compiled = compile_schema(document, pointer, format_checks=CHECKS)
    assert compiled is not None, f"{pointer} should compile"
    return compiled, reference(document, pointer).is_valid


def one(schema: Any, **kwargs: Any):
    """compile_schema on a lone schema, wrapped in a document the way specs.py sees one."""
    return compile_schema({"s": schema}, "/s", **kwargs)


def compact(schema: Any) -> str:
    """A test id that names the schema (stable when cases are added, unlike pytest's numbering)."""
    return json.dumps(schema, separators=(",", ":"))


def agree(schema: Any, instances: list[Any], document: dict[str, Any] | None = None) -> list[bool]:
    document = {"s": schema} if document is None else {**document, "s": schema}
    compiled, expected = pair(document, "/s")
    answers = []
    for instance in instances:
        got, want = compiled(instance), expected(instance)
        assert got == want, f"{schema!r} on {instance!r}: compiled {got}, jsonschema {want}"
        answers.append(got)
    return answers


# -- the real specs ---------------------------------------------------------------------

SPECS = {"current": Spec.current(), "target": Spec.target()}
RECORDINGS = recordings(SYSTEM1, LAYA_SERVE, LAYA_SERVE_STRICT, REFERENCE)


def deref(document: Any, node: Any, pointer: str) -> tuple[Any, str]:
    while isinstance(node, dict) and "$ref" in node:
        pointer = node["$ref"][1:]
        node = document
        for token in pointer.lstrip("/").split("/"):
            node = node[token.replace("~1", "/").replace("~0", "~")]
    return node, pointer


def content_pointers(document: Any, content: Any, pointer: str) -> Iterator[tuple[str, Any]]:
    for media, definition in (content or {}).items():
        if isinstance(definition, dict) and "schema" in definition:
            examples = []
            if "example" in definition:
                examples.append(definition["example"])
            for example in (definition.get("examples") or {}).values():
                example, _ = deref(document, example, "")
                if isinstance(example, dict) and "value" in example:
                    examples.append(example["value"])
            yield f"{pointer}/content/{_escape(media)}/schema", examples


def schema_pointers(spec: Spec) -> dict[str, list[Any]]:
    """Every response body, header and request body schema pointer, with the spec's examples."""
    document = spec.document
    found: dict[str, list[Any]] = {}

    def add(pointer: str, examples: list[Any]) -> None:
        found.setdefault(pointer, []).extend(examples)

    for op in spec.operations():
        for status, response in op.definition.get("responses", {}).items():
            response, pointer = deref(document, response, f"{op.pointer}/responses/{_escape(str(status))}")
            for p, examples in content_pointers(document, response.get("content"), pointer):
                add(p, examples)
            for name, header in (response.get("headers") or {}).items():
                header, header_pointer = deref(document, header, f"{pointer}/headers/{_escape(name)}")
                if "schema" in header:
                    add(f"{header_pointer}/schema", [header["example"]] if "example" in header else [])
        if "requestBody" in op.definition:
            request, pointer = deref(document, op.definition["requestBody"], f"{op.pointer}/requestBody")
            for p, examples in content_pointers(document, request.get("content"), pointer):
                add(p, examples)
    for name, header in (document.get("components", {}).get("headers") or {}).items():
        if "schema" in header:
            add(f"/components/headers/{_escape(name)}/schema", [header["example"]] if "example" in header else [])
    for name, schema in (document.get("components", {}).get("schemas") or {}).items():
        add(f"/components/schemas/{_escape(name)}", list(schema.get("examples", [])) if isinstance(schema, dict) else [])
    return found


def response_pointer(spec: Spec, rec: Any) -> list[str]:
    op = spec.operation(rec.method, rec.path)
    if op is None:
        return []
    responses = op.definition.get("responses", {})
    key = next((k for k in (str(rec.status), f"{str(rec.status)[0]}XX", "default") if k in responses), None)
    if key is None:
        return []
    response, pointer = deref(spec.document, responses[key], f"{op.pointer}/responses/{_escape(key)}")
    return [p for p, _ in content_pointers(spec.document, response.get("content"), pointer)]


def request_pointer(spec: Spec, rec: Any) -> list[str]:
    op = spec.operation(rec.method, rec.path)
    if op is None or "requestBody" not in op.definition:
        return []
    request, pointer = deref(spec.document, op.definition["requestBody"], f"{op.pointer}/requestBody")
    return [p for p, _ in content_pointers(spec.document, request.get("content"), pointer)]


LEAVES = (None, -1, 1.5, "x", [], {}, True)


def mutations(value: Any) -> Iterator[Any]:
    """Each key deleted, each leaf replaced by each of LEAVES, an unknown key added to each object.

    In a container with many children (a batch's results, a request's dozens of questions),
    children past the sixth are walked only when their shape is new among their siblings: the
    rest repeat what was already mutated, and would make the test slow for nothing.
    """
    paths: list[tuple[Any, ...]] = []

    def walk(node: Any, path: tuple[Any, ...]) -> None:
        paths.append(path)
        children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        seen: set[str] = set()
        for number, (key, child) in enumerate(children):
            shape = skeleton(child)
            if number < 6 or shape not in seen:
                walk(child, path + (key,))
            seen.add(shape)

    walk(value, ())

    def at(root: Any, path: tuple[Any, ...]) -> Any:
        for step in path:
            root = root[step]
        return root

    for path in paths:
        node = at(value, path)
        if path:
            parent = copy.deepcopy(value)
            holder = at(parent, path[:-1])
            del holder[path[-1]]
            yield parent
        if isinstance(node, dict):
            grown = copy.deepcopy(value)
            at(grown, path)["x_unknown_key"] = 1
            yield grown
        if not isinstance(node, (dict, list)) or not node:
            for leaf in LEAVES:
                if path:
                    changed = copy.deepcopy(value)
                    at(changed, path[:-1])[path[-1]] = copy.deepcopy(leaf)
                    yield changed
                else:
                    yield copy.deepcopy(leaf)


def subvalues(value: Any) -> Iterator[Any]:
    yield value
    if isinstance(value, dict):
        for child in value.values():
            yield from subvalues(child)
    elif isinstance(value, list):
        for child in value:
            yield from subvalues(child)


def skeleton(value: Any) -> str:
    """The shape of a JSON value (keys, nesting, leaf types): mutating two bodies of one shape
    exercises the same schema paths, so the mutation tests take each shape once."""
    def shape(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: shape(v) for k, v in node.items()}
        if isinstance(node, list):
            return [shape(v) for v in node]
        return type(node).__name__
    return json.dumps(shape(value), sort_keys=True)


def bodies() -> list[Any]:
    found = []
    for rec in RECORDINGS:
        found.append(rec.body)
        if rec.request is not None:
            found.append(rec.request)
    return found


@pytest.mark.parametrize("name", SPECS)
def test_every_schema_pointer_of_the_spec_compiles_and_agrees_on_every_recorded_body(name):
    spec = SPECS[name]
    pointers = schema_pointers(spec)
    assert len(pointers) > 20
    instances = bodies()
    instances += [v for body in instances for v in subvalues(body) if isinstance(v, (dict, list))]
    compared = 0
    for pointer, examples in pointers.items():
        compiled, expected = pair(spec.document, pointer)
        for instance in instances + examples:
            assert compiled(instance) == expected(instance), (pointer, instance)
            compared += 1
    print(f"\n{name}: {len(pointers)} pointers, {compared} comparisons")


@pytest.mark.parametrize("name", SPECS)
def test_recorded_bodies_and_their_mutations_agree_on_their_own_schemas(name):
    spec = SPECS[name]
    counts = {"compared": 0, "accepted": 0}

    def check(pointer: str, instance: Any) -> None:
        compiled, expected = cached(pointer)
        got = compiled(instance)
        assert got == expected(instance), (pointer, json.dumps(instance)[:300])
        counts["compared"] += 1
        counts["accepted"] += got

    cache: dict[str, Any] = {}
    shapes: set[tuple[str, str]] = set()

    def cached(pointer: str):
        if pointer not in cache:
            cache[pointer] = pair(spec.document, pointer)
        return cache[pointer]

    for rec in RECORDINGS:
        targets = [(p, rec.body) for p in response_pointer(spec, rec) if isinstance(rec.body, (dict, list))]
        if rec.request is not None:
            targets += [(p, rec.request) for p in request_pointer(spec, rec)]
        for pointer, instance in targets:
            check(pointer, instance)
            if (pointer, skeleton(instance)) in shapes:
                continue
            shapes.add((pointer, skeleton(instance)))
            for mutated in mutations(instance):
                check(pointer, mutated)
    # The spec's own examples, mutated, against their schemas.
    for pointer, examples in schema_pointers(spec).items():
        for example in examples:
            check(pointer, example)
            for mutated in mutations(example):
                check(pointer, mutated)
    print(f"\n{name}: {counts['compared']} comparisons, {counts['accepted']} accepted")
    assert counts["accepted"] > 0


@pytest.mark.parametrize("name", SPECS)
def test_recorded_answers_and_their_mutations_agree_on_the_answer_and_question_schemas(name):
    # The oneOf-with-discriminator schemas, where dispatch replaces trying every branch.
    spec = SPECS[name]
    answer = pair(spec.document, "/components/schemas/Answer")
    question = pair(spec.document, "/components/schemas/Question")
    compared = accepted = 0
    shapes: set[str] = set()
    for body in bodies():
        for value in subvalues(body):
            if isinstance(value, dict) and "type" in value:
                if skeleton(value) in shapes:
                    continue
                shapes.add(skeleton(value))
                for candidate in [value, *mutations(value)]:
                    for compiled, expected in (answer, question):
                        got = compiled(candidate)
                        assert got == expected(candidate), candidate
                        compared += 1
                        accepted += got
    print(f"\n{name}: {compared} comparisons, {accepted} accepted")
    assert accepted > 0


@pytest.mark.parametrize("name", SPECS)
def test_recorded_header_values_agree_on_the_header_schemas(name):
    spec = SPECS[name]
    values = ["1", "10", "", " 1", "1.5", "Bearer", "Bearer x", "bearer", "queue;dur=0.41, infer;dur=3.12",
              "infer;dur=1, queue;dur=2", "queue;dur=1", "5f0c6a2e9b7d4c1a8e3f2b6d9a0c7e41",
              "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "x" * 300, "é", None, 1]
    for rec in RECORDINGS:
        values += list(rec.headers.values())
    for pointer in schema_pointers(spec):
        if "/headers/" in pointer:
            compiled, expected = pair(spec.document, pointer)
            for value in values:
                assert compiled(value) == expected(value), (pointer, value)


# -- keyword semantics ------------------------------------------------------------------

def test_integer_accepts_whole_floats_but_never_bools():
    assert agree({"type": "integer"}, [1, 1.0, 1.5, True, False, "1", None, -0.0, 10**30]) == [
        True, True, False, False, False, False, False, True, True]
    assert agree({"type": "number"}, [1, 1.5, True, "1", float("inf")]) == [True, True, False, False, True]
    assert agree({"type": "boolean"}, [True, 0, None]) == [True, False, False]
    assert agree({"type": ["string", "null"]}, ["a", None, 0]) == [True, True, False]
    assert agree({"type": []}, [1, None]) == [False, False]
    assert agree({"type": "object"}, [{}, [], "x"]) == [True, False, False]
    assert agree({"type": "array"}, [[], (), {}]) == [True, False, False]


def test_numbers_json_never_produces_are_typed_as_jsonschema_types_them():
    # A caller may validate objects built in Python (a Decimal, a Fraction, an IntEnum, a float
    # subclass): the type tests' slow path answers as jsonschema's type checker, `not` included.
    class Whole(float):
        pass

    class Level(enum.IntEnum):
        LOW = 1

    exotic = [decimal.Decimal("1"), fractions.Fraction(1, 2), Level.LOW, Whole(2.0), Whole(2.5)]
    assert agree({"type": "integer"}, exotic) == [False, False, True, True, False]
    assert agree({"not": {"type": "integer"}}, exotic) == [True, True, False, False, True]
    assert agree({"type": "number"}, exotic) == [True, True, True, True, True]
    assert agree({"not": {"type": "number"}}, exotic) == [False, False, False, False, False]
    assert agree({"type": "number", "maximum": 1}, exotic) == [True, True, True, False, False]


def test_numeric_keywords_skip_bools_and_non_numbers():
    schema = {"minimum": 2, "maximum": 5, "exclusiveMaximum": 5.5, "exclusiveMinimum": 1}
    assert agree(schema, [2, 5, 1.99, 5.01, True, "0", None]) == [True, True, False, False, True, True, True]
    assert agree({"exclusiveMinimum": 0, "exclusiveMaximum": 1}, [0, 1, 0.5]) == [False, False, True]
    assert agree({"multipleOf": 0.5}, [1.5, 1.25, 2, True]) == [True, False, True, True]
    agree({"multipleOf": 0.01}, [0.07, 0.075, 1e308, 3, 10**300])  # float rounding and overflow: as jsonschema
    # A quotient past the float range is decided exactly (with fractions), as jsonschema does.
    assert agree({"multipleOf": 0.5}, [1e308, 1.7e308]) == [True, True]
    assert agree({"multipleOf": 3}, [9, 9.0, 10, 4.5, True]) == [True, True, False, False, True]
    assert agree({"type": "integer", "minimum": 0}, [0, -1, 3.0, False]) == [True, False, True, False]
    # NaN compares false both ways: jsonschema's `instance < minimum` lets it through.
    assert agree({"type": "number", "minimum": 0, "maximum": 1}, [float("nan"), 0.5, -1, 2, True]) == [
        True, True, False, False, False]


def test_const_and_enum_keep_1_and_true_apart():
    assert agree({"const": 1}, [1, 1.0, True, "1"]) == [True, True, False, False]
    assert agree({"const": True}, [True, 1]) == [True, False]
    assert agree({"const": False}, [False, 0, None]) == [True, False, False]
    assert agree({"const": [1, {"a": True}]}, [[1, {"a": True}], [True, {"a": True}], [1.0, {"a": True}], (1, {"a": True})]) == [True, False, True, True]
    assert agree({"const": None}, [None, 0, False, ""]) == [True, False, False, False]
    assert agree({"const": "a"}, ["a", "b", ["a"]]) == [True, False, False]
    assert agree({"enum": [1, "a", None]}, [1, True, "a", None, 1.0, False]) == [True, False, True, True, True, False]
    assert agree({"enum": ["a", "b"]}, ["a", "c", 1, None, ["a"]]) == [True, False, False, False, False]
    assert agree({"enum": []}, [1]) == [False]
    # Arrays and objects among the options (unhashable, so not the strings' set lookup).
    assert agree({"enum": [[1], {"a": True}, 2]}, [[1], [True], {"a": True}, {"a": 1}, 2, "2"]) == [
        True, False, True, False, True, False]


def test_an_enum_of_strings_matches_a_str_subclass_as_jsonschema_does():
    # A StrEnum member equals its value, so jsonschema's enum finds it; the set lookup is only
    # for exact strs.
    class Kind(enum.StrEnum):
        A = "a"
        Z = "z"

    assert agree({"enum": ["a", "b"]}, [Kind.A, Kind.Z]) == [True, False]
    assert agree({"const": "a"}, [Kind.A, Kind.Z]) == [True, False]


def test_unique_items_uses_jsonschema_equality():
    schema = {"uniqueItems": True}
    assert agree(schema, [[1, True], [1, 1.0], [0, False], [[1], [True]], [{"a": 1}, {"a": 1}],
                          [{"a": 1}, {"a": True}], ["a", "b"], ["a", "a"], [], "aa"]) == [
        True, False, True, True, False, True, True, False, True, True]
    assert agree({"uniqueItems": False}, [[1, 1]]) == [True]


def test_pattern_searches_rather_than_matches():
    assert agree({"pattern": "b"}, ["abc", "xyz", 1]) == [True, False, True]
    assert agree({"pattern": "^b"}, ["abc", "bc"]) == [False, True]
    assert agree({"pattern": "^[0-9]+$"}, ["12", "12\n", "1a"]) == [True, True, False]
    assert agree({"patternProperties": {"^x-": {"type": "string"}}, "additionalProperties": False},
                 [{"x-a": "s"}, {"x-a": 1}, {"y": 1}, {}]) == [True, False, False, True]
    # Two patterns: a property either one matches is not an additional one.
    assert agree({"patternProperties": {"^x-": {}, "^y-": {"type": "string"}}, "additionalProperties": False},
                 [{"x-a": 1}, {"y-b": "s"}, {"y-b": 1}, {"z": 1}, {"x-a": 1, "y-b": "s"}]) == [
        True, True, False, False, True]


def test_additional_properties_that_is_not_a_schema_forbids_when_falsy():
    # jsonschema reads `additionalProperties: 0` as "no extras" and `1` as "any extras".
    assert agree({"properties": {"a": {}}, "additionalProperties": 0}, [{"a": 1}, {"b": 1}]) == [True, False]
    assert agree({"properties": {"a": {}}, "additionalProperties": 1}, [{"a": 1}, {"b": 1}]) == [True, True]
    assert agree({"additionalProperties": None}, [{}, {"b": 1}]) == [True, False]


def test_lengths_count_code_points():
    assert agree({"minLength": 2, "maxLength": 3}, ["é", "éé", "😀😀😀", "abcd", 5]) == [False, True, True, False, True]
    assert agree({"minLength": 1}, ["", "a"]) == [False, True]


def test_object_keywords():
    schema = {
        "type": "object",
        "required": ["a"],
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
        "additionalProperties": {"type": "boolean"},
        "minProperties": 1,
        "maxProperties": 3,
        "propertyNames": {"maxLength": 2},
    }
    assert agree(schema, [{"a": 1}, {"b": "x"}, {"a": 1, "c": True}, {"a": 1, "c": 1}, {"a": 1, "abc": True},
                          {"a": 1, "b": 2}, {"a": 1, "b": "x", "c": True, "d": False}, []]) == [
        True, False, True, False, False, False, False, False]
    assert agree({"properties": {"a": False}}, [{"a": 1}, {"b": 1}, "a"]) == [False, True, True]
    assert agree({"additionalProperties": False}, [{}, {"a": 1}, 3]) == [True, False, True]
    assert agree({"dependentRequired": {"a": ["b"]}}, [{"a": 1}, {"a": 1, "b": 1}, {"b": 1}]) == [False, True, True]
    assert agree({"dependentSchemas": {"a": {"required": ["b"]}}}, [{"a": 1}, {"a": 1, "b": 1}]) == [False, True]
    both = {"properties": {"xa": {"type": "string"}}, "patternProperties": {"^x": {"minLength": 2}},
            "additionalProperties": False}
    assert agree(both, [{"xa": "ab"}, {"xa": "a"}, {"xb": "a"}, {"xb": "ab"}, {"y": "ab"}]) == [
        True, False, False, True, False]


def test_array_keywords():
    assert agree({"items": {"type": "integer"}, "minItems": 1, "maxItems": 2},
                 [[1], [], [1, 2, 3], [1, "a"], "ab"]) == [True, False, False, False, True]
    assert agree({"prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False},
                 [["a", 1], ["a"], ["a", 1, 2], [1, 1], []]) == [True, True, False, False, True]
    assert agree({"prefixItems": [{"type": "string"}], "items": {"type": "integer"}},
                 [["a", 1, 2], ["a", "b"]]) == [True, False]
    assert agree({"contains": {"type": "string"}, "minContains": 2, "maxContains": 3},
                 [["a"], ["a", "b"], ["a", "b", "c", "d"], [1, 2], "x"]) == [False, True, False, False, True]
    assert agree({"contains": {"type": "string"}}, [[], [1], [1, "a"]]) == [False, False, True]


def test_combinators_and_conditionals():
    assert agree({"allOf": [{"type": "integer"}, {"minimum": 2}]}, [2, 1, "a"]) == [True, False, False]
    assert agree({"anyOf": [{"type": "integer"}, {"type": "string"}]}, [2, "a", None]) == [True, True, False]
    # oneOf: two matching branches is a failure.
    assert agree({"oneOf": [{"type": "integer"}, {"minimum": 2}]}, [1, 3, 2.5, "a"]) == [True, False, True, True]
    assert agree({"oneOf": []}, [1]) == [False]
    assert agree({"not": {"type": "string"}}, ["a", 1]) == [False, True]
    schema = {"if": {"properties": {"a": {"const": 1}}}, "then": {"required": ["b"]}, "else": {"required": ["c"]}}
    assert agree(schema, [{"a": 1}, {"a": 1, "b": 0}, {"a": 2}, {"a": 2, "c": 0}, {}, {"c": 1}]) == [
        False, True, False, True, False, False]
    assert agree({"if": {"type": "string"}, "then": {"minLength": 2}}, ["a", "ab", 1]) == [False, True, True]


def test_boolean_schemas_and_ignored_annotations():
    assert agree(True, [1, None]) == [True, True]
    assert agree(False, [1, None]) == [False, False]
    annotated = {"description": "d", "title": "t", "examples": [1], "example": 1, "default": 1, "deprecated": True,
                 "readOnly": True, "writeOnly": False, "$comment": "c", "xml": {}, "externalDocs": {},
                 "x-status": "planned", "discriminator": {"propertyName": "type"}, "nullable": True,
                 "$defs": {"a": {"type": "string"}}, "type": "integer"}
    assert agree(annotated, [1, "a", None]) == [True, False, False]


def test_ref_with_sibling_keywords_applies_both():
    document = {"defs": {"int": {"type": "integer"}}}
    schema = {"$ref": "#/defs/int", "minimum": 3}
    assert agree(schema, [3, 2, "a", 3.5], document) == [True, False, False, False]
    escaped = {"defs": {"a/b": {"type": "string"}, "c~d": {"minLength": 2}, "e f": {"type": "string"}}}
    assert agree({"allOf": [{"$ref": "#/defs/a~1b"}, {"$ref": "#/defs/c~0d"}, {"$ref": "#/defs/e%20f"}]},
                 ["ab", "a", 1], escaped) == [True, False, False]
    listed = {"defs": [{"type": "string"}, {"type": "integer"}]}
    assert agree({"$ref": "#/defs/1"}, [1, "a"], listed) == [True, False]


def test_recursive_schemas_compile_and_validate():
    document = {"defs": {"tree": {"type": "object", "required": ["v"], "additionalProperties": False,
                                  "properties": {"v": {"type": "integer"},
                                                 "kids": {"type": "array", "items": {"$ref": "#/defs/tree"}}}}}}
    deep: dict[str, Any] = {"v": 0}
    node = deep
    for i in range(50):
        node["kids"] = [{"v": i}]
        node = node["kids"][0]
    bad = copy.deepcopy(deep)
    node = bad
    for _ in range(30):
        node = node["kids"][0]
    node["v"] = "x"
    trees = [{"v": 1}, {"v": 1, "kids": [{"v": 2, "kids": []}]}, {"v": 1, "kids": [{"kids": []}]}, deep, bad]
    assert agree({"$ref": "#/defs/tree"}, trees, document) == [True, True, False, True, False]
    # Mutual recursion through two definitions.
    mutual = {"defs": {"a": {"type": "array", "items": {"$ref": "#/defs/b"}},
                       "b": {"anyOf": [{"type": "integer"}, {"$ref": "#/defs/a"}]}}}
    assert agree({"$ref": "#/defs/a"}, [[1, [2, [3]]], [1, ["x"]], 1], mutual) == [True, False, False]


def test_discriminator_dispatch_is_equivalent_to_trying_every_branch():
    document = {
        "defs": {
            "common": {"type": "object", "required": ["kind"], "properties": {"n": {"type": "integer"}}},
            "a": {"allOf": [{"$ref": "#/defs/common"}, {"properties": {"kind": {"const": "a"}}, "required": ["x"]}]},
            "b": {"allOf": [{"$ref": "#/defs/common"}, {"properties": {"kind": {"$ref": "#/defs/kind_b"}}}]},
            "kind_b": {"const": "b"},
            # Pins nothing: always a candidate, so "a"/"b" objects can match it too.
            "loose": {"type": "object", "required": ["loose"]},
            # Pins the same value as "a": both stay candidates for kind == "a".
            "a2": {"properties": {"kind": {"const": "a"}}, "required": ["y"]},
        }
    }
    schema = {"discriminator": {"propertyName": "kind"},
              "oneOf": [{"$ref": "#/defs/a"}, {"$ref": "#/defs/b"}, {"$ref": "#/defs/loose"}, {"$ref": "#/defs/a2"}]}
    instances = [
        {"kind": "a", "x": 1}, {"kind": "a"}, {"kind": "b"}, {"kind": "b", "n": "x"}, {"kind": "c"},
        {"kind": "a", "x": 1, "loose": 1}, {"kind": "a", "x": 1, "y": 1}, {"kind": "a", "y": 1},
        {"kind": 1}, {"kind": None, "loose": 1}, {"kind": ["a"]}, {}, {"loose": 1}, {"x": 1}, "a", None, [],
        {"kind": "b", "loose": True}, {"kind": True, "y": 1},
    ]
    expected = agree(schema, instances, document)
    assert expected[:3] == [True, False, True]
    anyof = {"discriminator": {"propertyName": "kind"}, "anyOf": schema["oneOf"]}
    agree(anyof, instances, document)
    # Without a discriminator (no dispatch) the answers are the same.
    plain = {"oneOf": schema["oneOf"]}
    assert agree(plain, instances, document) == expected


@pytest.mark.parametrize("compile_one", [schema_compiler.compile_schema, schema_source.compiled_predicate],
                         ids=["closures", "source"])
def test_discriminator_dispatch_runs_only_the_branches_the_value_names(compile_one):
    # The module's promise: a discriminated oneOf/anyOf tries only the branches that pin the
    # instance's value (and those that pin nothing), however a branch pins it: directly, through
    # a $ref or an allOf, with the property's own $ref (two hops) or allOf. Each branch's
    # "probe" format check runs before its pin is checked, so `calls` shows which were tried.
    calls: list[str] = []
    checks = {f"probe-{name}": (lambda value, name=name: calls.append(name) is None) for name in "unabcde"}

    def probed(name: str, kind: Any) -> dict[str, Any]:
        return {"properties": {"probe": {"format": f"probe-{name}"}, "kind": kind}}

    document: dict[str, Any] = {"defs": {
        "b": probed("b", {"const": "b"}), "c_pin": {"properties": {"kind": {"const": "c"}}},
        "kind_d": {"$ref": "#/defs/kind_d2"}, "kind_d2": {"const": "d"}, "kind_e": {"const": "e"},
    }}
    pinned = [
        probed("a", {"const": "a"}),
        {"$ref": "#/defs/b"},
        {**probed("c", {}), "allOf": [{"$ref": "#/defs/c_pin"}]},
        probed("d", {"$ref": "#/defs/kind_d"}),
        probed("e", {"allOf": [{"minLength": 1}, {"$ref": "#/defs/kind_e"}]}),
    ]
    # Pin nothing: "u" no const at all, "n" a const that is not a string.
    unpinned = [probed("u", {"type": "integer"}), probed("n", {"const": 1})]
    for keyword in ("oneOf", "anyOf"):
        for branches, tried in ((unpinned + pinned, ["u", "n"]), (pinned, [])):
            document["s"] = {"discriminator": {"propertyName": "kind"}, keyword: branches}
            compiled = compile_one(document, "/s", format_checks=checks)
            assert compiled is not None
            expected = reference(document, "/s").is_valid  # jsonschema ignores the probe formats
            for value in "abcde":
                calls.clear()
                assert compiled({"kind": value, "probe": 1}) is expected({"kind": value, "probe": 1}) is True
                assert calls == [*tried, value], (keyword, value)
            for value in ("z", 1, None):  # no branch pins it: only those that pin nothing
                instance = {"kind": value, "probe": 1}
                calls.clear()
                assert compiled(instance) is expected(instance), (keyword, value)
                assert calls == (["u"] if (keyword, value, tried) == ("anyOf", 1, ["u", "n"]) else tried)
            if tried:  # kind 1: "u" and "n" both match, so oneOf fails where anyOf holds
                assert expected({"kind": 1, "probe": 1}) is (keyword == "anyOf")
            calls.clear()  # no value to dispatch on: every branch in order, as jsonschema tries them
            assert compiled({"probe": 1}) is expected({"probe": 1}) is (keyword == "anyOf")
            assert calls == [*tried, *"abcde"][:1 if keyword == "anyOf" else 2]


def test_format_uses_the_callers_checks():
    checks = {"even": lambda v: not isinstance(v, int) or v % 2 == 0, "boom": lambda v: 1 / 0}
    assert one({"format": "even"}, format_checks=checks)(4) is True
    assert one({"format": "even"}, format_checks=checks)(3) is False
    assert one({"format": "boom"}, format_checks=checks)(3) is False
    # The project's uri-reference check, through the same FormatChecker specs.py uses.
    assert agree({"type": "string", "format": "uri-reference"}, ["/problems/x", "a b", "%41", 3]) == [
        True, False, True, False]


@pytest.mark.parametrize("schema", [
    {"unevaluatedProperties": False},
    {"unevaluatedItems": False},
    {"$dynamicRef": "#meta"},
    {"$id": "urn:other", "type": "string"},
    {"$schema": "https://json-schema.org/draft/2020-12/schema"},
    {"format": "date-time"},            # not among the caller's checks
    {"format": "email"},
    {"$ref": "other.yaml#/a"},          # not local
    {"$ref": "https://example.com/s"},
    {"$ref": "#anchor"},
    {"$ref": "#/nowhere"},
    {"properties": {"a": {"unevaluatedProperties": False}}},
    {"type": "integr"},
    {"pattern": "("},
    {"minLength": "2"},
    {"minimum": "2"},                   # jsonschema would compare the instance with a string
    {"maximum": True},
    {"items": [{"type": "string"}]},
    {"allOf": {"type": "string"}},
    "not a schema",
], ids=compact)
def test_unsupported_schemas_compile_to_none(schema):
    assert one(schema, format_checks={"uri-reference": CHECKS["uri-reference"]}) is None


@pytest.mark.parametrize("schema", [
    {"$ref": 5},
    {"type": 5},
    {"dependentRequired": ["a"]},
    {"dependentRequired": {"a": 5}},
], ids=compact)
def test_malformed_keyword_values_are_unsupported_rather_than_an_error(schema):
    assert one(schema) is None


@pytest.mark.parametrize("document", [
    {"$schema": "https://json-schema.org/draft/2019-09/schema", "s": {"type": "string"}},
    {"$id": "urn:elsewhere", "s": {"type": "string"}},
    {"defs": {"$id": "urn:elsewhere", "s": {"type": "string"}}},   # an $id on the way
], ids=["$schema at the root", "$id at the root", "$id on the way"])
def test_a_document_that_moves_its_base_or_dialect_is_unsupported(document):
    # Another dialect, or a base URI that references would resolve against: not reproduced.
    pointer = "/defs/s" if "defs" in document else "/s"
    assert compile_schema(document, pointer) is None
    document = json.loads(json.dumps(document).replace("$id", "x-id").replace("$schema", "x-schema"))
    assert compile_schema(document, pointer) is not None  # the same document without them compiles


@pytest.mark.parametrize("ref", ["#/defs/list/x", "#/defs/list/2", "#/defs/list/-1", "#/defs/text/x", "#/defs/none"])
def test_a_ref_that_points_nowhere_is_unsupported_rather_than_an_error(ref):
    document = {"defs": {"list": [{"type": "string"}, {"type": "integer"}], "text": "a string"}, "s": {"$ref": ref}}
    assert compile_schema(document, "/s") is None
    assert compile_schema({**document, "s": {"$ref": "#/defs/list/1"}}, "/s") is not None


def test_format_without_checks_is_unsupported():
    assert one({"format": "uri-reference"}) is None
    assert one({"type": "string"}) is not None


def test_unsupported_keyword_reached_only_through_a_ref_is_still_none():
    document = {"defs": {"bad": {"unevaluatedProperties": False}}, "s": {"properties": {"a": {"$ref": "#/defs/bad"}}}}
    assert compile_schema(document, "/s") is None


def test_a_schema_nested_deeper_than_pythons_parser_takes_keeps_the_closures():
    nested: Any = {"type": "integer", "minimum": 0}
    for _ in range(150):
        nested = {"not": {"not": nested}}
    document = {"s": nested}
    compiler = schema_compiler._Compiler(document, {})
    compiler.ref("#/s")
    assert schema_source.generated(compiler, "/s") is None  # its source would not compile
    predicate = schema_source.compiled_predicate(document, "/s")
    assert predicate is not None and [predicate(v) for v in (3, -1, "x")] == [True, False, False]


def test_predicate_says_false_rather_than_raising():
    compiled = one({"multipleOf": 0})
    assert compiled is not None and compiled(3) is False
    compiled = one({"patternProperties": {"a": True}})
    assert compiled is not None and compiled({1: 2}) is False


# -- random schemas against jsonschema -------------------------------------------------

def random_instance(rng: random.Random, depth: int = 0) -> Any:
    choice = rng.randrange(10 if depth < 3 else 7)
    if choice == 0:
        return None
    if choice == 1:
        return rng.choice([True, False])
    if choice == 2:
        return rng.choice([0, 1, -1, 2, 3, 7, 10, 100])
    if choice == 3:
        return rng.choice([0.0, 1.0, 1.5, -2.5, 0.1, 3.0, 1e20])
    if choice in (4, 5, 6):
        return rng.choice(["", "a", "b", "ab", "kind", "x-y", "é", "123", "aaaa", "A1"])
    if choice in (7, 8):
        keys = ["a", "b", "c", "kind", "x-a", "n"]
        return {rng.choice(keys): random_instance(rng, depth + 1) for _ in range(rng.randrange(4))}
    return [random_instance(rng, depth + 1) for _ in range(rng.randrange(4))]


def random_schema(rng: random.Random, depth: int = 0, refs: bool = True) -> Any:
    """A random schema; `refs` False for the definition the refs point to (no endless loops)."""
    if depth > 2 or rng.random() < 0.15:
        leaves = [True, False, {}, {"type": "string"}, {"type": "integer"}]
        return rng.choice(leaves + [{"$ref": "#/defs/d"}] if refs else leaves)
    keywords = [
        lambda: ("type", rng.choice(["string", "integer", "number", "object", "array", "boolean", "null",
                                     ["string", "null"], ["integer", "object"]])),
        lambda: ("minimum", rng.choice([0, 1, 1.5])), lambda: ("maximum", rng.choice([2, 10])),
        lambda: ("exclusiveMinimum", 0), lambda: ("exclusiveMaximum", rng.choice([3, 3.5])),
        lambda: ("multipleOf", rng.choice([2, 0.5, 1.5])),
        lambda: ("minLength", rng.randrange(3)), lambda: ("maxLength", rng.randrange(1, 4)),
        lambda: ("pattern", rng.choice(["^a", "b", "^[0-9]+$", "é"])),
        lambda: ("const", random_instance(rng, 2)), lambda: ("enum", [random_instance(rng, 3) for _ in range(3)]),
        lambda: ("required", rng.sample(["a", "b", "kind"], rng.randrange(1, 3))),
        lambda: ("properties", {k: random_schema(rng, depth + 1, refs) for k in rng.sample(["a", "b", "kind", "x-a"], 2)}),
        lambda: ("patternProperties", {rng.choice(["^x-", "a", "^k"]): random_schema(rng, depth + 1, refs)}),
        lambda: ("additionalProperties", rng.choice([False, True, random_schema(rng, depth + 1, refs)])),
        lambda: ("propertyNames", {"maxLength": 1}), lambda: ("minProperties", 1), lambda: ("maxProperties", 2),
        lambda: ("items", random_schema(rng, depth + 1, refs)),
        lambda: ("prefixItems", [random_schema(rng, depth + 1, refs) for _ in range(rng.randrange(1, 3))]),
        lambda: ("minItems", 1), lambda: ("maxItems", 2), lambda: ("uniqueItems", True),
        lambda: ("contains", random_schema(rng, depth + 1, refs)),
        lambda: ("allOf", [random_schema(rng, depth + 1, refs) for _ in range(2)]),
        lambda: ("anyOf", [random_schema(rng, depth + 1, refs) for _ in range(2)]),
        lambda: ("oneOf", [random_schema(rng, depth + 1, refs) for _ in range(rng.randrange(1, 4))]),
        lambda: ("not", random_schema(rng, depth + 1, refs)),
        lambda: ("if", random_schema(rng, depth + 1, refs)), lambda: ("then", random_schema(rng, depth + 1, refs)),
        lambda: ("else", random_schema(rng, depth + 1, refs)),
        lambda: ("$ref", "#/defs/d") if refs else ("minimum", 0),
        lambda: ("dependentRequired", {"a": ["b"]}),
        lambda: ("description", "ignored"),
    ]
    schema = dict(rng.choice(keywords)() for _ in range(rng.randrange(1, 4)))
    if rng.random() < 0.2:
        branches = []
        for value in rng.sample(["a", "b", "ab"], 2):
            extra = random_schema(rng, depth + 1, refs)
            branches.append({**(extra if isinstance(extra, dict) else {}), "properties": {"kind": {"const": value}}})
        if rng.random() < 0.3:
            branches.append(random_schema(rng, depth + 1, refs))
        schema = {"discriminator": {"propertyName": "kind"}, rng.choice(["oneOf", "anyOf"]): branches}
    return schema


def test_random_schemas_agree_with_jsonschema():
    # A fixed seed and count, so a failure is the same failure on every machine, however loaded.
    rng = random.Random(20261202)
    instances_checked = 0
    for _ in range(3000):
        schema = random_schema(rng)
        document = {"defs": {"d": random_schema(rng, 1, refs=False)}, "s": schema}
        compiled = compile_schema(document, "/s", format_checks=CHECKS)
        assert compiled is not None, f"uses only keywords the compiler supports: {json.dumps(schema)}"
        expected = reference(document, "/s").is_valid
        for _ in range(15):
            instance = random_instance(rng)
            if rng.random() < 0.3:
                instance = {"kind": rng.choice(["a", "b", "c"]), **(instance if isinstance(instance, dict) else {})}
            try:
                want = expected(instance)
            except Exception:
                continue  # jsonschema itself chokes (e.g. an unhashable key); the compiled one says False
            assert compiled(instance) == want, f"{json.dumps(schema)} on {instance!r}"
            instances_checked += 1
    assert instances_checked > 40_000  # jsonschema judged nearly all of the 45,000 instances


# -- what the compiler holds in place of importing jsonschema ----------------------------

def test_the_keywords_the_compiler_knows_jsonschema_validates_with_are_jsonschemas():
    from pytest_laya.specs.schema_compiler import _VALIDATED

    assert _VALIDATED == frozenset(Draft202012Validator.VALIDATORS)


def test_the_compilers_format_checks_are_the_validators():
    from pytest_laya.specs.spec import _FORMAT_CHECKS

    assert set(_FORMAT_CHECKS) == set(CHECKS) and "uri-reference" in _FORMAT_CHECKS
    assert all(_FORMAT_CHECKS[name] is CHECKS[name] for name in CHECKS)


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from([0.0, 1.0, -1.0, 0.5, 2.0]) | st.text(max_size=2),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=2), inner, max_size=3),
    max_leaves=8)


@settings(max_examples=example_count(600), deadline=None)
@given(one=_JSONISH, two=_JSONISH)
def test_equal_is_jsonschemas(one, two):
    from jsonschema._utils import equal as theirs

    from pytest_laya.specs.schema_compiler import equal

    assert equal(one, two) == theirs(one, two)
    assert equal(one, one) == theirs(one, one)
    assert equal(one, copy.deepcopy(one)) == theirs(one, copy.deepcopy(one))


def test_equal_strings_are_equal_whatever_their_identity():
    from pytest_laya.specs.schema_compiler import equal, uniq

    literal, built = "choice", "".join(["cho", "ice"])  # equal, and two objects
    assert built is not literal and equal(built, literal) and equal([literal], [built])
    assert not uniq([literal, built]) and agree({"const": literal}, [built]) == [True]


@settings(max_examples=example_count(600), deadline=None)
@given(items=st.lists(_JSONISH, max_size=5))
def test_uniq_is_jsonschemas(items):
    from jsonschema._utils import uniq as theirs

    from pytest_laya.specs.schema_compiler import uniq

    for container in (items, items + items[:1]):
        assert uniq(container) == theirs(container)


def test_judging_conforming_traffic_imports_no_jsonschema_and_a_violation_still_names_its_pointer():
    import subprocess
    import sys

    script = """
import json, sys
from pytest_laya.specs.conformance import Conformance
from pytest_laya.wire.exchange import Exchange
from tests.helpers.recorded import REFERENCE, recordings
tally = Conformance()
rec = next(r for r in recordings(REFERENCE) if r.method == "POST" and r.status == 200 and r.path == "/v1/systemone")
headers, body = rec.headers, rec.body_bytes
exchange = Exchange("POST", "http://x/v1/systemone", "/v1/systemone", 200, headers, body, b"{}", 0.0)
assert tally.check(exchange, server="s", claimed="target") == [], "the recorded answer conforms"
assert not [m for m in sys.modules if m.split(".")[0] in ("jsonschema", "referencing")], "imported on the accept path"
parsed = json.loads(body)
first = next(iter(parsed["answers"]))
parsed["answers"][first]["confidence"] = 7
bad = Exchange("POST", "http://x/v1/systemone", "/v1/systemone", 200, headers, json.dumps(parsed).encode(), b"{}", 0.0)
found = tally.check(bad, server="s", claimed="target")
assert [v.where for v in found] == [f"/body/answers/{first}/confidence"], found
print("ok")
"""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=root)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr

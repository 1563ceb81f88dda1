"""What a violation says: for each JSON Schema keyword, the words a test reader sees.

A user reads ``/body/x: expected <what the spec asks>, got <what came>`` in a failed test; each
keyword the specs use has its own words, checked here one by one on a small document. Each test
builds its own `Spec` from a document (cheap for these), so what it checks runs inside the test.
"""

from __future__ import annotations

import datetime

import pytest

from pytest_laya.specs import Spec, SpecError

LONG = "x" * 200
KIND_A = {"type": "object", "properties": {"kind": {"const": "a"}}, "required": ["kind"]}
KIND_B = {"type": "object", "properties": {"kind": {"const": "b"}}, "required": ["kind"]}


def schema_spec(schema) -> Spec:
    return Spec({"openapi": "3.1.0", "info": {"title": "words", "version": "1"}, "paths": {"/x": {"get": {"responses": {"200": {"description": "ok"}}}}},
                 "components": {"schemas": {"S": schema, "A": KIND_A, "B": KIND_B}}}, name="words")


@pytest.mark.parametrize("schema, instance, where, expected, actual", [
    ({"type": "object", "required": ["a", "b", "c"]}, {"b": 1}, ["/a", "/c"], "a required property", "absent"),
    ({"type": "object", "properties": {"a": {}, "b": {}}, "additionalProperties": False}, {"a": 1, "z": 2, "y": 3},
     [""], "no properties beyond ['a', 'b']", "extra ['y', 'z']"),
    ({"type": "object", "additionalProperties": False}, {"z": 2}, [""], "no properties beyond []", "extra ['z']"),
    ({"type": "integer"}, "seven", [""], "type integer", 'str "seven"'),
    ({"type": ["integer", "null"]}, 1.5, [""], "type ['integer', 'null']", "float 1.5"),
    ({"const": "a"}, "b", [""], 'the value "a"', '"b"'),
    ({"enum": ["a", "b"]}, "c", [""], 'one of ["a", "b"]', '"c"'),
    ({"minimum": 1}, 0, [""], ">= 1", "0"),
    ({"maximum": 1}, 2, [""], "<= 1", "2"),
    ({"exclusiveMinimum": 0}, 0, [""], "> 0", "0"),
    ({"exclusiveMaximum": 1}, 1, [""], "< 1", "1"),
    ({"pattern": "^q[0-9]+$"}, "x1", [""], "a string matching ^q[0-9]+$", '"x1"'),
    ({"minLength": 2}, "a", [""], "at least 2 characters", '"a"'),
    ({"maxLength": 1}, "ab", [""], "at most 1 characters", '"ab"'),
    ({"minItems": 1}, [], [""], "at least 1 items", "[]"),
    ({"maxItems": 1}, [1, 2], [""], "at most 1 items", "[1, 2]"),
    ({"minProperties": 1}, {}, [""], "at least 1 properties", "{}"),
    ({"maxProperties": 1}, {"a": 1, "b": 2}, [""], "at most 1 properties", '{"a": 1, "b": 2}'),
    ({"uniqueItems": True}, [1, 1], [""], "unique items", "[1, 1]"),
    ({"multipleOf": 2}, 3, [""], "multipleOf 2", "3"),
    ({"not": {"type": "string"}}, "s", [""], 'not {"type": "string"}', '"s"'),
    ({"enum": ["caf\u00e9"]}, "th\u00e9", [""], 'one of ["caf\u00e9"]', '"th\u00e9"'),  # text as written, not \u-escaped
    # A parsed body may hold what JSON cannot: shown as text, never a crash.
    ({"type": "string"}, datetime.date(2026, 1, 2), [""], "type string", 'date "2026-01-02"'),
    ({"type": "string"}, {(1, 2): 3}, [""], "type string", "dict {(1, 2): 3}"),
    # A failed oneOf or anyOf names each variant's first problems (three at most).
    ({"anyOf": [{"type": "string"}, {"type": "object", "required": ["a", "b", "c", "d"]}]}, {"z": 1}, [""],
     "at least one variant to match, but each failed: [1] / type string | [2] /a a required property; "
     "/b a required property; /c a required property", '{"z": 1}'),
    ({"oneOf": [{"type": "string"}, {"type": "integer", "minimum": 3}]}, 1.5, [""],
     "exactly one variant to match, but each failed: [1] / type string | [2] / type integer; / >= 3", "1.5"),
    ({"oneOf": [{"type": "string"}, {"type": "string", "minLength": 1}]}, "abc", [""],
     "exactly one variant to match, but more than one did", '"abc"'),
    # With a discriminator, the violation is on it: the mapping's values, else the variants' names.
    ({"oneOf": [KIND_A, KIND_B], "discriminator": {"propertyName": "kind", "mapping": {"a": "#/x", "b": "#/y"}}},
     {"kind": "c"}, ["/kind"], 'one of ["a", "b"]', '"c"'),
    ({"oneOf": [{"$ref": "#/components/schemas/A"}, {"$ref": "#/components/schemas/B"}],
      "discriminator": {"propertyName": "kind"}}, {"kind": "c"}, ["/kind"], 'one of ["A", "B"]', '"c"'),
    ({"oneOf": [KIND_A, KIND_B], "discriminator": {"propertyName": "kind"}}, {"x": 1}, ["/kind"],
     "a documented variant", "absent"),
    # Long values are cut to 120 characters, whatever the keyword: the message stays readable.
    ({"const": "a"}, LONG, [""], 'the value "a"', '"' + "x" * 116 + "..."),
    ({"const": "a"}, "x" * 118, [""], 'the value "a"', '"' + "x" * 118 + '"'),
])
def test_each_keyword_says_what_was_expected_and_what_came(schema, instance, where, expected, actual):
    found = schema_spec(schema).schema_violations("#/components/schemas/S", instance, where="/body")
    assert [(x.where, x.expected, x.actual) for x in found] == [("/body" + w, expected, actual) for w in where]
    assert str(found[0]) == f"/body{where[0]}: expected {expected}, got {actual}"


def test_a_format_is_named_in_the_expectation():
    spec = schema_spec({"type": "string", "format": "date-time"})
    [found] = spec.schema_violations("#/components/schemas/S", "yesterday")
    assert (found.where, found.expected, found.actual) == ("", "format date-time", '"yesterday"')


# -- the body before its schema: media type, encoding, JSON ----------------------------------

MEDIA = {"openapi": "3.1.0", "info": {"title": "media", "version": "1"}, "paths": {"/x": {"post": {
    "requestBody": {"content": {"application/json": {"schema": {"type": "object", "required": ["a"]}}}},
    "responses": {
        "200": {"description": "json or text", "content": {
            "application/json": {"schema": {"type": "object", "required": ["a"]}},
            "text/plain": {"schema": {"type": "string", "maxLength": 3}}}},
        "201": {"description": "any text", "content": {"text/*": {"schema": {"type": "string", "maxLength": 3}}}},
        "202": {"description": "no schema", "content": {"application/octet-stream": {}}},
        "204": {"description": "nothing"}}}}}}
J = {"content-type": "application/json"}
RESPONSES = "#/paths/~1x/post/responses"
JSON_200 = f"{RESPONSES}/200/content/application~1json"


@pytest.mark.parametrize("status, headers, body, found", [
    (204, J, b"hi", [("/body", "no response body", '"hi"', f"{RESPONSES}/204/content")]),
    (204, {}, b"", []),
    (204, {}, None, []),
    (200, {}, b'{"a":1}', [("/headers/content-type", "one of ['application/json', 'text/plain']", "absent",
                            f"{RESPONSES}/200/content")]),
    (200, {"content-type": "image/png"}, b"x", [("/headers/content-type", "one of ['application/json', 'text/plain']",
                                                 '"image/png"', f"{RESPONSES}/200/content")]),
    (200, J, b"", [("/body", "a body of media type application/json", "an empty body", JSON_200)]),
    (200, J, b"\xff", [("/body", "UTF-8 text", "undecodable bytes (invalid start byte at 0)", JSON_200)]),
    (200, J, b"{", [("/body", "a valid JSON application/json body",
                     "invalid JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))", JSON_200)]),
    (200, J, b"[" * 100_000, [("/body", "a valid JSON application/json body", "JSON nested too deeply to parse", JSON_200)]),
    # Parsed JSON without headers: the caller vouches for a JSON media type.
    (200, None, {"b": 1}, [("/body/a", "a required property", "absent", f"{JSON_200}/schema")]),
    (200, J, bytearray(b'{"b":1}'), [("/body/a", "a required property", "absent", f"{JSON_200}/schema")]),
    (200, J, '{"b":1}', [("/body/a", "a required property", "absent", f"{JSON_200}/schema")]),
    (200, {"Content-Type": "text/plain; charset=utf-8"}, "abcd",
     [("/body", "at most 3 characters", '"abcd"', f"{RESPONSES}/200/content/text~1plain/schema")]),
    (201, {"content-type": "text/markdown"}, b"abcd",
     [("/body", "at most 3 characters", '"abcd"', f"{RESPONSES}/201/content/text~1*/schema")]),
    (202, {"content-type": "application/octet-stream"}, b"\x00\x01", []),
    # A body where none is documented is shown as text, undecodable bytes replaced.
    (204, {}, b"caf\xe9", [("/body", "no response body", '"caf\ufffd"', f"{RESPONSES}/204/content")]),
    (204, {}, "hi", [("/body", "no response body", '"hi"', f"{RESPONSES}/204/content")]),
])
def test_a_response_body_is_checked_against_its_media_type_then_its_schema(status, headers, body, found):
    got = Spec(MEDIA, name="media").violations("POST", "/x", status, headers, body)
    assert [(x.where, x.expected, x.actual, x.rule) for x in got] == found


def test_parsed_json_without_headers_is_held_to_the_first_media_type_when_none_is_json():
    text_only = {"openapi": "3.1.0", "info": {"title": "t", "version": "1"}, "paths": {"/t": {"get": {"responses": {
        "200": {"description": "text", "content": {"text/plain": {"schema": {"type": "string"}}}}}}}}}
    got = Spec(text_only, name="t").violations("GET", "/t", 200, None, {"a": 1})
    assert [(x.where, x.expected, x.rule) for x in got] == [
        ("/body", "type string", "#/paths/~1t/get/responses/200/content/text~1plain/schema")]


@pytest.mark.parametrize("headers, body, found", [
    (None, b'{"b":1}', [("/body/a", "a required property", "absent", "#/paths/~1x/post/requestBody/content/application~1json/schema")]),
    (None, {"a": 1}, []),
    (None, b"", [("/body", "a body of media type application/json", "an empty body", "#/paths/~1x/post/requestBody/content/application~1json")]),
    ({"content-type": "text/plain"}, b'{"a":1}',
     [("/headers/content-type", "one of ['application/json']", '"text/plain"', "#/paths/~1x/post/requestBody/content")]),
])
def test_a_request_body_is_checked_as_a_response_body_is(headers, body, found):
    got = Spec(MEDIA, name="media").request_violations("POST", "/x", body, headers=headers)
    assert [(x.where, x.expected, x.actual, x.rule) for x in got] == found


# -- headers, routes and statuses --------------------------------------------------------------

HEADERS = {"openapi": "3.1.0", "info": {"title": "headers", "version": "1"},
                "paths": {"/x": {"get": {"responses": {"200": {"description": "ok", "headers": {
                    "X-Request-Id": {"required": True, "schema": {"type": "string", "pattern": "^r-[0-9]+$"}},
                    "Retry-After": {"schema": {"type": "string", "pattern": "^[0-9]+$"}},
                    "Content-Type": {"required": True, "schema": {"const": "never/checked"}},
                    "Traceparent": {"$ref": "#/components/headers/Trace"},
                    "X-Note": {"description": "any value"}}}}}}},
                "components": {"headers": {"Trace": {"required": True, "schema": {"type": "string", "minLength": 55}}}}}
OK_200 = "#/paths/~1x/get/responses/200/headers"
TRACE = "0" * 55


@pytest.mark.parametrize("headers, found", [
    (None, [("/headers/x-request-id", "header X-Request-Id (required)", "absent", f"{OK_200}/X-Request-Id"),
            ("/headers/traceparent", "header Traceparent (required)", "absent", "#/components/headers/Trace")]),
    # Raw pairs, as a server sends them: any case, bytes, a repeated header joined as one value.
    ([(b"X-Request-Id", b"r-1"), (b"x-request-id", b"r-2"), (b"Traceparent", b"00")],
     [("/headers/x-request-id", "a string matching ^r-[0-9]+$", '"r-1, r-2"', f"{OK_200}/X-Request-Id/schema"),
      ("/headers/traceparent", "at least 55 characters", '"00"', "#/components/headers/Trace/schema")]),
    ({"X-REQUEST-ID": "r-7", "traceparent": TRACE, "Retry-After": "soon", "x-note": "\u00e9"},
     [("/headers/retry-after", "a string matching ^[0-9]+$", '"soon"', f"{OK_200}/Retry-After/schema")]),
    # Content-Type is the body's media type, never checked as a documented header.
    ([("X-Request-Id", "r-7"), ("Traceparent", TRACE), ("content-type", "text/plain")], []),
])
def test_documented_headers_are_checked_for_presence_and_value(headers, found):
    got = Spec(HEADERS, name="headers").violations("GET", "/x", 200, headers, None)
    assert [(x.where, x.expected, x.actual, x.rule) for x in got] == found


def test_documented_headers_are_listed_lower_case_without_content_type():
    spec = Spec(HEADERS, name="headers")
    assert spec.documented_headers("GET", "/x", 200) == ["x-request-id", "retry-after", "traceparent", "x-note"]
    assert spec.documented_headers("GET", "/x", 404) == [] and spec.documented_headers("GET", "/y", 200) == []


@pytest.mark.parametrize("method, path, status, found", [
    ("GET", "/y", 200, [("/path", "one of the paths of the headers spec ['/x']", '"/y"', "")]),
    ("put", "/x", 200, [("/method", "one of ['GET'] for /x", '"PUT"', "")]),
    ("GET", "/x", 404, [("/status", "one of ['200'] for GET /x", "404", "#/paths/~1x/get/responses")]),
])
def test_an_undocumented_route_or_status_is_named_with_what_is_documented(method, path, status, found):
    got = Spec(HEADERS, name="headers").violations(method, path, status, None, None)
    assert [(x.where, x.expected, x.actual, x.rule) for x in got] == found


NO_BODY = {"openapi": "3.1.0", "info": {"title": "w", "version": "1"}, "paths": {"/x": {
    "get": {"responses": {"200": {"description": "ok"}}},
    "post": {"requestBody": {"description": "documents no content"}, "responses": {"200": {"description": "ok"}}}}}}


@pytest.mark.parametrize("method, body, found", [
    ("get", b"", []), ("get", None, []), ("get", "", []),
    ("get", b"x", [("/body", "no body for GET /x", "a body", "")]),
    ("get", {}, [("/body", "no body for GET /x", "a body", "")]),  # parsed JSON is a body, even empty
    ("post", b"", []),
    ("post", b"x", [("/body", "no request body", '"x"', "#/paths/~1x/post/requestBody/content")]),
])
def test_a_request_body_where_none_is_documented_is_a_violation(method, body, found):
    got = Spec(NO_BODY, name="no-body").request_violations(method, "/x", body, headers=[("Content-Type", "text/plain")])
    assert [(x.where, x.expected, x.actual, x.rule) for x in got] == found


# -- formats, routes, response keys, media ranges, pointers ----------------------------------

@pytest.mark.parametrize("value, ok", [
    ("https://example.com/a?b=c#d", True), ("HTTPS://Example.COM/A", True), ("../relative/path", True), ("", True),
    ("https://example.com/a b", False), ("caf\u00e9", False), ("a<b>", False),
])
def test_uri_reference_is_checked_without_an_optional_package(value, ok):
    # jsonschema checks uri-reference only with rfc3987 installed; the kit checks it always.
    spec = schema_spec({"type": "object", "properties": {"link": {"type": "string", "format": "uri-reference"}}})
    found = spec.schema_violations("#/components/schemas/S", {"link": value})
    assert [(x.where, x.expected) for x in found] == ([] if ok else [("/link", "format uri-reference")])


def test_a_format_on_a_value_of_another_type_is_no_violation():
    assert schema_spec({"format": "uri-reference"}).schema_violations("#/components/schemas/S", 5) == []


def test_header_bytes_are_latin_1():
    got = Spec(HEADERS, name="headers").violations("GET", "/x", 200, [(b"X-Request-Id", b"r-caf\xe9"), (b"Traceparent", TRACE.encode())], None)
    assert [(x.where, x.actual) for x in got] == [("/headers/x-request-id", '"r-caf\u00e9"')]


def test_a_variant_told_apart_by_an_enum_is_a_wrong_branch_not_a_failed_match():
    by_enum = {"oneOf": [{"type": "object", "properties": {"kind": {"enum": ["a"]}, "n": {"type": "integer"}},
                          "required": ["kind"]},
                         {"type": "object", "properties": {"kind": {"enum": ["b"]}, "s": {"type": "string"}},
                          "required": ["kind"]}]}
    found = schema_spec(by_enum).schema_violations("#/components/schemas/S", {"kind": "b", "s": 3})
    assert [(x.where, x.expected) for x in found] == [("/s", "type string")]


ROUTES = {"openapi": "3.1.0", "info": {"title": "routes", "version": "1"}, "paths": {
    "/": {"get": {"responses": {"200": {"description": "root", "content": {"application/json": {"schema": {"type": "boolean"}}}}}}},
    "/x/{id}": {"get": {"responses": {"200": {"description": "one", "content": {"application/json": {"schema": {"type": "integer"}}}}}}},
    "/x/~raw": {"get": {"responses": {
        "2XX": {"description": "any success", "content": {"application/*": {"schema": {"type": "string"}}}},
        "default": {"description": "anything else", "content": {"*/*": {"schema": {"type": "object"}}}}}}}}}


@pytest.mark.parametrize("path, status, headers, body, found", [
    # A literal path wins over a template that also matches it, whatever their order in the file.
    ("/x/~raw", 200, J, b'"text"', []),
    ("/x/7", 200, J, b'"text"', [("/body", "type integer")]),
    ("/x/7/8", 200, J, b"1", [("/path", "one of the paths of the routes spec ['/', '/x/{id}', '/x/~raw']")]),
    # The query and the fragment are not part of the path, whatever they hold.
    ("/x/~raw?a=/x/7?b", 200, J, b'"text"', []),
    ("/x/~raw#top?a=1#b", 200, J, b'"text"', []),
    ("/x/~raw#a#b", 200, J, b'"text"', []),
    ("/x/7?q#f", 200, J, b"7", []),
    ("?q=1", 200, J, b"true", []),  # an empty path is "/"
    # A status matches its own key, then its class (2XX), then default.
    ("/x/~raw", 204, {"content-type": "application/problem+json"}, b"3", [("/body", "type string")]),
    ("/x/~raw", 503, {"content-type": "text/html"}, b'"busy"', [("/body", "type object")]),
])
def test_routes_statuses_and_media_ranges_resolve_as_openapi_says(path, status, headers, body, found):
    got = Spec(ROUTES, name="routes").violations("GET", path, status, headers, body)
    assert [(x.where, x.expected) for x in got] == found


def test_a_schema_is_named_by_a_pointer_with_escapes_and_indexes():
    spec = Spec({"openapi": "3.1.0", "info": {"title": "p", "version": "1"},
                 "paths": {"/x": {"get": {"responses": {"200": {"description": "ok"}}}}},
                 "components": {"schemas": {"a/b~c": {"oneOf": [{"type": "string"}, {"type": "integer", "properties": {
                     "n": {"type": "integer"}}}]}}}}, name="p")
    assert [x.expected for x in spec.schema_violations("#/components/schemas/a~1b~0c/oneOf/1", "s")] == ["type integer"]
    assert [x.expected for x in spec.schema_violations("#/components/schemas/a~1b~0c/oneOf/1/properties/n", "s")] == \
        ["type integer"]
    with pytest.raises(SpecError, match=r"^spec <memory>: \$ref #/components/schemas/a~1b~0c/oneOf/2 points to nothing$"):
        spec.schema_violations("#/components/schemas/a~1b~0c/oneOf/2", "s")


def test_a_ref_loop_or_a_ref_nowhere_inside_a_list_names_the_file():
    paths = {"/x": {"get": {"responses": {"200": {"description": "ok", "headers": {"X-A": {"$ref": "#/components/headers/A"}}}}}}}
    looped = Spec({"openapi": "3.1.0", "info": {"title": "l", "version": "1"}, "paths": paths,
                   "components": {"headers": {"A": {"$ref": "#/components/headers/B"}, "B": {"$ref": "#/components/headers/A"}}}},
                  name="l", source="looped.yaml")
    with pytest.raises(SpecError, match=r"^spec looped.yaml: \$ref loop at #/components/headers/"):
        looped.violations("GET", "/x", 200, None, None)
    with pytest.raises(SpecError, match=r"^spec listed.yaml: .*#/components/schemas/Gone"):
        Spec({"openapi": "3.1.0", "info": {"title": "l", "version": "1"}, "paths": {"/x": {"get": {"responses": {"200": {
            "description": "ok", "content": {"application/json": {"schema": {"allOf": [{"$ref": "#/components/schemas/Gone"}]}}}}}}}}},
             name="l", source="listed.yaml")

"""A fast accept-path for JSON Schema (Draft 2020-12) inside an OpenAPI 3.1 document.

`compile_schema(document, pointer)` turns the schema at `pointer` into a tree of plain Python
closures that answers one question: would

    Draft202012Validator({"$ref": "#" + pointer}, registry=<document as one resource>,
                         format_checker=<a FormatChecker with `format_checks`>).is_valid(x)

say True? Local `$ref`s are resolved once, at compile time, and inlined; `oneOf`/`anyOf` whose
branches each pin ``properties.<discriminator propertyName>.const`` dispatch on the instance's
value instead of trying every branch. The predicate never says True where jsonschema says
False: when it says False the caller asks jsonschema for the precise errors. Where a schema
uses something this module does not reproduce exactly, `compile_schema` returns None and the
caller keeps using jsonschema for that schema.

Semantics follow jsonschema's own keyword functions (`jsonschema._keywords`) and its Draft
2020-12 type checker: bools are neither integers nor numbers, a float with no fractional part
is an integer, ``const``/``enum``/``uniqueItems`` use jsonschema's `equal` (1 and True differ),
``pattern`` and ``patternProperties`` use `re.search`, lengths count code points, and keywords
jsonschema does not know are ignored, as jsonschema ignores them.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from numbers import Number
from typing import Any
from urllib.parse import unquote

__all__ = ["compile_schema", "compiled", "guarded"]

Predicate = Callable[[Any], bool]
# A discriminated oneOf/anyOf: (property, its value -> the candidate branches, the branches that pin nothing).
Dispatch = tuple[str, dict[str, tuple[Predicate, ...]], tuple[Predicate, ...]]

# Keywords jsonschema validates with (Draft 2020-12) that this compiler reproduces. Any other
# keyword jsonschema validates with makes the schema unsupported; keywords jsonschema does not
# validate with (annotations, "x-" extensions, OpenAPI's discriminator...) are ignored, exactly
# as jsonschema ignores them.
_IMPLEMENTED = frozenset({
    "$ref", "additionalProperties", "allOf", "anyOf", "const", "contains", "dependentRequired",
    "dependentSchemas", "enum", "exclusiveMaximum", "exclusiveMinimum", "format", "if", "items",
    "maxItems", "maxLength", "maxProperties", "maximum", "minItems", "minLength", "minProperties",
    "minimum", "multipleOf", "not", "oneOf", "pattern", "patternProperties", "prefixItems",
    "properties", "propertyNames", "required", "type", "uniqueItems",
})
# The keywords jsonschema's Draft202012Validator validates with (its VALIDATORS), spelled out so
# that compiling imports no jsonschema; tests/specs/test_schema_compiler.py checks they are its.
_VALIDATED = frozenset({
    "$dynamicRef", "$ref", "additionalProperties", "allOf", "anyOf", "const", "contains", "dependentRequired",
    "dependentSchemas", "enum", "exclusiveMaximum", "exclusiveMinimum", "format", "if", "items", "maxItems",
    "maxLength", "maxProperties", "maximum", "minItems", "minLength", "minProperties", "minimum", "multipleOf",
    "not", "oneOf", "pattern", "patternProperties", "prefixItems", "properties", "propertyNames", "required",
    "type", "unevaluatedItems", "unevaluatedProperties", "uniqueItems",
})
# Keywords that would change how references resolve, or which dialect applies: not reproduced.
_RESOLUTION = frozenset({"$id", "$schema", "$dynamicAnchor", "$dynamicRef", "$recursiveRef",
                         "$recursiveAnchor", "$vocabulary"})
_UNSUPPORTED = (_VALIDATED - _IMPLEMENTED) | _RESOLUTION

_MISSING = object()


# -- jsonschema's equality (jsonschema._utils: equal, uniq), here so that a predicate needs no
#    jsonschema import; tests/specs/test_schema_compiler.py holds them to jsonschema's --------

_TRUE, _FALSE = object(), object()


def _unbool(element: Any) -> Any:
    """True and 1, False and 0, made distinct (as jsonschema's `unbool`)."""
    if element is True:
        return _TRUE
    if element is False:
        return _FALSE
    return element


def equal(one: Any, two: Any) -> bool:
    """JSON Schema equality: bools are not numbers, inside sequences and mappings too."""
    if one is two:
        return True
    if isinstance(one, str) or isinstance(two, str):
        return bool(one == two)
    if isinstance(one, Sequence) and isinstance(two, Sequence):
        return len(one) == len(two) and all(equal(i, j) for i, j in zip(one, two))
    if isinstance(one, Mapping) and isinstance(two, Mapping):
        return len(one) == len(two) and all(key in two and equal(value, two[key]) for key, value in one.items())
    return bool(_unbool(one) == _unbool(two))


def uniq(container: Any) -> bool:
    """Whether all of `container`'s items differ, by `equal`."""
    try:
        ordered = sorted(_unbool(i) for i in container)
        for i, j in zip(ordered, itertools.islice(ordered, 1, None)):
            if equal(i, j):
                return False
    except (NotImplementedError, TypeError):
        seen: list[Any] = []
        for item in container:
            item = _unbool(item)
            if any(equal(i, item) for i in seen):
                return False
            seen.append(item)
    return True


class _Unsupported(Exception):
    """Raised while compiling when the schema needs something not reproduced here.

    It carries no reason: `compile_schema` answers None and the caller keeps jsonschema, which
    judges that schema as it would have anyway, so no one reads why.
    """


def _true(x: Any) -> bool:
    return True


def _false(x: Any) -> bool:
    return False


# -- types, as jsonschema's draft202012_type_checker sees them ------------------------------

def _is_null(x: Any) -> bool:
    return x is None


def _is_boolean(x: Any) -> bool:
    return isinstance(x, bool)


def _is_string(x: Any) -> bool:
    return isinstance(x, str)


def _is_array(x: Any) -> bool:
    return isinstance(x, list)


def _is_object(x: Any) -> bool:
    return isinstance(x, dict)


def _is_number(x: Any) -> bool:
    t = type(x)
    if t is int or t is float:
        return True
    return isinstance(x, Number) and not isinstance(x, bool)


def _is_integer(x: Any) -> bool:
    t = type(x)
    if t is int:
        return True
    if t is float:
        whole: bool = x.is_integer()
        return whole
    if isinstance(x, bool):
        return False
    return isinstance(x, int) or (isinstance(x, float) and x.is_integer())


_TYPES: dict[str, Predicate] = {
    "null": _is_null, "boolean": _is_boolean, "string": _is_string, "array": _is_array,
    "object": _is_object, "number": _is_number, "integer": _is_integer,
}


# -- combinators -----------------------------------------------------------------------------

def _all(preds: list[Predicate]) -> Predicate:
    preds = [p for p in preds if p is not _true]
    if any(p is _false for p in preds):
        return _false
    if not preds:
        return _true
    if len(preds) == 1:
        return preds[0]
    if len(preds) == 2:
        a, b = preds
        return lambda x: a(x) and b(x)
    if len(preds) == 3:
        a, b, c = preds
        return lambda x: a(x) and b(x) and c(x)
    if len(preds) == 4:
        a, b, c, d = preds
        return lambda x: a(x) and b(x) and c(x) and d(x)
    ps = tuple(preds)

    def conj(x: Any) -> bool:
        for p in ps:
            if not p(x):
                return False
        return True

    return conj


def _number_value(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Unsupported
    return value


def _count_value(value: Any) -> int | float:
    # jsonschema compares len(...) with the value; only plain non-negative integers are reproduced.
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            return value  # len(x) < 2.0 behaves as len(x) < 2
        raise _Unsupported
    return value


def _regex(pattern: Any) -> re.Pattern[str]:
    if not isinstance(pattern, str):
        raise _Unsupported
    try:
        return re.compile(pattern)
    except re.error:
        raise _Unsupported from None


class _Compiler:
    def __init__(self, document: Mapping[str, Any], format_checks: Mapping[str, Callable[[Any], bool]]) -> None:
        self.document = document
        self.format_checks = format_checks
        self.by_pointer: dict[str, Predicate] = {}
        self.cells: dict[str, list[Predicate | None]] = {}

    # -- references --------------------------------------------------------------------

    def resolve(self, pointer: str) -> Any:
        """The node at `pointer` (already percent-decoded), as referencing finds it."""
        node: Any = self.document
        if isinstance(node, Mapping) and ("$id" in node or "$schema" in node):
            raise _Unsupported
        if not pointer:
            return node
        if not pointer.startswith("/"):
            raise _Unsupported
        for segment in pointer[1:].split("/"):
            if isinstance(node, list):
                if not segment.isdigit() or not segment.isascii():
                    raise _Unsupported
                index = int(segment)
                if index >= len(node):
                    raise _Unsupported
                node = node[index]
            elif isinstance(node, Mapping):
                key = segment.replace("~1", "/").replace("~0", "~")
                if key not in node:
                    raise _Unsupported
                node = node[key]
            else:
                raise _Unsupported
            if isinstance(node, Mapping) and "$id" in node:
                raise _Unsupported
        return node

    def ref(self, ref: Any) -> Predicate:
        return self.at(_local_pointer(ref))

    def at(self, pointer: str) -> Predicate:
        done = self.by_pointer.get(pointer)
        if done is not None:
            return done
        cell = self.cells.get(pointer)
        if cell is not None:
            # A cycle: this pointer is being compiled further up. Look the finished predicate
            # up at validation time (only on recursive schemas).
            def later(x: Any, cell: list[Predicate | None] = cell) -> bool:
                finished = cell[0]
                assert finished is not None
                return finished(x)
            return later
        cell = [None]
        self.cells[pointer] = cell
        pred = self.schema(self.resolve(pointer))
        cell[0] = pred
        self.by_pointer[pointer] = pred
        return pred

    def target(self, ref: Any, seen: frozenset[str]) -> tuple[Any, frozenset[str]] | None:
        """The schema a local $ref points to, for compile-time analysis (None on a cycle)."""
        fragment = _local_pointer(ref)
        if fragment in seen:
            return None
        return self.resolve(fragment), seen | {fragment}

    # -- schemas -----------------------------------------------------------------------

    def schema(self, schema: Any) -> Predicate:
        if schema is True:
            return _true
        if schema is False:
            return _false
        if not isinstance(schema, Mapping):
            raise _Unsupported
        if any(key in _UNSUPPORTED for key in schema):
            raise _Unsupported
        type_names = _type_names(schema)
        obj = self.object_checks(schema)
        arr = self.array_checks(schema)
        txt = self.string_checks(schema)
        num = self.number_checks(schema)
        if type_names is not None and len(type_names) == 1:
            parts = [_one_type(type_names[0], obj, arr, txt, num)]
        elif type_names == []:
            return _false  # `type: []` allows no type
        else:
            parts = _any_type(type_names, obj, arr, txt, num)
        return _all(parts + self.generic_checks(schema))

    def generic_checks(self, schema: Mapping[str, Any]) -> list[Predicate]:
        """The checks of keywords that apply to every type, in jsonschema's order."""
        generic: list[Predicate] = []
        if "const" in schema:
            generic.append(_const(schema["const"]))
        if "enum" in schema:
            generic.append(_enum(schema["enum"]))
        if "format" in schema:
            generic.append(self.format(schema["format"]))
        if "$ref" in schema:
            generic.append(self.ref(schema["$ref"]))
        if "allOf" in schema:
            generic.append(_all([self.schema(s) for s in _subschemas(schema["allOf"])]))
        if "anyOf" in schema:
            generic.append(self.any_of(schema))
        if "oneOf" in schema:
            generic.append(self.one_of(schema))
        if "not" in schema:
            inner = self.schema(schema["not"])
            generic.append(lambda x, inner=inner: not inner(x))
        if "if" in schema:
            generic.append(self.if_then_else(schema))
        return generic

    def format(self, name: Any) -> Predicate:
        if not isinstance(name, str) or name not in self.format_checks:
            raise _Unsupported
        check = self.format_checks[name]

        def fmt(x: Any) -> bool:
            try:
                return bool(check(x))
            except Exception:  # a failed check; jsonschema then gives the precise answer
                return False

        return fmt

    def if_then_else(self, schema: Mapping[str, Any]) -> Predicate:
        cond = self.schema(schema["if"])
        then = self.schema(schema["then"]) if "then" in schema else _true
        other = self.schema(schema["else"]) if "else" in schema else _true
        return lambda x: then(x) if cond(x) else other(x)

    # -- per-type keyword groups (None when the schema has none of them) ---------------

    def object_checks(self, schema: Mapping[str, Any]) -> Predicate | None:
        checks = _object_size_checks(schema)
        if "properties" in schema or "patternProperties" in schema or "additionalProperties" in schema:
            checks.append(self.property_checks(schema))
        if "propertyNames" in schema:
            names_ok = self.schema(schema["propertyNames"])
            if names_ok is not _true:
                checks.append(lambda x, f=names_ok: all(f(k) for k in x))
        if "dependentRequired" in schema:
            checks.append(_dependent_required(schema["dependentRequired"]))
        if "dependentSchemas" in schema:
            checks.append(self.dependent_schemas(schema["dependentSchemas"]))
        return _all(checks) if checks else None

    def dependent_schemas(self, deps: Any) -> Predicate:
        if not isinstance(deps, Mapping):
            raise _Unsupported
        dep_preds = tuple((k, self.schema(v)) for k, v in deps.items())

        def dependent_schemas(x: Any) -> bool:
            for name, pred in dep_preds:
                if name in x and not pred(x):
                    return False
            return True

        return dependent_schemas

    def property_checks(self, schema: Mapping[str, Any]) -> Predicate:
        props = schema.get("properties", {})
        if not isinstance(props, Mapping):
            raise _Unsupported
        preds = {k: self.schema(v) for k, v in props.items()}
        patterns = schema.get("patternProperties", {})
        if not isinstance(patterns, Mapping):
            raise _Unsupported
        pattern_preds = tuple((_regex(p), self.schema(s)) for p, s in patterns.items())
        extra = self.additional_properties(schema.get("additionalProperties", True))
        if not pattern_preds:
            return _named_properties(preds, extra)
        # jsonschema's find_additional_properties: one search with the joined patterns.
        return _patterned_properties(preds, pattern_preds, _regex("|".join(patterns)), extra)

    def additional_properties(self, additional: Any) -> Predicate:
        if isinstance(additional, dict):
            return self.schema(additional)
        if isinstance(additional, Mapping):
            raise _Unsupported
        # jsonschema: `elif not aP and extras` -> falsy values forbid, truthy ones allow.
        return _true if additional else _false

    def array_checks(self, schema: Mapping[str, Any]) -> Predicate | None:
        checks = _item_count_checks(schema)
        prefix: tuple[Predicate, ...] = ()
        if "prefixItems" in schema:
            prefix = tuple(self.schema(s) for s in _subschemas(schema["prefixItems"]))
            if any(p is not _true for p in prefix):
                checks.append(_prefix_items(prefix))
        if "items" in schema:
            items = self.items_check(schema["items"], len(prefix))
            if items is not None:
                checks.append(items)
        if "contains" in schema:
            checks.append(self.contains_check(schema))
        if "uniqueItems" in schema and schema["uniqueItems"]:
            checks.append(uniq)
        return _all(checks) if checks else None

    def items_check(self, items: Any, start: int) -> Predicate | None:
        """`items`, for the items after the `start` that prefixItems judges (None: all pass)."""
        if items is not True and items is not False and not isinstance(items, Mapping):
            raise _Unsupported
        each = self.schema(items)
        if each is _false:
            return lambda x, start=start: len(x) <= start
        if each is _true:
            return None
        return _rest_items(each, start) if start else _all_items(each)

    def contains_check(self, schema: Mapping[str, Any]) -> Predicate:
        wanted = self.schema(schema["contains"])
        least = _count_value(schema.get("minContains", 1))
        most = schema.get("maxContains", _MISSING)
        if most is not _MISSING:
            most = _count_value(most)

        def contains(x: Any) -> bool:
            limit = len(x) if most is _MISSING else most
            matches = 0
            for item in x:
                if wanted(item):
                    matches += 1
                    if matches > limit:
                        return False
            return matches >= least

        return contains

    def string_checks(self, schema: Mapping[str, Any]) -> Predicate | None:
        checks: list[Predicate] = []
        low = _count_value(schema["minLength"]) if "minLength" in schema else None
        high = _count_value(schema["maxLength"]) if "maxLength" in schema else None
        if low is not None and high is not None:
            checks.append(lambda x: low <= len(x) <= high)
        elif low is not None:
            checks.append(lambda x: len(x) >= low)
        elif high is not None:
            checks.append(lambda x: len(x) <= high)
        if "pattern" in schema:
            search = _regex(schema["pattern"]).search
            checks.append(lambda x: search(x) is not None)
        return _all(checks) if checks else None

    def number_checks(self, schema: Mapping[str, Any]) -> Predicate | None:
        checks: list[Predicate] = []
        if "minimum" in schema and "maximum" in schema:
            # The common range check as one closure (`not x < low`, as jsonschema: NaN passes).
            low = _number_value(schema["minimum"])
            high = _number_value(schema["maximum"])
            checks.append(lambda x, low=low, high=high: not x < low and not x > high)
        elif "minimum" in schema:
            low = _number_value(schema["minimum"])
            checks.append(lambda x, low=low: not x < low)
        elif "maximum" in schema:
            high = _number_value(schema["maximum"])
            checks.append(lambda x, high=high: not x > high)
        if "exclusiveMinimum" in schema:
            low = _number_value(schema["exclusiveMinimum"])
            checks.append(lambda x, low=low: not x <= low)
        if "exclusiveMaximum" in schema:
            high = _number_value(schema["exclusiveMaximum"])
            checks.append(lambda x, high=high: not x >= high)
        if "multipleOf" in schema:
            checks.append(_multiple_of(_number_value(schema["multipleOf"])))
        return _all(checks) if checks else None

    # -- oneOf / anyOf, with discriminator dispatch -------------------------------------

    def any_of(self, schema: Mapping[str, Any]) -> Predicate:
        branches = [self.schema(s) for s in _subschemas(schema["anyOf"])]
        if any(b is _true for b in branches):
            return _true
        dispatch = self.dispatch_table(schema, "anyOf", branches)
        preds = tuple(branches)

        def any_branch(x: Any, candidates: tuple[Predicate, ...] = preds) -> bool:
            for pred in candidates:
                if pred(x):
                    return True
            return False

        return any_branch if dispatch is None else _dispatched(any_branch, dispatch)

    def one_of(self, schema: Mapping[str, Any]) -> Predicate:
        branches = [self.schema(s) for s in _subschemas(schema["oneOf"])]
        preds = tuple(branches)

        def exactly_one(x: Any, candidates: tuple[Predicate, ...] = preds) -> bool:
            found = False
            for pred in candidates:
                if pred(x):
                    if found:
                        return False
                    found = True
            return found

        dispatch = self.dispatch_table(schema, "oneOf", branches)
        return exactly_one if dispatch is None else _dispatched(exactly_one, dispatch)

    def dispatch_table(
        self, schema: Mapping[str, Any], keyword: str, branches: list[Predicate]
    ) -> Dispatch | None:
        """For an object instance holding `prop`, the branches that can still match it.

        A branch pins the property when, among its conjunctive parts (itself, its `$ref`
        target, its `allOf` members), `properties.<prop>` has (conjunctively) a string
        `const`: for a dict instance holding `prop` with another value that branch must fail,
        so skipping it changes nothing. Branches that pin nothing stay candidates always.
        """
        found = self.pins(schema, keyword)
        if found is None:
            return None
        prop, pins = found
        unpinned = tuple(b for b, p in zip(branches, pins) if p is _MISSING)
        # Keep the branches' order within each candidate list.
        ordered = {
            value: tuple(b for b, p in zip(branches, pins) if p is _MISSING or p == value)
            for value in dict.fromkeys(p for p in pins if p is not _MISSING)
        }
        return prop, ordered, unpinned

    def pins(self, schema: Mapping[str, Any], keyword: str) -> tuple[str, list[Any]] | None:
        """(the discriminating property, what each branch of `keyword` pins it to or _MISSING);
        None when there is no discriminator or no branch pins it."""
        discriminator = schema.get("discriminator")
        if not isinstance(discriminator, Mapping):
            return None
        prop = discriminator.get("propertyName")
        if not isinstance(prop, str):
            return None
        pins = [self.pinned(s, prop, frozenset()) for s in _subschemas(schema[keyword])]
        return None if all(p is _MISSING for p in pins) else (prop, pins)

    def pinned(self, schema: Any, prop: str, seen: frozenset[str]) -> Any:
        """A string `prop` must equal in any dict holding `prop` that `schema` accepts, or _MISSING."""
        if not isinstance(schema, Mapping):
            return _MISSING
        props = schema.get("properties")
        if isinstance(props, Mapping) and prop in props:
            found = self.const_of(props[prop], seen)
            if found is not _MISSING:
                return found
        if "$ref" in schema:
            hop = self.target(schema["$ref"], seen)
            if hop is not None:
                found = self.pinned(hop[0], prop, hop[1])
                if found is not _MISSING:
                    return found
        all_of = schema.get("allOf")
        if isinstance(all_of, list):
            for member in all_of:
                found = self.pinned(member, prop, seen)
                if found is not _MISSING:
                    return found
        return _MISSING

    def const_of(self, schema: Any, seen: frozenset[str]) -> Any:
        """A string every instance `schema` accepts equals, or _MISSING."""
        if not isinstance(schema, Mapping):
            return _MISSING
        if "const" in schema:
            value = schema["const"]
            return value if type(value) is str else _MISSING
        if "$ref" in schema:
            hop = self.target(schema["$ref"], seen)
            if hop is not None:
                found = self.const_of(hop[0], hop[1])
                if found is not _MISSING:
                    return found
        all_of = schema.get("allOf")
        if isinstance(all_of, list):
            for member in all_of:
                found = self.const_of(member, seen)
                if found is not _MISSING:
                    return found
        return _MISSING


def _type_names(schema: Mapping[str, Any]) -> list[str] | None:
    """The schema's `type` as distinct names, in order; None when it has none."""
    types = schema.get("type", _MISSING)
    if types is _MISSING:
        return None
    names = [types] if isinstance(types, str) else types
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise _Unsupported
    if any(n not in _TYPES for n in names):
        raise _Unsupported
    return list(dict.fromkeys(names))


def _one_type(only: str, obj: Predicate | None, arr: Predicate | None, txt: Predicate | None,
              num: Predicate | None) -> Predicate:
    """One type: the type test and that type's checks as one predicate (the other types' checks
    cannot apply)."""
    if only == "object":
        return _typed(dict, obj)
    if only == "array":
        return _typed(list, arr)
    if only == "string":
        return _typed(str, txt)
    if only == "number" and num is not None:
        def number(x: Any, num: Predicate = num) -> bool:
            t = type(x)
            if t is float or t is int:
                return num(x)
            return _is_number(x) and num(x)

        return number
    if only in ("number", "integer"):
        test = _TYPES[only]
        if num is None:
            return test
        return lambda x, test=test, num=num: test(x) and num(x)
    return _TYPES[only]


def _any_type(type_names: list[str] | None, obj: Predicate | None, arr: Predicate | None,
              txt: Predicate | None, num: Predicate | None) -> list[Predicate]:
    """Several types (or none given): the type test, and each type's checks on instances of it."""
    parts: list[Predicate] = []
    if type_names is not None:
        tests = tuple(_TYPES[n] for n in type_names)
        parts.append(lambda x, tests=tests: any(t(x) for t in tests))
    if obj is not None:
        parts.append(lambda x, f=obj: not isinstance(x, dict) or f(x))
    if arr is not None:
        parts.append(lambda x, f=arr: not isinstance(x, list) or f(x))
    if txt is not None:
        parts.append(lambda x, f=txt: not isinstance(x, str) or f(x))
    if num is not None:
        parts.append(lambda x, f=num: not _is_number(x) or f(x))
    return parts


def _object_size_checks(schema: Mapping[str, Any]) -> list[Predicate]:
    """required, minProperties, maxProperties."""
    checks: list[Predicate] = []
    if "required" in schema:
        required = schema["required"]
        if not isinstance(required, list):
            raise _Unsupported
        try:
            names = frozenset(required)
        except TypeError:
            raise _Unsupported from None
        if names:
            checks.append(lambda x, names=names: x.keys() >= names)
    if "minProperties" in schema:
        low = _count_value(schema["minProperties"])
        checks.append(lambda x, low=low: len(x) >= low)
    if "maxProperties" in schema:
        high = _count_value(schema["maxProperties"])
        checks.append(lambda x, high=high: len(x) <= high)
    return checks


def _dependent_required(deps: Any) -> Predicate:
    if not isinstance(deps, Mapping) or not all(isinstance(v, list) for v in deps.values()):
        raise _Unsupported
    pairs = tuple((k, tuple(v)) for k, v in deps.items())

    def dependent_required(x: Any) -> bool:
        for name, needed in pairs:
            if name in x:
                for each in needed:
                    if each not in x:
                        return False
        return True

    return dependent_required


def _named_properties(preds: dict[str, Predicate], extra: Predicate) -> Predicate:
    """properties and additionalProperties, with no patternProperties."""
    if extra is _true:
        checked = {k: p for k, p in preds.items() if p is not _true}
        return _properties_only(tuple(checked.items())) if checked else _true
    if extra is _false:
        return _closed_properties(dict(preds))
    return _open_properties(dict(preds), extra)


def _properties_only(items: tuple[tuple[str, Predicate], ...]) -> Predicate:
    def props_only(x: Any) -> bool:
        for name, pred in items:
            value = x.get(name, _MISSING)
            if value is not _MISSING and not pred(value):
                return False
        return True

    # x.get(name) is jsonschema's `name in x` then `x[name]`: the same dict lookup.
    return props_only


def _closed_properties(lookup: dict[str, Predicate]) -> Predicate:
    def closed(x: Any) -> bool:
        get = lookup.get
        for name, value in x.items():
            pred = get(name)
            if pred is None or not pred(value):
                return False
        return True

    return closed


def _open_properties(lookup: dict[str, Predicate], extra: Predicate) -> Predicate:
    def open_with_schema(x: Any) -> bool:
        get = lookup.get
        for name, value in x.items():
            pred = get(name)
            if pred is None:
                if not extra(value):
                    return False
            elif not pred(value):
                return False
        return True

    return open_with_schema


def _patterned_properties(preds: dict[str, Predicate], pattern_preds: tuple[tuple[re.Pattern[str], Predicate], ...],
                          joined: re.Pattern[str], extra: Predicate) -> Predicate:
    """properties, patternProperties and additionalProperties (extra: a name neither names nor matches)."""
    lookup = dict(preds)

    def general(x: Any) -> bool:
        for name, value in x.items():
            pred = lookup.get(name)
            if pred is not None and not pred(value):
                return False
            if not isinstance(name, str):
                raise TypeError("a non-string key with patternProperties")  # as re.search would
            for regex, pattern_pred in pattern_preds:
                if regex.search(name) and not pattern_pred(value):
                    return False
            if pred is None and not joined.search(name) and not extra(value):
                return False
        return True

    return general


def _item_count_checks(schema: Mapping[str, Any]) -> list[Predicate]:
    """minItems, maxItems."""
    checks: list[Predicate] = []
    if "minItems" in schema:
        low = _count_value(schema["minItems"])
        checks.append(lambda x, low=low: len(x) >= low)
    if "maxItems" in schema:
        high = _count_value(schema["maxItems"])
        checks.append(lambda x, high=high: len(x) <= high)
    return checks


def _prefix_items(prefix: tuple[Predicate, ...]) -> Predicate:
    def prefix_items(x: Any, prefix: tuple[Predicate, ...] = prefix) -> bool:
        for pred, item in zip(prefix, x):
            if not pred(item):
                return False
        return True

    return prefix_items


def _rest_items(each: Predicate, start: int) -> Predicate:
    def rest_items(x: Any) -> bool:
        for item in x[start:]:
            if not each(item):
                return False
        return True

    return rest_items


def _all_items(each: Predicate) -> Predicate:
    def all_items(x: Any) -> bool:
        for item in x:
            if not each(item):
                return False
        return True

    return all_items


def _dispatched(combine: Callable[..., bool], dispatch: Dispatch) -> Predicate:
    """`combine` (anyOf's or oneOf's, over given candidates or all branches) over only the
    branches that can match an object holding the discriminating property's value."""
    prop, table, unpinned = dispatch

    def dispatched(x: Any) -> bool:
        if isinstance(x, dict):
            value = x.get(prop, _MISSING)
            if value is not _MISSING:
                return combine(x, table.get(value, unpinned) if isinstance(value, str) else unpinned)
        return combine(x)

    return dispatched


def _local_pointer(ref: Any) -> str:
    """The JSON pointer of a `$ref` into this document (`#/...`, percent-decoded)."""
    if not isinstance(ref, str) or not ref.startswith("#"):
        raise _Unsupported
    fragment = unquote(ref[1:])
    if fragment and not fragment.startswith("/"):
        raise _Unsupported
    return fragment


def _subschemas(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise _Unsupported
    return value


def _typed(kind: type, checks: Predicate | None) -> Predicate:
    if checks is None or checks is _true:
        return lambda x: isinstance(x, kind)
    if checks is _false:
        return _false
    return lambda x: isinstance(x, kind) and checks(x)


def _const(value: Any) -> Predicate:
    if type(value) is str:
        # equal(x, c) with c a str is `x is c or x == c`.
        return lambda x: x == value
    return lambda x: equal(x, value)


def _enum(values: Any) -> Predicate:
    if not isinstance(values, list):
        raise _Unsupported
    if values and all(type(v) is str for v in values):
        strings = frozenset(values)
        options = tuple(values)

        def enum_of_strings(x: Any) -> bool:
            if type(x) is str:
                return x in strings
            return any(equal(each, x) for each in options)

        return enum_of_strings
    options = tuple(values)
    return lambda x: any(equal(each, x) for each in options)


def _multiple_of(divisor: Any) -> Predicate:
    # jsonschema._keywords.multipleOf, as a predicate.
    if isinstance(divisor, float):
        def float_multiple(x: Any) -> bool:
            quotient: float = x / divisor
            try:
                return int(quotient) == quotient
            except OverflowError:
                return (Fraction(x) / Fraction(divisor)).denominator == 1

        return float_multiple
    return lambda x: not (x % divisor)


def compile_schema(
    document: Mapping[str, Any],
    pointer: str,
    *,
    format_checks: Mapping[str, Callable[[Any], bool]] | None = None,
) -> Callable[[Any], bool] | None:
    """Predicate equivalent to Draft202012Validator({"$ref": "#"+pointer}) with the whole document as
    the root resource, or None when the schema uses something this compiler does not support (then
    the caller keeps using jsonschema).

    `format_checks` maps format names to the checks the caller's FormatChecker makes (a check
    that returns falsy or raises is a failure). A schema naming any other format is
    unsupported (None), so a check jsonschema would make is never skipped. The predicate
    returns False, never raises, on instances jsonschema would choke on; the caller's
    jsonschema fallback then behaves as before.
    """
    found = compiled(document, pointer, format_checks=format_checks)
    return None if found is None else guarded(found[1])


def compiled(document: Mapping[str, Any], pointer: str, *,
             format_checks: Mapping[str, Callable[[Any], bool]] | None = None) -> tuple[_Compiler, Predicate] | None:
    """The compiler that compiled the schema at `pointer`, and its unguarded root closure; None
    when the schema is unsupported (`compile_schema`)."""
    compiler = _Compiler(document, format_checks or {})
    try:
        return compiler, compiler.ref("#" + pointer)
    except (_Unsupported, RecursionError):
        return None


def guarded(root: Predicate) -> Predicate:
    """`root` as the predicate callers get: True only for True, False for anything it raises."""
    def predicate(instance: Any) -> bool:
        try:
            return root(instance) is True
        except Exception:
            return False

    return predicate

"""The accept-path predicate of `schema_compiler`, written as Python source and compiled once.

`schema_compiler` builds a tree of closures: one Python call per keyword, dozens per response.
`generated(compiler, pointer)` writes the same predicate as the source of a few functions (one
per object schema, `$ref` target and discriminated ``oneOf``/``anyOf``), where type tests,
bounds, lengths, required members and string constants are inline expressions. A keyword group
not written here (``patternProperties``, ``prefixItems``, ``multipleOf``, ``if``, ``format``...)
is called as the compiler's own closure for that schema, so the predicate's answer is the
compiler's on every instance.

The answer, or the exception, is the closures' for any instance: each schema's checks run in
the compiler's order, short-circuit as its `_all` does, and its constant-true and constant-false
parts are dropped or decide as there. `compiled_predicate` (what `Spec` uses) gives the source
where it can be written and the closures otherwise; tests/specs/test_schema_compiler.py holds
both to jsonschema and to each other.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from pytest_laya.specs import schema_compiler as sc

__all__ = ["compiled_predicate", "generated"]

#: The variable an expression is written over, replaced where the expression is placed (no
#: Python name: anything left of it fails to compile).
_V = "@v@"
_TYPE_TEST = {
    "null": "@v@ is None", "boolean": "isinstance(@v@, bool)", "string": "isinstance(@v@, str)",
    "array": "isinstance(@v@, list)", "object": "isinstance(@v@, dict)",
    "number": "(type(@v@) is float or type(@v@) is int or _is_number(@v@))",
    "integer": "(type(@v@) is int or _is_integer(@v@))",
}
_OBJECT_WRITTEN = {"required", "minProperties", "maxProperties", "properties", "additionalProperties"}
_OBJECT_ALL = _OBJECT_WRITTEN | {"patternProperties", "propertyNames", "dependentRequired", "dependentSchemas"}
_ARRAY_WRITTEN = {"items", "minItems", "maxItems"}
_ARRAY_ALL = _ARRAY_WRITTEN | {"prefixItems", "contains", "uniqueItems"}
_TRUE, _FALSE = "True", "False"
_CALL = re.compile(r"(_[a-z]+[0-9]+)\(@v@\)")


def _conjunction(parts: list[str]) -> str:
    """`schema_compiler._all` as an expression: true parts dropped, any false part decides."""
    parts = [p for p in parts if p != _TRUE]
    if _FALSE in parts:
        return _FALSE
    if not parts:
        return _TRUE
    return parts[0] if len(parts) == 1 else " and ".join(f"({p})" for p in parts)


def _over(expression: str, variable: str) -> str:
    return expression.replace(_V, variable)


def _tuple(names: list[str]) -> str:
    """A tuple display of `names` (one name, or none, included)."""
    return "(" + "".join(f"{name}, " for name in names) + ")"


class _Writer:
    """Writes a compiled schema's functions; each method mirrors the `_Compiler` method of its name."""

    def __init__(self, compiler: Any) -> None:
        self.compiler = compiler
        self.names: dict[str, Any] = {"_is_number": sc._is_number, "_is_integer": sc._is_integer,
                                      "_MISSING": sc._MISSING, "_true": sc._true, "_false": sc._false}
        self.functions: list[str] = []
        self.tables: list[str] = []  # module-level names bound after every function is defined
        self.by_pointer: dict[str, str] = {}
        self.written: dict[str, str] = {}  # a finished pointer's expression
        self.counter = 0

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"_{prefix}{self.counter}"

    def constant(self, value: Any) -> str:
        name = self.fresh("k")
        self.names[name] = value
        return name

    def closure(self, predicate: Any) -> str:
        """A part left to the compiler's own closure, called."""
        if predicate is sc._true:
            return _TRUE
        if predicate is sc._false:
            return _FALSE
        return f"{self.constant(predicate)}({_V})"

    def group(self, predicate: Any) -> str | None:
        """A keyword group left to the compiler's closure for it (None: the group checks nothing)."""
        return None if predicate is None else self.closure(predicate)

    def define(self, name: str, lines: list[str], parameters: str = "x") -> None:
        """A function `name` of `parameters` whose body is `lines`."""
        self.functions.append(f"def {name}({parameters}):\n" + "".join(f"    {line}\n" for line in lines))

    def function(self, expression: str, prefix: str) -> str:
        """The name of a function returning `expression` of its argument (`_true`/`_false` for constants)."""
        if expression == _TRUE:
            return "_true"
        if expression == _FALSE:
            return "_false"
        called = _CALL.fullmatch(expression)
        if called:  # already a function of its argument
            return called.group(1)
        name = self.fresh(prefix)
        self.define(name, [f"return {_over(expression, 'x')}"])
        return name

    def statements(self, lines: list[str], prefix: str) -> str:
        """The name of a function of ``x`` running `lines`, then returning True."""
        name = self.fresh(prefix)
        self.define(name, [*lines, "return True"])
        return name

    # -- references ----------------------------------------------------------------------

    def ref(self, ref: Any) -> str:
        pointer = sc._local_pointer(ref)
        done = self.written.get(pointer)
        if done is not None:
            return done if done in (_TRUE, _FALSE) else f"{self.by_pointer[pointer]}({_V})"
        name = self.by_pointer.get(pointer)
        if name is not None:  # a cycle: called, as the compiler's `later` is
            return f"{name}({_V})"
        name = self.fresh("r")
        self.by_pointer[pointer] = name
        expression = self.schema(self.compiler.resolve(pointer))
        self.written[pointer] = expression
        self.define(name, [f"return {_over(expression, 'x')}"])
        return expression if expression in (_TRUE, _FALSE) else f"{name}({_V})"

    # -- schemas ---------------------------------------------------------------------------

    def schema(self, schema: Any) -> str:
        if schema is True:
            return _TRUE
        if schema is False:
            return _FALSE
        type_names = sc._type_names(schema)
        obj = self.object_checks(schema)
        arr = self.array_checks(schema)
        txt = self.string_checks(schema)
        num = self.number_checks(schema)
        if type_names is not None and len(type_names) == 1:
            parts = [self.one_type(type_names[0], obj, arr, txt, num)]
        elif type_names == []:
            return _FALSE
        else:
            parts = self.any_type(type_names, obj, arr, txt, num)
        return _conjunction(parts + self.generic_checks(schema))

    def one_type(self, only: str, obj: str | None, arr: str | None, txt: str | None, num: str | None) -> str:
        test = _TYPE_TEST[only]
        checks = {"object": obj, "array": arr, "string": txt, "number": num, "integer": num}.get(only)
        if checks is None or checks == _TRUE:
            return test
        if checks == _FALSE:
            return _FALSE
        return f"{test} and ({checks})"

    def any_type(self, type_names: list[str] | None, obj: str | None, arr: str | None, txt: str | None,
                 num: str | None) -> list[str]:
        parts: list[str] = []
        if type_names is not None:
            parts.append(" or ".join(f"({_TYPE_TEST[n]})" for n in type_names))
        for guard, checks in (("isinstance(@v@, dict)", obj), ("isinstance(@v@, list)", arr),
                              ("isinstance(@v@, str)", txt), ("_is_number(@v@)", num)):
            if checks is not None:
                parts.append(f"not {guard} or ({checks})")
        return parts

    def generic_checks(self, schema: Mapping[str, Any]) -> list[str]:
        compiler = self.compiler
        parts: list[str] = []
        if "const" in schema:
            value = schema["const"]
            parts.append(f"{_V} == {self.constant(value)}" if type(value) is str else self.closure(sc._const(value)))
        if "enum" in schema:
            parts.append(self.closure(sc._enum(schema["enum"])))
        if "format" in schema:
            parts.append(self.closure(compiler.format(schema["format"])))
        if "$ref" in schema:
            parts.append(self.ref(schema["$ref"]))
        if "allOf" in schema:
            parts.append(_conjunction([self.schema(s) for s in sc._subschemas(schema["allOf"])]))
        if "anyOf" in schema:
            parts.append(self.combined(schema, "anyOf"))
        if "oneOf" in schema:
            parts.append(self.combined(schema, "oneOf"))
        if "not" in schema:
            parts.append(f"not ({self.schema(schema['not'])})")
        if "if" in schema:
            parts.append(self.closure(compiler.if_then_else(schema)))
        return parts

    # -- per-type keyword groups (None when the schema has none of them) -------------------

    def object_checks(self, schema: Mapping[str, Any]) -> str | None:
        present = _OBJECT_ALL.intersection(schema)
        if not present:
            return None
        if not present <= _OBJECT_WRITTEN:
            return self.group(self.compiler.object_checks(schema))
        lines: list[str] = []
        checks = 0  # how many parts the compiler's `_all` would join
        required = schema.get("required", [])
        if not isinstance(required, list):
            raise sc._Unsupported
        names = list(dict.fromkeys(required))  # `x.keys() >= frozenset(required)`
        if names:
            checks += 1
            if all(type(n) is str for n in names):
                lines.append(f"if {' or '.join(f'{self.constant(n)} not in x' for n in names)}: return False")
            else:
                lines.append(f"if not x.keys() >= {self.constant(frozenset(names))}: return False")
        if "minProperties" in schema:
            checks += 1
            lines.append(f"if not len(x) >= {self.constant(sc._count_value(schema['minProperties']))}: return False")
        if "maxProperties" in schema:
            checks += 1
            lines.append(f"if not len(x) <= {self.constant(sc._count_value(schema['maxProperties']))}: return False")
        if "properties" in schema or "additionalProperties" in schema:
            checks += 1
            lines += self.property_checks(schema)
        if not checks:
            return None
        if not lines:
            return _TRUE
        return f"{self.statements(lines, 'o')}({_V})"

    def property_checks(self, schema: Mapping[str, Any]) -> list[str]:
        """`_named_properties` as statements over ``x`` (none where the compiler's is `_true`)."""
        props = schema.get("properties", {})
        if not isinstance(props, Mapping):
            raise sc._Unsupported
        written = {k: self.schema(s) for k, s in props.items()}
        additional = schema.get("additionalProperties", True)
        if isinstance(additional, dict):
            extra = self.schema(additional)
        elif isinstance(additional, Mapping):
            raise sc._Unsupported
        else:
            extra = _TRUE if additional else _FALSE
        if extra == _TRUE:  # `_properties_only`: the checked members, in order
            lines = []
            for name, expression in written.items():
                if expression != _TRUE:
                    lines.append(f"value = x.get({self.constant(name)}, _MISSING)")
                    lines.append(f"if value is not _MISSING and not ({_over(expression, 'value')}): return False")
            return lines
        # `_closed_properties` and `_open_properties`: each member checked by its name's function.
        table = self.fresh("t")
        entries = ", ".join(f"{self.constant(k)}: {self.function(e, 'p')}" for k, e in written.items())
        self.tables.append(f"{table} = {{{entries}}}")
        lines = [f"get = {table}.get", "for name, value in x.items():", "    pred = get(name)"]
        if extra == _FALSE:
            return lines + ["    if pred is None or not pred(value): return False"]
        return lines + ["    if pred is None:", f"        if not ({_over(extra, 'value')}): return False",
                        "    elif not pred(value): return False"]

    def array_checks(self, schema: Mapping[str, Any]) -> str | None:
        present = _ARRAY_ALL.intersection(schema)
        if not present:
            return None
        if not present <= _ARRAY_WRITTEN:
            return self.group(self.compiler.array_checks(schema))
        parts: list[str] = []
        if "minItems" in schema:
            parts.append(f"len({_V}) >= {self.constant(sc._count_value(schema['minItems']))}")
        if "maxItems" in schema:
            parts.append(f"len({_V}) <= {self.constant(sc._count_value(schema['maxItems']))}")
        if "items" in schema:
            items = schema["items"]
            if items is not True and items is not False and not isinstance(items, Mapping):
                raise sc._Unsupported
            each = self.schema(items)
            if each == _FALSE:
                parts.append(f"len({_V}) <= 0")
            elif each != _TRUE:  # `_all_items`
                lines = ["for item in x:", f"    if not ({_over(each, 'item')}): return False"]
                parts.append(f"{self.statements(lines, 'i')}({_V})")
        return _conjunction(parts) if parts else None

    def string_checks(self, schema: Mapping[str, Any]) -> str | None:
        parts: list[str] = []
        low = sc._count_value(schema["minLength"]) if "minLength" in schema else None
        high = sc._count_value(schema["maxLength"]) if "maxLength" in schema else None
        if low is not None and high is not None:
            parts.append(f"{self.constant(low)} <= len({_V}) <= {self.constant(high)}")
        elif low is not None:
            parts.append(f"len({_V}) >= {self.constant(low)}")
        elif high is not None:
            parts.append(f"len({_V}) <= {self.constant(high)}")
        if "pattern" in schema:
            parts.append(f"{self.constant(sc._regex(schema['pattern']).search)}({_V}) is not None")
        return _conjunction(parts) if parts else None

    def number_checks(self, schema: Mapping[str, Any]) -> str | None:
        parts: list[str] = []
        if "minimum" in schema and "maximum" in schema:
            low, high = sc._number_value(schema["minimum"]), sc._number_value(schema["maximum"])
            parts.append(f"not {_V} < {self.constant(low)} and not {_V} > {self.constant(high)}")
        elif "minimum" in schema:
            parts.append(f"not {_V} < {self.constant(sc._number_value(schema['minimum']))}")
        elif "maximum" in schema:
            parts.append(f"not {_V} > {self.constant(sc._number_value(schema['maximum']))}")
        if "exclusiveMinimum" in schema:
            parts.append(f"not {_V} <= {self.constant(sc._number_value(schema['exclusiveMinimum']))}")
        if "exclusiveMaximum" in schema:
            parts.append(f"not {_V} >= {self.constant(sc._number_value(schema['exclusiveMaximum']))}")
        if "multipleOf" in schema:
            parts.append(self.closure(sc._multiple_of(sc._number_value(schema["multipleOf"]))))
        return _conjunction(parts) if parts else None

    # -- oneOf / anyOf, with discriminator dispatch ----------------------------------------

    def combined(self, schema: Mapping[str, Any], keyword: str) -> str:
        """`_Compiler.any_of` and `one_of`: the branches as functions, tried in order."""
        subschemas = sc._subschemas(schema[keyword])
        branches = [self.schema(s) for s in subschemas]
        if keyword == "anyOf" and _TRUE in branches:
            return _TRUE
        names = [self.function(b, "b") for b in branches]
        every = self.fresh("a")
        self.tables.append(f"{every} = {_tuple(names)}")
        if keyword == "anyOf":
            lines = ["for pred in candidates:", "    if pred(x): return True", "return False"]
        else:
            lines = ["found = False", "for pred in candidates:", "    if pred(x):",
                     "        if found: return False", "        found = True", "return found"]
        name = self.fresh("m")
        self.define(name, [f"if candidates is None: candidates = {every}", *lines], "x, candidates=None")
        dispatch = self.dispatch_table(schema, keyword, names)
        if dispatch is None:
            return f"{name}({_V})"
        prop, table, unpinned = dispatch
        lines = ["if isinstance(x, dict):", f"    value = x.get({prop}, _MISSING)", "    if value is not _MISSING:",
                 f"        return {name}(x, {table}.get(value, {unpinned}) if isinstance(value, str) else {unpinned})",
                 f"return {name}(x)"]
        dispatched = self.fresh("d")
        self.define(dispatched, lines)
        return f"{dispatched}({_V})"

    def dispatch_table(self, schema: Mapping[str, Any], keyword: str,
                       names: list[str]) -> tuple[str, str, str] | None:
        """`_Compiler.dispatch_table`: (the property's constant, the table's name, the unpinned branches' name)."""
        found = self.compiler.pins(schema, keyword)
        if found is None:
            return None
        prop, pins = found
        unpinned, table = self.fresh("u"), self.fresh("t")
        self.tables.append(f"{unpinned} = {_tuple([n for n, p in zip(names, pins) if p is sc._MISSING])}")
        entries = []
        for value in dict.fromkeys(p for p in pins if p is not sc._MISSING):
            chosen = _tuple([n for n, p in zip(names, pins) if p is sc._MISSING or p == value])
            entries.append(f"{self.constant(value)}: {chosen}")
        self.tables.append(f"{table} = {{{', '.join(entries)}}}")
        return self.constant(prop), table, unpinned


def generated(compiler: Any, pointer: str) -> Callable[[Any], bool] | None:
    """The predicate `compiler` compiled for `pointer` (after `compiler.ref` succeeded for it), as
    generated functions: the root's answer, True or False, whatever the closures would raise
    raised too; None if it cannot be written."""
    writer = _Writer(compiler)
    try:
        root = writer.ref("#" + pointer)
    except (sc._Unsupported, RecursionError):
        return None
    source = "".join(writer.functions) + "".join(f"{t}\n" for t in writer.tables) + \
        f"def _root(x):\n    return {_over(root, 'x')}\n"
    namespace = dict(writer.names)
    try:
        code = compile(source, f"<schema {pointer}>", "exec")
    except (SyntaxError, RecursionError, MemoryError):  # nested deeper than Python's parser takes
        return None
    exec(code, namespace)  # noqa: S102 - source written here
    return namespace["_root"]  # type: ignore[no-any-return]


def compiled_predicate(document: Mapping[str, Any], pointer: str, *,
                       format_checks: Mapping[str, Callable[[Any], bool]] | None = None) -> Callable[[Any], bool] | None:
    """`schema_compiler.compile_schema`'s predicate, as generated functions where they can be
    written (else its closures); None when the schema cannot be compiled at all."""
    found = sc.compiled(document, pointer, format_checks=format_checks)
    if found is None:
        return None
    compiler, closures = found
    written = generated(compiler, pointer)
    return sc.guarded(closures if written is None else written)

"""Validating served-Laya traffic against the two OpenAPI 3.1 specs.

`Spec.current()` describes what today's servers do, `Spec.target()` what a served Laya should
do. `violations(...)` checks one response (status, media type, documented headers, body) and
returns a list: empty means it conforms. Nothing here raises on bad traffic, because a test
wants every problem with an exchange at once; only an unusable spec file raises `SpecError`.

The whole document is one `referencing` resource, so `$ref`s resolve anywhere in it, and a
validator is compiled once per (operation, status, media type) and reused: resolving refs is
what makes naive OpenAPI validation slow.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import yaml

from pytest_laya.specs.answer_check import answer_violations
from pytest_laya.specs.bounded import LISTED, WORK_LIMIT, OverBudget, bounded_validator_class, budget
from pytest_laya.specs.schema_source import compiled_predicate
from pytest_laya.wire import pointer as json_pointer
from pytest_laya.wire.headers import lower_headers
from pytest_laya.wire.json_text import loads_strict

if TYPE_CHECKING:  # pragma: no cover
    from jsonschema import Draft202012Validator, FormatChecker
    from jsonschema.exceptions import ValidationError
    from referencing import Registry

__all__ = ["Spec", "Violation", "Violations", "SpecError", "Operation", "CURRENT_SPEC_FILE", "TARGET_SPEC_FILE"]

CURRENT_SPEC_FILE = "laya-systemone.current.openapi.yaml"
TARGET_SPEC_FILE = "laya-systemone.openapi.yaml"
_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
_JSON_MEDIA = re.compile(r"^application/(.+\+)?json$")
_SHORT = 120
_UNSEEN: Any = object()
_REMEMBERED_PATHS = 512

def _is_uri_reference(value: object) -> bool:
    # jsonschema checks uri-reference only when an optional package is installed; a check that
    # silently does nothing is worse than this small RFC 3986 one.
    if not isinstance(value, str):
        return True
    return re.fullmatch(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]*", value) is not None


# jsonschema (and referencing) are imported only when a response is rejected, a schema cannot be
# compiled, or a spec's schemas are checked: conforming traffic is judged by the compiled
# predicates alone, and replaying it never pays for importing them (some 60 ms a process).

@functools.cache
def _format_checker() -> FormatChecker:
    """The FormatChecker the validators use: jsonschema's, with the kit's uri-reference."""
    from jsonschema import FormatChecker

    checker = FormatChecker()
    checker.checks("uri-reference", raises=ValueError)(_is_uri_reference)
    return checker


class _FormatChecks(Mapping[str, Callable[[Any], bool]]):
    """Format name -> the check `_format_checker()` makes, for the compiled predicates; the kit's
    own uri-reference (the one format the bundled specs use) without importing jsonschema."""

    def __getitem__(self, name: str) -> Callable[[Any], bool]:
        if name == "uri-reference":
            return _is_uri_reference
        check: Callable[[Any], bool] = _format_checker().checkers[name][0]
        return check

    def __contains__(self, name: object) -> bool:
        return name == "uri-reference" or name in _format_checker().checkers

    def __iter__(self) -> Iterator[str]:
        return iter(_format_checker().checkers)

    def __len__(self) -> int:
        return len(_format_checker().checkers)

    def __bool__(self) -> bool:  # never empty; asking must not import jsonschema
        return True


_FORMAT_CHECKS = _FormatChecks()


class SpecError(Exception):
    """A spec file that cannot be used; the message names the file and the problem."""


@dataclass(frozen=True)
class Violation:
    """One way an exchange breaks the spec.

    `where` is a JSON pointer into the exchange seen as a document: ``/status``, ``/method``,
    ``/path``, ``/headers/<lower-case name>`` or ``/body/...``. `rule` is a pointer into the
    spec to the definition that was broken (``#/paths/...``), or the name of the answer rule
    (`pytest_laya.wire.answer_rules`, e.g. ``probabilities-sum``) when the request was given.
    """

    where: str
    expected: str
    actual: str
    rule: str = ""

    def __str__(self) -> str:
        if self.rule and not self.rule.startswith("#"):  # an answer rule, named
            return f"{self.where}: rule {self.rule}: expected {self.expected}, got {self.actual}"
        return f"{self.where}: expected {self.expected}, got {self.actual}"


class Violations(list[Violation]):
    """The violations listed for one check (at most `LISTED`), and how many more were found.

    `unlisted` counts the violations past the listed ones; `counted_all` is False when the
    validator's work budget ran out first, so `unlisted` is a lower bound.
    """

    unlisted: int = 0
    counted_all: bool = True

    @property
    def total(self) -> int:
        return len(self) + self.unlisted

    def add(self, more: list[Violation]) -> None:
        """Append `more` (another `Violations` keeps its counts), listing at most `LISTED` in all."""
        room = max(0, LISTED - len(self))
        self.extend(more[:room])
        self.unlisted += max(0, len(more) - room) + getattr(more, "unlisted", 0)
        self.counted_all = self.counted_all and getattr(more, "counted_all", True)

    def summary(self) -> str | None:
        """``... and 99,950 more`` (or ``... and at least ...``), None when every violation is listed."""
        if self.counted_all and not self.unlisted:
            return None
        if self.counted_all:
            return f"... and {self.unlisted:,} more"
        return (f"... and at least {self.unlisted:,} more (listing stopped after {WORK_LIMIT:,} schema checks; "
                f"the body breaks its schema in too many places to count)")


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    pointer: str
    definition: Mapping[str, Any]

    @property
    def status(self) -> str | None:
        """`x-status` (implemented | planned), where the spec gives one."""
        return self.definition.get("x-status")


def _short(value: Any) -> str:
    if isinstance(value, (Mapping, list)) and len(value) > _SHORT:
        return f"{'an object' if isinstance(value, Mapping) else 'an array'} of {len(value):,} members"
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= _SHORT else text[: _SHORT - 3] + "..."


#: The header values whose verdicts a spec keeps (`Spec._header_value_violations`): at most so
#: many, each at most so long (ids a client makes anew each call are judged each time anyway).
_HEADER_VERDICTS_MAX = 1024
_REMEMBERED_HEADER = 256

_LONGEST_POINTER = 200
_LONGEST_TEXT = 1000


def _short_pointer(where: str) -> str:
    """A pointer as a violation shows it: a 100 kB member name must not make a 100 kB line."""
    return where if len(where) <= _LONGEST_POINTER else where[: _LONGEST_POINTER - 3] + "..."


def _bounded(text: str) -> str:
    return text if len(text) <= _LONGEST_TEXT else text[: _LONGEST_TEXT - 3] + "..."


def _media_of(headers: Mapping[str, str]) -> str | None:
    value = headers.get("content-type")
    return value.split(";")[0].strip().lower() if value else None


def _expectation(error: ValidationError) -> tuple[list[Any], str, str]:
    """(extra path, expected, actual) for one leaf error, in words a test reader wants."""
    keyword, value, instance = error.validator, error.validator_value, error.instance
    if keyword == "required" and isinstance(instance, Mapping):
        # jsonschema raises one error per missing name, its message starting with the name's repr.
        absent = [name for name in value if name not in instance]
        missing = next((name for name in absent if error.message.startswith(repr(name))), absent[0] if absent else None)
        if missing is not None:
            return [missing], "a required property", "absent"
    if keyword == "additionalProperties" and isinstance(instance, Mapping):
        known = set(error.schema.get("properties", {}))
        extra = [k for k in instance if k not in known]
        shown = sorted(extra[:_SHORT]) if len(extra) <= _SHORT else f"{len(extra):,} names, {_short(extra[:5])} first"
        return [], f"no properties beyond {sorted(known)}", _bounded(f"extra {shown}")
    if keyword == "type":
        return [], f"type {value}", f"{type(instance).__name__} {_short(instance)}"
    words: dict[str, Callable[[], str]] = {
        "const": lambda: f"the value {_short(value)}",
        "enum": lambda: f"one of {_short(value)}",
        "minimum": lambda: f">= {value}",
        "maximum": lambda: f"<= {value}",
        "exclusiveMinimum": lambda: f"> {value}",
        "exclusiveMaximum": lambda: f"< {value}",
        "pattern": lambda: f"a string matching {value}",
        "minLength": lambda: f"at least {value} characters",
        "maxLength": lambda: f"at most {value} characters",
        "minItems": lambda: f"at least {value} items",
        "maxItems": lambda: f"at most {value} items",
        "minProperties": lambda: f"at least {value} properties",
        "maxProperties": lambda: f"at most {value} properties",
        "format": lambda: f"format {value}",
        "uniqueItems": lambda: "unique items",
        # jsonschema reports a oneOf that several variants match with no context.
        "oneOf": lambda: "exactly one variant to match, but more than one did",
    }
    expected = words[keyword]() if keyword in words else f"{keyword} {_short(value)}"
    return [], expected, _short(instance)


def _is_wrong_branch(errors: list[ValidationError]) -> bool:
    # A branch rejected by a const/enum on one of the object's own properties is a different
    # variant (type "choice" vs "score"), not the one the data meant.
    return any(e.validator in ("const", "enum") and len(e.relative_path) == 1 for e in errors)


def _leaves(error: ValidationError, base: list[Any]) -> list[tuple[list[Any], str, str]]:
    path = base + list(error.relative_path)
    if error.validator in ("oneOf", "anyOf") and error.context:
        branches: dict[Any, list[ValidationError]] = {}
        for sub in error.context:
            branches.setdefault(sub.relative_schema_path[0], []).append(sub)
        meant = [errs for errs in branches.values() if not _is_wrong_branch(errs)]
        if len(meant) == 1:
            return [leaf for sub in meant[0] for leaf in _leaves(sub, path)]
        discriminator = error.schema.get("discriminator") if isinstance(error.schema, Mapping) else None
        if isinstance(discriminator, Mapping) and isinstance(error.instance, Mapping):
            prop = discriminator.get("propertyName")
            # Without a mapping, OpenAPI's discriminator values are the variants' schema names.
            options = list(discriminator.get("mapping", {})) or [
                variant["$ref"].rsplit("/", 1)[-1] for variant in error.validator_value
                if isinstance(variant, Mapping) and isinstance(variant.get("$ref"), str)]
            expected = f"one of {_short(options)}" if options else "a documented variant"
            return [(path + [prop], expected, _short(error.instance[prop]) if prop in error.instance else "absent")]
        described = []
        for number, errs in enumerate(branches.values(), 1):
            leaves = [leaf for sub in errs for leaf in _leaves(sub, path)]
            described.append(f"[{number}] " + "; ".join(f"{json_pointer.pointer(p) or '/'} {e}" for p, e, _ in leaves[:3]))
        how_many = "exactly one" if error.validator == "oneOf" else "at least one"
        return [(path, f"{how_many} variant to match, but each failed: " + " | ".join(described), _short(error.instance))]
    extra, expected, actual = _expectation(error)
    return [(path + extra, expected, actual)]


class Spec:
    """One OpenAPI 3.1 document, ready to validate exchanges against."""

    def __init__(self, document: Mapping[str, Any], *, name: str, source: str = "<memory>",
                 check_schemas: bool = True) -> None:
        """`check_schemas=False` skips validating each of ``components/schemas`` against the JSON
        Schema meta-schema (the structure and every ``$ref`` are checked either way): the bundled
        documents, which the package's own tests hold to openapi-spec-validator, skip it, since it
        costs more than the rest of loading them at every start."""
        self.document = document
        self.name = name
        self.source = source
        _check_document(document, source, schemas=check_schemas)
        self._uri = f"urn:pytest-laya:spec:{quote(name)}"
        self._registry_made: Registry | None = None  # made on the first rejection (`_registry`)
        self._validators: dict[str, Draft202012Validator] = {}
        # Accept-path predicates (see schema_compiler); None where a schema cannot be compiled.
        self._predicates: dict[str, Callable[[Any], bool] | None] = {}
        self._lock = threading.Lock()
        self._routes = _routes(document)
        # What a lookup found, by path, (operation, status) and response: the document never changes.
        self._routed: dict[str, dict[str, Operation] | None] = {}
        self._responses: dict[tuple[str, int], tuple[Mapping[str, Any], str] | None] = {}
        self._header_plans: dict[str, list[tuple[str, str, str, str, bool, bool]]] = {}
        # Header values' verdicts (`_header_value_violations`), bounded.
        self._header_verdicts: dict[tuple[str, str, str], tuple[Violation, ...]] = {}

    # -- construction -------------------------------------------------------------------

    @classmethod
    def from_path(cls, path: str | Path, *, name: str | None = None, check_schemas: bool = True) -> Spec:
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise SpecError(f"cannot read spec {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise SpecError(f"spec {path} is not UTF-8 text: {exc}") from None
        try:
            document = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except yaml.YAMLError as exc:
            raise SpecError(f"spec {path} is not valid YAML: {exc}") from None
        return cls(document, name=name or path.name.split(".openapi")[0], source=str(path), check_schemas=check_schemas)

    @classmethod
    def current(cls) -> Spec:
        """What today's servers do (laya-serve 0.4.15 and 0.3.20, system1-omni's worker, omni-jev)."""
        return _bundled(CURRENT_SPEC_FILE, "current")

    @classmethod
    def target(cls) -> Spec:
        """What a served Laya should do; the reference server implements it."""
        return _bundled(TARGET_SPEC_FILE, "target")

    def __repr__(self) -> str:
        return f"Spec({self.name!r}, source={self.source!r})"

    # -- lookup -------------------------------------------------------------------------

    def operations(self) -> list[Operation]:
        return [op for _, ops in self._routes for op in ops.values()]

    def operation(self, method: str, path: str) -> Operation | None:
        found = self._route(path)
        return None if found is None else found.get(method.lower())

    def _route(self, path: str) -> dict[str, Operation] | None:
        path = path.split("?", 1)[0].split("#", 1)[0] or "/"
        found: dict[str, Operation] | None = self._routed.get(path, _UNSEEN)
        if found is _UNSEEN:
            found = next((ops for pattern, ops in self._routes if pattern.fullmatch(path)), None)
            if len(self._routed) >= _REMEMBERED_PATHS:  # paths with ids in them are many: stay bounded
                self._routed.clear()
            self._routed[path] = found
        return found

    def _locate(self, method: str, path: str) -> tuple[Operation | None, list[Violation]]:
        ops = self._route(path)
        if ops is None:
            known = sorted({op.path for op in self.operations()})
            return None, [Violation("/path", f"one of the paths of the {self.name} spec {known}", _short(path))]
        op = ops.get(method.lower())
        if op is None:
            return None, [Violation("/method", f"one of {sorted(m.upper() for m in ops)} for {path}", _short(method.upper()))]
        return op, []

    # -- validation ---------------------------------------------------------------------

    def violations(
        self,
        method: str,
        path: str,
        status: int,
        headers: Mapping[str, str] | Iterable[tuple[str, str]] | None,
        body: bytes | str | Any,
        *,
        request_body: bytes | str | Any = None,
    ) -> Violations:
        """Every way this response breaks the spec; empty when it conforms.

        `body` may be the raw bytes, decoded text, or already-parsed JSON. Given the request's
        body (`request_body`), a decision's answers are held to the answer rules too
        (`specs/answer_check.py`). At most `LISTED` violations are listed;
        `Violations.unlisted` counts the rest (`summary()` says so).
        """
        return self.judge(method, path, status, headers, body, request_body=request_body)[0]

    def judge(
        self,
        method: str,
        path: str,
        status: int,
        headers: Mapping[str, str] | Iterable[tuple[str, str]] | None,
        body: bytes | str | Any,
        *,
        request_body: bytes | str | Any = None,
    ) -> tuple[Violations, list[str]]:
        """(`violations(...)`, `documented_headers(...)`) of one response, from one lookup."""
        problems = Violations()
        op, found = self._locate(method, path)
        if op is None:
            # A 404 to a path the spec lacks, a 405 to a method its path does not take: held to
            # the spec's own answer for them (`x-unrouted`), else the route is the violation.
            unrouted = self._unrouted(status, path_known=found[0].where == "/method")
            if unrouted is None:
                problems.add(found)
                return problems, []
            response, pointer = unrouted
        else:
            documented_response = self._response(op, status)
            if documented_response is None:
                documented = sorted(str(k) for k in op.definition.get("responses", {}))
                problems.append(Violation("/status", f"one of {documented} for {method.upper()} {op.path}", str(status),
                                          rule=f"#{op.pointer}/responses"))
                return problems, []
            response, pointer = documented_response
        lowered = lower_headers(headers)
        problems.add(self._header_violations(response, pointer, lowered))
        parsed: list[Any] = []
        content = self._content_violations(response.get("content"), f"{pointer}/content", lowered, body,
                                           where="/body", kind="response", parsed=parsed)
        problems.add(content)
        if request_body is not None and parsed and op is not None:
            problems.add(self._rule_violations(op, status, parsed[0], request_body, content))
        return problems, [lower for _name, lower, *_ in self._header_plan(response, pointer)]

    def header_check(self, method: str, path: str, status: int, name: str) -> Callable[[str], list[Violation]] | None:
        """The violations `judge` finds in one response header's value alone, as a function of the
        value (its place in the spec looked up once). `judge` reads a documented header other than
        Content-Type through this check only, so two responses differing only in such a header's
        value, each conforming here, get the same verdict. None when the spec documents no response
        for this status (or `name` is Content-Type, which the body's check reads)."""
        lower = name.lower()
        if lower == "content-type":
            return None
        op, found = self._locate(method, path)
        documented = self._response(op, status) if op is not None else \
            self._unrouted(status, path_known=found[0].where == "/method")
        if documented is None:
            return None
        response, pointer = documented
        for _name, header, where, header_pointer, _required, has_schema in self._header_plan(response, pointer):
            if header == lower:
                if not has_schema:
                    break
                # Through judge's own memo: a value checked here (an echoed id) is not checked again there.
                return lambda value: list(self._header_value_violations(header_pointer, value, where))
        return lambda value: []  # not documented, or no schema: judge reads no value of it

    def describes(self, method: str, path: str, status: int) -> bool:
        """Whether the spec says what this response should be: its operation's, or (a 404 to an
        unknown path, a 405 to another method of a known one) its `x-unrouted` answer."""
        op, found = self._locate(method, path)
        return op is not None or self._unrouted(status, path_known=found[0].where == "/method") is not None

    def _unrouted(self, status: int, *, path_known: bool) -> tuple[Mapping[str, Any], str] | None:
        """The `x-unrouted` response for `status` (404 for an unknown path, 405 for another method
        of a known one), with its pointer; None when the spec documents none."""
        if status != (405 if path_known else 404):
            return None
        unrouted = self.document.get("x-unrouted")
        responses = unrouted.get("responses") if isinstance(unrouted, Mapping) else None
        if not isinstance(responses, Mapping) or str(status) not in responses:
            return None
        return self._deref(responses[str(status)], f"/x-unrouted/responses/{status}")

    def _rule_violations(self, op: Operation, status: int, body: Any, request_body: Any,
                         schema_faults: list[Violation]) -> Violations:
        faults = [v.where for v in schema_faults]
        key = (op.path, status, request_body, faults)
        remembered = _last_rules
        if remembered[0] is not None and remembered[0] is _last_parsed[1] and body is remembered[0] \
                and remembered[1] == key:
            broken = remembered[2]  # the same exchange, checked against the other spec a moment ago
        else:
            broken = list(answer_violations(op.path, status, body, request_body, faults))
            if body is _last_parsed[1] and isinstance(request_body, (bytes, str)):
                _remember_rules(body, key, broken)
        found = Violations()
        for where, expected, actual, rule in broken:
            if len(found) < LISTED:
                found.append(Violation(_short_pointer(where), _bounded(expected), _bounded(actual), rule=rule))
            else:
                found.unlisted += 1
        return found

    def request_violations(self, method: str, path: str, body: bytes | str | Any,
                           headers: Mapping[str, str] | None = None) -> list[Violation]:
        """Every way a request body breaks the spec (unknown routes included)."""
        op, found = self._locate(method, path)
        if op is None:
            return found
        if "requestBody" not in op.definition:
            empty = body in (None, b"", "")
            return [] if empty else [Violation("/body", f"no body for {method.upper()} {op.path}", "a body")]
        request, pointer = self._deref(op.definition["requestBody"], f"{op.pointer}/requestBody")
        lowered = lower_headers(headers) if headers else {}
        return self._content_violations(request.get("content"), f"{pointer}/content", lowered, body,
                                        where="/body", kind="request", default_media=True)

    def schema_violations(self, ref: str, instance: Any, *, where: str = "") -> list[Violation]:
        """Violations of any schema in the document, named by ref (``#/components/schemas/Question``).

        `where` prefixes each violation's pointer, e.g. ``/questions/q1`` for one question of a
        request, so a server can say exactly which part of a request is wrong.
        """
        if not ref.startswith("#"):
            raise ValueError(f"ref must be a local JSON pointer such as '#/components/schemas/Question', got {ref!r}")
        _resolvepointer(self.document, ref[1:], self.source)
        return self._schema_violations(ref[1:], instance, where)

    def documented_headers(self, method: str, path: str, status: int) -> list[str]:
        """Lower-case names of the headers the spec documents for this response (none if undocumented)."""
        op, found = self._locate(method, path)
        if op is None:
            documented_response = self._unrouted(status, path_known=found[0].where == "/method")
        else:
            documented_response = self._response(op, status)
        if documented_response is None:
            return []
        return [lower for _name, lower, *_ in self._header_plan(*documented_response)]

    def is_valid(self, method: str, path: str, status: int, headers: Any, body: Any) -> bool:
        return not self.violations(method, path, status, headers, body)

    # -- internals ----------------------------------------------------------------------

    def _deref(self, node: Any, pointer: str) -> tuple[Mapping[str, Any], str]:
        seen = set()
        while isinstance(node, Mapping) and "$ref" in node:
            ref = node["$ref"]
            if ref in seen:
                raise SpecError(f"spec {self.source}: $ref loop at {ref}")
            seen.add(ref)
            pointer = ref[1:]
            node = _resolvepointer(self.document, pointer, self.source)
        return node, pointer

    @property
    def _registry(self) -> Registry:
        """The whole document as one `referencing` resource, so `$ref`s resolve anywhere in it."""
        registry = self._registry_made
        if registry is None:
            from referencing import Registry, Resource
            from referencing.jsonschema import DRAFT202012

            resource = Resource.from_contents(self.document, default_specification=DRAFT202012)
            registry = self._registry_made = Registry().with_resource(self._uri, resource).crawl()
        return registry

    def _validator(self, pointer: str) -> Draft202012Validator:
        validator = self._validators.get(pointer)
        if validator is None:
            with self._lock:
                validator = self._validators.get(pointer)
                if validator is None:
                    validator = bounded_validator_class()(
                        {"$ref": f"{self._uri}#{pointer}"}, registry=self._registry, format_checker=_format_checker()
                    )
                    self._validators[pointer] = validator
        return validator

    def _accepts(self, pointer: str, instance: Any) -> bool:
        if pointer not in self._predicates:
            self._predicates[pointer] = compiled_predicate(self.document, pointer, format_checks=_FORMAT_CHECKS)
        predicate = self._predicates[pointer]
        return predicate is not None and predicate(instance)

    def _schema_violations(self, pointer: str, instance: Any, where: str) -> list[Violation]:
        # Conforming traffic is the common case: the compiled predicate answers it at a small
        # fraction of jsonschema's cost. Anything it does not accept goes through jsonschema,
        # which stays the authority and says precisely what is wrong.
        found = Violations()
        if self._accepts(pointer, instance):
            return found
        validator = self._validator(pointer)
        listed: list[tuple[list[str], Violation]] = []
        # The first `LISTED` violations jsonschema finds, ordered by place; the rest counted while
        # the work budget lasts (`specs/bounded.py`): a hostile body costs bounded time and text.
        try:
            with budget():
                for error in validator.iter_errors(instance):
                    for path, expected, actual in _leaves(error, []):
                        if len(listed) < LISTED:
                            shown_where = _short_pointer(where + json_pointer.pointer(path))
                            listed.append((list(map(str, error.path)),
                                           Violation(shown_where, _bounded(expected), _bounded(actual), rule="#" + pointer)))
                        else:
                            found.unlisted += 1
        except OverBudget:
            found.counted_all = False
            if not listed:
                listed.append(([], Violation(_short_pointer(where), "an instance its schema accepts",
                                             f"one that breaks it in more places than {WORK_LIMIT:,} checks could list",
                                             rule="#" + pointer)))
        found.extend(violation for _path, violation in sorted(listed, key=lambda item: item[0]))
        return found

    def _response(self, op: Operation, status: int) -> tuple[Mapping[str, Any], str] | None:
        """(the response definition documenting `status` for `op`, its pointer); None if none does.
        Worked out once per operation and status."""
        found: tuple[Mapping[str, Any], str] | None = self._responses.get((op.pointer, status), _UNSEEN)
        if found is _UNSEEN:
            responses = op.definition.get("responses", {})
            key = next((k for k in (str(status), f"{str(status)[0]}XX", "default") if k in responses), None)
            found = None if key is None else self._deref(
                responses[key], f"{op.pointer}/responses/{json_pointer.escape(key)}")
            self._responses[(op.pointer, status)] = found
        return found

    def _header_plan(self, response: Mapping[str, Any], pointer: str) -> list[tuple[str, str, str, str, bool, bool]]:
        """The headers `response` documents but Content-Type: (name, lower-case name, where a
        violation points, the definition's pointer, required, has a schema); worked out once."""
        plan = self._header_plans.get(pointer)
        if plan is None:
            plan = []
            for name, definition in (response.get("headers") or {}).items():
                if name.lower() == "content-type":
                    continue
                header, header_pointer = self._deref(definition, f"{pointer}/headers/{json_pointer.escape(name)}")
                plan.append((name, name.lower(), f"/headers/{json_pointer.escape(name.lower())}", header_pointer,
                             bool(header.get("required")), "schema" in header))
            self._header_plans[pointer] = plan
        return plan

    def _header_violations(self, response: Mapping[str, Any], pointer: str, headers: Mapping[str, str]) -> list[Violation]:
        problems = []
        for name, lower, where, header_pointer, required, has_schema in self._header_plan(response, pointer):
            value = headers.get(lower)
            if value is None:
                if required:
                    problems.append(Violation(where, f"header {name} (required)", "absent", rule="#" + header_pointer))
                continue
            if has_schema:
                problems += self._header_value_violations(header_pointer, value, where)
        return problems

    def _header_value_violations(self, header_pointer: str, value: str, where: str) -> tuple[Violation, ...]:
        """A header value's violations of its schema; a value judged before (a replayed one, a
        server's fixed one) is not judged again: the verdict is a function of these three."""
        key = (header_pointer, where, value)
        found = self._header_verdicts.get(key)
        if found is None:
            found = tuple(self._schema_violations(f"{header_pointer}/schema", value, where))
            if len(value) <= _REMEMBERED_HEADER:
                if len(self._header_verdicts) >= _HEADER_VERDICTS_MAX:
                    self._header_verdicts.clear()
                self._header_verdicts[key] = found
        return found

    def _content_violations(
        self,
        content: Mapping[str, Any] | None,
        pointer: str,
        headers: Mapping[str, str],
        body: Any,
        *,
        where: str,
        kind: str,
        default_media: bool = False,
        parsed: list[Any] | None = None,
    ) -> list[Violation]:
        empty = body is None or (isinstance(body, (bytes, bytearray, str)) and len(body) == 0)
        if not content:
            if empty:
                return []
            shown = body if not isinstance(body, bytes) else body[:_SHORT].decode("utf-8", "replace")
            return [Violation(where, f"no {kind} body", _short(shown), rule="#" + pointer)]
        media = _media_of(headers)
        if media is None:
            media = _assumed_media(content, body, default_media)
            if media is None:
                return [Violation("/headers/content-type", f"one of {sorted(content)}", "absent", rule="#" + pointer)]
        chosen = _match_media(media, content)
        if chosen is None:
            return [Violation("/headers/content-type", f"one of {sorted(content)}", _short(media), rule="#" + pointer)]
        media_pointer = f"{pointer}/{json_pointer.escape(chosen)}"
        definition = content[chosen]
        if empty:
            return [Violation(where, f"a body of media type {chosen}", "an empty body", rule="#" + media_pointer)]
        instance, unreadable = _read_body(body, chosen, media, where, media_pointer)
        if unreadable is not None:
            return [unreadable]
        if parsed is not None:
            parsed.append(instance)
        if "schema" not in definition:
            return []
        return self._schema_violations(f"{media_pointer}/schema", instance, where)


def _assumed_media(content: Mapping[str, Any], body: Any, default_media: bool) -> str | None:
    """The media type of a body that came without a Content-Type; None when it must name one."""
    if default_media and len(content) == 1:
        return next(iter(content))
    if isinstance(body, (bytes, bytearray, str)):
        return None
    # Parsed JSON without headers: the caller vouches for a JSON media type.
    return next((m for m in content if _JSON_MEDIA.match(m)), next(iter(content)))


def _read_body(body: Any, chosen: str, media: str, where: str, media_pointer: str) -> tuple[Any, Violation | None]:
    """(the instance the body's schema judges, None) or (None, why the body cannot be read): a
    JSON body parsed (strictly, once per bytes object), other bytes as text, parsed values as given."""
    # A range (application/*, */*) documents a JSON body too when the body says it is JSON.
    json_media = _JSON_MEDIA.match(chosen) is not None or _JSON_MEDIA.match(media) is not None
    parsed_before = _last_parsed
    if json_media and type(body) is bytes and parsed_before[0] is body:
        return parsed_before[1], None  # the same body, checked against the other spec a moment ago
    instance: Any = body
    if isinstance(body, (bytes, bytearray)):
        try:
            instance = bytes(body).decode("utf-8")
        except UnicodeDecodeError as exc:
            return None, Violation(where, "UTF-8 text", f"undecodable bytes ({exc.reason} at {exc.start})",
                                   rule="#" + media_pointer)
    if json_media and isinstance(instance, str):
        try:
            instance = loads_strict(instance)
        except ValueError as exc:
            return None, Violation(where, f"a valid JSON {chosen} body", f"invalid JSON ({exc})", rule="#" + media_pointer)
        except RecursionError:  # a body nested thousands deep: a violation, never a crash
            return None, Violation(where, f"a valid JSON {chosen} body", "JSON nested too deeply to parse",
                                   rule="#" + media_pointer)
        if type(body) is bytes:
            _remember_parsed(body, instance)
    return instance, None


#: The last JSON body parsed, by the very bytes object it came from (bytes are immutable): an
#: exchange is checked against both specs, and its body is parsed once. Validation never changes
#: the parsed value.
_last_parsed: tuple[Any, Any] = (None, None)


def _remember_parsed(body: bytes, parsed: Any) -> None:
    global _last_parsed
    _last_parsed = (body, parsed)


#: The answer rules' verdict on the last parsed body (`_last_parsed`), by the operation's path, the
#: status, the request's bytes and the schema's faults: all the rules read (`answer_violations` is
#: a function of them), so the other spec's check of the same exchange reuses it.
_last_rules: tuple[Any, Any, list[Any]] = (None, None, [])


def _remember_rules(parsed: Any, key: Any, broken: list[Any]) -> None:
    global _last_rules
    _last_rules = (parsed, key, broken)


def _match_media(media: str, content: Mapping[str, Any]) -> str | None:
    if media in content:
        return media
    major = media.split("/")[0]
    for candidate in (f"{major}/*", "*/*"):
        if candidate in content:
            return candidate
    return None


def _resolvepointer(document: Any, pointer: str, source: str) -> Any:
    node = document
    for token in pointer.lstrip("/").split("/") if pointer not in ("", "/") else []:
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            raise SpecError(f"spec {source}: $ref #{pointer} points to nothing")
    return node


def _routes(document: Mapping[str, Any]) -> list[tuple[re.Pattern[str], dict[str, Operation]]]:
    routes = []
    # Literal paths before templated ones, as OpenAPI asks.
    for path in sorted(document["paths"], key=lambda p: ("{" in p, p)):
        item = document["paths"][path]
        pattern = re.compile(re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(path)))
        ops = {
            method: Operation(method=method, path=path, pointer=f"/paths/{json_pointer.escape(path)}/{method}",
                              definition=item[method])
            for method in _METHODS
            if isinstance(item, Mapping) and isinstance(item.get(method), Mapping)
        }
        routes.append((pattern, ops))
    return routes


def _walk_refs(node: Any, trail: list[str]) -> Iterable[tuple[str, str]]:
    if isinstance(node, Mapping):
        ref = node.get("$ref")
        if isinstance(ref, str):
            yield ref, json_pointer.pointer(trail)
        for key, value in node.items():
            yield from _walk_refs(value, trail + [key])
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk_refs(value, trail + [str(i)])


def _check_document(document: Any, source: str, *, schemas: bool = True) -> None:
    """Fail now, naming the file, rather than later with a traceback from deep in a validator."""
    if not isinstance(document, Mapping):
        raise SpecError(f"spec {source}: expected an OpenAPI document (a mapping), got {type(document).__name__}")
    version = document.get("openapi")
    if not isinstance(version, str) or not version.startswith("3.1"):
        raise SpecError(f"spec {source}: expected 'openapi: 3.1.x', got {version!r}")
    if not isinstance(document.get("paths"), Mapping) or not document["paths"]:
        raise SpecError(f"spec {source}: no 'paths'")
    for path, item in document["paths"].items():
        if not isinstance(item, Mapping):
            raise SpecError(f"spec {source}: paths[{path!r}] must be a mapping")
        for method in _METHODS:
            op = item.get(method)
            if op is not None and not isinstance(op.get("responses") if isinstance(op, Mapping) else None, Mapping):
                raise SpecError(f"spec {source}: {method.upper()} {path} has no 'responses' mapping")
    for ref, at in _walk_refs(document, []):
        if not ref.startswith("#"):
            raise SpecError(f"spec {source}: only local $refs are supported, found {ref!r} at {at}")
        _resolvepointer(document, ref[1:], source)
    if not schemas:
        return
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    for name, schema in (document.get("components", {}).get("schemas") or {}).items():
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            raise SpecError(f"spec {source}: components/schemas/{name} is not a valid JSON Schema: {exc.message}") from None


def _bundled_path(filename: str) -> Path:
    # In a wheel the documents ship inside this package (pytest_laya/specs/documents); in a
    # source checkout they are the top-level specs/ directory.
    packaged = importlib.resources.files("pytest_laya.specs") / "documents" / filename
    if packaged.is_file():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[2] / "specs" / filename


@functools.cache
def _bundled(filename: str, name: str) -> Spec:
    return Spec.from_path(_bundled_path(filename), name=name, check_schemas=False)

"""Listing a rejected instance's violations with bounded work and bounded text.

jsonschema names every error, and a hostile body can hold 100,000 of them: listed in full they
took 20 s and 7 MB of text. Here the listing stops at `LISTED` violations and counts the rest
while a work budget lasts (`WORK_LIMIT` keyword checks); past it the count is a lower bound.
A ``oneOf`` with an OpenAPI ``discriminator`` is walked into the one variant the instance names
(jsonschema would list every variant's errors before yielding one), so the first violations come
at once. Nothing here changes which instances are valid: only how their errors are listed.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError

__all__ = ["LISTED", "WORK_LIMIT", "OverBudget", "budget", "bounded_validator_class"]

#: The violations listed for one exchange; the others are counted.
LISTED = 50
#: Keyword checks one listing may make: a fraction of a second of jsonschema's work.
WORK_LIMIT = 10_000


class OverBudget(Exception):
    """The listing spent its work budget."""


class _Budget(threading.local):
    left: int | None = None


_BUDGET = _Budget()


class budget:
    """``with budget(n):`` lets the validators below make `n` keyword checks on this thread."""

    def __init__(self, checks: int = WORK_LIMIT) -> None:
        self.checks = checks

    def __enter__(self) -> budget:
        _BUDGET.left = self.checks
        return self

    def __exit__(self, *exc: object) -> None:
        _BUDGET.left = None


def _spend() -> None:
    left = _BUDGET.left
    if left is not None:
        if left <= 0:
            raise OverBudget
        _BUDGET.left = left - 1


def _counted(keyword: Any) -> Any:
    def check(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        _spend()
        return keyword(validator, value, instance, schema)

    return check


def _variant(one_of: list[Any], schema: Mapping[str, Any], instance: Any) -> int | None:
    """The index of the variant a discriminator names for `instance`, if it names exactly one."""
    discriminator = schema.get("discriminator")
    if not isinstance(discriminator, Mapping) or not isinstance(instance, Mapping):
        return None
    value = instance.get(discriminator.get("propertyName"))
    if not isinstance(value, str):
        return None
    mapping = discriminator.get("mapping") or {}
    target = mapping.get(value) if isinstance(mapping, Mapping) else None
    refs = [variant.get("$ref") if isinstance(variant, Mapping) else None for variant in one_of]
    named = [i for i, ref in enumerate(refs)
             if isinstance(ref, str) and (ref == target if target is not None else ref.rsplit("/", 1)[-1] == value)]
    return named[0] if len(named) == 1 else None


def _discriminated_one_of(standard: Any) -> Any:
    def one_of(validator: Any, value: list[Any], instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
        _spend()
        index = _variant(value, schema, instance)
        if index is not None:
            found = False
            for error in validator.descend(instance, value[index], schema_path=index):
                found = True
                yield error
            if found:
                return
        yield from standard(validator, value, instance, schema)

    return one_of


@functools.cache
def bounded_validator_class() -> type[Draft202012Validator]:
    """Draft 2020-12 with every keyword counted against `budget` and discriminated ``oneOf``s walked."""
    from jsonschema import Draft202012Validator
    from jsonschema.validators import extend

    keywords = {name: _counted(check) for name, check in Draft202012Validator.VALIDATORS.items()}
    keywords["oneOf"] = _discriminated_one_of(Draft202012Validator.VALIDATORS["oneOf"])
    cls: type[Draft202012Validator] = extend(Draft202012Validator, validators=keywords)
    return cls

"""The meta-test behind the broken-twin tables: every check of a contract has a twin, and no more.

A contract's checks are read from the contract itself (a class's ``test_`` methods, a suite
module's ``test_`` functions), so a check added without a twin is named, as is a table entry
for a check that no longer exists.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import ModuleType
from typing import Any

__all__ = ["checks_of", "coverage_problems"]


def checks_of(contract: type | ModuleType) -> list[str]:
    """The names of the checks of `contract`: its ``test_`` methods or functions."""
    names = dir(contract) if isinstance(contract, type) else vars(contract)
    return sorted(name for name in names if name.startswith("test_") and callable(getattr(contract, name)))


def coverage_problems(contract: str, checks: Iterable[str], table: str, twins: Mapping[str, Sequence[Any]],
                      measured: Iterable[str] = ()) -> list[str]:
    """Why `twins` (and the measurement-only `measured`) do not cover exactly the `checks` of `contract`."""
    checks, measured = set(checks), set(measured)
    problems = []
    lacking = sorted(checks - set(twins) - measured)
    if lacking:
        problems.append(f"{contract} has checks without a broken twin: {', '.join(lacking)}. Add a broken "
                        f"implementation for each to {table}, with the words its failure must say")
    stale = sorted((set(twins) | measured) - checks)
    if stale:
        problems.append(f"{table} names checks {contract} does not have: {', '.join(stale)}")
    problems += [f"{table}: {check} has an empty list of twins" for check in sorted(twins) if not twins[check]]
    problems += [f"{table}: {check} is both twinned and measurement-only" for check in sorted(set(twins) & measured)]
    unknown = sorted({also for twin_list in twins.values() for twin in twin_list for also in twin.also_fails} - checks)
    if unknown:
        problems.append(f"{table}: also_fails names checks {contract} does not have: {', '.join(unknown)}")
    return problems

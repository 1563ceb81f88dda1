"""Errors raised on a test's Laya route that the code under test caught (a miss, a violation,
a blocked host): a service that logs and carries on, or another process behind `laya_proxy`.

A test that passes anyway fails with the first of them; a test that failed for another reason
(a subprocess's exit status, an assertion on what the service did) shows them beside its own
failure, so the reason is never lost.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import pytest

from pytest_laya.plugin.markers import marker_options

__all__ = ["SECTION", "caught_section", "fail_swallowed"]

#: The title of the report section a failed test's caught errors are shown under.
SECTION = "Laya errors the code under test caught"


class Route(Protocol):
    """A test's route (`pytest_laya.plugin.routes.TestRoute`), as far as its caught errors go."""

    def swallowed(self) -> list[BaseException]: ...


def _described(errors: list[BaseException]) -> str:
    return "\n".join(f"{type(error).__name__}: {error}" for error in errors)


def fail_swallowed(node: pytest.Item, route: Route) -> None:
    """Fail the test with the first error raised on `route` that its code caught, unless its
    marker says ``caught_errors='ignore'``. Called when the test's body returns, so the test
    itself fails, and again at teardown for what came later."""
    if marker_options(node).get("caught_errors", "fail") != "fail":
        return
    swallowed = route.swallowed()
    if not swallowed:
        return
    more = f"\n(and {len(swallowed) - 1} more error(s) on the same route)" if len(swallowed) > 1 else ""
    pytest.fail(f"{_described(swallowed[:1])}\nThe code under test caught this error, so the test went on; "
                f"it fails here all the same (a test that asserts the error itself can say "
                f"@pytest.mark.laya(caught_errors='ignore')).{more}", pytrace=False)


def caught_section(routes: Sequence[Route], raised: BaseException | None) -> str | None:
    """What a failed test's routes raised, other than the error it failed with; None if nothing."""
    errors = [error for route in routes for error in route.swallowed() if error is not raised]
    return _described(errors) if errors else None

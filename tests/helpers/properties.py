"""How many examples the suite's hypothesis properties draw.

Each property names its count for every ordinary run, CI's included: enough to cover its cases in
a few seconds at most. ``LAYA_PROPERTIES=thorough`` draws ten times as many (docs/testing.md), for
a long run now and then, or after changing what a property covers. Each run draws anew
(hypothesis's seed is random), so ordinary runs add up to more than any one of them.
tests/conftest.py imports this module, so a misspelt value stops the run at its start.
"""

from __future__ import annotations

import os

PROFILES = {"": 1, "thorough": 10}


def _factor() -> int:
    name = os.environ.get("LAYA_PROPERTIES", "")
    if name not in PROFILES:
        raise RuntimeError(f"LAYA_PROPERTIES={name!r}: set it to 'thorough', or leave it unset for the ordinary counts")
    return PROFILES[name]


FACTOR = _factor()


def example_count(count: int) -> int:
    """`count`, or ten times it under ``LAYA_PROPERTIES=thorough``."""
    return count * FACTOR

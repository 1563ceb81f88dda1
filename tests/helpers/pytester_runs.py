"""Running a downstream-style suite with pytester, as the plugin's tests do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

CANARY = "sk-plugin-canary-5150"
TEST_DECIDE = """
def test_refund(laya_client):
    decision = laya_client.decide("I was charged twice. Refund me.", {
        "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
        "team": {"type": "choice", "instructions": "Which team?", "criteria": {"billing": "money", "tech": "bugs"}},
    })
    assert 0 <= decision["refund"].p <= 1
    assert decision["team"].key in ("billing", "tech")
"""


#: For an inner run in new processes (``runpytest_subprocess``, ``-n 2``): plugins the inner suites
#: never use. schemathesis's and hypothesis's pytest plugins import both libraries, ~2 s of CPU in
#: every process started (three for an ``-n 2`` run); disabled, an inner run starts in ~1 s.
WITHOUT_UNUSED_PLUGINS = ("-p", "no:schemathesis", "-p", "no:hypothesispytest")


def run(pytester: Any, *args: str) -> Any:
    """One in-process pytest run of the pytester project (no asyncio plugin, no cache)."""
    return pytester.runpytest("-p", "no:asyncio", "-p", "no:cacheprovider", *args)


def cassette_data(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def report_of(path: Path) -> Any:
    return json.loads(path.read_text())

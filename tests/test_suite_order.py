"""The suite runs in a shuffled order, so a test that depends on another's leftovers fails in CI.

A test once asserted that the shared laya-serve had loaded only `tiny`: true only when no earlier
test had asked it for `english` (tests/integration/test_client_laya_serve_live.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_run_of_the_suite_is_shuffled(pytestconfig):
    project = (ROOT / "pyproject.toml").read_text(encoding="utf-8")  # (tomllib is 3.11+; the kit runs on 3.10)
    dev = project.split("\ndev = [", 1)[1].split("\n]", 1)[0]
    assert re.search(r'^\s*"pytest-random-order>=', dev, flags=re.M)
    [addopts] = re.findall(r'^addopts = "(.*)"$', project, flags=re.M)
    assert "--random-order-bucket=module" in addopts.split()
    if pytestconfig.getoption("random_order_bucket", None) is None:  # pragma: no cover - run without the dev extra
        pytest.fail("pytest-random-order is not installed: install the dev extra")

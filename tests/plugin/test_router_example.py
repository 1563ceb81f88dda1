"""examples/router: the five router tests written with one `laya_server` handle pass offline, with
no real wait, beside the same five written with respx in the same run, with the network blocked
or not."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers.pytester_runs import run

pytest_plugins = ["pytester"]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "router"


@pytest.fixture
def router(pytester):
    pytest.importorskip("respx")
    shutil.copytree(EXAMPLE, pytester.path, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    return pytester


@pytest.mark.parametrize("blocked", [[], ["--laya-block-network"]], ids=["open", "blocked"])
def test_the_router_example_passes_beside_its_respx_twin(router, blocked):
    result = run(router, *blocked)
    result.assert_outcomes(passed=10)

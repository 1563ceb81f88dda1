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


def test_each_of_the_slowest_tests_exists_and_goes_first():
    # A renamed slow test would silently drop out of SLOWEST_FIRST and could end the run alone again.
    import importlib
    from types import SimpleNamespace

    from tests.conftest import SLOWEST_FIRST, pytest_collection_modifyitems

    for name in SLOWEST_FIRST:
        path, _, function = name.partition("::")
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        assert callable(getattr(module, function, None)), f"{name} names no test: update SLOWEST_FIRST in tests/conftest.py"
    items = [SimpleNamespace(nodeid=nodeid) for nodeid in (
        "tests/a.py::test_one", f"{SLOWEST_FIRST[1]}[x]", "tests/b.py::test_two", SLOWEST_FIRST[0], f"{SLOWEST_FIRST[1]}[y]")]
    pytest_collection_modifyitems(items)
    assert [item.nodeid for item in items] == [
        SLOWEST_FIRST[0], f"{SLOWEST_FIRST[1]}[x]", f"{SLOWEST_FIRST[1]}[y]", "tests/a.py::test_one", "tests/b.py::test_two"]

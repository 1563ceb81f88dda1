"""Project-wide test settings."""

from __future__ import annotations

import os

import pytest

pytest_plugins = ["pytester"]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    # CI installs every extra, so a test skipped for a missing one means a missing install
    # step: fail it there rather than let the check silently not run.
    if os.environ.get("CI") and report.skipped and call.when in ("setup", "call"):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where everything must run: {report.longrepr}"
    return report

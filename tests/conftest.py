"""Project-wide test settings."""

from __future__ import annotations

import os

import pytest

# pytester's in-process runs drop the modules first imported inside them. PyYAML's C loader
# cannot be imported a second time in one process (a later load fails on "the tag None"), so
# it is imported once here, before any inner run can be the first to.
import yaml  # noqa: F401

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

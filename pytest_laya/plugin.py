"""pytest-laya's pytest plugin (entry point ``laya``).

For now it registers the command-line options and ini keys that select how Laya is reached;
the fixtures that act on them (fake, replayed and live servers) build on `pytest_laya.client`
and arrive with the plugin issue. Options are registered here, and only here, so that the
names users put in CI scripts are stable from the first release.
"""

from __future__ import annotations

import pytest

MODES = ("replay", "record", "live", "fake")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("laya", "Laya decision servers (pytest-laya)")
    group.addoption(
        "--laya-mode",
        choices=MODES,
        default=None,
        help="how tests reach Laya: replay cassettes (default), record them, call a live server, or a fake.",
    )
    group.addoption("--laya-url", default=None, help="URL of a live served Laya, e.g. http://127.0.0.1:8000.")
    group.addoption(
        "--laya-api-key",
        default=None,
        help="bearer token for the live server (default: LAYA_SERVED_API_KEY). Never written to cassettes or reports.",
    )
    parser.addini("laya_mode", "default for --laya-mode", default="replay")
    parser.addini("laya_url", "default for --laya-url", default="")

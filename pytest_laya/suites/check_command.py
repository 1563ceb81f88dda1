"""The plugin ``python -m pytest_laya check`` adds to its pytest run: the run speaks its words.

- Messages that ask for the server's key name the command's ``--api-key`` (under plain pytest
  they name ``--laya-api-key``).
- The header names the command and the server it checks. The run is isolated (``-c`` the null
  device, rootdir at the installed suite, ``--no-header``), so pytest's own header lines would
  show an ini file path through ``/dev/null`` and a rootdir inside site-packages; and progress
  lines show no path into the installed package, only the outcomes (``-v`` still names each check).
"""

from __future__ import annotations

import platform

import pytest

from pytest_laya.suites.server_under_test import KEY_OPTION

#: The command's flag for the server's key.
API_KEY_FLAG = "--api-key"


def pytest_configure(config: pytest.Config) -> None:
    config.stash[KEY_OPTION] = API_KEY_FLAG


@pytest.hookimpl(wrapper=True)
def pytest_sessionstart(session: pytest.Session) -> object:
    result = yield  # after the terminal reporter's "test session starts"
    _header(session)
    return result


def _header(session: pytest.Session) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or not reporter.showheader:  # -q: no header
        return
    from pytest_laya import __version__
    from pytest_laya.client.settings import redact_url

    url = redact_url(session.config.getoption("laya_url") or "")
    reporter.showfspath = False
    reporter.write_line(f"python -m pytest_laya check {url}: the HTTP contract of a served Laya "
                        f"(pytest_laya.suites.server); pytest-laya {__version__}, pytest {pytest.__version__}, "
                        f"Python {platform.python_version()}")

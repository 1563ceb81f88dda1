"""The plugin ``python -m pytest_laya check`` adds to its pytest run: the run speaks its words.

- Messages that ask for the server's key name the command's ``--api-key`` (under plain pytest
  they name ``--laya-api-key``), and those about required invariance ``--require-invariance``.
- The header names the command and the server it checks. The run is isolated (``-c`` the null
  device, rootdir at the installed suite, ``--no-header``), so pytest's own header lines would
  show an ini file path through ``/dev/null`` and a rootdir inside site-packages; and progress
  lines show no path into the installed package, only the outcomes (``-v`` still names each check).
- Its short summary names each check that did not pass by its name alone (pytest's ``-ra`` line
  shows the path to the installed suite, relative to the current directory, and cuts the reason
  at the terminal's width), with the reason below it, wrapped and its control characters escaped.
  The command passes ``-rN``; a ``-r`` of the user's (after ``--``) gets pytest's own summary.
"""

from __future__ import annotations

import platform
import textwrap
from typing import Any

import pytest

from pytest_laya.suites.server_under_test import INVARIANCE_OPTION, KEY_OPTION

#: The command's flag for the server's key.
API_KEY_FLAG = "--api-key"
#: The command's flag that requires invariance.
INVARIANCE_FLAG = "--require-invariance"
#: The -r the command passes: pytest's short summary off, this plugin's on.
REPORT_CHARS = "N"
#: How much of a reason the summary shows (the FAILURES section above has all of it).
_REASON_MAX = 300
#: The outcomes the summary lists, in pytest's order, with pytest's words.
_OUTCOMES = (("error", "ERROR"), ("failed", "FAILED"), ("xpassed", "XPASS"), ("xfailed", "XFAIL"), ("skipped", "SKIPPED"))


def pytest_configure(config: pytest.Config) -> None:
    config.stash[KEY_OPTION] = API_KEY_FLAG
    config.stash[INVARIANCE_OPTION] = INVARIANCE_FLAG


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
    from pytest_laya.wire.urls import redact_url

    url = redact_url(session.config.getoption("laya_url") or "")
    reporter.showfspath = False
    reporter.write_line(f"python -m pytest_laya check {url}: the HTTP contract of a served Laya "
                        f"(pytest_laya.suites.server); pytest-laya {__version__}, pytest {pytest.__version__}, "
                        f"Python {platform.python_version()}")


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if config.option.reportchars != REPORT_CHARS:
        return
    lines = [line for stat, word in _OUTCOMES for report in terminalreporter.stats.get(stat, ())
             if getattr(report, "nodeid", "") for line in _summary_lines(terminalreporter, word, stat, report)]
    if lines:
        terminalreporter.write_sep("=", "short test summary info")
        for line in lines:
            terminalreporter.write_line(line)


def _summary_lines(terminalreporter: Any, word: str, stat: str, report: Any) -> list[str]:
    """``FAILED test_x`` (the check's name, never a path), then its reason, indented and wrapped."""
    from pytest_laya.wire.problems import printable

    markup = {"red": True} if stat in ("failed", "error") else {"yellow": True}
    name = report.nodeid.split("::", 1)[-1]
    where = f" (at {report.when})" if stat == "error" and report.when != "call" else ""
    reason = printable(" ".join(_reason(report).split()))
    if len(reason) > _REASON_MAX:
        reason = reason[: _REASON_MAX - 3] + "..."
    width = max(40, terminalreporter._tw.fullwidth - 1)
    return [terminalreporter._tw.markup(word, bold=True, **markup) + f" {name}{where}",
            *textwrap.wrap(reason, width=width, initial_indent="  ", subsequent_indent="  ",
                           break_on_hyphens=False)]


def _reason(report: Any) -> str:
    """The first line of what the check said (its failure message, skip reason or gap), with the
    lines it introduces when it ends in a colon (a spec check's violations)."""
    if getattr(report, "wasxfail", None):
        return str(report.wasxfail)
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (path, line, "Skipped: reason")
        text = str(longrepr[2]).removeprefix("Skipped: ")
    else:
        crash = getattr(longrepr, "reprcrash", None)
        text = crash.message.removeprefix("Failed: ") if crash is not None else str(longrepr or "")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    return " ".join(lines) if lines[0].endswith(":") else lines[0]

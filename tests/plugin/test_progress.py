"""Progress on the terminal while a test talks to a slow Laya: shown on a tty, never in a log or under -q."""

from __future__ import annotations

import re

import pytest

from pytest_laya.plugin.progress import Progress
from tests.helpers.pytester_runs import run

pytest_plugins = ["pytester"]

TESTS = """
def test_three(laya_client):
    for state in ("one", "two", "three"):
        laya_client.decide(state, {"q": {"type": "noul", "instructions": "Is it urgent?"}})
"""
#: An inner conftest that makes the run's terminal a tty, as a user's is.
ON_A_TERMINAL = """
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    reporter.isatty = (lambda: True) if callable(reporter.isatty) else True
"""


@pytest.fixture
def at_once(monkeypatch):
    """Every test is "slow": its status shows from its first request, and changes with each one."""
    monkeypatch.setattr(Progress, "DELAY_S", 0.0)
    monkeypatch.setattr(Progress, "EVERY_S", 0.0)


@pytest.mark.parametrize("verbosity", [(), ("-v",)], ids=["dots", "verbose"])
def test_on_a_terminal_a_running_test_shows_its_requests_and_erases_them_before_its_outcome(pytester, at_once,
                                                                                               verbosity):
    pytester.makepyfile(test_it=TESTS)
    pytester.makeconftest(ON_A_TERMINAL)
    result = run(pytester, "--laya-mode=fake", *verbosity)
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    line = next(line for line in out.splitlines() if line.startswith("test_it.py"))
    shown = re.findall(r" \[laya: \d+ requests?, \d+s\]", line)
    assert [status.split(",")[0] for status in shown] == [" [laya: 1 request", " [laya: 2 requests", " [laya: 3 requests"]
    erased = "\b" * len(shown[-1]) + " " * len(shown[-1]) + "\b" * len(shown[-1])
    outcome = "PASSED" if verbosity else "."
    assert shown[-1] + erased + outcome in line  # gone before pytest writes the outcome


@pytest.mark.parametrize("args", [("-q",), ("-s",), ()], ids=["quiet", "no-capture", "not-a-tty"])
def test_quiet_uncaptured_or_logged_runs_show_no_progress(pytester, at_once, args):
    pytester.makepyfile(test_it=TESTS)
    if args:
        pytester.makeconftest(ON_A_TERMINAL)
    result = run(pytester, "--laya-mode=fake", *args)
    result.assert_outcomes(passed=1)
    assert "[laya:" not in result.stdout.str() and "\b" not in result.stdout.str()


def test_replay_shows_no_progress(pytester, at_once):
    # Replay answers from the file at once: nothing to wait for.
    pytester.makepyfile(test_it=TESTS)
    pytester.makeconftest(ON_A_TERMINAL)
    from pytest_laya.fake import FakeLayaServer

    with FakeLayaServer() as fake:
        run(pytester, "--laya-record", f"--laya-url={fake.url}").assert_outcomes(passed=1)
    result = run(pytester)
    result.assert_outcomes(passed=1)
    assert "[laya:" not in result.stdout.str()


def test_a_status_waits_for_the_delay_and_changes_at_most_so_often():
    class Clock:
        now = 0.0

        def __call__(self):
            return self.now

    class Out:
        text = ""

        def write(self, text):
            self.text += text

        def flush(self):
            pass

    clock, out = Clock(), Out()
    progress = Progress(out, clock=clock)
    progress.exchange()
    assert out.text == ""  # a fast test never flickers
    clock.now = Progress.DELAY_S
    progress.exchange()
    assert out.text == " [laya: 2 requests, 2s]"
    clock.now += Progress.EVERY_S / 2
    progress.exchange()
    assert out.text == " [laya: 2 requests, 2s]"  # too soon to change
    progress.erase()
    assert out.text.endswith("\b" * 23 + " " * 23 + "\b" * 23)

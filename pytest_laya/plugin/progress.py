"""Progress while a slow test talks to Laya: a transient status at the end of the terminal line.

A test that records, verifies or checks against a slow server can take minutes, and pytest
shows nothing until it ends. On a terminal (not a log: stdout must be a tty), at normal or
``-v`` verbosity (not ``-q``), with output captured (not ``-s``), a test still talking to Laya
after `DELAY_S` gets ``[laya: 12 requests, 34s]`` after its line's dots or its ``-v`` name,
updated at most every `EVERY_S`, and erased before pytest writes the outcome. It is written
past pytest's terminal writer, so its line accounting (the ``[ 50%]`` column) stays right.
Under pytest-xdist the workers have no terminal: the controller shows each test as it ends.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import IO, Any

import pytest

__all__ = ["Progress", "progress_for"]


class Progress:
    """The status of the test that is running: requests answered so far and time taken."""

    #: A test shows nothing until it has run this long (a fast test never flickers)...
    DELAY_S = 2.0
    #: ...and its status changes at most this often.
    EVERY_S = 0.5

    def __init__(self, out: IO[str], clock: Any = time.monotonic,
                 uncaptured: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext) -> None:
        self._out = out
        self._uncaptured = uncaptured
        self._clock = clock
        self._started = clock()
        self._requests = 0
        self._shown = ""
        self._last = 0.0

    def exchange(self, _exchange: Any = None) -> None:
        """One more request answered (by any client of the test's server)."""
        self._requests += 1
        if threading.current_thread() is not threading.main_thread():  # capture is suspended from pytest's thread only
            return
        now = self._clock()
        if now - self._started < self.DELAY_S or (self._shown and now - self._last < self.EVERY_S):
            return
        self._last = now
        noun = "request" if self._requests == 1 else "requests"
        self._write(f" [laya: {self._requests} {noun}, {now - self._started:.0f}s]")

    def _write(self, text: str) -> None:
        erase = self._erasure()
        self._shown = text
        with self._uncaptured():  # the test's output is being captured: the terminal is not
            self._out.write(erase + text)
            self._out.flush()

    def _erasure(self) -> str:
        n = len(self._shown)
        return "\b" * n + " " * n + "\b" * n if n else ""

    def erase(self) -> None:
        """Take the status off the line (before pytest writes there)."""
        if self._shown:
            self._out.write(self._erasure())
            self._out.flush()
            self._shown = ""

    # -- pytest hooks (registered per config, on a terminal only: `progress_for`)

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self.erase()
        self._started = self._clock()
        self._requests = 0

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: Any) -> None:
        self.erase()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        self.erase()


def progress_for(config: pytest.Config) -> Progress | None:
    """A `Progress` writing to the terminal, or None: no terminal, -q, -s, or an xdist worker."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if (reporter is None or not _is_a_terminal(reporter) or config.option.verbose < 0
            or getattr(config.option, "capture", "fd") == "no" or hasattr(config, "workerinput")):
        return None
    out = getattr(getattr(reporter, "_tw", None), "_file", None)
    capture = config.pluginmanager.get_plugin("capturemanager")
    uncaptured = getattr(capture, "global_and_fixture_disabled", None)
    if out is None or not hasattr(out, "write") or uncaptured is None:
        return None
    return Progress(out, uncaptured=uncaptured)


def _is_a_terminal(reporter: Any) -> bool:
    isatty = getattr(reporter, "isatty", False)  # a method in pytest 9, an attribute before
    return bool(isatty() if callable(isatty) else isatty)

"""Runs that end early: SIGTERM stops a run as Ctrl-C does, and an xdist run interrupted before
its workers sent their totals still reports what they wrote.

A CI timeout sends SIGTERM, which by default kills Python where it stands (a cassette's temporary
file left behind, no summary). While a run is in progress SIGTERM raises `KeyboardInterrupt`
instead, so the write in progress removes its temporary file and pytest prints its summary.

Under pytest-xdist each worker sends its totals once, when it finishes (`LayaRun.export`). After
Ctrl-C they may never come. So each test's cassette records also ride on its teardown report,
which xdist relays at once: the controller keeps them per worker, drops them when the worker's
totals arrive, and folds in those of workers that never sent totals, saying so.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

import pytest

from pytest_laya.plugin.run import WORKEROUTPUT_KEY, WRITTEN_OUTCOMES, LayaRun

__all__ = ["WATCH", "InterruptWatch", "REPORT_ATTRIBUTE", "watch"]

#: The attribute of a teardown report that carries the test's cassette records to the controller.
REPORT_ATTRIBUTE = "laya_tests"
LOST = "interrupted: results of xdist workers"


def watch(run: LayaRun, config: pytest.Config) -> InterruptWatch:
    """Start watching this config's run: SIGTERM handled, the xdist relay registered."""
    watcher = config.stash[WATCH] = InterruptWatch(run, config)
    watcher.install()
    config.pluginmanager.register(watcher, f"laya-interrupts-{id(config)}")
    return watcher


def _sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"stopped by signal {signum} (SIGTERM)")


class InterruptWatch:
    """One per config: the SIGTERM handler while the run lasts, and the xdist relay."""

    def __init__(self, run: LayaRun, config: pytest.Config) -> None:
        self.run = run
        self.worker = hasattr(config, "workerinput")
        self.sent = 0  # records of `run.tests` already relayed (worker)
        self.pending: dict[str, list[dict[str, Any]]] = {}  # worker id -> relayed records (controller)
        self.up: set[str] = set()
        self.reported: set[str] = set()
        self.previous: Any = None
        self._installed = False

    # -- SIGTERM

    def install(self) -> None:
        """SIGTERM raises `KeyboardInterrupt`, where nothing else claimed SIGTERM (main thread only)."""
        if threading.current_thread() is not threading.main_thread():
            return
        try:
            if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
                return  # a project's own handler, or an outer run's: left alone
            self.previous = signal.signal(signal.SIGTERM, _sigterm)
            self._installed = True
        except (ValueError, OSError, AttributeError):  # no SIGTERM here (or not the main interpreter)
            return

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self.previous)
            self._installed = False

    # -- the xdist relay

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report = yield
        if self.worker and report.when == "teardown" and len(self.run.tests) > self.sent:
            setattr(report, REPORT_ATTRIBUTE, [dict(record) for record in self.run.tests[self.sent:]])
            self.sent = len(self.run.tests)
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        records = getattr(report, REPORT_ATTRIBUTE, None)
        node = getattr(report, "node", None)
        if self.worker or not records or node is None:
            return
        self.pending.setdefault(_worker_id(node), []).extend(records)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodeready(self, node: Any) -> None:
        self.up.add(_worker_id(node))

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", None) or {}
        if output.get(WORKEROUTPUT_KEY) is not None:  # its totals arrived: they hold these records
            worker = _worker_id(node)
            self.reported.add(worker)
            self.pending.pop(worker, None)

    def fold_unreported(self) -> None:
        """Controller, at the end: count what workers that sent no totals relayed, and say so."""
        run = self.run
        silent = sorted(self.up - self.reported)
        for worker in sorted(self.pending):
            records = self.pending.pop(worker)
            run.tests.extend(records)
            for record in records:
                if record.get("outcome"):
                    run.count_cassette(record["outcome"])
            written = [str(r["cassette"]) for r in records if r.get("outcome") in WRITTEN_OUTCOMES and r.get("cassette")]
            run.note(LOST, f"worker {worker} stopped before sending its totals: counted from its {len(records)} "
                           f"test report(s); it wrote {len(written)} cassette(s)"
                           + "".join(f"\n    {path}" for path in written))
        for worker in silent:
            if not any(line.startswith(f"worker {worker} ") for line in run.notes.get(LOST, ())):
                run.note(LOST, f"worker {worker} stopped before sending its totals and relayed no cassette records: "
                               f"its results are lost (a test it interrupted while saving may still have written "
                               f"its cassette: check your version control)")


def _worker_id(node: Any) -> str:
    gateway = getattr(node, "gateway", None)
    return str(getattr(gateway, "id", None) or getattr(node, "workerid", None) or node)


WATCH = pytest.StashKey[InterruptWatch]()

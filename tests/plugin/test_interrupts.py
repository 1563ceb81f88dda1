"""Runs that end early keep their reports honest (issue 31): SIGTERM (a CI timeout) stops a run
as Ctrl-C does, removing the temporary file of a write in progress and printing the summary; an
xdist run interrupted before its workers sent their totals still counts and lists what they
wrote, or says that their results were lost."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from pytest_laya.fake import FakeLayaServer
from tests.helpers.pytester_runs import TEST_DECIDE, WITHOUT_UNUSED_PLUGINS, report_of

pytest_plugins = ["pytester"]

MANY = "".join(TEST_DECIDE.replace("def test_refund", f"def test_{n}") for n in range(6))
# The controller is interrupted (as Ctrl-C would) once two tests' cassette records reached it;
# the workers' other tests wait, so they are still busy, and never send their totals.
INTERRUPT_CONTROLLER = """
import pathlib, time

seen = []
worker = []

def pytest_configure(config):
    worker.append(hasattr(config, "workerinput"))

def pytest_runtest_logreport(report):
    if getattr(report, "laya_tests", None) and not worker[0]:
        seen.append(report.nodeid)
        if len(seen) == 2:
            raise KeyboardInterrupt

def pytest_runtest_setup(item):
    if worker[0] and item.name not in ("test_0", "test_1"):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not pathlib.Path("never").exists():
            time.sleep(0.05)
"""


def test_an_interrupted_xdist_run_lists_what_its_workers_wrote(pytester):
    pytester.makepyfile(test_it=MANY)
    pytester.makeconftest(INTERRUPT_CONTROLLER)
    report = pytester.path / "report.json"
    with FakeLayaServer() as server:
        result = pytester.runpytest("-p", "no:asyncio", "-p", "no:cacheprovider", "-p", "no:randomly", "--laya-record",
                                    f"--laya-url={server.url}", f"--laya-report={report}", "-n", "2",
                                    *WITHOUT_UNUSED_PLUGINS, no_reraise_ctrlc=True)
    written = sorted(p.name for p in (pytester.path / "cassettes").rglob("*.yaml"))
    data = report_of(report)
    assert data["cassettes"]["recorded"] == len(written) >= 2
    listed = "\n".join(data["notes"]["interrupted: results of xdist workers"])
    for name in written:
        assert name in listed
    result.stdout.fnmatch_lines([f"*cassettes: {len(written)} recorded*", "interrupted: results of xdist workers:",
                                 "*stopped before sending its totals*"])


# The save of the test's cassette stops between writing its temporary file and moving it into
# place (in fsync), and says so, so the signal arrives in the middle of the write.
STALL_THE_SAVE = """
import os, pathlib, time

_fsync = os.fsync

def stalled(fd):
    pathlib.Path("saving").write_text("now")
    time.sleep(120)
    _fsync(fd)

os.fsync = stalled
"""


def test_sigterm_in_the_middle_of_a_save_removes_the_temporary_file_and_prints_the_summary(pytester):
    pytester.makepyfile(test_it=TEST_DECIDE)
    pytester.makeconftest(STALL_THE_SAVE)
    with FakeLayaServer() as server:
        process = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:asyncio", *WITHOUT_UNUSED_PLUGINS,
             "--laya-record", f"--laya-url={server.url}"],
            cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 120
            while not (pytester.path / "saving").exists() and process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert (pytester.path / "saving").exists(), "the save never started"
            assert list((pytester.path / "cassettes").rglob(".*.tmp")), "the temporary file is being written"
            process.send_signal(signal.SIGTERM)
            out, _ = process.communicate(timeout=120)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
    assert process.returncode == pytest.ExitCode.INTERRUPTED, out
    assert "SIGTERM" in out and "pytest-laya" in out and "mode: record" in out  # the summary was printed
    assert not list(pytester.path.rglob("*.tmp")), "a temporary file was left behind"
    assert not (pytester.path / "cassettes/test_it/test_refund.yaml").exists()

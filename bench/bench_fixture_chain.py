#!/usr/bin/env python
"""What a test pays for `laya_url` (and `laya_client`) over `laya_server`: the function-scoped
fixtures it sets up, and its time per test, as a ratio against peers in the same run.

A temporary project holds --tests tests of each kind, interleaved: ``laya_url``, ``laya_client``
and ``laya_server`` tests that make no call (replay mode: no cassette is needed, no socket is
opened) and empty tests. A timing plugin in its conftest times each test's whole protocol
(setup, call, teardown) with perf_counter_ns. Each source tree given (``--tree``, default: this
checkout) runs it --runs times in fresh subprocesses, trees interleaved, so every ratio compares
tests of one run on one loaded machine. Reported per tree: the function-scoped fixtures each kind
sets up (``--setup-plan``), the median per kind, and the ratios (kind - empty) / (laya_server -
empty). A script run by hand, not a test: nothing asserts on time.

    python bench/bench_fixture_chain.py --tree /work/main --tree . --tests 200 --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

KINDS = ("laya_url", "laya_client", "laya_server", "empty")

CONFTEST = '''
import json, os, time
import pytest

TIMES = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    start = time.perf_counter_ns()
    yield
    TIMES[item.name] = time.perf_counter_ns() - start


def pytest_sessionfinish(session):
    with open(os.environ["FIXTURE_CHAIN_OUT"], "w") as out:
        json.dump(TIMES, out)
'''


def _project(directory: Path, tests: int) -> None:
    lines = []
    for n in range(tests):
        for kind in KINDS:
            argument = "" if kind == "empty" else kind
            lines.append(f"def test_{kind}_{n}({argument}):\n    pass\n")
    (directory / "test_chain.py").write_text("\n\n".join(lines))
    (directory / "conftest.py").write_text(CONFTEST)
    (directory / "pytest.ini").write_text("[pytest]\nlaya_mode = replay\n")


def _environment(tree: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(tree.resolve()))
    env.pop("PYTEST_ADDOPTS", None)
    return env


def _function_fixtures(directory: Path, tree: Path) -> dict[str, list[str]]:
    """The function-scoped fixtures each kind sets up (``--setup-plan``)."""
    found: dict[str, list[str]] = {}
    for kind in KINDS:
        out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--setup-plan",
                              f"test_chain.py::test_{kind}_0"], cwd=directory, env=_environment(tree),
                             capture_output=True, text=True, check=False).stdout
        found[kind] = [line.split()[2] for line in out.splitlines() if line.strip().startswith("SETUP    F")]
    return found


def _run(directory: Path, tree: Path) -> dict[str, int]:
    out = directory / "times.json"
    env = _environment(tree) | {"FIXTURE_CHAIN_OUT": str(out)}
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                    "test_chain.py"], cwd=directory, env=env, capture_output=True, check=True)
    times: dict[str, int] = json.loads(out.read_text())
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", type=Path, help="a source tree to import pytest_laya from")
    parser.add_argument("--tests", type=int, default=200, help="tests of each kind")
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    trees = options.tree or [Path(__file__).resolve().parents[1]]
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        _project(directory, options.tests)
        samples: dict[Path, dict[str, list[int]]] = {tree: {kind: [] for kind in KINDS} for tree in trees}
        for _ in range(options.runs):
            for tree in trees:
                for name, ns in _run(directory, tree).items():
                    kind = name.rsplit("_", 1)[0].removeprefix("test_")
                    samples[tree][kind].append(ns)
        with open("/proc/loadavg") as load:
            print(f"load average: {load.read().split()[:3]}")
        for tree in trees:
            print(f"\n{tree}")
            for kind, fixtures in _function_fixtures(directory, tree).items():
                print(f"  {kind:<12} {len(fixtures)} function fixtures: {', '.join(fixtures) or '-'}")
            medians = {kind: statistics.median(values) / 1000 for kind, values in samples[tree].items()}
            base = medians["laya_server"] - medians["empty"]
            for kind in KINDS:
                ratio = (medians[kind] - medians["empty"]) / base if base > 0 else float("nan")
                print(f"  {kind:<12} median {medians[kind]:8.1f} us per test; over empty / laya_server's: {ratio:.2f}")


if __name__ == "__main__":
    main()

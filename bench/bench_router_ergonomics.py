#!/usr/bin/env python
"""The router's five tests (examples/router): pytest-laya's one-handle file against its respx twin.

Both files run in the same pytest process (fake mode, as the example's ini sets), so they share
start-up; the per-file time is the sum of its tests' setup, call and teardown, read from pytest's
JUnit XML. Rounds alternate which file runs first, since the first test of a process pays for
what the session builds once (the interception patches, the fake): with ``--rounds`` (default 6)
each file runs first in half of them. Prints each file's median, its median when it ran second
(what a test costs once the session is up), and the ratios laya / respx.

    python bench/bench_router_ergonomics.py [--rounds N] [--block-network]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "router"
FILES = ("tests/test_router.py", "tests/test_router_respx.py")


def one_round(workdir: Path, first: int, extra: list[str]) -> dict[str, float]:
    report = workdir / "junit.xml"
    order = [FILES[first], FILES[1 - first]]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                    "-p", "no:schemathesis", "-p", "no:hypothesispytest", f"--junitxml={report}", *extra, *order],
                   cwd=workdir, env=env, check=True, stdout=subprocess.DEVNULL)
    totals = dict.fromkeys(FILES, 0.0)
    for case in ET.parse(report).iter("testcase"):
        module = "tests/" + case.attrib["classname"].split(".")[-1] + ".py"
        totals[module] += float(case.attrib["time"])
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--block-network", action="store_true", help="run with --laya-block-network")
    args = parser.parse_args()
    extra = ["--laya-block-network"] if args.block_network else []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        shutil.copytree(EXAMPLE, workdir, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        times: dict[str, list[float]] = {name: [] for name in FILES}
        second: dict[str, list[float]] = {name: [] for name in FILES}  # after the other file: no start-up
        for number in range(args.rounds):
            for name, seconds in one_round(workdir, number % 2, extra).items():
                times[name].append(seconds)
                if name != FILES[number % 2]:
                    second[name].append(seconds)
    for name in FILES:
        print(f"{name:<28} median {statistics.median(times[name]):.3f} s, run second {statistics.median(second[name]):.3f} s"
              f"  (rounds {', '.join(f'{t:.3f}' for t in times[name])})")
    laya, respx = (statistics.median(times[name]) for name in FILES)
    laya_second, respx_second = (statistics.median(second[name]) for name in FILES)
    print(f"ratio pytest-laya / respx: {laya / respx:.2f} (run second: {laya_second / respx_second:.2f})")


if __name__ == "__main__":
    main()

"""A longer schemathesis run of the reference server against the target spec, with the case count.

Why a script: the suite's fuzz test (tests/reference_server/test_fuzz_reference_server.py) runs a bounded number
of examples so the suite stays fast; this runs the very same test, with the same oracle and
checks, with as many examples as you ask for and a seed of your choice, then prints how many
cases ran and what the server answered them (operation, body mode, status, problem code).

The test runs in a fresh pytest subprocess (the reference server on the embedded tiny checkpoint,
on a free 127.0.0.1 port, stopped when the run ends), so this script imports nothing heavy.

Usage (from the repository root)::

    .venv/bin/python scripts/fuzz_reference_server.py [--examples 200] [--seed 1] [--json]

Exit status: pytest's (0 when every case passed).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from collections import Counter

ROOT = pathlib.Path(__file__).resolve().parents[1]
TEST_FILE = ROOT / "tests" / "test_fuzz_reference_server.py"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=200,
                        help="hypothesis examples per operation in the fuzzing phase (the suite uses 12)")
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100_000, help="generation seed (printed)")
    parser.add_argument("--json", action="store_true", help="print the tally as JSON instead of a table")
    args = parser.parse_args(argv)
    if args.examples < 1:
        parser.error("--examples must be at least 1")

    with tempfile.TemporaryDirectory(prefix="laya-fuzz-") as tmp:
        report = pathlib.Path(tmp) / "tally.json"
        env = {**os.environ, "LAYA_FUZZ_EXAMPLES": str(args.examples), "LAYA_FUZZ_SEED": str(args.seed),
               "LAYA_FUZZ_REPORT": str(report)}
        started = time.monotonic()
        result = subprocess.run([sys.executable, "-m", "pytest", str(TEST_FILE), "-q", "-p", "no:cacheprovider"],
                                cwd=ROOT, env=env)
        elapsed = time.monotonic() - started
        if not report.exists():
            print("the fuzz test wrote no tally (it failed before the server started)", file=sys.stderr)
            return result.returncode or 1
        tally = json.loads(report.read_text())

    tally["seconds"] = round(elapsed, 1)
    tally["passed"] = result.returncode == 0
    if args.json:
        print(json.dumps(tally, indent=1))
        return result.returncode
    by_mode: Counter[str] = Counter()
    by_status: Counter[int] = Counter()
    for row in tally["rows"]:
        by_mode[row["body"]] += row["cases"]
        by_status[row["status"]] += row["cases"]
    print(f"\nseed {tally['seed']}, {tally['examples']} examples per operation: {tally['cases']} cases in "
          f"{elapsed:.0f} s, {'all passed' if tally['passed'] else 'FAILURES (see above)'}")
    print("by body mode: " + ", ".join(f"{mode} {n}" for mode, n in sorted(by_mode.items())))
    print("by status:    " + ", ".join(f"{status} {n}" for status, n in sorted(by_status.items())))
    print(f"\n{'operation':<28} {'body':<9} {'status':>6}  {'code':<24} {'cases':>6}")
    for row in tally["rows"]:
        print(f"{row['operation']:<28} {row['body']:<9} {row['status']:>6}  {row['code']:<24} {row['cases']:>6}")
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())

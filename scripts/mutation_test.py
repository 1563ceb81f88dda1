"""Mutation testing of the kit's checking code with mutmut, one module group at a time.

Each target below names the modules to mutate and the tests that exercise them. mutmut runs in
a scratch copy under ``mutants/<target>/`` (ignored by git, ruff and mypy): it copies the
package and the tests, rewrites every function of the target modules into its mutants, runs the
chosen tests once to learn which test reaches which function, and then, for each mutant, only
the tests that reach it, in one forked worker. A mutant is *killed* when a test fails,
*survived* when they all pass; the score is killed / (killed + survived + timeout + suspicious);
mutants no chosen test reaches count as *no tests* and against the score too.

docs/testing.md gives the commands and the latest score of each module.

Usage (from the repository root; long, so nice it on a shared machine)::

    nice -n 10 .venv/bin/python scripts/mutation_test.py                # every target
    nice -n 10 .venv/bin/python scripts/mutation_test.py policy cassettes
    nice -n 19 .venv/bin/python scripts/mutation_test.py --survivors --jobs 2 cassettes
    nice -n 19 .venv/bin/python scripts/mutation_test.py --survivors --only pytest_laya.specs.spec specs
    .venv/bin/python scripts/mutation_test.py --list

Without options each target starts from a fresh copy. ``--survivors`` re-runs only the mutants
the previous run of a target did not kill (after adding tests: a killed mutant stays killed),
with the tests as they are now. ``--report`` runs nothing: it prints the scores of each target's
last run, which may have been stopped (mutants it did not reach count as *not checked*).
Changing a target's modules or tests below makes mutmut drop all its earlier results; a changed
function drops its own (a second ``--survivors`` pass then re-runs them too).
After a run, survivors are listed with their diffs in ``mutants/<target>/survivors.txt``
(a table: ``survivors.md``); inspect one with
``cd mutants/<target> && ../../.venv/bin/mutmut show NAME``.

Exit status: 0 when every target ran, 1 when mutmut failed (for example a chosen test fails on
the unmutated code).
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRATCH = ROOT / "mutants"
# What the tests read besides the package and tests/ (specs, recordings, the reference server, scripts, docs).
COPIED = ["pytest_laya", "tests", "specs", "cassettes", "pytest_laya_reference", "examples", "scripts", "docs"]


@dataclass(frozen=True)
class Target:
    modules: tuple[str, ...]  # globs, relative to the repository root
    tests: tuple[str, ...]  # pytest arguments choosing the tests that exercise them


# Tests that start real laya, laya-serve or the reference server are left out: they take
# minutes and exercise the checking code no more than the loopback and recorded tests do.
TARGETS: dict[str, Target] = {
    "policy": Target(
        modules=("pytest_laya/client/policy.py",),
        tests=("tests/client",),
    ),
    "contract": Target(
        modules=("pytest_laya/contract/*.py",),
        tests=("tests/contract/test_contract_twins.py", "tests/contract/test_contract_broken.py",
               "tests/contract/test_contract_shipped_cassettes.py", "tests/contract/test_contract_models.py",
               "-k", "not (TestLayaModel or OverTheReferenceServer or OverLayaServe or recorded_from_the_reference_server)"),
    ),
    # The sync client's own deadline: every socket operation cut to the time left, and the
    # watchdog for a transport passed in (the Deadline itself is in policy.py, target policy).
    "deadline": Target(
        modules=("pytest_laya/client/sync_client.py",),
        tests=("tests/client",),
    ),
    "server_contract": Target(
        modules=("pytest_laya/suites/*.py",),
        tests=("tests/contract/test_server_contract_twins.py", "tests/contract/test_server_contract.py",
               "-k", "not (reference or laya_serve or end_to_end or api_key_every_check)"),
    ),
    "specs": Target(
        modules=("pytest_laya/specs/schema_compiler.py", "pytest_laya/specs/schema_source.py",
                 "pytest_laya/specs/spec.py"),
        tests=("tests/specs",),
    ),
    # The answer rules, their words and their accept path (`answers_hold`).
    "answer_rules": Target(
        modules=("pytest_laya/wire/answer_rules.py",),
        tests=("tests/wire", "tests/specs/test_specs_answer_rules.py", "tests/client/test_client_malformed_answers.py"),
    ),
    "cassettes": Target(
        modules=("pytest_laya/cassettes/matching.py", "pytest_laya/cassettes/scrub.py"),
        tests=("tests/cassettes", "tests/client/test_client_secrets.py", "tests/plugin/test_secrets.py",
               "tests/plugin/test_vcr_config.py", "tests/plugin/test_record_modes.py",
               "-k", "not (fresh_reference_and_laya_serve or re_recording_the_reference or what_the_live_server_answers"
                     " or replayed_refusal_is_the_live_one or parallel_workers or xdist)"),
    ),
}


def pyproject_with(target: Target) -> str:
    """The repository's pyproject.toml with a [tool.mutmut] section for this target."""
    text = (ROOT / "pyproject.toml").read_text()
    text = re.sub(r"(?ms)^\[tool\.mutmut\].*?(?=^\[|\Z)", "", text)

    def toml_list(items: tuple[str, ...] | list[str]) -> str:
        return "[" + ", ".join('"%s"' % item.replace("\\", "\\\\").replace('"', '\\"') for item in items) + "]"

    return text + "\n".join([
        "",
        "[tool.mutmut]",
        'source_paths = ["pytest_laya"]',
        f"only_mutate = {toml_list(target.modules)}",
        f"also_copy = {toml_list([p for p in COPIED if p not in ('pytest_laya', 'tests')])}",
        f"pytest_add_cli_args_test_selection = {toml_list(target.tests)}",
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "-p", "no:xdist"]',
        # Forked from a server that never imported the tests' threads or sockets.
        'process_isolation = "forkserver"',
        # Earlier results are reused only as --survivors asks; mutmut needs no git baseline for that.
        "use_git_change_detection = false",
        "",
    ])


def prepare(name: str, target: Target, keep: bool) -> Path:
    workdir = SCRATCH / name
    if workdir.exists() and not keep:
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    for entry in COPIED:
        link = workdir / entry
        if not link.exists():
            link.symlink_to(ROOT / entry, target_is_directory=True)
    (workdir / "pyproject.toml").write_text(pyproject_with(target))
    copy = workdir / "mutants" / "pytest_laya"
    if copy.is_dir():  # mutmut regenerates a changed target module, but copies the rest only once
        for source in (ROOT / "pytest_laya").rglob("*.py"):
            relative = source.relative_to(ROOT)
            if not any(relative.match(glob) for glob in target.modules):
                (copy.parent / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, copy.parent / relative)
    return workdir


def mutmut(workdir: Path, *args: str, capture: bool = False) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("CI", None)  # a mutant that makes a test skip must not count as killed
    return subprocess.run(
        [sys.executable, "-m", "mutmut", *args], cwd=workdir, env=env, text=True,
        stdout=subprocess.PIPE if capture else None,
    )


def run_quietly(workdir: Path, mutants: list[str], jobs: int = 1) -> int:
    """`mutmut run` with `jobs` workers, its spinner frames cut down to one progress line a minute."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("CI", None)
    proc = subprocess.Popen([sys.executable, "-m", "mutmut", "run", "--max-children", str(jobs), *mutants], cwd=workdir, env=env,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    shown = 0.0
    progress = ""
    for line in proc.stdout:  # universal newlines: each spinner frame ("\r...") is a line
        line = line.rstrip()
        if line[:1] and "\u2800" <= line[0] <= "\u28ff":  # a braille spinner frame
            progress = line[1:].strip()
            if time.monotonic() - shown > 60:
                print(f"    {progress}", flush=True)
                shown = time.monotonic()
        elif line:
            print(line, flush=True)
    if progress:
        print(f"    {progress}", flush=True)
    return proc.wait()


def results(workdir: Path) -> dict[str, str]:
    out = mutmut(workdir, "results", "--all", "true", capture=True).stdout
    found = {}
    for line in out.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep:
            found[name] = status
    return found


def module_of(mutant: str) -> str:
    # pytest_laya.client.policy.xǁRetryPolicyǁafter_failure__mutmut_3 -> pytest_laya.client.policy
    head = mutant.split(".x", 1)[0] if ".xǁ" in mutant else mutant.rsplit(".", 1)[0]
    return head.split(".x_", 1)[0]


def _cell(code: str) -> str:
    """A line of code as a markdown table cell."""
    return "`" + code.replace("|", "\\|").replace("`", "'") + "`"


def report(name: str, workdir: Path, seconds: float) -> list[tuple[str, int, int, dict[str, int]]]:
    by_module: dict[str, dict[str, int]] = {}
    survivors = []
    for mutant, status in sorted(results(workdir).items()):
        module = module_of(mutant)
        by_module.setdefault(module, {})
        by_module[module][status] = by_module[module].get(status, 0) + 1
        if status not in ("killed", "not checked"):  # a stopped run's unreached mutants have no diff worth reading
            survivors.append((mutant, status))
    with open(workdir / "survivors.txt", "w") as out, open(workdir / "survivors.md", "w") as table:
        table.write("| mutant | status | line | mutated |\n|---|---|---|---|\n")
        for mutant, status in survivors:
            shown = mutmut(workdir, "show", mutant, capture=True).stdout
            out.write(f"## {mutant}: {status}\n{shown}\n")
            changed = [line[1:].strip() for line in shown.splitlines() if line[:1] in "-+" and line[:3] not in ("---", "+++")]
            was, now = (changed + ["", ""])[:2]
            table.write(f"| {mutant.rsplit('.', 1)[-1]} | {status} | {_cell(was)} | {_cell(now)} |\n")
    rows = []
    print(f"\n{name}: {seconds / 60:.1f} min" if seconds else f"\n{name}: last run")
    for module, counts in sorted(by_module.items()):
        total = sum(counts.values())
        killed = counts.get("killed", 0)
        rows.append((module, killed, total, counts))
        others = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()) if s != "killed")
        print(f"  {module}: {killed}/{total} killed ({100 * killed / total:.1f}%)" + (f"; {others}" if others else ""))
    print(f"  survivors and their diffs: {workdir.relative_to(ROOT)}/survivors.txt (a table: survivors.md)")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*", metavar="TARGET", help="targets to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the targets, their modules and tests")
    parser.add_argument("--survivors", action="store_true",
                        help="re-run only the mutants the previous run of each target did not kill")
    parser.add_argument("--report", action="store_true",
                        help="print the scores of each target's last run and write its survivors, running nothing")
    parser.add_argument("--only", metavar="MODULE",
                        help="run only the mutants of this module (e.g. pytest_laya.specs.spec); with --survivors,"
                             " only its survivors")
    parser.add_argument("--jobs", type=int, default=1, metavar="N",
                        help="mutants tested at once (default 1; each runs its tests in its own process)")
    args = parser.parse_args(argv)
    if args.list:
        for name, target in TARGETS.items():
            print(f"{name}: {' '.join(target.modules)}\n    tests: {' '.join(target.tests)}")
        return 0
    unknown = [t for t in args.targets if t not in TARGETS]
    if unknown:
        parser.error(f"unknown target(s) {', '.join(unknown)}; --list shows the targets")
    failed = False
    for name in args.targets or list(TARGETS):
        workdir = SCRATCH / name
        if args.report:
            if (workdir / "mutants").is_dir():
                report(name, prepare(name, TARGETS[name], keep=True), 0.0)
            else:
                print(f"{name}: not run")
            continue
        mutants: list[str] = []
        if args.survivors:
            if not (workdir / "mutants").is_dir():
                parser.error(f"--survivors: {name} has no previous run in {workdir.relative_to(ROOT)}")
            # mutmut reads the results beside the sources: a scratch copy made before the links
            # to the repository existed lists none of them until they are back.
            workdir = prepare(name, TARGETS[name], keep=True)
            found = results(workdir)
            modules = sorted({module_of(m) for m in found})
            if args.only and args.only not in modules:
                parser.error(f"--only {args.only}: not a module of {name}; its modules: {', '.join(modules)}")
            mutants = [m for m, status in found.items() if status != "killed" and (not args.only or module_of(m) == args.only)]
            if not mutants:
                print(f"{name}: no survivors to re-run")
                report(name, workdir, 0.0)
                continue
        elif args.only:
            # A fresh run still mutates every module (mutmut's stats need them all); it tests one.
            if not any(fnmatch.fnmatch(args.only.replace(".", "/") + ".py", glob) for glob in TARGETS[name].modules):
                parser.error(f"--only {args.only}: not a module of {name}; its modules: {' '.join(TARGETS[name].modules)}")
            mutants = [f"{args.only}.*"]
        workdir = prepare(name, TARGETS[name], keep=args.survivors)
        started = time.monotonic()
        code = run_quietly(workdir, mutants, args.jobs)
        if code != 0:
            print(f"{name}: mutmut run failed (exit {code}); see its output above", file=sys.stderr)
            failed = True
            continue
        report(name, workdir, time.monotonic() - started)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

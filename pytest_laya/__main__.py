"""``python -m pytest_laya check URL``: the server contract against one server, in one command.

It runs ``pytest --pyargs pytest_laya.suites.server --laya-mode=live --laya-url URL`` in this
process and exits with pytest's status (0: every check passed or xfailed as a target gap; 1: a
check failed; 4: the URL cannot be reached). The run ignores the current directory's pytest
configuration (no addopts, no conftest.py, no cache written), so it reports the same anywhere.
Arguments after ``--`` go to pytest as they are (``-- -k health -v``). Without ``--spec`` (or
with ``--spec auto``) the server is held to the spec it claims: its Laya-Spec header, else
/health's ``spec``, else current; the summary says which and why.

``report merge A.json B.json ... [--out MERGED.json] [--html OUT.html]`` joins the ``--laya-report`` files of a
split run's shards (exit 0, or 2 for a file that is not a report); ``report prune MERGED.json``
deletes the cassettes the merged report found no shard used (exit 1 when it could not say).
``store push DIR URL`` and ``store pull URL DIR`` copy cassettes to and from a shared store
(exit 1 when the store cannot be read or written). See docs/teams.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_laya.wire.spec_name import SpecName

__all__ = ["main", "pytest_arguments"]

PROG = "python -m pytest_laya"
USAGE = (f"{PROG} check URL [--spec auto|current|target] [--api-key KEY] [--tolerance X] [--require-invariance] "
         "[-- PYTEST_ARGS...]")
SUITE = "pytest_laya.suites.server"
CHECK_PLUGIN = "pytest_laya.suites.check_command"


class _OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line: what is wrong, then the usage."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{PROG}: {message} (usage: {USAGE})\n")


def _parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(prog=PROG, description="pytest-laya's command line.")
    commands = parser.add_subparsers(dest="command", metavar="check|report|store|proxy|compare", parser_class=_OneLineParser)
    commands.required = True
    check = commands.add_parser("check", help="run the HTTP contract (pytest_laya.suites.server) against a server",
                                usage=USAGE, description="Run the HTTP contract of a served Laya against URL; exit "
                                                         "with pytest's status.",
                                epilog="Arguments after -- go to pytest unchanged, e.g. -- -k health -v, -- -n 2, "
                                       "-- --laya-report report.json.")
    check.add_argument("url", metavar="URL", help="the server, e.g. http://127.0.0.1:8000")
    check.add_argument("--spec", choices=SpecName.values(), default=SpecName.AUTO.value,
                       help="the spec the server is held to (default auto: the one it claims in its Laya-Spec "
                            "header or /health, else current)")
    check.add_argument("--api-key", default=None, metavar="KEY",
                       help="the server's bearer token (default: LAYA_SERVED_API_KEY); never printed")
    check.add_argument("--tolerance", type=float, default=None, metavar="X",
                       help="the largest probability deviation the behaviour checks allow (default: the server's "
                            "/health answer_tolerance, else 1e-5 for fp32 and 1e-3 for fp16/bf16 weights)")
    check.add_argument("--require-invariance", action="store_true",
                       help="fail option order and question interference past the tolerance (default: report them)")
    _add_report_commands(commands)
    _add_store_commands(commands)
    _add_compare_command(commands)
    from pytest_laya.plugin.proxy_command import add_proxy_parser

    add_proxy_parser(commands)
    return parser


def _add_compare_command(commands: Any) -> None:
    """``compare A B`` (docs/server-contract.md, "Comparing two servers")."""
    compare = commands.add_parser(
        "compare", help="ask two servers (or a server and cassettes, or laya:PATH) the same questions; compare",
        description="Send the same decisions to A and B (each a URL, a cassette directory, or laya:PATH for Laya in "
                    "this process) and compare every answer; exit 1 past the tolerance.")
    compare.add_argument("a", metavar="A")
    compare.add_argument("b", metavar="B")
    compare.add_argument("--cases", metavar="FILE.jsonl", default=None,
                         help='the decisions to send, one {"state", "questions", "expected"?} per line (default: '
                              "those recorded in a cassette side, else a built-in set)")
    compare.add_argument("--tolerance", type=float, default=None, metavar="X",
                         help="the largest probability deviation allowed (default: by the sides' precision, at "
                              "least their rounding step)")
    compare.add_argument("--min-accuracy", type=float, default=None, metavar="X",
                         help="with expected labels in --cases: fail a side whose accuracy is below X")
    compare.add_argument("--out", metavar="FILE.json", default=None, help="write every decision and figure as JSON")
    compare.add_argument("--api-key", default=None, metavar="KEY",
                         help="the servers' bearer token (default: LAYA_SERVED_API_KEY); never printed")


def _compare(options: argparse.Namespace) -> int:
    from pytest_laya.suites.compare import PROBES, Case, CompareError, compare_sides, open_side, read_cases

    where = f"{PROG} compare"
    if options.tolerance is not None and not options.tolerance >= 0:
        sys.stderr.write(f"{where}: --tolerance must be a number >= 0, got {options.tolerance!r}\n")
        return 2
    sides = []
    try:
        for spec in (options.a, options.b):
            sides.append(open_side(spec, api_key=options.api_key))
        if options.cases:
            cases = read_cases(Path(options.cases))
        else:
            brought = [found for found in (side.cases() for side in sides) if found is not None]
            cases = brought[0] if brought else [Case(state, questions, name=str(n))
                                                for n, (state, questions) in enumerate(PROBES, 1)]
        result = compare_sides(sides[0], sides[1], cases, tolerance=options.tolerance,
                               min_accuracy=options.min_accuracy)
    except CompareError as exc:
        sys.stderr.write(f"{where}: {exc}\n")
        return 2
    finally:
        for side in sides:
            side.close()
    for line in result.lines():
        print(line)
    if options.out:
        Path(options.out).write_text(json.dumps(result.to_json(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"every decision written to {options.out}")
    return 1 if result.problems() else 0


def _add_store_commands(commands: Any) -> None:
    """``store push DIR URL`` and ``store pull URL DIR`` (docs/teams.md, "Shared cassettes")."""
    store = commands.add_parser("store", help="copy cassettes to or from a shared store (fsspec URL)",
                                description="Copy pytest-laya cassettes between a directory and a shared store.")
    actions = store.add_subparsers(dest="action", metavar="push|pull", parser_class=_OneLineParser)
    actions.required = True
    push = actions.add_parser("push", help="copy every cassette under DIR to URL",
                              description="Copy every pytest-laya cassette under DIR to the store at URL, keyed by "
                                          "its path relative to DIR (run it with DIR the rootdir).")
    push.add_argument("directory", metavar="DIR")
    push.add_argument("url", metavar="URL")
    pull = actions.add_parser("pull", help="copy every cassette of URL into DIR",
                              description="Copy every pytest-laya cassette of the store at URL into DIR.")
    pull.add_argument("url", metavar="URL")
    pull.add_argument("directory", metavar="DIR")


def _store(options: argparse.Namespace) -> int:
    from pytest_laya.store import CassetteStore, StoreError, pull, push

    store = CassetteStore(options.url, writable=options.action == "push")
    directory = Path(options.directory)
    try:
        if options.action == "push":
            keys = push(directory, store)
            print(f"pushed {len(keys)} cassette(s) from {directory} to {store.shown}")
            return 0
        keys, skipped = pull(store, directory)
        print(f"pulled {len(keys)} cassette(s) from {store.shown} into {directory}")
        for key in skipped:
            print(f"  left out {key}: not a pytest-laya cassette")
        return 0
    except StoreError as exc:
        sys.stderr.write(f"{PROG} store {options.action}: {exc}\n")
        return 1


def _add_report_commands(commands: Any) -> None:
    """``report merge`` and ``report prune`` (docs/teams.md, "Split runs")."""
    report = commands.add_parser("report", help="join the JSON reports of a split run; prune from the result",
                                 description="Work with --laya-report files.")
    actions = report.add_subparsers(dest="action", metavar="merge|prune", parser_class=_OneLineParser)
    actions.required = True
    merge = actions.add_parser("merge", help="join shards' reports into one",
                               description="Join the --laya-report files of a split run's shards into one report.")
    merge.add_argument("reports", nargs="+", metavar="REPORT.json")
    merge.add_argument("--out", metavar="MERGED.json", default=None,
                       help="where to write the merged report (default: print it)")
    merge.add_argument("--html", metavar="OUT.html", default=None,
                       help="also write the merged report as one self-contained HTML page (pytest-laya[report])")
    prune = actions.add_parser("prune", help="delete the cassettes a merged report found no shard used",
                               description="Delete the cassettes no shard used, as a merged report lists them.")
    prune.add_argument("report", metavar="MERGED.json")
    prune.add_argument("--root", default=".", metavar="DIR",
                       help="the rootdir the report's paths are relative to (default: the current directory)")


def _report(options: argparse.Namespace) -> int:
    import json

    from pytest_laya.report import ReportError, merge_reports, read_report

    try:
        if options.action == "merge":
            merged = merge_reports([read_report(path) for path in options.reports], names=options.reports)
            text = json.dumps(merged, indent=2, sort_keys=True) + "\n"
            if options.html:
                from pytest_laya.report.html import render_html

                _write_atomically(Path(options.html), render_html(merged))
            if options.out:
                _write_atomically(Path(options.out), text)
                _say_merged(merged, options.out)
            else:
                sys.stdout.write(text)
            if options.html and options.out:
                print(f"HTML report: {options.html}")
            return 0
        return _prune(read_report(options.report), options.report, Path(options.root))
    except ReportError as exc:
        sys.stderr.write(f"{PROG} report: {exc}\n")
        return 2


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _say_merged(merged: dict[str, Any], out: str) -> None:
    from pytest_laya.plugin.run import CASSETTE_COUNTS
    from pytest_laya.plugin.summary import CASSETTE_WORDS, claimed_violations

    unused = merged["unused_cassettes"]
    counts = merged["cassettes"]
    # Counted as the run's summary counts them: against the spec each server is held to.
    print(f"merged {len(merged['merged_from'])} reports into {out}: {len(merged['tests'])} test records, "
          f"{claimed_violations(merged)} violations, "
          f"{len(merged['stale_cassettes'])} stale cassettes")
    print("cassettes: " + (", ".join(f"{counts[key]} {CASSETTE_WORDS[key]}" for key in CASSETTE_COUNTS
                                      if counts.get(key)) or "none used"))
    if unused is None:
        print("unused cassettes: not worked out: " + "; ".join(merged["unused_why"]))
    else:
        print(f"unused cassettes: {len(unused)}" + "".join(f"\n  {path}" for path in unused))


def _prune(report: dict[str, Any], name: str, root: Path) -> int:
    from pytest_laya.plugin.unused import prune

    unused = report.get("unused_cassettes")
    if unused is None:
        why = "; ".join(report.get("unused_why") or ["it lists no unused cassettes (null)"])
        sys.stderr.write(f"{PROG} report prune: {name} cannot say which cassettes are unused, so nothing was "
                         f"deleted: {why}\n")
        return 1
    deleted = prune(list(unused), root)
    print(f"pruned {len(deleted)} unused cassette(s)" + "".join(f"\n  {path}" for path in deleted))
    left = sorted(set(unused) - set(deleted))
    if left:
        print(f"{len(left)} listed cassette(s) were already gone or are not pytest-laya's, and were left alone:"
              + "".join(f"\n  {path}" for path in left))
    return 0


def _url_problem(url: str) -> str | None:
    """Why `url` is no server base URL (named ``URL``, as this command calls it), or None."""
    from pytest_laya.client.settings import base_url
    from pytest_laya.wire.errors import LayaError

    try:
        base_url(url, "URL")
    except LayaError as exc:
        return exc.summary
    return None


def pytest_arguments(url: str, *, spec: str = "auto", api_key: str | None = None,
                     extra: Sequence[str] = (), tolerance: float | None = None,
                     require_invariance: bool = False) -> list[str]:
    """The pytest command line `check` runs (with the key, if any: do not print it)."""
    args = [
        "--pyargs", SUITE,
        # auto: no --laya-spec, so the suite reads the server's claim.
        "--laya-mode=live", f"--laya-url={url}", *([f"--laya-spec={spec}"] if spec != "auto" else []),
        # The same run from any directory: no ini file, no cache, rootdir at the suite.
        "-c", os.devnull, "--rootdir", str(Path(__file__).resolve().parent / "suites"),
        # ...and whose header says what is checked (CHECK_PLUGIN), not that rootdir and ini file.
        "--no-header",
        "-p", "no:cacheprovider", "-p", "no:asyncio",
        # How the run speaks to a user of this command (its flags, its header).
        "-p", CHECK_PLUGIN,
        # Its own short summary (names and reasons, not paths into the installed suite).
        "-rN",  # = check_command.REPORT_CHARS
        # `python -m pytest_laya` imported the package before pytest could mark it for rewriting.
        "-W", "ignore:Module already imported so cannot be rewritten:pytest.PytestAssertRewriteWarning",
    ]
    if tolerance is not None:
        args.append(f"--laya-tolerance={tolerance!r}")
    if require_invariance:
        args.append("--laya-require-invariance")
    if api_key:
        args.append(f"--laya-api-key={api_key}")
    return args + list(extra)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    parser = _parser()
    if not argv:
        parser.error("say what to run: check URL")
    options = parser.parse_args(argv)
    if options.command == "report":
        return _report(options)
    if options.command == "store":
        return _store(options)
    if options.command == "compare":
        return _compare(options)
    if options.command == "proxy":
        from pytest_laya.plugin import proxy_command

        return proxy_command.main(options)
    problem = _url_problem(options.url)
    if problem:
        parser.error(problem)
    if options.tolerance is not None and not options.tolerance >= 0:
        parser.error(f"--tolerance must be a number >= 0, got {options.tolerance!r}")
    import pytest

    from pytest_laya.plugin.options import check_url

    try:  # here, so the message names this command's URL, not the --laya-url it hands pytest
        check_url(options.url.rstrip("/"), where="URL")
    except pytest.UsageError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return int(pytest.ExitCode.USAGE_ERROR)
    return int(pytest.main(pytest_arguments(options.url.rstrip("/"), spec=options.spec, api_key=options.api_key,
                                            extra=extra, tolerance=options.tolerance,
                                            require_invariance=options.require_invariance)))


if __name__ == "__main__":
    sys.exit(main())

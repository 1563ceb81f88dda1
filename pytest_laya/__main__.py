"""``python -m pytest_laya check URL``: the server contract against one server, in one command.

It runs ``pytest --pyargs pytest_laya.suites.server --laya-mode=live --laya-url URL`` in this
process and exits with pytest's status (0: every check passed or xfailed as a target gap; 1: a
check failed; 4: the URL cannot be reached). The run ignores the current directory's pytest
configuration (no addopts, no conftest.py, no cache written), so it reports the same anywhere.
Arguments after ``--`` go to pytest as they are (``-- -k health -v``). Without ``--spec`` (or
with ``--spec auto``) the server is held to the spec it claims: its Laya-Spec header, else
/health's ``spec``, else current; the summary says which and why.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["main", "pytest_arguments"]

PROG = "python -m pytest_laya"
USAGE = f"{PROG} check URL [--spec auto|current|target] [--api-key KEY] [-- PYTEST_ARGS...]"
SUITE = "pytest_laya.suites.server"
CHECK_PLUGIN = "pytest_laya.suites.check_command"


class _OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line: what is wrong, then the usage."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{PROG}: {message} (usage: {USAGE})\n")


def _parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(prog=PROG, description="pytest-laya's command line.")
    commands = parser.add_subparsers(dest="command", metavar="check", parser_class=_OneLineParser)
    commands.required = True
    check = commands.add_parser("check", help="run the HTTP contract (pytest_laya.suites.server) against a server",
                                usage=USAGE, description="Run the HTTP contract of a served Laya against URL; exit "
                                                         "with pytest's status.",
                                epilog="Arguments after -- go to pytest unchanged, e.g. -- -k health -v, -- -n 2, "
                                       "-- --laya-report report.json.")
    check.add_argument("url", metavar="URL", help="the server, e.g. http://127.0.0.1:8000")
    check.add_argument("--spec", choices=("auto", "current", "target"), default="auto",
                       help="the spec the server is held to (default auto: the one it claims in its Laya-Spec "
                            "header or /health, else current)")
    check.add_argument("--api-key", default=None, metavar="KEY",
                       help="the server's bearer token (default: LAYA_SERVED_API_KEY); never printed")
    return parser


def _url_problem(url: str) -> str | None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        shown = url if "@" not in url else "<a URL with credentials>"
        return f"URL must be an http(s) URL such as http://127.0.0.1:8000, got {shown!r}"
    return None


def pytest_arguments(url: str, *, spec: str = "auto", api_key: str | None = None,
                     extra: Sequence[str] = ()) -> list[str]:
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
    problem = _url_problem(options.url)
    if problem:
        parser.error(problem)
    import pytest

    return int(pytest.main(pytest_arguments(options.url.rstrip("/"), spec=options.spec, api_key=options.api_key,
                                            extra=extra)))


if __name__ == "__main__":
    sys.exit(main())

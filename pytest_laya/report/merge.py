"""Join the JSON reports of a split run (shards of pytest-split, a CI matrix, ``-k`` per job).

The merged report has the same shape as one run's (`--laya-report`), so it can be merged again,
pruned from and rendered, plus ``merged_from`` (the files joined) and ``unused_why`` (why the
unused cassettes could not be worked out, when they could not). Cassettes no shard used are
worked out only when the shards together ran the whole suite: each shard ran in replay or
record mode, selected its part only by deselection (``-k``, ``-m``, ``--deselect``,
pytest-split), was not stopped early, and every test one shard deselected ran in another.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_laya.route.modes import Mode
from pytest_laya.route.spec_check import LISTED_VIOLATIONS

__all__ = ["ReportError", "merge_reports", "read_report", "violations_of", "LISTED_VIOLATIONS"]
#: Selections that deselect tests (each shard's part); anything else leaves tests uncollected.
BY_DESELECTION = {"-k", "-m", "--deselect"}


class ReportError(ValueError):
    """A report that cannot be read or merged; the message says which file and what to do."""


def read_report(path: str | Path) -> dict[str, Any]:
    """A JSON report written by ``--laya-report`` (or by a merge), checked for its shape."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ReportError(f"{path}: no such report; write one with pytest --laya-report {path}") from None
    except OSError as exc:
        raise ReportError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ReportError(f"{path} is not JSON ({exc}); is it a pytest-laya report (--laya-report)?") from None
    if not isinstance(data, dict) or not isinstance(data.get("cassettes"), dict) or not isinstance(data.get("tests"), list):
        raise ReportError(f"{path} is not a pytest-laya report: it lacks 'cassettes' and 'tests' "
                          f"(write one with pytest --laya-report PATH)")
    return data


def violations_of(report: Mapping[str, Any]) -> list[dict[str, str]]:
    """Every violation in a report: those that failed a test (with its server), then those listed only."""
    found = [{"test": str(record.get("test")), "server": str(record.get("server")), "message": str(message)}
             for record in report.get("tests") or [] for message in record.get("violations") or []]
    for line in (report.get("notes") or {}).get(LISTED_VIOLATIONS, []):
        test, _, rest = str(line).partition(": ")
        found.append({"test": test, "server": rest.split(" (", 1)[0], "message": str(line)})
    return found


def _unique(items: Iterable[Any]) -> list[Any]:
    seen: list[Any] = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen


def _unused(reports: Sequence[Mapping[str, Any]], names: Sequence[str]) -> tuple[list[str] | None, list[str]]:
    """(cassettes no shard used, or None; why not, when None)."""
    why: list[str] = []
    ran: set[str] = set()
    deselected: set[str] = set()
    for name, report in zip(names, reports):
        scope = report.get("scope")
        if not _accounts_cassettes(report.get("mode")):
            why.append(f"{name} ran in {report.get('mode')} mode (cassettes are read in replay and record)")
        if not isinstance(scope, dict) or report.get("cassette_files") is None:
            why.append(f"{name} does not say which tests it ran and which cassettes it saw "
                       f"(write it with this pytest-laya's --laya-report)")
            continue
        for reason in scope.get("partial") or []:
            why.append(f"{name}: {reason}")
        for flag in scope.get("selection") or []:
            if flag not in BY_DESELECTION:
                why.append(f"{name} selected its tests with {flag}, so tests it did not collect are unknown "
                           f"(split with -k, -m, --deselect or pytest-split instead)")
        ran.update(scope.get("ran") or [])
        deselected.update(scope.get("deselected") or [])
    not_run = sorted(deselected - ran)
    if not_run:
        shown = ", ".join(not_run[:5]) + (f" and {len(not_run) - 5} more" if len(not_run) > 5 else "")
        why.append(f"{len(not_run)} test(s) ran in no shard: {shown}")
    if why:
        return None, why
    seen = {path for report in reports for path in report.get("cassette_files") or []}
    used = {path for report in reports for path in report.get("used_cassettes") or []}
    return sorted(seen - used), []


def merge_reports(reports: Sequence[Mapping[str, Any]], names: Sequence[str] | None = None) -> dict[str, Any]:
    """One report from the reports of a split run's shards (`names` say which file each came from)."""
    from pytest_laya.specs.conformance import Conformance

    if not reports:
        raise ReportError("no reports to merge: give the JSON reports of each shard (pytest --laya-report PATH)")
    names = list(names) if names is not None else [f"report {n}" for n in range(1, len(reports) + 1)]
    modes = _unique(report.get("mode") for report in reports)
    counts: dict[str, int] = {}
    servers: dict[str, str] = {}
    notes: dict[str, list[str]] = {}
    conformance = Conformance()
    for name, report in zip(names, reports):
        for key, count in (report.get("cassettes") or {}).items():
            counts[key] = counts.get(key, 0) + int(count)
        servers.update(report.get("servers") or {})
        try:
            conformance.merge_rows(list(report.get("conformance") or []))
        except (ValueError, KeyError, TypeError) as exc:
            raise ReportError(f"{name}: its conformance table cannot be merged ({exc})") from None
        for section, lines in (report.get("notes") or {}).items():
            kept = notes.setdefault(section, [])
            kept.extend(line for line in lines if line not in kept)
    unused, unused_why = _unused(reports, names)
    tests = sorted((record for report in reports for record in report.get("tests") or []),
                   key=lambda record: (str(record.get("test")), str(record.get("server"))))
    verify = [result for report in reports for result in report.get("verify") or []]
    stale = _unique(record for report in reports for record in report.get("stale_cassettes") or [])
    ran = sorted({test for report in reports for test in (report.get("scope") or {}).get("ran") or []})
    deselected = {test for report in reports for test in (report.get("scope") or {}).get("deselected") or []}
    return {
        "merged_from": [str(name) for name in names],
        "mode": modes[0] if len(modes) == 1 else "/".join(str(mode) for mode in modes),
        "servers": dict(sorted(servers.items())),
        "cassettes": counts,
        "conformance": conformance.rows(),
        "unused_cassettes": unused,
        "unused_why": unused_why,
        "pruned_cassettes": sorted({p for report in reports for p in report.get("pruned_cassettes") or []}),
        "tests": tests,
        "verify": verify or None,
        "notes": notes,
        "stale_cassettes": sorted(stale, key=lambda record: (str(record.get("cassette")), str(record.get("kind")))),
        "cassette_files": sorted({p for report in reports for p in report.get("cassette_files") or []}),
        "used_cassettes": sorted({p for report in reports for p in report.get("used_cassettes") or []}),
        "scope": {"ran": ran, "deselected": sorted(deselected - set(ran)), "selection": [],
                  "partial": [line for line in unused_why]},
    }


def _accounts_cassettes(mode: object) -> bool:
    """Whether a report's run, in `mode`, saw which cassettes its tests used."""
    return isinstance(mode, str) and mode in Mode.values() and Mode(mode).accounts_cassettes

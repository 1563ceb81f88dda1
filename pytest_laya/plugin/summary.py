"""What a run reports: the terminal section, the JSON report, and the end-of-run conclusions.

After a run of the whole suite (no -k/-m, no paths or node ids but the rootdir or testpaths,
nothing deselected, no --lf/--ff, no collection error, not stopped early) in replay or record
mode, cassettes that pytest-laya wrote and no test used are listed as unused, in the terminal
and as ``unused_cassettes`` in the JSON report (null when not computed). That never fails the run.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from pytest_laya.plugin.interrupts import WATCH
from pytest_laya.plugin.run import CASSETTE_COUNTS, WORKEROUTPUT_KEY, LayaRun
from pytest_laya.plugin.unused import cassette_directories, find_unused, prune, selection_problems

#: How each count reads in the terminal summary.
CASSETTE_WORDS = {"played": "played", "missing": "missing (replay found no file)", "recorded": "recorded",
                  "appended": "appended", "unchanged": "unchanged (file untouched)",
                  "kept": "kept (test failed; the old file stays)",
                  "discarded": "discarded (test failed; nothing saved)",
                  "broken": "broken (replay could not read the file)", "unsaved": "not saved (the write failed)",
                  "fetched": "fetched from the store", "stored": "written to the store"}

#: Notes that inform rather than ask for action: shown under -v (and always in the report).
INFORMATIONAL_NOTES = ("gaps", "not checked: requests the specs do not describe")

__all__ = ["claimed_violations", "conclude", "summary", "write_terminal_summary"]


def summary(run: LayaRun) -> dict[str, Any]:
    """The JSON report's document."""
    return {
        "mode": run.mode.value,
        "servers": run.servers,
        "cassettes": dict(run.cassettes),
        "conformance": run.conformance.rows() if run.conformance else [],
        "unused_cassettes": run.unused_cassettes,
        "pruned_cassettes": list(run.pruned),
        "tests": sorted(run.tests, key=lambda record: record["test"]),
        "verify": run.verify.results if run.verify else None,
        "notes": {section: list(lines) for section, lines in run.notes.items()},
        "stale_cassettes": sorted(run.stale, key=lambda record: (record["cassette"], record["kind"])),
        **run.shard,
    }


def conclude(run: LayaRun, session: pytest.Session, exitstatus: int) -> None:
    """At the end of the session: hand a worker's part to xdist, or work out unused cassettes and
    write the JSON report."""
    config = session.config
    if session.shouldfail or session.shouldstop or exitstatus == pytest.ExitCode.INTERRUPTED:
        run.partial.append("stopped early")
    if hasattr(config, "workerinput"):  # an xdist worker: the controller reports
        config.workeroutput[WORKEROUTPUT_KEY] = run.export()  # type: ignore[attr-defined]
        return
    watcher = config.stash.get(WATCH, None)
    if watcher is not None:
        watcher.fold_unreported()  # xdist workers interrupted before they sent their totals
    if run.ran < run.collected:
        run.partial.append(f"{run.collected - run.ran} of {run.collected} collected tests did not run")
    run.unused_cassettes = None
    if run.mode.accounts_cassettes and not run.partial and not selection_problems(config):
        run.unused_cassettes = find_unused(run, config.rootpath)
        if run.prune:
            run.pruned = prune(run.unused_cassettes, config.rootpath, families=run.families,
                               within=cassette_directories(run))
            kept = sorted(set(run.unused_cassettes) - set(run.pruned))
            if kept:
                run.note("pruning", f"--laya-prune kept {len(kept)} unused cassette(s) of parametrised tests that "
                                    f"still run ({', '.join(kept[:5])}{', ...' if len(kept) > 5 else ''}): a "
                                    f"parameter list may depend on the environment; delete them by hand if they "
                                    f"are gone for good")
    elif run.prune:
        reasons = run.partial + selection_problems(config) or [f"--laya-mode={run.mode}"]
        run.note("pruning", f"--laya-prune deleted nothing: it needs a whole-suite replay or record run "
                            f"({'; '.join(reasons)})")
    if run.notes.get("errors") and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if run.report is not None:
        from pytest_laya.plugin.split import shard_scope

        run.shard = shard_scope(run, config)
        run.report.parent.mkdir(parents=True, exist_ok=True)
        tmp = run.report.with_name(run.report.name + ".tmp")
        tmp.write_text(json.dumps(summary(run), indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, run.report)
    if run.report_html is not None:
        write_html_report(run, config)


def write_html_report(run: LayaRun, config: pytest.Config) -> None:
    """--laya-report-html: the report as one self-contained page (`pytest_laya.report.html`)."""
    from pytest_laya.plugin.split import shard_scope
    from pytest_laya.report.html import render_html

    assert run.report_html is not None
    if not run.shard:
        run.shard = shard_scope(run, config)
    run.report_html.parent.mkdir(parents=True, exist_ok=True)
    tmp = run.report_html.with_name(run.report_html.name + ".tmp")
    tmp.write_text(render_html(summary(run)), encoding="utf-8")
    os.replace(tmp, run.report_html)


def claimed_violations(report: dict[str, Any]) -> int:
    """Violations of the spec each server is held to (the counts against the other spec inform only)."""
    held = report["servers"]
    return sum(int(row["violations"]) for row in report["conformance"] if held.get(row["server"]) == row["spec"])


def write_terminal_summary(tr: Any, run: LayaRun) -> None:
    """The ``pytest-laya`` section of the terminal summary (nothing when the run saw no Laya).

    Quiet by default: one line (mode, cassettes, violations) and what asks for action. The
    servers, the conformance table and the informational notes come with ``-v`` (and always in
    ``--laya-report``), and in a server-contract run, whose point they are.
    """
    report = summary(run)
    unused = report["unused_cassettes"] or []
    if not report["servers"] and not any(report["cassettes"].values()) and not unused and not run.notes:
        return
    tr.section("pytest-laya")
    detailed = tr.config.option.verbose > 0 or "server contract" in run.notes
    _write_head(tr, run, report, detailed)
    _write_notes(tr, run, report, detailed)
    if run.verify:
        for number, line in enumerate(run.verify.lines()):
            tr.line(line, red=number > 0)
    _write_cassette_advice(tr, report["cassettes"])
    if run.pruned:
        tr.line(f"pruned {len(run.pruned)} unused cassette(s):", yellow=True)
        for path in run.pruned:
            tr.line(f"  {path}")
        unused = []
    if unused:
        tr.line(f"unused cassettes: {len(unused)} (delete them or run the tests that own them)", yellow=True)
        for path in unused:
            tr.line(f"  {path}")


def _write_head(tr: Any, run: LayaRun, report: dict[str, Any], detailed: bool) -> None:
    """The mode and the cassettes' outcomes (and, detailed, the servers with their specs)."""
    c = report["cassettes"]
    counted = [f"{c[key]} {CASSETTE_WORDS[key]}" for key in CASSETTE_COUNTS if c.get(key)]
    if run.verify and run.verify.results:  # verify reads each test's cassette and replays it live
        checked = len(run.verify.results)
        counted.append(f"{checked} verified against the live server (below)")
    if not detailed:
        tr.line(f"mode: {run.mode}; cassettes: {', '.join(counted) or 'none used'}; "
                f"violations: {claimed_violations(report)} (-v for the conformance table)")
    else:
        tr.line(f"mode: {run.mode}; servers: {', '.join(f'{k} ({v} spec)' for k, v in run.servers.items()) or 'none'}")
        tr.line(f"cassettes: {', '.join(counted) or 'none used'}")


def _write_notes(tr: Any, run: LayaRun, report: dict[str, Any], detailed: bool) -> None:
    """The notes by section (informational ones only when detailed), then the conformance table."""
    for section, lines in run.notes.items():  # before the conformance table, which ends the section
        if not detailed and section in INFORMATIONAL_NOTES:
            continue
        tr.line(f"{section}:")
        for line in lines:
            tr.line(f"  {line}")
    if not detailed:
        return
    if report["conformance"]:
        tr.line("conformance (each server's responses, against each spec):")
    for row in report["conformance"]:
        tr.line(f"  {row['server']:<40} {row['spec']:<8} operations {row['operations_met']}/{row['operations_seen']}, "
                f"headers {row['headers_met']}/{row['headers_seen']}, "
                f"{row['violations']} violations in {row['exchanges']} responses")


def _write_cassette_advice(tr: Any, c: dict[str, int]) -> None:
    """What to do about cassettes kept, discarded, broken, unsaved or missing."""
    if c.get("kept"):
        tr.line("a test failed while recording: its old cassette was kept as it was; fix the test and record again")
    if c.get("discarded"):
        tr.line("a test failed while recording and had no cassette yet: nothing was saved; fix it and record again")
    if c.get("broken"):
        tr.line(f"{c['broken']} cassette(s) could not be read: each test's error says why and what to do "
                f"(--laya-record=missing replaces a broken file)", red=True)
    if c.get("unsaved"):
        tr.line(f"{c['unsaved']} recording(s) could not be saved (see each test's error)", red=True)
    if c.get("missing"):
        tr.line(f"{c['missing']} test(s) asked for a cassette that does not exist: record them with --laya-record=missing",
                red=True)

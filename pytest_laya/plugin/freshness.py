"""--laya-max-age and --laya-identity-check: a replayed test whose cassette is stale fails (or,
with --laya-max-age-warn, warns) before it runs, naming the file and the command that records
it again. Every stale cassette is listed in the summary and as ``stale_cassettes`` in the report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_laya.plugin.run import LayaRun

__all__ = ["STALE_SECTION", "check_freshness", "shown_path"]

STALE_SECTION = "stale cassettes"


def shown_path(path: Path, root: Path) -> str:
    """`path` as the report names it: relative to the rootdir when it is below it."""
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def _live_identities(run: LayaRun, checkpoint: str | None) -> list[Any] | None:
    from pytest_laya.servers.handle import ServerHandle, ServerKind

    assert run.url is not None
    health = run.health_of(ServerHandle(url=run.url, kind=ServerKind.LIVE, api_key=run.api_key))
    if health is None:
        return None
    names: list[str | None] = list(health.loaded) or [None]
    return [identity for name in names if (identity := health.identity_for(name, repo=checkpoint)) is not None]


def check_freshness(request: pytest.FixtureRequest, run: LayaRun, path: Path) -> None:
    """Before a replay from `path`: fail or warn if the cassette is older than --laya-max-age, or
    was recorded from weights the --laya-identity-check server no longer serves."""
    if (run.max_age is None and not run.identity_check) or not path.is_file():
        return
    from pytest_laya.cassettes.freshness import Staleness, age_finding, identity_finding
    from pytest_laya.cassettes.persist import recorded_provenance
    from pytest_laya.wire.urls import redact_url

    provenance = recorded_provenance(path) or {}
    findings: list[Staleness | None] = []
    if run.max_age is not None:
        findings.append(age_finding(provenance, run.max_age))
    if run.identity_check:
        recorded = provenance.get("identity")
        checkpoint = recorded.get("checkpoint") if isinstance(recorded, dict) else None
        server = redact_url(run.url or "")
        live = _live_identities(run, checkpoint if isinstance(checkpoint, str) else None)
        if live is None:
            pytest.fail(f"--laya-identity-check could not read /health of {server}: start the server, "
                        f"fix --laya-url, or leave out --laya-identity-check", pytrace=False)
        found = identity_finding(provenance, live, server=server)
        if found is False:
            run.note("identity check", f"not compared: {shown_path(path, request.config.rootpath)} names no "
                                       f"checkpoint it was recorded from")
        elif isinstance(found, Staleness):
            findings.append(found)
    shown = shown_path(path, request.config.rootpath)
    # Under a limit, the record command carries it: an unchanged re-record keeps its old date otherwise.
    limit = f" --laya-max-age {run.max_age}" if run.max_age is not None else ""
    rerecord = "pytest " + _quoted(request.node.nodeid) + " --laya-record" + limit + " --laya-url " + (
        redact_url(run.url) if run.url else "URL")
    messages = []
    for finding in findings:
        if finding is None:
            continue
        message = f"cassette {shown} {finding.reason}: record it again with {rerecord}"
        messages.append(message)
        run.stale.append({"test": request.node.nodeid, "cassette": shown, **finding.to_json()})
        run.note(STALE_SECTION, f"{shown}: {finding.reason}")
    if not messages:
        return
    run.used_cassettes.add(path)  # stale, but this test's: never an unused cassette
    if run.max_age_warn:
        for message in messages:
            request.node.warn(pytest.PytestWarning(message))
        return
    pytest.fail("\n".join(messages) + "\n(--laya-max-age-warn warns instead of failing)", pytrace=False)


def _quoted(nodeid: str) -> str:
    import shlex

    return shlex.quote(nodeid)

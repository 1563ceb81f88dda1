"""`--laya-mode=verify`: run live while the cassette is kept aside, and compare every answer;
and re-recording's own comparison, old file against new (`changed_answers`).

The live exchanges are captured by a record-mode cassette that is never saved, so they are
scrubbed and normalised exactly as a re-recording would store them; drift fails the test at
teardown with the differences and the command that records the cassette again.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from pytest_laya.plugin.run import LayaRun

__all__ = ["changed_answers", "shown_path", "verify_route"]


def _rerecord_command(request: pytest.FixtureRequest, run: LayaRun) -> str:
    from pytest_laya.wire.urls import redact_url

    invoked = Path(request.config.invocation_params.dir)
    test = os.path.relpath(request.node.path, invoked) if Path(request.node.path).is_relative_to(invoked) \
        else str(request.node.path)
    test += "::" + request.node.nodeid.partition("::")[2] if "::" in request.node.nodeid else ""
    command = f"pytest '{test}' --laya-record" + (f" --laya-url {redact_url(run.url)}" if run.url else "")
    if request.config.option.laya_cassette_dir:
        command += f" --laya-cassette-dir {request.config.option.laya_cassette_dir}"
    return command


def verify_route(request: pytest.FixtureRequest, run: LayaRun, route: Any) -> Any:
    """Compare what the test's live run captured with its cassette; the `CassetteVerification`."""
    from pytest_laya.cassettes.verify import verify_interactions
    from pytest_laya.wire.urls import redact_url

    assert route.cassette_path is not None and route.handle is not None
    path = route.cassette_path
    invoked = Path(request.config.invocation_params.dir)
    shown = os.path.relpath(path, invoked) if path.is_relative_to(invoked) else str(path)
    result = verify_interactions(route.recorded or [], list(route.handle.cassette.data), path=shown,
                                 rerecord=_rerecord_command(request, run), server=redact_url(route.server.url),
                                 tolerance=run.verify_tolerance, missing=route.recorded is None)
    run.verifications().add(result)
    return result


def changed_answers(run: LayaRun, route: Any) -> list[str]:
    """What re-recording changed, per pointer, for the summary (a refresh that can be reviewed)."""
    from pytest_laya.cassettes.verify import verify_interactions

    handle = route.handle
    assert handle is not None and route.cassette_path is not None
    if not route.cassette_path.is_file():
        return []
    from pytest_laya.cassettes import laya_vcr

    old = laya_vcr(record=False, cassette_dir=None, api_key=run.api_key, strict=False).open(route.cassette_path)
    shown = shown_path(route.cassette_path)
    result = verify_interactions(list(old.cassette.data), list(handle.cassette.data), path=shown, rerecord="",
                                 server=run.server_label(route.server), tolerance=0.0)
    changed = [check for check in result.checks if not check.matches]
    if not changed and len(result.checks) == len(old.cassette.data):
        return []
    lines = [f"{shown}: {len(changed)} of {len(result.checks)} interactions changed"]
    for check in changed[:5]:
        lines.append(f"  {check.line()}")
    for line in lines:
        run.note("re-recorded cassettes whose answers changed", line)
    return lines


def shown_path(path: Path) -> str:
    try:
        return path.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return path.as_posix()

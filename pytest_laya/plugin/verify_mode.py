"""`--laya-mode=verify`: run live while the cassette is kept aside, and compare every answer
(re-recording's own comparison, old file against new, is `pytest_laya.route.changes`).

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

__all__ = ["verify_route"]


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

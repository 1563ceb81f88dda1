"""Which server a test talks to, how the reference server is started, and the spec check.

`choose_server` is `laya_server`'s rule: the marker's ``server=``, else the mode (replay: the
cassette's recorded server, no socket; live/record/verify: ``--laya-url``; fake: the session's
fake). The reference server is imported here only, lazily, so nothing else of the kit loads it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_laya.plugin.cassette_fixture import cassette_file, cassette_location
from pytest_laya.plugin.markers import marker_options
from pytest_laya.plugin.run import LayaRun

if TYPE_CHECKING:  # pragma: no cover
    from pytest_laya.servers.handle import ServerHandle

__all__ = ["choose_server", "reference_server", "spec_observer"]

#: How long the reference server may take to load its checkpoint and warm up.
REFERENCE_READY_TIMEOUT_S = 120.0


def choose_server(request: pytest.FixtureRequest, run: LayaRun) -> ServerHandle:
    from pytest_laya.servers.handle import REPLAY_URL, ServerHandle

    wanted = marker_options(request.node).get("server")
    if wanted == "reference":
        return request.getfixturevalue("laya_reference_server")
    if wanted == "fake" or (wanted is None and run.mode == "fake"):
        fake = request.getfixturevalue("_laya_session_fake")
        return ServerHandle(url=fake.url, kind="fake", spec="target")
    if run.mode == "replay" and wanted is None:
        # Held to the spec its cassette was recorded under, unless --laya-spec says otherwise.
        from pytest_laya.cassettes.persist import recorded_provenance

        provenance = recorded_provenance(cassette_file(*cassette_location(request.node, run))) or {}
        recorded_spec = provenance.get("spec") if provenance.get("spec") in ("current", "target") else None
        source = provenance.get("server") if isinstance(provenance.get("server"), str) else None
        return ServerHandle(url=run.url or REPLAY_URL, kind="replay",
                            spec=run.spec or recorded_spec or "current", recorded_from=source)
    if not run.url:
        pytest.fail(f"server={wanted or 'live'} needs --laya-url URL")
    return ServerHandle(url=run.url, kind="live", spec=run.spec or "current", api_key=run.api_key)


def reference_server(run: LayaRun) -> Iterator[ServerHandle]:
    """The reference server on the tiny checkpoint (or ``--laya-checkpoint``), on a free port."""
    from pytest_laya.servers.handle import ServerHandle
    from pytest_laya.servers.readiness import NotReady, wait_ready

    try:
        from reference_server.app import create_app
        from reference_server.engine import LayaEngine
        from reference_server.serving import ServerThread
        from reference_server.tiny_checkpoint import embedded_checkpoint_dir
    except ImportError as exc:  # pragma: no cover - depends on the install
        pytest.fail(f"laya_reference_server needs the reference extra (pip install 'pytest-laya[reference]'): {exc}")
    source = run.checkpoint or str(embedded_checkpoint_dir())
    engine = LayaEngine({"tiny" if not run.checkpoint else Path(source).name or "model": source})
    with ServerThread(create_app(engine)) as thread:
        try:
            wait_ready(thread.url, timeout_s=REFERENCE_READY_TIMEOUT_S, what="the reference server")
        except NotReady as exc:
            pytest.fail(str(exc), pytrace=False)
        yield ServerHandle(url=thread.url, kind="reference", spec="target")


def spec_observer(run: LayaRun, server: Any, cassette: Any = None) -> Callable[[Any], None]:
    """An ``on_exchange`` callback for a client talking to `server`, as the fixtures give theirs
    (`LayaRun.spec_observer`). Suites built on the plugin feed their own clients through it."""
    return run.spec_observer(server, cassette)

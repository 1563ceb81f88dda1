"""The reference server for `laya_reference_server`, and `spec_observer`, the spec check's seam.

The reference server is imported here only, lazily, so nothing else of the kit loads it (and a
replay run never loads torch).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_laya.plugin.run import LayaRun

if TYPE_CHECKING:  # pragma: no cover
    from pytest_laya.servers.handle import ServerHandle

__all__ = ["reference_server", "spec_observer"]

#: How long the reference server may take to load its checkpoint and warm up.
REFERENCE_READY_TIMEOUT_S = 120.0


def reference_server(run: LayaRun) -> Iterator[ServerHandle]:
    """The reference server on the tiny checkpoint (or ``--laya-checkpoint``), on a free port."""
    from pytest_laya.servers.handle import ServerHandle, ServerKind
    from pytest_laya.servers.readiness import NotReady, wait_ready

    try:
        from pytest_laya_reference.app import create_app
        from pytest_laya_reference.engine import LayaEngine
        from pytest_laya_reference.serving import ServerThread
        from pytest_laya_reference.tiny_checkpoint import embedded_checkpoint_dir
    except ImportError as exc:  # pragma: no cover - depends on the install
        pytest.fail(f"laya_reference_server needs the reference extra (pip install 'pytest-laya[reference]'): {exc}")
    source = run.checkpoint or str(embedded_checkpoint_dir())
    engine = LayaEngine({"tiny" if not run.checkpoint else Path(source).name or "model": source})
    with ServerThread(create_app(engine)) as thread:
        try:
            wait_ready(thread.url, timeout_s=REFERENCE_READY_TIMEOUT_S, what="the reference server")
        except NotReady as exc:
            pytest.fail(str(exc), pytrace=False)
        yield ServerHandle(url=thread.url, kind=ServerKind.REFERENCE, spec="target")


def spec_observer(run: LayaRun, server: Any, cassette: Any = None) -> Callable[[Any], None]:
    """An ``on_exchange`` callback for a client talking to `server`, as the fixtures give theirs
    (`LayaRun.spec_observer`). Suites built on the plugin feed their own clients through it."""
    return run.spec_observer(server, cassette)

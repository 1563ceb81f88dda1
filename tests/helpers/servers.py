"""The one way the kit's tests start a reference server: on a free loopback port, ready."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from pytest_laya.servers import wait_ready

READY_TIMEOUT_S = 120.0


@contextlib.contextmanager
def serve_app(app: Any) -> Iterator[Any]:
    """Serve a reference-server app (`reference_server.app.create_app(...)`) until the block ends."""
    from reference_server.serving import ServerThread

    with ServerThread(app) as thread:
        wait_ready(thread.url, timeout_s=READY_TIMEOUT_S, what="the reference server")
        yield thread


@contextlib.contextmanager
def reference_server(settings: Any = None, *, models: Mapping[str, str] | None = None,
                     **engine_options: Any) -> Iterator[Any]:
    """Real Laya on the embedded tiny checkpoint (as ``tiny``, or each name in `models`) behind
    the reference server with `settings` (`reference_server.settings.ServerSettings`)."""
    pytest.importorskip("laya", reason="needs the reference extra: pip install -e '.[reference]'")
    from reference_server.app import create_app
    from reference_server.engine import LayaEngine
    from reference_server.tiny_checkpoint import embedded_checkpoint_dir

    tiny = str(embedded_checkpoint_dir())
    engine = LayaEngine(dict(models) if models else {"tiny": tiny}, **engine_options)
    with serve_app(create_app(engine, settings)) as thread:
        yield thread

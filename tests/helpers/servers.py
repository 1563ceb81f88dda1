"""The one way the kit's tests start a reference server: on a free loopback port, ready; and a
loopback server that never says a word."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from pytest_laya.servers import wait_ready

READY_TIMEOUT_S = 120.0


@contextlib.contextmanager
def serve_app(app: Any) -> Iterator[Any]:
    """Serve a reference-server app (`pytest_laya_reference.app.create_app(...)`) until the block ends."""
    from pytest_laya_reference.serving import ServerThread

    with ServerThread(app) as thread:
        wait_ready(thread.url, timeout_s=READY_TIMEOUT_S, what="the reference server")
        yield thread


@contextlib.contextmanager
def reference_server(settings: Any = None, *, models: Mapping[str, str] | None = None,
                     **engine_options: Any) -> Iterator[Any]:
    """Real Laya on the embedded tiny checkpoint (as ``tiny``, or each name in `models`) behind
    the reference server with `settings` (`pytest_laya_reference.settings.ServerSettings`)."""
    pytest.importorskip("laya", reason="needs the reference extra: pip install -e '.[reference]'")
    from pytest_laya_reference.app import create_app
    from pytest_laya_reference.engine import LayaEngine
    from pytest_laya_reference.tiny_checkpoint import embedded_checkpoint_dir

    tiny = str(embedded_checkpoint_dir())
    engine = LayaEngine(dict(models) if models else {"tiny": tiny}, **engine_options)
    with serve_app(create_app(engine, settings)) as thread:
        yield thread


#: The API key every module gives a keyed laya-serve, so that they share one process: the
#: recording suite's (cassettes/recording/recording_servers.py SERVER_KEY), which
#: tests/cassettes/test_shipped_cassettes.py uses. A canary: tests assert it never shows in output.
LAYA_SERVE_KEY = "sk-cassette-canary-9d2f61c4"


class LayaServes:
    """This pytest process's laya-serve 0.4.15 processes on the tiny checkpoint, one per
    configuration, each started on first use and stopped by `close()` (the session's end).

    A laya-serve start costs ~5 s of CPU (torch, laya and the checkpoint load in a new process)
    and its answers depend on nothing a test does, so every module shares them rather than
    starting its own. Tests of the launcher's own start and stop start their own.
    """

    def __init__(self) -> None:
        self._started: dict[tuple[bool, str | None], Any] = {}
        self._stack = contextlib.ExitStack()

    def __call__(self, *, jev_strict: bool = False, api_key: str | None = None) -> Any:
        """The running laya-serve with ``LAYA_JEV_STRICT`` as `jev_strict` and key `api_key`."""
        config = (jev_strict, api_key)
        if config not in self._started:
            pytest.importorskip("laya", reason="needs the reference extra (laya[serve])")
            from pytest_laya.servers.laya_serve import LayaServeProcess
            from pytest_laya_reference.tiny_checkpoint import embedded_checkpoint_dir

            server = LayaServeProcess(embedded_checkpoint_dir(), api_key=api_key, jev_strict=jev_strict,
                                      startup_timeout_s=READY_TIMEOUT_S)
            self._started[config] = self._stack.enter_context(server)
        return self._started[config]

    def close(self) -> None:
        self._stack.close()


@contextlib.contextmanager
def silent_server() -> Iterator[int]:
    """A loopback port (yielded) whose server accepts connections and never reads or writes.

    Its receive buffer is small, so a large request stalls soon; nothing is answered, so a TLS
    handshake never completes. The connections close when the block ends.
    """
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # inherited by accepted sockets
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        listener.close()

"""The one way the kit's tests start a reference server: on a free loopback port, ready; and a
loopback server that never says a word."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import pathlib
import signal
import socket
import ssl
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from pytest_laya.servers import wait_ready

READY_TIMEOUT_S = 120.0

#: `verify=` for an httpx call to one of the tests' plain-http loopback servers: without it httpx
#: builds a verifying context for every call, loading certifi's CA bundle (about 25 ms of CPU, most
#: of what a probe every 50-100 ms costs), which a plain-http request never uses. It trusts nothing,
#: so a request that did reach TLS would be refused, never accepted.
PLAIN_HTTP = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def plain_http(method: str, url: str, **kwargs: Any) -> Any:
    """``httpx.request(method, url, **kwargs)`` to a plain-http loopback server, on a fresh
    connection as httpx's own, without loading the CA bundle (`PLAIN_HTTP`)."""
    import httpx

    return httpx.request(method, url, verify=PLAIN_HTTP, **kwargs)


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


#: The environment the suite's shared laya-serves run with. By default libgomp's threads spin
#: after each parallel region, waiting for the next, and on a busy machine (as every run of the
#: suite's three workers on two cores is) take the cores from the processes sending the requests:
#: a server contract run over laya-serve at load 3.7 took 23-26 s of wall, with PASSIVE 6.5-6.8 s.
#: The answers are the same: the wait policy is not the arithmetic. Tests of laya-serve's own
#: launcher start it as it is.
QUIET_OPENMP = {"OMP_WAIT_POLICY": "PASSIVE"}


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
                                      startup_timeout_s=READY_TIMEOUT_S, extra_env=QUIET_OPENMP)
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


class SharedLayaServes:
    """`LayaServes` for the xdist workers of one run: one laya-serve per configuration for them
    all, not one per worker.

    `registry_dir` is the run's shared temporary directory (the controller's basetemp). Under a
    file lock there, the first worker to ask for a configuration starts it and records its port
    and pid; the others reuse it. Each worker records itself as a user; `close()` (that worker's
    session end) removes it, and the last user stops the server. `stop_leftovers()` (the
    controller's session end) stops whatever a worker that died or was interrupted left running.
    """

    REGISTRY = "laya-serves.json"

    def __init__(self, registry_dir: pathlib.Path, worker: str) -> None:
        self._dir = registry_dir
        self._worker = worker
        self._mine: dict[str, SharedLayaServe] = {}
        self._started: list[Any] = []  # the LayaServeProcess objects this worker started

    def __call__(self, *, jev_strict: bool = False, api_key: str | None = None) -> SharedLayaServe:
        # The key's digest, not the key: the registry is a file.
        digest = hashlib.sha256(api_key.encode()).hexdigest()[:16] if api_key is not None else None
        key = f"strict={jev_strict} key={digest}"
        if key in self._mine:
            return self._mine[key]
        pytest.importorskip("laya", reason="needs the reference extra (laya[serve])")
        with _registry(self._dir) as registry:
            entry = registry.get(key)
            if entry is None or not _is_laya_serve(entry["pid"], entry["start"]):
                entry = self._start(jev_strict, api_key)
                registry[key] = entry
            entry["users"] = sorted({*entry["users"], self._worker})
        self._mine[key] = SharedLayaServe(port=entry["port"], jev_strict=jev_strict, api_key=api_key)
        return self._mine[key]

    def _start(self, jev_strict: bool, api_key: str | None) -> dict[str, Any]:
        from pytest_laya.servers.laya_serve import LayaServeProcess
        from pytest_laya_reference.tiny_checkpoint import embedded_checkpoint_dir

        server = LayaServeProcess(embedded_checkpoint_dir(), api_key=api_key, jev_strict=jev_strict,
                                  startup_timeout_s=READY_TIMEOUT_S, extra_env=QUIET_OPENMP).start()
        self._started.append(server)
        return {"port": server.port, "pid": server.pid, "start": _start_time(server.pid), "users": []}

    def close(self) -> None:
        """This worker is done with its servers; each one no other worker uses is stopped."""
        with _registry(self._dir) as registry:
            for key in self._mine:
                entry = registry.get(key)
                if entry is None:
                    continue
                entry["users"] = [user for user in entry["users"] if user != self._worker]
                if not entry["users"]:
                    _stop_pid(entry["pid"], entry["start"])
                    del registry[key]
        for server in self._started:
            # Reaps the ones stopped above; a server another worker still uses lives on (its pid
            # is in the registry, for that worker or the controller to stop).
            if server._proc.poll() is not None:
                server.stop()
            elif server._finalizer is not None:
                server._finalizer.detach()

    @classmethod
    def stop_leftovers(cls, registry_dir: pathlib.Path) -> list[int]:
        """Stop every server still in the registry (its users died or were interrupted); their pids."""
        if not (registry_dir / cls.REGISTRY).exists():
            return []
        with _registry(registry_dir) as registry:
            stopped = [entry["pid"] for entry in registry.values() if _stop_pid(entry["pid"], entry["start"])]
            registry.clear()
        return stopped


@dataclasses.dataclass(frozen=True)
class SharedLayaServe:
    """A laya-serve another worker may have started: what a test needs of it."""

    port: int
    jev_strict: bool
    api_key: str | None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextlib.contextmanager
def _registry(registry_dir: pathlib.Path) -> Iterator[dict[str, Any]]:
    """The registry of shared servers, read and written back under an exclusive lock."""
    import fcntl

    path = registry_dir / SharedLayaServes.REGISTRY
    with open(registry_dir / (SharedLayaServes.REGISTRY + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        registry = json.loads(path.read_text()) if path.exists() else {}
        yield registry
        path.write_text(json.dumps(registry))


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks (with its pid, who it is), None if it is gone."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return None if fields[0] == "Z" else int(fields[19])


def _is_laya_serve(pid: int, start: int | None) -> bool:
    return start is not None and _start_time(pid) == start


def _stop_pid(pid: int, start: int | None, grace_s: float = 10.0) -> bool:
    """SIGTERM, then SIGKILL after `grace_s`, the process `pid` if it is still the one that
    started at `start`; whether it was running."""
    if not _is_laya_serve(pid, start):
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while _is_laya_serve(pid, start):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            break
        time.sleep(0.05)
    return True

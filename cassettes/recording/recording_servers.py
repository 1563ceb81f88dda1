"""The live servers the recording suite records from, each started by the suite on loopback.

Two kinds, both on the embedded tiny checkpoint: the reference server in-process (uvicorn in a
thread, so a test can hold it in its warming state), and laya's own laya-serve 0.4.15 as a
subprocess (`pytest_laya.servers.laya_serve.LayaServeProcess`). Each comes in the configurations the
cases need: open (no API key), keyed (an API key), busy (one admission slot) and, for the
reference server only, warming (checkpoint loading held back).

Also here: `admission_held`, which saturates a busy server with raw sockets that no cassette
sees: laya-serve with a stalled upload (it takes its slot before reading the body), the
reference server with a decision held in inference (it reads the body before admission, so a
slow upload holds only a body-read slot).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

#: Long enough for any start on a loaded two-core machine; a server that needs more is broken.
READY_TIMEOUT_S = 120.0
#: The API key of the keyed servers. A canary: it may appear in no cassette, in any spelling
#: (tests/cassettes/test_shipped_cassettes.py looks).
SERVER_KEY = "sk-cassette-canary-9d2f61c4"
#: For `--laya-mode=verify` only: servers already running (laya-serve, the reference server) in
#: the configurations the cases need, as JSON {"KIND/CONFIG": URL} (a keyed one has SERVER_KEY),
#: used instead of starting those. The kit's own suite passes its shared open and keyed ones (a
#: start is 3-5 s of CPU). A recording always comes from servers this suite starts: what a server
#: has loaded shows in its /health.
RUNNING_SERVERS = "LAYA_RECORDING_RUNNING_SERVERS"
#: How long a busy server waits for a stalled upload's body: the saturation must outlast a case.
BUSY_BODY_TIMEOUT_S = 60.0


def tiny_checkpoint() -> Any:
    from pytest_laya_reference.tiny_checkpoint import embedded_checkpoint_dir

    return embedded_checkpoint_dir()


# ------------------------------------------------------------------------------ reference server


class WarmUpGate:
    """An `Engine` around `LayaEngine` whose `load()` waits for `release()`.

    The reference server loads its checkpoints in the background and answers 503 ``not_ready``
    until they are warm; on the tiny checkpoint that lasts a few milliseconds, too short to
    record. Holding `load()` back keeps the server warming for as long as a test needs, through
    the same code path a slow real checkpoint takes.
    """

    def __init__(self, engine: Any, *, hold_s: float = READY_TIMEOUT_S) -> None:
        self._engine = engine
        self._released = threading.Event()
        self._hold_s = hold_s

    def release(self) -> None:
        self._released.set()

    @property
    def models(self) -> Mapping[str, Any]:
        return self._engine.models

    @property
    def default_model(self) -> str:
        return self._engine.default_model

    @property
    def ready(self) -> bool:
        return self._released.is_set() and self._engine.ready

    def configured(self) -> list[str]:
        return self._engine.configured()

    def load(self) -> None:
        self._released.wait(self._hold_s)  # never forever: a forgotten release must not hang shutdown
        self._engine.load()

    def predict(self, model: str, requests: Sequence[Any]) -> list[Any]:
        return self._engine.predict(model, requests)

    def close(self) -> None:
        self._engine.close()


class InferenceHold:
    """An `Engine` around another whose `predict()` waits while the hold is engaged.

    A busy reference server is saturated by a decision that sits in inference: the server
    admits a decision to inference only once its body has arrived, so no client can hold the
    slot by uploading slowly.
    """

    def __init__(self, engine: Any, *, hold_s: float = READY_TIMEOUT_S) -> None:
        self._engine = engine
        self._free = threading.Event()
        self._free.set()
        self._hold_s = hold_s
        self.holding = 0  # predict() calls waiting on the hold now

    def engage(self) -> None:
        self._free.clear()

    def release(self) -> None:
        self._free.set()

    def __getattr__(self, name: str) -> Any:  # models, default_model, ready, configured, load, close
        return getattr(self._engine, name)

    def predict(self, model: str, requests: Sequence[Any]) -> list[Any]:
        self.holding += 1
        try:
            self._free.wait(self._hold_s)  # never forever: a forgotten release must not hang shutdown
        finally:
            self.holding -= 1
        return self._engine.predict(model, requests)


@dataclass
class RunningServer:
    """A started server: where it is, its API key (None if open) and, if gated, its warm-up gate."""

    url: str
    api_key: str | None
    gate: WarmUpGate | None = None
    ready: Any = None  # a callable: whether the server has finished warming
    hold: InferenceHold | None = None  # a busy reference server's

    def release_warm_up(self) -> None:
        """Let a warming server load its checkpoint, and wait (without HTTP) until it is ready."""
        assert self.gate is not None, "only a warming server has a warm-up gate"
        self.gate.release()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self.ready():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the reference server on {self.url} did not become ready")
            time.sleep(0.01)


@contextlib.contextmanager
def reference_server(*, keyed: bool = False, busy: bool = False, warming: bool = False) -> Iterator[RunningServer]:
    """The reference server on the tiny checkpoint (served as ``tiny``) on a free loopback port.

    Returns once it is ready, except `warming`, which returns while it is still loading.
    """
    from pytest_laya_reference.app import create_app
    from pytest_laya_reference.engine import LayaEngine
    from pytest_laya_reference.serving import ServerThread
    from pytest_laya_reference.settings import ServerSettings

    engine: Any = LayaEngine({"tiny": str(tiny_checkpoint())})
    hold = InferenceHold(engine) if busy else None
    gate = WarmUpGate(hold or engine) if warming else None
    settings = ServerSettings(api_key=SERVER_KEY if keyed else None, max_concurrent=1 if busy else 16,
                              body_timeout_s=BUSY_BODY_TIMEOUT_S if busy else 10.0)
    with ServerThread(create_app(gate or hold or engine, settings)) as thread:
        running = RunningServer(url=thread.url, api_key=settings.api_key, gate=gate,
                                ready=lambda: (gate or engine).ready, hold=hold)
        try:
            if not warming:
                deadline = time.monotonic() + READY_TIMEOUT_S
                while not engine.ready:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"the reference server on {thread.url} did not become ready")
                    time.sleep(0.01)
            yield running
        finally:
            if gate is not None:
                gate.release()  # let the loader finish, so shutdown does not wait on it
            if hold is not None:
                hold.release()


# ------------------------------------------------------------------------------ laya-serve


@contextlib.contextmanager
def laya_serve(*, keyed: bool = False, busy: bool = False, jev_strict: bool = False) -> Iterator[RunningServer]:
    """laya-serve 0.4.15 on the tiny checkpoint (as english, multilingual and tiny), healthy;
    with `jev_strict`, in LAYA_JEV_STRICT=1 mode."""
    from pytest_laya.servers.laya_serve import LayaServeProcess

    extra = {"LAYA_BODY_READ_TIMEOUT": str(BUSY_BODY_TIMEOUT_S)} if busy else {}
    with LayaServeProcess(tiny_checkpoint(), api_key=SERVER_KEY if keyed else None,
                          max_concurrent=1 if busy else None, extra_env=extra, jev_strict=jev_strict,
                          startup_timeout_s=READY_TIMEOUT_S) as process:
        yield RunningServer(url=process.url, api_key=process.api_key)


# ------------------------------------------------------------------------------ saturation


def _raw_status(host: str, port: int, path: str, body: bytes, headers: Mapping[str, str]) -> int:
    """The status of one whole request over a raw socket (invisible to vcrpy's cassettes)."""
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode("latin-1")
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(head + body)
        line = sock.makefile("rb").readline()
    return int(line.split()[1])


@contextlib.contextmanager
def admission_held(server: RunningServer, body: Mapping[str, Any], *, headers: Mapping[str, str] = {},
                   path: str = "/v1/systemone") -> Iterator[None]:
    """Hold the only admission slot of a busy server.

    laya-serve takes a slot before reading the body, so a request whose head promises N bytes
    and that sends half of them holds it until the socket closes (or the body timeout, which
    its busy server sets to `BUSY_BODY_TIMEOUT_S`). The reference server admits a decision once
    its body has arrived: there a whole decision is sent and held in inference
    (`InferenceHold`). Returns once a raw probe is refused with 503, so the next request is
    known to be refused; on exit, waits until the slot is free again.
    """
    split = urlsplit(server.url)
    host, port = split.hostname or "127.0.0.1", int(split.port or 80)
    payload = json.dumps(body).encode("utf-8")
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            + f"Content-Length: {len(payload)}\r\n\r\n").encode("latin-1")
    if server.hold is not None:
        server.hold.engage()
    slow = socket.create_connection((host, port), timeout=30)
    try:
        slow.sendall(head + (payload if server.hold is not None else payload[: len(payload) // 2]))
        if server.hold is not None:
            hold = server.hold
            _wait_for(lambda: hold.holding > 0, "the held decision to reach inference")
        _wait_for(lambda: _raw_status(host, port, path, payload, headers) == 503, "503 from the saturated server")
        yield
    finally:
        if server.hold is not None:
            server.hold.release()
        slow.close()
        _wait_for(lambda: _raw_status(host, port, path, payload, headers) != 503, "the admission slot to be freed")


def _wait_for(condition: Any, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"gave up waiting for {what} after {timeout_s:g} s")
        time.sleep(0.05)

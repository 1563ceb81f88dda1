"""Serve an ASGI app with uvicorn, with the connection limits uvicorn lacks.

``HardenedServer`` adds a cap on open connections (at the cap a new connection closes the one
longest waiting for a request head with no unread bytes, or is reset when all are busy), a
request-head timeout, and its own accept loop (a bounded batch per loop turn; on ``accept()``
failures one log line, the idlest connections closed, backoff up to a second).
``ServerThread`` runs the same server on a loopback port in a background thread (tests,
benchmarks, the plugin's fixture); the command line runs it in the foreground.

Why each limit exists, and how a client sees it: docs/reference-server.md, "Connections".
"""

from __future__ import annotations

import array
import asyncio
import collections
import errno
import functools
import logging
import socket
import struct
import threading
import time
from typing import Any

try:
    import fcntl
    import termios
except ImportError:  # Windows: no FIONREAD; every waiting connection counts as idle
    fcntl = termios = None  # type: ignore[assignment]

from .settings import ServerSettings

__all__ = ["ConnectionGuard", "GuardedH11Protocol", "HardenedServer", "ServerThread", "listen_tcp",
           "uvicorn_config"]

log = logging.getLogger("pytest_laya_reference.serving")

#: Connections accepted per readiness event of the listening socket before other callbacks run,
#: at most (an eighth of the cap, if less: a connection becomes one that can be closed to make
#: room only once its transport exists, a loop turn or two after it was accepted, so a batch
#: near the cap's size would leave a burst nothing to close but the newcomers).
ACCEPT_BATCH = 64
#: Connections longest idle closed when accept() runs out of descriptors, to make room.
EVICT_ON_EXHAUSTION = 16
#: Connections looked at, oldest first, for one to close at the cap before the new one is refused.
EVICT_SCAN = 16
#: Timed-out connections closed per turn of the head timer; more wait for the next turn, soon
#: after, so a flood's worth of them timing out together never stalls the loop for long.
SWEEP_BATCH = 256
_BACKOFF_FIRST_S = 0.01
_BACKOFF_MAX_S = 1.0
#: While accept() keeps failing, one more line at most this often.
_LOG_EVERY_S = 60.0
#: A run of failures is over once accept() has worked for this long without one.
_QUIET_S = 5.0
_RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_RESET_ON_CLOSE = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST, keeps no TIME_WAIT


def listen_tcp(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """A listening TCP socket whose accepted connections get TCP_NODELAY from asyncio.

    `socket.create_server` leaves `proto` 0, and asyncio sets TCP_NODELAY only on sockets whose
    proto is IPPROTO_TCP. Without it, uvicorn's two writes per response (head, then body) meet
    Nagle's algorithm and the client's delayed ACK: about 40 ms on every keep-alive response.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock


# -- the guard: how many connections, and which ones wait for a head --------------------------

class ConnectionGuard:
    """Counts open connections and closes the ones that wait too long for a request head.

    `open` counts descriptors held for connections: taken when a connection is accepted,
    given back when it is closed (or evicted). `_waiting` holds the connections waiting for a
    request head, oldest first; `sweep` closes those past `head_timeout_s`, and `admit` closes
    the oldest of them to make room at the cap.
    """

    def __init__(self, *, max_connections: int, head_timeout_s: float) -> None:
        self.max_connections = max_connections
        self.head_timeout_s = head_timeout_s
        self.open = 0
        self.peak = 0
        self._waiting: collections.OrderedDict[Any, float] = collections.OrderedDict()
        self.counts: collections.Counter[str] = collections.Counter()  # accepted, evicted, refused, head_timeouts
        self._sweeper: asyncio.TimerHandle | None = None

    # accept side

    def admit(self) -> bool:
        """Take a descriptor for a new connection; False when it must be refused."""
        if self.open >= self.max_connections and not self.evict_waiting(1):
            self.counts["refused"] += 1
            return False
        self.open += 1
        self.peak = max(self.peak, self.open)
        self.counts["accepted"] += 1
        return True

    def unadmit(self) -> None:
        """A connection admitted but never made (its transport failed to start)."""
        self.open -= 1

    def evict_waiting(self, count: int) -> int:
        """Close up to `count` idle connections, longest waiting for a head first; how many were closed.

        A connection with bytes the server has not read yet is not idle: its client has sent
        (part of) a request that the loop has not got to, typically a client that connected
        in the same burst as a flood. It is skipped, and at most `EVICT_SCAN` are looked at.
        """
        closed = 0
        skipped: list[tuple[Any, float]] = []
        while closed < count and self._waiting and len(skipped) < EVICT_SCAN:
            protocol, since = self._waiting.popitem(last=False)
            if protocol.has_unread_bytes():
                skipped.append((protocol, since))
                continue
            if protocol.release(abort=True):
                closed += 1
                self.counts["evicted"] += 1
        for protocol, since in reversed(skipped):  # back at the front, in their order
            self._waiting[protocol] = since
            self._waiting.move_to_end(protocol, last=False)
        return closed

    # protocol side

    def waiting(self, protocol: Any) -> None:
        if protocol not in self._waiting:
            self._waiting[protocol] = time.monotonic()

    def busy(self, protocol: Any) -> None:
        self._waiting.pop(protocol, None)

    def released(self, protocol: Any) -> None:
        """The connection's descriptor is (about to be) closed: counted once per connection."""
        self._waiting.pop(protocol, None)
        self.open -= 1

    # the head timer

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        interval = min(0.25, self.head_timeout_s / 4)

        def tick() -> None:
            more = self.sweep() == SWEEP_BATCH
            self._sweeper = loop.call_later(0.01 if more else interval, tick)

        self._sweeper = loop.call_later(interval, tick)

    def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    def sweep(self, limit: int = SWEEP_BATCH) -> int:
        """Close up to `limit` connections that have waited longer than `head_timeout_s` for a head."""
        deadline = time.monotonic() - self.head_timeout_s
        closed = 0
        while self._waiting and closed < limit:
            protocol, since = next(iter(self._waiting.items()))
            if since > deadline:
                break
            del self._waiting[protocol]
            if protocol.release(abort=False):
                closed += 1
                self.counts["head_timeouts"] += 1
        return closed


def _unread_bytes(transport: Any) -> bool:
    """Whether the kernel holds bytes from the client that the loop has not read yet."""
    if fcntl is None or transport is None or transport.is_closing():
        return False
    sock = transport.get_extra_info("socket")
    if sock is None:
        return False
    pending = array.array("i", [0])
    try:
        fcntl.ioctl(sock.fileno(), termios.FIONREAD, pending, True)
    except OSError:
        return False
    return pending[0] > 0


@functools.cache
def _h11_protocol_class() -> type:
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        """uvicorn's h11 protocol, reporting to a `ConnectionGuard` whether it waits for a head.

        A connection waits for a head from when it is made, and again from when each response
        is complete until the next request's head has been parsed (uvicorn then holds a
        request cycle whose response is not complete).
        """

        def __init__(self, *args: Any, guard: ConnectionGuard, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._guard = guard
            self._released = False

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._guard.waiting(self)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._track()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._track()

        def connection_lost(self, exc: Exception | None) -> None:
            super().connection_lost(exc)
            self.release(abort=False)

        def has_unread_bytes(self) -> bool:
            """Whether the kernel holds bytes from the client that the loop has not read yet."""
            return _unread_bytes(self.transport)

        def _track(self) -> None:
            if self._released or self.transport.is_closing():
                return
            if self.cycle is None or self.cycle.response_complete:
                self._guard.waiting(self)
            else:
                self._guard.busy(self)

        def release(self, *, abort: bool) -> bool:
            """Close this connection (if it is open) and give its descriptor back, once."""
            if self._released:
                return False
            self._released = True
            self._guard.released(self)
            if not self.transport.is_closing():
                if abort:
                    self.transport.abort()
                else:
                    self.transport.close()
            return True

    return GuardedH11Protocol


# -- the accept loop ----------------------------------------------------------------------------

class _Acceptor:
    """Accepts on one listening socket for a `HardenedServer`; quacks like asyncio.Server there."""

    def __init__(self, sock: socket.socket, protocol_factory: Any, guard: ConnectionGuard,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.sock = sock
        self.factory = protocol_factory
        self.guard = guard
        self.loop = loop
        self._reading = False
        self._closed = False
        self._retry: asyncio.TimerHandle | None = None
        self._backoff_s = 0.0
        self._failures = 0        # in the current run of failures
        self._failing_since = 0.0
        self._last_failure = 0.0
        self._last_logged = 0.0
        self._connecting: set[asyncio.Task[None]] = set()
        self._batch = max(1, min(ACCEPT_BATCH, guard.max_connections // 8))

    def start(self) -> None:
        self.sock.setblocking(False)
        self._resume()

    def _resume(self) -> None:
        self._retry = None
        if not self._closed and not self._reading:
            self.loop.add_reader(self.sock.fileno(), self._on_readable)
            self._reading = True

    def _pause(self, delay_s: float) -> None:
        if self._reading:
            self.loop.remove_reader(self.sock.fileno())
            self._reading = False
        if self._retry is None and not self._closed:
            self._retry = self.loop.call_later(delay_s, self._resume)

    def _on_readable(self) -> None:
        for _ in range(self._batch):
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue  # the client gave up while queued
            except OSError as exc:
                self._accept_failed(exc)
                return
            if self._failures and time.monotonic() - self._last_failure >= _QUIET_S:
                self._recovered()
            if not self.guard.admit():
                self._refuse(conn)
                continue
            conn.setblocking(False)
            task = self.loop.create_task(self._connect(conn))
            self._connecting.add(task)
            task.add_done_callback(self._connecting.discard)

    async def _connect(self, conn: socket.socket) -> None:
        try:
            await self.loop.connect_accepted_socket(self.factory, conn)
        except BaseException:  # the client reset before the transport existed
            self.guard.unadmit()
            conn.close()

    @staticmethod
    def _refuse(conn: socket.socket) -> None:
        try:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET_ON_CLOSE)
        except OSError:
            pass
        conn.close()

    def _accept_failed(self, exc: OSError) -> None:
        now = time.monotonic()
        if not self._failures:
            self._failing_since = self._last_logged = now
            log.warning("accept() failed: %s; %d connections open; closing the ones longest idle and retrying "
                        "with backoff (further failures are counted, not logged)",
                        exc.strerror or exc, self.guard.open)
        elif now - self._last_logged >= _LOG_EVERY_S:
            self._last_logged = now
            log.warning("accept() still failing: %d failures in %.0f s (last: %s); %d connections open",
                        self._failures, now - self._failing_since, exc.strerror or exc, self.guard.open)
        self._failures += 1
        self._last_failure = now
        freed = self.guard.evict_waiting(EVICT_ON_EXHAUSTION) if exc.errno in _RESOURCE_ERRNOS else 0
        if freed:
            self._backoff_s = 0.0
            self._pause(0.001)  # the evicted descriptors close on the next loop turn
        else:
            self._backoff_s = min(_BACKOFF_MAX_S, max(_BACKOFF_FIRST_S, self._backoff_s * 2))
            self._pause(self._backoff_s)

    def _recovered(self) -> None:
        log.warning("accepting connections again: %d accept() calls failed over %.1f s",
                    self._failures, self._last_failure - self._failing_since)
        self._failures = 0
        self._backoff_s = 0.0

    # what uvicorn's Server.shutdown calls on each of its servers

    def close(self) -> None:
        self._closed = True
        if self._reading:
            self.loop.remove_reader(self.sock.fileno())
            self._reading = False
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None

    async def wait_closed(self) -> None:
        if self._connecting:
            await asyncio.gather(*self._connecting, return_exceptions=True)


# -- the server ---------------------------------------------------------------------------------

def uvicorn_config(app: Any, settings: ServerSettings) -> Any:
    """The uvicorn configuration both the command line and `ServerThread` run with."""
    import uvicorn

    # proxy_headers off: nothing here reads the client's address, and uvicorn's middleware for
    # X-Forwarded-For was one more layer on every request.
    return uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", http="h11", ws="none",
                          proxy_headers=False,
                          timeout_keep_alive=settings.keep_alive_timeout_s)  # type: ignore[arg-type]


@functools.cache
def _server_class() -> type:
    import uvicorn

    class HardenedServer(uvicorn.Server):
        """uvicorn's Server, accepting through `_Acceptor` under a `ConnectionGuard`.

        It serves only sockets it is given (`listen_tcp`), as both of its callers do.
        """

        def __init__(self, config: Any, settings: ServerSettings) -> None:
            super().__init__(config)
            self.guard = ConnectionGuard(max_connections=settings.max_connections,
                                         head_timeout_s=settings.head_timeout_s)

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            if not sockets:
                raise ValueError("HardenedServer serves the listening sockets it is given (see listen_tcp)")
            await super().startup(sockets=[])  # the lifespan; uvicorn opens no listener of its own
            self.started = False
            loop = asyncio.get_running_loop()
            factory = functools.partial(_h11_protocol_class(), config=self.config, server_state=self.server_state,
                                        app_state=self.lifespan.state, _loop=loop, guard=self.guard)
            for sock in sockets:
                acceptor = _Acceptor(sock, factory, self.guard, loop)
                acceptor.start()
                self.servers.append(acceptor)  # type: ignore[arg-type]
            self.guard.start(loop)
            self.started = True

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            self.guard.stop()
            await super().shutdown(sockets=sockets)

    return HardenedServer


def __getattr__(name: str) -> Any:
    """`GuardedH11Protocol` and `HardenedServer`, built on first use: importing this module
    imports no uvicorn (the plugin imports it only when its fixture starts a server)."""
    if name == "GuardedH11Protocol":
        return _h11_protocol_class()
    if name == "HardenedServer":
        return _server_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _settings_of(app: Any) -> ServerSettings:
    """The settings a `create_app` app was made with; the defaults for any other app."""
    server = getattr(getattr(app, "state", None), "server", None)
    settings = getattr(server, "settings", None)
    return settings if isinstance(settings, ServerSettings) else ServerSettings()


class ServerThread:
    """`with ServerThread(app) as server: server.url` — bound to 127.0.0.1 on a free port.

    The connection limits are the app's own settings (`create_app(engine, settings)`), or
    `settings` when given.
    """

    def __init__(self, app: Any, *, host: str = "127.0.0.1", port: int = 0, startup_timeout_s: float = 30.0,
                 settings: ServerSettings | None = None) -> None:
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(f"ServerThread binds loopback addresses only, not {host!r}")
        self.app = app
        self.settings = settings or _settings_of(app)
        self._sock = listen_tcp("127.0.0.1" if host == "localhost" else host, port)
        bound_host, bound_port = self._sock.getsockname()[:2]
        self.url = f"http://{'[' + bound_host + ']' if ':' in bound_host else bound_host}:{bound_port}"
        self._startup_timeout_s = startup_timeout_s
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def guard(self) -> ConnectionGuard | None:
        """The running server's connection guard (open connections, evictions, timeouts)."""
        return None if self._server is None else self._server.guard

    def start(self) -> ServerThread:
        """Start serving and wait until the server accepts connections; idempotent."""
        if self._thread is not None:
            return self
        self._server = _server_class()(uvicorn_config(self.app, self.settings), self.settings)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]},
                                        name="reference-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + self._startup_timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the server on {self.url} did not start within {self._startup_timeout_s:g} s")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        self._sock.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

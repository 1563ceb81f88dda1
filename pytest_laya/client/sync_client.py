"""`ServedLayaClient`: decisions from a served Laya, synchronously, with a deadline that holds."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from pytest_laya.client.base import ClientBase, direct_client
from pytest_laya.client.call import Attempt, BodyCollector, classify_failure, health_from, request_headers
from pytest_laya.client.policy import Deadline, RetryPolicy, TransportFailure
from pytest_laya.client.secret import Secret
from pytest_laya.wire.decision import Decision
from pytest_laya.wire.exchange import Exchange
from pytest_laya.wire.headers import new_request_id
from pytest_laya.wire.health import Health
from pytest_laya.wire.identity import ServedIdentity
from pytest_laya.wire.questions import Questions
from pytest_laya.wire.routes import DECIDE_PATH, HEALTH_PATH
from pytest_laya.wire.urls import RedactedUrl

__all__ = [
    "ServedLayaClient",
]


_current = threading.local()


class _DeadlineStream:
    """An httpcore network stream whose every read and write is given at most the time left.

    httpx's timeouts bound each socket operation, so a server that sends one byte of the status
    line or a header every 100 ms never times out. Here each operation's timeout is cut to what
    is left of the current attempt's deadline (the thread's `_current.deadline`), and once it is
    spent the next operation fails at once. It works on every connection: a pooled keep-alive
    one is re-used through the same stream object, so it is bounded exactly like a new one.
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    # httpcore's `timeout` for each operation is never shorter than the time left (`_send` sets
    # httpx's timeout to the time left when the attempt began), so only the time left is passed on.

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data: bytes = self._stream.read(max_bytes, _time_left())
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _time_left())

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
        return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, _time_left()))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend:
    """httpcore's sync network backend with every stream a `_DeadlineStream` (connects bounded too).

    Only `connect_tcp`: the pool it serves has no Unix socket and no connect retries, so httpcore
    never asks it for `connect_unix_socket` or `sleep`.
    """

    def __init__(self) -> None:
        import httpcore

        self._backend = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, **options: Any) -> _DeadlineStream:
        # The time left for httpcore's timeout (see _DeadlineStream); local_address and socket_options pass on.
        return _DeadlineStream(self._backend.connect_tcp(host, port, _time_left(), **options))


def _time_left() -> float:
    """The time left of the current attempt's deadline, for one socket operation; httpcore's timeout once it is spent.

    Only `_send` uses the client's pools, always inside a `_Bounded` block. Which operation ran
    out does not matter: the client classifies every timeout alike.
    """
    deadline: Deadline = _current.deadline
    left = deadline.remaining()
    if left <= 0:
        import httpcore

        raise httpcore.TimeoutException("the decision's deadline passed")
    return left


class _Bounded:
    """Makes `deadline` the one every socket operation of this thread is bounded by, for a block.

    Not nested: a decision's /health read runs after its POST's block, under the same deadline.
    """

    def __init__(self, deadline: Deadline) -> None:
        self._deadline = deadline

    def __enter__(self) -> None:
        _current.deadline = self._deadline

    def __exit__(self, *exc: object) -> None:
        del _current.deadline


def _bound_by_deadline(client: httpx.Client) -> httpx.Client:
    """`client` with every pool it owns (direct, and one per proxy) connecting through `_DeadlineBackend`.

    Only the network backends are swapped: limits, TLS context, proxies and HTTP versions stay
    httpx's, and cassettes patch httpx's transport as usual.
    """
    import httpcore

    transports = [client._transport, *client._mounts.values()]
    for transport in transports:
        if transport is None:
            continue
        pool = getattr(transport, "_pool", None)
        if not isinstance(pool, httpcore.ConnectionPool) or not hasattr(pool, "_network_backend"):
            raise RuntimeError(f"httpx {httpx.__version__} has no HTTPTransport._pool._network_backend: the sync "
                               "client's deadline cannot be installed; pin the httpx version pytest-laya supports")
        pool._network_backend = _DeadlineBackend()  # type: ignore[assignment]  # duck-typed: connect_tcp is all a pool asks
    return client


class _SocketWatchdog:
    """Ends a sync attempt at the deadline on a transport the client did not build itself.

    With the client's own transport every socket operation is bounded (`_DeadlineStream`). A
    transport passed in (`transport=httpx.HTTPTransport(...)`) is not: there, shutting the
    sockets down from a timer wakes a read blocked on a trickled body at the deadline. It learns
    a new connection's socket from httpx's trace and any connection's once its head is read.
    """

    def __init__(self, seconds: float) -> None:
        self.fired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._done = False
        self._timer = threading.Timer(max(0.0, seconds), self._fire)
        self._timer.daemon = True

    def trace(self, event: str, info: Mapping[str, Any]) -> None:
        if event == "connection.connect_tcp.complete":
            self._watch_stream(info.get("return_value"))

    def watch_response(self, response: httpx.Response) -> None:
        self._watch_stream(response.extensions.get("network_stream"))

    def _watch_stream(self, stream: Any) -> None:
        sock = stream.get_extra_info("socket") if stream is not None and hasattr(stream, "get_extra_info") else None
        if isinstance(sock, socket.socket):
            with self._lock:
                if self.fired:
                    _shutdown(sock)
                else:
                    self._sockets.append(sock)

    def _fire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.fired = True
            for sock in self._sockets:
                _shutdown(sock)

    def __enter__(self) -> _SocketWatchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._done = True
        self._timer.cancel()


class _Unwatched:
    """No watchdog: the client's own transport (`_DeadlineStream`) already ends every socket
    operation at the deadline."""

    fired = False

    def watch_response(self, response: httpx.Response) -> None:
        return None

    def __enter__(self) -> _Unwatched:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


_UNWATCHED = _Unwatched()


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class ServedLayaClient(ClientBase):
    """Decisions from a served Laya (`POST /v1/systemone`), synchronously.

    `url`, `model`, `api_key` and `timeout_s` default to `LAYA_SERVED_URL`, `LAYA_SERVED_MODEL`,
    `LAYA_SERVED_API_KEY` and `LAYA_SERVED_TIMEOUT_S`. `transport` replaces the network (an
    `httpx.MockTransport`, a cassette); `on_exchange` sees every response, for validation.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        model: str | None = None,
        api_key: str | Secret | None = None,
        timeout_s: float | None = None,
        transport: httpx.BaseTransport | None = None,
        on_exchange: Callable[[Exchange], None] | None = None,
        policy: RetryPolicy | None = None,
    ) -> None:
        api_key = Secret.wrap(api_key)  # no frame holds the plain key
        url = RedactedUrl.wrap(url)  # type: ignore[assignment]  # nor a password in the URL
        super().__init__(url, model=model, api_key=api_key, timeout_s=timeout_s, on_exchange=on_exchange, policy=policy)
        # httpx follows no redirect unless asked: the state and the key never go to a Location.
        if transport is None:
            self._http = _bound_by_deadline(direct_client(self.settings.url))
        else:  # httpx itself then reads no proxy from the environment
            self._http = httpx.Client(transport=transport)
        # The client's own transport bounds every socket operation by the deadline; only a
        # transport passed in needs the watchdog (and its timer thread, one per attempt), and not
        # one answering in memory (no socket to shut down: an error after the deadline is its timeout).
        self._in_memory = isinstance(transport, (httpx.MockTransport, httpx.WSGITransport))
        self._watched = transport is not None and not self._in_memory

    def decide(
        self,
        state: Any,
        questions: Questions,
        *,
        model: str | None = None,
        request_id: str | None = None,
        allow_truncation: bool = False,
    ) -> Decision:
        """Ask `questions` about `state` in one forward pass; raises `LayaConfigError` or `LayaCallError`."""
        call, deadline = self._begin(state, questions, model, request_id, allow_truncation)
        number = 0
        while True:
            number += 1
            attempt = self._send("POST", DECIDE_PATH, call.headers, call.body, deadline)
            step = call.next_step(attempt, number, deadline, self.policy)
            if step is None:
                break
            time.sleep(step.wait_s)
        body, decision = call.conclude(attempt, number)
        health, read_now = self._health_to_read(decision, deadline)
        if read_now:
            health = health_from(self._send("GET", HEALTH_PATH, request_headers(call.request_id), None, deadline))
            self._identities.store(health)
        return self._identity_after(call, body, decision, health)

    def health(self) -> Health:
        """The server's /health document (liveness only, if it has a key and we have none)."""
        deadline = Deadline(self.settings.timeout_s)
        attempt = self._send("GET", HEALTH_PATH, request_headers(new_request_id()), None, deadline)
        health = health_from(attempt)
        if health is None:
            raise self._health_error(attempt)
        self._identities.store(health)
        return health

    def identity(self) -> ServedIdentity | None:
        """Which weights serve this client's model: `served_by` if seen, else /health, else routing."""
        return self._known_identity() or self._identity_from(self.health())

    def _send(self, method: str, path: str, headers: Mapping[str, str], body: bytes | None, deadline: Deadline) -> Attempt:
        remaining = deadline.remaining()
        if remaining <= 0:
            return Attempt(failure=TransportFailure.TIMED_OUT)
        watchdog: _SocketWatchdog | _Unwatched = _UNWATCHED
        extensions = None
        if self._watched:
            watchdog = _SocketWatchdog(remaining)
            extensions = {"trace": watchdog.trace}
        started = time.monotonic()
        attempt = Attempt()
        request = self._http.build_request(method, self.settings.request_url + path, headers=headers, content=body,
                                           timeout=httpx.Timeout(remaining), extensions=extensions)

        def check() -> None:
            if deadline.expired():
                raise httpx.ReadTimeout("the deadline passed while reading the body", request=request)

        with watchdog, _Bounded(deadline):
            try:
                response = self._http.send(request, stream=True, auth=self._auth)
                try:
                    watchdog.watch_response(response)
                    collected = BodyCollector(response, check)
                    if collected.reading:
                        for chunk in response.iter_raw():
                            if not collected.add(chunk):
                                break
                            check()
                    collected.into(attempt)
                finally:
                    response.close()
            except httpx.TransportError as exc:
                timed_out = watchdog.fired or (self._in_memory and deadline.expired())
                attempt = Attempt(failure=TransportFailure.TIMED_OUT if timed_out else classify_failure(exc), cause=exc)
        self._observe(method, path, attempt, body, time.monotonic() - started)
        return attempt

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ServedLayaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

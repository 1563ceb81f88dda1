"""`ServedLayaClient`: decisions from a served Laya, synchronously, with a deadline that holds."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from pytest_laya.client.base import ClientBase, ssl_context
from pytest_laya.client.call import Attempt, BodyCollector, classify_failure, health_from, request_headers
from pytest_laya.client.policy import Deadline, RetryPolicy, TransportFailure
from pytest_laya.wire.decision import Decision
from pytest_laya.wire.exchange import Exchange
from pytest_laya.wire.headers import new_request_id
from pytest_laya.wire.health import Health
from pytest_laya.wire.identity import ServedIdentity
from pytest_laya.wire.questions import Questions
from pytest_laya.wire.routes import DECIDE_PATH, HEALTH_PATH

__all__ = [
    "ServedLayaClient",
]


class _SocketWatchdog:
    """Ends a sync attempt at the deadline, even while a body trickles in byte by byte.

    httpx's timeouts bound each socket read, not the whole response; shutting the socket down
    from a timer wakes the blocked read at the deadline itself.
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

    def __enter__(self) -> "_SocketWatchdog":
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._done = True
        self._timer.cancel()


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
        api_key: str | None = None,
        timeout_s: float | None = None,
        transport: httpx.BaseTransport | None = None,
        on_exchange: Callable[[Exchange], None] | None = None,
        policy: RetryPolicy | None = None,
    ) -> None:
        super().__init__(url, model=model, api_key=api_key, timeout_s=timeout_s, on_exchange=on_exchange, policy=policy)
        self._http = httpx.Client(transport=transport, follow_redirects=False, verify=ssl_context())

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
            health = health_from(self._send("GET", HEALTH_PATH, request_headers(self.settings, call.request_id), None, deadline))
            self._identities.store(health)
        return self._identity_after(call, body, decision, health)

    def health(self) -> Health:
        """The server's /health document (liveness only, if it has a key and we have none)."""
        deadline = Deadline(self.settings.timeout_s)
        attempt = self._send("GET", HEALTH_PATH, request_headers(self.settings, new_request_id()), None, deadline)
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
        watchdog = _SocketWatchdog(remaining)
        started = time.monotonic()
        attempt = Attempt()
        request = self._http.build_request(method, self.settings.url + path, headers=headers, content=body,
                                           timeout=httpx.Timeout(remaining), extensions={"trace": watchdog.trace})
        with watchdog:
            try:
                response = self._http.send(request, stream=True)
                try:
                    watchdog.watch_response(response)
                    collected, complete = BodyCollector(), True
                    for chunk in response.iter_bytes():
                        if not collected.add(chunk):
                            complete = False
                            break
                        if deadline.expired():
                            raise httpx.ReadTimeout("deadline passed while reading the body", request=request)
                    collected.into(attempt, response, complete=complete)
                finally:
                    response.close()
            except httpx.TransportError as exc:
                attempt = Attempt(failure=TransportFailure.TIMED_OUT if watchdog.fired else classify_failure(exc), cause=exc)
        self._observe(method, path, attempt, body, time.monotonic() - started)
        return attempt

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "ServedLayaClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

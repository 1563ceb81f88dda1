"""The served client: one decision over HTTP, with the same behaviour in every mode.

Fake, replayed and live servers all answer through this code, so a test that passes on a cassette
exercises the deadline, retry, request-id and error mapping a production call would. What a
request is and what an answer means is shared by both clients (`_DecisionCall`); only the I/O
differs between `ServedLayaClient` and `AsyncServedLayaClient`.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from .decision import Decision, Provenance, ServedIdentity, parse_answers, parse_served_by, parse_usage
from .errors import LayaCallError, LayaConfigError, LayaError
from .headers import REQUEST_ID_HEADER, is_valid_request_id, new_request_id, parse_server_timing
from .health import Health
from .policy import Deadline, Retry, RetryPolicy, TransportFailure
from .problems import read_server_error
from .questions import AskedQuestion, Questions, normalize_questions
from .settings import ClientSettings, redact_url

__all__ = ["ServedLayaClient", "AsyncServedLayaClient", "Exchange", "DECIDE_PATH", "HEALTH_PATH"]

DECIDE_PATH = "/v1/systemone"
HEALTH_PATH = "/health"
# How long a /health identity is trusted before it is read again.
IDENTITY_TTL_S = 30.0
MAX_RESPONSE_BYTES = 8 * 1024 * 1024
_JSON_MEDIA = ("application/json", "application/problem+json")
_USER_AGENT = "pytest-laya"


@dataclass(frozen=True)
class Exchange:
    """One HTTP response the client received, for validators and recorders (`on_exchange`)."""

    method: str
    url: str
    path: str
    status: int
    headers: httpx.Headers
    body: bytes
    request_body: bytes | None
    elapsed_s: float


@dataclass
class _Attempt:
    """What one attempt produced: a whole response, or how the transport failed."""

    status: int | None = None
    headers: httpx.Headers = field(default_factory=httpx.Headers)
    body: bytes = b""
    failure: TransportFailure | None = None
    cause: BaseException | None = None
    oversized: bool = False


class _Body:
    """Collects a response body up to `MAX_RESPONSE_BYTES`, for both clients' read loops."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []
        self._size = 0

    def add(self, chunk: bytes) -> bool:
        """Keep `chunk`; False once the body is over the cap (stop reading)."""
        self._chunks.append(chunk)
        self._size += len(chunk)
        return self._size <= MAX_RESPONSE_BYTES

    def into(self, attempt: _Attempt, response: httpx.Response, *, complete: bool) -> None:
        attempt.status, attempt.headers = response.status_code, response.headers
        attempt.body, attempt.oversized = b"".join(self._chunks), not complete


@functools.lru_cache(maxsize=None)
def _ssl_context() -> ssl.SSLContext:
    # httpx reads the CA bundle for every new client (about 19 ms); one context serves them all,
    # so a test suite that builds a client per test does not pay it per test.
    return httpx.create_ssl_context()


def _media_type(headers: httpx.Headers) -> str:
    return headers.get("content-type", "").split(";")[0].strip().lower()


def _is_json_media(media: str) -> bool:
    return media in _JSON_MEDIA or media.endswith("+json")


class _IdentityCache:
    """`/health` identities, trusted for `IDENTITY_TTL_S`; shared rules, no I/O."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._health: Health | None = None
        self._read_at = -float("inf")

    def fresh(self) -> Health | None:
        if self._clock() - self._read_at < IDENTITY_TTL_S:
            return self._health
        return None

    def store(self, health: Health | None) -> None:
        # A failed read is remembered too, so a server without /health is not asked per call.
        self._health = health
        self._read_at = self._clock()


class _DecisionCall:
    """One decision's request and the reading of its answer, independent of sync or async."""

    def __init__(
        self,
        settings: ClientSettings,
        state: Any,
        questions: Questions,
        *,
        model: str | None,
        request_id: str | None,
        allow_truncation: bool,
    ) -> None:
        self.settings = settings
        self.asked: dict[str, AskedQuestion] = normalize_questions(questions)
        self.model = model if model is not None else settings.model
        if request_id is not None and not is_valid_request_id(request_id):
            raise LayaConfigError(
                "request_id must be 1-128 visible ASCII characters (no spaces)", code="bad_setting"
            )
        self.request_id = request_id or new_request_id()
        self.allow_truncation = allow_truncation
        payload: dict[str, Any] = {"state": state, "questions": {q.id: dict(q.wire) for q in self.asked.values()}}
        if self.model is not None:
            payload["model"] = self.model
        try:
            self.body = json.dumps(payload, ensure_ascii=False, allow_nan=False).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise LayaConfigError(f"the state and questions must be JSON-serializable: {exc}", code="bad_setting") from None
        self.headers = request_headers(settings, self.request_id)

    def error(self, error: LayaError, status: int | None = None) -> LayaError:
        return error.with_context(status=status, request_id=self.request_id, url=redact_url(self.settings.url))

    def failure_error(self, attempt: _Attempt, attempts: int) -> LayaCallError:
        kind = attempt.failure
        tried = f" after {attempts} attempts" if attempts > 1 else ""
        url = redact_url(self.settings.url)
        if kind is TransportFailure.TIMED_OUT:
            message = f"no complete answer from {url} within the {self.settings.timeout_s:g}s deadline{tried}"
        elif kind is TransportFailure.REFUSED:
            message = f"could not connect to {url}{tried}: is the server running?"
        else:
            message = f"the connection to {url} dropped before a complete response{tried}"
        cause = attempt.cause
        if cause is not None and kind is not TransportFailure.TIMED_OUT:
            message += f" ({type(cause).__name__}: {cause})" if str(cause) else f" ({type(cause).__name__})"
        return self.error(LayaCallError(message, code=kind.value if kind else "connection_dropped"))  # type: ignore[return-value]

    def response_error(self, attempt: _Attempt, attempts: int) -> LayaError:
        status = attempt.status or 0
        said = read_server_error(status, attempt.headers.get("content-type"), attempt.body)
        tried = f" after {attempts} attempts" if attempts > 1 else ""
        kwargs = dict(status=status, server_code=said.code, server_detail=said.detail)
        if status == 401:
            hint = ("the API key was refused: check --laya-api-key / LAYA_SERVED_API_KEY"
                    if self.settings.api_key else "the server needs an API key: pass api_key=... or set LAYA_SERVED_API_KEY")
            return self.error(LayaConfigError(hint, code="unauthorized", **kwargs))
        if status in (502, 503, 504):
            return self.error(LayaCallError(f"the server is unavailable{tried}", code="unavailable", **kwargs))
        if status >= 500:
            return self.error(LayaCallError("the server failed to answer", code="server_error", **kwargs))
        return self.error(LayaCallError("the server rejected the request", code="rejected", **kwargs))

    def read_answer(self, attempt: _Attempt) -> tuple[dict[str, Any], Decision]:
        """Turn a 200 into a Decision (identity still to be filled), or raise."""
        if attempt.oversized:
            raise self.error(LayaCallError(f"response body larger than {MAX_RESPONSE_BYTES} bytes", code="bad_response"), 200)
        media = _media_type(attempt.headers)
        if not _is_json_media(media):
            raise self.error(LayaCallError(f"HTTP 200 with Content-Type {media or 'missing'!r}, expected application/json", code="bad_response"), 200)
        try:
            body = json.loads(attempt.body)
        except ValueError as exc:
            raise self.error(LayaCallError(f"HTTP 200 body is not valid JSON ({exc})", code="bad_response"), 200) from None
        if not isinstance(body, dict):
            raise self.error(LayaCallError(f"HTTP 200 body must be a JSON object, got {type(body).__name__}", code="bad_response"), 200)
        try:
            answers = parse_answers(body.get("answers"), self.asked)
            usage = parse_usage(body.get("usage"))
            served_by = parse_served_by(body.get("served_by"))
        except LayaError as exc:
            raise self.error(exc, 200) from None
        routing = body.get("routing") if isinstance(body.get("routing"), Mapping) else None
        routed = routing.get("model") if routing else None
        if self.model is not None and isinstance(routed, str) and routed != self.model:
            raise self.error(LayaConfigError(
                f"asked for model {self.model!r} but the server routed to {routed!r}: it does not serve that name"
                " (check LAYA_SERVED_MODEL / model=...)", code="model_ignored"), 200)
        if usage.truncated and not self.allow_truncation:
            raise self.error(LayaConfigError(
                "the server cut the input to fit its token window: shorten the state or questions,"
                " or pass allow_truncation=True", code="token_window_full"), 200)
        provenance = Provenance(
            url=self.settings.url,
            request_id=attempt.headers.get(REQUEST_ID_HEADER) or self.request_id,
            served_by=served_by,
            server_timing=parse_server_timing(attempt.headers.get("server-timing")),
            routing=routing,
        )
        decision = Decision(answers=answers, usage=usage, model=served_by.model if served_by else None, provenance=provenance)
        return body, decision

    def conclude(self, attempt: _Attempt, attempts: int) -> tuple[dict[str, Any], Decision]:
        """The last attempt's outcome: a Decision (identity still to fill in), or the error."""
        if attempt.failure is not None:
            raise self.failure_error(attempt, attempts)
        if attempt.status != 200:
            raise self.response_error(attempt, attempts)
        return self.read_answer(attempt)

    def next_step(self, attempt: _Attempt, number: int, deadline: Deadline, policy: RetryPolicy) -> Retry | None:
        if attempt.failure is not None:
            return policy.after_failure(attempt.failure, number, deadline)
        return policy.after_response(attempt.status or 0, attempt.headers, number, deadline)


def request_headers(settings: ClientSettings, request_id: str) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, application/problem+json",
        "User-Agent": _USER_AGENT,
        REQUEST_ID_HEADER: request_id,
        # W3C trace context: one trace per decision, so a retry shows as the same operation.
        "traceparent": f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01",
    }
    if settings.api_key:
        headers["Authorization"] = f"Bearer {settings.api_key}"
    return headers


def _with_identity(decision: Decision, identity: ServedIdentity | None) -> Decision:
    if identity is None:
        return decision
    return Decision(answers=decision.answers, usage=decision.usage, model=identity.model, provenance=decision.provenance)


def _routing_identity(body: Mapping[str, Any]) -> ServedIdentity | None:
    routing = body.get("routing")
    repo = routing.get("repo") if isinstance(routing, Mapping) else None
    return ServedIdentity(checkpoint=repo, source="routing") if isinstance(repo, str) and repo else None


def _health_from(attempt: _Attempt) -> Health | None:
    if attempt.status != 200 or not _is_json_media(_media_type(attempt.headers)):
        return None
    try:
        raw = json.loads(attempt.body)
    except ValueError:
        return None
    return Health(raw) if isinstance(raw, dict) else None


def _routed_names(body: Mapping[str, Any], model: str | None) -> tuple[str | None, str | None]:
    routing = body.get("routing") if isinstance(body.get("routing"), Mapping) else {}
    routed = routing.get("model") if isinstance(routing.get("model"), str) else model
    repo = routing.get("repo") if isinstance(routing.get("repo"), str) else None
    return routed, repo


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


def _classify(exc: httpx.TransportError) -> TransportFailure:
    if isinstance(exc, httpx.TimeoutException):
        return TransportFailure.TIMED_OUT
    if isinstance(exc, httpx.ConnectError):
        return TransportFailure.REFUSED
    return TransportFailure.DROPPED


class _ClientBase:
    def __init__(
        self,
        url: str | None,
        *,
        model: str | None,
        api_key: str | None,
        timeout_s: float | None,
        on_exchange: Callable[[Exchange], None] | None,
        policy: RetryPolicy | None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = ClientSettings.resolve(url, model=model, api_key=api_key, timeout_s=timeout_s, environ=environ)
        self.policy = policy or RetryPolicy()
        self._on_exchange = on_exchange
        self._identities = _IdentityCache()
        self._last_identity: ServedIdentity | None = None

    @property
    def url(self) -> str:
        return self.settings.url

    def __repr__(self) -> str:
        key = ", api_key=***" if self.settings.api_key else ""
        return f"{type(self).__name__}({redact_url(self.settings.url)!r}, model={self.settings.model!r}{key}, timeout_s={self.settings.timeout_s:g})"

    def _observe(self, method: str, path: str, attempt: _Attempt, request_body: bytes | None, elapsed: float) -> None:
        if self._on_exchange is not None and attempt.status is not None:
            self._on_exchange(Exchange(method=method, url=self.settings.url + path, path=path, status=attempt.status,
                                       headers=attempt.headers, body=attempt.body, request_body=request_body,
                                       elapsed_s=elapsed))

    def _health_error(self, attempt: _Attempt) -> LayaError:
        url = redact_url(self.settings.url)
        if attempt.failure is not None:
            call = LayaCallError(f"GET {HEALTH_PATH} on {url} failed: {attempt.failure.value}", code=attempt.failure.value, url=url)
            return call
        said = read_server_error(attempt.status or 0, attempt.headers.get("content-type"), attempt.body)
        if attempt.status == 401:
            return LayaConfigError("the server refused the API key for /health", code="unauthorized", status=401,
                                   server_code=said.code, server_detail=said.detail, url=url)
        return LayaCallError(f"GET {HEALTH_PATH} did not return a JSON health document", code="bad_response",
                             status=attempt.status, server_code=said.code, server_detail=said.detail, url=url)

    def _begin(self, state: Any, questions: Questions, model: str | None, request_id: str | None,
               allow_truncation: bool) -> tuple[_DecisionCall, Deadline]:
        call = _DecisionCall(self.settings, state, questions, model=model, request_id=request_id,
                             allow_truncation=allow_truncation)
        return call, Deadline(self.settings.timeout_s)

    def _health_to_read(self, decision: Decision, deadline: Deadline) -> tuple[Health | None, bool]:
        """(cached health, whether /health must be read now) for a decision's identity."""
        if decision.provenance.served_by is not None:
            return None, False
        health = self._identities.fresh()
        return health, health is None and not deadline.expired()

    def _identity_after(self, call: _DecisionCall, body: Mapping[str, Any], decision: Decision,
                        health: Health | None) -> Decision:
        if decision.provenance.served_by is not None:
            identity: ServedIdentity | None = decision.provenance.served_by
        else:
            routed, repo = _routed_names(body, call.model)
            identity = (health.identity_for(routed, repo=repo) if health else None) or _routing_identity(body)
        if identity is not None:
            self._last_identity = identity
        return _with_identity(decision, identity)

    def _known_identity(self) -> ServedIdentity | None:
        """The identity a response itself reported; nothing on the server can say more."""
        last = self._last_identity
        return last if last is not None and last.source == "served_by" else None

    def _identity_from(self, health: Health) -> ServedIdentity | None:
        return health.identity_for(self.settings.model) or self._last_identity


class ServedLayaClient(_ClientBase):
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
        self._http = httpx.Client(transport=transport, follow_redirects=False, verify=_ssl_context())

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
            health = _health_from(self._send("GET", HEALTH_PATH, request_headers(self.settings, call.request_id), None, deadline))
            self._identities.store(health)
        return self._identity_after(call, body, decision, health)

    def health(self) -> Health:
        """The server's /health document (liveness only, if it has a key and we have none)."""
        deadline = Deadline(self.settings.timeout_s)
        attempt = self._send("GET", HEALTH_PATH, request_headers(self.settings, new_request_id()), None, deadline)
        health = _health_from(attempt)
        if health is None:
            raise self._health_error(attempt)
        self._identities.store(health)
        return health

    def identity(self) -> ServedIdentity | None:
        """Which weights serve this client's model: `served_by` if seen, else /health, else routing."""
        return self._known_identity() or self._identity_from(self.health())

    def _send(self, method: str, path: str, headers: Mapping[str, str], body: bytes | None, deadline: Deadline) -> _Attempt:
        remaining = deadline.remaining()
        if remaining <= 0:
            return _Attempt(failure=TransportFailure.TIMED_OUT)
        watchdog = _SocketWatchdog(remaining)
        started = time.monotonic()
        attempt = _Attempt()
        request = self._http.build_request(method, self.settings.url + path, headers=headers, content=body,
                                           timeout=httpx.Timeout(remaining), extensions={"trace": watchdog.trace})
        with watchdog:
            try:
                response = self._http.send(request, stream=True)
                try:
                    watchdog.watch_response(response)
                    collected, complete = _Body(), True
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
                attempt = _Attempt(failure=TransportFailure.TIMED_OUT if watchdog.fired else _classify(exc), cause=exc)
        self._observe(method, path, attempt, body, time.monotonic() - started)
        return attempt

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "ServedLayaClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncServedLayaClient(_ClientBase):
    """`ServedLayaClient`'s async twin: same settings, same policy, same errors."""

    def __init__(
        self,
        url: str | None = None,
        *,
        model: str | None = None,
        api_key: str | None = None,
        timeout_s: float | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        on_exchange: Callable[[Exchange], None] | None = None,
        policy: RetryPolicy | None = None,
    ) -> None:
        super().__init__(url, model=model, api_key=api_key, timeout_s=timeout_s, on_exchange=on_exchange, policy=policy)
        self._http = httpx.AsyncClient(transport=transport, follow_redirects=False, verify=_ssl_context())

    async def decide(
        self,
        state: Any,
        questions: Questions,
        *,
        model: str | None = None,
        request_id: str | None = None,
        allow_truncation: bool = False,
    ) -> Decision:
        """Ask `questions` about `state` in one forward pass; raises `LayaConfigError` or `LayaCallError`."""
        import anyio

        call, deadline = self._begin(state, questions, model, request_id, allow_truncation)
        number = 0
        while True:
            number += 1
            attempt = await self._send("POST", DECIDE_PATH, call.headers, call.body, deadline)
            step = call.next_step(attempt, number, deadline, self.policy)
            if step is None:
                break
            await anyio.sleep(step.wait_s)
        body, decision = call.conclude(attempt, number)
        health, read_now = self._health_to_read(decision, deadline)
        if read_now:
            health = _health_from(await self._send("GET", HEALTH_PATH, request_headers(self.settings, call.request_id), None, deadline))
            self._identities.store(health)
        return self._identity_after(call, body, decision, health)

    async def health(self) -> Health:
        deadline = Deadline(self.settings.timeout_s)
        attempt = await self._send("GET", HEALTH_PATH, request_headers(self.settings, new_request_id()), None, deadline)
        health = _health_from(attempt)
        if health is None:
            raise self._health_error(attempt)
        self._identities.store(health)
        return health

    async def identity(self) -> ServedIdentity | None:
        return self._known_identity() or self._identity_from(await self.health())

    async def _send(self, method: str, path: str, headers: Mapping[str, str], body: bytes | None, deadline: Deadline) -> _Attempt:
        import anyio

        remaining = deadline.remaining()
        if remaining <= 0:
            return _Attempt(failure=TransportFailure.TIMED_OUT)
        started = time.monotonic()
        attempt = _Attempt()
        request = self._http.build_request(method, self.settings.url + path, headers=headers, content=body,
                                           timeout=httpx.Timeout(remaining))
        try:
            # A cancel scope bounds the whole response, trickled bodies included.
            with anyio.fail_after(remaining):
                response = await self._http.send(request, stream=True)
                try:
                    collected, complete = _Body(), True
                    async for chunk in response.aiter_bytes():
                        if not collected.add(chunk):
                            complete = False
                            break
                    collected.into(attempt, response, complete=complete)
                finally:
                    await response.aclose()
        except TimeoutError as exc:
            attempt = _Attempt(failure=TransportFailure.TIMED_OUT, cause=exc)
        except httpx.TransportError as exc:
            attempt = _Attempt(failure=_classify(exc), cause=exc)
        self._observe(method, path, attempt, body, time.monotonic() - started)
        return attempt

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncServedLayaClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

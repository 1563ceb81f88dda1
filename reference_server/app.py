"""The reference server's HTTP surface: every operation of the target spec, over a real engine.

`create_app(engine)` builds a Starlette app. The order of checks on a decision is deliberate:
authentication (a 401 reveals nothing and costs nothing), admission (503 at once beyond
`max_concurrent`, never a queue), media type, the body read under a size cap and a deadline
(413 / 408 before any parsing), then validation that names every invalid question, then
micro-batched inference off the event loop.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging
import re
import threading
import time
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pytest_laya.wire.headers import SPEC_HEADER, child_traceparent, is_valid_request_id, new_request_id
from pytest_laya.wire.pointer import question_pointer
from pytest_laya.wire.problems import Problem
from pytest_laya.wire.requests import check_media_type, parse_json_object

from .batching import MicroBatcher, Timed
from .engine import DecisionRequest, Engine, ModelIdentity
from .heap import release_free_heap
from .jev_strict import jev_strict_payload
from .settings import ServerSettings
from .validation import decision_requests

__all__ = ["create_app"]

log = logging.getLogger("reference_server")
_QUESTION_IN_MESSAGE = re.compile(r"question '([^']+)'")
_INLINE_PARSE_BYTES = 32 * 1024
_IDLE_HEAP_RELEASE_S = 1.0
_SPEC_HEADER = SPEC_HEADER.lower().encode("latin-1")


class _RequestContext:
    """Request id and trace context for one request, on every response including errors."""

    def __init__(self, scope: Scope) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        supplied = headers.get("x-request-id", "")
        self.request_id = supplied if is_valid_request_id(supplied) else new_request_id()
        # Continue the caller's trace with a span of our own; an invalid header starts none.
        self.traceparent = child_traceparent(headers.get("traceparent"))


class _ContextMiddleware:
    """Adds X-Request-Id (and traceparent) and Laya-Spec: target to every response, 404s and 500s included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        context = _RequestContext(scope)
        scope.setdefault("state", {})["context"] = context

        async def send_with_context(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"x-request-id"]
                headers.append((b"x-request-id", context.request_id.encode("latin-1")))
                headers.append((_SPEC_HEADER, b"target"))
                if context.traceparent:
                    headers.append((b"traceparent", context.traceparent.encode("latin-1")))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_context)


class _Admission:
    """At most `limit` decisions past authentication at once; the rest are refused, not queued."""

    def __init__(self, limit: int, retry_after_s: int, on_idle: Callable[[], None] | None = None) -> None:
        self.limit = limit
        self.retry_after_s = retry_after_s
        self.in_flight = 0
        self.on_idle = on_idle  # called each time the last decision in flight ends

    @asynccontextmanager
    async def slot(self):
        if self.in_flight >= self.limit:
            raise Problem("overloaded", f"{self.in_flight} requests in flight; retry after {self.retry_after_s} s",
                          retry_after_s=self.retry_after_s)
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1
            if self.in_flight == 0 and self.on_idle is not None:
                self.on_idle()


class _Server:
    """State shared by the handlers: engine, batcher, settings, readiness."""

    def __init__(self, engine: Engine, settings: ServerSettings, on_ready: Callable[[], None] | None,
                 on_load_failure: Callable[[BaseException], None] | None) -> None:
        self.engine = engine
        self.settings = settings
        self.on_ready = on_ready
        self.on_load_failure = on_load_failure
        self.admission = _Admission(settings.max_concurrent, settings.retry_after_s, on_idle=self.release_heap_when_idle)
        self._heap_release: asyncio.TimerHandle | None = None
        self.batcher: MicroBatcher | None = None
        self._large_parses: anyio.CapacityLimiter | None = None  # made on the serving loop
        self.load_error: BaseException | None = None
        self._expected_auth = f"Bearer {settings.api_key}".encode("utf-8", "surrogateescape") if settings.api_key else None

    # -- lifecycle ----------------------------------------------------------------------

    def load_in_background(self, loop: asyncio.AbstractEventLoop) -> threading.Thread:
        def load() -> None:
            try:
                self.engine.load()
            except BaseException as exc:  # noqa: BLE001 - reported by /readyz and the log
                self.load_error = exc
                log.exception("loading the checkpoints failed")
                if self.on_load_failure is not None:
                    loop.call_soon_threadsafe(self.on_load_failure, exc)
                return
            if self.on_ready is not None:
                loop.call_soon_threadsafe(self.on_ready)

        thread = threading.Thread(target=load, name="reference-server-load", daemon=True)
        thread.start()
        return thread

    def release_heap_when_idle(self) -> None:
        """Once no decision has been in flight for `_IDLE_HEAP_RELEASE_S`, give freed heap back.

        Rescheduled each time the server goes idle, so under steady traffic it waits; it runs
        off the loop (a trim of a large heap takes milliseconds).
        """
        loop = asyncio.get_running_loop()
        if self._heap_release is not None:
            self._heap_release.cancel()

        def release() -> None:
            self._heap_release = None
            if self.admission.in_flight == 0:
                loop.run_in_executor(None, release_free_heap)

        self._heap_release = loop.call_later(_IDLE_HEAP_RELEASE_S, release)

    # -- checks -------------------------------------------------------------------------

    def authorized(self, request: Request) -> bool:
        if self._expected_auth is None:
            return True
        supplied = request.headers.get("authorization", "").encode("utf-8", "surrogateescape")
        return hmac.compare_digest(supplied, self._expected_auth)

    def require_auth(self, request: Request) -> None:
        if not self.authorized(request):
            raise Problem("unauthorized")

    def require_ready(self) -> MicroBatcher:
        if not self.engine.ready or self.batcher is None:
            detail = "loading failed; see the server log" if self.load_error else "checkpoints are still loading"
            raise Problem("not_ready", detail, retry_after_s=self.settings.retry_after_s)
        return self.batcher

    async def read_body(self, request: Request) -> bytes:
        check_media_type(request.headers.get("content-type"))
        limit = self.settings.limits.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise Problem("too_large", f"the body is {declared} bytes, the limit is {limit}")
        chunks: list[bytes] = []
        size = 0
        try:
            with anyio.fail_after(self.settings.body_timeout_s):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limit:
                        raise Problem("too_large", f"the body is over {limit} bytes")
                    chunks.append(chunk)
        except TimeoutError:
            raise Problem("body_timeout", f"the body did not arrive within {self.settings.body_timeout_s:g} s") from None
        except ClientDisconnect:
            # The client went away mid-body (or uvicorn dropped a malformed chunked body): its
            # mistake, not a server failure, so no 500 and no traceback in the log.
            raise Problem("malformed_request", "the connection closed before the whole body arrived") from None
        return b"".join(chunks)

    # -- documents ----------------------------------------------------------------------

    def health_document(self) -> dict[str, Any]:
        models = dict(self.engine.models) if self.engine.ready else {}
        return {
            "status": "ok",
            "spec": "target",
            "ready": bool(self.engine.ready),
            "models": {name: identity.to_json() for name, identity in models.items()},
            "limits": self.settings.limits.to_json(),
            # laya-serve's own fields, which laya's clients read (RemoteRouter.loaded and
            # .loaded_revisions): without them a laya client sees nothing loaded here.
            "loaded": list(models),
            "revisions": {name: identity.revision for name, identity in models.items()},
        }

    def parse_decision(self, raw: bytes, *, batch: bool) -> tuple[dict[str, Any], str, list[DecisionRequest]]:
        """The body, the model and the requests it asks for, or the Problem that refuses it."""
        body = parse_json_object(raw)
        model, requests = decision_requests(body, self.settings.limits, list(self.engine.models), batch=batch)
        return body, model or self.engine.default_model, requests

    async def parse_decision_off_loop(self, raw: bytes, *, batch: bool) -> tuple[dict[str, Any], str, list[DecisionRequest]]:
        # Parsing and checking a large body costs up to a few hundred ms of CPU (a 2 MiB body of
        # tiny items); on the event loop, a few of them at once stalled /livez for seconds. Off
        # the loop and one at a time, the loop gets the GIL back every switch interval (only the
        # C calls, json.loads and json.dumps, hold it for tens of ms). Small bodies stay inline:
        # the thread hop costs more than they do.
        if len(raw) <= _INLINE_PARSE_BYTES:
            return self.parse_decision(raw, batch=batch)
        if self._large_parses is None:
            self._large_parses = anyio.CapacityLimiter(1)
        return await anyio.to_thread.run_sync(functools.partial(self.parse_decision, raw, batch=batch),
                                              limiter=self._large_parses)

    def identity(self, model: str) -> ModelIdentity:
        return self.engine.models[model]


def _problem_response(problem: Problem, request: Request) -> JSONResponse:
    context: _RequestContext = request.scope["state"]["context"]
    return JSONResponse(problem.document(context.request_id), status_code=problem.status,
                        media_type="application/problem+json", headers=problem.headers())


def _endpoint(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    async def run(request: Request) -> Response:
        try:
            return await handler(request)
        except Problem as problem:
            return _problem_response(problem, request)
        except Exception:
            context: _RequestContext = request.scope["state"]["context"]
            log.exception("request %s failed", context.request_id)
            return _problem_response(Problem("inference_failed", "the server failed; the cause is in its log"), request)

    return run


def _timing(timed: list[Timed]) -> str:
    queue = max(t.queue_ms for t in timed)
    infer = max(t.infer_ms for t in timed)
    return f"queue;dur={queue:.2f}, infer;dur={infer:.2f}"


def _engine_problem(exc: BaseException, requests: list[DecisionRequest]) -> Problem:
    if isinstance(exc, KeyError):
        return Problem("unknown_model", f"model {exc.args[0]!r} is not served here")
    if isinstance(exc, ValueError):
        match = _QUESTION_IN_MESSAGE.search(str(exc))
        qid = match.group(1) if match else next(iter(requests[0].questions))
        return Problem("invalid_question", f"question {qid!r}: the model refused it ({exc})",
                       errors=[{"question": qid, "pointer": question_pointer(qid), "detail": str(exc)}])
    log.error("inference failed", exc_info=exc)
    return Problem("inference_failed", "inference failed; the cause is in the server log")


def create_app(
    engine: Engine,
    settings: ServerSettings | None = None,
    *,
    on_ready: Callable[[], None] | None = None,
    on_load_failure: Callable[[BaseException], None] | None = None,
) -> Starlette:
    """An ASGI app serving `engine` per the target spec; loading starts with the app's lifespan.

    `on_ready` is called on the event loop once every checkpoint is loaded and warm;
    `on_load_failure` with the exception if loading failed (the app then stays not ready).
    """
    server = _Server(engine, settings or ServerSettings(), on_ready, on_load_failure)

    async def decide(request: Request, *, batch: bool) -> Response:
        started = time.perf_counter()
        server.require_auth(request)
        async with server.admission.slot():
            batcher = server.require_ready()
            body, model, requests = await server.parse_decision_off_loop(await server.read_body(request), batch=batch)
            try:
                timed = await asyncio.gather(*(batcher.submit(model, r) for r in requests))
            except Exception as exc:  # noqa: BLE001 - mapped to the documented problems
                raise _engine_problem(exc, requests) from exc
        identity = server.identity(model)
        routing = {"model": model, "repo": identity.checkpoint,
                   "reason": "explicit model" if body.get("model") else "default model",
                   "detection": None, "workflow": None}
        if batch:
            # `model` in each result, as laya-serve has it, so today's clients read batches too.
            results = [{"model": identity.checkpoint, "answers": t.result.answers, "usage": t.result.usage}
                       for t in timed]
            payload: dict[str, Any] = {
                "model": identity.checkpoint,
                "results": results,
                "total_usage": {
                    "input_tokens": sum(t.result.usage.get("input_tokens", 0) for t in timed),
                    "output_tokens": sum(t.result.usage.get("output_tokens", 0) for t in timed),
                },
                "served_by": identity.to_json(),
            }
        else:
            result = timed[0].result
            payload = {"model": identity.checkpoint, "answers": result.answers, "usage": result.usage,
                       "routing": routing, "served_by": identity.to_json()}
        if server.settings.jev_strict:
            payload = jev_strict_payload(payload, batch=batch, latency_ms=(time.perf_counter() - started) * 1000.0)
        return JSONResponse(payload, headers={"Server-Timing": _timing(list(timed))})

    async def systemone(request: Request) -> Response:
        return await decide(request, batch=False)

    async def systemone_batch(request: Request) -> Response:
        return await decide(request, batch=True)

    async def livez(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def health(request: Request) -> Response:
        if not server.authorized(request):
            return JSONResponse({"status": "ok"})
        return JSONResponse(server.health_document())

    async def readyz(request: Request) -> Response:
        server.require_ready()
        return await health(request)

    @asynccontextmanager
    async def lifespan(app: Starlette):
        loop = asyncio.get_running_loop()
        loader = server.load_in_background(loop)
        server.batcher = MicroBatcher(engine, max_batch=server.settings.max_batch,
                                      window_ms=server.settings.batch_window_ms,
                                      passes=server.settings.passes)
        try:
            yield
        finally:
            await server.batcher.aclose()
            await asyncio.to_thread(loader.join, 30)
            engine.close()

    routes = [
        Route("/v1/systemone", _endpoint(systemone), methods=["POST"]),
        Route("/v1/systemone/batch", _endpoint(systemone_batch), methods=["POST"]),
        Route("/health", _endpoint(health), methods=["GET"]),
        Route("/livez", _endpoint(livez), methods=["GET"]),
        Route("/readyz", _endpoint(readyz), methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.add_middleware(_ContextMiddleware)
    app.state.server = server
    return app

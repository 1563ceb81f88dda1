"""The reference server's HTTP surface: every operation of the target spec, over a real engine.

`create_app(engine)` builds a Starlette app. The order of checks on a decision is deliberate:
authentication (a 401 reveals nothing and costs nothing), readiness, media type, the body read
under a size cap, a deadline and a budget of its own (413 / 408 / 503 before any parsing; a
body that arrived with its head needs no place in that budget), admission to inference (503 at
once beyond `max_concurrent`, never a queue), then validation that names every invalid
question and bounds the tokens the request asks for, then the tokens of inference in flight
across requests (503 beyond `max_inflight_tokens`, which bounds the work queued), then
micro-batched inference off the event loop. So a slow upload holds a body-read
slot, never an inference slot.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging
import re
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pytest_laya.wire.headers import SPEC_HEADER, answered_request_id, child_traceparent
from pytest_laya.wire.pointer import question_pointer
from pytest_laya.wire.problems import Problem
from pytest_laya.wire.requests import check_media_type, parse_json_object, requested_tokens

from .batching import MicroBatcher, Timed
from .engine import ANSWER_TOLERANCE, DecisionRequest, Engine, ModelIdentity
from .heap import release_free_heap
from .jev_strict import jev_strict_payload, refuse_unhonoured
from .settings import ServerSettings
from .validation import decision_requests

__all__ = ["create_app"]

log = logging.getLogger("pytest_laya_reference")
_QUESTION_IN_MESSAGE = re.compile(r"question '([^']+)'")
_INLINE_PARSE_BYTES = 32 * 1024
_IDLE_HEAP_RELEASE_S = 1.0
_SPEC_HEADER = SPEC_HEADER.lower().encode("latin-1")


class _RequestContext:
    """Request id and trace context for one request, on every response including errors."""

    def __init__(self, scope: Scope) -> None:
        supplied = ""
        traceparents: list[str] = []
        for key, value in scope.get("headers", []):
            name = key.decode("latin-1").lower()
            if name == "x-request-id":
                supplied = value.decode("latin-1")
            elif name == "traceparent":
                traceparents.append(value.decode("latin-1"))
        self.request_id = answered_request_id(supplied)
        # Continue the caller's trace with a span of our own; an invalid header starts none.
        self.traceparent = child_traceparent(traceparents)


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
    """At most `limit` holders at once; the rest are refused with 503 overloaded, not queued.

    One for inference (decisions whose body has arrived) and one for body reads.
    """

    def __init__(self, limit: int, retry_after_s: int, on_idle: Callable[[], None] | None = None,
                 what: str = "requests in flight") -> None:
        self.limit = limit
        self.retry_after_s = retry_after_s
        self.in_flight = 0
        self.on_idle = on_idle  # called each time the last holder leaves
        self.what = what

    @asynccontextmanager
    async def slot(self, weight: int = 1) -> AsyncIterator[None]:
        """Hold `weight` of the limit (1: one holder; a token count for the token budget)."""
        if self.in_flight + weight > self.limit:
            raise Problem("overloaded", f"{self.in_flight} {self.what}; retry after {self.retry_after_s} s",
                          retry_after_s=self.retry_after_s)
        self.in_flight += weight
        try:
            yield
        finally:
            self.in_flight -= weight
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
        self.body_reads = _Admission(settings.max_body_reads, settings.retry_after_s,
                                     what="request bodies being received")
        self.tokens = _Admission(settings.inflight_tokens, settings.retry_after_s,
                                 what=f"tokens of inference in flight (at most {settings.inflight_tokens})")
        self._heap_release: asyncio.TimerHandle | None = None
        self.batcher: MicroBatcher | None = None
        self._large_parses: anyio.CapacityLimiter | None = None  # made on the serving loop
        self.load_error: BaseException | None = None
        # ServerSettings refuses an empty key or one with whitespace, so None is the one open server.
        self._expected_token = settings.api_key.encode("ascii") if settings.api_key is not None else None

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
        """`Authorization: Bearer <key>`; the scheme in any case (RFC 9110 section 11.1), one
        header only, the token compared in constant time."""
        if self._expected_token is None:
            return True
        values = [v for k, v in request.scope.get("headers", []) if k.lower() == b"authorization"]
        scheme, _, token = (values[0] if len(values) == 1 else b"").partition(b" ")
        matches = hmac.compare_digest(token.lstrip(b" "), self._expected_token)
        return matches and scheme.lower() == b"bearer"

    def require_auth(self, request: Request) -> None:
        if not self.authorized(request):
            raise Problem("unauthorized")

    def require_ready(self) -> MicroBatcher:
        if not self.engine.ready or self.batcher is None:
            detail = "loading failed; see the server log" if self.load_error else "checkpoints are still loading"
            raise Problem("not_ready", detail, retry_after_s=self.settings.retry_after_s)
        return self.batcher

    async def read_body(self, request: Request) -> bytes:
        """The whole body, under the size limit and `body_timeout_s`, or the Problem that refuses it.

        A body the server already holds when it first asks (it arrived with the request head,
        as a client's single write of head and body does) is taken at once. Any other body
        holds one of `max_body_reads` slots while it arrives: slow uploads cost those, never an
        inference slot, and past the budget they are refused at once.
        """
        check_media_type(request.headers.get("content-type"))
        limit = self.settings.limits.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise Problem("too_large", f"the body is {declared} bytes, the limit is {limit}")
        receive = request.receive
        chunks: list[bytes] = []
        size = 0

        def take(message: Message) -> bool:
            """Add one ASGI message to the body; True when it was the last."""
            nonlocal size
            if message["type"] == "http.disconnect":
                # The client went away mid-body (or uvicorn dropped a malformed chunked body):
                # its mistake, not a server failure, so no 500 and no traceback in the log.
                raise Problem("malformed_request", "the connection closed before the whole body arrived")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise Problem("too_large", f"the body is over {limit} bytes")
            chunks.append(chunk)
            return not message.get("more_body", False)

        first = asyncio.ensure_future(receive())
        try:
            await asyncio.sleep(0)  # one loop turn: receive() finishes now if the server holds the body
            if first.done() and take(first.result()):
                return b"".join(chunks)
            async def the_rest() -> None:
                done = take(await first) if not first.done() else False
                while not done:
                    done = take(await receive())

            async with self.body_reads.slot():
                try:
                    await asyncio.wait_for(the_rest(), self.settings.body_timeout_s)
                except asyncio.TimeoutError:  # TimeoutError itself from Python 3.11
                    # A client this slow would drip into the next request too: the connection
                    # ends with the 408. (Other refusals leave it open: uvicorn discards the
                    # rest of the body while the head timeout runs, and the client reads the
                    # answer instead of a reset for unread data.)
                    request.scope["state"]["close_connection"] = True
                    raise Problem("body_timeout",
                                  f"the body did not arrive within {self.settings.body_timeout_s:g} s") from None
        finally:
            if not first.done():
                first.cancel()
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
            # The most one probability of a request's answers moves between asking it alone, in a
            # batch, under load or again (engine.ANSWER_TOLERANCE says why it is not 0).
            "answer_tolerance": ANSWER_TOLERANCE,
            # laya-serve's own fields, which laya's clients read (RemoteRouter.loaded and
            # .loaded_revisions): without them a laya client sees nothing loaded here.
            "loaded": list(models),
            "revisions": {name: identity.revision for name, identity in models.items()},
        }

    def parse_decision(self, raw: bytes, *, batch: bool) -> tuple[dict[str, Any], str, list[DecisionRequest]]:
        """The body, the model and the requests it asks for, or the Problem that refuses it."""
        body = parse_json_object(raw)
        model, requests = decision_requests(body, self.settings.limits, list(self.engine.models), batch=batch)
        if self.settings.jev_strict:
            refuse_unhonoured(requests)
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
    headers = problem.headers()
    if request.scope["state"].get("close_connection"):
        headers["Connection"] = "close"
    return JSONResponse(problem.document(context.request_id), status_code=problem.status,
                        media_type="application/problem+json", headers=headers)


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


def _decision_payload(identity: ModelIdentity, model: str, body: dict[str, Any], timed: list[Timed], *,
                      batch: bool) -> dict[str, Any]:
    """The 200 body of a decision (one result) or of the batch route (one result per state)."""
    if batch:
        # `model` in each result, as laya-serve has it, so today's clients read batches too.
        results = [{"model": identity.checkpoint, "answers": t.result.answers, "usage": t.result.usage}
                   for t in timed]
        return {
            "model": identity.checkpoint,
            "results": results,
            "total_usage": {
                "input_tokens": sum(t.result.usage.get("input_tokens", 0) for t in timed),
                "output_tokens": sum(t.result.usage.get("output_tokens", 0) for t in timed),
            },
            "served_by": identity.to_json(),
        }
    routing = {"model": model, "repo": identity.checkpoint,
               "reason": "explicit model" if body.get("model") else "default model",
               "detection": None, "workflow": None}
    result = timed[0].result
    return {"model": identity.checkpoint, "answers": result.answers, "usage": result.usage,
            "routing": routing, "served_by": identity.to_json()}


_PATHS = ("/v1/systemone", "/v1/systemone/batch", "/health", "/livez", "/readyz")


async def _not_found(request: Request, exc: Exception) -> Response:
    path = request.url.path
    if path != "/" and path.rstrip("/") in _PATHS:
        detail = f"paths take no trailing slash: use {path.rstrip('/')}"
    else:
        detail = "no such path; this server serves " + ", ".join(_PATHS)
    return _problem_response(Problem("not_found", detail), request)


async def _method_not_allowed(request: Request, exc: Exception) -> Response:
    allow = (getattr(exc, "headers", None) or {}).get("Allow", "")
    problem = Problem("method_not_allowed", f"{request.url.path} takes {allow}")
    response = _problem_response(problem, request)
    response.headers["Allow"] = allow
    return response


async def _http_exception(request: Request, exc: Exception) -> Response:
    status = getattr(exc, "status_code", 500)
    if status == 405:
        return await _method_not_allowed(request, exc)
    if status == 404:
        return await _not_found(request, exc)
    raise exc


class _ReferenceApp(Starlette):
    """Starlette, with a decision (``POST`` to a decision path) taken straight to its handler.

    A decision needs none of the layers between: its handler answers every error itself
    (``_endpoint``), and the path and method are the route's. Skipping them (the error and
    exception middleware, the router, the route's request wrapper) saves about a tenth of the
    server's own CPU per decision. Everything else goes through Starlette as before.
    """

    decisions: dict[str, ASGIApp]  # path -> the decision's app, set by create_app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            decision = self.decisions.get(scope["path"])
            if decision is not None:
                scope["app"] = self
                await decision(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


def _direct(handler: Callable[[Request], Awaitable[Response]]) -> ASGIApp:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        response = await handler(Request(scope, receive, send))
        await response(scope, receive, send)

    return app


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
        server.require_ready()
        raw = await server.read_body(request)
        async with server.admission.slot():
            batcher = server.require_ready()
            body, model, requests = await server.parse_decision_off_loop(raw, batch=batch)
            tokens = requested_tokens(len(requests), len(requests[0].questions), requests[0].max_len)
            async with server.tokens.slot(tokens):
                try:
                    # One request (the usual case) awaits its answer itself: gather would wrap it
                    # in a task of its own, one more loop turn on every decision's way.
                    timed = ([await batcher.submit(model, requests[0])] if len(requests) == 1
                             else await asyncio.gather(*(batcher.submit(model, r) for r in requests)))
                except Exception as exc:  # noqa: BLE001 - mapped to the documented problems
                    raise _engine_problem(exc, requests) from exc
        payload = _decision_payload(server.identity(model), model, body, list(timed), batch=batch)
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
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        loader = server.load_in_background(loop)
        server.batcher = MicroBatcher(engine, max_batch=server.settings.max_batch,
                                      window_ms=server.settings.batch_window_ms,
                                      busy_window_ms=server.settings.busy_window_ms,
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
    # No redirect for a trailing slash: Starlette's 307 echoed the client's Host header in its
    # Location. Every path answers itself, or a problem+json 404 / 405 like every other error.
    app = _ReferenceApp(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: _http_exception})
    app.router.redirect_slashes = False
    app.add_middleware(_ContextMiddleware)
    app.decisions = {route.path: _ContextMiddleware(_direct(route.endpoint))
                     for route in routes if route.methods and "POST" in route.methods}
    app.state.server = server
    return app

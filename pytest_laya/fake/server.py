"""`FakeLayaServer`: the fake on a real loopback port, with the fault script downstream tests need."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pytest_laya.fake.answers import IN_PROCESS_URL, SERVER_NAME, FakeLaya
from pytest_laya.fake.flavours import TARGET
from pytest_laya.fake.pins import Pin, QuestionsMatcher, StateMatcher
from pytest_laya.faults import (
    DEFAULT_GARBAGE,
    Action,
    Delay,
    Handler,
    ReceivedRequest,
    Refuse,
    ResetBeforeHeaders,
    ResetMidBody,
    Respond,
    ScriptedServer,
    Trickle,
    Truncate,
)
from pytest_laya.wire.calls import Calls
from pytest_laya.wire.headers import REQUEST_ID_HEADER, answered_request_id
from pytest_laya.wire.routes import JSON_MEDIA_TYPE

if TYPE_CHECKING:  # pragma: no cover
    from pytest_laya.fake.in_memory import FaultSteps
    from pytest_laya.fake.shim import InProcessHost
    from pytest_laya.fake.transport import FakeLayaTransport

__all__ = [
    "FakeLayaServer",
    "serve",
]


_SERVER = SERVER_NAME


class FakeLayaServer:
    """A fake Laya on ``http://127.0.0.1:<free port>``, with a fault script.

    Use it as a context manager (or call :meth:`start` / :meth:`stop`) and point a client at
    :attr:`url`. Every request is answered by :class:`FakeLaya` in the chosen `flavor`, unless a
    fault method queued an action for it: each call queues actions for the next request(s), in
    arrival order and whatever their route, and normal answers resume once they are used up.
    With `api_key` set, decisions need ``Authorization: Bearer <api_key>``, and /health (and
    /readyz) show only liveness without it. Every request is kept in :attr:`requests`, and every
    decision request, parsed, with its response, in :attr:`calls`. :meth:`decide` pins answers;
    :meth:`transport` and :meth:`intercept` answer in process, with the same answers and pins
    (the fault script acts on the loopback server only). Leaving the ``with`` block raises the
    pin mistakes :meth:`check_pins` finds.
    """

    def __init__(
        self,
        *,
        flavor: str = TARGET,
        api_key: str | None = None,
        model: str = "fake-laya",
        revision: str = "fake-0",
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if api_key is not None and (not isinstance(api_key, str) or not api_key):
            raise ValueError("api_key must be a non-empty string or None")
        self.laya = FakeLaya(model=model, revision=revision, flavor=flavor)
        self._api_key = api_key
        self._server = ScriptedServer(default=self._default, host=host, port=port)
        #: A test's scripted faults (`FaultSteps`), taken by decision calls that reach the port
        #: while no fault-script action is queued (the plugin's `laya_server` sets them per test).
        self.steps: FaultSteps | None = None

    # ----------------------------------------------------------------- lifecycle and state

    @property
    def flavor(self) -> str:
        return self.laya.flavor

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:PORT`` (after :meth:`start`)."""
        return self._server.url

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def requests(self) -> list[ReceivedRequest]:
        """Every request received, in arrival order."""
        return self._server.requests

    @property
    def errors(self) -> list[BaseException]:
        """Exceptions the fake raised while answering (a bug in the fake, or in a raw Handler)."""
        return self._server.errors

    @property
    def pending(self) -> int:
        """Fault-script actions not yet used."""
        return self._server.pending

    @property
    def listening(self) -> bool:
        """False while a :meth:`refuse` window is in effect."""
        return self._server.listening

    def start(self) -> FakeLayaServer:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    def __enter__(self) -> FakeLayaServer:
        return self.start()

    def __exit__(self, exc_type: Any, *exc_info: object) -> None:
        self.stop()
        if exc_type is None:
            self.check_pins()

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> bool:
        return self._server.wait_for_requests(count, timeout)

    def __repr__(self) -> str:
        return f"<FakeLayaServer {self.flavor} {self._server!r}>"

    # ----------------------------------------------------------------- pinned answers and calls

    def decide(self, answers: Mapping[str, Any], *, state: StateMatcher = None, questions: QuestionsMatcher = None,
               times: int | None = None) -> Pin:
        """Pin answers by question id: ``server.decide({"team": "billing", "refund": 0.91})``.

        A choice key, a score level, a noul probability or a distribution per question; `state`
        and `questions` narrow the requests it applies to, `times` how often. Returns the `Pin`
        (``.remove()``, ``.calls``, ``.errors``; a context manager). See `FakeLaya.pin`.
        """
        return self.laya.pin(answers, state=state, questions=questions, times=times)

    @property
    def pins(self) -> tuple[Pin, ...]:
        """The pins in effect, oldest first."""
        return self.laya.pins

    def unpin_all(self) -> None:
        """Remove every pin (their calls and errors are kept)."""
        self.laya.unpin_all()

    @property
    def calls(self) -> Calls:
        """Every decision request, parsed (`pytest_laya.wire.calls.Call`), with its response, in the
        order answered: over the loopback port and in process."""
        return self.laya.calls

    def check_pins(self, *, unused: bool = True) -> None:
        """Raise `PinError` for pinned answers the fake could not give and (with `unused`) pins never used."""
        self.laya.check_pins(unused=unused)

    def transport(self) -> FakeLayaTransport:
        """An in-process httpx transport answering as this server does (its key, pins, calls); no faults."""
        return self.laya.transport(api_key=self._api_key)

    def intercept(self, url: str = IN_PROCESS_URL) -> InProcessHost:
        """Serve `url`'s host in process to http.client, urllib and requests, as this server
        answers (its key, pins, calls; no faults): ``with server.intercept() as host: ... host.url``."""
        return self.laya.intercept(url, api_key=self._api_key)

    # ----------------------------------------------------------------- the fault script

    def refuse(self, for_s: float = 1.0) -> FakeLayaServer:
        """Refuse connections for `for_s` seconds (ECONNREFUSED), then listen again.

        Queued on an empty script it starts at once; after other queued faults it starts once
        the request before it is answered (see :class:`~pytest_laya.faults.Refuse`).
        """
        self._server.enqueue(Refuse(for_s))
        return self

    def reset(self, *, mid_body: bool = False, after_bytes: int | None = None) -> FakeLayaServer:
        """The next request's connection is reset (TCP RST): before any byte, or, with
        `mid_body`, after the headers and part of the real answer (`after_bytes`, default half)."""
        if not mid_body:
            if after_bytes is not None:
                raise ValueError("after_bytes applies to reset(mid_body=True) only")
            self._server.enqueue(Handler(self._recorded(ResetBeforeHeaders(), "reset()")))
            return self
        if after_bytes is not None and (isinstance(after_bytes, bool) or not isinstance(after_bytes, int) or after_bytes < 0):
            raise ValueError(f"after_bytes must be an int >= 0, got {after_bytes!r}")

        def cut(request: ReceivedRequest) -> Action:
            response = self._dispatch(request, fault="reset(mid_body=True)")
            size = len(response.payload)
            return ResetMidBody(response, after_bytes=None if after_bytes is None else min(after_bytes, size - 1))

        self._server.enqueue(Handler(cut))
        return self

    def delay(self, seconds: float) -> FakeLayaServer:
        """The next request is answered normally, `seconds` after it arrived."""
        self._server.enqueue(Delay(seconds, Handler(lambda request: self._dispatch(request, fault=f"delay({seconds})"))))
        return self

    def trickle(self, *, chunk_size: int = 1, interval_s: float = 0.1) -> FakeLayaServer:
        """The next real answer: headers at once, then `chunk_size` bytes every `interval_s`."""
        Trickle(Respond(200, b"x"), chunk_size=chunk_size, interval_s=interval_s)  # check the arguments now
        self._server.enqueue(Handler(lambda request: Trickle(self._dispatch(request, fault="trickle()"),
                                                             chunk_size=chunk_size, interval_s=interval_s)))
        return self

    def status(self, code: int, *, retry_after: int | None = None, detail: str | None = None) -> FakeLayaServer:
        """The next request gets HTTP `code` with the flavor's spec-correct error body.

        Target: problem+json with the documented code (503 ``overloaded``, 502
        ``backend_unavailable``, ...); laya-serve: ``{"detail": <laya-serve's text>}``, and for 502
        / 504 omni-jev's text/plain ``backend unavailable\\n`` / ``backend timed out\\n``. A 503
        always has Retry-After (`retry_after`, default 1). `detail` replaces the text.
        """
        self.laya.refusal(code, retry_after=retry_after)  # check the arguments now, not mid-request

        def respond(request: ReceivedRequest) -> Action:
            questions = None
            try:
                parsed = json.loads(request.body) if request.body else None
                questions = parsed.get("questions") if isinstance(parsed, dict) else None
            except ValueError:
                pass
            status, headers, body = self.laya.refusal(code, detail=detail, retry_after=retry_after,
                                                      request_id=request.header(REQUEST_ID_HEADER),
                                                      questions=questions)
            self.laya.record(request, status, {**headers, "Server": _SERVER}, body, fault=f"status({code})")
            return self._respond(status, headers, body)

        self._server.enqueue(Handler(respond))
        return self

    def garbage_body(self, *, status: int = 200, body: bytes = DEFAULT_GARBAGE) -> FakeLayaServer:
        """The next request gets a well-framed `status` that claims JSON and is not JSON."""
        try:
            json.loads(body)
        except ValueError:
            pass
        else:
            raise ValueError(f"garbage body {body!r} is valid JSON")

        def respond(request: ReceivedRequest) -> Action:
            headers = {"Content-Type": JSON_MEDIA_TYPE, "Connection": "close", "Server": _SERVER}
            if self.flavor == TARGET:
                headers[REQUEST_ID_HEADER] = self._request_id(request)
            self.laya.record(request, status, headers, body.decode("utf-8", "replace"), fault="garbage_body()")
            return Respond(status, body, headers=headers)

        self._server.enqueue(Handler(respond))
        return self

    def truncate(self, after_bytes: int = 20) -> FakeLayaServer:
        """The next real answer is cut after `after_bytes` body bytes and the connection closed
        cleanly (Content-Length promises more)."""
        if isinstance(after_bytes, bool) or not isinstance(after_bytes, int) or after_bytes < 0:
            raise ValueError(f"after_bytes must be an int >= 0, got {after_bytes!r}")

        def cut(request: ReceivedRequest) -> Action:
            response = self._dispatch(request, fault=f"truncate({after_bytes})")
            return Truncate(response, after_bytes=min(after_bytes, len(response.payload) - 1))

        self._server.enqueue(Handler(cut))
        return self

    def script(self, *actions: Action) -> FakeLayaServer:
        """Queue raw :mod:`pytest_laya.faults` actions (Respond, Delay, Handler, ...).

        Raw actions are not in :attr:`calls` (they are in :attr:`requests`), but for answers
        built with :meth:`normal_response`."""
        self._server.enqueue(*actions)
        return self

    def normal_response(self, request: ReceivedRequest) -> Respond:
        """The normal answer to `request`, as a Respond: a building block for raw scripts,
        e.g. ``server.script(Handler(lambda r: Trickle(server.normal_response(r), chunk_size=8)))``."""
        return self._dispatch(request)

    # ----------------------------------------------------------------- HTTP

    def _respond(self, status: int, headers: Mapping[str, str], body: Any) -> Respond:
        return Respond(status, body, headers={**headers, "Server": _SERVER})

    def _request_id(self, request: ReceivedRequest) -> str:
        return answered_request_id(request.header(REQUEST_ID_HEADER))

    def _recorded(self, action: Action, fault: str) -> Any:
        def record(request: ReceivedRequest) -> Action:
            self.laya.record(request, None, fault=fault)
            return action
        return record

    def _default(self, request: ReceivedRequest) -> Action:
        steps = self.steps
        action = steps.socket_action(request, self._dispatch) if steps is not None else None
        return action if action is not None else self._dispatch(request)

    def _dispatch(self, request: ReceivedRequest, fault: str | None = None) -> Respond:
        try:
            url: str | None = self.url + request.path
        except RuntimeError:  # never started: a raw script (or another server) borrows its answers
            url = None
        status, headers, body = self.laya.exchange(request, api_key=self._api_key, url=url, fault=fault)
        return self._respond(status, headers, body)


def serve(**kwargs: Any) -> FakeLayaServer:
    """A started :class:`FakeLayaServer` (stop it, or use ``with serve(...) as server``)."""
    return FakeLayaServer(**kwargs).start()

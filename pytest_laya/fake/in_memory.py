"""The fake answering in memory for one test, and the faults that test scripts: `InMemoryFake`, `FaultSteps`.

`InMemoryFake` stands where a cassette stands on the interception layer's route (vcrpy's
protocol: ``can_play_response_for``, ``play_response``), so every client vcrpy intercepts
(httpx, http.client, urllib, requests, aiohttp) is answered by `FakeLaya.exchange` with no
socket. `FaultSteps` is what a test scripts (`fail`, `timeout`, `delay`): one step per decision
call, in order, taken by whichever way the call arrives -- in memory here, or over the
loopback `FakeLayaServer` (another process, a client nothing intercepts), where a timeout is a
long delay. In memory, `timeout()` raises the client library's own timeout at once:
``httpx.ReadTimeout`` for httpx, `TimeoutError` (``socket.timeout``) for http.client and
urllib, which urllib3 and requests turn into their own ``ReadTimeout``.
"""

from __future__ import annotations

import http
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pytest_laya.faults import Delay, Handler, ReceivedRequest, Respond
from pytest_laya.wire.routes import BATCH_PATH, DECIDE_PATH

if TYPE_CHECKING:  # pragma: no cover
    from pytest_laya.fake.answers import FakeLaya
    from pytest_laya.faults import Action

__all__ = ["SOCKET_TIMEOUT_S", "FaultSteps", "InMemoryFake", "Step"]

#: How long a scripted timeout holds a call that reached the loopback port (no client waits this long).
SOCKET_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Step:
    """One scripted answer: ``fail`` (a status), ``timeout`` or ``delay``."""

    kind: str
    status: int = 0
    retry_after: int | None = None
    code: str | None = None
    seconds: float = 0.0

    @property
    def name(self) -> str:
        """How a call answered by this step shows its fault (`Call.fault`)."""
        if self.kind == "fail":
            return f"fail({self.status})"
        return "timeout()" if self.kind == "timeout" else f"delay({self.seconds:g})"


class FaultSteps:
    """The faults a test scripted, taken one per decision call, oldest first (thread-safe)."""

    def __init__(self, laya: FakeLaya) -> None:
        self.laya = laya
        self._steps: deque[Step] = deque()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._steps)

    def fail(self, status: int, *, retry_after: int | None = None, code: str | None = None) -> None:
        """The next call gets HTTP `status` with the spec's error body (503: Retry-After, 1 s by default)."""
        self.laya.refusal(status, retry_after=retry_after, code=code)  # check the arguments now
        self._add(Step("fail", status=status, retry_after=retry_after, code=code))

    def timeout(self) -> None:
        """The next call times out: at once in memory, a long delay over a socket."""
        self._add(Step("timeout"))

    def delay(self, seconds: float) -> None:
        """The next call is answered normally, `seconds` late."""
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds < float("inf"):
            raise ValueError(f"delay takes seconds >= 0, got {seconds!r}")
        self._add(Step("delay", seconds=float(seconds)))

    def clear(self) -> None:
        with self._lock:
            self._steps.clear()

    def _add(self, step: Step) -> None:
        with self._lock:
            self._steps.append(step)

    def take(self, request: ReceivedRequest) -> Step | None:
        """The step for `request`: the oldest one left, when `request` is a decision call."""
        if request.method != "POST" or request.path.split("?", 1)[0] not in (DECIDE_PATH, BATCH_PATH):
            return None
        with self._lock:
            return self._steps.popleft() if self._steps else None

    def refusal(self, step: Step, request: ReceivedRequest) -> tuple[int, dict[str, str], Any]:
        """A ``fail`` step's answer to `request`, recorded in the fake's calls."""
        questions = None
        try:
            body = request.json() if request.body else None
            questions = body.get("questions") if isinstance(body, dict) else None
        except ValueError:
            pass
        status, headers, content = self.laya.refusal(step.status, retry_after=step.retry_after, code=step.code,
                                                     request_id=request.header("x-request-id"), questions=questions)
        headers = {**headers, "Server": "pytest-laya-fake"}
        self.laya.record(request, status, headers, content, fault=step.name)
        return status, headers, content

    def socket_action(self, request: ReceivedRequest, answer: Any) -> Action | None:
        """The loopback server's action for `request` (None: answer normally); `answer(request, fault)` answers."""
        step = self.take(request)
        if step is None:
            return None
        if step.kind == "fail":
            status, headers, content = self.refusal(step, request)
            return Respond(status, content, headers=headers)
        seconds = SOCKET_TIMEOUT_S if step.kind == "timeout" else step.seconds
        return Delay(seconds, Handler(lambda r: answer(r, step.name)))


def _timeout_error(request: Any) -> BaseException:
    """The timeout the calling client library raises itself, found from vcrpy's stub on the stack."""
    message = f"timed out (scripted by the test: laya_server.timeout()) {request.method} {request.uri}"
    frame = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module == "vcr.stubs.httpx_stubs":
            library = frame.f_locals.get("httpx")
            if library is not None and hasattr(library, "ReadTimeout"):
                error: BaseException = library.ReadTimeout(message, request=frame.f_locals.get("real_request"))
                break
        if module.startswith("vcr.stubs.aiohttp"):
            import asyncio

            error = asyncio.TimeoutError(message)
            break
        frame = frame.f_back  # type: ignore[assignment]
    else:
        error = TimeoutError(message)  # socket.timeout: http.client, urllib; urllib3 and requests wrap it
    error.laya_fault = "timeout"  # type: ignore[attr-defined]
    return error


class InMemoryFake:
    """A route's "cassette" that answers every request with the fake, in memory, taking `steps`."""

    def __init__(self, laya: FakeLaya, steps: FaultSteps, *, api_key: str | None = None) -> None:
        self.laya = laya
        self.steps = steps
        self.api_key = api_key

    # vcrpy's cassette protocol, as `LayaRoute` asks it
    def can_play_response_for(self, request: Any) -> bool:
        return True

    def append(self, request: Any, response: Any) -> None:  # pragma: no cover - every request is played
        raise AssertionError("the in-memory fake plays every request")

    def play_response(self, request: Any) -> dict[str, Any]:
        received = _received(request)
        step = self.steps.take(received)
        fault = None
        if step is not None and step.kind == "timeout":
            self.laya.record(received, None, fault=step.name)
            raise _timeout_error(request)
        if step is not None and step.kind == "fail":
            status, headers, body = self.steps.refusal(step, received)
        else:
            if step is not None:  # delay
                time.sleep(step.seconds)
                fault = step.name
            status, headers, body = self.laya.exchange(received, api_key=self.api_key, url=request.uri, fault=fault)
        return _vcr_response(received, status, headers, body)


def _received(request: Any) -> ReceivedRequest:
    split = urlsplit(request.uri)
    headers: dict[str, str] = {}
    for name, value in (request.headers or {}).items():
        for one in value if isinstance(value, (list, tuple)) else [value]:
            key = str(name).lower()
            headers[key] = f"{headers[key]}, {one}" if key in headers else str(one)
    body = request.body
    if body is None:
        body = b""
    elif not isinstance(body, bytes):
        body = str(body).encode("utf-8")
    path = (split.path or "/") + (f"?{split.query}" if split.query else "")
    return ReceivedRequest(method=str(request.method).upper(), path=path, headers=headers, body=body)


def _vcr_response(request: ReceivedRequest, status: int, headers: dict[str, str], body: Any) -> dict[str, Any]:
    from pytest_laya.fake.transport import rendered

    items, payload = rendered(status, headers, body)
    grouped: dict[str, list[str]] = {}
    for name, value in items:
        grouped.setdefault(name, []).append(value)
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    return {"status": {"code": status, "message": phrase}, "headers": grouped,
            "body": {"string": b"" if request.method == "HEAD" else payload}}

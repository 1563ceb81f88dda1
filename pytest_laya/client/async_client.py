"""`AsyncServedLayaClient`: `ServedLayaClient`'s async twin, same settings, policy and errors."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from pytest_laya.client.base import ClientBase, loopback_direct, ssl_context
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
    "AsyncServedLayaClient",
]


class AsyncServedLayaClient(ClientBase):
    """`ServedLayaClient`'s async twin: same settings, same policy, same errors."""

    def __init__(
        self,
        url: str | None = None,
        *,
        model: str | None = None,
        api_key: str | Secret | None = None,
        timeout_s: float | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        on_exchange: Callable[[Exchange], None] | None = None,
        policy: RetryPolicy | None = None,
    ) -> None:
        api_key = Secret.wrap(api_key)  # no frame holds the plain key
        url = RedactedUrl.wrap(url)  # type: ignore[assignment]  # nor a password in the URL
        super().__init__(url, model=model, api_key=api_key, timeout_s=timeout_s, on_exchange=on_exchange, policy=policy)
        # httpx follows no redirect unless asked: the state and the key never go to a Location.
        self._http = httpx.AsyncClient(transport=transport, verify=ssl_context(),
                                       mounts=loopback_direct(self.settings.url))

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
            headers = request_headers(call.request_id)
            health = health_from(await self._send("GET", HEALTH_PATH, headers, None, deadline))
            self._identities.store(health)
        return self._identity_after(call, body, decision, health)

    async def health(self) -> Health:
        deadline = Deadline(self.settings.timeout_s)
        attempt = await self._send("GET", HEALTH_PATH, request_headers(new_request_id()), None, deadline)
        health = health_from(attempt)
        if health is None:
            raise self._health_error(attempt)
        self._identities.store(health)
        return health

    async def identity(self) -> ServedIdentity | None:
        return self._known_identity() or self._identity_from(await self.health())

    async def _send(self, method: str, path: str, headers: Mapping[str, str], body: bytes | None, deadline: Deadline) -> Attempt:
        import anyio

        remaining = deadline.remaining()
        if remaining <= 0:
            return Attempt(failure=TransportFailure.TIMED_OUT)
        started = time.monotonic()
        attempt = Attempt()
        request = self._http.build_request(method, self.settings.request_url + path, headers=headers, content=body,
                                           timeout=httpx.Timeout(remaining))

        def check() -> None:
            # Decoding is CPU work no cancel scope interrupts: it checks the deadline itself.
            if deadline.expired():
                raise httpx.ReadTimeout("the deadline passed while reading the body", request=request)

        try:
            # A cancel scope bounds the whole response, trickled heads and bodies included.
            with anyio.fail_after(remaining):
                response = await self._http.send(request, stream=True, auth=self._auth)
                try:
                    collected = BodyCollector(response, check)
                    if collected.reading:
                        async for chunk in response.aiter_raw():
                            if not collected.add(chunk):
                                break
                    collected.into(attempt)
                finally:
                    await response.aclose()
        except TimeoutError as exc:
            attempt = Attempt(failure=TransportFailure.TIMED_OUT, cause=exc)
        except httpx.TransportError as exc:
            attempt = Attempt(failure=classify_failure(exc), cause=exc)
        self._observe(method, path, attempt, body, time.monotonic() - started)
        return attempt

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncServedLayaClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

"""Spec-valid answers for other mocking libraries: `answer`, `respx_side_effect`, `httpx_callback`.

A respx or pytest-httpx user gets the fake's complete answers without switching tools:
probabilities that sum to 1, confidence, usage, and the headers the target spec asks for
(``X-Request-Id``, ``Laya-Spec``), built from the question set in the request, with answers
pinned by question id (``team="billing", urgent=0.95``; docs/fake.md, "Forcing a decision").
A pin that cannot be right for the questions asked raises `PinError`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pytest_laya.fake.answers import FakeLaya

if TYPE_CHECKING:  # pragma: no cover
    import httpx

__all__ = ["answer", "httpx_callback", "respx_side_effect"]


def _pinned(pins: Mapping[str, Any], where: str) -> FakeLaya:
    laya = FakeLaya()
    if pins:
        laya.pin(dict(pins), where=where)
    return laya


def _raise_pin_error(laya: FakeLaya) -> None:
    for call in laya.calls:
        if call.error:
            from pytest_laya.fake.pins import PinError

            raise PinError(call.error)


def answer(questions: Mapping[str, Any], *, state: Any = "", **pins: Any) -> dict[str, Any]:
    """The response body the fake gives for `questions` (and `state`), with `pins` by question id:
    ``answer(QUESTIONS, team="billing", urgent=0.95)``. Raises `PinError` for a pin that cannot be right."""
    from pytest_laya.fake.pins import PinError
    from pytest_laya.faults import ReceivedRequest

    laya = _pinned(pins, "pytest_laya.answer(...)")
    body = json.dumps({"state": state, "questions": dict(questions)}).encode("utf-8")
    status, _, content = laya.exchange(ReceivedRequest(method="POST", path="/v1/systemone",
                                                       headers={"content-type": "application/json"}, body=body))
    _raise_pin_error(laya)
    if status != 200 or not isinstance(content, dict):
        raise PinError(f"pytest_laya.answer(): the questions were refused ({status}): {content}")
    return content


def httpx_callback(**pins: Any) -> Callable[[httpx.Request], httpx.Response]:
    """A callable answering an ``httpx.Request`` to ``/v1/systemone`` as the fake does, with `pins`:
    pytest-httpx's ``httpx_mock.add_callback(httpx_callback(team="billing"))``, or respx's
    ``side_effect``. The answer is built from the question set in each request."""
    import httpx

    from pytest_laya.fake.transport import received, rendered

    laya = _pinned(pins, "a pytest_laya mock answer")

    def respond(request: httpx.Request) -> httpx.Response:
        request.read()
        status, headers, body = laya.exchange(received(request), url=str(request.url))
        _raise_pin_error(laya)
        items, payload = rendered(status, headers, body)
        return httpx.Response(status, headers=items, content=payload)

    return respond


def respx_side_effect(**pins: Any) -> Callable[[httpx.Request], httpx.Response]:
    """respx's ``route.side_effect = respx_side_effect(team="billing", urgent=0.95)``: the same as `httpx_callback`."""
    return httpx_callback(**pins)

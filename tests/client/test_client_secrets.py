"""No frame, message or provenance of the client shows the API key or a password in the URL.

`--showlocals` prints every local of every frame in a traceback: the client builds no headers
dict with the key (httpx's auth flow adds it), and holds the key as a `Secret` everywhere else.
The pytest-level check (every output and file of real runs) is tests/plugin/test_secrets.py.
"""

from __future__ import annotations

import asyncio
import re
import traceback
from pathlib import Path

import pytest

import pytest_laya
from pytest_laya import AsyncServedLayaClient, LayaCallError, LayaConfigError, ServedLayaClient
from pytest_laya.client.secret import Secret
from pytest_laya.faults import ResetBeforeHeaders, Respond, ScriptedServer
from tests.client.test_client_hostile import ANSWER, NO_SERVED_BY, QUESTIONS
from tests.helpers.leaks import URL_UNSAFE_CANARY as KEY

PASSWORD = "hunter2-canary"


class Refused(Exception):
    """What a validator raising inside the client's send path looks like (SpecViolationError)."""


def refuse(exchange):
    raise Refused(f"spec violation in {exchange.url}")


KIT = str(Path(pytest_laya.__file__).parent)


def all_locals(exc: BaseException) -> str:
    """Every local of every frame the kit owns in the traceback, as `--showlocals` prints them.

    Frames hidden from pytest (`__tracebackhide__`) are included: nothing may rely on that.
    """
    stack = traceback.TracebackException.from_exception(exc, capture_locals=True).stack
    kit = [frame for frame in stack if frame.filename.startswith(KIT)]
    assert kit, "the traceback has no frame of the kit"
    return "\n".join(f"{frame.name}: {frame.locals}" for frame in kit)


@pytest.fixture(params=["sync", "async"])
def kind(request):
    return request.param


def decide(kind, url, **kwargs):
    """One decision through the sync or the async client."""
    if kind == "sync":
        with ServedLayaClient(url, timeout_s=2, **kwargs) as client:
            return client.decide("I was charged twice.", QUESTIONS)

    async def go():
        async with AsyncServedLayaClient(url, timeout_s=2, **kwargs) as client:
            return await client.decide("I was charged twice.", QUESTIONS)

    return asyncio.run(go())


def test_an_error_inside_the_send_path_shows_the_key_in_no_frame(kind):
    with ScriptedServer(Respond(200, ANSWER)) as server:
        with pytest.raises(Refused) as info:
            decide(kind, server.url, api_key=KEY, on_exchange=refuse)
        assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"  # the key was in play
    printed = all_locals(info.value)
    # The frame that used to hold it is there (under mutmut, `_send`'s body runs as
    # `xǁServedLayaClientǁ_send__mutmut_orig`).
    assert re.search(r"(^|ǁ)_send(__mutmut_\w+)?: .*'headers'", printed, re.MULTILINE)
    assert KEY not in printed


def test_a_bad_key_shows_in_no_frame_of_the_config_error(kind):
    with pytest.raises(LayaConfigError) as info:
        decide(kind, "http://127.0.0.1:1", api_key=KEY + "\n")
    assert info.value.code == "bad_setting"
    assert KEY not in all_locals(info.value)


def test_a_bad_key_from_the_environment_shows_in_no_frame(monkeypatch, kind):
    monkeypatch.setenv("LAYA_SERVED_API_KEY", KEY + "\u00e9")
    with pytest.raises(LayaConfigError) as info:
        decide(kind, "http://127.0.0.1:1")
    assert KEY not in all_locals(info.value)  # not even in os.environ's repr


def test_a_password_in_the_url_is_sent_but_never_shown(kind):
    with ScriptedServer(Respond(200, NO_SERVED_BY), Respond(200, {"status": "ok"}), ResetBeforeHeaders(),
                        ResetBeforeHeaders()) as server:
        url = server.url.replace("http://", f"http://laya:{PASSWORD}@")
        seen = []
        decision = decide(kind, url, on_exchange=seen.append)
        with pytest.raises(LayaCallError) as info:
            decide(kind, url)
        sent = server.requests[0].headers["authorization"]
    assert sent.startswith("Basic ")  # the credentials still reach the server
    assert PASSWORD not in decision.provenance.url and "***@" in decision.provenance.url
    assert seen and all(PASSWORD not in exchange.url for exchange in seen)
    assert info.value.code == "connection_dropped" and PASSWORD not in str(info.value)
    assert PASSWORD not in (info.value.url or "")


def test_a_config_error_shows_a_password_in_the_url_in_no_frame(kind):
    with pytest.raises(LayaConfigError) as info:
        (ServedLayaClient if kind == "sync" else AsyncServedLayaClient)(
            f"http://laya:{PASSWORD}@127.0.0.1:1", api_key=KEY, timeout_s=-1)
    printed = all_locals(info.value)
    assert "resolve: " in printed  # the settings frames are there, not hidden
    assert PASSWORD not in printed and KEY not in printed and "***@127.0.0.1:1" in printed


def test_an_api_key_wins_over_a_password_in_the_url(kind):
    with ScriptedServer(Respond(200, ANSWER)) as server:
        decide(kind, server.url.replace("http://", f"http://laya:{PASSWORD}@"), api_key=KEY)
        assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"


def test_a_secret_can_be_passed_as_it_is():
    with ScriptedServer(Respond(200, ANSWER)) as server:
        with ServedLayaClient(server.url, api_key=Secret(KEY)) as client:
            assert KEY not in repr(client) and KEY not in repr(client.settings)
            client.decide("s", QUESTIONS)
        assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"


def test_a_transport_error_message_never_quotes_the_key():
    from pytest_laya.client.settings import ClientSettings

    settings = ClientSettings.resolve(f"http://laya:{PASSWORD}@127.0.0.1:1", api_key=KEY)
    said = settings.scrub(f"Illegal header value b'Bearer {KEY}' for http://laya:{PASSWORD}@127.0.0.1:1")
    assert KEY not in said and PASSWORD not in said and "***" in said

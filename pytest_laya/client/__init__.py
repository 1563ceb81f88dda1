"""Layer 3: the served client, one decision over HTTP with the same behaviour in every mode.

Fake, replayed and live servers all answer through this code, so a test that passes on a cassette
exercises the deadline, retry, request-id and error mapping a production call would. The rules
live once, in `call` (one decision's request and answer) and `policy` (when to retry); only the
I/O differs between `ServedLayaClient` (`sync_client`) and `AsyncServedLayaClient`
(`async_client`). Settings come from arguments or `LAYA_SERVED_*` (`settings`).
"""

from __future__ import annotations

from pytest_laya.client.async_client import AsyncServedLayaClient
from pytest_laya.client.call import IDENTITY_TTL_S, MAX_RESPONSE_BYTES
from pytest_laya.client.policy import Deadline, Retry, RetryPolicy, TransportFailure
from pytest_laya.client.secret import Secret
from pytest_laya.client.settings import DEFAULT_TIMEOUT_S, ClientSettings
from pytest_laya.client.sync_client import ServedLayaClient
from pytest_laya.wire.exchange import Exchange
from pytest_laya.wire.routes import DECIDE_PATH, HEALTH_PATH
from pytest_laya.wire.urls import RedactedUrl, redact_url

__all__ = [
    "DECIDE_PATH",
    "DEFAULT_TIMEOUT_S",
    "HEALTH_PATH",
    "IDENTITY_TTL_S",
    "MAX_RESPONSE_BYTES",
    "AsyncServedLayaClient",
    "ClientSettings",
    "Deadline",
    "Exchange",
    "RedactedUrl",
    "Retry",
    "RetryPolicy",
    "Secret",
    "ServedLayaClient",
    "TransportFailure",
    "redact_url",
]

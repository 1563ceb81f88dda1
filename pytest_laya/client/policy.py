"""When to retry and how long to wait: one policy, no I/O, shared by the sync and async clients.

Rules (docs/client.md): one deadline per decision covers every attempt, every wait and any
/health read; at most one retry, and only after a refused or dropped connection, a 502 or 504,
or a 503 whose Retry-After still fits inside the deadline. Everything else is final.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pytest_laya.wire.headers import header_value, parse_retry_after

__all__ = ["Deadline", "TransportFailure", "Retry", "RetryPolicy"]


@dataclass
class Deadline:
    """A fixed point in time; every step of a decision asks it how long is left."""

    timeout_s: float
    clock: Callable[[], float] = time.monotonic
    started: float = field(init=False)

    def __post_init__(self) -> None:
        self.started = self.clock()

    def remaining(self) -> float:
        return self.timeout_s - (self.clock() - self.started)

    def expired(self) -> bool:
        return self.remaining() <= 0

    def elapsed(self) -> float:
        return self.clock() - self.started


class TransportFailure(enum.Enum):
    """How an attempt ended when no complete response arrived."""

    REFUSED = "connection_refused"
    DROPPED = "connection_dropped"
    TIMED_OUT = "deadline_exceeded"
    UNTRUSTED = "untrusted_certificate"  # the TLS handshake refused the server's certificate
    TLS_FAILED = "tls_handshake_failed"  # no TLS handshake at all, e.g. https:// to a plain-HTTP port


@dataclass(frozen=True)
class Retry:
    wait_s: float
    reason: str


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 1
    retry_statuses: frozenset[int] = frozenset({502, 504})
    # A refused connection is usually a server still starting (system1-omni's worker listens
    # only once warm): a short pause gives it a chance without eating the deadline.
    reconnect_pause_s: float = 0.05

    def after_failure(self, failure: TransportFailure, attempt: int, deadline: Deadline) -> Retry | None:
        if attempt > self.max_retries or failure in (TransportFailure.TIMED_OUT, TransportFailure.UNTRUSTED,
                                                                 TransportFailure.TLS_FAILED):
            return None
        wait = self.reconnect_pause_s if failure is TransportFailure.REFUSED else 0.0
        if deadline.remaining() <= wait:
            return None
        return Retry(wait_s=wait, reason=failure.value)

    def after_response(
        self, status: int, headers: Mapping[str, str], attempt: int, deadline: Deadline
    ) -> Retry | None:
        if attempt > self.max_retries:
            return None
        if status in self.retry_statuses:
            return Retry(wait_s=0.0, reason=f"HTTP {status}") if deadline.remaining() > 0 else None
        if status == 503:
            wait = self.retry_after(headers)
            if wait is not None and wait < deadline.remaining():
                return Retry(wait_s=wait, reason=f"HTTP 503, Retry-After {wait:g}s")
        return None

    @staticmethod
    def retry_after(headers: Mapping[str, str]) -> float | None:
        value = header_value(headers, "retry-after")
        try:
            wait = parse_retry_after(value)
        except (ValueError, OverflowError, TypeError):  # e.g. "²": a digit to str.isdigit, not to float
            return None
        return wait if wait is not None and wait == wait else None  # NaN never fits a deadline

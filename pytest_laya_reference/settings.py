"""What a reference server is configured with: checkpoints, admission, batching, limits, connections."""

from __future__ import annotations

from dataclasses import dataclass, field

# The token window counted for a request that sets no `max_len` (laya's default, and the window
# of its published checkpoints and of the embedded tiny one): one rule, in the wire layer.
from pytest_laya.wire.requests import (
    DEFAULT_WINDOW_TOKENS,
    MAX_BATCH_STATES,
    MAX_BODY_BYTES,
    MAX_OPTIONS,
    MAX_QUESTIONS,
    MAX_REQUEST_TOKENS,
    MAX_STATE_CHARS,
)

__all__ = ["DEFAULT_WINDOW_TOKENS", "INFLIGHT_REQUESTS", "Limits", "ServerSettings", "check_api_key"]

#: Requests at the per-request token budget that the default in-flight budget admits at once.
INFLIGHT_REQUESTS = 4


@dataclass(frozen=True)
class Limits:
    """What one request may carry; /health advertises these and anything over is a 413.

    The first five are laya-serve 0.4.15's, so clients moving between the two see the same
    bounds. `max_request_tokens` bounds the work one request can ask for: laya runs one sequence
    per (state, question) pair, each up to the token window (`max_len`, else
    `DEFAULT_WINDOW_TOKENS`), so a request asks for states x questions x window tokens. The
    default, 64 x 512, admits every request the other limits admit at the default window, and
    bounds what a wider window or a batch can ask for (64 questions at `max_len` 8192 cost about
    a minute of CPU on the tiny checkpoint; 4 questions are admitted at that window).
    """

    max_questions: int = MAX_QUESTIONS
    max_state_chars: int = MAX_STATE_CHARS
    max_body_bytes: int = MAX_BODY_BYTES
    max_options: int = MAX_OPTIONS
    max_batch_states: int = MAX_BATCH_STATES
    max_request_tokens: int = MAX_REQUEST_TOKENS

    def __post_init__(self) -> None:
        for name, value in self.to_json().items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"limit {name} must be a whole number of at least 1, not {value!r}")

    def to_json(self) -> dict[str, int]:
        return {
            "max_questions": self.max_questions,
            "max_state_chars": self.max_state_chars,
            "max_body_bytes": self.max_body_bytes,
            "max_options": self.max_options,
            "max_batch_states": self.max_batch_states,
            "max_request_tokens": self.max_request_tokens,
        }


def check_api_key(key: str) -> None:
    """Refuse a key a client could not send as `Authorization: Bearer <key>`, or that means nothing.

    An empty key would run the server open without saying so; surrounding whitespace is lost
    by every HTTP parser (RFC 9110 strips it from field values), so such a key could never
    match. The message never contains the key.
    """
    if not isinstance(key, str):
        raise ValueError("the API key must be a string")
    if not key:
        raise ValueError("the API key is empty; give a key, or none to serve without authentication")
    if key != key.strip():
        raise ValueError("the API key has leading or trailing whitespace, which no client can send")
    if not all("\x21" <= ch <= "\x7e" for ch in key):
        raise ValueError("the API key must be visible ASCII characters, without spaces or control characters")


@dataclass(frozen=True)
class ServerSettings:
    api_key: str | None = field(default=None, repr=False)
    # Requests whose body has been read, at once, through inference; beyond it, 503 overloaded
    # at once, never a queue.
    max_concurrent: int = 16
    max_batch: int = 16
    batch_window_ms: float = 0.0
    # How long a request waits for company while another batch runs (pytest_laya_reference.batching).
    busy_window_ms: float = 3.0
    # Batches run at once, each on its own thread (pytest_laya_reference.batching says why two).
    passes: int = 2
    # Seconds a request may take to deliver its body before a 408 (and a closed connection).
    body_timeout_s: float = 10.0
    # Bodies being received at once that did not arrive with their request head; beyond it,
    # 503 overloaded at once. Separate from max_concurrent: a slow upload holds one of these,
    # never an inference slot.
    max_body_reads: int = 32
    retry_after_s: int = 1
    limits: Limits = field(default_factory=Limits)
    # Answer with Jev's field set only, plus latency_ms (pytest_laya_reference.jev_strict).
    jev_strict: bool = False
    # Connections (pytest_laya_reference.serving): open at once; beyond it the one that has waited
    # longest for a request head is closed to make room, or, when none waits, the new one.
    max_connections: int = 1024
    # Seconds a connection may take to send a complete request head, from when it opened or
    # its previous response ended; then it is closed.
    head_timeout_s: float = 10.0
    # Seconds an idle keep-alive connection is kept after a response (uvicorn's own timer).
    keep_alive_timeout_s: float = 5.0
    # Tokens of inference (limits.max_request_tokens' measure) in flight at once, all requests
    # together; beyond it, 503 overloaded. It bounds the work queued, not memory: forward passes
    # hold at most 2,048 tokens and a longer row runs by itself (pytest_laya_reference.packing), so
    # RSS no longer grows with the requests in flight. None: INFLIGHT_REQUESTS x
    # limits.max_request_tokens (131,072 by default: 16 requests of 16 questions at laya's
    # default window, or 4 at the per-request maximum).
    max_inflight_tokens: int | None = None

    @property
    def inflight_tokens(self) -> int:
        """`max_inflight_tokens`, or its default."""
        if self.max_inflight_tokens is not None:
            return self.max_inflight_tokens
        return INFLIGHT_REQUESTS * self.limits.max_request_tokens

    def __post_init__(self) -> None:
        if self.api_key is not None:
            check_api_key(self.api_key)
        for name in ("max_concurrent", "max_batch", "passes", "max_body_reads", "max_connections", "retry_after_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number of at least 1, not {value!r}")
        for name in ("body_timeout_s", "head_timeout_s", "keep_alive_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be more than 0 seconds, not {getattr(self, name)!r}")
        for name in ("batch_window_ms", "busy_window_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be at least 0, not {getattr(self, name)!r}")
        if self.max_inflight_tokens is not None and (
                isinstance(self.max_inflight_tokens, bool) or not isinstance(self.max_inflight_tokens, int)
                or self.max_inflight_tokens < self.limits.max_request_tokens):
            raise ValueError(f"max_inflight_tokens must be a whole number of at least max_request_tokens "
                             f"({self.limits.max_request_tokens}), not {self.max_inflight_tokens!r}")

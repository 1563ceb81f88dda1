"""What a reference server is configured with: checkpoints, admission, batching, limits."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Limits", "ServerSettings"]


@dataclass(frozen=True)
class Limits:
    """What one request may carry; /health advertises these and anything over is a 413.

    The defaults are laya-serve 0.4.15's, so clients moving between the two see the same bounds.
    """

    max_questions: int = 64
    max_state_chars: int = 50_000
    max_body_bytes: int = 2 * 1024 * 1024
    max_options: int = 100
    max_batch_states: int = 64

    def to_json(self) -> dict[str, int]:
        return {
            "max_questions": self.max_questions,
            "max_state_chars": self.max_state_chars,
            "max_body_bytes": self.max_body_bytes,
            "max_options": self.max_options,
            "max_batch_states": self.max_batch_states,
        }


@dataclass(frozen=True)
class ServerSettings:
    api_key: str | None = field(default=None, repr=False)
    # Requests past authentication at once; beyond it, 503 overloaded at once, never a queue.
    max_concurrent: int = 16
    max_batch: int = 16
    batch_window_ms: float = 0.0
    # Batches run at once, each on its own thread (reference_server.batching says why two).
    passes: int = 2
    # Seconds a request may take to deliver its body before a 408 frees its admission slot.
    body_timeout_s: float = 10.0
    retry_after_s: int = 1
    limits: Limits = field(default_factory=Limits)
    # Answer with Jev's field set only, plus latency_ms (reference_server.jev_strict).
    jev_strict: bool = False

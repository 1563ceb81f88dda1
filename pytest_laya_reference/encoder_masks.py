"""A packed pass's encoder attention masks, built straight from its rows' padding.

On every call transformers' ModernBERT builds two masks (full and sliding-window attention)
through its general mask machinery; for one 512-token row that took over 40% of the encoder's
time on one thread (8.6 ms against 4.7 with the masks below, quiet; docs/benchmarks.md). A
packed pass's rows are padded at the end and its encoder attends both ways, so the masks are the
keys' padding and, for sliding layers, the band ``|query - key| <= sliding_window``: built here
from one kept band, equal element for element to transformers' (held in
``tests/reference_server/test_packed_forward.py``), as the prepared mapping
``ModernBertModel.forward`` accepts. Rows without padding get the band as the additive float
mask SDPA would make of the bool one on every call (0 where attended, -inf elsewhere), kept and
broadcast over the rows: the same bits, 0.95x-0.98x of the CPU of a pass of 1 to 4 rows of 512
tokens. Heavy imports: torch, inside only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["EncoderMasks"]

#: The longest rows whose band is kept (a bool matrix of this side: 1 MiB); longer ones build theirs.
KEPT_BAND = 1024

_LAYER_TYPES = frozenset({"full_attention", "sliding_attention"})


class EncoderMasks:
    """The masks of one encoder; ``for_encoder`` says whether they are its masks."""

    def __init__(self, window: int, dtype: Any = None) -> None:
        self._window = window
        self._dtype = dtype  # the attention's dtype: an additive mask must have it (None: torch's default)
        self._band = _KeptSquare(self._make_band)  # bool: |i - j| <= window
        self._additive = _KeptSquare(self._make_additive)  # the same band as 0 / -inf

    @classmethod
    def for_encoder(cls, encoder: Any) -> EncoderMasks | None:
        """Masks for a ModernBERT-style encoder (full and sliding layers) under torch's SDPA;
        None for any other, whose masks stay transformers' own."""
        config = getattr(encoder, "config", None)
        window = getattr(config, "sliding_window", None)
        layer_types = getattr(config, "layer_types", None)
        if (not isinstance(window, int) or window < 1 or not layer_types or not set(layer_types) <= _LAYER_TYPES
                or getattr(config, "_attn_implementation", None) != "sdpa"):
            return None
        parameter = next(iter(encoder.parameters()), None) if hasattr(encoder, "parameters") else None
        return cls(window, getattr(parameter, "dtype", None))

    def mapping(self, attention_mask: Any) -> dict[str, Any]:
        """The encoder's masks for a (rows, tokens) 0/1 padding mask, as transformers' SDPA
        masks are: None where nothing is masked (full attention without padding; a sliding
        window wider than the rows), else bool (rows, 1, tokens, tokens), True where attended;
        without padding, the sliding band as SDPA's additive form of it, (1, 1, tokens, tokens)."""
        rows, n = attention_mask.shape
        if bool(attention_mask.all()):
            return {"full_attention": None,
                    "sliding_attention": self._additive.of(n)[None, None] if n >= self._window else None}
        band = self._band.of(n) if n >= self._window else None
        keys = attention_mask.bool()[:, None, None, :]
        return {"full_attention": keys.expand(rows, 1, n, n),
                "sliding_attention": keys.expand(rows, 1, n, n) if band is None else band & keys}

    def _make_band(self, n: int) -> Any:
        import torch

        i = torch.arange(n)
        return (i[:, None] - i[None, :]).abs() <= self._window

    def _make_additive(self, n: int) -> Any:
        import torch

        return torch.zeros(n, n, dtype=self._dtype).masked_fill_(~self._band.of(n), float("-inf"))


class _KeptSquare:
    """An (n, n) matrix that depends on n only through its top-left corner: the largest made
    (up to ``KEPT_BAND``) is kept, and a smaller one is its corner, a view."""

    def __init__(self, make: Callable[[int], Any]) -> None:
        self._make = make
        self._kept: Any = None
        self._lock = threading.Lock()

    def of(self, n: int) -> Any:
        kept = self._kept
        if kept is not None and kept.shape[0] >= n:
            return kept[:n, :n]
        made = self._make(n)
        if n <= KEPT_BAND:
            with self._lock:
                if self._kept is None or self._kept.shape[0] < n:
                    self._kept = made
        return made

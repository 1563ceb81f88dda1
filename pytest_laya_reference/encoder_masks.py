"""A packed pass's encoder attention masks, built straight from its rows' padding.

On every call transformers' ModernBERT builds two masks (full and sliding-window attention)
through its general mask machinery; for one 512-token row that took over 40% of the encoder's
time on one thread (8.6 ms against 4.7 with the masks below, quiet; docs/benchmarks.md). A
packed pass's rows are padded at the end and its encoder attends both ways, so the masks are the
keys' padding and, for sliding layers, the band ``|query - key| <= sliding_window``: built here
from one kept band, equal element for element to transformers' (held in
``tests/reference_server/test_encoder_masks.py``, and by ``packing.packed_disagrees`` at load),
and handed to the encoder as the prepared mapping ``ModernBertModel.forward`` accepts.

laya's own forward runs unchanged: a pre-hook on the encoder swaps the 2-D mask for the mapping
only inside ``building()``, on the thread that entered it. Heavy imports: torch, inside only.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["EncoderMasks"]

#: The longest rows whose band is kept (a bool matrix of this side: 1 MiB); longer ones build theirs.
KEPT_BAND = 1024

_LAYER_TYPES = frozenset({"full_attention", "sliding_attention"})


class EncoderMasks:
    """Masks for one agent's encoder; ``attach`` says whether they apply to it."""

    def __init__(self, encoder: Any, window: int) -> None:
        self._window = window
        self._band: Any = None  # bool (n, n): |i - j| <= window, for the longest rows seen
        self._local = threading.local()
        self._lock = threading.Lock()
        self._hook = encoder.register_forward_pre_hook(self._swap_mask, with_kwargs=True)

    @classmethod
    def attach(cls, agent: Any) -> EncoderMasks | None:
        """Masks for ``agent``'s encoder, or None where laya's forward is not the one they are
        equal in: a ModernBERT-style encoder (full and sliding layers) under torch's SDPA, on the
        CPU in full precision, with laya's eager forward and sequential option layout."""
        encoder = getattr(getattr(agent, "model", None), "encoder", None)
        config = getattr(encoder, "config", None)
        window = getattr(config, "sliding_window", None)
        layer_types = getattr(config, "layer_types", None)
        if (encoder is None or not isinstance(window, int) or window < 1
                or not layer_types or not set(layer_types) <= _LAYER_TYPES
                or getattr(config, "_attn_implementation", None) != "sdpa"
                or getattr(getattr(agent, "device", None), "type", None) != "cpu"
                or getattr(agent, "amp_enabled", True) or getattr(agent, "_fast", None) is not None
                or getattr(agent, "_compiled", True)
                or getattr(getattr(agent, "_backend", None), "name", "eager") != "eager"):
            return None
        return cls(encoder, window)

    @contextmanager
    def building(self) -> Iterator[None]:
        """The encoder takes these masks on this thread until the block ends."""
        self._local.on = True
        try:
            yield
        finally:
            self._local.on = False

    def mapping(self, attention_mask: Any) -> dict[str, Any]:
        """The encoder's masks for a (rows, tokens) 0/1 padding mask, as transformers' SDPA
        masks are: None where nothing is masked (full attention without padding; a sliding
        window wider than the rows), else bool (rows, 1, tokens, tokens), True where attended."""
        rows, n = attention_mask.shape
        band = self._band_for(n) if n >= self._window else None
        if bool(attention_mask.all()):
            return {"full_attention": None,
                    "sliding_attention": None if band is None else band[None, None].expand(rows, 1, n, n)}
        keys = attention_mask.bool()[:, None, None, :]
        return {"full_attention": keys.expand(rows, 1, n, n),
                "sliding_attention": keys.expand(rows, 1, n, n) if band is None else band & keys}

    def close(self) -> None:
        self._hook.remove()

    def _band_for(self, n: int) -> Any:
        band = self._band
        if band is not None and band.shape[0] >= n:
            return band[:n, :n]
        import torch

        i = torch.arange(n)
        made = (i[:, None] - i[None, :]).abs() <= self._window
        if n <= KEPT_BAND:
            with self._lock:
                if self._band is None or self._band.shape[0] < n:
                    self._band = made
        return made

    def _swap_mask(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]] | None:
        if not getattr(self._local, "on", False):
            return None
        mask = kwargs.get("attention_mask")
        # laya calls the encoder with keywords only; anything else is left as it came.
        if args or kwargs.get("position_ids") is not None or getattr(mask, "dim", lambda: 0)() != 2:
            return None
        return args, {**kwargs, "attention_mask": self.mapping(mask)}

"""A checkpoint's tokenizer, with its plain calls taken straight to ``tokenizers``.

laya tokenises a request's state and question texts through ``encode_text``: a call of the
transformers tokenizer with ``add_special_tokens`` only. transformers answers it with the Rust
tokenizer's ``encode_batch``, which also works out every token's character offsets and wraps
the result in its own objects. ``encode_batch_fast`` gives the same ids without the offsets:
a request's rows are encoded in 0.71x-0.88x the time, the least with the longest states
(``bench/profile_reference_server.py tokenize``). laya tokenises every state in full, so that
its ``usage`` can count the tokens the window drops.

``FastTokenizer.for_agent`` offers one only where its ids equal the tokenizer's on texts that
exercise it (``SAMPLES``); ``encode_state`` runs laya's ``Agent._encode_state`` with it. Heavy
imports: laya, inside only.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FastTokenizer", "SAMPLES", "encode_state"]

#: Texts whose ids a tokenizer must give alike both ways before it is used: special tokens
#: written out, accents, other scripts, punctuation runs, whitespace runs, nothing at all.
SAMPLES = (
    "",
    "Warm-up: the customer was charged twice and asks for a refund.",
    "[CLS] a [SEP] b [MASK] c [PAD] <s> </s> <mask>",
    "naïve café, Zürich — 東京 🚀 привет",
    "!!!???... $$$ 12,345.67 %%% @@@",
    "  leading and  doubled   spaces\tand\ttabs\nand\n\nnewlines  ",
    " ".join(["The parcel is late and the support line never answers my calls."] * 12),  # under 512 tokens: no warning
)


class FastTokenizer:
    """``tok`` itself, except a call with nothing but ``add_special_tokens`` (laya's), which is
    answered by ``tokenizers``' ``encode_batch_fast`` as ``tok`` would answer it: ``{"input_ids":
    ids}``. Callers hold laya's tokenizer lock, as ``encode_text`` does: the call resets the
    truncation and padding the shared Rust tokenizer kept from another caller, as ``tok`` does."""

    def __init__(self, tok: Any) -> None:
        self._tok = tok
        self._rust = tok._tokenizer

    def __call__(self, text: Any, add_special_tokens: bool = True, **options: Any) -> Any:
        if options or not isinstance(text, str):
            return self._tok(text, add_special_tokens=add_special_tokens, **options)
        rust, split = self._rust, bool(self._tok.split_special_tokens)
        # What the tokenizer's own call sets before it encodes (set_truncation_and_padding).
        if rust.truncation is not None:
            rust.no_truncation()
        if rust.padding is not None:
            rust.no_padding()
        if rust.encode_special_tokens != split:
            rust.encode_special_tokens = split
        return {"input_ids": rust.encode_batch_fast([text], add_special_tokens=add_special_tokens)[0].ids}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tok, name)

    @classmethod
    def for_agent(cls, agent: Any) -> FastTokenizer | None:
        """One for ``agent.tok``, or None: not a transformers fast tokenizer with
        ``encode_batch_fast``, one that switches modes between calls, or one whose ids differ
        from its own on ``SAMPLES`` (with and without special tokens, and after a call that
        truncates)."""
        tok = getattr(agent, "tok", None)
        rust = getattr(tok, "_tokenizer", None)
        if (rust is None or not hasattr(rust, "encode_batch_fast") or not hasattr(tok, "split_special_tokens")
                or hasattr(tok, "_switch_to_input_mode")):
            return None
        from laya.common import encode_text

        fast = cls(tok)
        try:
            for text in SAMPLES:
                for special in (False, True):
                    # Each call of the tokenizer leaves its settings on the Rust tokenizer.
                    encode_text(tok, text, truncation=True, max_length=8, padding="max_length",
                                split_special_tokens=True)
                    if encode_text(fast, text, add_special_tokens=special)["input_ids"] != \
                            list(encode_text(tok, text, add_special_tokens=special)["input_ids"]):
                        return None
        except Exception:  # noqa: BLE001 -- a tokenizer this does not know: laya's own calls
            return None
        return fast


class _WithTokenizer:
    """``agent`` with ``tok`` in place of its tokenizer, for laya's ``Agent._encode_state``."""

    def __init__(self, agent: Any, tok: FastTokenizer) -> None:
        self._agent = agent
        self.tok = tok

    def __getattr__(self, name: str) -> Any:
        return getattr(self._agent, name)


def encode_state(agent: Any, tokenizer: FastTokenizer | None, state: Any, ids: list[str],
                 internal: dict[str, dict[str, Any]], **overrides: int) -> list[dict[str, Any]]:
    """``agent._encode_state(state, ids, internal, **overrides)``, tokenising through
    ``tokenizer`` where there is one."""
    if tokenizer is None:
        items: list[dict[str, Any]] = agent._encode_state(state, ids, internal, **overrides)
        return items
    items = type(agent)._encode_state(_WithTokenizer(agent, tokenizer), state, ids, internal, **overrides)
    return items

"""The engine tokenises through ``FastTokenizer``: the checkpoint's own ids, and its own
``usage``, whatever the tokenizer's last caller left set; a tokenizer it cannot vouch for is
used as it is."""

from __future__ import annotations

import random
from typing import Any

import pytest

from pytest_laya_reference.engine import DecisionRequest, LayaEngine
from pytest_laya_reference.fast_tokenizer import SAMPLES, FastTokenizer, encode_state
from pytest_laya_reference.tiny_checkpoint import embedded_checkpoint_dir

pytest.importorskip("torch")
pytest.importorskip("laya")

TRIAGE = {
    "team": {"type": "choice", "instructions": "Which team?",
             "criteria": {"billing": "Charges", "technical": "Software", "shipping": "Parcels"}},
    "refund": {"type": "noul", "instructions": "Refund asked?"},
}


@pytest.fixture(scope="module")
def agent() -> Any:
    import laya

    return laya.load(str(embedded_checkpoint_dir()), device="cpu")


def _texts() -> list[str]:
    rng = random.Random(11)
    alphabet = "abc XYZ 123 .,;:!?'\"()[]{}<>/\\-_=+*&^%$#@~`|\t\néü東京🚀"
    texts = list(SAMPLES)
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 400))) for _ in range(60)]
    texts += ["[MASK]" * 3, "[SEP][CLS]", " [UNK] ", "x" * 5000]
    return texts


def test_its_ids_are_the_tokenizers_own_on_any_text(agent: Any) -> None:
    fast = FastTokenizer.for_agent(agent)
    assert fast is not None, "the tiny checkpoint's tokenizer is a fast one with encode_batch_fast"
    for text in _texts():
        for special in (False, True):
            assert fast(text, add_special_tokens=special)["input_ids"] == \
                list(agent.tok(text, add_special_tokens=special)["input_ids"]), (text[:60], special)


def test_what_the_last_caller_left_set_does_not_cut_its_ids(agent: Any) -> None:
    fast = FastTokenizer.for_agent(agent)
    assert fast is not None
    for text in (SAMPLES[-1], "[MASK] a [SEP] b", "a"):
        whole = list(agent.tok(text, add_special_tokens=False)["input_ids"])
        # The shared Rust tokenizer keeps the last call's truncation, padding and special tokens.
        agent.tok(text, truncation=True, max_length=8, padding="max_length", split_special_tokens=True)
        assert fast(text, add_special_tokens=False)["input_ids"] == whole, text


def test_a_call_with_options_is_the_tokenizers_own(agent: Any) -> None:
    fast = FastTokenizer.for_agent(agent)
    assert fast is not None
    text = SAMPLES[-1]
    assert fast(text, add_special_tokens=False, truncation=True, max_length=8)["input_ids"] == \
        list(agent.tok(text, add_special_tokens=False, truncation=True, max_length=8)["input_ids"])
    assert fast.mask_token == agent.tok.mask_token  # anything else is the tokenizer's


def test_a_state_encodes_as_laya_encodes_it(agent: Any) -> None:
    fast = FastTokenizer.for_agent(agent)
    ids = list(TRIAGE)
    internal = {q: agent._to_internal(TRIAGE[q]) for q in ids}
    for state in ["Short.", SAMPLES[-1], {"ticket": "late parcel", "tier": "gold"},
                  [{"role": "user", "content": SAMPLES[-1]}, {"role": "agent", "content": "Which order?"}]]:
        for overrides in ({}, {"max_len": 96}):
            assert encode_state(agent, fast, state, ids, internal, **overrides) == \
                agent._encode_state(state, ids, internal, **overrides)


class _Disagreeing:
    """A Rust tokenizer whose fast encoding drops each text's last token."""

    def __init__(self, rust: Any) -> None:
        self._rust = rust

    def encode_batch_fast(self, texts: list[str], add_special_tokens: bool = True) -> list[Any]:
        class Cut:
            def __init__(self, ids: list[int]) -> None:
                self.ids = ids[:-1]

        return [Cut(e.ids) for e in self._rust.encode_batch(texts, add_special_tokens=add_special_tokens)]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rust, name)


def test_a_tokenizer_whose_fast_ids_differ_is_used_as_it_is(agent: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent.tok, "_tokenizer", _Disagreeing(agent.tok._tokenizer))
    assert FastTokenizer.for_agent(agent) is None


def test_a_tokenizer_without_rust_underneath_is_used_as_it_is() -> None:
    class Slow:
        tok = object()

    assert FastTokenizer.for_agent(Slow()) is None


def test_the_engine_serves_laya_usage_through_it(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = LayaEngine({"tiny": str(embedded_checkpoint_dir())}, device="cpu", threads=1)
    refused = LayaEngine({"tiny": str(embedded_checkpoint_dir())}, device="cpu", threads=1)
    try:
        engine.load()
        assert isinstance(engine._tokenizers.get("tiny"), FastTokenizer)
        monkeypatch.setattr(FastTokenizer, "for_agent", classmethod(lambda cls, agent: None))
        refused.load()
        assert "tiny" not in refused._tokenizers and refused.packed["tiny"]
        long_state = " ".join(["The customer reports a double charge on the invoice."] * 80)
        usages = []
        for state in (long_state, "Short."):
            got = engine.predict("tiny", [DecisionRequest(state, TRIAGE)])[0]
            want = refused.predict("tiny", [DecisionRequest(state, TRIAGE)])[0]
            assert got.usage == want.usage and got.answers == want.answers
            usages.append(got.usage)
        assert usages[0]["state_tokens_dropped"] > 0 and usages[1]["state_tokens_dropped"] == 0
    finally:
        engine.close()
        refused.close()

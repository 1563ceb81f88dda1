"""The engine's encoder masks are transformers' masks, built cheaper, and touch nothing else.

``EncoderMasks`` replaces the masks ModernBERT builds on every call with ones made from a kept
band; a packed pass must come out bit for bit as with transformers' own, and laya's own forward
(outside ``building()``, or on another thread) must not see them.
"""

from __future__ import annotations

import random
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_laya_reference.encoder_masks import EncoderMasks
from pytest_laya_reference.engine import DecisionRequest, LayaEngine
from pytest_laya_reference.tiny_checkpoint import embedded_checkpoint_dir

torch = pytest.importorskip("torch")
pytest.importorskip("laya")


@pytest.fixture(scope="module")
def agent() -> Any:
    import laya

    return laya.load(str(embedded_checkpoint_dir()), device="cpu")


@pytest.fixture
def masks(agent: Any) -> Any:
    attached = EncoderMasks.attach(agent)
    assert attached is not None, "the tiny checkpoint's ModernBERT on the CPU is what the masks are for"
    yield attached
    attached.close()


def _padding(lengths: list[int], n: int) -> Any:
    mask = torch.zeros(len(lengths), n, dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    return mask


def _shapes() -> list[list[int]]:
    """Row lengths per pass: around the sliding window (64), one row and several, padded or not."""
    rng = random.Random(7)
    shapes = []
    for n in [1, 2, 30, 62, 63, 64, 65, 66, 100, 129, 130, 257, 512, 600]:
        shapes.append([n])
        shapes.append([n, n])
        shapes.append([n] + [rng.randint(1, n) for _ in range(3)])
    return shapes


def test_the_masks_are_transformers_own_element_for_element(agent: Any, masks: EncoderMasks) -> None:
    from transformers.masking_utils import create_bidirectional_mask, create_bidirectional_sliding_window_mask

    config = agent.model.encoder.config
    for lengths in _shapes():
        padding = _padding(lengths, lengths[0])
        embeds = torch.zeros(len(lengths), lengths[0], config.hidden_size)
        kwargs = {"config": config, "inputs_embeds": embeds, "attention_mask": padding}
        want = {"full_attention": create_bidirectional_mask(**kwargs),
                "sliding_attention": create_bidirectional_sliding_window_mask(**kwargs)}
        got = masks.mapping(padding)
        for kind, expected in want.items():
            if expected is None:
                assert got[kind] is None, (lengths, kind)
            else:
                assert got[kind] is not None, (lengths, kind)
                assert got[kind].dtype == expected.dtype and got[kind].shape == expected.shape, (lengths, kind)
                assert torch.equal(got[kind], expected), (lengths, kind)


def test_a_packed_pass_is_bit_for_bit_what_transformers_masks_give(agent: Any, masks: EncoderMasks) -> None:
    encoder = agent.model.encoder
    rng = random.Random(3)
    with torch.no_grad():
        for lengths in _shapes()[::2]:
            padding = _padding(lengths, lengths[0])
            ids = torch.randint(5, 500, padding.shape, generator=torch.Generator().manual_seed(rng.randint(0, 999)))
            ids = ids * padding
            plain = encoder(input_ids=ids, attention_mask=padding).last_hidden_state
            with masks.building():
                built = encoder(input_ids=ids, attention_mask=padding).last_hidden_state
            assert torch.equal(plain, built), lengths


def test_only_the_thread_inside_building_gets_them(agent: Any, masks: EncoderMasks,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = EncoderMasks.mapping

    def counted(self: EncoderMasks, attention_mask: Any) -> dict[str, Any]:
        calls.append(threading.current_thread().name)
        return real(self, attention_mask)

    monkeypatch.setattr(EncoderMasks, "mapping", counted)
    encoder = agent.model.encoder
    padding = _padding([80, 50], 80)
    ids = torch.randint(5, 500, padding.shape) * padding

    def outside() -> None:
        encoder(input_ids=ids, attention_mask=padding)

    with torch.no_grad():
        outside()
        assert calls == []  # laya's own forward: transformers' masks
        with masks.building():
            other = threading.Thread(target=outside, name="other")
            other.start()
            other.join()
            assert calls == []  # another thread, meanwhile
            encoder(input_ids=ids, attention_mask=padding)
        assert calls == [threading.current_thread().name]
        outside()
        assert len(calls) == 1
        masks.close()
        with masks.building():
            outside()
        assert len(calls) == 1  # closed: the hook is gone


@pytest.mark.parametrize("change", [
    {"_attn_implementation": "eager"},
    {"sliding_window": None},
    {"layer_types": ["full_attention", "chunked_attention"]},
    {"device": "cuda"},
    {"amp_enabled": True},
    {"_compiled": True},
    {"_fast": object()},
    {"backend": "onnx"},
])
def test_they_attach_only_where_they_are_transformers_masks(change: dict[str, Any]) -> None:
    settings: dict[str, Any] = {"_attn_implementation": "sdpa", "sliding_window": 64,
                                "layer_types": ["full_attention", "sliding_attention"], "device": "cpu",
                                "amp_enabled": False, "_compiled": False, "_fast": None, "backend": "eager"}
    hooks: list[Any] = []

    def agent_with(values: dict[str, Any]) -> Any:
        config = SimpleNamespace(_attn_implementation=values["_attn_implementation"],
                                 sliding_window=values["sliding_window"], layer_types=values["layer_types"])
        encoder = SimpleNamespace(config=config, register_forward_pre_hook=lambda *a, **k: hooks.append(a) or
                                  SimpleNamespace(remove=lambda: None))
        return SimpleNamespace(model=SimpleNamespace(encoder=encoder), device=SimpleNamespace(type=values["device"]),
                               amp_enabled=values["amp_enabled"], _compiled=values["_compiled"], _fast=values["_fast"],
                               _backend=SimpleNamespace(name=values["backend"]))

    assert EncoderMasks.attach(agent_with(settings)) is not None
    assert EncoderMasks.attach(agent_with({**settings, **change})) is None
    assert len(hooks) == 1


def test_the_engine_serves_with_them_and_answers_as_laya(agent: Any) -> None:
    engine = LayaEngine({"tiny": str(embedded_checkpoint_dir())}, device="cpu", threads=2)
    engine.load()
    try:
        assert engine.packed["tiny"] and engine._masks.get("tiny") is not None
        state = "The parcel is late and the support line never answers my calls. " * 12
        questions = {"team": {"type": "choice", "instructions": "Which team?", "criteria": ["billing", "shipping"]},
                     "refund": {"type": "noul", "instructions": "Refund asked?"}}
        got = engine.predict("tiny", [DecisionRequest(state, questions), DecisionRequest("Short one.", questions)])
        want = [agent.predict(state, questions), agent.predict("Short one.", questions)]
        for result, expected in zip(got, want):
            for qid in questions:
                assert result.answers[qid]["confidence"] == pytest.approx(expected["answers"][qid]["confidence"], abs=1e-4)
    finally:
        engine.close()


def test_masks_that_disagree_are_dropped_with_a_warning(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    def wrong(self: EncoderMasks, attention_mask: Any) -> dict[str, Any]:
        rows, n = attention_mask.shape
        return {"full_attention": None, "sliding_attention": None}  # no window, no padding: wrong

    monkeypatch.setattr(EncoderMasks, "mapping", wrong)
    engine = LayaEngine({"tiny": str(embedded_checkpoint_dir())}, device="cpu", threads=1)
    engine.load()
    try:
        assert engine.packed["tiny"]  # still packed, with transformers' masks
        assert engine._masks.get("tiny") is None
        err = capsys.readouterr().err
        assert "the encoder's masks are left to transformers" in err and "'tiny'" in err
    finally:
        engine.close()

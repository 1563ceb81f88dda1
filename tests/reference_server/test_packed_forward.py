"""The engine's lean forward computes laya's forward, bit for bit, with less work.

``EncoderMasks`` replaces the masks ModernBERT builds on every call; ``PackedForward`` runs the
decision head's last layer only where the answers read it. A packed pass must come out as
``Agent._forward`` gives it, on any rows, padded or not.
"""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_laya_reference.encoder_masks import EncoderMasks
from pytest_laya_reference.engine import DecisionRequest, LayaEngine
from pytest_laya_reference.packed_forward import PackedForward, layer_at
from pytest_laya_reference.tiny_checkpoint import embedded_checkpoint_dir

torch = pytest.importorskip("torch")
pytest.importorskip("laya")


@pytest.fixture(scope="module")
def agent() -> Any:
    import laya

    return laya.load(str(embedded_checkpoint_dir()), device="cpu")


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


def test_the_masks_are_transformers_own_element_for_element(agent: Any) -> None:
    from transformers.masking_utils import create_bidirectional_mask, create_bidirectional_sliding_window_mask

    config = agent.model.encoder.config
    masks = EncoderMasks.for_encoder(agent.model.encoder)
    assert masks is not None, "the tiny checkpoint's ModernBERT is what the masks are for"
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
                continue
            mask = got[kind]
            assert mask is not None, (lengths, kind)
            if mask.dtype != torch.bool:  # additive, as SDPA makes of a bool mask: 0 attended, -inf not
                assert mask.dtype == torch.float32 and mask.shape[:2] == (1, 1), (lengths, kind)
                assert bool(((mask == 0) | (mask == float("-inf"))).all()), (lengths, kind)
                mask = (mask == 0).expand_as(expected)
            assert mask.shape == expected.shape, (lengths, kind)
            assert torch.equal(mask, expected), (lengths, kind)


def _batches(agent: Any) -> list[dict[str, Any]]:
    """Collated passes of real encoded rows: one row and several, one to twelve markers, padded."""
    from laya.common import collate_items

    from pytest_laya_reference.packing import encode_requests

    rng = random.Random(11)
    words = ("refund parcel card declined charged twice support late order invoice account "
             "password shipping damaged angry happy urgent today never again please").split()
    states = [" ".join(rng.choice(words) for _ in range(n)) for n in (3, 40, 90, 200, 700)]
    questions = {
        "team": {"type": "choice", "instructions": "Which team?", "criteria": ["billing", "shipping", "other"]},
        "urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["low", "medium", "high"]},
        "refund": {"type": "noul", "instructions": "Refund asked?"},
        "topic": {"type": "choice", "instructions": "Topic?", "criteria": ["topic %d" % i for i in range(12)]},
    }
    encoded = encode_requests(agent, [(s, questions, {}) for s in states])
    items = [item for request in encoded for item in request.items]
    return [collate_items([group], agent.tok.pad_token_id)
            for group in ([items[0]], [items[3]], items[4:8], items[:20], [items[17], items[2], items[9]])]


def test_a_packed_pass_is_bit_for_bit_laya_own(agent: Any) -> None:
    forward = PackedForward.attach(agent)
    assert forward is not None, "the tiny checkpoint on the CPU is what the lean forward is for"
    batches = _batches(agent)
    with torch.no_grad():
        for batch in batches + batches[::-1]:  # again, shortest last: the kept masks sliced
            want_logits, want_act = agent._forward(batch)
            got_logits, got_act = forward(batch)
            assert got_logits.dtype == want_logits.dtype and (got_logits == want_logits).all(), batch["input_ids"].shape
            assert got_act.dtype == want_act.dtype and (got_act == want_act).all(), batch["input_ids"].shape


def test_a_checkpoint_without_a_decision_head_reads_the_encoder_as_laya_does() -> None:
    import laya

    headless = laya.load(str(embedded_checkpoint_dir()), device="cpu")
    headless.model.head = None  # head_layers 0: laya reads the encoder's output directly
    forward = PackedForward.attach(headless)
    assert forward is not None
    with torch.no_grad():
        for batch in _batches(headless):
            for got, want in zip(forward(batch), headless._forward(batch)):
                assert (got == want).all(), batch["input_ids"].shape


def test_the_parallel_option_layout_runs_laya_own_forward(agent: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    forward = PackedForward.attach(agent)
    assert forward is not None
    monkeypatch.setattr(agent, "_forward", lambda batch: ("laya's own", sorted(batch)))
    assert forward({"option_ids": 1, "input_ids": 2}) == ("laya's own", ["input_ids", "option_ids"])


@pytest.mark.parametrize("heads", [1, 2])  # one head: torch's unfused layer, as laya's; two: torch fuses it
def test_the_head_layer_at_the_read_positions_is_the_whole_layer_read_there(heads: int) -> None:
    from laya.common import _DynamicMultiheadAttention
    from torch import nn

    torch.manual_seed(heads)
    layer = nn.TransformerEncoderLayer(64, heads, 256, 0.1, batch_first=True, norm_first=True)
    layer.self_attn = _DynamicMultiheadAttention(64, heads, dropout=0.1, batch_first=True)  # as laya builds it
    layer.eval()
    with torch.no_grad():
        for lengths in _shapes():
            n = lengths[0]
            h = torch.randn(len(lengths), n, 64)
            pad = ~_padding(lengths, n).bool()
            read = torch.stack([torch.tensor([0] + sorted(random.Random(n).sample(range(length), min(3, length))) +
                                             [0] * (3 - min(3, length))) for length in lengths])
            whole = layer(h, src_key_padding_mask=pad)
            got = layer_at(layer, h, pad, read)
            want = torch.gather(whole, 1, read[:, :, None].expand(-1, -1, 64))
            if heads % 2 and n >= 8:  # GEMMs of one or two rows may round a last bit otherwise
                assert torch.equal(got, want), lengths
            else:
                assert torch.allclose(got, want, atol=1e-5), lengths


@pytest.mark.parametrize("change", [
    {"attn": "eager"}, {"window": None}, {"layer_types": ["full_attention", "chunked_attention"]},
    {"device": "cuda"}, {"amp_enabled": True}, {"_compiled": True}, {"_fast": object()}, {"backend": "onnx"},
    {"model": "OtherModel"}, {"training": True}, {"norm_first": False}, {"bias_k": object()},
])
def test_it_attaches_only_where_it_is_laya_forward(change: dict[str, Any]) -> None:
    settings: dict[str, Any] = {"attn": "sdpa", "window": 64, "layer_types": ["full_attention", "sliding_attention"],
                                "device": "cpu", "amp_enabled": False, "_compiled": False, "_fast": None,
                                "backend": "eager", "model": "DecisionModel", "training": False,
                                "norm_first": True, "bias_k": None}

    def agent_with(values: dict[str, Any]) -> Any:
        config = SimpleNamespace(_attn_implementation=values["attn"], sliding_window=values["window"],
                                 layer_types=values["layer_types"])
        attention = SimpleNamespace(batch_first=True, _qkv_same_embed_dim=True, in_proj_weight=object(),
                                    bias_k=values["bias_k"], bias_v=None)
        layer = SimpleNamespace(norm_first=values["norm_first"], training=False, self_attn=attention, activation=abs)
        model = type(values["model"], (), {})()
        model.training, model.encoder = values["training"], SimpleNamespace(config=config)
        model.head = SimpleNamespace(layers=[layer])
        return SimpleNamespace(model=model, device=SimpleNamespace(type=values["device"]),
                               amp_enabled=values["amp_enabled"], _compiled=values["_compiled"], _fast=values["_fast"],
                               _backend=SimpleNamespace(name=values["backend"]))

    assert PackedForward.attach(agent_with(settings)) is not None
    assert PackedForward.attach(agent_with({**settings, **change})) is None


def test_the_engine_serves_with_it_and_answers_as_laya(agent: Any) -> None:
    engine = LayaEngine({"tiny": str(embedded_checkpoint_dir())}, device="cpu", threads=2)
    engine.load()
    try:
        assert engine.packed["tiny"] and "tiny" in engine._forwards
        state = "The parcel is late and the support line never answers my calls. " * 12
        questions: dict[str, dict[str, Any]] = {"team": {"type": "choice", "instructions": "Which team?", "criteria": ["billing", "shipping"]},
                     "refund": {"type": "noul", "instructions": "Refund asked?"}}
        got = engine.predict("tiny", [DecisionRequest(state, questions), DecisionRequest("Short one.", questions)])
        want = [agent.predict(state, questions), agent.predict("Short one.", questions)]
        for result, expected in zip(got, want):  # laya's own fields, as laya answers them
            assert {q: {k: a[k] for k in expected["answers"][q]} for q, a in result.answers.items()} == expected["answers"]
    finally:
        engine.close()


def test_a_lean_forward_that_disagrees_is_dropped_with_a_warning(monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    real = PackedForward.__call__

    def off(self: PackedForward, batch: dict[str, Any]) -> tuple[Any, Any]:
        logits, act = real(self, batch)
        return logits * 1.5, act  # a laya whose forward moved

    monkeypatch.setattr(PackedForward, "__call__", off)
    engine = LayaEngine({"tiny": str(embedded_checkpoint_dir())}, device="cpu", threads=1)
    engine.load()
    try:
        assert engine.packed["tiny"] and engine._forwards == {}  # still packed, on laya's forward
        err = capsys.readouterr().err
        assert "packed passes run laya's own forward" in err and "'tiny'" in err
    finally:
        engine.close()

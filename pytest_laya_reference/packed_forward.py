"""laya's forward pass over packed rows, computing only what the answers read.

``Agent._forward`` (laya 0.4.15) runs ``DecisionModel.forward``: the encoder, the decision
head's transformer layers over every token, then the head's output at each option marker (the
scores) and at the first token (with them, the act head). Two of its costs serve nothing the
answers read:

- transformers rebuilds the encoder's masks on every call (``EncoderMasks`` builds them
  directly);
- the head's last layer computes every token's output. Here its attention takes queries at the
  markers and the first token only (keys and values still from every token), and its
  feed-forward runs on those rows only: a quarter of a pass's time at 512 tokens (one row: 1.7
  against 0.3 ms on one thread; 8 rows of 4 questions: 14.3 against 1.7 ms).

Everything else is ``DecisionModel.forward``'s own code, laya 0.4.15, pinned. Where the head's
layer runs torch's unfused path (laya's ``_DynamicMultiheadAttention``; the tiny checkpoint's
one head) the outputs are bit for bit laya's on real rows and any of 8 tokens or more (rows of
one or two tokens, which laya never makes, may differ in a last bit); where torch fuses the
layer (an even head count) they agree within float noise. ``LayaEngine.load`` checks this forward against
``Router.predict_batch`` before serving with it (``packing.packed_disagrees``), and
``tests/reference_server/test_packed_forward.py`` holds both. Heavy imports: torch, inside only.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

from .encoder_masks import EncoderMasks

__all__ = ["PackedForward", "layer_at"]


class PackedForward:
    """``Agent._forward`` for one agent's packed passes: ``forward(batch)`` returns what it does
    (the option logits and the act probabilities, as numpy)."""

    def __init__(self, agent: Any, masks: EncoderMasks) -> None:
        self._agent = agent
        self._model = agent.model
        self._masks = masks

    @classmethod
    def attach(cls, agent: Any) -> PackedForward | None:
        """The forward for ``agent``, or None where its pass is not the one this computes: laya's
        eager ``DecisionModel`` on the CPU in full precision, with a pre-norm decision head and
        an encoder whose masks ``EncoderMasks`` builds."""
        model = getattr(agent, "model", None)
        if (type(model).__name__ != "DecisionModel" or getattr(model, "training", True)
                or getattr(getattr(agent, "device", None), "type", None) != "cpu"
                or getattr(agent, "amp_enabled", True) or getattr(agent, "_fast", None) is not None
                or getattr(agent, "_compiled", True)
                or getattr(getattr(agent, "_backend", None), "name", "eager") != "eager"):
            return None
        head = getattr(model, "head", None)
        if head is not None and not all(_pre_norm_layer(layer) for layer in head.layers):
            return None
        masks = EncoderMasks.for_encoder(getattr(model, "encoder", None))
        return None if masks is None else cls(agent, masks)

    def __call__(self, batch: dict[str, Any]) -> tuple[Any, Any]:
        if "option_ids" in batch:  # the parallel option layout: laya's own forward
            result: tuple[Any, Any] = self._agent._forward(batch)
            return result
        import torch

        gate = getattr(self._agent, "_gate", None)
        with gate.read_lock() if gate is not None else nullcontext():  # as Agent._infer holds it
            logits, act = self._decide(batch["input_ids"], batch["attention_mask"], batch["marker_pos"],
                                       batch["marker_mask"], batch["qtype"])
        return logits.float().cpu().numpy(), torch.softmax(act.float(), -1).cpu().numpy()

    def _decide(self, input_ids: Any, attention_mask: Any, marker_pos: Any, marker_mask: Any,
                qtype: Any) -> tuple[Any, Any]:
        """``DecisionModel.forward`` (laya 0.4.15, sequential layout, not training)."""
        import torch

        model = self._model
        h = model.encoder(input_ids=input_ids, attention_mask=self._masks.mapping(attention_mask)).last_hidden_state
        h = h + model.type_emb(qtype)[:, None, :]
        # The rows the answers read: each marker, then the first token.
        read = torch.cat([marker_pos.clamp(min=0), marker_pos.new_zeros((marker_pos.shape[0], 1))], 1)
        if model.head is not None:
            pad = ~attention_mask.bool()
            *before, last = model.head.layers
            for layer in before:
                h = layer(h, src_key_padding_mask=pad)
            out = layer_at(last, h, pad, read)
        else:
            out = torch.gather(h, 1, read[:, :, None].expand(-1, -1, h.size(-1)))
        k = marker_pos.shape[1]
        m = out[:, :k].contiguous()
        logits = model.scorer(m).squeeze(-1).float()
        logits = logits.masked_fill(~marker_mask, -1e4)

        p = torch.softmax(logits.detach(), -1)
        count = marker_mask.sum(-1).clamp(min=2).float()
        ent = -(p * torch.log(p.clamp_min(1e-9))).sum(-1) / torch.log(count)
        if p.size(-1) >= 2:
            top2 = p.topk(2, -1).values
        else:
            top1 = p.topk(1, -1).values
            top2 = torch.cat([top1, torch.zeros_like(top1)], dim=-1)
        feats = torch.stack([top2[:, 0], top2[:, 0] - top2[:, 1], ent, count / 255.0], -1)
        pooled = out[:, k].float()
        act_input = torch.cat([pooled, feats], -1).to(model.act_head[0].weight.dtype)  # no autocast here
        return logits, model.act_head(act_input)


def layer_at(layer: Any, h: Any, pad: Any, read: Any) -> Any:
    """A pre-norm ``nn.TransformerEncoderLayer``'s output (not training) at the positions
    ``read`` (rows, k) only: ``layer(h, src_key_padding_mask=pad)`` gathered at ``read``.
    Attention uses every unpadded token's keys and values; queries, the output projection and
    the feed-forward run on the read positions."""
    import torch
    import torch.nn.functional as F

    attention = layer.self_attn
    width = h.shape[-1]
    heads = attention.num_heads
    index = read[:, :, None].expand(-1, -1, width)
    q, k, v = F.linear(layer.norm1(h), attention.in_proj_weight, attention.in_proj_bias).chunk(3, dim=-1)
    q = torch.gather(q, 1, index)
    q, k, v = (t.unflatten(-1, (heads, width // heads)).transpose(1, 2)  # type: ignore[no-untyped-call]
               for t in (q, k, v))
    keep = ~pad[:, None, None, :]
    attended = F.scaled_dot_product_attention(q, k, v, attn_mask=keep).transpose(1, 2).flatten(-2)
    x = torch.gather(h, 1, index) + attention.out_proj(attended)
    return x + layer.linear2(layer.activation(layer.linear1(layer.norm2(x))))


def _pre_norm_layer(layer: Any) -> bool:
    """A layer ``layer_at`` computes: pre-norm, batch-first packed-projection attention without
    extra key/value biases, a callable activation."""
    attention = getattr(layer, "self_attn", None)
    return (getattr(layer, "norm_first", False) is True and not getattr(layer, "training", True)
            and getattr(attention, "batch_first", False) is True
            and getattr(attention, "_qkv_same_embed_dim", False) is True
            and getattr(attention, "in_proj_weight", None) is not None
            and getattr(attention, "bias_k", None) is None and getattr(attention, "bias_v", None) is None
            and callable(getattr(layer, "activation", None)))

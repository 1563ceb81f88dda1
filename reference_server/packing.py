"""Forward passes shared by any requests, whatever their question sets: laya's rows, packed.

laya scores a request as one model row per question: ``Agent._encode_state`` tokenizes the state
once and builds, per question, a sequence of the state's tokens and that question's head
(``build_sequence``); ``collate_items`` pads rows to one tensor; ``Agent._forward`` runs the model;
``Agent._decode_answers`` turns a request's rows into its answers. The rows of a tensor never
see each other (attention is masked per row, the head reads each row's own markers), so any rows
may share a pass: the rows of requests with different question sets, or part of one request's
rows. ``Agent.predict_batch`` only shares a pass among states with one question set; this module
does the same steps over the rows of a whole batch:

1. encode each request as laya does (``_check_question``, ``_to_internal``, ``_encode_state`` with
   the request's own ``max_len``/``head_max_len``), inside laya's question-token cache scope;
2. sort the rows by length and cut them into passes of at most ``pass_tokens`` padded tokens
   (one row at least), and into at least ``lanes`` passes when the caller has that many cores to
   fill (a request alone on an idle server runs its rows side by side, one thread each);
3. run the passes (``run``: the caller's ``CorePool``);
4. decode each request from its rows and count its ``usage`` as ``Agent.predict_batch`` does.

Why a cap on tokens per pass: on one core, the forward pass costs least per row at about 2,000
tokens a pass (4 rows of 512 tokens, 8 to 16 of 100-250); at 64 rows of 512 tokens each row cost
1.3x as much and the pass held hundreds of MB (the masks are rows x tokens x tokens). Sorting
keeps padding small when lengths differ.

This uses laya's private methods, which ``Agent.predict_batch`` is made of; laya is pinned
(0.4.15), and ``LayaEngine.load`` checks this path against laya's own ``Router.predict_batch`` on
every checkpoint before serving, answering through laya's path instead when they differ.
``usage`` follows laya 0.4.15's ``predict_batch`` line for line.

Heavy imports: numpy, torch and laya, inside functions only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["EncodedRequest", "encode_requests", "plan_passes", "predict_packed"]

#: Padded tokens per forward pass (rows x the longest row), unless one row is longer.
PASS_TOKENS = 2048


@dataclass
class EncodedRequest:
    ids: list[str]                   # question ids, in request order
    internal: dict[str, dict]        # laya's normalised question definitions
    items: list[dict[str, Any]]      # laya's encoded rows, one per question


def encode_requests(agent: Any, requests: Sequence[tuple[Any, Mapping[str, Any], dict[str, int]]]) -> list[EncodedRequest]:
    """Each (state, questions, token-window overrides) encoded as ``Agent.predict_batch`` does.

    Raises laya's ValueError for a question it rejects, or a state/question pair that cannot fit.
    """
    from laya.common import _reuse_question_tokens

    @_reuse_question_tokens  # laya's per-call cache: a question's head is tokenized once a batch
    def encode_all() -> list[EncodedRequest]:
        out = []
        for state, questions, overrides in requests:
            if state is None:
                raise TypeError("state must not be None; pass a string, dict, or list")
            ids = list(questions)
            for qid in ids:
                agent._check_question(qid, questions[qid])
            internal = {qid: agent._to_internal(questions[qid]) for qid in ids}
            items = agent._encode_state(state, ids, internal, **overrides) if ids else []
            out.append(EncodedRequest(ids, internal, items))
        return out

    return encode_all()


def plan_passes(lengths: Sequence[int], pass_tokens: int = PASS_TOKENS, lanes: int = 1) -> list[list[int]]:
    """Row indices per forward pass: longest first, at most ``pass_tokens`` padded tokens a pass
    (a longer row alone), and at least ``min(lanes, rows)`` passes of about equal size."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
    if not order:
        return []
    count = max(1, min(lanes, len(order)))
    while True:
        groups = _even_groups(order, count)
        if all(len(g) == 1 or len(g) * lengths[g[0]] <= pass_tokens for g in groups):
            return groups
        count += 1


def _even_groups(order: list[int], count: int) -> list[list[int]]:
    size, extra = divmod(len(order), count)
    groups, start = [], 0
    for k in range(count):
        end = start + size + (1 if k < extra else 0)
        groups.append(order[start:end])
        start = end
    return groups


def predict_packed(agent: Any, requests: Sequence[tuple[Any, Mapping[str, Any], dict[str, int]]],
                   run: Callable[..., list[Any]],
                   lanes: int = 1, pass_tokens: int = PASS_TOKENS) -> list[dict[str, Any]]:
    """laya's result dict (``answers``, ``usage``) per request, from passes shared by all of them.

    ``run(fn, passes, tokens, alone)`` must return ``[fn(p) for p in passes]``; it may run
    passes at once (``tokens``: each one's padded tokens), except those flagged in ``alone``: a
    row longer than ``pass_tokens`` runs by itself (one row at a window of 8,192 tokens holds
    about 1 GB of masks and activations).
    """
    import numpy as np
    import torch
    from laya.common import collapsed_options, collate_items

    encoded = encode_requests(agent, requests)
    rows = [(r, j) for r, enc in enumerate(encoded) for j in range(len(enc.items))]
    lengths = [len(encoded[r].items[j]["ids"]) for r, j in rows]
    passes = plan_passes(lengths, pass_tokens, lanes)

    def forward(indices: list[int]) -> tuple[Any, Any]:
        batch = collate_items([[encoded[rows[i][0]].items[rows[i][1]] for i in indices]], agent.tok.pad_token_id)
        with torch.no_grad():  # grad mode is per thread; predict_batch runs under no_grad too
            return agent._forward(batch)

    logits_of: dict[int, Any] = {}
    act_of: dict[int, Any] = {}
    tokens = [len(p) * lengths[p[0]] for p in passes]  # longest row first: padded size
    alone = [len(p) == 1 and lengths[p[0]] > pass_tokens for p in passes]
    for indices, (logits, act) in zip(passes, run(forward, passes, tokens, alone)):
        for position, i in enumerate(indices):
            logits_of[i], act_of[i] = logits[position], act[position]

    results = []
    first = 0
    for enc in encoded:
        n = len(enc.items)
        if not n:  # no questions: laya answers without a forward pass
            results.append({"answers": {}, "usage": {"input_tokens": 0, "output_tokens": 0}})
            continue
        width = max(len(item["markers"]) for item in enc.items)
        logits = np.zeros((n, max(1, width)), dtype=np.float32)
        for j, item in enumerate(enc.items):
            k = len(item["markers"])
            logits[j, :k] = logits_of[first + j][:k]
        act = np.stack([act_of[first + j] for j in range(n)])
        first += n
        answers = agent._decode_answers(logits, act, enc.items, enc.ids, enc.internal, 0)
        # Agent.predict_batch's usage, laya 0.4.15.
        stats = [item["state_stats"] for item in enc.items]
        dropped = max(s["state_tokens_dropped"] for s in stats)
        usage: dict[str, Any] = {
            "input_tokens": sum(len(item["ids"]) for item in enc.items),
            "output_tokens": 0,
            "state_tokens": stats[0]["state_tokens"],
            "state_tokens_dropped": dropped,
            "truncated": dropped > 0,
            "truncated_questions": [qid for qid, s in zip(enc.ids, stats) if s["truncated"]],
        }
        collapsed = collapsed_options(enc.ids, enc.items)
        if collapsed:
            usage["options"] = collapsed
        results.append({"answers": answers, "usage": usage})
    return results

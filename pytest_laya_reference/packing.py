"""Forward passes shared by any requests, whatever their question sets: laya's rows, packed.

laya scores a request as one model row per question, and the rows of a pass never see each
other, so any rows may share a pass. ``encode_requests`` encodes each request as laya does,
``plan_passes`` sorts the rows by length and cuts them into passes of at most ``pass_tokens``
padded tokens (and into at least ``lanes`` passes when that many cores are free), and
``predict_packed`` runs them and decodes each request and its ``usage`` as
``Agent.predict_batch`` does. These are laya 0.4.15's private steps, pinned;
``LayaEngine.load`` checks this path against ``Router.predict_batch`` (``PROBES``,
``packed_disagrees``) before serving.

Heavy imports: numpy, torch and laya, inside functions only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .fast_tokenizer import FastTokenizer, encode_state

__all__ = ["EncodedRequest", "PROBES", "encode_requests", "packed_disagrees", "plan_passes", "predict_packed"]

#: Padded tokens per forward pass (rows x the longest row), unless one row is longer.
PASS_TOKENS = 2048


@dataclass
class EncodedRequest:
    ids: list[str]                   # question ids, in request order
    internal: dict[str, dict[str, Any]]  # laya's normalised question definitions
    items: list[dict[str, Any]]      # laya's encoded rows, one per question


def encode_requests(agent: Any, requests: Sequence[tuple[Any, Mapping[str, Any], dict[str, int]]],
                    tokenizer: FastTokenizer | None = None) -> list[EncodedRequest]:
    """Each (state, questions, token-window overrides) encoded as ``Agent.predict_batch`` does
    (tokenised through ``tokenizer``, where there is one: ``FastTokenizer.for_agent``).

    Raises laya's ValueError for a question it rejects, or a state/question pair that cannot fit.
    """
    from laya.common import _reuse_question_tokens

    def encode_all() -> list[EncodedRequest]:
        out = []
        for state, questions, overrides in requests:
            if state is None:
                raise TypeError("state must not be None; pass a string, dict, or list")
            ids = list(questions)
            for qid in ids:
                agent._check_question(qid, questions[qid])
            internal = {qid: agent._to_internal(questions[qid]) for qid in ids}
            items = encode_state(agent, tokenizer, state, ids, internal, **overrides) if ids else []
            out.append(EncodedRequest(ids, internal, items))
        return out

    # laya's per-call cache: a question's head is tokenized once a batch
    encoded: list[EncodedRequest] = _reuse_question_tokens(encode_all)()
    return encoded


def plan_passes(lengths: Sequence[int], pass_tokens: int = PASS_TOKENS, lanes: int = 1) -> list[list[int]]:
    """Row indices per forward pass: longest first, at most ``pass_tokens`` padded tokens a pass
    (a longer row alone), and at least ``min(lanes, rows)`` passes of about equal size, as many
    as a multiple of ``lanes`` where there are the rows (so the lanes finish together)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
    if not order:
        return []
    lanes = max(1, min(lanes, len(order)))
    count = lanes
    while True:
        groups = _even_groups(order, count)
        if all(len(g) == 1 or len(g) * lengths[g[0]] <= pass_tokens for g in groups):
            return groups
        count = min(len(order), count + lanes)


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
                   lanes: int | Callable[[Sequence[int]], int] = 1,
                   pass_tokens: int = PASS_TOKENS,
                   forward: Callable[[dict[str, Any]], tuple[Any, Any]] | None = None,
                   tokenizer: FastTokenizer | None = None) -> list[dict[str, Any]]:
    """laya's result dict (``answers``, ``usage``) per request, from passes shared by all of them.

    ``run(fn, passes, tokens, alone)`` must return ``[fn(p) for p in passes]``; it may run
    passes at once (``tokens``: each one's padded tokens), except those flagged in ``alone``: a
    row longer than ``pass_tokens`` runs by itself (one row at a window of 8,192 tokens holds
    about 1 GB of masks and activations). ``lanes``: the fewest passes to plan, or a function
    of the rows' token lengths that says it (``cores.LoneJob.lanes``). ``forward``: what runs a
    collated pass (``Agent._forward``'s signature and results; by default that method itself),
    e.g. a ``packed_forward.PackedForward``. ``tokenizer``: as for ``encode_requests``.
    """
    import numpy as np
    import torch
    from laya.common import collapsed_options, collate_items

    encoded = encode_requests(agent, requests, tokenizer)
    rows = [(r, j) for r, enc in enumerate(encoded) for j in range(len(enc.items))]
    lengths = [len(encoded[r].items[j]["ids"]) for r, j in rows]
    passes = plan_passes(lengths, pass_tokens, lanes if isinstance(lanes, int) else lanes(lengths))

    run_pass = agent._forward if forward is None else forward

    def one_pass(indices: list[int]) -> tuple[Any, Any]:
        batch = collate_items([[encoded[rows[i][0]].items[rows[i][1]] for i in indices]], agent.tok.pad_token_id)
        # Per thread, like grad mode. The same bits as predict_batch's no_grad, without
        # autograd's version counters and view tracking: 0.92x the time of a 64-token row's pass.
        with torch.inference_mode():
            return run_pass(batch)

    logits_of: dict[int, Any] = {}
    act_of: dict[int, Any] = {}
    tokens = [len(p) * lengths[p[0]] for p in passes]  # longest row first: padded size
    alone = [len(p) == 1 and lengths[p[0]] > pass_tokens for p in passes]
    for indices, (logits, act) in zip(passes, run(one_pass, passes, tokens, alone)):
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


#: Decisions ``load()`` answers both through laya's ``Router.predict_batch`` and through packed
#: passes (``pytest_laya_reference.packing``), which must agree before a checkpoint is served packed:
#: every question type, list labels, noul labels, dict and conversation states, a state cut by
#: the window, options collapsed by a narrow head, and different question sets in one batch.
PROBES: tuple[tuple[Any, Mapping[str, Any], int | None, int | None], ...] = (
    ("Warm-up: the customer was charged twice and asks for a refund.", {
        "team": {"type": "choice", "instructions": "Which team?",
                 "criteria": {"billing": "Charges", "technical": "Software", "shipping": "Parcels"}},
        "urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["low", "medium", "high"]},
        "refund": {"type": "noul", "instructions": "Refund asked?"},
    }, None, None),
    ({"ticket": "Order 7 never arrived", "tier": "gold"}, {
        "stars": {"type": "choice", "instructions": "Stars?", "criteria": [7, 8, 9]},
        "spam": {"type": "noul", "instructions": "Spam?", "criteria": {"true": "ads", "false": "real"},
                 "labels": {"true": "A", "false": "B"}},
    }, None, None),
    ([{"role": "user", "content": "My card was declined."}, {"role": "agent", "content": "Which card?"},
      {"role": "user", "content": "The Visa, and I was charged anyway."}], {
        "mood": {"type": "score", "instructions": "Mood", "criteria": ["angry", "sad", "neutral", "glad", "happy"]},
    }, None, None),
    (" ".join(["The parcel is late and the support line never answers my calls."] * 8), {
        "team": {"type": "choice", "instructions": "Which team?", "criteria": ["billing", "shipping", "other"]},
        "refund": {"type": "noul", "instructions": "Refund asked?"},
    }, 96, None),
    ("Which of these topics is it about?", {
        "topic": {"type": "choice", "instructions": "Topic?",
                  "criteria": ["topic number %d about things" % i for i in range(30)]},
    }, 128, 64),
)


def packed_disagrees(agent: Any, router: Any, key: str, run: Callable[..., list[Any]],
                     forward: Callable[[dict[str, Any]], tuple[Any, Any]] | None = None,
                     tokenizer: FastTokenizer | None = None) -> str | None:
    """Where packed passes (run by ``forward``, tokenised through ``tokenizer``, as in
    ``predict_packed``) first answer ``PROBES``
    otherwise than laya's ``Router.predict_batch`` on the checkpoint ``key`` (answers and
    usage), or None when they agree everywhere."""
    items = []
    for state, questions, max_len, head_max_len in PROBES:
        windows = {k: v for k, v in (("max_len", max_len), ("head_max_len", head_max_len)) if v is not None}
        items.append((state, {q: dict(d) for q, d in questions.items()}, windows))
    try:
        want = router.predict_batch([{"state": s, "questions": q, "model": key, **w} for s, q, w in items])
        got = predict_packed(agent, items, run, lanes=2, pass_tokens=256, forward=forward,  # several passes, mixed sets
                             tokenizer=tokenizer)
        # laya's path adds its routing decision and names its agent; answers and usage must agree.
        return _first_difference([{k: r[k] for k in ("answers", "usage")} for r in got],
                                 [{k: r[k] for k in ("answers", "usage")} for r in want])
    except Exception as exc:  # noqa: BLE001 -- a laya whose internals moved: use its own path
        return "%s: %s" % (type(exc).__name__, exc)


def _first_difference(got: Any, want: Any, path: str = "") -> str | None:
    """Where two values first differ (floats within laya's rounding, 1e-4), or None."""
    if isinstance(want, Mapping) and isinstance(got, Mapping):
        if list(got) != list(want):
            return "%s keys %s != %s" % (path, list(got), list(want))
        pairs: list[tuple[Any, Any, str]] = [(got[k], want[k], "%s/%s" % (path, k)) for k in want]
    elif isinstance(want, list) and isinstance(got, list) and len(got) == len(want):
        pairs = [(g, w, "%s/%d" % (path, i)) for i, (g, w) in enumerate(zip(got, want))]
    elif isinstance(want, float) and isinstance(got, float):
        return None if abs(got - want) <= 1e-4 + 1e-9 else "%s %r != %r" % (path, got, want)
    else:
        return None if got == want and type(got) is type(want) else "%s %r != %r" % (path, got, want)
    for g, w, where in pairs:
        found = _first_difference(g, w, where)
        if found:
            return found
    return None

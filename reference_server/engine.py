"""Real Laya inference for the reference server, with no HTTP in it.

``LayaEngine`` loads each configured checkpoint with laya 0.4.15 and answers decisions on it. The
app (``reference_server.app``) and the micro-batcher (``reference_server.batching``) only see the
``Engine`` protocol below, so a test can stand a fake in for it.

Which laya entry point, and why
-------------------------------
laya-serve 0.4.15 builds a ``laya.Router`` from its environment (``LAYA_EXTRA_MODELS`` registers
local checkpoints by name) and answers ``POST /v1/systemone`` with
``router.predict(state, questions, model=name)``, which routes (an explicit ``model=`` skips
language detection) and calls ``Agent.system_one``, which is ``Agent.predict_batch([state], ...)``.
Its ``/v1/systemone/batch`` calls ``router.predict_batch(requests)``. The in-process entry point
``laya.load(dir).predict`` is ``Agent.system_one`` as well (``Agent.predict = system_one``). So
all of them end in ``Agent.predict_batch``, and on the tiny checkpoint they give identical numbers
(not merely close ones: the answer dicts compare equal). The one thing the Router adds is a
detected ``lang`` passed down to the agent, which only changes numbers when the agent carries
``lang_temperatures``; laya-serve never sets them, and neither does this engine.

This engine does what laya-serve does: it builds one ``Router(models={name: source})`` (a local
directory, a hub id, or a laya registry name such as ``multilingual``; hub ids go through laya's
normal ``Agent`` -> ``snapshot_download`` path, pinned by ``revisions`` when given) and answers
every batch with ``Router.predict_batch`` and an explicit ``model=``.

Batching: one forward pass where laya allows it
-----------------------------------------------
laya has no public API that puts requests with *different question sets* into one forward pass.
``Agent.predict_batch`` takes many states but one shared question dict; ``Router.predict_batch``
takes per-request state and questions, but groups them by laya's own order-sensitive schema key
(``json.dumps(questions, sort_keys=False)`` -- option order is positional, so two schemas that
differ only in key order must not share a group) and runs one ``Agent.predict_batch`` per group.
Fusing heterogeneous rows into one tensor would need laya's private ``_encode_state`` /
``collate_items`` / ``_decode_answers`` and re-implementing ``predict_batch``'s usage bookkeeping,
which is the part most likely to drift from laya-serve between versions. So: **one forward pass
per distinct question set in the batch**, requests with the same question set share one pass, and
results come back in request order. Under real traffic a client sends the same schema over and
over, which is the case that batches.

Measured on the tiny checkpoint, 2 CPU cores (shared, so noisy), 16 requests with one 3-question
set, medians of 20 runs: one batched ``predict`` 47-71 ms against 78-103 ms for 16 single
``predict`` calls, 1.5x-1.8x, with 1 or 2 torch threads. 16 requests over 12 distinct question
sets: 54-90 ms batched against 81-100 ms one by one (grouping only saves per-call overhead there).
Every batched answer equals its single answer exactly (max abs diff 0.0).

Threads
-------
Predictions run on the batcher's worker threads, ``passes`` of them at once; ``load()`` may run on
another thread before serving. torch's intra-op pool defaults to every core, which on a small box
competes with the event loop that must keep answering ``/livez`` while a batch runs. ``load()``
therefore sets ``torch.set_num_threads`` (process-wide, and this engine is meant to own its
process) as follows: an explicit ``threads=N`` wins; ``threads=0`` leaves torch alone; otherwise
``LAYA_THREADS`` (the same knob laya-serve honours) if set; otherwise, when
``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` are unset, one core fewer than the process may use, shared
among the ``passes`` (at least one each), never more than torch's default.
Inter-op threads are left alone (torch refuses to change them once any parallel work has run).

Offline
-------
Nothing global is set (no ``HF_HUB_OFFLINE``): a complete local checkpoint directory never reaches
huggingface_hub, which the tests check by refusing every ``socket.connect`` while loading and
predicting.

Heavy imports (torch, transformers, laya) happen only inside methods, so importing this module is
cheap and imports no torch.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

from pytest_laya.wire.identity import local_checkpoint_revision
from pytest_laya.wire.questions import option_key

__all__ = [
    "DecisionRequest",
    "DecisionResult",
    "Engine",
    "LayaEngine",
    "ModelIdentity",
    "WARMUP_QUESTIONS",
    "WARMUP_STATE",
]

#: The decision every checkpoint answers once in ``load()``: one real forward pass through the
#: same path as a request (tokenizer, encoder, head, decoding), so the first client pays nothing.
WARMUP_STATE = "Warm-up: the customer was charged twice and asks for a refund."
WARMUP_QUESTIONS: Mapping[str, Mapping[str, Any]] = MappingProxyType({
    "warmup": MappingProxyType({
        "type": "choice",
        "instructions": "Which team should handle this?",
        "criteria": MappingProxyType({"billing": "Charges and refunds", "technical": "Software"}),
    }),
})


@dataclass(frozen=True)
class ModelIdentity:
    """What a served checkpoint really is, safe to show to clients (no host paths)."""

    checkpoint: str      # hub id (``repo`` or ``repo/subfolder``), or a local directory's name
    revision: str        # hub commit sha laya resolved, or "sha256:" + hex of model.safetensors
    device: str          # where it computes, e.g. "cpu"
    weights_dtype: str   # parameter dtype without "torch.", e.g. "float32"
    compiled: bool       # True only when compile=True was asked and laya compiled the model

    def to_json(self) -> dict[str, object]:
        return {
            "checkpoint": self.checkpoint,
            "revision": self.revision,
            "device": self.device,
            "weights_dtype": self.weights_dtype,
            "compiled": self.compiled,
        }


@dataclass(frozen=True)
class DecisionRequest:
    state: Any                                  # str | dict | list, already validated
    questions: Mapping[str, Mapping[str, Any]]  # Jev wire question dicts, already validated
    # laya's per-call controls, already validated (None: the checkpoint's own). laya-serve 0.4.15
    # hands them to ``Router.predict``; here they reach ``Router.predict_batch`` the same way.
    max_len: int | None = None               # token window of the whole sequence
    head_max_len: int | None = None          # the question's part of it
    min_confidence: float | Mapping[str, float] | None = None  # abstention gate


@dataclass(frozen=True)
class DecisionResult:
    answers: dict[str, dict]   # laya-serve's per-question answers, in question order
    usage: dict[str, Any]      # laya's usage dict


class Engine(Protocol):
    @property
    def models(self) -> Mapping[str, ModelIdentity]: ...

    @property
    def default_model(self) -> str: ...

    @property
    def ready(self) -> bool: ...

    def configured(self) -> list[str]: ...

    def load(self) -> None: ...

    def predict(self, model: str, requests: Sequence[DecisionRequest]) -> list[DecisionResult]: ...

    def close(self) -> None: ...


# ------------------------------------------------------------------------------------ helpers

_Spec = str | tuple[str, str | None]


def _plain_questions(questions: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """laya insists on real dicts (``isinstance(q, dict)``) at the top two levels; keep order."""
    if type(questions) is dict and all(type(q) is dict for q in questions.values()):
        return questions
    return {qid: _plain(q) for qid, q in questions.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _laya_item(request: DecisionRequest, key: str) -> dict[str, Any]:
    """One ``Router.predict_batch`` request; token windows only when set, as laya-serve passes them."""
    item: dict[str, Any] = {"state": request.state, "questions": _plain_questions(request.questions), "model": key}
    if request.max_len is not None:
        item["max_len"] = request.max_len
    if request.head_max_len is not None:
        item["head_max_len"] = request.head_max_len
    return item


def _string_keyed(answer: dict[str, Any]) -> dict[str, Any]:
    """A choice answer with `choice` and its probability keys as strings, as the target spec has them.

    laya answers a list label that is a number or a boolean (criteria [7, 8]) with the label
    itself, ``choice: 7``, while its probabilities, once JSON, are keyed ``"7"``: one spelling
    for both, the key's (``pytest_laya.wire.questions.option_key``).
    """
    if answer.get("type") != "choice":
        return answer
    probabilities = answer.get("probabilities")
    choice = answer.get("choice")
    if type(choice) is str and (not isinstance(probabilities, dict) or all(type(k) is str for k in probabilities)):
        return answer
    out = dict(answer)
    if choice is not None:
        out["choice"] = option_key(choice)
    if isinstance(probabilities, dict):
        out["probabilities"] = {option_key(k): p for k, p in probabilities.items()}
    return out


_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


def _router_key(name: str) -> str:
    """The key laya's Router files ``name`` under (trimmed, lowercased, aliases resolved).

    Checked here, with laya's documented rule, so a bad name fails at construction, not in load().
    """
    from laya.router import canonical_name  # numpy only, no torch

    key = canonical_name(name)
    if not _NAME_RE.match(key) or key == "auto":
        raise ValueError("invalid checkpoint name %r: use letters, digits, '.', '_' or '-', starting "
                         "with a letter or digit ('auto' is reserved)" % (name,))
    return key


def _auto_threads(torch_default: int, passes: int = 1) -> int | None:
    """The intra-op thread count ``load()`` applies when none was asked for, or None to leave it."""
    raw = os.environ.get("LAYA_THREADS", "").strip()
    if raw:
        try:
            n = int(raw)
        except ValueError:
            n = 0
        if n > 0:
            return n
    if os.environ.get("OMP_NUM_THREADS") or os.environ.get("MKL_NUM_THREADS"):
        return None  # the operator already decided; torch honours these
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(torch_default, (cpus - 1) // max(1, passes)))


@dataclass
class _Configured:
    name: str         # the engine's name for it (what clients send as ``model``)
    key: str          # the Router's canonical key
    spec: _Spec       # what the Router loads: an absolute local dir, a hub id, or (repo, subfolder)
    local_dir: str | None
    checkpoint: str   # the public identity string


class LayaEngine:
    """The ``Engine`` on real laya 0.4.15: one laya Router, one Agent per configured checkpoint."""

    def __init__(
        self,
        checkpoints: Mapping[str, str],
        *,
        device: str | None = None,
        compile: bool = False,
        threads: int | None = None,
        revisions: Mapping[str, str] | None = None,
        jev_confidence: bool = True,
        passes: int = 1,
    ) -> None:
        """``checkpoints`` maps a served name to a local checkpoint directory, a hub repo id, or a
        laya registry name (``english``, ``multilingual``, ``typed-decisions`` and their aliases).

        ``threads``: see the module docstring (None = automatic, 0 = leave torch alone).
        ``revisions``: optional hub revision pins per served name (ignored for local dirs).
        ``jev_confidence``: add ``x_jev_confidence`` to choice and score answers, as laya-serve
        does on its wire (its default, non-strict mode).
        ``passes``: how many ``predict`` calls will run at once (the batcher's); the automatic
        thread count shares the spare cores among them.
        """
        if not checkpoints:
            raise ValueError("at least one checkpoint must be configured")
        self._device = device
        self._compile = bool(compile)
        self._threads_arg = threads
        self._passes = int(passes)
        self._jev = bool(jev_confidence)
        self._revisions = dict(revisions or {})
        self._configured: dict[str, _Configured] = {}
        keys: dict[str, str] = {}
        for name, source in checkpoints.items():
            if not isinstance(name, str) or not name.strip():
                raise ValueError("checkpoint name must be a non-empty string, got %r" % (name,))
            if not isinstance(source, str) or not source.strip():
                raise ValueError("checkpoint %r: source must be a directory or hub id" % name)
            key = _router_key(name)
            if key in keys:
                raise ValueError("checkpoint names %r and %r collide" % (keys[key], name))
            keys[key] = name
            self._configured[name] = self._describe(name, key, source)
        unknown = set(self._revisions) - set(self._configured)
        if unknown:
            raise ValueError("revisions for unconfigured checkpoints: %s" % sorted(unknown))
        self._default = next(iter(self._configured))
        self._lock = threading.Lock()
        self._router: Any = None
        self._models: dict[str, ModelIdentity] = {}
        self._warmup_ms: dict[str, float] = {}
        self._ready = False
        self._closed = False
        self.threads: int | None = None  # what load() applied (None: left as it was)

    @staticmethod
    def _describe(name: str, key: str, source: str) -> _Configured:
        source = os.path.expanduser(source.strip())
        # laya's Agent treats anything that exists on disk as local, and only the rest as a hub id.
        if os.path.exists(source):
            local = os.path.abspath(source)
            return _Configured(name, key, local, local, os.path.basename(local.rstrip(os.sep)))
        # A laya registry name loads its (repo, subfolder), as ``laya.load("multilingual")`` does.
        from laya.router import resolve_model_spec  # numpy only, no torch

        spec = resolve_model_spec(source)
        if spec is not None:
            repo, sub = spec
            return _Configured(name, key, (repo, sub), None, "%s/%s" % (repo, sub) if sub else repo)
        return _Configured(name, key, source, None, source)

    # --------------------------------------------------------------------- the protocol

    @property
    def models(self) -> Mapping[str, ModelIdentity]:
        return MappingProxyType(dict(self._models))

    @property
    def default_model(self) -> str:
        return self._default

    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def warmup_ms(self) -> Mapping[str, float]:
        """Wall time of each checkpoint's warm-up forward pass in ``load()``."""
        return MappingProxyType(dict(self._warmup_ms))

    def configured(self) -> list[str]:
        return list(self._configured)

    def load(self) -> None:
        """Load and warm every checkpoint (blocking); a second call returns at once."""
        with self._lock:
            if self._closed:
                raise RuntimeError("engine is closed")
            if self._ready:
                return
            self._apply_threads()
            from laya.router import Router

            if self._router is None:
                options: dict[str, Any] = {
                    "models": {c.key: c.spec for c in self._configured.values()},
                    "device": self._device,
                    "max_loaded": len(self._configured),
                    "default": self._configured[self._default].key,
                }
                revisions = {self._configured[n].key: r for n, r in self._revisions.items() if r}
                if revisions:
                    options["revisions"] = revisions
                if self._compile:
                    options["agent_kwargs"] = {"compile": True}
                self._router = Router(**options)
            for conf in self._configured.values():
                agent = self._router.load(conf.key)
                started = time.perf_counter()
                self._router.predict_batch([{
                    "state": WARMUP_STATE, "questions": _plain_questions(WARMUP_QUESTIONS),
                    "model": conf.key,
                }])
                self._warmup_ms[conf.name] = (time.perf_counter() - started) * 1000.0
                self._models[conf.name] = self._identity(conf, agent)
            self._ready = True

    def predict(self, model: str, requests: Sequence[DecisionRequest]) -> list[DecisionResult]:
        """Answer ``requests`` on ``model``: one forward pass per distinct question set.

        Raises KeyError(model) for a model that is not configured, ValueError for a question (or a
        state/question combination) laya rejects -- its message names the question and is safe
        to show -- and anything else for an inference failure.
        """
        conf = self._configured.get(model) if isinstance(model, str) else None
        if conf is None:
            raise KeyError(model)  # like a dict: args[0] is the unknown name
        router = self._router
        if not self._ready or router is None:
            raise RuntimeError("engine is not loaded" if not self._closed else "engine is closed")
        if not requests:
            return []
        items = [_laya_item(r, conf.key) for r in requests]
        results = router.predict_batch(items)
        if len(results) != len(items):  # laya checks this itself; never hand out misaligned answers
            raise RuntimeError("laya returned %d results for %d requests" % (len(results), len(items)))
        if any(r.min_confidence is not None for r in requests):
            from laya.confidence import apply_confidence_gate

            for request, result in zip(requests, results):
                # What Router.predict does with laya-serve's `min_confidence`, one request at a
                # time: a batch mixes requests with different thresholds or none.
                threshold = request.min_confidence
                apply_confidence_gate([result], dict(threshold) if isinstance(threshold, Mapping) else threshold)
        return [self._result(r) for r in results]

    def close(self) -> None:
        with self._lock:
            self._ready = False
            self._closed = True
            router, self._router = self._router, None
        if router is not None:
            try:
                router.unload()
            except Exception:  # noqa: BLE001 -- closing must not fail shutdown
                pass

    # --------------------------------------------------------------------- internals

    def _apply_threads(self) -> None:
        import torch

        if self._threads_arg is None:
            wanted = _auto_threads(torch.get_num_threads(), self._passes)
        else:
            wanted = int(self._threads_arg) if int(self._threads_arg) > 0 else None
        if wanted is not None and torch.get_num_threads() != wanted:
            torch.set_num_threads(wanted)
        self.threads = torch.get_num_threads() if wanted is not None else None

    def _identity(self, conf: _Configured, agent: Any) -> ModelIdentity:
        if conf.local_dir is not None:
            revision = local_checkpoint_revision(conf.local_dir)
        else:
            revision = getattr(agent, "revision", None) or "unknown"
        try:
            dtype = next(agent.model.parameters()).dtype
            weights_dtype = str(dtype).replace("torch.", "")
        except (AttributeError, StopIteration):
            weights_dtype = "unknown"
        compiled = bool(self._compile and getattr(agent, "backend", None) == "compile")
        return ModelIdentity(
            checkpoint=conf.checkpoint,
            revision=str(revision),
            device=str(getattr(agent, "device", "unknown")),
            weights_dtype=weights_dtype,
            compiled=compiled,
        )

    def _result(self, result: Mapping[str, Any]) -> DecisionResult:
        answers = {qid: _string_keyed(a) if isinstance(a, dict) else a for qid, a in result["answers"].items()}
        if self._jev:
            from laya.confidence import jev_confidence

            out: dict[str, dict] = {}
            for qid, answer in answers.items():
                conf = jev_confidence(answer) if isinstance(answer, dict) else None
                out[qid] = answer if conf is None else {**answer, "x_jev_confidence": round(conf, 4)}
            answers = out
        return DecisionResult(answers=dict(answers), usage=dict(result.get("usage") or {}))

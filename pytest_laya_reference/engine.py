"""Real Laya inference for the reference server, with no HTTP in it.

``LayaEngine`` loads each configured checkpoint with laya 0.4.15 into one ``laya.Router`` (as
laya-serve does) and answers batches in packed forward passes (``pytest_laya_reference.packing``)
on a ``pytest_laya_reference.cores.CorePool``. The app and the micro-batcher see only the
``Engine`` protocol, so a test can stand a fake in for it. ``load()`` checks the packed path
against ``Router.predict_batch`` per checkpoint and falls back to laya's own where they differ
(``packed``); answers are a single request's within ``ANSWER_TOLERANCE``. Thread budget and
design: docs/reference-server.md ("Options", "Inference").

Heavy imports: torch, transformers and laya, inside methods only.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol, TypeVar

from pytest_laya.wire.identity import local_checkpoint_revision
from pytest_laya.wire.questions import option_key

from .cores import CorePool, auto_cores
from .fast_tokenizer import FastTokenizer
from .packed_forward import PackedForward
from .packing import packed_disagrees, predict_packed

R = TypeVar("R")

__all__ = [
    "ANSWER_TOLERANCE",
    "DecisionRequest",
    "DecisionResult",
    "Engine",
    "LayaEngine",
    "ModelIdentity",
    "WARMUP_QUESTIONS",
    "WARMUP_STATE",
]

#: The most one probability moves between a request asked alone, in a batch, under load and again:
#: one step of laya's 4th decimal (float noise from the pass's shape crossing a rounding boundary).
ANSWER_TOLERANCE = 1e-4

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
    answers: dict[str, dict[str, Any]]   # laya-serve's per-question answers, in question order
    usage: dict[str, Any]      # laya's usage dict


class Engine(Protocol):
    """What the micro-batcher and the app need of an engine. An engine may also offer
    ``run_alone(model, fn)`` (see ``LayaEngine.run_alone``); the batcher uses it when present."""

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


def _overrides(request: DecisionRequest) -> dict[str, int]:
    """The request's token windows, only those set (laya reads an absent one as its own)."""
    out = {}
    if request.max_len is not None:
        out["max_len"] = request.max_len
    if request.head_max_len is not None:
        out["head_max_len"] = request.head_max_len
    return out


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

    key = str(canonical_name(name))
    if not _NAME_RE.match(key) or key == "auto":
        raise ValueError("invalid checkpoint name %r: use letters, digits, '.', '_' or '-', starting "
                         "with a letter or digit ('auto' is reserved)" % (name,))
    return key


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

        ``threads``: the cores forward passes share (see the module docstring; None = automatic,
        0 = leave torch alone).
        ``revisions``: optional hub revision pins per served name (ignored for local dirs).
        ``jev_confidence``: add ``x_jev_confidence`` to choice and score answers, as laya-serve
        does on its wire (its default, non-strict mode).
        ``passes``: how many ``predict`` calls will run at once (the batcher's); with
        ``threads=0``, also how many forward passes run at once.
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
        self._agents: dict[str, Any] = {}
        # per packed checkpoint where it applies: what runs a pass (a PackedForward)
        self._forwards: dict[str, Callable[[dict[str, Any]], tuple[Any, Any]]] = {}
        # per packed checkpoint where it applies: what tokenises its requests (a FastTokenizer)
        self._tokenizers: dict[str, FastTokenizer] = {}
        self._packed: dict[str, bool] = {}
        self._pool: CorePool | None = None
        self._inflight = 0           # predict calls running
        self._reserved_alone = 0     # run_alone calls handed over and not finished (0 or 1)
        self.threads: int | None = None  # the cores forward passes share (None: torch left alone)

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
            if self._pool is None:
                self._pool = self._core_pool()
                self.threads = self._pool.cores
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
                # On the pool's wide thread: no other thread may start an OpenMP team of more
                # than one thread (``CorePool.on_wide``).
                self._pool.on_wide(functools.partial(self._load_one, conf))
            self._ready = True

    def _load_one(self, conf: _Configured) -> None:
        assert self._router is not None
        agent = self._router.load(conf.key)
        started = time.perf_counter()
        self._router.predict_batch([{
            "state": WARMUP_STATE, "questions": _plain_questions(WARMUP_QUESTIONS),
            "model": conf.key,
        }])
        self._warmup_ms[conf.name] = (time.perf_counter() - started) * 1000.0
        self._models[conf.name] = self._identity(conf, agent)
        self._agents[conf.name] = agent
        self._packed[conf.name] = self._packing_agrees(conf, agent)

    @property
    def packed(self) -> Mapping[str, bool]:
        """Per checkpoint: whether it is answered by packed passes (False: laya's own path)."""
        return MappingProxyType(dict(self._packed))

    def predict(self, model: str, requests: Sequence[DecisionRequest]) -> list[DecisionResult]:
        """Answer ``requests`` on ``model``, in packed forward passes shared by all of them.

        Raises KeyError(model) for a model that is not configured, ValueError for a question (or a
        state/question combination) laya rejects -- its message names the question and is safe
        to show -- and anything else for an inference failure.
        """
        conf = self._configured.get(model) if isinstance(model, str) else None
        if conf is None:
            raise KeyError(model)  # like a dict: args[0] is the unknown name
        router, pool = self._router, self._pool
        if not self._ready or router is None or pool is None:
            raise RuntimeError("engine is not loaded" if not self._closed else "engine is closed")
        if not requests:
            return []
        with self._lock:
            self._inflight += 1
            # Alone: the only request in inference, or the one ``run_alone`` reserved every core for.
            alone = (self._inflight == 1 and not self._reserved_alone) or pool.holding
        try:
            if self._packed.get(conf.name):
                agent = self._agents[conf.name]
                rows = [(r.state, _plain_questions(r.questions), _overrides(r)) for r in requests]
                run: Callable[..., list[Any]] = pool.run
                lanes: int | Callable[[Sequence[int]], int] = 1
                if alone and self._lone_shapes_apply(conf, pool):
                    # Alone on an idle server: side by side, wide or on one thread, as measured.
                    job = pool.lone_job(conf.name)
                    run, lanes = job.run, job.lanes
                results = predict_packed(agent, rows, run, lanes, forward=self._forwards.get(conf.name),
                                         tokenizer=self._tokenizers.get(conf.name))
            else:
                # laya's own path shares the cores too: on the wide thread when alone, else on one
                # thread; never an OpenMP team of its own on this thread (``CorePool.on_wide``).
                items = [_laya_item(r, conf.key) for r in requests]
                results = pool.run(router.predict_batch, [items], alone=[alone and (pool.cores or 1) > 1])[0]
        finally:
            with self._lock:
                self._inflight -= 1
        if len(results) != len(requests):  # never hand out misaligned answers
            raise RuntimeError("laya returned %d results for %d requests" % (len(results), len(requests)))
        if any(r.min_confidence is not None for r in requests):
            from laya.confidence import apply_confidence_gate

            for request, result in zip(requests, results):
                # What Router.predict does with laya-serve's `min_confidence`, one request at a
                # time: a batch mixes requests with different thresholds or none.
                threshold = request.min_confidence
                apply_confidence_gate([result], dict(threshold) if isinstance(threshold, Mapping) else threshold)
        return [self._result(r) for r in results]

    def run_alone(self, model: str, fn: Callable[[], R]) -> concurrent.futures.Future[R] | None:
        """``fn()`` (which predicts one request on ``model``) on the core pool's wide thread holding
        every core, when nothing else is in inference (``CorePool.run_alone``); None otherwise,
        and the caller predicts as usual. Only for a packed model on the CPU with more than one
        core: elsewhere the lone shapes do not apply."""
        conf = self._configured.get(model) if isinstance(model, str) else None
        pool = self._pool
        if conf is None or pool is None or not self._ready or not self._packed.get(conf.name) \
                or not self._lone_shapes_apply(conf, pool):
            return None
        with self._lock:
            if self._inflight or self._reserved_alone:
                return None
            self._reserved_alone += 1  # a predict that starts meanwhile is not alone

        def reserved() -> R:
            try:
                return fn()
            finally:
                with self._lock:
                    self._reserved_alone -= 1

        future = None
        try:
            future = pool.run_alone(reserved)
        finally:
            if future is None:  # not handed over (the pool was busy, or closed): no reservation
                with self._lock:
                    self._reserved_alone -= 1
        return future

    def _lone_shapes_apply(self, conf: _Configured, pool: CorePool) -> bool:
        """Whether a lone request on this packed model runs in a measured shape (``LoneJob``):
        on the CPU, with more than one core to shape."""
        agent = self._agents.get(conf.name)
        return agent is not None and agent.device.type == "cpu" and pool.cores is not None and pool.cores > 1

    def close(self) -> None:
        with self._lock:
            self._ready = False
            self._closed = True
            router, self._router = self._router, None
            self._forwards = {}
            self._tokenizers = {}
        if router is not None:
            try:
                router.unload()
            except Exception:  # noqa: BLE001 -- closing must not fail shutdown
                pass
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    # --------------------------------------------------------------------- internals

    def _core_pool(self) -> CorePool:
        if self._threads_arg is None:
            cores = auto_cores()
        else:
            cores = int(self._threads_arg) if int(self._threads_arg) > 0 else None
        return CorePool(cores, workers=self._passes)

    def _packing_agrees(self, conf: _Configured, agent: Any) -> bool:
        """Whether packed passes answer the probes as laya's own ``Router.predict_batch`` does,
        run by ``PackedForward`` where it applies, else by laya's ``Agent._forward``, and
        tokenised by a ``FastTokenizer`` where one agrees with the checkpoint's tokenizer."""
        assert self._pool is not None
        tokenizer = FastTokenizer.for_agent(agent)
        if tokenizer is not None:
            self._tokenizers[conf.name] = tokenizer
        forward = PackedForward.attach(agent)
        if forward is not None:
            mismatch = packed_disagrees(agent, self._router, conf.key, self._pool.run, forward, tokenizer)
            if mismatch is None:
                self._forwards[conf.name] = forward
                return True
            print("laya-reference-server: warning: checkpoint %r: packed passes run laya's own forward: "
                  "the lean one disagrees with laya's Router.predict_batch (%s)" % (conf.name, mismatch),
                  file=sys.stderr, flush=True)
        mismatch = packed_disagrees(agent, self._router, conf.key, self._pool.run, tokenizer=tokenizer)
        if mismatch is None:
            return True
        print("laya-reference-server: warning: checkpoint %r is answered one forward pass per question set "
              "(laya's Router.predict_batch): packed passes disagree with it (%s)" % (conf.name, mismatch),
              file=sys.stderr, flush=True)
        return False

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

            out: dict[str, dict[str, Any]] = {}
            for qid, answer in answers.items():
                conf = jev_confidence(answer) if isinstance(answer, dict) else None
                out[qid] = answer if conf is None else {**answer, "x_jev_confidence": round(conf, 4)}
            answers = out
        return DecisionResult(answers=dict(answers), usage=dict(result.get("usage") or {}))

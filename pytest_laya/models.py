"""The DecisionModel interface: what any implementation of Laya's decisions looks like to a test.

In-process Laya, a served Laya, or a downstream adapter all answer `decide(state, questions)`
with the same `Decision`, so one contract suite (`pytest_laya.contract.DecisionModelContract`)
can hold them all to the same rules. `ServedLayaModel` is the served client behind it;
`LayaModel` is laya itself, loaded in this process (it needs the ``reference`` extra, and imports
laya and torch only when one is made).

Both build their `Decision` with the foundation's answer rules (`pytest_laya.wire.decision`), so an
answer no real Laya could give raises `LayaCallError` (``bad_answer``) whichever one produced it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from pytest_laya.client import AsyncServedLayaClient, ServedLayaClient
from pytest_laya.wire.decision import Decision, Provenance, parse_answers, parse_usage
from pytest_laya.wire.errors import LayaCallError, LayaConfigError
from pytest_laya.wire.identity import ServedIdentity
from pytest_laya.wire.questions import QUESTION_TYPES, AskedQuestion, Questions, normalize_questions

__all__ = ["DecisionModel", "ServedLayaModel", "LayaModel", "IN_PROCESS_URL_SCHEME"]

#: `Provenance.url` of an in-process decision is ``in-process:<checkpoint>``: no host, no port.
IN_PROCESS_URL_SCHEME = "in-process"
_REFERENCE_EXTRA = "pip install 'pytest-laya[reference]'"


@runtime_checkable
class DecisionModel(Protocol):
    """One forward pass answers typed questions about a state."""

    #: A name that tells implementations apart in records and reports.
    name: str
    #: Question types it answers (a subset of choice, score, noul).
    question_types: tuple[str, ...]
    #: Whether the same request always gets the same answer.
    deterministic: bool

    @property
    def model(self) -> str | None:
        """The identity of the weights (`checkpoint@revision`), once known."""

    def decide(self, state: Any, questions: Questions) -> Decision: ...

    async def adecide(self, state: Any, questions: Questions) -> Decision: ...

    def close(self) -> None:
        """Release resources; calling it twice is safe."""


class ServedLayaModel:
    """A served Laya as a `DecisionModel`, over `ServedLayaClient` (any mode of the plugin).

    `client_options` go to the client (`model`, `api_key`, `timeout_s`, `transport`,
    `on_exchange`...). `allow_truncation` is passed to every decision, as `LayaModel` takes it.
    """

    question_types = QUESTION_TYPES
    deterministic = True

    def __init__(self, url: str | None = None, *, name: str = "served-laya", allow_truncation: bool = False,
                 **client_options: Any) -> None:
        self.name = name
        self.allow_truncation = bool(allow_truncation)
        self._options = client_options
        self._client = ServedLayaClient(url, **client_options)
        self._last_model: str | None = None
        self._closed = False

    @property
    def model(self) -> str | None:
        return self._last_model

    @property
    def client(self) -> ServedLayaClient:
        return self._client

    def decide(self, state: Any, questions: Questions) -> Decision:
        decision = self._client.decide(state, questions, allow_truncation=self.allow_truncation)
        self._last_model = decision.model
        return decision

    async def adecide(self, state: Any, questions: Questions) -> Decision:
        # One async client per call: an httpx.AsyncClient belongs to the event loop it was used
        # on, and callers (pytest-asyncio's per-test loops) do not share one.
        async with AsyncServedLayaClient(self._client.url, **self._options) as client:
            decision = await client.decide(state, questions, allow_truncation=self.allow_truncation)
        self._last_model = decision.model
        return decision

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._client.close()

    def __enter__(self) -> ServedLayaModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ServedLayaModel({self.name!r}, {self._client!r})"


class LayaModel:
    """Laya loaded in this process (``laya.load``), as a `DecisionModel`.

    `checkpoint` is a local checkpoint directory, a hub repo id or a laya registry name
    (``english``, ``multilingual``...), exactly as ``laya.load`` takes it; `device` and
    `load_options` are passed on to it (``device=None`` lets laya choose). Loading happens here,
    so a checkpoint that cannot load is one `LayaConfigError` at construction, not a failure in
    the middle of a test.

    Each decision goes through the same steps as a served one: the questions are checked with
    the kit's question rules, state and questions take their JSON form (so option labels are
    keyed as a server would key them), laya answers, and the answer is read with the
    foundation's answer rules. Predictions run one at a time (laya's Agent is not documented as
    thread-safe); `adecide` runs them on a worker thread, off the event loop.

    `agent` wraps an Agent that is already loaded (or anything with laya's ``predict(state,
    questions)``), so several models can share one load; a model does not unload an agent it was
    given. Identity is ``checkpoint@revision`` as the reference server reports it: a local
    directory's name and ``sha256:`` of its model.safetensors, or a hub id and its revision.
    """

    question_types = QUESTION_TYPES
    deterministic = True

    def __init__(
        self,
        checkpoint: str | os.PathLike[str],
        *,
        device: str | None = None,
        name: str = "laya-in-process",
        allow_truncation: bool = False,
        agent: Any = None,
        **load_options: Any,
    ) -> None:
        self.name = name
        self.allow_truncation = bool(allow_truncation)
        self._source = os.fspath(checkpoint)
        self._lock = threading.Lock()
        self._closed = False
        self._owns_agent = agent is None
        local = _local_checkpoint_dir(self._source)
        self._agent = agent if agent is not None else _load_agent(local or self._source, device, load_options)
        self._identity = _in_process_identity(self._source, local, self._agent)

    # -- identity ---------------------------------------------------------------------------

    @property
    def model(self) -> str | None:
        return self._identity.model

    @property
    def identity(self) -> ServedIdentity:
        """Which weights answer: checkpoint, revision, device, dtype (``source="in_process"``)."""
        return self._identity

    @property
    def agent(self) -> Any:
        """The laya Agent answering (None once closed)."""
        return self._agent

    # -- deciding ---------------------------------------------------------------------------

    def decide(self, state: Any, questions: Questions) -> Decision:
        """One forward pass over `questions` about `state`; raises `LayaConfigError` or `LayaCallError`."""
        asked = normalize_questions(questions)
        wire_state, wire_questions = _wire_request(state, asked)
        with self._lock:
            agent = self._agent
            if self._closed or agent is None:
                raise LayaConfigError(f"{self.name} is closed: make a new LayaModel", code="closed")
            started = time.perf_counter()
            try:
                raw = agent.predict(wire_state, wire_questions)
            except (ValueError, TypeError) as exc:
                # laya's own refusal of a question or state: what a server answers with a 4xx.
                raise LayaCallError("laya refused the request", code="rejected", server_detail=str(exc)) from None
            except Exception as exc:  # noqa: BLE001 - any inference failure is this call failing
                raise LayaCallError(f"in-process inference failed ({type(exc).__name__}: {exc})",
                                    code="inference_failed") from exc
            infer_ms = (time.perf_counter() - started) * 1000.0
        return self._decision(raw, asked, infer_ms)

    async def adecide(self, state: Any, questions: Questions) -> Decision:
        import anyio

        # A worker thread: a forward pass would otherwise stall every task on the event loop.
        return await anyio.to_thread.run_sync(self.decide, state, questions)

    def _decision(self, raw: Any, asked: Mapping[str, AskedQuestion], infer_ms: float) -> Decision:
        try:
            # What a server would have sent: JSON numbers and string keys, nothing else.
            body = json.loads(json.dumps(raw, ensure_ascii=False, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise LayaCallError(f"laya's answer has no JSON form ({exc})", code="bad_answer") from None
        if not isinstance(body, dict):
            raise LayaCallError(f"laya's answer must be an object, got {type(body).__name__}", code="bad_answer")
        answers = parse_answers(body.get("answers"), asked)
        usage = parse_usage(body.get("usage"))
        if usage.truncated and not self.allow_truncation:
            raise LayaConfigError(
                "laya cut the input to fit its token window: shorten the state or questions,"
                " or pass allow_truncation=True", code="token_window_full")
        provenance = Provenance(url=f"{IN_PROCESS_URL_SCHEME}:{self._identity.checkpoint}", request_id=None,
                                served_by=self._identity, server_timing={"infer": round(infer_ms, 3)})
        return Decision(answers=answers, usage=usage, model=self._identity.model, provenance=provenance)

    # -- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        """Release the agent (unloading it if this model loaded it); calling it twice is safe."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            agent, self._agent = self._agent, None
        if agent is not None and self._owns_agent and hasattr(agent, "__exit__"):
            try:
                agent.__exit__(None, None, None)  # laya's Agent drops its weights here
            except Exception:  # noqa: BLE001 - closing must never fail a teardown
                pass

    def __enter__(self) -> LayaModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = ", closed" if self._closed else ""
        return f"LayaModel({self.name!r}, {self._identity.model!r}{state})"


def _local_checkpoint_dir(source: str) -> str | None:
    """The absolute directory when `source` names one on disk; None for hub ids and names.

    Something that looks like a path (absolute, or starting with ``.`` or ``~``) but holds no
    checkpoint is refused here, before laya would hand it to the model hub.
    """
    expanded = os.path.expanduser(source)
    looks_like_path = os.path.isabs(expanded) or source.startswith((".", "~"))
    if os.path.isdir(expanded):
        if not os.path.isfile(os.path.join(expanded, "rl_agent_config.json")):
            raise LayaConfigError(f"{source} is not a Laya checkpoint directory (it has no rl_agent_config.json)",
                                  code="bad_checkpoint")
        return os.path.abspath(expanded)
    if looks_like_path:
        raise LayaConfigError(f"no checkpoint directory at {source}: pass an existing directory, a hub id or a laya name",
                              code="bad_checkpoint")
    return None


def _load_agent(source: str, device: str | None, load_options: Mapping[str, Any]) -> Any:
    try:
        import laya
    except ImportError as exc:
        raise LayaConfigError(f"LayaModel runs laya in this process and needs the reference extra: "
                              f"{_REFERENCE_EXTRA} ({exc})", code="missing_extra") from None
    try:
        return laya.load(source, device=device, **load_options)
    except Exception as exc:  # noqa: BLE001 - laya raises many kinds; all mean "cannot load"
        raise LayaConfigError(f"laya could not load {source!r} ({type(exc).__name__}: {exc})",
                              code="bad_checkpoint") from exc


def _in_process_identity(source: str, local_dir: str | None, agent: Any) -> ServedIdentity:
    if local_dir is not None:
        # The reference server's own digest, so the same weights get the same identity there.
        from pytest_laya.wire.identity import local_checkpoint_revision

        checkpoint = os.path.basename(local_dir.rstrip(os.sep)) or local_dir
        revision: str | None = local_checkpoint_revision(local_dir)
    else:
        checkpoint = source
        revision = getattr(agent, "revision", None)
        revision = revision if isinstance(revision, str) and revision else None
    device = getattr(agent, "device", None)
    try:
        weights_dtype: str | None = str(next(agent.model.parameters()).dtype).replace("torch.", "")
    except (AttributeError, StopIteration, TypeError):
        weights_dtype = None
    backend = getattr(agent, "backend", None)
    return ServedIdentity(checkpoint=checkpoint, revision=revision, device=str(device) if device is not None else None,
                          weights_dtype=weights_dtype, compiled=backend == "compile" if isinstance(backend, str) else None,
                          source="in_process")


def _wire_request(state: Any, asked: Mapping[str, AskedQuestion]) -> tuple[Any, dict[str, Any]]:
    """State and questions as JSON would carry them to a server (dicts, lists, string keys)."""
    try:
        text = json.dumps({"state": state, "questions": {q.id: dict(q.wire) for q in asked.values()}},
                          ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise LayaConfigError(f"the state and questions must be JSON-serializable: {exc}", code="bad_setting") from None
    wire = json.loads(text)
    return wire["state"], wire["questions"]

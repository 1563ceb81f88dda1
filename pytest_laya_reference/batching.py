"""Micro-batching of decisions, with inference off the event loop.

``MicroBatcher.submit`` queues one request per caller; one dispatcher task collects, per model,
what arrives within ``window_ms`` of the first (``busy_window_ms`` while another batch runs; or
while the passes are busy) and runs it as one ``Engine.predict`` call on a worker thread, at
most ``passes`` batches at once. A batch takes at
most ``max_batch`` requests and no more than ``ceil(waiting / free passes)``, so every pass has
work under load.

Outcomes are per caller: a batch that raises ``ValueError`` (laya rejected a question) is re-run
one request at a time (those results report ``batch_size=1``), so only the offending callers get
the error; any other exception is every caller's. A cancelled caller is dropped, or its result
discarded. The queues hold only callers still waiting; admission control is the app's job.

No heavy imports (``pytest_laya_reference.engine`` for types only).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from .engine import DecisionRequest, DecisionResult, Engine

__all__ = ["BatcherClosed", "MicroBatcher", "Timed"]


class BatcherClosed(RuntimeError):
    """``submit`` after ``aclose``."""


@dataclass(frozen=True)
class Timed:
    result: DecisionResult
    queue_ms: float   # from submit() until its batch started running
    infer_ms: float   # the batch's forward-pass wall time
    batch_size: int


@dataclass(eq=False)
class _Pending:
    model: str
    request: DecisionRequest
    future: asyncio.Future[Timed]
    submitted: float = field(default_factory=time.perf_counter)


class MicroBatcher:
    def __init__(self, engine: Engine, *, max_batch: int = 16, window_ms: float = 2.0, passes: int = 1,
                 busy_window_ms: float = 0.0) -> None:
        """``window_ms``: how long the first request waits for company when no batch runs;
        ``busy_window_ms``: the same while another batch runs (the larger of the two applies)."""
        if int(max_batch) < 1:
            raise ValueError("max_batch must be at least 1")
        if window_ms < 0 or busy_window_ms < 0:
            raise ValueError("window_ms and busy_window_ms must not be negative")
        if int(passes) < 1:
            raise ValueError("passes must be at least 1")
        self._engine = engine
        self._max_batch = int(max_batch)
        self._window = float(window_ms) / 1000.0
        self._busy_window = max(self._window, float(busy_window_ms) / 1000.0)
        self._passes = int(passes)
        self._executor = ThreadPoolExecutor(max_workers=self._passes, thread_name_prefix="laya-batch")
        self._queues: dict[str, deque[_Pending]] = {}
        self._changed: asyncio.Event | None = None
        self._dispatcher: asyncio.Task[None] | None = None
        self._stopped: concurrent.futures.Future[None] | None = None  # the dispatcher's end
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = False
        self._closed: concurrent.futures.Future[None] | None = None
        self.batches = 0   # engine.predict calls made for batches (re-runs not counted)
        self._submits = 0  # submit() calls so far
        # The last batch was one request and none arrived while it ran: one client at a time.
        self._lone_before = False

    @property
    def max_batch(self) -> int:
        return self._max_batch

    @property
    def passes(self) -> int:
        return self._passes

    @property
    def window_ms(self) -> float:
        return self._window * 1000.0

    @property
    def waiting(self) -> int:
        """Callers queued and not yet in a running batch."""
        return sum(len(q) for q in self._queues.values())

    # --------------------------------------------------------------------- public

    async def submit(self, model: str, request: DecisionRequest) -> Timed:
        if self._closing:
            raise BatcherClosed("the batcher is closed")
        loop = self._bind()
        self._submits += 1
        pending = _Pending(model, request, loop.create_future())
        self._queues.setdefault(model, deque()).append(pending)
        self._ensure_dispatcher()
        assert self._changed is not None
        self._changed.set()
        try:
            # Not shielded: cancelling the caller cancels its future, which the dispatcher skips.
            return await pending.future
        except asyncio.CancelledError:
            self._forget(pending)
            raise

    async def aclose(self) -> None:
        """Stop accepting, let every submitted request finish, then stop the worker thread.

        Idempotent; a second caller waits for the first to finish. It may be awaited on another
        event loop than the one the batcher served on (that loop must still be running for the
        queued work to finish; a stopped one's leftovers are abandoned).
        """
        self._closing = True
        if self._closed is not None:
            await asyncio.wrap_future(self._closed)
            return
        self._closed = concurrent.futures.Future()
        try:
            if self._dispatcher is not None and not self._dispatcher.done():
                owner = self._loop
                if owner is asyncio.get_running_loop():
                    assert self._changed is not None
                    self._changed.set()
                    await asyncio.shield(self._dispatcher)
                elif owner is not None and owner.is_running() and not owner.is_closed():
                    # Wait on a thread-safe future, not a task of the owner's: once the owner's
                    # last caller has its answer, its loop may shut down and cancel its tasks.
                    stopped = self._stopped
                    assert self._changed is not None and stopped is not None
                    try:
                        owner.call_soon_threadsafe(self._changed.set)
                    except RuntimeError:  # closed meanwhile: its leftovers are abandoned
                        pass
                    else:
                        await asyncio.wrap_future(stopped)
        finally:
            await asyncio.to_thread(self._executor.shutdown, True)
            self._closed.set_result(None)

    # --------------------------------------------------------------------- dispatcher

    def _bind(self) -> asyncio.AbstractEventLoop:
        """The running loop, which the batcher serves on from its first submit.

        A batcher serves one loop at a time. Once its loop has stopped (a test's loop, say), the
        next submit rebinds it to the new one, dropping waiters whose loop is gone.
        """
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            if self._loop is not None and self._loop.is_running() and not self._loop.is_closed():
                raise RuntimeError("this MicroBatcher already serves another running event loop")
            for model in list(self._queues):
                live = deque(p for p in self._queues[model] if p.future.get_loop() is loop)
                if live:
                    self._queues[model] = live
                else:
                    del self._queues[model]
            self._loop = loop
            self._changed = None
            self._dispatcher = None
        return loop

    def _ensure_dispatcher(self) -> None:
        if self._dispatcher is None or self._dispatcher.done():
            if self._changed is None:
                self._changed = asyncio.Event()
            self._stopped = concurrent.futures.Future()
            self._dispatcher = asyncio.get_running_loop().create_task(
                self._dispatch(self._stopped), name="laya-microbatcher")

    def _forget(self, pending: _Pending) -> None:
        queue = self._queues.get(pending.model)
        if queue is not None:
            try:
                queue.remove(pending)
            except ValueError:
                pass  # already taken into a batch
            if not queue:
                self._queues.pop(pending.model, None)

    def _oldest(self) -> str | None:
        """The model whose first live waiter has waited longest (dropping cancelled heads)."""
        best: tuple[float, str] | None = None
        for model in list(self._queues):
            queue = self._queues[model]
            while queue and queue[0].future.done():
                queue.popleft()
            if not queue:
                del self._queues[model]
                continue
            if best is None or queue[0].submitted < best[0]:
                best = (queue[0].submitted, model)
        return None if best is None else best[1]

    def _live(self, model: str) -> int:
        queue = self._queues.get(model)
        return 0 if queue is None else sum(1 for p in queue if not p.future.done())

    def _take(self, model: str, free_passes: int) -> list[_Pending]:
        queue = self._queues.get(model)
        share = -(-self._live(model) // max(1, free_passes))  # leave the other free passes their part
        batch: list[_Pending] = []
        while queue and len(batch) < min(self._max_batch, share):
            pending = queue.popleft()
            if not pending.future.done():
                batch.append(pending)
        if queue is not None and not queue:
            self._queues.pop(model, None)
        return batch

    async def _dispatch(self, stopped: concurrent.futures.Future[None]) -> None:
        assert self._changed is not None
        changed = self._changed
        free = asyncio.Semaphore(self._passes)  # one dispatcher per loop, so its passes are its own
        running: set[asyncio.Task[None]] = set()
        try:
            while True:
                model = self._oldest()
                if model is None:
                    if self._closing:
                        break
                    changed.clear()
                    await changed.wait()
                    continue
                # A batch is taken only once a pass is free, so what arrives meanwhile joins it.
                await free.acquire()
                model = self._oldest()
                if model is None:
                    free.release()
                    continue
                # Wait for the window opened by the first waiter, or until the batch is full. While
                # another batch runs, the callers it answered are sending their next requests: a
                # short wait lets them share one batch instead of trickling in one by one (16
                # clients of one 512-token question: 174 against 162 req/s at 3 ms).
                window = self._busy_window if running else self._window
                deadline = self._queues[model][0].submitted + window
                while not self._closing and self._live(model) < self._max_batch:
                    remaining = deadline - time.perf_counter()
                    if remaining <= 0:
                        break
                    changed.clear()
                    try:
                        await asyncio.wait_for(changed.wait(), remaining)
                    except asyncio.TimeoutError:
                        break
                batch = self._take(model, self._passes - len(running))
                if not batch:
                    free.release()
                    continue
                task = asyncio.get_running_loop().create_task(self._pass(model, batch, free))
                running.add(task)
                task.add_done_callback(running.discard)
            if running:  # closing: every submitted request finishes
                await asyncio.gather(*running, return_exceptions=True)
        except asyncio.CancelledError:
            for task in list(running):
                task.cancel()
            raise
        finally:
            stopped.set_result(None)

    async def _pass(self, model: str, batch: list[_Pending], free: asyncio.Semaphore) -> None:
        try:
            await self._run(model, batch)
        except asyncio.CancelledError:
            for pending in batch:
                if not pending.future.done():
                    pending.future.cancel()
            raise
        except BaseException as exc:  # noqa: BLE001 -- never leave a caller hanging
            for pending in batch:
                if not pending.future.done():
                    pending.future.set_exception(exc)
        finally:
            free.release()

    async def _run(self, model: str, batch: list[_Pending]) -> None:
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        self.batches += 1
        requests = [p.request for p in batch]
        submits = self._submits
        try:
            # One client at a time: its request goes straight to the thread its pass runs on, when
            # the engine offers that (``LayaEngine.run_alone``), one hand-over instead of two. Not
            # under load: a lone request between batches holds every core until its rows are
            # read, which cost 16 clients of one 64-token question about a tenth of their req/s.
            lone = len(batch) == 1 and self._lone_before
            run_alone = getattr(self._engine, "run_alone", None) if lone else None
            alone = run_alone(model, functools.partial(_timed_predict, self._engine, model, requests)) \
                if run_alone is not None else None
            if alone is not None:
                results, infer_ms = await asyncio.wrap_future(alone)
            else:
                results, infer_ms = await loop.run_in_executor(
                    self._executor, _timed_predict, self._engine, model, requests)
        except ValueError:
            self._lone_before = False
            if len(batch) == 1:
                raise
            await self._run_singly(model, batch)
            return
        self._lone_before = len(batch) == 1 and self._submits == submits
        if len(results) != len(batch):
            raise RuntimeError("engine returned %d results for %d requests" % (len(results), len(batch)))
        for pending, result in zip(batch, results):
            _resolve(pending, Timed(result, (started - pending.submitted) * 1000.0, infer_ms, len(batch)))

    async def _run_singly(self, model: str, batch: list[_Pending]) -> None:
        """Attribute a batch's ValueError: each member alone, each caller its own outcome."""
        loop = asyncio.get_running_loop()
        for pending in batch:
            if pending.future.done():
                continue  # cancelled while its batch ran
            started = time.perf_counter()
            try:
                results, infer_ms = await loop.run_in_executor(
                    self._executor, _timed_predict, self._engine, model, [pending.request])
                if len(results) != 1:
                    raise RuntimeError("engine returned %d results for 1 request" % len(results))
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # noqa: BLE001 -- this caller's own outcome
                if not pending.future.done():
                    pending.future.set_exception(exc)
                continue
            _resolve(pending, Timed(results[0], (started - pending.submitted) * 1000.0, infer_ms, 1))


def _timed_predict(engine: Engine, model: str,
                   requests: Sequence[DecisionRequest]) -> tuple[list[DecisionResult], float]:
    started = time.perf_counter()
    results = list(engine.predict(model, requests))
    return results, (time.perf_counter() - started) * 1000.0


def _resolve(pending: _Pending, timed: Timed) -> None:
    if not pending.future.done():
        pending.future.set_result(timed)

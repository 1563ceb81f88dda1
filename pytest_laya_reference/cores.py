"""How many forward passes run at once, and on how many torch threads: a budget of cores.

``CorePool`` runs up to ``cores`` passes at once, one torch thread each, and gives a pass more
threads only when it can feed them (``TOKENS_PER_THREAD`` padded tokens a thread) and cores are
free; a pass flagged ``alone`` takes them all. A request alone on an idle server runs instead
on the wide thread holding every core (``CorePool.run_alone``: one hand-over instead of two),
in one pass on every core while other processes leave the machine quiet (``OtherLoad``), else
in the shape ``ShapeChooser`` measured fastest for its size (``CorePool.lone_job``). Every pass
on more than one thread runs on one thread (``laya-wide``), one at a time, and so does the
work around the passes that would start an OpenMP team elsewhere (``CorePool.on_wide``: loading
and warming a checkpoint), so libgomp manages at most ``cores`` threads and keeps spinning
between parallel regions; ``bound_openmp_spinning`` caps that spinning. Why, with the figures:
docs/reference-server.md ("Inference") and docs/benchmarks.md ("Where the time goes", "The
figures behind the engine's constants").

Heavy imports: torch, inside a pass only.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from statistics import median
from typing import TypeVar

__all__ = ["CorePool", "LoneJob", "OtherLoad", "QUIET_OTHER_CORES", "Shape", "ShapeChooser", "TOKENS_PER_THREAD", "auto_cores",
           "bound_openmp_spinning"]

T = TypeVar("T")
R = TypeVar("R")

#: Padded tokens of a pass per torch thread it may get: a row at laya's default window (512) runs
#: on one thread, a pass of 2,048 padded tokens may get two. On a shared machine a lone 512-token
#: row took 10.8 ms on one thread and 17 to 29 ms on two, whose OpenMP worker slept and woke
#: about 105 times a pass; quiet, 8.4 against 10.8 (docs/benchmarks.md, "The figures behind the
#: engine's constants").
TOKENS_PER_THREAD = 1024

#: Spins an idle OpenMP thread makes before it sleeps (libgomp's default is 300,000), about 0.2 ms:
#: enough to bridge the Python between a pass's parallel regions (a two-thread 512-token row 9.5
#: ms against 11.2 at 1,000 spins, with the machine to itself), little to burn once a pass ends.
#: Under load a two-thread pass is slower for it (91 against 33 ms), which is why a lone request's
#: shape is measured, not fixed (docs/benchmarks.md, "The figures behind the engine's constants").
SPINCOUNT = "10000"

#: Fewest tokens a thread of a lone request's wide pass gets: below that a second thread only
#: waits at barriers. Four 80-token rows (320 tokens) ran faster on two threads than on one in
#: laya's own predict (docs/benchmarks.md, the c=1 floor at 64 tokens and 4 questions); one
#: 80-token row did not.
MIN_TOKENS_PER_THREAD = 128

#: Other processes' CPU, in cores, below which the machine counts as quiet and a lone request
#: runs on every core in one pass without measuring (``OtherLoad``). A client sending one request
#: at a time uses a few hundredths of a core; another busy process at least a few tenths.
QUIET_OTHER_CORES = 0.5


@dataclass(frozen=True)
class Shape:
    """How a lone request's passes run: ``lanes`` passes side by side, ``threads`` torch threads each."""

    lanes: int
    threads: int


@dataclass
class _Times:
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=3))
    last: int = -1  # the choice count when it was last measured


class ShapeChooser:
    """Per key (a size of lone request), the shape whose recent times are lowest.

    A shape never measured for a key is tried first (in the order given); after that, every
    ``explore_every``-th choice of a key tries the shape measured longest ago, so a change of
    load is noticed (only every ``4 * explore_every``-th while that shape's cost is over twice
    the best's: a look costs little then); otherwise the lowest median of each shape's last 3
    costs wins (one interrupted pass does not flip the choice). Deterministic: the caller
    measures and ``record``s the cost. Thread-safe.
    """

    def __init__(self, explore_every: int = 16) -> None:
        if explore_every < 2:
            raise ValueError("explore_every must be at least 2")
        self.explore_every = explore_every
        self._lock = threading.Lock()
        self._times: dict[Hashable, dict[Shape, _Times]] = {}
        self._count: dict[Hashable, int] = {}

    def choose(self, key: Hashable, shapes: Sequence[Shape]) -> Shape:
        if not shapes:
            raise ValueError("no shape to choose from")
        with self._lock:
            n = self._count.get(key, 0)
            self._count[key] = n + 1
            times = self._times.setdefault(key, {})
            for shape in shapes:
                if shape not in times or not times[shape].recent:
                    return shape
            best = min(shapes, key=lambda s: median(times[s].recent))
            if n % self.explore_every == 0:
                stalest = min(shapes, key=lambda s: times[s].last)
                far_off = median(times[stalest].recent) > 2 * median(times[best].recent)
                if not far_off or n % (4 * self.explore_every) == 0:
                    return stalest
            return best

    def record(self, key: Hashable, shape: Shape, cost: float) -> None:
        with self._lock:
            times = self._times.setdefault(key, {}).setdefault(shape, _Times())
            times.recent.append(cost)
            times.last = self._count.get(key, 0)

    def estimate(self, key: Hashable, shape: Shape) -> float | None:
        """The median of ``shape``'s recent costs for ``key``, None if never measured."""
        with self._lock:
            times = self._times.get(key, {}).get(shape)
            return median(times.recent) if times and times.recent else None


class OtherLoad:
    """Other processes' CPU, in cores, over the last ``window`` seconds or more: the machine's busy
    time from ``/proc/stat`` less this process's own CPU time. None where ``/proc/stat`` cannot
    be read (not Linux). Read lazily, at most once a ``window``; thread-safe.

    Why a lone request asks this rather than only timing its shapes: the shapes' times are taken
    one pass in sixteen, after other shapes, and a two-thread pass measured cold (its OpenMP
    worker asleep, its CPU halted) looks slower than it runs warm; on a quiet machine one pass
    on every core is laya's own fastest setup in every cell measured (docs/benchmarks.md).
    """

    def __init__(self, window: float = 0.1, clock: Callable[[], float] = time.monotonic,
                 own_cpu: Callable[[], float] = time.process_time, stat_path: str = "/proc/stat") -> None:
        self.window = window
        self.clock = clock
        self.own_cpu = own_cpu
        self.stat_path = stat_path
        self._lock = threading.Lock()
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._last: float | None = None
        self._sample = self._read()

    def cores(self) -> float | None:
        now = self.clock()
        with self._lock:
            if self._sample is not None and now - self._sample[0] >= self.window:
                sample = self._read()
                if sample is not None:
                    then_t, then_busy, then_own = self._sample
                    t, busy, own = sample
                    other = (busy - then_busy) / self._tick - (own - then_own)
                    self._last = max(0.0, other / max(t - then_t, 1e-9))
                    self._sample = sample
            return self._last

    def _read(self) -> tuple[float, int, float] | None:
        try:
            with open(self.stat_path, "rb") as stat:
                fields = stat.readline().split()
        except OSError:
            return None
        if len(fields) < 5 or fields[0] != b"cpu":
            return None
        ticks = [int(f) for f in fields[1:9]]
        # user nice system idle iowait irq softirq steal: all but idle and iowait are busy (steal
        # too: a host's other guests take the cores as surely as a process here).
        busy = sum(ticks) - ticks[3] - (ticks[4] if len(ticks) > 4 else 0)
        return self.clock(), busy, self.own_cpu()


def bound_openmp_spinning() -> None:
    """Cap OpenMP's spin-waiting, unless the operator set ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT``.

    libgomp reads the variable once, when torch loads it: call this before importing torch.
    """
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = SPINCOUNT


def auto_cores() -> int | None:
    """The cores the forward passes share when none were asked for; None leaves torch alone.

    ``LAYA_THREADS`` (laya-serve's knob) if set to a positive whole number; None when
    ``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS`` is set (the operator decided; torch honours them);
    otherwise every core this process may run on.
    """
    raw = os.environ.get("LAYA_THREADS", "").strip()
    if raw:
        try:
            n = int(raw)
        except ValueError:
            n = 0
        if n > 0:
            return n
    if os.environ.get("OMP_NUM_THREADS") or os.environ.get("MKL_NUM_THREADS"):
        return None
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


class CorePool:
    """Runs forward passes on the caller's thread and up to ``cores`` workers, sharing ``cores``
    torch threads.

    ``cores=None`` runs up to ``workers`` passes at once and never touches torch's thread count
    (threads=0, or ``OMP_NUM_THREADS`` set).
    """

    def __init__(self, cores: int | None, workers: int | None = None,
                 chooser: ShapeChooser | None = None, clock: Callable[[], float] = time.perf_counter,
                 load: OtherLoad | None = None) -> None:
        if cores is not None and cores < 1:
            raise ValueError("cores must be at least 1")
        self.cores = cores
        self.chooser = chooser or ShapeChooser()
        self.load = load if load is not None else OtherLoad()
        self.clock = clock
        size = cores if cores is not None else max(1, workers or 1)
        self.workers = size
        self._executor = ThreadPoolExecutor(max_workers=size, thread_name_prefix="laya-forward")
        # The one thread that runs passes on more than one thread (see the module doc).
        self._wide = ThreadPoolExecutor(max_workers=1, thread_name_prefix="laya-wide")
        self._wide_busy = False
        # The side-by-side passes of a request that holds every core (``run_alone``): never queued
        # behind a pass that waits for those cores on an ``_executor`` thread.
        self._lanes = ThreadPoolExecutor(max_workers=max(1, size - 1), thread_name_prefix="laya-lane")
        self._cond = threading.Condition()
        self._free = cores or 0
        self._pending = 0        # passes submitted and not started
        self._running = 0
        self._waiting_alone = 0  # passes waiting to run by themselves; others queue behind them
        self._local = threading.local()
        self.widest = 0          # the most threads one pass was given (for tests and diagnostics)
        self.warmed: set[tuple[Hashable, Shape]] = set()  # (size of lone request, shape) run once

    @property
    def idle(self) -> bool:
        """Nothing running, nothing waiting to run, every core free."""
        with self._cond:
            return self._pending == 0 and self._running == 0 and self._free == (self.cores or 0)

    def run(self, fn: Callable[[T], R], items: Sequence[T], tokens: Sequence[int] = (),
            alone: Sequence[bool] = (), shape: Shape | None = None) -> list[R]:
        """``[fn(item) for item in items]``, each on a worker with its share of the cores; in order.

        ``tokens``: each pass's padded tokens (what decides whether it may use more than one
        thread; none given: one thread each). An item whose ``alone`` flag is true runs by itself
        on every core. ``shape`` overrides both: ``shape.threads`` threads a pass, one pass at a
        time on the calling thread when ``shape.lanes`` is 1. The first exception raised by any
        ``fn`` is raised here once all have finished.
        """
        sizes = list(tokens) + [0] * (len(items) - len(tokens))
        flags = list(alone) + [False] * (len(items) - len(alone))
        if not items:
            return []
        want = None if shape is None or self.cores is None else min(shape.threads, self.cores)
        if getattr(self._local, "held", 0):
            return self._run_held(fn, items, shape, want)
        if shape is not None and shape.lanes == 1:
            out = []
            for item in items:
                with self._cond:
                    self._pending += 1
                out.append(self._one(fn, item, 0, False, want))
            return out
        with self._cond:
            self._pending += len(items)
        # The first pass runs on the calling thread: a request alone costs no hand-over.
        futures = [self._executor.submit(self._one, fn, item, size, flag, want)
                   for item, size, flag in zip(items[1:], sizes[1:], flags[1:])]
        try:
            first = self._one(fn, items[0], sizes[0], flags[0], want)
        finally:
            wait(futures)  # none still runs when the caller moves on, whatever failed
        return [first, *(f.result() for f in futures)]

    @property
    def holding(self) -> bool:
        """Whether the calling thread holds cores through ``run_alone``."""
        return bool(getattr(self._local, "held", 0))

    def run_alone(self, fn: Callable[[], R]) -> concurrent.futures.Future[R] | None:
        """``fn()`` on the wide thread holding every core, if nothing runs or waits now; else None.

        ``run`` calls inside ``fn`` take no cores: one pass at a time on the wide thread, the side
        by side passes of a ``shape`` with lanes on ``laya-lane`` threads; the cores a ``shape``
        leaves unused are given back for other passes. The cores are taken here, before the
        hand-over, so a pass that comes meanwhile waits for them holding none, never for the wide
        thread while holding what ``fn`` needs.
        """
        with self._cond:
            if not self.cores or self._pending or self._running or self._waiting_alone or self._wide_busy \
                    or self._free != self.cores:
                return None
            self._free, self._running, self._wide_busy = 0, 1, True

        def held() -> R:
            self._local.held = self.cores
            try:
                return fn()
            finally:
                self._release_held(self._local.held)
                self._local.held = 0

        try:
            return self._wide.submit(held)
        except BaseException:  # closed: nothing runs, and the cores are free again
            self._release_held(self.cores)
            raise

    def on_wide(self, fn: Callable[[], R]) -> R:
        """``fn()`` on the wide thread holding every core, torch set to use them all; waits until
        nothing runs. For work outside the passes (loading a checkpoint, warming it, checking it)
        that would otherwise start an OpenMP team of more than one thread on the caller's thread:
        libgomp counts every team's threads, and once they outnumber the cores every team's
        threads sleep between parallel regions instead of spinning (a lone 4-row pass on the wide
        thread took 14.1 ms after the loading thread had run a two-thread predict, against 8.6
        without; docs/benchmarks.md, "Where the time goes"). Without more than one core to share,
        on the calling thread.
        """
        if not self.cores or self.cores == 1:
            return fn()

        def wide() -> R:
            self._use_threads(self.cores)
            return fn()

        while True:
            future = self.run_alone(wide)
            if future is not None:
                return future.result()
            with self._cond:
                self._cond.wait(0.05)

    def lone_job(self, key: Hashable) -> LoneJob:
        """A request alone on an idle server: its shape chosen by ``chooser`` (see ``LoneJob``)."""
        return LoneJob(self, key)

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self._wide.shutdown(wait=True)
        self._lanes.shutdown(wait=True)

    def _run_held(self, fn: Callable[[T], R], items: Sequence[T], shape: Shape | None, want: int | None) -> list[R]:
        """``run`` inside ``run_alone``: the cores are this caller's already."""
        held = int(self._local.held)
        needs = shape.lanes * (want or 1) if shape is not None else held
        if needs < held:
            # Other passes may use what this shape leaves; they wait for the wide thread no more
            # than before (``_wide_busy`` stays set), so nothing waits on what it holds.
            with self._cond:
                self._free += held - needs
                self._cond.notify_all()
            held = self._local.held = needs
        if shape is not None and shape.lanes > 1:
            rest = [self._lanes.submit(self._on_threads, fn, item, 1) for item in items[1:]]
            try:
                first = self._on_threads(fn, items[0], 1)
            finally:
                wait(rest)
            return [first, *(f.result() for f in rest)]
        threads = min(want or held, held)
        self.widest = max(self.widest, threads)
        return [self._on_threads(fn, item, threads) for item in items]

    def _release_held(self, held: int) -> None:
        with self._cond:
            self._free += held
            self._running -= 1
            self._wide_busy = False
            self._cond.notify_all()

    def _one(self, fn: Callable[[T], R], item: T, tokens: int, alone: bool, want: int | None = None) -> R:
        threads = self._take(tokens, alone, want)
        try:
            if threads is not None and threads > 1:
                return self._wide.submit(self._on_threads, fn, item, threads).result()
            return self._on_threads(fn, item, threads)
        finally:
            self._give(threads)

    def _on_threads(self, fn: Callable[[T], R], item: T, threads: int | None) -> R:
        self._use_threads(threads)
        return fn(item)

    def _use_threads(self, threads: int | None) -> None:
        """torch on ``threads`` threads on this thread (None: as it is)."""
        if threads is not None and getattr(self._local, "threads", None) != threads:
            import torch

            torch.set_num_threads(threads)  # this thread's own OpenMP team (see the module doc)
            self._local.threads = threads

    def _take(self, tokens: int, alone: bool, want: int | None = None) -> int | None:
        with self._cond:
            if want is not None:
                # A chosen shape: wait for its threads (the only wide pass at a time).
                while self._waiting_alone or self._free < want or (want > 1 and self._wide_busy):
                    self._cond.wait()
                self._pending -= 1
                self._running += 1
                self._free -= want
                self._wide_busy = self._wide_busy or want > 1
                self.widest = max(self.widest, want)
                return want
            if alone:
                self._waiting_alone += 1
                try:
                    while self._running or (self.cores is not None and self._free < self.cores):
                        self._cond.wait()
                finally:
                    self._waiting_alone -= 1
            else:
                while self._waiting_alone or (self.cores is not None and self._free == 0):
                    self._cond.wait()
            # The share: every core alone, else the free ones divided among this pass and those
            # still waiting to start, and no more than the pass can feed.
            # An alone pass waits for every core, so no multi-thread pass runs meanwhile.
            feedable = 1 if self._wide_busy else max(1, tokens // TOKENS_PER_THREAD)
            share = self._free if alone else max(1, min(self._free // self._pending, feedable))
            self._pending -= 1
            self._running += 1
            if self.cores is None:
                return None
            self._free -= share
            self._wide_busy = self._wide_busy or share > 1
            self.widest = max(self.widest, share)
            return share

    def _give(self, threads: int | None) -> None:
        with self._cond:
            self._running -= 1
            if threads is not None:
                self._free += threads
                if threads > 1:
                    self._wide_busy = False
            self._cond.notify_all()


class LoneJob:
    """One lone request's passes on a ``CorePool``, in the shape its ``ShapeChooser`` picks.

    ``lanes(lengths)`` (the rows' token lengths) chooses the shape and says how many passes to
    plan at least; ``run`` (``CorePool.run``'s signature) runs them in that shape and records
    the wall time per 1,000 tokens under the key (the caller's, with the rows' size bucket).
    A shape's first run at a size is a warm-up, not recorded: the first two-thread pass ever
    starts the OpenMP team (28 ms against 7 to 9 for a 512-token row), and a cold figure kept
    among the last three made the faster shape look over twice as slow, looked at again only
    every 64th request.
    """

    def __init__(self, pool: CorePool, key: Hashable) -> None:
        self.pool = pool
        self.key = key
        self.shape: Shape | None = None
        self._bucket: Hashable = None
        self._tokens = 0
        self._measured = True

    def shapes(self, lengths: Sequence[int]) -> list[Shape]:
        """The shapes worth trying: one thread; every core in one pass, when the rows can feed
        each thread ``MIN_TOKENS_PER_THREAD`` tokens; the rows side by side, one thread each."""
        cores = self.pool.cores or 1
        total = sum(lengths)
        out = [Shape(1, 1)]
        wide = min(cores, total // MIN_TOKENS_PER_THREAD)
        if wide > 1:
            out.append(Shape(1, wide))
        lanes = min(cores, len(lengths))
        if lanes > 1:
            out.insert(0, Shape(lanes, 1))  # the rule before measurements: rows side by side
        return out

    def lanes(self, lengths: Sequence[int]) -> int:
        self._tokens = sum(lengths)
        self._bucket = (self.key, len(lengths) > 1, self._tokens.bit_length())
        shapes = self.shapes(lengths)
        wide = [s for s in shapes if s.lanes == 1 and s.threads > 1]
        other = self.pool.load.cores() if wide else None  # no wide shape: no /proc/stat to read
        if wide and other is not None and other < QUIET_OTHER_CORES:
            self.shape, self._measured = wide[0], False  # quiet: every core in one pass (``OtherLoad``)
        else:
            self.shape, self._measured = self.pool.chooser.choose(self._bucket, shapes), True
        return self.shape.lanes

    def run(self, fn: Callable[[T], R], items: Sequence[T], tokens: Sequence[int] = (),
            alone: Sequence[bool] = ()) -> list[R]:
        if self.shape is None or not items or any(alone):  # not planned by lanes(), nothing, an over-long row
            return self.pool.run(fn, items, tokens, alone)
        started = self.pool.clock()
        out = self.pool.run(fn, items, tokens, alone, shape=self.shape)
        elapsed_ms = (self.pool.clock() - started) * 1000.0
        if not self._measured:
            return out
        if (self._bucket, self.shape) not in self.pool.warmed:
            self.pool.warmed.add((self._bucket, self.shape))  # the chooser offers it again, unmeasured
            return out
        self.pool.chooser.record(self._bucket, self.shape, elapsed_ms * 1000.0 / max(1, self._tokens))
        return out

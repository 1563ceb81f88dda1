#!/usr/bin/env python
"""Where the reference server's time goes, on the embedded tiny checkpoint: three probes.

``server``: starts the reference server (``python -m pytest_laya_reference``, as
bench/bench_reference_server.py does), drives one cell of that benchmark's grid with closed-loop
clients, and samples every thread of the server with py-spy (``pip install py-spy``) for the
measured seconds. The samples are sorted into what the time went to: the forward pass, laya's
tokenisation (``Agent._encode_state``), collation (padding), answer decoding, laya's
bookkeeping, and, on the event loop, HTTP, JSON and the app; samples of a thread waiting
(``epoll``, an idle worker) are counted apart. Also printed: requests/s, p50 and the server's CPU
milliseconds per request.

``rows``: in process, one torch thread, the model's forward pass alone on synthetic rows
(no padding) for several rows-per-pass x tokens-per-row shapes: CPU milliseconds per row.

``threads``: in process, ``laya.load(dir).predict`` on the benchmark's states for 1, 4 and 12
questions with 1 and 2 torch intra-op threads, interleaved: wall and CPU per call, and the CPU
that other processes used meanwhile (a torch process whose threads fill every core slows down
many times when another process takes a core; set ``OMP_WAIT_POLICY``/``GOMP_SPINCOUNT`` in the
environment to see what OpenMP's waiting changes).

    .venv/bin/python bench/profile_reference_server.py server --tokens 512 --questions 4 --concurrency 1
    .venv/bin/python bench/profile_reference_server.py server --tokens 512 --questions 4 --concurrency 16 --mixed
    .venv/bin/python bench/profile_reference_server.py rows
    .venv/bin/python bench/profile_reference_server.py threads --tokens 512
    .venv/bin/python bench/profile_reference_server.py openmp --tokens 512
    .venv/bin/python bench/profile_reference_server.py overhead --sizes 64,512,2048 --questions 1,4,12
    .venv/bin/python bench/profile_reference_server.py engine --tokens 512
    .venv/bin/python bench/profile_reference_server.py packing
    .venv/bin/python bench/profile_reference_server.py lean --sizes 64,512,2048 --questions 1,4 --rows 1,4,16
    .venv/bin/python bench/profile_reference_server.py spin --counts 1000,3000,10000,30000
    .venv/bin/python bench/profile_reference_server.py http --sizes 64,2048 --questions 1,4,12
    .venv/bin/python bench/profile_reference_server.py variants --env GOMP_SPINCOUNT=300000 --c16-seconds 3 --no-halt

``packing``: in process, one torch thread, CPU milliseconds per request of the engine's packed
passes against laya's own ``Router.predict_batch`` (one pass per question set) on the same
batches of 8 and 16 requests, one question set or 8.

``lean``: in process, one torch thread, CPU milliseconds per pass of laya's ``Agent._forward``
against the engine's lean forward (``pytest_laya_reference.packed_forward``) on the same
collated rows of the benchmark's states, taking turns, and whether both give the same bits.

``spin``: laya's in-process predict (bench_reference_server.py's floor worker) in one process
per ``GOMP_SPINCOUNT``, taking turns slice by slice: p50 per spin count of a lone row on two
threads (512 and 2,048 tokens), four rows in one pass on two threads, and a row on one thread
(which spinning does not touch). Run it under ``chrt -f 10`` (root) to see a machine to itself.

``http``: the server's way around inference: a server process set up as the reference server
(its app, heap and OpenMP settings, the real engine loaded) whose engine answers each body from
the real engine's first answer to it, so a request costs HTTP, parsing, validation, the two
thread hand-offs and the response, and no forward pass: one client's p50 per cell.

``openmp``: in process, voluntary context switches per ``predict`` of one row on two torch
threads with one OpenMP team in the process, then once a second living thread has run a
two-thread pass: libgomp then throttles every team's spinning (``GOMP_SPINCOUNT`` or not) and
the second thread sleeps and wakes once per parallel region.

``overhead``: the reference server against its floor, taking turns request by request (so both
meet the same load): one request to the server, then laya's in-process ``predict`` of the same
body in this process, set up as the server is and on the threads the server gives it; p50 of
each (the floor on one thread and on every core, the faster), the difference, and the server's
queue, engine and the rest from ``Server-Timing``.

``variants``: reference servers with other environments (``--env NAME=VALUE``, one more server
each) beside the default one and laya-serve, taking turns round by round: c=1 p50 per cell, the
reference's time around its own queue and pass, with ``--c16-seconds`` 16 clients' req/s, and
each server's peak RSS at the end; ``--no-halt`` measures it all again while holding ``/dev/cpu_dma_latency`` at 0 (root), so idle
CPUs poll instead of halting.

``engine``: in process, no HTTP, the forward-pass side of the benchmark's cells: laya-serve's way
(``laya.load(dir).predict``, one request at a time, torch's default threads) against the
reference server's engine (``LayaEngine.predict``, packed passes on its core budget): at c=1,
wall p50 per request; under load, CPU milliseconds per request and requests/s, laya one request
after another, the engine with ``--passes`` threads each calling it with batches of 8 (mixed
question sets with ``--mixed``). Run it with nothing else on the machine (or under ``chrt -f``,
briefly, on a shared one) to see what a quiet machine does.

A script run by hand, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import functools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_reference_server as bench  # noqa: E402

CHECKPOINT = str(bench.ROOT / "pytest_laya_reference" / "checkpoints" / "tiny")

#: (category, substrings of a sampled stack), first match wins; inference threads only.
INFERENCE = [
    ("forward pass (torch)", ("Agent._forward", "Agent._infer", "run_forward", "PackedForward")),
    ("tokenisation (laya _encode_state)", ("Agent._encode_state",)),
    ("collation (padding rows to one tensor)", ("collate_items",)),
    ("answer decoding (laya _decode_answers)", ("Agent._decode_answers",)),
    ("waking the event loop", ("call_soon_threadsafe",)),
    ("laya bookkeeping (routing, checks, usage) and the engine", ("",)),
]
#: The same for the event loop's thread.
EVENT_LOOP = [
    ("JSON parse and validation", ("orjson", "json/", "validation", "_parse")),
    ("the app (Starlette, handlers, responses)", ("starlette", "pytest_laya_reference/app.py")),
    ("HTTP (uvicorn, h11, sockets)", ("h11", "uvicorn", "selector_events")),
    ("micro-batcher", ("batching.py",)),
    ("asyncio and the rest", ("",)),
]
IDLE_LEAVES = ("EpollSelector.select", "thread.py:81)", "Condition.wait", "queue.py", "SimpleQueue.get")


def categorise(raw: str) -> tuple[collections.Counter, collections.Counter]:
    """py-spy --format raw lines ('stack count') -> (busy samples per category, idle per thread)."""
    busy: collections.Counter = collections.Counter()
    idle: collections.Counter = collections.Counter()
    for line in raw.splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack:
            continue
        n = int(count)
        thread = stack.split(";", 1)[0].split(": ", 1)[-1]
        if any(leaf in stack.rsplit(";", 1)[-1] for leaf in IDLE_LEAVES):
            idle[thread.rstrip("_0123456789")] += n
            continue
        if "MainThread" in thread:
            rules, prefix = EVENT_LOOP, "event loop: "
        elif thread.startswith("laya-"):
            rules, prefix = INFERENCE, "inference: "
        else:
            busy["other thread: " + thread.rstrip("_0123456789")] += n
            continue
        for name, needles in rules:
            if any(needle in stack for needle in needles):
                busy[prefix + name] += n
                break
    return busy, idle


def server(args: argparse.Namespace) -> int:
    spy = Path(sys.executable).with_name("py-spy")
    if not spy.exists():
        print("py-spy is not installed: .venv/bin/pip install py-spy", file=sys.stderr)
        return 2
    states = bench.sized_states(args.tokens, bench.TokenCounter(CHECKPOINT))
    bodies = bench.request_bodies(states, args.questions, 8 if args.mixed else 1)
    inflight = max(65536, args.concurrency * args.questions * bench.WINDOW_TOKENS)
    ref_args = ["--max-concurrent", "32", "--max-inflight-tokens", str(inflight), *args.ref_arg]
    with bench.ReferenceProcess(ref_args, None, None) as ref, tempfile.TemporaryDirectory() as tmp:
        asyncio.run(bench._closed_loop(ref.url, bodies, args.concurrency, 1.0, 2.0, ref.pid, ()))  # warm
        out = os.path.join(tmp, "stacks.txt")
        recorder = subprocess.Popen([str(spy), "record", "-p", str(ref.pid), "-d", str(int(args.seconds)),
                                     "-r", "200", "--threads", "--nonblocking", "--format", "raw", "-o", out],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        sl = asyncio.run(bench._closed_loop(ref.url, bodies, args.concurrency, 0.3, args.seconds, ref.pid, ()))
        recorder.wait()
        raw = Path(out).read_text()
    lat = sorted(sl.latencies_ms)
    mixed = " mixed" if args.mixed else ""
    print(f"{args.tokens} tokens, {args.questions} questions, c={args.concurrency}{mixed}: "
          f"{len(lat) / sl.seconds:.1f} req/s, p50 {bench.percentile(lat, 50):.1f} ms, server CPU "
          f"{sl.server_cpu_s * 1000 / max(1, len(lat)):.1f} ms/request, other processes {sl.foreign_cores:.2f} cores")
    busy, idle = categorise(raw)
    total = sum(busy.values()) or 1
    for name, n in busy.most_common():
        print(f"  {100 * n / total:5.1f}%  {name}")
    print(f"  ({total} busy samples; waiting, not counted: "
          + ", ".join(f"{k} {v}" for k, v in idle.most_common()) + ")")
    return 0


def rows(args: argparse.Namespace) -> int:
    import torch

    torch.set_num_threads(1)
    import laya

    agent = laya.load(CHECKPOINT, device="cpu")
    print("CPU ms per row, one thread, forward pass only (rows per pass x tokens per row)")
    for length in args.lengths:
        cells = []
        for n in args.rows:
            batch = {"input_ids": torch.full((n, length), 5, dtype=torch.long),
                     "attention_mask": torch.ones((n, length), dtype=torch.long),
                     "marker_pos": torch.arange(1, 4).repeat(n, 1),
                     "marker_mask": torch.ones((n, 3), dtype=torch.bool),
                     "qtype": torch.zeros(n, dtype=torch.long)}
            with torch.no_grad():
                agent._forward(batch)
                cpu = []
                for _ in range(max(3, 64 // n)):
                    started = time.thread_time()
                    agent._forward(batch)
                    cpu.append((time.thread_time() - started) * 1000 / n)
            cells.append(f"{n} rows {statistics.median(cpu):6.2f}")
        print(f"  {length:4d} tokens/row: " + " | ".join(cells))
    return 0


def threads(args: argparse.Namespace) -> int:
    import laya
    import torch

    agent = laya.load(CHECKPOINT, device="cpu")
    states = bench.sized_states(args.tokens, bench.TokenCounter(CHECKPOINT))
    seen: dict[tuple[int, int], list[tuple[float, float]]] = {}
    busy0, mine0, wall0 = bench.system_busy_seconds(), time.process_time(), time.monotonic()
    for rep in range(args.repeats):
        for nq in (1, 4, 12):
            questions = bench.question_set(nq)
            for n in (1, 2):
                torch.set_num_threads(n)
                agent.predict(states[rep % 24], questions)
                for k in range(3):
                    cpu0, started = time.process_time(), time.perf_counter()
                    agent.predict(states[(rep + k) % 24], questions)
                    seen.setdefault((nq, n), []).append(((time.perf_counter() - started) * 1000,
                                                         (time.process_time() - cpu0) * 1000))
    foreign = max(0.0, (bench.system_busy_seconds() - busy0) - (time.process_time() - mine0)) / (time.monotonic() - wall0)
    print(f"{args.tokens} tokens; other processes used {foreign:.2f} cores meanwhile; "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '-')} GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT', '-')}")
    for (nq, n), values in sorted(seen.items()):
        print(f"  {nq:2d} questions, {n} thread(s): wall p50 {statistics.median(v[0] for v in values):7.1f} ms "
              f"(best {min(v[0] for v in values):7.1f}), CPU p50 {statistics.median(v[1] for v in values):7.1f} ms")
    return 0


def openmp(args: argparse.Namespace) -> int:
    """Voluntary context switches per two-thread predict (the OpenMP team sleeping and waking):
    with one team in the process, then once another living thread has run a two-thread pass
    (its team stays, and libgomp then manages more threads than cores)."""
    import threading

    import laya
    import torch

    agent = laya.load(CHECKPOINT, device="cpu")
    states = bench.sized_states(args.tokens, bench.TokenCounter(CHECKPOINT))
    questions = bench.question_set(1)

    def sleeps() -> int:
        total = 0
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/status") as fh:
                total += sum(int(line.split()[1]) for line in fh if line.startswith("voluntary_ctxt"))
        return total

    def measure(label: str) -> None:
        torch.set_num_threads(2)
        for state in states[:3]:
            agent.predict(state, questions)
        before, walls = sleeps(), []
        for i in range(args.calls):
            started = time.perf_counter()
            agent.predict(states[i % len(states)], questions)
            walls.append((time.perf_counter() - started) * 1000)
        print(f"  {label}: {(sleeps() - before) / args.calls:6.1f} sleeps a predict, wall p50 "
              f"{statistics.median(walls):6.1f} ms")

    print(f"{args.tokens} tokens, 1 question, 2 torch threads; GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT', '-')}; "
          f"load average {os.getloadavg()[0]:.2f}")
    measure("one OpenMP team")
    ran, done = threading.Event(), threading.Event()

    def other() -> None:
        torch.set_num_threads(2)
        agent.predict(states[0], questions)
        ran.set()
        done.wait()

    threading.Thread(target=other, daemon=True).start()
    ran.wait()
    measure("a second team alive")
    done.set()
    return 0


def overhead(args: argparse.Namespace) -> int:
    """The server against its floor, one request each in turn: a request to the reference server
    (one client, keep-alive), then laya's in-process predict of the same body in this process,
    set up as the server sets itself up and on the threads the server gives that request. Taking
    turns puts both under the same load; Server-Timing splits the server's time into the queue,
    the engine and the rest (HTTP, parsing, thread handoffs)."""
    import json
    import re
    import socket

    from pytest_laya_reference.cores import auto_cores, bound_openmp_spinning
    from pytest_laya_reference.heap import cap_malloc_arenas, keep_freed_heap

    cap_malloc_arenas()
    keep_freed_heap()
    bound_openmp_spinning()
    import laya
    import torch

    agent = laya.load(CHECKPOINT, device="cpu")
    counter = bench.TokenCounter(CHECKPOINT)
    print(f"{args.calls} requests a cell, taking turns; load average {os.getloadavg()[0]:.2f}")
    with bench.ReferenceProcess(["--max-concurrent", "32"], None, None) as ref:
        host = ref.url.split("://", 1)[1]
        name, port = host.rsplit(":", 1)
        sock = socket.create_connection((name, int(port)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def post(body: bytes) -> tuple[float, float]:
            sock.sendall(f"POST /v1/systemone HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            data = b""
            while b"\r\n\r\n" not in data:
                data += sock.recv(65536)
            head, _, rest = data.partition(b"\r\n\r\n")
            length = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))  # type: ignore[union-attr]
            while len(rest) < length:
                rest += sock.recv(65536)
            timing = re.search(rb"(?i)server-timing: queue;dur=([\d.]+), infer;dur=([\d.]+)", head)
            return (float(timing.group(1)), float(timing.group(2))) if timing else (0.0, 0.0)

        for tokens in args.sizes:
            states = bench.sized_states(tokens, counter)
            for nq in args.questions:
                bodies = bench.request_bodies(states, nq, 1)
                decisions = [json.loads(b) for b in bodies]
                choices = bench.floor_threads(auto_cores() or 1)
                server_ms, infer_ms, queue_ms = [], [], []
                floor_ms: dict[int, list[float]] = {t: [] for t in choices}
                for i in range(args.calls + 5):
                    started = time.perf_counter()
                    queue, infer = post(bodies[i % len(bodies)])
                    took = (time.perf_counter() - started) * 1000
                    d = decisions[i % len(decisions)]
                    for threads in (choices if i % 2 else choices[::-1]):  # neither always runs first
                        torch.set_num_threads(threads)
                        started = time.perf_counter()
                        agent.predict(d["state"], d["questions"])
                        if i >= 5:
                            floor_ms[threads].append((time.perf_counter() - started) * 1000)
                    if i >= 5:
                        server_ms.append(took)
                        infer_ms.append(infer)
                        queue_ms.append(queue)
                med = statistics.median
                threads = min(choices, key=lambda t: med(floor_ms[t]))
                floor = med(floor_ms[threads])
                others = ", ".join(f"{t} thread(s) {med(v):.2f}" for t, v in floor_ms.items())
                print(f"  {tokens}t {nq}q: server p50 {med(server_ms):6.2f} ms, floor p50 {floor:6.2f} ms "
                      f"({others}), over the floor {med(server_ms) - floor:+6.2f} ms; "
                      f"server's queue {med(queue_ms):.2f}, engine {med(infer_ms):.2f}, "
                      f"the rest {med(server_ms) - med(infer_ms) - med(queue_ms):.2f} ms; load {os.getloadavg()[0]:.2f}",
                      flush=True)
    return 0


def engine(args: argparse.Namespace) -> int:
    """Each side in its own process and environment, as the servers run: laya with libgomp's
    default spinning, the engine with the command line's cap (``bound_openmp_spinning``)."""
    import json
    import subprocess

    from pytest_laya_reference.cores import bound_openmp_spinning

    sides = {}
    for side in ("laya", "engine"):
        env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
        if side == "engine":
            saved = dict(os.environ)
            os.environ.clear()
            os.environ.update(env)
            bound_openmp_spinning()
            env = dict(os.environ)
            os.environ.clear()
            os.environ.update(saved)
        cmd = [sys.executable, __file__, "_side", side, "--tokens", str(args.tokens), "--questions",
               ",".join(map(str, args.questions)), "--calls", str(args.calls), "--passes", str(args.passes)]
        out = subprocess.run(cmd + (["--mixed"] if args.mixed else []), env=env, capture_output=True, text=True,
                             check=True)
        sides[side] = json.loads(out.stdout.strip().splitlines()[-1])
    lay, ref = sides["laya"], sides["engine"]
    print(f"{args.tokens} tokens{' mixed' if args.mixed else ''}; laya: predict one request at a time, torch's "
          f"default threads; engine: LayaEngine.predict, {args.passes} callers with batches of 8 under load")
    for nq in map(str, args.questions):
        a, b = lay[nq], ref[nq]
        print(f"  {nq:>2} questions: c=1 p50 laya {a['p50']:6.1f} ms, engine {b['p50']:6.1f} ms ({b['p50'] / a['p50']:.2f}x); "
              f"loaded: CPU/request laya {a['cpu']:6.1f} ms, engine {b['cpu']:6.1f} ms ({b['cpu'] / a['cpu']:.2f}x), "
              f"req/s laya {a['rps']:6.1f}, engine {b['rps']:6.1f} ({b['rps'] / a['rps']:.2f}x)")
    return 0


def one_side(args: argparse.Namespace) -> int:
    import json
    import threading

    states = bench.sized_states(args.tokens, bench.TokenCounter(CHECKPOINT))
    out = {}
    if args.side == "laya":
        import laya

        agent = laya.load(CHECKPOINT, device="cpu")

        def c1(state: object, questions: dict) -> None:
            agent.predict(state, questions)
    else:
        from pytest_laya_reference.engine import DecisionRequest, LayaEngine

        eng = LayaEngine({"tiny": CHECKPOINT}, device="cpu", passes=args.passes)
        eng.load()

        def c1(state: object, questions: dict) -> None:
            eng.predict("tiny", [DecisionRequest(state, questions)])
    for nq in args.questions:
        sets = 8 if args.mixed else 1
        qs = [bench.question_set(nq, (i % sets) + 1 if sets > 1 else 0) for i in range(24)]
        for i in range(3):
            c1(states[i], qs[i])
        lat = []
        for i in range(args.calls):
            started = time.perf_counter()
            c1(states[i % 24], qs[i % 24])
            lat.append((time.perf_counter() - started) * 1000)
        n = args.calls * 2
        cpu0, wall0 = time.process_time(), time.perf_counter()
        if args.side == "laya":
            for i in range(n):
                c1(states[i % 24], qs[i % 24])
        else:
            batches = [[DecisionRequest(states[(b * 8 + j) % 24], qs[(b * 8 + j) % 24]) for j in range(8)]
                       for b in range(max(1, n // 8))]
            n = len(batches) * 8
            callers = [threading.Thread(target=lambda mine: [eng.predict("tiny", b) for b in mine],
                                        args=(batches[k::args.passes],)) for k in range(args.passes)]
            for t in callers:
                t.start()
            for t in callers:
                t.join()
        out[str(nq)] = {"p50": statistics.median(lat), "cpu": (time.process_time() - cpu0) * 1000 / n,
                        "rps": n / (time.perf_counter() - wall0)}
    print(json.dumps(out))
    return 0


def packing(args: argparse.Namespace) -> int:
    import torch

    from pytest_laya_reference.engine import DecisionRequest, LayaEngine, _laya_item

    eng = LayaEngine({"tiny": CHECKPOINT}, device="cpu", threads=1)
    eng.load()
    torch.set_num_threads(1)  # laya's path runs on this thread
    count = bench.TokenCounter(CHECKPOINT)
    print("CPU ms per request, one torch thread: packed passes vs laya's Router.predict_batch")
    for tokens in args.sizes:
        states = bench.sized_states(tokens, count)
        for nq in args.questions:
            for sets in (1, 8):
                for n in (8, 16):
                    requests = [DecisionRequest(states[i], bench.question_set(nq, (i % sets) + 1 if sets > 1 else 0))
                                for i in range(n)]
                    items = [_laya_item(r, "tiny") for r in requests]
                    packed, laya_path = [], []
                    for _ in range(args.repeats):
                        cpu0 = time.process_time()
                        eng.predict("tiny", requests)
                        packed.append((time.process_time() - cpu0) * 1000 / n)
                        cpu0 = time.process_time()
                        eng._router.predict_batch(items)
                        laya_path.append((time.process_time() - cpu0) * 1000 / n)
                    a, b = statistics.median(packed), statistics.median(laya_path)
                    print(f"  {tokens:4d} tokens {nq:2d} questions, {sets} set(s), batch {n:2d}: packed {a:6.2f}, "
                          f"laya's path {b:6.2f} ({a / b:.2f}x)")
    eng.close()
    return 0


def spin(args: argparse.Namespace) -> int:
    """laya's predict in one process per GOMP_SPINCOUNT, taking turns: p50 per spin count."""
    checkpoint = subprocess.check_output([bench.PY, "-m", "pytest_laya_reference", "--show-checkpoint"], text=True,
                                         cwd=str(bench.ROOT)).strip()
    counter = bench.TokenCounter(checkpoint)
    workers: dict[int, bench.FloorProcess] = {}
    saved = os.environ.get("GOMP_SPINCOUNT")
    try:
        for count in args.counts:
            os.environ["GOMP_SPINCOUNT"] = str(count)  # the worker's bound_openmp_spinning keeps it
            workers[count] = bench.FloorProcess(checkpoint)
        print(f"p50 ms per GOMP_SPINCOUNT, {args.rounds} turns each; load average {os.getloadavg()[0]:.1f}")
        for tokens, nq, threads in ((512, 1, 2), (2048, 1, 2), (2048, 4, 2), (512, 1, 1)):
            bodies = bench.request_bodies(bench.sized_states(tokens, counter), nq, 1)
            latencies: dict[int, list[float]] = {c: [] for c in args.counts}
            for turn in range(args.rounds):
                for count in (args.counts if turn % 2 == 0 else args.counts[::-1]):
                    reply = workers[count].measure(bodies, threads, 0.5, args.seconds, 10)
                    latencies[count].extend(reply["latencies_ms"])
            cells = ", ".join(f"{c}: {statistics.median(v):.2f}" for c, v in latencies.items())
            print(f"  {tokens}t {nq}q on {threads} thread(s): {cells}; load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        if saved is None:
            os.environ.pop("GOMP_SPINCOUNT", None)
        else:
            os.environ["GOMP_SPINCOUNT"] = saved
        for worker in workers.values():
            worker.close()
    return 0


def http(args: argparse.Namespace) -> int:
    """One client against a server whose engine replays the real engine's answers."""
    counter = bench.TokenCounter(CHECKPOINT)
    proc = subprocess.Popen([bench.PY, __file__, "_replay_server"], stdout=subprocess.PIPE, text=True,
                            env=bench.clean_env(), cwd=str(bench.ROOT))
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http"):
            print("the replaying server did not start", file=sys.stderr)
            return 1
        print(f"one client, answers replayed (no forward pass); load average {os.getloadavg()[0]:.2f}")
        for tokens in args.sizes:
            states = bench.sized_states(tokens, counter)
            for nq in args.questions:
                bodies = bench.request_bodies(states, nq, 1)
                asyncio.run(bench._closed_loop(url, bodies, 1, 0.0, 1.0, proc.pid, (), len(bodies)))  # fill it
                sl = asyncio.run(bench._closed_loop(url, bodies, 1, 0.5, args.seconds, proc.pid, ()))
                lat = sorted(sl.latencies_ms)
                print(f"  {tokens}t {nq}q: p50 {bench.percentile(lat, 50):.3f} ms, server CPU "
                      f"{sl.server_cpu_s * 1000 / max(1, len(lat)):.3f} ms/request ({len(lat)} requests); "
                      f"load {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        proc.kill()
        proc.wait()
    return 0


def replay_server(args: argparse.Namespace) -> int:
    """`http`'s server: the reference server's app and settings, its engine's answers replayed."""
    import json

    from pytest_laya_reference.app import create_app
    from pytest_laya_reference.cores import bound_openmp_spinning
    from pytest_laya_reference.engine import DecisionRequest, DecisionResult, LayaEngine
    from pytest_laya_reference.heap import cap_malloc_arenas, keep_freed_heap
    from pytest_laya_reference.serving import ServerThread
    from pytest_laya_reference.settings import ServerSettings

    cap_malloc_arenas()
    keep_freed_heap()
    bound_openmp_spinning()
    real = LayaEngine({"tiny": CHECKPOINT}, device="cpu", passes=2)

    class Replaying:
        answers: dict[str, DecisionResult] = {}

        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        def predict(self, model: str, requests: list[DecisionRequest]) -> list[DecisionResult]:
            keys = [json.dumps([r.state, r.questions], sort_keys=True) for r in requests]
            missing = [(k, r) for k, r in zip(keys, requests) if k not in self.answers]
            if missing:
                for (k, _), result in zip(missing, real.predict(model, [r for _, r in missing])):
                    self.answers[k] = result
            return [self.answers[k] for k in keys]

    real.load()
    app = create_app(Replaying(), ServerSettings(max_concurrent=32))  # type: ignore[arg-type]
    with ServerThread(app) as server:
        print(server.url, flush=True)
        while True:
            time.sleep(3600)


def _c1_turn(url: str, bodies: list[bytes], calls: int, lat: list[float], inner: list[float]) -> None:
    """`calls` requests one after another (after 5 unmeasured): latencies, and the server's own
    time from its Server-Timing where it sends one."""
    import http.client
    import re

    conn = http.client.HTTPConnection("127.0.0.1", int(url.rsplit(":", 1)[1]))
    for i in range(calls + 5):
        started = time.perf_counter()
        conn.request("POST", "/v1/systemone", body=bodies[i % len(bodies)], headers={"content-type": "application/json"})
        response = conn.getresponse()
        response.read()
        if i >= 5:
            lat.append((time.perf_counter() - started) * 1000)
            timing = response.getheader("server-timing")
            if timing:
                inner.append(sum(float(d) for d in re.findall(r"dur=([0-9.]+)", timing)))
    conn.close()


def _variant_cell(servers: dict[str, tuple[str, int]], bodies: list[bytes], args: argparse.Namespace) -> str:
    lat: dict[str, list[float]] = {n: [] for n in servers}
    inner: dict[str, list[float]] = {n: [] for n in servers}
    rps: dict[str, list[float]] = {n: [] for n in servers}
    for rnd in range(args.rounds):
        for name in (list(servers) if rnd % 2 == 0 else list(servers)[::-1]):
            url, pid = servers[name]
            _c1_turn(url, bodies, args.calls, lat[name], inner[name])
            if args.c16_seconds:
                got = asyncio.run(bench._closed_loop(url, bodies, 16, 1.0, args.c16_seconds, pid, ()))
                rps[name].append(len(got.latencies_ms) / got.seconds)
    med = statistics.median
    cells = []
    for name in servers:
        text = f"{name} {med(lat[name]):.2f} ms"
        if inner[name]:
            text += f" (around its queue and pass {med(lat[name]) - med(inner[name]):.2f})"
        if rps[name]:
            text += f", c=16 {med(rps[name]):.1f} req/s"
        cells.append(text)
    return " | ".join(cells)


def variants(args: argparse.Namespace) -> int:
    """Reference servers started with different environments, side by side with laya-serve: c=1
    p50 per cell (with the time around the reference's own queue and pass, from its
    ``Server-Timing``), c=16 req/s, and at the end each server's peak RSS; each server in turn
    within a round and the order reversed every round, so all meet the same machine. ``--no-halt`` repeats everything while holding
    ``/dev/cpu_dma_latency`` at 0 (root only): the kernel then keeps idle CPUs polling instead of
    halting, for every process."""
    import struct

    from pytest_laya.servers.laya_serve import LayaServeProcess

    counter = bench.TokenCounter(CHECKPOINT)
    with contextlib.ExitStack() as stack:
        servers: dict[str, tuple[str, int]] = {}
        for env in [None, *args.env]:
            pairs = dict(pair.partition("=")[::2] for pair in (env or "").split())
            # PYTHONPATH names a scratch copy of the package: it must also be the working directory.
            proc = bench.ReferenceProcess(["--max-concurrent", "32"], None, pairs.pop("PYTHONPATH", None))
            proc.env.update(pairs)
            stack.enter_context(proc)
            servers["reference" + (f" {env}" if env else "")] = (proc.url, proc.pid)
        laya_serve = stack.enter_context(LayaServeProcess(Path(CHECKPOINT), max_concurrent=32))
        servers["laya-serve"] = (laya_serve.url, laya_serve.pid)
        for mode in ["halting"] + (["no-halt"] if args.no_halt else []):
            hold = os.open("/dev/cpu_dma_latency", os.O_WRONLY) if mode == "no-halt" else None
            try:
                if hold is not None:
                    os.write(hold, struct.pack("i", 0))
                print(f"{mode}: load average {os.getloadavg()[0]:.2f}", flush=True)
                for tokens in args.sizes:
                    states = bench.sized_states(tokens, counter)
                    for nq in args.questions:
                        line = _variant_cell(servers, bench.request_bodies(states, nq, 1), args)
                        print(f"  {tokens}t {nq}q: {line}", flush=True)
            finally:
                if hold is not None:
                    os.close(hold)
        print("peak RSS: " + " | ".join(f"{name} {bench.proc_status(pid)['VmHWM'] / 1024:.0f} MiB"
                                        for name, (_, pid) in servers.items()), flush=True)
    return 0

def lean(args: argparse.Namespace) -> int:
    """laya's ``Agent._forward`` against the engine's lean forward (``PackedForward``) on the same
    collated passes of the benchmark's rows, one torch thread, taking turns: CPU ms per pass, and
    whether the outputs are bit for bit the same. The lean forward runs twice, under ``no_grad``
    (as laya's does) and under ``inference_mode`` (as the engine's passes do)."""
    import laya
    import torch
    from laya.common import collate_items

    from pytest_laya_reference.packed_forward import PackedForward
    from pytest_laya_reference.packing import encode_requests

    torch.set_num_threads(1)
    agent = laya.load(CHECKPOINT, device="cpu")
    forward = PackedForward.attach(agent)
    if forward is None:
        print("the lean forward does not apply to this checkpoint")
        return 1
    count = bench.TokenCounter(CHECKPOINT)
    sides = (("laya", agent._forward, torch.no_grad), ("lean", forward, torch.no_grad),
             ("lean, inference mode", forward, torch.inference_mode))
    print("CPU ms per pass, one torch thread: laya's Agent._forward / the lean forward / the lean forward in "
          "inference mode (ratios to laya's), same outputs")
    for tokens in args.sizes:
        states = bench.sized_states(tokens, count, 16)
        for questions in args.questions:
            encoded = encode_requests(agent, [(s, bench.question_set(questions), {}) for s in states])
            items = [item for request in encoded for item in request.items]
            cells = []
            for rows in args.rows:
                batch = collate_items([items[:rows]], agent.tok.pad_token_id)
                timed: dict[str, list[float]] = {name: [] for name, _, _ in sides}
                outputs = []
                for _, run, mode in sides:
                    with mode():
                        outputs.append(run(batch))
                same = all((a == b).all() for other in outputs[1:] for a, b in zip(outputs[0], other))
                for turn in range(args.repeats):
                    for name, run, mode in (sides if turn % 2 == 0 else sides[::-1]):
                        with mode():
                            started = time.thread_time()
                            run(batch)
                            timed[name].append((time.thread_time() - started) * 1000)
                laya_ms, lean_ms, inference_ms = (statistics.median(timed[name]) for name, _, _ in sides)
                cells.append(f"{rows} x {batch['input_ids'].shape[1]}: {laya_ms:6.2f} / {lean_ms:6.2f} / "
                             f"{inference_ms:6.2f} ({lean_ms / laya_ms:.2f}x, {inference_ms / laya_ms:.2f}x)"
                             f"{'' if same else ' DIFFERENT'}")
            print(f"  {tokens:4d}t {questions:2d}q  " + " | ".join(cells), flush=True)
    return 0


def tokenize(args: argparse.Namespace) -> int:
    """laya's ``Agent._encode_state`` against the engine's (``fast_tokenizer.encode_state`` with a
    ``FastTokenizer``) on the benchmark's requests, taking turns: ms per request, and whether
    every encoded row is the same."""
    import laya
    from laya.common import _reuse_question_tokens

    from pytest_laya_reference.fast_tokenizer import FastTokenizer, encode_state

    agent = laya.load(CHECKPOINT, device="cpu")
    fast = FastTokenizer.for_agent(agent)
    if fast is None:
        print("this checkpoint's tokenizer is used as it is")
        return 1
    count = bench.TokenCounter(CHECKPOINT)
    print("ms per request's rows: laya's Agent._encode_state / through FastTokenizer (ratio), same rows")
    for tokens in args.sizes:
        states = bench.sized_states(tokens, count, 16)
        for questions in args.questions:
            asked = bench.question_set(questions)
            ids = list(asked)
            internal = {q: agent._to_internal(asked[q]) for q in ids}
            sides = (("laya", None), ("fast", fast))
            timed: dict[str, list[float]] = {name: [] for name, _ in sides}
            same = True
            for turn in range(args.repeats):
                state = states[turn % len(states)]
                rows = []
                for name, tokenizer in (sides if turn % 2 == 0 else sides[::-1]):
                    encode = _reuse_question_tokens(functools.partial(encode_state, agent, tokenizer))
                    started = time.perf_counter()
                    rows.append(encode(state, ids, internal))
                    timed[name].append((time.perf_counter() - started) * 1000)
                same = same and rows[0] == rows[1]
            laya_ms, fast_ms = statistics.median(timed["laya"]), statistics.median(timed["fast"])
            print(f"  {tokens:4d}t {questions:2d}q  {laya_ms:6.3f} / {fast_ms:6.3f} ({fast_ms / laya_ms:.2f}x)"
                  f"{'' if same else ' DIFFERENT'}", flush=True)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="probe", required=True)
    s = sub.add_parser("server", help="py-spy the reference server under one cell's load")
    s.add_argument("--tokens", type=int, default=512)
    s.add_argument("--questions", type=int, default=4)
    s.add_argument("--concurrency", type=int, default=1)
    s.add_argument("--mixed", action="store_true", help="8 question sets, one per request in turn")
    s.add_argument("--seconds", type=float, default=15.0)
    s.add_argument("--ref-arg", action="append", default=[], help="extra reference-server argument")
    r = sub.add_parser("rows", help="forward-pass CPU per row by rows per pass and tokens per row")
    r.add_argument("--rows", type=bench.csv_ints, default=[1, 2, 4, 8, 16, 32, 64])
    r.add_argument("--lengths", type=bench.csv_ints, default=[96, 256, 512])
    t = sub.add_parser("threads", help="in-process predict with 1 and 2 torch threads")
    t.add_argument("--tokens", type=int, default=512)
    t.add_argument("--repeats", type=int, default=4)
    m = sub.add_parser("openmp", help="in process: OpenMP sleeps per two-thread predict, one team or two")
    m.add_argument("--tokens", type=int, default=512)
    m.add_argument("--calls", type=int, default=40)
    v = sub.add_parser("overhead", help="the server against laya's in-process predict, a request each in turn")
    v.add_argument("--sizes", type=bench.csv_ints, default=[64, 512, 2048])
    v.add_argument("--questions", type=bench.csv_ints, default=[1, 4, 12])
    v.add_argument("--calls", type=int, default=60)
    e = sub.add_parser("engine", help="in process: laya's predict against the engine, c=1 and loaded")
    e.add_argument("--tokens", type=int, default=512)
    e.add_argument("--questions", type=bench.csv_ints, default=[1, 4, 12])
    e.add_argument("--calls", type=int, default=16, help="c=1 calls per side (twice that under load)")
    e.add_argument("--passes", type=int, default=2)
    e.add_argument("--mixed", action="store_true")
    k = sub.add_parser("packing", help="in process: packed passes against laya's Router.predict_batch, CPU")
    k.add_argument("--sizes", type=bench.csv_ints, default=[64, 512])
    k.add_argument("--questions", type=bench.csv_ints, default=[1, 4, 12])
    k.add_argument("--repeats", type=int, default=3)
    n = sub.add_parser("spin", help="laya's predict in one process per GOMP_SPINCOUNT, taking turns")
    n.add_argument("--counts", type=bench.csv_ints, default=[1000, 3000, 10000, 30000])
    n.add_argument("--rounds", type=int, default=3, help="turns per spin count and cell")
    n.add_argument("--seconds", type=float, default=1.5, help="measured seconds per turn")
    h = sub.add_parser("http", help="the server's HTTP path with answers replayed: one client's p50")
    h.add_argument("--sizes", type=bench.csv_ints, default=[64, 512, 2048])
    h.add_argument("--questions", type=bench.csv_ints, default=[1, 4, 12])
    h.add_argument("--seconds", type=float, default=3.0)
    w = sub.add_parser("variants", help="reference servers with other environments beside laya-serve: c=1, c=16")
    w.add_argument("--env", action="append", default=[], help="'NAME=VALUE ...' for one more reference server (repeatable; PYTHONPATH=DIR runs a scratch copy)")
    w.add_argument("--sizes", type=bench.csv_ints, default=[64, 512, 2048])
    w.add_argument("--questions", type=bench.csv_ints, default=[1, 4])
    w.add_argument("--calls", type=int, default=35, help="c=1 requests per server, cell and round")
    w.add_argument("--rounds", type=int, default=4)
    w.add_argument("--c16-seconds", type=float, default=0.0, help="also 16 clients for this long (0: not)")
    w.add_argument("--no-halt", action="store_true", help="then again holding /dev/cpu_dma_latency at 0 (root)")
    le = sub.add_parser("lean", help="in process: laya's Agent._forward against the engine's lean forward, CPU per pass")
    le.add_argument("--sizes", type=bench.csv_ints, default=[64, 512, 2048])
    le.add_argument("--questions", type=bench.csv_ints, default=[1, 4])
    le.add_argument("--rows", type=bench.csv_ints, default=[1, 4, 16])
    le.add_argument("--repeats", type=int, default=9)
    tk = sub.add_parser("tokenize", help="in process: laya's encoding of a request's rows against the engine's")
    tk.add_argument("--sizes", type=bench.csv_ints, default=[64, 512, 2048])
    tk.add_argument("--questions", type=bench.csv_ints, default=[1, 4, 12])
    tk.add_argument("--repeats", type=int, default=200)
    sub.add_parser("_replay_server")
    o = sub.add_parser("_side")  # one side of `engine`, in its own process
    o.add_argument("side", choices=("laya", "engine"))
    for action in e._actions[1:]:
        o._add_action(action)
    args = p.parse_args()
    return {"server": server, "rows": rows, "threads": threads, "openmp": openmp, "overhead": overhead, "engine": engine, "packing": packing,
            "lean": lean, "tokenize": tokenize, "spin": spin, "http": http, "variants": variants, "_replay_server": replay_server, "_side": one_side}[args.probe](args)


if __name__ == "__main__":
    sys.exit(main())

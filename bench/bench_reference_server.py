#!/usr/bin/env python
"""Reference server vs laya-serve 0.4.15 over state sizes and question counts, in one run, same bytes.

Both servers run the embedded tiny checkpoint (``python -m pytest_laya_reference --show-checkpoint``)
as their own subprocesses:

- laya-serve 0.4.15 via ``pytest_laya.servers.laya_serve.LayaServeProcess``
  (``LAYA_MAX_CONCURRENT`` from ``--max-concurrent``), asked with ``"model": "tiny"``;
- the reference server via ``python -m pytest_laya_reference --port 0 --max-concurrent N`` (plus any
  ``--ref-arg``), ready once it prints its ready line; with ``--max-inflight-tokens`` too when
  ``--concurrency`` requests of the largest question count would not fit its default in-flight
  budget (4 x 32,768 tokens), so that nothing is shed as 503 ``overloaded``.

The grid: every state size of ``--sizes`` (tokens, counted with the checkpoint's own tokenizer,
before laya's 512-token window truncates them) x every question count of ``--questions`` x every
load of ``--loads``:

- ``c1``: one client, one question set on every request: latency;
- ``same``: ``--concurrency`` clients, one question set on every request (batchable);
- ``mixed``: ``--concurrency`` clients; request i carries question set i % ``--mixed-sets``, so
  concurrent requests carry different question sets (same count and kinds, different text).

Requests: 24 customer-support states per size (each a rotation of the same sentences, cut at
the size), and question sets cycling choice (3 options), score (3 levels) and noul.

Load: closed-loop clients, each on one keep-alive HTTP/1.1 connection, sending
``POST /v1/systemone`` back to back (a minimal client written here, so the load generator costs
little CPU). A cell runs ``--warmup`` s (discarded), then its measured slice; a request counts
when it completes inside the slice.

Interleaving, for a shared box: each round starts both servers (fresh processes), checks that
their answers are equal, then measures every cell on both, alternating which goes first from
cell to cell (ABBA) so that drift in the box's speed falls on both alike; the idle one uses no
CPU meanwhile. ``--rounds`` rounds; a cell pools its slices' raw latencies, and its CPU per
request is the median of its slices' (one a round, or one a turn). With ``--turns N`` (5 by default), each c1 cell's slice
is cut into N turns, each measuring both servers and then the floors for a 1/N share (the later
turns warmed up for 0.5 s, with no wait for quiet before them): the host's speed drifts from
minute to minute here, and a server measured a minute after its floor can land in another
minute's speed. Before each slice the script waits (up to
``--quiet-wait`` s) until processes other than the two servers and itself use at most
``--max-foreign`` cores, and measures a slice again (up to ``--retries`` times) when they used
more; the worst remaining value is shown per cell.

Reported per cell and server: requests/s, p50 and p99 latency (ms, nearest rank), the server
process's CPU milliseconds per request (utime+stime of all its threads from ``/proc/PID/stat``
over the slice: the figure the box's noise moves least), errors (must be 0); per server, peak
RSS (``VmHWM``, the largest over rounds; it includes loading). Then the goals of issue 18, each
a ratio reference / laya-serve in the same run:

- c1: p50 <= 1.0x in every cell, and at most the floor + 1 ms;
- same and mixed: CPU ms per request <= 0.5x, and requests/s >= 2x;
- peak RSS <= 1.1x.

The floor (c1 cells): laya's own in-process ``laya.load(dir).predict`` of the same bodies, one
at a time, in processes of their own (``--floor-worker``): started as the reference server
starts (its OpenMP spin cap and malloc settings), on one torch thread and on every core of the
server's budget, and started as laya-serve runs (libgomp's own spinning) on every core; the
fastest of the three. The floor of a ``same`` cell (16 clients, one question set), in
requests/s: the best of laya's own ``Agent.predict_batch`` of ``--concurrency`` of the cell's
states at once on every core, set up both ways, and the reference server's engine in process
(``LayaEngine``, no HTTP, no queue), its 2 passes calling it with batches of half as many. Each is measured in each round after the two servers, once other processes are quiet;
the server's overhead is its p50 minus the floor's (c1), its share of the floor's requests/s
(same).

This is a script run by hand, not a test: nothing here asserts on time.

    .venv/bin/python bench/bench_reference_server.py                     # the whole grid (~25 min)
    .venv/bin/python bench/bench_reference_server.py --sizes 512 --questions 4 --loads c1,same --rounds 1
        [--duration 8] [--warmup 2] [--concurrency 16] [--mixed-sets 8] [--json]
        [--only ref|laya] [--ref-arg=--passes=1 ...] [--ref-threads N] [--laya-threads N]
        [--ref-pythonpath DIR]   # DIR holding a scratch copy of pytest_laya_reference/ to measure
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from pytest_laya.servers.laya_serve import LayaServeProcess  # noqa: E402

PY = sys.executable
READY_PREFIX = "laya-reference-server ready at "
GOAL_C1_P50 = 1.0        # reference p50 / laya-serve p50, at most
GOAL_CPU_PER_REQ = 0.5   # reference CPU ms per request / laya-serve's, at most
GOAL_RPS = 2.0           # reference req/s / laya-serve's, at least
GOAL_RSS = 1.1           # reference peak RSS / laya-serve's, at most
GOAL_OVER_FLOOR_MS = 1.0  # reference c1 p50 minus laya's in-process predict p50, at most
WINDOW_TOKENS = 512      # laya's default token window per (state, question): what a request may cost
VERSIONED = ("laya", "torch", "transformers", "starlette", "uvicorn", "fastapi", "h11", "httpx")
LOADS = ("c1", "same", "mixed")

# ------------------------------------------------------------------------------ the requests

SENTENCES = [
    "I was charged twice for my order. Please refund the duplicate today.",
    "The app crashes every time I open the settings page on my phone.",
    "My parcel was supposed to arrive on Monday and it is still not here.",
    "Can I change the delivery address for order 48213? I moved last week.",
    "I cancelled my subscription but you still took money from my card this month.",
    "The login page says my password is wrong even after I reset it twice.",
    "The box arrived crushed and the lamp inside is broken. I want a replacement.",
    "Why is there a 4.99 fee on my invoice? Nobody told me about it.",
    "Your website is very slow since yesterday, pages take a minute to load.",
    "I ordered the blue jacket but received a red one. How do I send it back?",
    "Please close my account and delete my data.",
    "The discount code SPRING20 does not work at checkout.",
    "Tracking has said 'out for delivery' for three days now.",
    "I was billed in dollars but I live in Germany and chose euros.",
    "After the last update the export button does nothing at all.",
    "Hi, just wanted to say thanks, the support team was great yesterday!",
    "I need an invoice with my company's VAT number for order 99120.",
    "The courier left my package at the wrong house and the neighbours are away.",
    "My card was declined but the money still left my account.",
    "Notifications stopped working on my tablet; I reinstalled the app already.",
    "Can you deliver on Saturday? I am not home during the week.",
    "I returned the shoes two weeks ago and still have not got my money back.",
    "The dark mode setting resets every time I restart the program.",
    "Order 77310 shows as delivered but I never received anything. This is urgent.",
]
TEAMS = [("billing", "Charges and refunds"), ("technical", "Software problems"),
         ("shipping", "Deliveries and returns"), ("account", "Logins and personal data"),
         ("sales", "Prices, offers and discount codes")]
TOPICS = ["handle this", "own the follow-up", "be told", "answer first", "check the account",
          "review the refund", "contact the customer", "escalate to", "log this under",
          "tag this with", "route the reply to", "audit this"]


class TokenCounter:
    """Tokens of a text as the checkpoint's own tokenizer counts them (no special tokens)."""

    def __init__(self, checkpoint: str) -> None:
        from tokenizers import Tokenizer  # transformers' dependency; only this script needs it

        self._tok = Tokenizer.from_file(os.path.join(checkpoint, "tokenizer", "tokenizer.json"))

    def __call__(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)


def sized_states(tokens: int, count: TokenCounter, n: int = 24) -> list[str]:
    """`n` states of about `tokens` tokens each (the largest word prefix not over it).

    State k starts at sentence k and cycles through the others, so the states differ in text
    and, slightly, in length, as real ones do.
    """
    out = []
    for k in range(n):
        words: list[str] = []
        i = 0
        while len(words) < tokens * 2:  # a word is at least one token: enough words to cut from
            words.extend(SENTENCES[(k + i) % len(SENTENCES)].split())
            i += 1
        lo, hi = 1, len(words)
        while lo < hi:  # the longest prefix within `tokens`
            mid = (lo + hi + 1) // 2
            if count(" ".join(words[:mid])) <= tokens:
                lo = mid
            else:
                hi = mid - 1
        out.append(" ".join(words[:lo]))
    return out


def question_set(n: int, variant: int = 0) -> dict[str, Any]:
    """`n` questions cycling choice (3 options), score (3 levels) and noul.

    `variant` > 0 gives a distinct set of the same shape: other instructions and other options,
    so two variants never share a forward pass in a server that batches by question set.
    """
    suffix = f" (queue {variant})" if variant else ""
    out: dict[str, Any] = {}
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        if i % 3 == 0:
            start = (variant + i) % len(TEAMS)
            out[f"q{i}"] = {"type": "choice", "instructions": f"Which team should {topic}?{suffix}",
                            "criteria": dict(TEAMS[(start + j) % len(TEAMS)] for j in range(3))}
        elif i % 3 == 1:
            out[f"q{i}"] = {"type": "score", "instructions": f"How urgent is it to {topic}?{suffix}",
                            "criteria": ["Not urgent", "Needs attention soon", "Needs attention immediately"]}
        else:
            out[f"q{i}"] = {"type": "noul", "instructions": f"Should we {topic} with a refund?{suffix}"}
    return out


def request_bodies(states: list[str], n_questions: int, sets: int) -> list[bytes]:
    """One JSON body per state; request i carries question set i % sets (variant 0 when sets is 1)."""
    out = []
    for i, state in enumerate(states):
        qs = question_set(n_questions, (i % sets) + 1 if sets > 1 else 0)
        out.append(json.dumps({"model": "tiny", "state": state, "questions": qs},
                              separators=(",", ":")).encode())
    return out


@dataclass(frozen=True)
class CellSpec:
    tokens: int
    questions: int
    load: str   # c1 | same | mixed

    def label(self, concurrency: int) -> str:
        conc = 1 if self.load == "c1" else concurrency
        kind = {"c1": "", "same": "", "mixed": " mixed"}[self.load]
        return f"{self.tokens}t {self.questions}q c={conc}{kind}"


def plan(args: argparse.Namespace) -> list[CellSpec]:
    return [CellSpec(t, q, load) for t in args.sizes for q in args.questions for load in args.loads]


# ------------------------------------------------------------------------------ load generator

class _Conn:
    """One keep-alive HTTP/1.1 connection; a deliberately small client (no pooling, no TLS)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, head: bytes, body: bytes) -> tuple[int, bytes, float | None]:
        """Status, body, and the server's own time for it (the durations of its Server-Timing
        header, the reference server's queue and forward pass; None without one)."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(head + body)
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        length = None
        close = False
        server_ms = None
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value.strip())
            elif name == "server-timing":
                server_ms = sum(float(d) for d in re.findall(r"dur=([0-9.]+)", value))
            elif name == "connection" and value.strip().lower() == "close":
                close = True
        if length is None:
            raise RuntimeError("response without Content-Length")
        data = await self.reader.readexactly(length)
        if close:
            await self.close()
        return status, data, server_ms

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except Exception:  # noqa: BLE001
                pass
        self.reader = self.writer = None


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), int(-(-q * len(sorted_values) // 100))))
    return sorted_values[rank - 1]


def cpu_seconds(pid: int) -> float:
    """utime + stime of every thread of `pid`, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def system_busy_seconds() -> float:
    """Busy CPU time of the whole machine (all cores) from /proc/stat: everything but idle/iowait."""
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def snapshot(pid: int, others: tuple[int, ...]) -> tuple[float, float, float]:
    """(CPU s of `pid`, CPU s of this process and `others`, machine busy s)."""
    ours = cpu_seconds(os.getpid()) + sum(cpu_seconds(p) for p in others)
    return cpu_seconds(pid), ours, system_busy_seconds()


def foreign_cores(a: tuple[float, float, float], b: tuple[float, float, float], seconds: float) -> float:
    """Cores that processes other than the servers and this script used between two snapshots."""
    return max(0.0, (b[2] - a[2]) - (b[0] - a[0]) - (b[1] - a[1])) / seconds


def wait_quiet(pids: tuple[int, ...], max_foreign: float, timeout_s: float) -> float:
    """Wait (at most `timeout_s`) until other processes leave the CPU alone; returns their last load."""
    deadline = time.monotonic() + timeout_s
    while True:
        a = snapshot(pids[0], pids[1:])
        time.sleep(0.5)
        load = foreign_cores(a, snapshot(pids[0], pids[1:]), 0.5)
        if load <= max_foreign or time.monotonic() >= deadline:
            return load
        log(f"    waiting: other processes use {load:.2f} cores")
        time.sleep(1.5)


class QuietBudget:
    """Seconds this run may spend, in all, waiting for quiet and re-measuring (bounds the wall time)."""

    def __init__(self, seconds: float) -> None:
        self.left = float(seconds)

    def wait(self, pids: tuple[int, ...], max_foreign: float, cap_s: float) -> float:
        started = time.monotonic()
        load = wait_quiet(pids, max_foreign, max(0.0, min(cap_s, self.left)))
        self.left -= time.monotonic() - started
        return load

    def retry(self, cost_s: float) -> bool:
        """Spend `cost_s` on a re-measurement if the budget still has it."""
        if self.left < cost_s:
            return False
        self.left -= cost_s
        return True


@dataclass
class Turn:
    """One slice's share of a cell: ``turns`` of them measure each server and floor in turn, so
    that the box's drift from minute to minute falls on all of them alike."""

    seconds: float
    warmup_s: float
    wait_quiet: bool


def turns_of(spec: CellSpec, args: argparse.Namespace) -> list[Turn]:
    """A c1 cell's slices cut into ``--turns`` turns (the first one warmed up and waited for in
    full, the later ones warmed up briefly: the servers are warm); other cells in one."""
    per_round = args.duration / args.rounds
    n = args.turns if spec.load == "c1" else 1
    return [Turn(per_round / n, args.warmup if k == 0 else min(args.warmup, 0.5), k == 0) for k in range(n)]


@dataclass
class Slice:
    latencies_ms: list[float]
    errors: dict[str, int]
    seconds: float
    server_cpu_s: float
    foreign_cores: float
    around_ms: list[float] = field(default_factory=list)  # latency minus the server's own queue + pass


async def _closed_loop(url: str, bodies: list[bytes], concurrency: int, warmup_s: float,
                       duration_s: float, pid: int, others: tuple[int, ...], min_requests: int = 0) -> Slice:
    """Measure `duration_s` after `warmup_s`, longer (up to 4x) until `min_requests` have completed."""
    hostport = url.split("://", 1)[1]
    host, port = hostport.rsplit(":", 1)
    heads = [(f"POST /v1/systemone HTTP/1.1\r\nHost: {hostport}\r\nContent-Type: application/json\r\n"
              f"Accept: application/json\r\nContent-Length: {len(b)}\r\n\r\n").encode() for b in bodies]
    loop = asyncio.get_running_loop()
    measure_from = loop.time() + warmup_s
    latencies: list[float] = []
    around: list[float] = []
    errors: dict[str, int] = {}
    window: dict[str, Any] = {"measuring": False, "stopped": False}

    async def clock() -> None:
        await asyncio.sleep(max(0.0, measure_from - loop.time()))
        window["from"] = snapshot(pid, others)
        window["measuring"] = True
        end, last = measure_from + duration_s, measure_from + 4 * duration_s
        while True:
            await asyncio.sleep(max(0.0, end - loop.time()))
            if len(latencies) >= min_requests or loop.time() >= last:
                break
            end = min(last, end + duration_s / 2)  # a slow cell: too few answers to tell yet
        window["to"] = snapshot(pid, others)
        window["seconds"] = loop.time() - measure_from
        window["measuring"], window["stopped"] = False, True

    async def client(k: int) -> None:
        conn = _Conn(host, int(port))
        i = k * 7  # each client starts at a different state
        try:
            while not window["stopped"]:
                t0 = loop.time()
                j = i % len(bodies)
                i += 1
                server_ms = None
                try:
                    status, data, server_ms = await conn.post(heads[j], bodies[j])
                    kind = None if status == 200 and b'"answers"' in data else f"HTTP {status}"
                except (OSError, asyncio.IncompleteReadError, RuntimeError, ValueError) as exc:
                    await conn.close()
                    kind = type(exc).__name__
                if window["measuring"]:  # answered inside the window
                    if kind is None:
                        latencies.append((loop.time() - t0) * 1000.0)
                        if server_ms is not None:
                            around.append(latencies[-1] - server_ms)
                    else:
                        errors[kind] = errors.get(kind, 0) + 1
                elif kind is not None and not window["stopped"]:
                    errors["outside window " + kind] = errors.get("outside window " + kind, 0) + 1
        finally:
            await conn.close()

    await asyncio.gather(clock(), *(client(k) for k in range(concurrency)))
    a, b = window["from"], window["to"]
    return Slice(latencies, errors, window["seconds"], b[0] - a[0], foreign_cores(a, b, window["seconds"]), around)


# ------------------------------------------------------------------------------ results

@dataclass
class Cell:
    server: str
    label: str
    tokens: int
    questions: int
    load: str
    concurrency: int
    duration_s: float = 0.0
    requests: int = 0
    rps: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    errors: int = 0
    error_kinds: dict = field(default_factory=dict)
    cpu_ms_per_request: float = 0.0   # median over rounds of the server's CPU ms per counted request
    round_rps: list = field(default_factory=list)
    round_cpu_ms_per_request: list = field(default_factory=list)
    foreign_cores: float = 0.0        # worst slice: CPU other processes used, in cores
    retried_slices: int = 0
    around_p50_ms: float | None = None  # p50 of latency minus the server's queue + forward pass (its Server-Timing)


def build_cell(server: str, spec: CellSpec, concurrency: int, slices: list[Slice], retried: int) -> Cell:
    """Pool the raw slices of every round into one cell."""
    latencies = sorted(x for sl in slices for x in sl.latencies_ms)
    errors: dict[str, int] = {}
    for sl in slices:
        for kind, n in sl.errors.items():
            errors[kind] = errors.get(kind, 0) + n
    conc = 1 if spec.load == "c1" else concurrency
    cell = Cell(server, spec.label(concurrency), spec.tokens, spec.questions, spec.load, conc)
    cell.duration_s = sum(sl.seconds for sl in slices)
    cell.requests = len(latencies)
    cell.rps = len(latencies) / cell.duration_s
    cell.p50_ms = percentile(latencies, 50)
    cell.p99_ms = percentile(latencies, 99)
    cell.errors = sum(errors.values())
    cell.error_kinds = errors
    cell.round_rps = [len(sl.latencies_ms) / sl.seconds for sl in slices]
    cell.round_cpu_ms_per_request = [sl.server_cpu_s * 1000.0 / len(sl.latencies_ms)
                                     for sl in slices if sl.latencies_ms]
    cell.cpu_ms_per_request = (statistics.median(cell.round_cpu_ms_per_request)
                               if cell.round_cpu_ms_per_request else float("nan"))
    cell.foreign_cores = max(sl.foreign_cores for sl in slices)
    cell.retried_slices = retried
    around = sorted(x for sl in slices for x in sl.around_ms)
    cell.around_p50_ms = percentile(around, 50) if around else None
    return cell


def goals(cells: list[dict[str, Any]], rss: dict[str, dict[str, int]], max_foreign: float) -> list[dict[str, Any]]:
    """Each goal of issue 18 per cell: the ratio reference / laya-serve, and met or missed."""
    by = {(c["server"], c["label"]): c for c in cells}
    out = []
    for ref in (c for c in cells if c["server"] == "reference"):
        lay = by.get(("laya-serve", ref["label"]))
        if lay is None:
            continue
        noisy = max(ref["foreign_cores"], lay["foreign_cores"]) > max_foreign
        if ref["load"] == "c1":
            checks = [("p50", ref["p50_ms"] / lay["p50_ms"], "<=", GOAL_C1_P50)]
            floor = by.get(("floor", ref["label"]))
            if floor is not None and ref["load"] == "c1":
                over = ref["p50_ms"] - floor["p50_ms"]
                out.append({"cell": ref["label"], "what": "p50 over the floor", "ratio": over, "unit": " ms",
                            "goal": f"<= {GOAL_OVER_FLOOR_MS} ms", "met": over <= GOAL_OVER_FLOOR_MS,
                            "noisy": noisy or floor["foreign_cores"] > max_foreign})
        else:
            checks = [("CPU ms/req", ref["cpu_ms_per_request"] / lay["cpu_ms_per_request"], "<=", GOAL_CPU_PER_REQ),
                      ("req/s", ref["rps"] / lay["rps"], ">=", GOAL_RPS)]
        for what, ratio, op, goal in checks:
            met = ratio <= goal if op == "<=" else ratio >= goal
            out.append({"cell": ref["label"], "what": what, "ratio": ratio, "goal": f"{op} {goal}x",
                        "met": met, "noisy": noisy})
    if "reference" in rss and "laya-serve" in rss:
        ratio = rss["reference"]["VmHWM"] / rss["laya-serve"]["VmHWM"]
        out.append({"cell": "all", "what": "peak RSS", "ratio": ratio, "goal": f"<= {GOAL_RSS}x",
                    "met": ratio <= GOAL_RSS, "noisy": False})
    return out


# ------------------------------------------------------------------------------ servers

def proc_status(pid: int) -> dict[str, int]:
    """VmHWM / VmRSS in KiB from /proc (psutil is not installed here)."""
    out = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                out[key] = int(value.split()[0])
    return out


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("LAYA_")}


class ReferenceProcess:
    """`python -m pytest_laya_reference --port 0 ...` as a subprocess; `url` once it says it is ready."""

    def __init__(self, args: list[str], threads: int | None, pythonpath: str | None,
                 timeout_s: float = 120.0) -> None:
        self.args = args
        self.env = clean_env()
        self.env["PYTHONUNBUFFERED"] = "1"
        if threads:
            self.env["LAYA_THREADS"] = str(threads)
        if pythonpath:
            self.env["PYTHONPATH"] = os.pathsep.join([pythonpath, str(ROOT)])
        # `python -m` puts the working directory first on sys.path, ahead of PYTHONPATH.
        self.cwd = pythonpath or str(ROOT)
        self.timeout_s = timeout_s
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self._out = tempfile.TemporaryFile()

    def __enter__(self) -> ReferenceProcess:
        cmd = [PY, "-m", "pytest_laya_reference", "--port", "0", *self.args]
        self.proc = subprocess.Popen(cmd, env=self.env, stdin=subprocess.DEVNULL, stdout=self._out,
                                     stderr=subprocess.STDOUT, cwd=self.cwd)
        deadline = time.monotonic() + self.timeout_s
        while True:
            text = self.log
            for line in text.splitlines():
                if line.startswith(READY_PREFIX):
                    self.url = line[len(READY_PREFIX):].strip()
                    return self
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError("reference server did not become ready:\n" + text[-3000:])
            time.sleep(0.05)

    @property
    def log(self) -> str:
        fd = self._out.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode("utf-8", "replace")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


class FloorProcess:
    """laya's own in-process predict in a process of its own, driven over stdin/stdout, set up as
    the reference server sets itself up (``setup="server"``: OpenMP spin cap, one malloc arena,
    freed heap kept) or as laya-serve runs (``"laya-serve"``: none of that, libgomp's own
    spinning)."""

    def __init__(self, checkpoint: str, setup: str = "server") -> None:
        self.setup = setup
        self.proc = subprocess.Popen([PY, str(Path(__file__).resolve()), "--floor-worker", checkpoint, setup],
                                     env=clean_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, cwd=str(ROOT))
        if self._reply() != {"ready": True}:
            self.close()
            raise RuntimeError("the floor worker did not start")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _reply(self) -> Any:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the floor worker exited")
        return json.loads(line)

    def measure(self, bodies: list[bytes], threads: int, warmup_s: float, duration_s: float,
                min_requests: int, batch: int = 1, engine: int = 0, engine_batch: int = 8) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"bodies": [b.decode() for b in bodies], "threads": threads,
                                          "warmup_s": warmup_s, "duration_s": duration_s,
                                          "min_requests": min_requests, "batch": batch, "engine": engine,
                                          "engine_batch": engine_batch}) + "\n")
        self.proc.stdin.flush()
        reply: dict[str, Any] = self._reply()
        return reply

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def floor_worker(checkpoint: str, setup: str) -> int:
    """The floor's process: one job per stdin line, its latencies on stdout (a batch's latency
    once per request in it). ``setup``: see ``FloorProcess``."""
    if setup == "server":
        from pytest_laya_reference.cores import bound_openmp_spinning
        from pytest_laya_reference.heap import cap_malloc_arenas, keep_freed_heap

        cap_malloc_arenas()
        keep_freed_heap()
        bound_openmp_spinning()
    import laya
    import torch

    agent = laya.load(checkpoint, device="cpu")
    engines: list[Any] = []
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        decisions = [json.loads(b) for b in job["bodies"]]
        if job.get("engine"):
            if not engines:
                from pytest_laya_reference.engine import LayaEngine

                engines.append(LayaEngine({"tiny": checkpoint}, device="cpu", passes=job["engine"]))
                engines[0].load()
            print(json.dumps(engine_floor(engines[0], job, decisions)), flush=True)
            continue
        torch.set_num_threads(job["threads"])
        latencies: list[float] = []
        started = time.perf_counter()
        end, last = started + job["warmup_s"] + job["duration_s"], started + job["warmup_s"] + 4 * job["duration_s"]
        cpu = 0.0
        i = 0
        batch = job.get("batch", 1)
        while True:
            now = time.perf_counter()
            if now >= last or (now >= end and len(latencies) >= job["min_requests"]):
                break
            c0, t0 = time.process_time(), time.perf_counter()
            if batch > 1:  # one question set (a `same` cell): laya's own batch of that many states
                states = [decisions[(i + k) % len(decisions)]["state"] for k in range(batch)]
                agent.predict_batch(states, decisions[i % len(decisions)]["questions"])
            else:
                d = decisions[i % len(decisions)]
                agent.predict(d["state"], d["questions"])
            i += batch
            t1 = time.perf_counter()
            if t0 >= started + job["warmup_s"]:
                latencies.extend([(t1 - t0) * 1000.0] * batch)
                cpu += time.process_time() - c0
        print(json.dumps({"latencies_ms": latencies, "cpu_s": cpu,
                          "seconds": time.perf_counter() - started - job["warmup_s"]}), flush=True)
    return 0


def engine_floor(engine: Any, job: dict[str, Any], decisions: list[dict[str, Any]]) -> dict[str, Any]:
    """The reference server's engine in process, no HTTP: ``job["engine"]`` threads (its passes)
    each calling ``predict`` with batches of ``job["engine_batch"]`` of the bodies, as its batcher
    would under that many clients; each request's latency is its batch's."""
    import itertools

    from pytest_laya_reference.engine import DecisionRequest

    requests = [DecisionRequest(d["state"], d["questions"]) for d in decisions]
    size = job["engine_batch"]
    counter = itertools.count()
    latencies: list[float] = []
    lock, stop = threading.Lock(), threading.Event()
    measure_from = time.perf_counter() + job["warmup_s"]

    def caller() -> None:
        while not stop.is_set():
            k = next(counter)
            batch = [requests[(k * size + j) % len(requests)] for j in range(size)]
            t0 = time.perf_counter()
            engine.predict("tiny", batch)
            t1 = time.perf_counter()
            if t0 >= measure_from and not stop.is_set():
                with lock:
                    latencies.extend([(t1 - t0) * 1000.0] * size)

    callers = [threading.Thread(target=caller) for _ in range(job["engine"])]
    for t in callers:
        t.start()
    time.sleep(max(0.0, measure_from - time.perf_counter()))
    c0, w0 = time.process_time(), time.perf_counter()
    end, last = w0 + job["duration_s"], w0 + 4 * job["duration_s"]
    while time.perf_counter() < last and (time.perf_counter() < end or len(latencies) < job["min_requests"]):
        time.sleep(0.02)
    stop.set()
    cpu, seconds = time.process_time() - c0, time.perf_counter() - w0
    for t in callers:
        t.join()
    return {"latencies_ms": list(latencies), "cpu_s": cpu, "seconds": seconds}


def floor_threads(cores: int) -> list[int]:
    """The torch threads the floor is measured on: one, and every core of the server's budget
    (the two shapes the reference server chooses between for a lone request)."""
    return [1, cores] if cores > 1 else [1]


def measure_floor(floors: tuple[FloorProcess, FloorProcess, FloorProcess], others: tuple[int, ...], spec: CellSpec,
                  bodies: list[bytes], args: argparse.Namespace, round_no: int, turn: Turn) -> dict[str, Slice]:
    """The floors of one cell, by kind. c1: laya's in-process predict of the same bodies on one
    thread and on every core, set up as the server is ("floor-1t", "floor-2t"), and on every core
    as laya-serve runs ("floor-2t-laya", libgomp's own spinning); "floor": the fastest. same:
    laya's own ``predict_batch`` of ``--concurrency`` states on every core, set up both ways
    ("floor-batch", "floor-batch-laya"), and the reference server's engine in process, no HTTP,
    its 2 passes calling it with batches of ``--concurrency`` / 2 ("floor-engine"); `best_floor`
    picks "floor" among them. Each setup has its own process (``floors``: server, engine,
    laya-serve): the engine's threads' OpenMP teams would turn another team's two-thread spinning
    into sleeps (docs/benchmarks.md, "The figures behind the engine's constants")."""
    from pytest_laya_reference.cores import auto_cores

    cores = args.ref_threads or auto_cores() or 1
    server, engine, laya_serve = floors
    jobs: list[tuple[str, str, FloorProcess, dict[str, int]]]
    if spec.load == "c1":
        jobs = [(f"floor-{t}t", f"{t} torch thread{'s' if t > 1 else ''}", server, {"threads": t})
                for t in floor_threads(cores)]
        if cores > 1:
            jobs.append(("floor-2t-laya", f"{cores} torch threads, as laya-serve runs", laya_serve, {"threads": cores}))
    else:
        jobs = [("floor-batch", f"laya predict_batch of {args.concurrency}, {cores} threads", server,
                 {"threads": cores, "batch": args.concurrency}),
                ("floor-batch-laya", "the same as laya-serve runs", laya_serve,
                 {"threads": cores, "batch": args.concurrency}),
                ("floor-engine", f"the engine in process, 2 passes x batches of {max(1, args.concurrency // 2)}",
                 engine, {"threads": cores, "engine": 2, "engine_batch": max(1, args.concurrency // 2)})]
    out: dict[str, Slice] = {}
    for kind, what, floor, params in jobs:
        if turn.wait_quiet:
            args.budget.wait((floor.pid, *others), args.max_foreign, args.quiet_wait)
        a, wall = snapshot(floor.pid, others), time.monotonic()
        reply = floor.measure(bodies, warmup_s=turn.warmup_s, duration_s=turn.seconds,
                              min_requests=args.min_requests, **params)
        b, wall = snapshot(floor.pid, others), time.monotonic() - wall
        sl = Slice(reply["latencies_ms"], {}, reply["seconds"], reply["cpu_s"], foreign_cores(a, b, wall))
        lat = sorted(sl.latencies_ms)
        log(f"  round {round_no} {'floor':<10} {spec.label(args.concurrency):<22} {len(lat) / sl.seconds:7.1f} "
            f"req/s  p50 {percentile(lat, 50):8.2f} ms  ({what})  other processes {sl.foreign_cores:.2f} cores")
        out[kind] = sl
    return out


def best_floor(spec: CellSpec, kinds: dict[str, list[Slice]]) -> list[Slice]:
    """A round's "floor" of a cell: the slices of its fastest floor kind over all of the round's
    turns (c1: the lowest p50; same: the most requests/s)."""

    def score(slices: list[Slice]) -> float:
        if spec.load == "c1":
            return percentile(sorted(x for sl in slices for x in sl.latencies_ms), 50)
        return -sum(len(sl.latencies_ms) for sl in slices) / sum(sl.seconds for sl in slices)

    return min(kinds.values(), key=score)


def first_answers(url: str, bodies: list[bytes]) -> list[dict]:
    """The `answers` of each body, one request at a time, via httpx."""
    out = []
    with httpx.Client(timeout=60, trust_env=False) as client:
        for body in bodies:
            r = client.post(url + "/v1/systemone", content=body, headers={"content-type": "application/json"})
            if r.status_code != 200:
                raise RuntimeError(f"sanity request got HTTP {r.status_code}: {r.text[:500]}")
            out.append(r.json()["answers"])
    return out


def sanity_bodies(workload: dict[tuple[int, int, str], list[bytes]]) -> list[bytes]:
    """Per (size, questions): the first body, and two of the mixed load's question sets."""
    out, seen = [], set()
    for (tokens, questions, load), bodies in workload.items():
        if load == "mixed":
            out.extend(bodies[:2])
        elif (tokens, questions) not in seen:
            out.append(bodies[0])
        seen.add((tokens, questions))
    return out


def answers_differ(ref: list[dict], laya: list[dict]) -> bool:
    if ref == laya:
        return False
    for i, (a, b) in enumerate(zip(ref, laya)):
        if a != b:
            log(f"sanity: request {i} differs:\n ref  {a}\n laya {b}")
    log("sanity check FAILED: the reference server's answers differ from laya-serve's; nothing timed")
    return True


# ------------------------------------------------------------------------------ the run

def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "-"
    return out


def machine() -> str:
    libc = " ".join(platform.libc_ver()).strip()
    return f"{os.cpu_count()} cores, {platform.machine()} (Linux {platform.release()}, {libc})"


def measure(name: str, url: str, pid: int, others: tuple[int, ...], spec: CellSpec, bodies: list[bytes],
            args: argparse.Namespace, round_no: int, turn: Turn) -> tuple[Slice, int]:
    """One slice of one cell on one server, measured again while other processes are busy."""
    conc = 1 if spec.load == "c1" else args.concurrency
    retried = 0
    for attempt in range(args.retries + 1):
        if turn.wait_quiet or attempt:
            args.budget.wait((pid, *others), args.max_foreign, args.quiet_wait)
        sl = asyncio.run(_closed_loop(url, bodies, conc, turn.warmup_s, turn.seconds, pid, others,
                                      min_requests=args.min_requests * conc))
        lat = sorted(sl.latencies_ms)
        cpu = sl.server_cpu_s * 1000.0 / len(lat) if lat else float("nan")
        log(f"  round {round_no} {name:<10} {spec.label(args.concurrency):<22} {len(lat) / sl.seconds:7.1f} req/s  "
            f"p50 {percentile(lat, 50):8.2f} ms  CPU {cpu:7.2f} ms/req  errors {sum(sl.errors.values())}  "
            f"other processes {sl.foreign_cores:.2f} cores")
        if sl.foreign_cores <= args.max_foreign:
            break
        if attempt < args.retries and args.budget.retry(turn.warmup_s + turn.seconds):
            log(f"    other processes used {sl.foreign_cores:.2f} cores (> {args.max_foreign}); measuring again")
            retried += 1
        else:
            break
    return sl, retried


def measure_cell(index: int, spec: CellSpec, bodies: list[bytes], servers: dict[str, tuple[str, int]],
                 floors: tuple[FloorProcess, FloorProcess, FloorProcess] | None, args: argparse.Namespace,
                 round_no: int, raw: dict[tuple[str, CellSpec], list[Slice]],
                 retried: dict[tuple[str, CellSpec], int]) -> None:
    """One cell in one round: each turn measures both servers (which goes first alternating from
    turn to turn and cell to cell, ABBA), then the cell's floors."""
    names = list(servers)
    kinds: dict[str, list[Slice]] = {}
    for t, turn in enumerate(turns_of(spec, args)):
        order = names if (index + round_no + t) % 2 else names[::-1]
        for name in order:
            url, pid = servers[name]
            others = tuple(p for n, (_, p) in servers.items() if n != name)
            sl, n = measure(name, url, pid, others, spec, bodies, args, round_no, turn)
            raw.setdefault((name, spec), []).append(sl)
            retried[(name, spec)] = retried.get((name, spec), 0) + n
        if floors is not None and spec.load in ("c1", "same"):
            pids = tuple(p for _, p in servers.values())
            for kind, sl in measure_floor(floors, pids, spec, bodies, args, round_no, turn).items():
                kinds.setdefault(kind, []).append(sl)
    for kind, slices in kinds.items():
        raw.setdefault((kind, spec), []).extend(slices)
    if kinds:
        raw.setdefault(("floor", spec), []).extend(best_floor(spec, kinds))


def run_round(round_no: int, args: argparse.Namespace, checkpoint: str, ref_args: list[str],
              workload: dict[tuple[int, int, str], list[bytes]], results: dict[str, Any],
              raw: dict[tuple[str, CellSpec], list[Slice]], retried: dict[tuple[str, CellSpec], int]) -> bool:
    """Start both servers, check their answers agree, measure every cell on both; False on a mismatch."""
    wanted = {"both": ("laya", "ref"), "laya": ("laya",), "ref": ("ref",)}[args.only]
    servers: dict[str, tuple[str, int]] = {}  # name -> (url, pid)
    lsrv: LayaServeProcess | None = None
    rsrv: ReferenceProcess | None = None
    floors: tuple[FloorProcess, FloorProcess, FloorProcess] | None = None
    try:
        if "laya" in wanted:
            extra = {"LAYA_THREADS": str(args.laya_threads)} if args.laya_threads else None
            log(f"round {round_no}: laya-serve 0.4.15 starting")
            lsrv = LayaServeProcess(checkpoint, max_concurrent=args.max_concurrent, extra_env=extra).start()
            servers["laya-serve"] = (lsrv.url, lsrv.pid)
        if "ref" in wanted:
            log(f"round {round_no}: reference server starting " + " ".join(ref_args))
            rsrv = ReferenceProcess(ref_args, args.ref_threads, args.ref_pythonpath).__enter__()
            servers["reference"] = (rsrv.url, rsrv.pid)
        check = sanity_bodies(workload)
        answers = {name: first_answers(url, check) for name, (url, _) in servers.items()}
        if len(answers) == 2:
            if answers_differ(answers["reference"], answers["laya-serve"]):
                return False
            results["sanity"] = (f"reference answers == laya-serve answers on {len(check)} requests (per state size "
                                 "and question count, the first body and two mixed question sets), checked in "
                                 "every round before timing")
        if "ref" in wanted and ("c1" in args.loads or "same" in args.loads):
            floors = (FloorProcess(checkpoint), FloorProcess(checkpoint), FloorProcess(checkpoint, "laya-serve"))
        for index, spec in enumerate(plan(args)):
            measure_cell(index, spec, workload[(spec.tokens, spec.questions, spec.load)], servers, floors, args,
                         round_no, raw, retried)
        for name, (_, pid) in servers.items():
            status = proc_status(pid)
            prev = results["rss_kib"].get(name)
            if prev is None or status["VmHWM"] > prev["VmHWM"]:
                results["rss_kib"][name] = status
        return True
    finally:
        for one in floors or ():
            one.close()
        if rsrv is not None:
            rsrv.__exit__()
        if lsrv is not None:
            lsrv.stop()


def print_report(results: dict[str, Any]) -> None:
    print(f"\n{results['date']}  {results['machine']}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in results["versions"].items()))
    print(f"command: {results['command']}")
    print(f"reference server args: {' '.join(results['reference_args'])}; LAYA_THREADS reference "
          f"{results['threads']['reference']}, laya-serve {results['threads']['laya-serve']}")
    turns = results.get("turns", 1)
    print(f"{results['rounds']} round(s), {results['duration_s']:g} s measured per cell and server in all"
          + (f" (a c1 cell's in {turns} turns of both servers and the floors)" if turns > 1 else "")
          + f", {results['warmup_s']:g} s warm-up per slice; states: tokens of the checkpoint's tokenizer "
          f"(laya's window cuts each (state, question) row at {WINDOW_TOKENS})\n")
    by = {(c["server"], c["label"]): c for c in results["cells"]}
    labels = list(dict.fromkeys(c["label"] for c in results["cells"]))
    print("| cell | req/s laya | req/s ref | ratio | p50 ms laya | p50 ms ref | ratio | CPU ms/req laya "
          "| CPU ms/req ref | ratio | p99 ms laya / ref | errors | other procs, cores |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")

    def f(c: dict | None, key: str, fmt: str) -> str:
        return format(c[key], fmt) if c else "-"

    def r(a: dict | None, b: dict | None, key: str) -> str:
        return f"{a[key] / b[key]:.2f}x" if a and b and b[key] else "-"

    for label in labels:
        lay, ref = by.get(("laya-serve", label)), by.get(("reference", label))
        errors = sum(c["errors"] for c in (lay, ref) if c)
        foreign = max(c["foreign_cores"] for c in (lay, ref) if c)
        print(f"| {label} | {f(lay, 'rps', '.1f')} | {f(ref, 'rps', '.1f')} | {r(ref, lay, 'rps')} "
              f"| {f(lay, 'p50_ms', '.1f')} | {f(ref, 'p50_ms', '.1f')} | {r(ref, lay, 'p50_ms')} "
              f"| {f(lay, 'cpu_ms_per_request', '.1f')} | {f(ref, 'cpu_ms_per_request', '.1f')} "
              f"| {r(ref, lay, 'cpu_ms_per_request')} | {f(lay, 'p99_ms', '.0f')} / {f(ref, 'p99_ms', '.0f')} "
              f"| {errors} | {foreign:.2f} |")
    floors = [(label, by[("floor", label)], by.get(("reference", label))) for label in labels
               if ("floor", label) in by and by[("floor", label)]["load"] == "c1"]
    if floors:
        print("\n| cell | floor p50 ms (laya in process: 1 / 2 threads / 2 as laya-serve runs) | reference p50 ms | reference over the floor | "
              "reference around its pass | laya-serve over the floor | other procs, cores |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for label, fl, ref in floors:
            lay = by.get(("laya-serve", label))
            kinds = " / ".join(f(by.get((k, label)), "p50_ms", ".2f") for k in ("floor-1t", "floor-2t", "floor-2t-laya"))
            print(f"| {label} | {fl['p50_ms']:.2f} ({kinds}) | {f(ref, 'p50_ms', '.2f')} "
                  f"| {'-' if ref is None else format(ref['p50_ms'] - fl['p50_ms'], '+.2f')} ms "
                  f"| {'-' if ref is None or ref.get('around_p50_ms') is None else format(ref['around_p50_ms'], '.2f')} ms "
                  f"| {'-' if lay is None else format(lay['p50_ms'] - fl['p50_ms'], '+.2f')} ms "
                  f"| {fl['foreign_cores']:.2f} |")
    batches = [(label, by[("floor", label)], by.get(("reference", label))) for label in labels
               if ("floor", label) in by and by[("floor", label)]["load"] == "same"]
    if batches:
        print("\n| cell | floor req/s: laya predict_batch / as laya-serve runs / engine in process | reference req/s | reference / floor "
              "| laya-serve req/s | 2x laya-serve / floor | other procs, cores |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for label, fl, ref in batches:
            lay = by.get(("laya-serve", label))
            kinds = " / ".join(f(by.get((k, label)), "rps", ".1f") for k in ("floor-batch", "floor-batch-laya", "floor-engine"))
            twice = f"{2 * lay['rps'] / fl['rps']:.2f}x" if lay and fl["rps"] else "-"
            print(f"| {label} | {kinds} | {f(ref, 'rps', '.1f')} | {r(ref, fl, 'rps')} "
                  f"| {f(lay, 'rps', '.1f')} | {twice} | {fl['foreign_cores']:.2f} |")
    rss = results["rss_kib"]
    print("\npeak RSS (VmHWM, largest over rounds): " + ", ".join(
        f"{name} {v['VmHWM'] / 1024:.0f} MiB" for name, v in rss.items()))
    if results["goals"]:
        met = sum(1 for g in results["goals"] if g["met"])
        print(f"\ngoals (reference / laya-serve, same run): {met} of {len(results['goals'])} met")
        for g in results["goals"]:
            note = "  (noisy: other processes were busy)" if g["noisy"] else ""
            value = f"{g['ratio']:+.2f} ms" if g.get("unit") else f"{g['ratio']:.2f}x"
            print(f"  [{'met' if g['met'] else 'MISSED'}] {g['cell']}: {g['what']} {value}, goal "
                  f"{g['goal']}{note}")
    if results.get("sanity"):
        print(f"\nsanity: {results['sanity']}")


def csv_ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def csv_loads(text: str) -> list[str]:
    loads = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in loads if x not in LOADS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown load {bad[0]!r}; use {', '.join(LOADS)}")
    return loads


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--floor-worker"]:
        return floor_worker(argv[1], argv[2])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=csv_ints, default=[64, 512, 2048],
                   help="state sizes in tokens, comma-separated (default 64,512,2048)")
    p.add_argument("--questions", type=csv_ints, default=[1, 4, 12],
                   help="questions per request, comma-separated (default 1,4,12)")
    p.add_argument("--loads", type=csv_loads, default=list(LOADS),
                   help="c1 (one client), same (--concurrency clients, one question set), mixed "
                        "(--concurrency clients, --mixed-sets question sets); default c1,same,mixed")
    p.add_argument("--duration", type=float, default=8.0,
                   help="measured seconds per cell and server, over all rounds (default 8)")
    p.add_argument("--warmup", type=float, default=2.0, help="discarded seconds before each slice (default 2)")
    p.add_argument("--min-requests", type=int, default=4, help="a slice goes on (up to 4x its length) until this "
                   "many requests per client were answered in it (default 4)")
    p.add_argument("--rounds", type=int, default=2, help="fresh starts of both servers (default 2)")
    p.add_argument("--turns", type=int, default=5, help="cut each c1 cell's slice into this many turns, each "
                   "measuring both servers and the floors in turn (default 5; 1: each measured once, a minute apart)")
    p.add_argument("--concurrency", type=int, default=16, help="clients in the same and mixed loads (default 16)")
    p.add_argument("--mixed-sets", type=int, default=8, help="distinct question sets in the mixed load (default 8)")
    p.add_argument("--max-concurrent", type=int, default=32,
                   help="both servers' admission limit (default 32, so c=16 never sheds)")
    p.add_argument("--ref-arg", action="append", default=[], help="extra reference-server argument, e.g. "
                   "--ref-arg=--passes=1 (repeatable)")
    p.add_argument("--ref-threads", type=int, default=None, help="LAYA_THREADS for the reference server "
                   "(default: unset, its engine's own rule)")
    p.add_argument("--laya-threads", type=int, default=None, help="LAYA_THREADS for laya-serve "
                   "(default: unset, torch's default)")
    p.add_argument("--ref-pythonpath", default=None, help="directory with a scratch copy of pytest_laya_reference/")
    p.add_argument("--only", choices=("both", "ref", "laya"), default="both")
    p.add_argument("--max-foreign", type=float, default=0.25, help="re-measure a slice when other processes "
                   "used more than this many cores during it (default 0.25)")
    p.add_argument("--retries", type=int, default=1, help="re-measurements per slice (default 1)")
    p.add_argument("--quiet-wait", type=float, default=10.0, help="before each slice, wait up to this many "
                   "seconds for other processes to drop under --max-foreign (default 10)")
    p.add_argument("--quiet-budget", type=float, default=120.0, help="seconds this run may spend in all on "
                   "waiting for quiet and re-measuring (default 120)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers on the way out
    if args.rounds < 1 or args.turns < 1 or args.concurrency < 1 or args.mixed_sets < 2 or not args.sizes \
            or not args.questions:
        p.error("--rounds, --turns and --concurrency must be at least 1, --mixed-sets at least 2, sizes and "
                "questions given")
    args.budget = QuietBudget(args.quiet_budget)

    checkpoint = subprocess.check_output([PY, "-m", "pytest_laya_reference", "--show-checkpoint"], text=True,
                                         cwd=str(ROOT)).strip()
    # The reference server's default in-flight budget (4 x 32,768 tokens) fits 16 requests of 16
    # questions; a larger grid would be shed as 503 overloaded, which is not throughput.
    inflight = args.concurrency * max(args.questions) * WINDOW_TOKENS
    ref_args = ["--max-concurrent", str(args.max_concurrent),
                *(["--max-inflight-tokens", str(inflight)] if inflight > 4 * 32768 else []), *args.ref_arg]
    count = TokenCounter(checkpoint)
    states = {t: sized_states(t, count) for t in args.sizes}
    workload = {}
    for t in args.sizes:
        for q in args.questions:
            for load in args.loads:
                workload[(t, q, load)] = request_bodies(states[t], q, args.mixed_sets if load == "mixed" else 1)
    results: dict[str, Any] = {
        "date": datetime.date.today().isoformat(), "machine": machine(), "versions": versions(),
        "command": " ".join([Path(PY).name, *sys.argv]), "checkpoint": checkpoint,
        "duration_s": args.duration, "rounds": args.rounds, "turns": args.turns, "warmup_s": args.warmup,
        "concurrency": args.concurrency, "mixed_sets": args.mixed_sets, "max_foreign_cores": args.max_foreign,
        "reference_args": ref_args,
        "threads": {"reference": args.ref_threads or "unset", "laya-serve": args.laya_threads or "unset"},
        "state_chars": {t: round(statistics.fmean(len(s) for s in states[t])) for t in args.sizes},
        "cells": [], "rss_kib": {}, "goals": [], "sanity": None,
    }
    log("states (tokens -> mean characters): " + ", ".join(f"{t} -> {c}" for t, c in results["state_chars"].items()))
    started = time.monotonic()
    raw: dict[tuple[str, CellSpec], list[Slice]] = {}
    retried: dict[tuple[str, CellSpec], int] = {}
    for round_no in range(1, args.rounds + 1):
        if not run_round(round_no, args, checkpoint, ref_args, workload, results, raw, retried):
            return 1
    for spec in plan(args):
        for name in ("laya-serve", "reference", "floor", "floor-1t", "floor-2t", "floor-2t-laya", "floor-batch",
                     "floor-batch-laya", "floor-engine"):
            if (name, spec) in raw:
                cell = build_cell(name, spec, args.concurrency, raw[(name, spec)], retried.get((name, spec), 0))
                results["cells"].append(asdict(cell))
    results["goals"] = goals(results["cells"], results["rss_kib"], args.max_foreign)
    results["wall_s"] = round(time.monotonic() - started, 1)
    errors = sum(c["errors"] for c in results["cells"])
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print_report(results)
        print(f"\nwall time {results['wall_s']} s")
    if errors:
        log(f"WARNING: {errors} errors/non-200 responses; the numbers are not comparable")
    return 0


if __name__ == "__main__":
    sys.exit(main())

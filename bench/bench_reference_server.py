#!/usr/bin/env python
"""Reference server vs laya-serve 0.4.15: requests/s, latency and peak RSS, same run, same bytes.

Both servers run the embedded tiny checkpoint (``python -m reference_server --show-checkpoint``),
each as its own subprocess, started and stopped by this script one at a time so they never
compete for the CPU:

- laya-serve 0.4.15 via ``pytest_laya.servers.laya_serve.LayaServeProcess`` (``LAYA_MAX_CONCURRENT``
  from ``--max-concurrent``), asked with ``"model": "tiny"``;
- the reference server via ``python -m reference_server --port 0 --max-concurrent N`` (plus any
  ``--ref-arg``), ready once it prints ``laya-reference-server ready at URL``.

Load: closed-loop clients. Each of C asyncio tasks holds one keep-alive HTTP/1.1 connection
and sends ``POST /v1/systemone`` back to back (a minimal client written here, so that the
load generator costs as little CPU as possible on a small box; TCP_NODELAY is on for it).

Rounds: the machine is shared, so each server is started ``--rounds`` times in ABBA order
(laya-serve, reference, reference, laya-serve, ...), and each start measures every cell for
``--duration / --rounds`` seconds; a cell's numbers pool the raw latencies of all its rounds
(per-round req/s are kept to show the spread). After each start: the sanity check, then every
request body once at c=1 and once in a concurrent burst (not timed), then per cell ``--warmup``
seconds discarded and the measured slice; a request counts when it completes inside it.

Other processes: the box is shared, and a torch server whose threads fill every core collapses
when anything else takes one (OpenMP threads wait for each other). So every slice also measures
the CPU that processes other than the server and this script used (machine busy time from
``/proc/stat`` minus both), waits up to ``--quiet-wait`` s for quiet before each slice, and measures
a slice again (up to ``--retries`` times) when others used more than ``--max-foreign`` cores; the
worst remaining value is reported per cell ("other procs, cores"). Request mix: one choice question (3 options), one
score and one noul, on varied customer-support states (a rotation of 24). Cells, per server:

- ``c=1``  one client, the same question set on every request;
- ``c=16`` (``--concurrency``) clients, the same question set on every request (batchable);
- ``c=16 mixed`` the same clients cycling over ``--mixed-sets`` distinct question sets.

Reported per cell: requests/s, p50 and p99 latency (ms, nearest-rank over the raw list of
every counted request), errors (non-200 or transport failures; must be 0), the server
process's CPU time per counted request (utime+stime from ``/proc/PID/stat`` over the measured
window, all its threads), and per server the peak RSS of the server process (``VmHWM`` from
``/proc/PID/status`` after its last cell, the largest over rounds; it includes loading; psutil is
not installed here). Before timing, the first request of each kind is sent to both servers
with httpx and the reference server's ``answers`` must equal laya-serve's; if not, exit 1.

In-process baseline: in a fresh subprocess, ``laya.load(dir, device="cpu").predict(state,
questions)`` on the same c=1 requests, with torch's intra-op threads set to what the reference
server uses (its engine's rule: ``LAYA_THREADS``, else one core fewer than available) and,
separately, torch's default (what laya-serve uses unless ``LAYA_THREADS`` is set). The server
overhead is reference p50 minus in-process p50 at the same thread count.

Targets (the project's): at c=1 reference p50 <= 1.2x laya-serve's; at c=16 (same question
set) reference requests/s >= 2x laya-serve's; reference peak RSS <= laya-serve's + 10%.

This is a script run by hand, not a test: nothing here asserts on time.

    .venv/bin/python bench/bench_reference_server.py [--duration 15] [--rounds 2] [--warmup 3] [--json]
        [--only ref|laya] [--ref-arg=--batch-window-ms=0 ...] [--ref-threads N] [--laya-threads N]
        [--ref-pythonpath DIR]   # DIR holding a scratch copy of reference_server/ to measure
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
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
TARGET_C1_P50_RATIO = 1.2
TARGET_C16_RPS_RATIO = 2.0
TARGET_RSS_MARGIN = 0.10
VERSIONED = ("laya", "torch", "transformers", "starlette", "uvicorn", "fastapi", "h11", "httpx")

# ------------------------------------------------------------------------------ the requests

STATES = [
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


def question_set(variant: int = 0) -> dict[str, Any]:
    """Choice (3 options) + score + noul; `variant` > 0 gives a distinct but equally shaped set."""
    teams = [("billing", "Charges and refunds"), ("technical", "Software problems"),
             ("shipping", "Deliveries and returns"), ("account", "Logins and personal data"),
             ("sales", "Prices, offers and discount codes")]
    if variant == 0:
        picked = teams[:3]
        suffix = ""
    else:
        start = variant % len(teams)
        picked = [teams[(start + i) % len(teams)] for i in range(3)]
        suffix = f" (queue {variant})"
    return {
        "department": {"type": "choice", "instructions": "Which team should handle this?" + suffix,
                       "criteria": dict(picked)},
        "urgency": {"type": "score", "instructions": "How urgent is the request?" + suffix,
                    "criteria": ["Not urgent", "Needs attention soon", "Needs attention immediately"]},
        "refund": {"type": "noul", "instructions": ("Does the customer ask for a refund?" if variant % 2 == 0
                                                    else "Does the customer want money back?") + suffix},
    }


def request_bodies(sets: int) -> list[bytes]:
    """One JSON body per state; with sets > 1, request i uses question set i % sets."""
    out = []
    for i, state in enumerate(STATES):
        qs = question_set(i % sets) if sets > 1 else question_set(0)
        out.append(json.dumps({"model": "tiny", "state": state, "questions": qs},
                              separators=(",", ":")).encode())
    return out


# ------------------------------------------------------------------------------ load generator

class _Conn:
    """One keep-alive HTTP/1.1 connection; a deliberately small client (no pooling, no TLS)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, head: bytes, body: bytes) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(head + body)
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        length = None
        close = False
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value.strip())
            elif name == "connection" and value.strip().lower() == "close":
                close = True
        if length is None:
            raise RuntimeError("response without Content-Length")
        data = await self.reader.readexactly(length)
        if close:
            await self.close()
        return status, data

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except Exception:  # noqa: BLE001
                pass
        self.reader = self.writer = None


@dataclass
class Cell:
    server: str
    label: str
    concurrency: int
    question_sets: int
    duration_s: float
    requests: int = 0
    rps: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    mean_ms: float = 0.0
    errors: int = 0
    error_kinds: dict = field(default_factory=dict)
    server_cpu_cores: float = 0.0           # server process CPU seconds per second in the window
    server_cpu_ms_per_request: float = 0.0  # server process CPU ms per counted request
    round_rps: list = field(default_factory=list)     # per round, to show the spread
    round_p50_ms: list = field(default_factory=list)
    foreign_cores: float = 0.0   # worst slice: CPU used by other processes on the machine, in cores
    retried_slices: int = 0      # slices measured again because other processes were busy


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


def snapshot(pid: int) -> tuple[float, float, float]:
    """(server CPU s, this process's CPU s, machine busy s), to tell our load from others'."""
    return cpu_seconds(pid), cpu_seconds(os.getpid()), system_busy_seconds()


def foreign_load(pid: int, window_s: float = 0.5) -> float:
    """Cores used by processes other than `pid` and this one over the next `window_s` seconds."""
    a = snapshot(pid)
    time.sleep(window_s)
    b = snapshot(pid)
    return max(0.0, (b[2] - a[2]) - (b[0] - a[0]) - (b[1] - a[1])) / window_s


def wait_quiet(pid: int, max_foreign: float, timeout_s: float) -> float:
    """Wait (at most `timeout_s`) until other processes leave the CPU alone; returns their last load."""
    deadline = time.monotonic() + timeout_s
    while True:
        load = foreign_load(pid)
        if load <= max_foreign or time.monotonic() >= deadline:
            return load
        log(f"    waiting: other processes use {load:.2f} cores")
        time.sleep(1.5)


class QuietBudget:
    """Seconds this run may spend, in all, waiting for quiet and re-measuring (bounds the wall time)."""

    def __init__(self, seconds: float) -> None:
        self.left = float(seconds)

    def wait(self, pid: int, max_foreign: float, cap_s: float) -> float:
        started = time.monotonic()
        load = wait_quiet(pid, max_foreign, max(0.0, min(cap_s, self.left)))
        self.left -= time.monotonic() - started
        return load

    def retry(self, cost_s: float) -> bool:
        """Spend `cost_s` on a re-measurement if the budget still has it."""
        if self.left < cost_s:
            return False
        self.left -= cost_s
        return True


Slice = tuple  # (latencies ms, errors by kind, measured s, server CPU s, foreign load in cores)


async def _closed_loop(url: str, bodies: list[bytes], concurrency: int, warmup_s: float,
                       duration_s: float, pid: int) -> Slice:
    hostport = url.split("://", 1)[1]
    host, port = hostport.rsplit(":", 1)
    heads = [(f"POST /v1/systemone HTTP/1.1\r\nHost: {hostport}\r\nContent-Type: application/json\r\n"
              f"Accept: application/json\r\nContent-Length: {len(b)}\r\n\r\n").encode() for b in bodies]
    loop = asyncio.get_running_loop()
    start = loop.time()
    measure_from = start + warmup_s
    measure_to = measure_from + duration_s
    latencies: list[float] = []
    errors: dict[str, int] = {}
    snaps: dict[str, tuple[float, float, float]] = {}
    loop.call_at(measure_from, lambda: snaps.__setitem__("from", snapshot(pid)))
    loop.call_at(measure_to, lambda: snaps.__setitem__("to", snapshot(pid)))

    async def client(k: int) -> None:
        conn = _Conn(host, int(port))
        i = k * 7  # each client starts at a different state
        try:
            while True:
                t0 = loop.time()
                if t0 >= measure_to:
                    return
                j = i % len(bodies)
                i += 1
                try:
                    status, data = await conn.post(heads[j], bodies[j])
                    kind = None if status == 200 and b'"answers"' in data else f"HTTP {status}"
                except (OSError, asyncio.IncompleteReadError, RuntimeError, ValueError) as exc:
                    await conn.close()
                    kind = type(exc).__name__
                t1 = loop.time()
                if measure_from <= t1 <= measure_to:
                    if kind is None:
                        latencies.append((t1 - t0) * 1000.0)
                    else:
                        errors[kind] = errors.get(kind, 0) + 1
                elif kind is not None and t1 < measure_from:
                    errors["warm-up " + kind] = errors.get("warm-up " + kind, 0) + 1
        finally:
            await conn.close()

    await asyncio.gather(*(client(k) for k in range(concurrency)))
    (srv0, me0, busy0), (srv1, me1, busy1) = snaps["from"], snaps["to"]
    server_cpu = srv1 - srv0
    foreign = max(0.0, (busy1 - busy0) - server_cpu - (me1 - me0)) / duration_s
    return latencies, errors, duration_s, server_cpu, foreign


def run_cell(url: str, pid: int, concurrency: int, sets: int, warmup_s: float,
             duration_s: float) -> Slice:
    """One slice of one cell: (latencies ms, errors by kind, measured s, server CPU s, foreign cores)."""
    return asyncio.run(_closed_loop(url, request_bodies(sets), concurrency, warmup_s, duration_s, pid))


def build_cell(server: str, label: str, concurrency: int, sets: int,
               slices: list[Slice]) -> Cell:
    """Pool the raw slices of every round into one cell."""
    latencies = sorted(x for sl in slices for x in sl[0])
    errors: dict[str, int] = {}
    for sl in slices:
        for kind, n in sl[1].items():
            errors[kind] = errors.get(kind, 0) + n
    dur = sum(sl[2] for sl in slices)
    cpu_s = sum(sl[3] for sl in slices)
    cell = Cell(server, label, concurrency, sets, dur)
    cell.requests = len(latencies)
    cell.rps = len(latencies) / dur
    cell.p50_ms = percentile(latencies, 50)
    cell.p99_ms = percentile(latencies, 99)
    cell.mean_ms = statistics.fmean(latencies) if latencies else float("nan")
    cell.errors = sum(errors.values())
    cell.error_kinds = errors
    cell.server_cpu_cores = cpu_s / dur
    cell.server_cpu_ms_per_request = cpu_s * 1000.0 / len(latencies) if latencies else float("nan")
    cell.round_rps = [len(sl[0]) / sl[2] for sl in slices]
    cell.round_p50_ms = [percentile(sorted(sl[0]), 50) for sl in slices]
    cell.foreign_cores = max(sl[4] for sl in slices)
    return cell


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
    """`python -m reference_server --port 0 ...` as a subprocess; `url` once it says it is ready."""

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
        cmd = [PY, "-m", "reference_server", "--port", "0", *self.args]
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


def sanity_answers(url: str) -> list[dict]:
    """The `answers` of each distinct request kind (c=1 body, each mixed set), via httpx."""
    bodies = request_bodies(1)[:1] + request_bodies(MIXED_SETS_FOR_SANITY)[:MIXED_SETS_FOR_SANITY]
    out = []
    with httpx.Client(timeout=30, trust_env=False) as client:
        for body in bodies:
            r = client.post(url + "/v1/systemone", content=body, headers={"content-type": "application/json"})
            if r.status_code != 200:
                raise RuntimeError(f"sanity request got HTTP {r.status_code}: {r.text[:500]}")
            out.append(r.json()["answers"])
    return out


MIXED_SETS_FOR_SANITY = 8


def same_answers(ref: list[dict] | None, laya: list[dict] | None) -> bool:
    """True when either side is not known yet, or both servers answered identically."""
    if ref is None or laya is None:
        return True
    if ref == laya:
        return True
    for i, (a, b) in enumerate(zip(ref, laya)):
        if a != b:
            log(f"sanity: request kind {i} differs:\n ref  {a}\n laya {b}")
    log("sanity check FAILED: the reference server's answers differ from laya-serve's; nothing timed")
    return False


def prime(url: str, args: argparse.Namespace) -> None:
    """Every body once at c=1, then each body again in a burst of --concurrency clients; not timed."""
    asyncio.run(_prime(url, args))


async def _prime(url: str, args: argparse.Namespace) -> None:
    hostport = url.split("://", 1)[1]
    host, port = hostport.rsplit(":", 1)
    bodies = request_bodies(1) + request_bodies(args.mixed_sets)

    async def send(indices: range) -> None:
        conn = _Conn(host, int(port))
        try:
            for i in indices:
                head = (f"POST /v1/systemone HTTP/1.1\r\nHost: {hostport}\r\nContent-Type: application/json"
                        f"\r\nContent-Length: {len(bodies[i])}\r\n\r\n").encode()
                await conn.post(head, bodies[i])
        finally:
            await conn.close()

    await send(range(len(bodies)))
    n = max(1, args.concurrency)
    await asyncio.gather(*(send(range(k, len(bodies), n)) for k in range(n)))


def peak(results: dict[str, Any], name: str, status: dict[str, int]) -> None:
    """Keep the largest VmHWM over rounds (each round is a fresh process)."""
    prev = results["rss_kib"].get(name)
    if prev is None or status["VmHWM"] > prev["VmHWM"]:
        results["rss_kib"][name] = status


def plan(args: argparse.Namespace) -> list[tuple[str, int, int]]:
    """(label, concurrency, question sets) of every cell, in the order they run."""
    return [("c=1", 1, 1), (f"c={args.concurrency}", args.concurrency, 1),
            (f"c={args.concurrency} mixed", args.concurrency, args.mixed_sets)]


def measure_server(name: str, url: str, pid: int, args: argparse.Namespace, round_no: int,
                   raw: dict[tuple[str, str], list], retried: dict[tuple[str, str], int]) -> None:
    per_round = args.duration / args.rounds
    for label, conc, sets in plan(args):
        for attempt in range(args.retries + 1):
            args.budget.wait(pid, args.max_foreign, args.quiet_wait)
            sl = run_cell(url, pid, conc, sets, args.warmup, per_round)
            lat = sorted(sl[0])
            log(f"  round {round_no} {name:<10} {label:<12} {len(lat) / sl[2]:7.1f} req/s  "
                f"p50 {percentile(lat, 50):7.2f} ms  p99 {percentile(lat, 99):7.2f} ms  errors "
                f"{sum(sl[1].values())}  other processes {sl[4]:.2f} cores")
            if sl[4] <= args.max_foreign:
                break
            if attempt < args.retries and args.budget.retry(args.warmup + per_round):
                log(f"    other processes used {sl[4]:.2f} cores (> {args.max_foreign}); measuring again")
                retried[(name, label)] = retried.get((name, label), 0) + 1
            else:
                break
        raw.setdefault((name, label), []).append(sl)


# ------------------------------------------------------------------------------ in-process

INPROC_CODE = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
import torch
default_threads = torch.get_num_threads()
mode = sys.argv[3]
try:
    from reference_server.engine import _auto_threads
    auto = _auto_threads(default_threads)
except Exception:
    auto = None
n = (auto or default_threads) if mode == "reference" else default_threads
torch.set_num_threads(n)
import laya
agent = laya.load(sys.argv[2], device="cpu")
reqs = json.loads(sys.stdin.read())
for r in reqs[:8]:
    agent.predict(r["state"], r["questions"])
def busy():
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return (f[0] + f[1] + f[2] + f[5] + f[6] + f[7]) / os.sysconf("SC_CLK_TCK")
lat = []
b0, c0 = busy(), time.process_time()
t_start = time.perf_counter()
deadline = t_start + float(sys.argv[4])
i = 0
while time.perf_counter() < deadline or len(lat) < 30:
    r = reqs[i % len(reqs)]; i += 1
    t0 = time.perf_counter(); agent.predict(r["state"], r["questions"]); lat.append((time.perf_counter() - t0) * 1000)
wall = time.perf_counter() - t_start
foreign = max(0.0, (busy() - b0) - (time.process_time() - c0)) / wall
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]
print(json.dumps({"latencies_ms": lat, "threads": n, "torch_default_threads": default_threads,
                  "reference_auto_threads": auto, "vmhwm_kib": int(hwm),
                  "foreign_cores": foreign}))
"""


def in_process(checkpoint: str, mode: str, seconds: float, threads: int | None,
               args: argparse.Namespace) -> dict[str, Any]:
    """The in-process baseline, measured again (up to --retries times) while other processes are busy."""
    for attempt in range(args.retries + 1):
        args.budget.wait(os.getpid(), args.max_foreign, args.quiet_wait)
        data = _in_process_once(checkpoint, mode, seconds, threads)
        data["retried"] = attempt
        if data["foreign_cores"] <= args.max_foreign or not args.budget.retry(seconds + 4.0):
            break
        log(f"    other processes used {data['foreign_cores']:.2f} cores; measuring again")
    return data


def _in_process_once(checkpoint: str, mode: str, seconds: float, threads: int | None) -> dict[str, Any]:
    reqs = [json.loads(b) for b in request_bodies(1)]
    env = clean_env()
    if threads and mode == "reference":
        env["LAYA_THREADS"] = str(threads)
    out = subprocess.run([PY, "-c", INPROC_CODE, str(ROOT), checkpoint, mode, str(seconds)],
                         input=json.dumps(reqs), capture_output=True, text=True, env=env, timeout=300)
    if out.returncode != 0:
        raise RuntimeError("in-process run failed:\n" + out.stderr[-3000:])
    data = json.loads(out.stdout.strip().splitlines()[-1])
    lat = sorted(data.pop("latencies_ms"))
    data.update(calls=len(lat), p50_ms=percentile(lat, 50), p99_ms=percentile(lat, 99))
    return data


# ------------------------------------------------------------------------------ report

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


def verdicts(results: dict[str, Any], conc: int, max_foreign: float) -> list[dict[str, Any]]:
    by = {(c["server"], c["label"]): c for c in results["cells"]}

    def clean(*cells: dict[str, Any]) -> str | None:
        worst = max(c["foreign_cores"] for c in cells)
        return None if worst <= max_foreign else f"other processes used up to {worst:.2f} cores during these cells"

    rss = results["rss_kib"]
    out = []
    ref1, lay1 = by.get(("reference", "c=1")), by.get(("laya-serve", "c=1"))
    if ref1 and lay1:
        ratio = ref1["p50_ms"] / lay1["p50_ms"]
        out.append({"target": f"c=1: reference p50 <= {TARGET_C1_P50_RATIO}x laya-serve's",
                    "value": f"{ref1['p50_ms']:.2f} ms vs {lay1['p50_ms']:.2f} ms = {ratio:.2f}x",
                    "met": ratio <= TARGET_C1_P50_RATIO, "unreliable": clean(ref1, lay1)})
    refn, layn = by.get(("reference", f"c={conc}")), by.get(("laya-serve", f"c={conc}"))
    if refn and layn:
        ratio = refn["rps"] / layn["rps"]
        out.append({"target": f"c={conc}: reference req/s >= {TARGET_C16_RPS_RATIO}x laya-serve's",
                    "value": f"{refn['rps']:.1f} vs {layn['rps']:.1f} req/s = {ratio:.2f}x",
                    "met": ratio >= TARGET_C16_RPS_RATIO, "unreliable": clean(refn, layn)})
    if "reference" in rss and "laya-serve" in rss:
        ref_peak, laya_peak = rss["reference"]["VmHWM"], rss["laya-serve"]["VmHWM"]
        out.append({"target": f"reference peak RSS <= laya-serve's + {TARGET_RSS_MARGIN:.0%}",
                    "value": f"{ref_peak / 1024:.0f} MiB vs {laya_peak / 1024:.0f} MiB = {ref_peak / laya_peak:.3f}x",
                    "met": ref_peak <= laya_peak * (1 + TARGET_RSS_MARGIN), "unreliable": None})
    return out


def print_report(results: dict[str, Any]) -> None:
    print(f"\n{results['date']}  {results['machine']}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in results["versions"].items()))
    print(f"threads: reference {results['threads']['reference']}, laya-serve {results['threads']['laya-serve']}")
    print(f"reference args: {' '.join(results['reference_args'])}\n")
    print("| server | cell | req/s | req/s per round | p50 ms | p99 ms | requests | errors | server CPU ms/req "
          "| other procs, cores | peak RSS MiB |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c in results["cells"]:
        hwm = results["rss_kib"].get(c["server"], {}).get("VmHWM")
        shown = f"{hwm / 1024:.0f}" if hwm else "-"
        spread = " / ".join(f"{x:.0f}" for x in c["round_rps"])
        print(f"| {c['server']} | {c['label']} | {c['rps']:.1f} | {spread} | {c['p50_ms']:.2f} | {c['p99_ms']:.2f} | "
              f"{c['requests']:,} | {c['errors']} | {c['server_cpu_ms_per_request']:.2f} | {c['foreign_cores']:.2f} | "
              f"{shown} |")
    print()
    for name, d in results.get("in_process", {}).items():
        print(f"in-process predict ({name}, {d['threads']} thread(s)): p50 {d['p50_ms']:.2f} ms, "
              f"p99 {d['p99_ms']:.2f} ms over {d['calls']} calls, peak RSS {d['vmhwm_kib'] / 1024:.0f} MiB, "
              f"other processes {d['foreign_cores']:.2f} cores")
    ov = results.get("overhead")
    if ov:
        print(f"server overhead at c=1 (reference p50 - in-process p50, {ov['threads']} thread(s)): "
              f"{ov['diff_ms']:+.2f} ms, ratio {ov['ratio']:.2f}x")
    ovl = results.get("overhead_laya")
    if ovl:
        print(f"laya-serve overhead at c=1 (p50 - in-process p50, {ovl['threads']} thread(s)): "
              f"{ovl['diff_ms']:+.2f} ms, ratio {ovl['ratio']:.2f}x")
    print()
    for v in results["targets"]:
        note = f"  (UNRELIABLE: {v['unreliable']})" if v.get("unreliable") else ""
        print(f"[{'MET' if v['met'] else 'MISSED'}] {v['target']}: {v['value']}{note}")
    if results.get("sanity"):
        print(f"\nsanity: {results['sanity']}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=15.0, help="measured seconds per cell (default 15)")
    p.add_argument("--warmup", type=float, default=3.0, help="discarded seconds before each cell (default 3)")
    p.add_argument("--rounds", type=int, default=2, help="server restarts per server, ABBA order; each round "
                   "measures --duration/--rounds s per cell (default 2)")
    p.add_argument("--concurrency", type=int, default=16, help="clients in the concurrent cells (default 16)")
    p.add_argument("--mixed-sets", type=int, default=8, help="distinct question sets in the mixed cell (default 8)")
    p.add_argument("--max-concurrent", type=int, default=32,
                   help="both servers' admission limit (default 32, so c=16 never sheds)")
    p.add_argument("--ref-arg", action="append", default=[], help="extra reference-server argument, e.g. "
                   "--ref-arg=--batch-window-ms=0 (repeatable)")
    p.add_argument("--ref-threads", type=int, default=None, help="LAYA_THREADS for the reference server "
                   "(default: unset, its engine's own rule)")
    p.add_argument("--laya-threads", type=int, default=None, help="LAYA_THREADS for laya-serve "
                   "(default: unset, torch's default)")
    p.add_argument("--ref-pythonpath", default=None, help="directory with a scratch copy of reference_server/")
    p.add_argument("--only", choices=("both", "ref", "laya"), default="both")
    p.add_argument("--in-process-seconds", type=float, default=6.0, help="0 skips the in-process baseline")
    p.add_argument("--max-foreign", type=float, default=0.25, help="re-measure a slice when other processes "
                   "used more than this many cores during it (default 0.25)")
    p.add_argument("--retries", type=int, default=2, help="re-measurements per slice (default 2)")
    p.add_argument("--quiet-wait", type=float, default=10.0, help="before each slice, wait up to this many "
                   "seconds for other processes to drop under --max-foreign (default 10)")
    p.add_argument("--quiet-budget", type=float, default=60.0, help="seconds this run may spend in all on "
                   "waiting for quiet and re-measuring (default 60)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args(argv)
    args.budget = QuietBudget(args.quiet_budget)

    checkpoint = subprocess.check_output([PY, "-m", "reference_server", "--show-checkpoint"], text=True,
                                         cwd=str(ROOT)).strip()
    ref_args = ["--max-concurrent", str(args.max_concurrent), *args.ref_arg]
    results: dict[str, Any] = {
        "date": datetime.date.today().isoformat(), "machine": machine(), "versions": versions(),
        "command": " ".join([Path(PY).name, *sys.argv]), "checkpoint": checkpoint,
        "duration_s": args.duration, "rounds": args.rounds, "warmup_s": args.warmup, "concurrency": args.concurrency,
        "mixed_sets": args.mixed_sets, "max_foreign_cores": args.max_foreign, "max_concurrent": args.max_concurrent, "reference_args": ref_args,
        "cells": [], "rss_kib": {}, "in_process": {}, "targets": [], "sanity": None,
    }
    started = time.monotonic()
    laya_answers: list[dict] | None = None
    ref_answers: list[dict] | None = None
    raw: dict[tuple[str, str], list] = {}
    retried: dict[tuple[str, str], int] = {}
    servers = {"both": ["laya", "ref"], "laya": ["laya"], "ref": ["ref"]}[args.only]
    for round_no in range(1, args.rounds + 1):
        # ABBA order: laya-serve first in odd rounds, the reference server first in even ones.
        for which in (servers if round_no % 2 else servers[::-1]):
            if which == "laya":
                extra = {"LAYA_THREADS": str(args.laya_threads)} if args.laya_threads else None
                log(f"round {round_no}: laya-serve 0.4.15 starting")
                with LayaServeProcess(checkpoint, max_concurrent=args.max_concurrent, extra_env=extra) as lsrv:
                    pid = lsrv._proc.pid  # type: ignore[union-attr]
                    answers = sanity_answers(lsrv.url)
                    if laya_answers is None:
                        laya_answers = answers
                    if not same_answers(ref_answers, answers):
                        return 1
                    prime(lsrv.url, args)
                    measure_server("laya-serve", lsrv.url, pid, args, round_no, raw, retried)
                    peak(results, "laya-serve", proc_status(pid))
            else:
                log(f"round {round_no}: reference server starting " + " ".join(ref_args))
                with ReferenceProcess(ref_args, args.ref_threads, args.ref_pythonpath) as rsrv:
                    answers = sanity_answers(rsrv.url)
                    if ref_answers is None:
                        ref_answers = answers
                    if not same_answers(answers, laya_answers):
                        return 1
                    prime(rsrv.url, args)
                    measure_server("reference", rsrv.url, rsrv.pid, args, round_no, raw, retried)
                    peak(results, "reference", proc_status(rsrv.pid))
    if ref_answers is not None and laya_answers is not None:
        results["sanity"] = (f"reference answers == laya-serve answers on {len(ref_answers)} requests "
                             "(the c=1 body and one per mixed question set), checked before timing each server")
    for name in ("laya-serve", "reference"):
        for label, conc, sets in plan(args):
            if (name, label) in raw:
                cell = build_cell(name, label, conc, sets, raw[(name, label)])
                cell.retried_slices = retried.get((name, label), 0)
                results["cells"].append(asdict(cell))
    if args.in_process_seconds > 0:
        for mode in ("reference", "torch-default"):
            log(f"in-process predict ({mode} threads)")
            results["in_process"][mode] = in_process(checkpoint, mode, args.in_process_seconds, args.ref_threads, args)
    ref_threads = args.ref_threads or (results["in_process"].get("reference", {}).get("threads") or "engine default")
    laya_threads = args.laya_threads or (results["in_process"].get("torch-default", {}).get("threads") or "torch default")
    results["threads"] = {"reference": ref_threads, "laya-serve": laya_threads}
    by = {(c["server"], c["label"]): c for c in results["cells"]}
    for key, server, mode in (("overhead", "reference", "reference"), ("overhead_laya", "laya-serve", "torch-default")):
        cell, base = by.get((server, "c=1")), results["in_process"].get(mode)
        if cell and base:
            results[key] = {"threads": base["threads"], "in_process_p50_ms": base["p50_ms"],
                            "server_p50_ms": cell["p50_ms"], "diff_ms": cell["p50_ms"] - base["p50_ms"],
                            "ratio": cell["p50_ms"] / base["p50_ms"]}
    results["targets"] = verdicts(results, args.concurrency, args.max_foreign)
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

#!/usr/bin/env python
"""Load and hostile traffic against the reference server: what it serves, sheds and survives.

The reference server runs as its own subprocess (``python -m pytest_laya_reference --port 0
--max-concurrent M`` on the embedded tiny checkpoint, 127.0.0.1 only), so its RSS is its own.
Every phase is bounded by time and the script stops the server when it ends. Phases:

- ``idle``: after a warm-up of a few decisions, the RSS the others are compared with.
- ``load c=N`` for each N of ``--clients`` (default M and 2M: at and beyond ``--max-concurrent``):
  N closed-loop clients, each on one keep-alive connection, send ``POST /v1/systemone`` back to
  back for ``--duration`` s (3 questions, a rotation of 8 states; with ``--state-tokens N``, 24
  states of N tokens of the checkpoint's tokenizer, as bench_reference_server.py sizes them). A 503 must be ``overloaded``
  with ``Retry-After: 1`` (shed, explained); the client then pauses 20 ms instead of the second
  it is told, to keep the pressure on.
- ``hostile``: for ``--hostile-duration`` s, M normal clients plus two senders of large
  bodies (a padded valid 2 MiB one, a 150,000-key state, a million-character instructions, a
  body nested 1,000 deep), a client that sends a heavy decision (64 questions of 100 options)
  and vanishes 200 ms later, and one connection dripping a body one byte per 100 ms.
- ``idle flood``: for ``--flood-duration`` s (longer than the server's 10 s head timeout), M-1
  normal clients (leaving the newcomer an inference slot) and a newcomer (a fresh connection per decision, every 100 ms) while a separate process opens ``--flood`` connections as fast as it can that
  never finish a request head (half send nothing, half a partial head) and holds them. Reported:
  the connections the server held (sampled from /proc), how many of the flood it closed, and
  what it wrote to its log.
- ``slow bodies``: for ``--slowloris-duration`` s (longer than twice the 10 s body timeout), M-1
  normal clients and ``--drips`` connections dripping bodies one byte per ``--drip-interval`` s
  (2 B/s); each drip re-opens 50 ms after its answer (408, or 503 when the body-read budget is
  spent), and a newcomer as above. Decisions must still be served: a drip holds a body-read slot, never an inference
  slot.
- ``expensive``: M normal clients while one client sends, back to back, requests that ask for
  far more inference than the token budget allows (64 questions at ``max_len`` 8192 on a 34 KB
  state, a batch of 64 states x 64 questions): each must be refused at once.
- ``admitted``: on the otherwise idle server, one at a time, the costliest requests the token
  budget admits (4 questions at ``max_len`` 8192 on the 34 KB state, 64 x 100 options...) and
  the issue's 64 x 8192 one, then the first of them 4 times at once (the in-flight token budget
  admits ``--passes`` of them); statuses, seconds and peak RSS are reported (under ``flood``).
  Each hostile request has the outcomes it may get (e.g. 408 body_timeout or 503 overloaded).
- ``settle``: ``--settle`` s of nothing, then the RSS after. The hostile phase and a settle run
  ``--hostile-rounds`` times (default 2) before the slowloris one: equal RSS after each settle
  means what stays above idle is kept (caches), not leaked.

Throughout, ``/livez`` is read every ``--livez-interval`` s on a fresh connection, by a
separate process (so the load generator's own event-loop lag is not counted as the server's). Every
response is held to ``Spec.target()``; a violation, a transport error, or a status/code outside
a request's expected outcomes counts as an error, and the script exits 1 if any happened.

Reported per phase: requests, served (200), shed (503 overloaded), refused as expected (a
hostile request's documented 4xx), errors, p50/p99 latency of the 200s (ms, nearest rank),
/livez p50/p99/max (ms), the server's RSS at the end of the phase (MiB) and its peak (VmHWM).

This is a script run by hand, not a test: nothing here asserts on time. The box is shared, so
figures vary; docs/reliability.md has the last run's.

    .venv/bin/python bench/load_reference_server.py [--max-concurrent 4] [--clients 4,8]
        [--duration 5] [--hostile-duration 8] [--hostile-rounds 2] [--flood 3000] [--flood-duration 14]
        [--server-nofile 2048] [--slowloris-duration 24] [--drips 48] [--drip-interval 0.5]
        [--phases load,hostile,flood,slow,expensive,admitted] [--server-root DIR] [--settle 3] [--json]
        [--state-tokens N]

``--server-root DIR`` runs the server from another checkout (the one before a change), with only
``--max-concurrent`` on its command line; ``--server-nofile N`` starts it with RLIMIT_NOFILE N, so
a flood larger than N makes the point that a few thousand connections made against the default
limit, without tens of thousands of sockets.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pytest_laya import Spec  # noqa: E402

READY_PREFIX = "laya-reference-server ready at "
HOST = "127.0.0.1"
STATES = [
    "I was charged twice for my order. Please refund the duplicate today.",
    "The app crashes every time I open the settings page.",
    "Where is my parcel? It was due last Tuesday.",
    "Can I upgrade my plan to the business tier?",
    "Your support agent was very helpful, thank you!",
    "I want to cancel my subscription immediately.",
    "The invoice shows the wrong company address.",
    "Login fails with an error after the last update.",
]
QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team should handle this?",
             "criteria": {"billing": "Charges and refunds", "technical": "Bugs", "sales": "Plans"}},
    "urgency": {"type": "score", "instructions": "How urgent is it?", "criteria": ["low", "medium", "high"]},
    "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
}
MAX_BODY = 2 * 1024 * 1024


def use_sized_states(tokens: int) -> None:
    """Make the normal clients' states `tokens` tokens long (the grid benchmark's states)."""
    global STATES
    from bench_reference_server import TokenCounter, sized_states  # this script's directory is on sys.path

    from pytest_laya_reference.tiny_checkpoint import embedded_checkpoint_dir

    STATES = sized_states(tokens, TokenCounter(str(embedded_checkpoint_dir())))


def decision_body(i: int) -> bytes:
    return json.dumps({"state": STATES[i % len(STATES)], "questions": QUESTIONS}).encode()


def post_head(body: bytes, *, length: int | None = None, close: bool = False, path: str = "/v1/systemone") -> bytes:
    head = (f"POST {path} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body) if length is None else length}\r\n")
    return (head + ("Connection: close\r\n" if close else "") + "\r\n").encode()


# -- hostile bodies and what each may get --------------------------------------------------------

def _padded(size: int) -> bytes:
    raw = decision_body(0)
    return raw + b" " * (size - len(raw))


HOSTILE_BODIES: list[tuple[str, bytes, set[tuple[int, str]]]] = [
    ("2 MiB valid", _padded(MAX_BODY), {(200, "-"), (503, "overloaded")}),
    ("150k-key state", json.dumps({"state": {str(i): 1 for i in range(150_000)}, "questions": QUESTIONS}).encode(),
     {(413, "state_too_large"), (503, "overloaded")}),
    ("1M-char instructions", json.dumps({"state": "x", "questions": {"q": {
        "type": "noul", "instructions": "Is it urgent? " * 71_429}}}).encode(), {(200, "-"), (503, "overloaded")}),
    ("nested 1000", ('{"state": ' + "[" * 1000 + '"x"' + "]" * 1000 + ', "questions": {"q": {"type": "noul", '
                     '"instructions": "?"}}}').encode(), {(400, "malformed_request"), (503, "overloaded")}),
]
HEAVY = json.dumps({"state": "x " * 2000, "questions": {
    f"q{j}": {"type": "choice", "instructions": "Which topic?", "criteria": [f"topic {i}" for i in range(100)]}
    for j in range(64)}}).encode()
DRIP_OUTCOMES = {(408, "body_timeout"), (503, "overloaded")}
_NOUL = {"type": "noul", "instructions": "Does the customer ask for a refund?"}
EXPENSIVE_BODIES: list[tuple[str, str, bytes]] = [
    # (kind, path, body): the 34 KB body with 64 questions at max_len 8192 (about 64 s of
    # inference on the tiny checkpoint before the token budget), and a batch of 64 x 64.
    ("64q x max_len 8192", "/v1/systemone", json.dumps({
        "state": "The customer writes at length about the order. " * 700,
        "questions": {f"q{i}": _NOUL for i in range(64)}, "max_len": 8192}).encode()),
    ("batch 64 states x 64q", "/v1/systemone/batch", json.dumps({
        "states": ["The customer writes at length. " * 20] * 64,
        "questions": {f"q{i}": _NOUL for i in range(64)}}).encode()),
]
EXPENSIVE_OUTCOMES = {(413, "too_large"), (503, "overloaded")}  # checked once admitted to inference
_CHOICE_100 = {"type": "choice", "instructions": "Which topic?", "criteria": [f"topic {i}" for i in range(100)]}
_LONG_STATE = "The customer writes at length about the order. " * 700  # 34 KB
ADMITTED_BODIES: list[tuple[str, str, bytes]] = [
    # What the token budget still admits, one at a time on an otherwise idle server (each at
    # most 32,768 tokens), and the request, which it refuses.
    ("4q x max_len 8192, 34 KB state", "/v1/systemone", json.dumps({
        "state": _LONG_STATE, "questions": {f"q{i}": _NOUL for i in range(4)}, "max_len": 8192}).encode()),
    ("64q x 100 options, default window", "/v1/systemone", HEAVY),
    ("64q, default window, 34 KB state", "/v1/systemone", json.dumps({
        "state": _LONG_STATE, "questions": {f"q{i}": _NOUL for i in range(64)}}).encode()),
    ("batch 64 x 700-char states x 1q", "/v1/systemone/batch", json.dumps({
        "states": ["s" * 700] * 64, "questions": {"q": _NOUL}}).encode()),
    EXPENSIVE_BODIES[0],
]


# -- a small HTTP/1.1 client ---------------------------------------------------------------------

@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def code(self) -> str:
        if self.headers.get("content-type") == "application/problem+json":
            try:
                return json.loads(self.body).get("code", "-")
            except ValueError:
                return "?"
        return "-"


async def read_reply(reader: asyncio.StreamReader) -> Reply:
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return Reply(int(status_line.split()[1]), headers, body)


async def close(writer: asyncio.StreamWriter | None) -> None:
    if writer is not None:
        writer.close()
        try:
            await writer.wait_closed()
        except OSError:
            pass


# -- measurements ----------------------------------------------------------------------------

@dataclass
class Phase:
    name: str
    seconds: float = 0.0
    outcomes: Counter = field(default_factory=Counter)   # (kind, status, code) -> n
    latencies: list[float] = field(default_factory=list)  # seconds, 200s of normal clients
    livez: list[float] = field(default_factory=list)
    livez_slow_at: list[float] = field(default_factory=list)  # phase-relative start of probes over 100 ms
    livez_failures: int = 0
    started: float = 0.0  # monotonic, shared with the probe process on Linux
    ended: float = 0.0
    errors: list[str] = field(default_factory=list)
    rss_mib: float = 0.0
    hwm_mib: float = 0.0
    held_max: int = 0            # connections the server held (sampled), most and at the end
    held_end: int = 0
    log_bytes: int = 0           # what the server wrote to its log during the phase
    flood: dict[str, Any] = field(default_factory=dict)  # the flood process's report
    request_ms: list[float] = field(default_factory=list)  # hostile requests' own latency
    newcomer_ms: list[float] = field(default_factory=list)  # fresh-connection decisions served

    def count(self, kind: str, reply: Reply, path: str = "/v1/systemone", method: str = "POST",
              expected: set[tuple[int, str]] | None = None) -> None:
        self.outcomes[(kind, reply.status, reply.code)] += 1
        violations = Spec.target().violations(method, path, reply.status, reply.headers, reply.body)
        if violations:
            self.errors.append(f"{kind}: {reply.status} breaks the target spec: {violations[0]}")
        if expected is not None and (reply.status, reply.code) not in expected:
            self.errors.append(f"{kind}: unexpected {reply.status} {reply.code}: {reply.body[:120]!r}")
        if reply.status == 503 and reply.headers.get("retry-after") != "1":
            self.errors.append(f"{kind}: 503 without Retry-After: 1")

    def summary(self) -> dict[str, Any]:
        by = Counter()
        for (_kind, status, code), n in self.outcomes.items():
            key = ("served" if status == 200 else "shed" if (status, code) == (503, "overloaded")
                   else "refused" if 400 <= status < 500 else "vanished" if status == 0 else "other")
            by[key] += n
        return {
            "phase": self.name, "seconds": round(self.seconds, 1),
            "requests": sum(self.outcomes.values()), "served": by["served"], "shed": by["shed"],
            "refused_as_expected": by["refused"], "vanished": by["vanished"],
            "errors": len(self.errors) + by["other"],
            "p50_ms": ms(percentile(self.latencies, 50)), "p99_ms": ms(percentile(self.latencies, 99)),
            "livez_probes": len(self.livez), "livez_failures": self.livez_failures,
            "livez_p50_ms": ms(percentile(self.livez, 50)), "livez_p99_ms": ms(percentile(self.livez, 99)),
            "livez_max_ms": ms(max(self.livez) if self.livez else None),
            "livez_over_100ms": len(self.livez_slow_at), "livez_over_100ms_at_s": self.livez_slow_at[:10],
            "rss_mib": round(self.rss_mib, 1), "peak_rss_mib": round(self.hwm_mib, 1),
            "held_max": self.held_max, "held_end": self.held_end, "log_bytes": self.log_bytes,
            "flood": self.flood,
            "hostile_max_ms": round(max(self.request_ms), 1) if self.request_ms else None,
            "newcomer_served": len(self.newcomer_ms),
            "newcomer_p50_ms": round(percentile(self.newcomer_ms, 50), 1) if self.newcomer_ms else None,
            "newcomer_max_ms": round(max(self.newcomer_ms), 1) if self.newcomer_ms else None,
            "outcomes": {f"{k} {s} {c}": n for (k, s, c), n in sorted(self.outcomes.items())},
            "error_samples": self.errors[:5],
        }


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q / 100 * len(ordered) + 0.5)) - 1))]


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def held_connections(pid: int) -> int:
    """TCP sockets the server process holds, its listener not counted."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            count += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return max(0, count - 1)


def memory_mib(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process, in MiB."""
    values = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(("VmRSS:", "VmHWM:")):
                name, value = line.split(":")
                values[name] = int(value.split()[0]) / 1024
    return values["VmRSS"], values["VmHWM"]


# -- the traffic -------------------------------------------------------------------------------

def probe_livez_forever(port: int, interval_s: float) -> None:
    """Read /livez every `interval_s` s, printing `started latency ok` lines until killed.

    Runs in its own process (`--livez-probe PORT`): in the load generator's event loop, the
    probe also measured that loop's lag behind hundreds of hostile replies, not the server's.
    It stops by itself once the script that started it is gone.
    """
    import socket

    parent = os.getppid()
    request = f"GET /livez HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n".encode()
    while os.getppid() == parent:
        started = time.monotonic()
        ok = False
        try:
            with socket.create_connection((HOST, port), timeout=10) as sock:
                sock.sendall(request)
                reply = b""
                while chunk := sock.recv(65536):
                    reply += chunk
            ok = reply.startswith(b"HTTP/1.1 200 ")
        except OSError:
            pass
        print(f"{started} {time.monotonic() - started} {int(ok)}", flush=True)
        time.sleep(max(0.0, interval_s - (time.monotonic() - started)))


class LivezProbe:
    """`probe_livez_forever` in a subprocess; `samples()` stops it and returns what it read."""

    def __init__(self, port: int, interval_s: float) -> None:
        # A file, not a pipe: nobody reads until the end, and a full pipe (64 KiB, about 90 s of
        # samples) would stop the probe where it prints.
        self.out = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, __file__, "--livez-probe", str(port),
                                      "--livez-interval", str(interval_s)],
                                     stdin=subprocess.DEVNULL, stdout=self.out)

    def samples(self) -> list[tuple[float, float, bool]]:
        self.proc.terminate()
        self.proc.wait(timeout=15)
        self.out.seek(0)
        out = self.out.read().decode("ascii", "replace")
        self.out.close()
        rows = [line.split() for line in out.splitlines()]
        return [(float(row[0]), float(row[1]), row[2] == "1") for row in rows if len(row) == 3]  # the last may be cut

    @staticmethod
    def assign(samples: list[tuple[float, float, bool]], phases: list[Phase]) -> None:
        for started, latency, ok in samples:
            for phase in phases:
                if phase.started <= started < phase.ended:
                    phase.livez.append(latency)
                    if latency > 0.1:
                        phase.livez_slow_at.append(round(started - phase.started, 2))
                    phase.livez_failures += not ok
                    break


async def normal_client(port: int, phase: Phase, index: int, until: float) -> None:
    reader = writer = None
    i = index
    while time.monotonic() < until:
        body = decision_body(i)
        i += 1
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection(HOST, port)
            started = time.monotonic()
            writer.write(post_head(body) + body)
            reply = await asyncio.wait_for(read_reply(reader), 60)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as exc:
            phase.errors.append(f"client: {type(exc).__name__}: {exc}")
            await close(writer)
            reader = writer = None
            continue
        phase.count("decision", reply, expected={(200, "-"), (503, "overloaded")})
        if reply.status == 200:
            phase.latencies.append(time.monotonic() - started)
        else:
            await asyncio.sleep(0.02)
        if reply.headers.get("connection", "").lower() == "close":
            await close(writer)
            reader = writer = None
    await close(writer)


async def newcomer_client(port: int, phase: Phase, until: float) -> None:
    """A legitimate client that opens a fresh connection for each decision, every 100 ms.

    During a flood, connections the load generator opened before it keep working whatever
    the server's accept loop does; a new client shows whether the server still takes them.
    """
    i = 0
    while time.monotonic() < until:
        body = decision_body(i)
        i += 1
        writer = None
        started = time.monotonic()
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, port), 10)
            writer.write(post_head(body, close=True) + body)
            reply = await asyncio.wait_for(read_reply(reader), 10)
            phase.count("newcomer", reply, expected={(200, "-"), (503, "overloaded")})
            if reply.status == 200:
                phase.newcomer_ms.append((time.monotonic() - started) * 1000)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as exc:
            phase.outcomes[("newcomer failed", 0, type(exc).__name__)] += 1
            phase.errors.append(f"newcomer: {type(exc).__name__}: {exc}")
        finally:
            await close(writer)
        await asyncio.sleep(max(0.0, 0.1 - (time.monotonic() - started)))


async def drip_client(port: int, phase: Phase, until: float, interval_s: float = 0.1) -> None:
    body = decision_body(0)
    while time.monotonic() < until:
        writer = None
        try:
            reader, writer = await asyncio.open_connection(HOST, port)
            writer.write(post_head(body, close=True))
            pending = asyncio.ensure_future(read_reply(reader))
            for byte in body:
                if pending.done() or time.monotonic() >= until:
                    break
                writer.write(bytes([byte]))
                await asyncio.wait([pending], timeout=interval_s)
            if not pending.done() and time.monotonic() >= until:
                pending.cancel()
                break
            reply = await asyncio.wait_for(pending, 30)
            phase.count("drip", reply, expected=DRIP_OUTCOMES)
            await asyncio.sleep(0.05)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
            pass  # the server answered and closed while we were still writing: counted if read
        finally:
            await close(writer)


async def big_body_sender(port: int, phase: Phase, until: float) -> None:
    i = 0
    while time.monotonic() < until:
        kind, body, expected = HOSTILE_BODIES[i % len(HOSTILE_BODIES)]
        i += 1
        writer = None
        try:
            reader, writer = await asyncio.open_connection(HOST, port)
            writer.write(post_head(body, close=True) + body)
            phase.count(kind, await asyncio.wait_for(read_reply(reader), 60), expected=expected)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as exc:
            phase.errors.append(f"{kind}: {type(exc).__name__}: {exc}")
        finally:
            await close(writer)


async def expensive_sender(port: int, phase: Phase, until: float) -> None:
    i = 0
    while time.monotonic() < until:
        kind, path, body = EXPENSIVE_BODIES[i % len(EXPENSIVE_BODIES)]
        i += 1
        writer = None
        try:
            reader, writer = await asyncio.open_connection(HOST, port)
            started = time.monotonic()
            writer.write(post_head(body, close=True, path=path) + body)
            reply = await asyncio.wait_for(read_reply(reader), 120)
            phase.request_ms.append((time.monotonic() - started) * 1000)
            phase.count(kind, reply, path=path, expected=EXPENSIVE_OUTCOMES)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as exc:
            phase.errors.append(f"{kind}: {type(exc).__name__}: {exc}")
        finally:
            await close(writer)
        await asyncio.sleep(0.05)


def flood_forever(port: int, count: int, hold_s: float) -> None:
    """Open `count` connections that never finish a request head, hold them `hold_s` s, report.

    Runs in its own process (`--flood-worker PORT`), so the sockets are not the load
    generator's. Prints one JSON line: opened, refused (connect failed), seconds to open them,
    and how many the server had closed (reset or end of stream) by the end of the hold.
    """
    import socket

    sockets = []
    refused = 0
    started = time.monotonic()
    for i in range(count):
        if time.monotonic() - started > hold_s / 2:
            break  # a server that stopped accepting: the kernel's queue is full and connects hang
        try:
            sock = socket.create_connection((HOST, port), timeout=2)
            if i % 2:
                sock.sendall(f"POST /v1/systemone HTTP/1.1\r\nHost: {HOST}\r\nContent-Ty".encode())
            sockets.append(sock)
        except OSError:
            refused += 1
    opened_s = time.monotonic() - started
    opened_at = time.monotonic()
    time.sleep(max(0.0, hold_s - opened_s))
    closed = 0
    for sock in sockets:
        sock.setblocking(False)
        try:
            closed += sock.recv(1) == b""
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
        sock.close()
    print(json.dumps({"opened": len(sockets), "refused": refused, "open_s": round(opened_s, 2),
                      "closed_by_server": closed, "started": started, "opened_at": opened_at}), flush=True)


async def flood_phase_worker(port: int, phase: Phase, pid: int, count: int, seconds: float) -> None:
    proc = await asyncio.create_subprocess_exec(sys.executable, __file__, "--flood-worker", str(port),
                                                "--flood", str(count), "--flood-duration", str(seconds),
                                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    out, _ = await proc.communicate()
    try:
        phase.flood = json.loads(out.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        phase.errors.append(f"the flood process said nothing useful: {out[-200:]!r}")
        return
    # Where the burst lay in the phase (CLOCK_MONOTONIC is shared by processes on Linux).
    phase.flood["burst_s"] = [round(phase.flood.pop("started") - phase.started, 2),
                              round(phase.flood.pop("opened_at") - phase.started, 2)]


async def sample_held(pid: int, phase: Phase, until: float) -> None:
    while time.monotonic() < until:
        phase.held_max = max(phase.held_max, held_connections(pid))
        await asyncio.sleep(0.2)


async def _send_one(port: int, phase: Phase, kind: str, path: str, body: bytes,
                    expected: set[tuple[int, str]]) -> str:
    writer = None
    try:
        reader, writer = await asyncio.open_connection(HOST, port)
        started = time.monotonic()
        writer.write(post_head(body, close=True, path=path) + body)
        reply = await asyncio.wait_for(read_reply(reader), 600)
        phase.count(kind, reply, path=path, expected=expected)
        return f"{reply.status} {reply.code} in {time.monotonic() - started:.2f} s"
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as exc:
        phase.errors.append(f"{kind}: {type(exc).__name__}: {exc}")
        return type(exc).__name__
    finally:
        await close(writer)


async def admitted_one_by_one(port: int, phase: Phase, pid: int) -> None:
    """Each of ADMITTED_BODIES once, one after another, then the widest of them 4 times at once
    (the batcher would fuse them into one pass); statuses, seconds and peak RSS in phase.flood."""
    phase.flood = {}
    for kind, path, body in ADMITTED_BODIES:
        phase.flood[kind] = await _send_one(port, phase, kind, path, body, {(200, "-"), (413, "too_large")})
    phase.flood["peak_rss_mib_alone"] = round(memory_mib(pid)[1], 1)
    kind, path, body = ADMITTED_BODIES[0]
    phase.flood[f"{kind}, 4 at once"] = await asyncio.gather(*(
        _send_one(port, phase, kind + ", 4 at once", path, body, {(200, "-"), (503, "overloaded")}) for _ in range(4)))
    phase.flood["peak_rss_mib_4_at_once"] = round(memory_mib(pid)[1], 1)


async def vanishing_client(port: int, phase: Phase, until: float) -> None:
    while time.monotonic() < until:
        writer = None
        try:
            _, writer = await asyncio.open_connection(HOST, port)
            writer.write(post_head(HEAVY) + HEAVY)
            await writer.drain()
            await asyncio.sleep(0.2)
            phase.outcomes[("vanished mid-inference", 0, "-")] += 1
        except OSError:
            pass
        finally:
            await close(writer)
        await asyncio.sleep(0.5)


async def run_phase(phase: Phase, port: int, pid: int, seconds: float, *, clients: int, hostile: bool,
                    drips: int, drip_interval_s: float = 0.1, flood: int = 0, expensive: bool = False,
                    newcomer: bool = False, log: Any = None) -> Phase:
    print(f"phase {phase.name}: {seconds:g} s", file=sys.stderr, flush=True)
    phase.started = started = time.monotonic()
    until = started + seconds
    log_before = log.size() if log is not None else 0
    tasks = [asyncio.sleep(seconds), sample_held(pid, phase, until)]
    tasks += [normal_client(port, phase, i, until) for i in range(clients)]
    tasks += [drip_client(port, phase, until, drip_interval_s) for _ in range(drips)]
    if hostile:
        tasks += [big_body_sender(port, phase, until), big_body_sender(port, phase, until),
                  vanishing_client(port, phase, until)]
    if flood:
        tasks.append(flood_phase_worker(port, phase, pid, flood, seconds))
    if expensive:
        tasks.append(expensive_sender(port, phase, until))
    if newcomer:
        tasks.append(newcomer_client(port, phase, until))
    await asyncio.gather(*tasks)
    phase.ended = time.monotonic()
    phase.seconds = phase.ended - started
    phase.rss_mib, phase.hwm_mib = memory_mib(pid)
    phase.held_end = held_connections(pid)
    phase.log_bytes = (log.size() if log is not None else 0) - log_before
    return phase


# -- the server --------------------------------------------------------------------------------

class ReferenceProcess:
    """The reference server as a subprocess on a free loopback port; stopped on exit."""

    def __init__(self, max_concurrent: int, *, root: Path = ROOT, nofile: int | None = None) -> None:
        self.args = [sys.executable, "-m", "pytest_laya_reference", "--host", HOST, "--port", "0",
                     "--max-concurrent", str(max_concurrent)]
        self.root = root
        self.nofile = nofile
        self.log = tempfile.TemporaryFile()
        self.proc: subprocess.Popen | None = None
        self.port = 0

    def _limits(self) -> None:
        if self.nofile:
            import resource

            resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, self.nofile))

    def size(self) -> int:
        return os.fstat(self.log.fileno()).st_size

    def __enter__(self) -> ReferenceProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAYA_")}
        env["PYTHONPATH"] = str(self.root)
        self.proc = subprocess.Popen(self.args, cwd=self.root, env={**env, "PYTHONUNBUFFERED": "1"},
                                     stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                                     preexec_fn=self._limits)
        deadline = time.monotonic() + 120
        while True:
            text = self.text()
            ready = [line for line in text.splitlines() if line.startswith(READY_PREFIX)]
            if ready:
                self.port = int(ready[0].rsplit(":", 1)[1])
                return self
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError("the reference server did not become ready:\n" + text[-2000:])
            time.sleep(0.05)

    def text(self) -> str:
        fd = self.log.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode("utf-8", "replace")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)


async def warm_up(port: int, phase: Phase) -> None:
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        for i in range(len(STATES)):
            body = decision_body(i)
            writer.write(post_head(body) + body)
            phase.count("warm-up", await read_reply(reader), expected={(200, "-")})
    finally:
        await close(writer)


async def run_phases(args: argparse.Namespace, server: ReferenceProcess, phases: list[Phase]) -> None:
    port, pid, m = server.port, server.proc.pid, args.max_concurrent
    quiet = dict(clients=0, hostile=False, drips=0, log=server)
    if "load" in args.phases:
        for clients in args.clients:
            phases.append(await run_phase(Phase(f"load c={clients}"), port, pid, args.duration,
                                          clients=clients, hostile=False, drips=0, log=server))
    if "hostile" in args.phases:
        for round_no in range(1, args.hostile_rounds + 1):
            phases.append(await run_phase(Phase(f"hostile c={m} #{round_no}"), port, pid, args.hostile_duration,
                                          clients=m, hostile=True, drips=1, log=server))
            phases.append(await run_phase(Phase(f"settle #{round_no}"), port, pid, args.settle, **quiet))
    if "flood" in args.phases:
        phases.append(await run_phase(Phase(f"idle flood c={max(1, m - 1)}+1+{args.flood}"), port, pid, args.flood_duration,
                                      clients=max(1, m - 1), hostile=False, drips=0, flood=args.flood, newcomer=True,
                                      log=server))
        phases.append(await run_phase(Phase("settle (flood)"), port, pid, args.settle, **quiet))
    if "slow" in args.phases:
        phases.append(await run_phase(Phase(f"slow bodies c={max(1, m - 1)}+1+{args.drips}"), port, pid, args.slowloris_duration,
                                      clients=max(1, m - 1), hostile=False, drips=args.drips,
                                      drip_interval_s=args.drip_interval, newcomer=True, log=server))
        phases.append(await run_phase(Phase("settle (slow)"), port, pid, args.settle, **quiet))
    if "expensive" in args.phases:
        phases.append(await run_phase(Phase(f"expensive c={m}+1"), port, pid, args.duration, clients=m,
                                      hostile=False, drips=0, expensive=True, log=server))
    if "admitted" in args.phases:
        phase = Phase("admitted, one at a time")
        print(f"phase {phase.name}", file=sys.stderr, flush=True)
        phase.started = time.monotonic()
        await admitted_one_by_one(port, phase, pid)
        phase.ended = time.monotonic()
        phase.seconds = phase.ended - phase.started
        phase.rss_mib, phase.hwm_mib = memory_mib(pid)
        phases.append(phase)
    phases.append(await run_phase(Phase("settle"), port, pid, args.settle, **quiet))


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    Spec.target()  # load once, before anything is timed
    phases: list[Phase] = []
    root = Path(args.server_root).resolve() if args.server_root else ROOT
    with ReferenceProcess(args.max_concurrent, root=root, nofile=args.server_nofile) as server:
        pid = server.proc.pid
        idle = Phase("idle")
        await warm_up(server.port, idle)
        await asyncio.sleep(1.0)
        idle.rss_mib, idle.hwm_mib = memory_mib(pid)
        phases.append(idle)
        probe = LivezProbe(server.port, args.livez_interval)
        try:
            await asyncio.sleep(0.5)  # let the probe's interpreter start before the first phase
            await run_phases(args, server, phases)
        finally:
            LivezProbe.assign(probe.samples(), phases)
        log_errors = [line for line in server.text().splitlines() if "Traceback" in line or "ERROR" in line]
        log_lines = server.text().splitlines()
    summaries = [p.summary() for p in phases]
    rss_idle, rss_after = phases[0].rss_mib, phases[-1].rss_mib
    return {
        "max_concurrent": args.max_concurrent, "state_tokens": args.state_tokens, "server_root": str(root), "server_nofile": args.server_nofile,
        "phases": summaries,
        "rss_after_each_settle_mib": [round(p.rss_mib, 1) for p in phases if p.name.startswith("settle")],
        "rss_idle_mib": round(rss_idle, 1), "rss_after_mib": round(rss_after, 1),
        "rss_change_pct": round(100 * (rss_after - rss_idle) / rss_idle, 1),
        "peak_rss_mib": round(max(p.hwm_mib for p in phases), 1),
        "errors": sum(s["errors"] for s in summaries) + sum(p.livez_failures for p in phases),
        "server_log_errors": log_errors[:5], "server_log_error_lines": len(log_errors),
        "server_log_bytes": server.size(), "server_log_tail": [line[:200] for line in log_lines[-4:]],
    }


def print_report(result: dict[str, Any]) -> None:
    states = f"states of {result['state_tokens']} tokens" if result["state_tokens"] else "one-sentence states"
    print(f"reference server, tiny checkpoint, --max-concurrent {result['max_concurrent']}, {states}")
    cols = ("phase", "seconds", "requests", "served", "shed", "refused_as_expected", "vanished", "errors",
            "p50_ms", "p99_ms", "livez_probes", "livez_failures",
            "livez_p50_ms", "livez_p99_ms", "livez_max_ms", "livez_over_100ms", "rss_mib", "held_max", "held_end", "log_bytes",
            "hostile_max_ms", "newcomer_served", "newcomer_p50_ms", "newcomer_max_ms")
    print(" | ".join(cols))
    for s in result["phases"]:
        print(" | ".join(str(s[c]) for c in cols))
    for s in result["phases"]:
        if s["outcomes"]:
            print(f"  {s['phase']}: " + ", ".join(f"{k}: {n}" for k, n in s["outcomes"].items()))
        if s["flood"]:
            print(f"  {s['phase']}: flood {s['flood']}")
        for sample in s["error_samples"]:
            print(f"  ERROR {s['phase']}: {sample}")
    print(f"RSS idle {result['rss_idle_mib']} MiB, after {result['rss_after_mib']} MiB "
          f"({result['rss_change_pct']:+}%), peak {result['peak_rss_mib']} MiB; "
          f"after each settle {result['rss_after_each_settle_mib']} MiB")
    print(f"unexplained errors: {result['errors']}; server log: {result['server_log_bytes']} bytes, "
          f"{result['server_log_error_lines']} error/traceback lines; last lines: {result['server_log_tail']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-concurrent", type=int, default=4)
    parser.add_argument("--clients", default=None, help="comma-separated client counts (default: M and 2M)")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per load phase")
    parser.add_argument("--hostile-duration", type=float, default=8.0, help="seconds of each hostile phase")
    parser.add_argument("--hostile-rounds", type=int, default=2, help="hostile phases, each followed by a settle")
    parser.add_argument("--slowloris-duration", type=float, default=24.0,
                        help="seconds of the slow-bodies phase (keep it above twice the server's 10 s body timeout)")
    parser.add_argument("--drips", type=int, default=48,
                        help="slow-drip connections in the slow-bodies phase (default 48: more than the 32 body-read slots)")
    parser.add_argument("--drip-interval", type=float, default=0.5, help="seconds between a drip's bytes (default 0.5)")
    parser.add_argument("--flood", type=int, default=3000, help="idle connections in the flood phase")
    parser.add_argument("--flood-duration", type=float, default=14.0,
                        help="seconds of the flood phase (keep it above the server's 10 s head timeout)")
    parser.add_argument("--server-nofile", type=int, default=2048,
                        help="RLIMIT_NOFILE for the server process (default 2048, below the flood); 0 leaves it")
    parser.add_argument("--server-root", default=None, help="run the server from this checkout instead")
    parser.add_argument("--phases", default="load,hostile,flood,slow,expensive,admitted",
                        help="comma-separated phases to run (default all: load,hostile,flood,slow,expensive,admitted)")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds of quiet before the last RSS reading")
    parser.add_argument("--livez-interval", type=float, default=0.05)
    parser.add_argument("--state-tokens", type=int, default=None,
                        help="normal clients' states of this many tokens (default: 8 one-sentence states)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--livez-probe", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--flood-worker", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.livez_probe:
        probe_livez_forever(args.livez_probe, args.livez_interval)
        return 0
    if args.flood_worker:
        flood_forever(args.flood_worker, args.flood, args.flood_duration)
        return 0
    args.phases = {p.strip() for p in args.phases.split(",") if p.strip()}
    unknown = args.phases - {"load", "hostile", "flood", "slow", "expensive", "admitted"}
    if unknown:
        parser.error(f"--phases: unknown {sorted(unknown)}")
    args.server_nofile = args.server_nofile or None
    if args.max_concurrent < 1:
        parser.error("--max-concurrent must be at least 1")
    args.clients = ([int(c) for c in args.clients.split(",")] if args.clients
                    else [args.max_concurrent, 2 * args.max_concurrent])
    if args.state_tokens is not None:
        if args.state_tokens < 1:
            parser.error("--state-tokens must be at least 1")
        use_sized_states(args.state_tokens)
    result = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print_report(result)
    return 1 if result["errors"] or result["server_log_errors"] else 0


if __name__ == "__main__":
    sys.exit(main())

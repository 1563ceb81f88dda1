"""Measure the served client under the attacks of issue 16; prints the figures docs/reliability.md quotes.

    .venv/bin/python scripts/measure_client_attacks.py            # about 30 s on 2 cores

Every server is a `ScriptedServer` on 127.0.0.1 that stops by itself; every bomb is 1.8 KB on
the wire and is never expanded past the client's 8 MiB cap (each bomb runs in a child process
so its peak RSS is its own). Figures:

- deadline overshoot: `decide(timeout_s=2)` against a head trickled one byte per 50 ms on a
  new connection, on a reused keep-alive one, on the retry after a keep-alive 502, and on the
  /health read after an answer without `served_by`; sync and async;
- RSS growth and time for stacked compression bombs (peak RSS of the child minus its RSS just
  before the call);
- how many hostile responses and settings made `decide()` raise anything but a `LayaError`;
- how many times a canary key or URL password shows in the kit's frames' locals and the
  messages of errors raised while they are in play (what `--showlocals` prints).
"""

from __future__ import annotations

import asyncio
import json
import resource
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402,F401 - imported here, so the first async decision does not time an import
import httpcore._async  # noqa: E402,F401

from pytest_laya import AsyncServedLayaClient, LayaError, ServedLayaClient  # noqa: E402
from pytest_laya.faults import Respond, ScriptedServer, Trickle  # noqa: E402

Q = {"refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"}}
ANSWER = {"model": "m", "answers": {"refund": {"type": "noul", "noul": 0.9, "confidence": 0.9}},
          "usage": {"input_tokens": 1, "output_tokens": 0},
          "served_by": {"checkpoint": "c", "revision": "r", "device": "cpu", "weights_dtype": "float32", "compiled": False}}
NO_SERVED_BY = {**{k: v for k, v in ANSWER.items() if k != "served_by"}, "routing": {"model": "m", "repo": "r"}}
DEADLINE_S = 2.0


def trickled(response: Respond) -> Trickle:
    return Trickle(response, chunk_size=1, interval_s=0.05, head=True)


DEADLINE_CASES = {
    "new connection, trickled head": lambda: [trickled(Respond(200, ANSWER))],
    "reused keep-alive connection, trickled head": lambda: [Respond(200, ANSWER), trickled(Respond(200, ANSWER))],
    "retry after a keep-alive 502": lambda: [Respond(200, ANSWER), Respond(502, "bad gateway"), trickled(Respond(200, ANSWER))],
    "/health read after an answer without served_by": lambda: [Respond(200, ANSWER), Respond(200, NO_SERVED_BY),
                                                                trickled(Respond(200, {"status": "ok"}))],
}


def timed_last(kind: str, url: str, count: int) -> float:
    """Seconds the last of `count` decisions on one client took (errors are outcomes too)."""
    if kind == "sync":
        with ServedLayaClient(url, timeout_s=DEADLINE_S) as client:
            for _ in range(count):
                started = time.monotonic()
                try:
                    client.decide("x", Q)
                except LayaError:
                    pass
            return time.monotonic() - started

    async def run() -> float:
        async with AsyncServedLayaClient(url, timeout_s=DEADLINE_S) as client:
            for _ in range(count):
                started = time.monotonic()
                try:
                    await client.decide("x", Q)
                except LayaError:
                    pass
            return time.monotonic() - started

    return asyncio.run(run())


def deadlines() -> list[float]:
    overshoots = []
    for name, script in DEADLINE_CASES.items():
        for kind in ("sync", "async"):
            actions = script()
            warm = 1 if len(actions) > 1 else 0
            with ScriptedServer(*actions) as server:
                elapsed = timed_last(kind, server.url, warm + 1)
            overshoots.append(elapsed - DEADLINE_S)
            print(f"  {kind:5} {name}: {elapsed:.3f} s for a {DEADLINE_S:g} s deadline "
                  f"(overshoot {1000 * (elapsed - DEADLINE_S):+.0f} ms)")
    return overshoots


def bomb_child(name: str, kind: str) -> None:
    """In a fresh process: one decision against a bomb; prints JSON {rss_growth_mib, seconds, code}."""
    sys.path.insert(0, str(ROOT))
    from tests.helpers.bombs import STACKED_GZIP, gzip_deflate

    if name == "gzip, gzip":
        body = STACKED_GZIP
    elif name == "gzip, deflate":
        body = gzip_deflate()
    else:
        import gzip

        body = gzip.compress(bytes(64 << 20), 9)
    with ScriptedServer(Respond(200, body, content_type="application/json", headers={"Content-Encoding": name})) as server:
        with open("/proc/self/statm") as handle:
            before = int(handle.read().split()[1]) * resource.getpagesize()
        started = time.monotonic()
        code = None
        try:
            if kind == "sync":
                with ServedLayaClient(server.url, timeout_s=DEADLINE_S) as client:
                    client.decide("x", Q)
            else:
                async def run() -> None:
                    async with AsyncServedLayaClient(server.url, timeout_s=DEADLINE_S) as client:
                        await client.decide("x", Q)
                asyncio.run(run())
        except LayaError as exc:
            code = exc.code
        seconds = time.monotonic() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"rss_growth_mib": (peak - before) / 2**20, "seconds": seconds, "code": code, "wire": len(body)}))


def bombs() -> None:
    for name in ("gzip, gzip", "gzip, deflate", "gzip"):
        for kind in ("sync", "async"):
            out = subprocess.run([sys.executable, __file__, "--bomb", name, kind], capture_output=True, text=True,
                                 timeout=60, check=True).stdout
            figures = json.loads(out.strip().splitlines()[-1])
            what = "1 GiB behind 2 layers" if "," in name else "64 MiB behind 1 layer"
            print(f"  {kind:5} Content-Encoding: {name} ({figures['wire']:,} bytes on the wire, {what}): "
                  f"[{figures['code']}] in {figures['seconds']:.3f} s, RSS +{figures['rss_growth_mib']:.1f} MiB")


def raw_exceptions() -> tuple[int, int]:
    deep = b"[" * 100_000 + b"]" * 100_000
    responses = [
        Respond(200, deep, content_type="application/json"),
        Respond(500, deep, content_type="application/json"),
        Respond(422, deep, content_type="application/problem+json"),
        Respond(503, "busy", headers={"Retry-After": "\u00b2"}),
        Respond(200, b"not gzip", content_type="application/json", headers={"Content-Encoding": "gzip"}),
        Respond(200, b"x", content_type="application/json", headers={"Content-Encoding": "br"}),
    ]
    settings = [dict(api_key="sk-canary\n"), dict(api_key="sk-canary\u00e9"), dict(api_key="sk-\u4e2d"),
                dict(url="http://[::1"), dict(url="http://127.0.0.1:99999"), dict(url="http://a\x00b"),
                dict(url="http://exa mple.com")]
    raw = total = 0
    for response in responses:
        for kind in ("sync", "async"):
            total += 1
            with ScriptedServer(response, default=response) as server:
                try:
                    timed_last(kind, server.url, 1)
                except Exception:  # noqa: BLE001 - what is being counted
                    raw += 1
    for kwargs in settings:
        total += 1
        url = kwargs.pop("url", "http://127.0.0.1:1")
        try:
            ServedLayaClient(url, **kwargs).decide("x", Q)
        except LayaError:
            pass
        except Exception:  # noqa: BLE001
            raw += 1
    return raw, total


def canaries() -> tuple[int, int]:
    key, password = "sk-canary/7f3a+9c2e=5b1d4e60", "hunter2-canary"
    kit = str(ROOT / "pytest_laya")
    occurrences = checked = 0

    def count(exc: BaseException) -> None:
        nonlocal occurrences, checked
        stack = traceback.TracebackException.from_exception(exc, capture_locals=True).stack
        text = str(exc) + "".join(str(frame.locals) for frame in stack if frame.filename.startswith(kit))
        occurrences += text.count(key) + text.count(password)
        checked += 1

    def refuse(exchange: object) -> None:
        raise RuntimeError("a validator refusing the response inside _send")

    with ScriptedServer(default=Respond(200, ANSWER)) as server:
        for kwargs in (dict(api_key=key + "\n"), dict(api_key=key + "\u00e9"), dict(api_key=key, on_exchange=refuse)):
            try:
                ServedLayaClient(server.url, **kwargs).decide("x", Q)
            except Exception as exc:  # noqa: BLE001
                count(exc)
        url = server.url.replace("http://", f"http://laya:{password}@")
        decision = ServedLayaClient(url).decide("x", Q)
        occurrences += decision.provenance.url.count(password) + repr(decision).count(password)
        try:
            ServedLayaClient(url, timeout_s=-1)
        except LayaError as exc:
            count(exc)
    return occurrences, checked


def main() -> None:
    print(f"deadline (decide(timeout_s={DEADLINE_S:g}), head trickled 1 byte / 50 ms):")
    overshoots = deadlines()
    print(f"  overshoot median {1000 * statistics.median(overshoots):.0f} ms, max {1000 * max(overshoots):.0f} ms "
          f"over {len(overshoots)} cases")
    print("compression bombs (each in a fresh process):")
    bombs()
    raw, total = raw_exceptions()
    print(f"raw exceptions out of decide() or the constructor: {raw} of {total} hostile inputs")
    found, checked = canaries()
    print(f"canary key / URL password occurrences in messages and kit frames' locals: {found} in {checked} errors")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--bomb":
        bomb_child(sys.argv[2], sys.argv[3])
    else:
        main()

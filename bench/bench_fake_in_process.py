#!/usr/bin/env python
"""The fake in process: what one pinned decision costs through its httpx transport, against
``httpx.MockTransport`` answering a canned body, measured in the same run.

The same request every time (one noul and one 3-option choice question about one support
message, both pinned: ``{"team": "billing", "refund": 0.91}``), posted with ``httpx.Client.post``
on one client per series:

- floor: ``httpx.MockTransport`` whose handler returns the canned answer: the very body bytes
  and headers the fake sends for this request, computed once before timing;
- in process: ``FakeLaya.transport()`` (pins applied, the request validated as the target spec
  reads it, answers computed, the call recorded in ``fake.calls``), the path unit tests use;
- diagnostics, not part of the goal: the http.client shim (``FakeLaya.intercept()``, one
  ``http.client.HTTPConnection`` per decision, as the shim closes each), and the loopback
  ``FakeLayaServer`` with one keep-alive httpx client.

Each series runs ``--rounds`` interleaved rounds of ``--per-round`` decisions after a warm-up;
each sample is one decision timed with perf_counter_ns. Reported: median and p90 (nearest
rank) over all samples, and the ratio of medians against the floor. Goal: the in-process
transport within 2x of the floor per decision, over 10,000 pinned decisions (5 x 2,000).
Every answer of every series is checked to be the pinned one. A script run by hand, not a
test: nothing here asserts on time. Loopback only.

    .venv/bin/python bench/bench_fake_in_process.py [--rounds 5] [--per-round 2000] [--json]
"""

from __future__ import annotations

import argparse
import gc
import http.client
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from importlib import metadata
from typing import Any

import httpx

from pytest_laya.fake import FakeLaya, FakeLayaServer

STATE = "I was charged twice for my order last week. Please refund the duplicate payment."
QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team should handle this?",
             "criteria": {"billing": "Charges and refunds", "technical": "Software problems",
                          "shipping": "Deliveries and returns"}},
    "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
}
BODY = {"state": STATE, "questions": QUESTIONS}
PINS = {"team": "billing", "refund": 0.91}
PAYLOAD = json.dumps(BODY).encode()


def check(answers: dict[str, Any]) -> None:
    if answers["team"]["choice"] != "billing" or answers["refund"]["noul"] != 0.91:
        raise SystemExit(f"not the pinned answer: {answers}")


def pct(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q * len(ordered) + 0.5) - 1))] / 1000.0


def timed(n: int, once: Callable[[], dict[str, Any]]) -> list[int]:
    samples = []
    clock = time.perf_counter_ns
    for _ in range(n):
        start = clock()
        answers = once()
        samples.append(clock() - start)
        check(answers)
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--per-round", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    fake = FakeLaya()
    fake.pin(PINS)
    status, headers, body = fake.answer(BODY)
    assert status == 200
    canned_body = json.dumps(body).encode()
    canned_headers = [("Content-Type", "application/json"), ("Content-Length", str(len(canned_body)))] + [
        (k, v) for k, v in headers.items() if k.lower() != "content-type"]

    floor_client = httpx.Client(transport=httpx.MockTransport(
        lambda request: httpx.Response(200, headers=canned_headers, content=canned_body)), base_url="http://laya.invalid")
    fake_client = httpx.Client(transport=fake.transport(), base_url="http://laya.invalid")
    loopback = FakeLayaServer().start()
    loopback.decide(PINS)
    loopback_client = httpx.Client(base_url=loopback.url, timeout=10)
    shim = fake.intercept()
    shim.__enter__()

    def shim_once() -> dict[str, Any]:
        connection = http.client.HTTPConnection("laya.invalid")
        connection.request("POST", "/v1/systemone", PAYLOAD, {"Content-Type": "application/json"})
        answer = json.loads(connection.getresponse().read())["answers"]
        connection.close()
        return answer

    series: dict[str, Callable[[], dict[str, Any]]] = {
        "floor: httpx.MockTransport, canned body": lambda: floor_client.post("/v1/systemone", json=BODY).json()["answers"],
        "in process: FakeLaya.transport()": lambda: fake_client.post("/v1/systemone", json=BODY).json()["answers"],
        "diagnostic: http.client shim (intercept)": shim_once,
        "diagnostic: loopback FakeLayaServer": lambda: loopback_client.post("/v1/systemone", json=BODY).json()["answers"],
    }
    samples: dict[str, list[int]] = {name: [] for name in series}
    try:
        for once in series.values():
            timed(args.warmup, once)
        for _ in range(args.rounds):
            for name, once in series.items():
                gc.collect()
                samples[name].extend(timed(args.per_round, once))
    finally:
        shim.__exit__(None, None, None)
        for client in (floor_client, fake_client, loopback_client):
            client.close()
        loopback.stop()

    floor = pct(samples[next(iter(series))], 0.5)
    results = {name: {"decisions": len(values), "median_us": pct(values, 0.5), "p90_us": pct(values, 0.9),
                      "ratio_to_floor": pct(values, 0.5) / floor} for name, values in samples.items()}
    in_process = results["in process: FakeLaya.transport()"]
    report = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{os.cpu_count()} cores, {platform.machine()} ({platform.system()} {platform.release()})",
        "versions": {"python": platform.python_version(), **{p: metadata.version(p) for p in ("httpx", "httpcore")}},
        "rounds": args.rounds, "per_round": args.per_round, "results": results,
        "recorded_calls": len(fake.calls),
        "goal": "in process within 2x of the floor per decision",
        "met": in_process["ratio_to_floor"] <= 2.0,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{report['date']}, {report['machine']}, Python {report['versions']['python']}, "
          f"httpx {report['versions']['httpx']}")
    print(f"{args.rounds} interleaved rounds x {args.per_round} pinned decisions per series")
    print(f"{'series':44} {'decisions':>9} {'median µs':>10} {'p90 µs':>8} {'x floor':>8}")
    for name, row in results.items():
        print(f"{name:44} {row['decisions']:>9,} {row['median_us']:>10.1f} {row['p90_us']:>8.1f} "
              f"{row['ratio_to_floor']:>7.2f}x")
    print(f"fake.calls recorded: {report['recorded_calls']:,}")
    print(f"goal (in process <= 2x floor): {'met' if report['met'] else 'NOT met'} "
          f"({in_process['ratio_to_floor']:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

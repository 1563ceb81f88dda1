#!/usr/bin/env python
"""The recording proxy's replay: what one decision costs through it, in one run, against the
in-process path and a direct call to a loopback server; and its recording, as the cassette grows.

First, ``--record-decisions`` exchanges (default 1,000; 0 skips it) are recorded through the
standalone recording proxy (``python -m pytest_laya proxy --mode record``, in process), which
saves the cassette after every exchange, each exchange timed: the p50 of the first and the last
tenth, and their ratio (a save that grew with the file would show here).

``--decisions`` distinct decisions (default 200) are recorded once from the fake Laya server
(`pytest_laya.fake.FakeLayaServer`) through a recording proxy into one cassette. Then, for
``--rounds`` rounds (default 5), each series replays every decision once, interleaved, with one
keep-alive httpx client each; each decision is timed alone (``perf_counter_ns``):

- ``proxy``: `ProxyServer` + `RouteTarget` on the cassette's replay route, observed by the
  plugin's spec check (`route.spec_check.SpecCheck`), as `laya_proxy` replays: the request crosses
  loopback, is matched, played, checked, and answered;
- ``in process``: the same route behind the switchboard (`intercept.Switchboard`), the client
  calling the replay URL, as `laya_server` replays: no socket;
- ``direct loopback``: the same HTTP server answering the recorded bytes without a route: the
  floor of one loopback round trip with this server and client.

Reported: each series' median (p50) and p90 per decision, the ratios of the medians, and the
proxy's cost over the direct call (``proxy - direct``: the route's work), and the process's CPU
time per decision in each series (client and server threads together: the figure a busy
machine disturbs least). The goal (issue 37):
the proxy's p50 at most 2 ms. A script run by hand, loopback only; nothing here asserts on time.

    python bench/bench_proxy.py [--decisions 200] [--rounds 5] [--record-decisions 1000] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx

from pytest_laya.cassettes import laya_vcr
from pytest_laya.fake import FakeLayaServer
from pytest_laya.intercept import LayaRoute, Switchboard
from pytest_laya.plugin.routes import TestRoute
from pytest_laya.plugin.run import LayaRun
from pytest_laya.proxy import IncomingRequest, ProxyServer, Reply, RouteTarget, Upstream
from pytest_laya.route.spec_check import SpecCheck
from pytest_laya.servers.handle import REPLAY_URL, ServerHandle

GOAL_MS = 2.0


def body(n: int) -> dict[str, Any]:
    return {"state": f"Support message {n}: I was charged twice for order {1000 + n}.",
            "questions": {"refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
                          "team": {"type": "choice", "instructions": "Which team?",
                                   "criteria": {"billing": "money", "tech": "bugs"}}}}


def record(path: Path, decisions: int) -> None:
    """`decisions` exchanges recorded through a recording proxy into `path`."""
    handle = laya_vcr(record=True, cassette_dir=None, api_key=None, strict=False).open(path)
    with FakeLayaServer() as fake:
        upstream = Upstream(fake.url)
        route = LayaRoute(handle.cassette, kind="record")
        with ProxyServer(target=RouteTarget(route, upstream=upstream, origin=fake.url)) as proxy, \
                httpx.Client(base_url=proxy.url) as client:
            for n in range(decisions):
                client.post("/v1/systemone", json=body(n)).raise_for_status()
        upstream.close()
    handle.finish(failed=False)


def replay_route(path: Path) -> LayaRoute:
    """The cassette's replay route, observed by the plugin's spec check, as a test's would be."""
    handle = laya_vcr(record=False, cassette_dir=None, api_key=None, strict=False).open(path)
    run = LayaRun(mode="replay", url=None, api_key=None, spec=None, cassette_dir=path.parent, strict=False,
                  report=None, checkpoint=None)
    test = TestRoute(nodeid="bench", server=ServerHandle(url=REPLAY_URL, kind="replay", spec="auto"), kind="replay",
                     handle=handle, cassette_path=path)
    test.laya = LayaRoute(handle.cassette, kind="replay", urls=[REPLAY_URL], observer=SpecCheck(run, test),
                          redact=handle.redact)
    return test.laya


def recording(path: Path, decisions: int) -> dict[str, Any]:
    """The standalone recording proxy (``python -m pytest_laya proxy --mode record``, in process),
    which saves the cassette after every exchange: each of `decisions` exchanges timed; what the
    first and the last tenth cost (the cassette grows by one interaction an exchange)."""
    import argparse as _argparse

    from pytest_laya.plugin.proxy_command import _settle_mode, _Standalone

    samples = []
    with FakeLayaServer() as fake:
        options = _argparse.Namespace(mode="record", record=None, upstream=fake.url, cassettes=str(path.parent),
                                      cassette=path.stem, spec="auto", conformance="enforce", port=0,
                                      host="127.0.0.1")
        _settle_mode(options)
        standalone = _Standalone(options)
        try:
            with ProxyServer(target=standalone) as proxy, httpx.Client(base_url=proxy.url) as client:
                for n in range(decisions):
                    start = time.perf_counter_ns()
                    client.post("/v1/systemone", json=body(n)).raise_for_status()
                    samples.append(time.perf_counter_ns() - start)
        finally:
            standalone.close()
    tenth = max(1, decisions // 10)
    first, last = pct(samples[:tenth], 0.5), pct(samples[-tenth:], 0.5)
    return {"decisions": decisions, "first_tenth_p50_ms": first, "last_tenth_p50_ms": last,
            "last_over_first": last / first, "total_s": sum(samples) / 1e9,
            "file_bytes": path.stat().st_size}


CPU_NS: dict[str, int] = {}


def timed(client: httpx.Client, decisions: int, name: str = "") -> list[int]:
    samples = []
    clock = time.perf_counter_ns
    cpu = time.process_time_ns()
    for n in range(decisions):
        sent = body(n)
        start = clock()
        response = client.post("/v1/systemone", json=sent)
        samples.append(clock() - start)
        assert response.status_code == 200, response.text
    CPU_NS[name] = CPU_NS.get(name, 0) + time.process_time_ns() - cpu
    return samples


def pct(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q * len(ordered) + 0.5) - 1))] / 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--decisions", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--record-decisions", type=int, default=1000,
                        help="exchanges recorded through the standalone proxy, each timed (0: skip)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as folder:
        grown = recording(Path(folder) / "grown.yaml", args.record_decisions) if args.record_decisions else None
        path = Path(folder) / "bench.yaml"
        record(path, args.decisions)
        recorded = replay_route(path).cassette.data
        canned = {json.dumps(json.loads(request.body), sort_keys=True): response for request, response in recorded}

        def direct(request: IncomingRequest) -> Reply:
            response = canned[json.dumps(json.loads(request.body), sort_keys=True)]
            headers = [(k, v) for k, values in response["headers"].items() for v in values]
            return Reply(200, headers, response["body"]["string"])

        floor = ProxyServer(target=direct).start()
        proxy = ProxyServer().start()
        switchboard = Switchboard()
        samples: dict[str, list[int]] = {"proxy": [], "in process": [], "direct loopback": []}
        try:
            with httpx.Client(base_url=proxy.url) as via_proxy, httpx.Client(base_url=floor.url) as via_floor, \
                    httpx.Client(base_url=REPLAY_URL) as in_process:
                for round_ in range(args.rounds + 1):  # the first round warms up, untimed
                    gc.collect()
                    proxy.target = RouteTarget(replay_route(path), upstream=None, origin=REPLAY_URL)
                    proxy_times = timed(via_proxy, args.decisions, "proxy" if round_ else "")
                    gc.collect()
                    route = replay_route(path)
                    with switchboard.active([route]):
                        in_process_times = timed(in_process, args.decisions, "in process" if round_ else "")
                    gc.collect()
                    floor_times = timed(via_floor, args.decisions, "direct loopback" if round_ else "")
                    if round_:
                        samples["proxy"] += proxy_times
                        samples["in process"] += in_process_times
                        samples["direct loopback"] += floor_times
        finally:
            proxy.stop()
            floor.stop()

    results = {name: {"decisions": len(values), "p50_ms": pct(values, 0.5), "p90_ms": pct(values, 0.9),
                      "cpu_ms": CPU_NS[name] / 1e6 / len(values)} for name, values in samples.items()}
    p50 = {name: result["p50_ms"] for name, result in results.items()}
    report = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{os.cpu_count()} cores, {platform.machine()} ({platform.system()} {platform.release()}), "
                   f"load average {os.getloadavg()[0]:.1f}",
        "versions": {"python": platform.python_version(), **{p: metadata.version(p) for p in ("httpx", "httpcore")}},
        "rounds": args.rounds, "decisions": args.decisions, "results": results,
        "ratios": {"proxy / in process": p50["proxy"] / p50["in process"],
                   "proxy / direct loopback": p50["proxy"] / p50["direct loopback"]},
        "proxy_over_direct_ms": p50["proxy"] - p50["direct loopback"],
        "goal": f"proxy p50 <= {GOAL_MS} ms per decision",
        "met": p50["proxy"] <= GOAL_MS,
        "recording": grown,
    }
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
        return 0
    print(f"{report['date']}, {report['machine']}; {args.rounds} rounds x {args.decisions} decisions")
    for name, result in results.items():
        print(f"  {name:<16} p50 {result['p50_ms']:.3f} ms   p90 {result['p90_ms']:.3f} ms   "
              f"CPU {result['cpu_ms']:.3f} ms (client and server)")
    for name, ratio in report["ratios"].items():
        print(f"  {name}: {ratio:.2f}x")
    print(f"  proxy - direct loopback: {report['proxy_over_direct_ms']:.3f} ms (the route's work)")
    print(f"  goal: {report['goal']}: {'met' if report['met'] else 'NOT met'}")
    if grown:
        print(f"  recording through the standalone proxy, saved after every exchange, {grown['decisions']} exchanges: "
              f"p50 {grown['first_tenth_p50_ms']:.2f} ms in the first tenth, {grown['last_tenth_p50_ms']:.2f} ms in "
              f"the last ({grown['last_over_first']:.2f}x); {grown['total_s']:.1f} s in all, a "
              f"{grown['file_bytes'] // 1024} KiB cassette")
    return 0


if __name__ == "__main__":
    sys.exit(main())

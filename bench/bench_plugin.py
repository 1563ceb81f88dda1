#!/usr/bin/env python
"""The plugin's costs: a replayed decision against the MockTransport floor, and pytest start-up.

Part 1, cost per decision, all in this process. The same request every time (one noul and one
3-option choice question about one support message) through ``ServedLayaClient.decide``:

- floor: ``httpx.MockTransport`` returning the canned answer (the very bytes and headers the
  cassette holds, precomputed), one client for the whole series;
- replay, cassette layer: ``laya_vcr(record=False, ...).cassette(...)`` open (what the
  ``laya_cassette`` fixture opens), a client made inside it, a cassette recorded once in setup
  from the fake. vcrpy plays an interaction once (``allow_playback_repeats`` is fixed off;
  a repeat raises ``CassetteAlreadyPlayed``), so this cassette holds K identical interactions
  and the K decisions of one open are timed one by one (K = 20, three opens per round, and
  K = 200: the lookup scans the cassette, so the cost per decision grows with K);
- per test, what a test pays: ``laya_vcr(...)`` + cassette open (one interaction, YAML parsed)
  + client + 1 decision + close, against the floor's per-test peer (MockTransport client + 1
  decision + close). "as laya_client" rows add the plugin's own ``on_exchange`` observer
  (``pytest_laya.plugin.spec_observer``: every response validated against both specs), i.e.
  exactly the objects the ``laya_cassette`` and ``laya_client`` fixtures build. The replay
  handle claims the target spec (``--laya-spec=target``): the fake speaks it, and its
  Server-Timing breaks the current spec; the observer checks both specs either way, so the
  claim changes no cost;
- two diagnostic rows: a "fix sketch" per test whose client's ``httpx.HTTPTransport`` reuses
  one SSL context (not what the package does today), and ``ServedLayaClient(url)`` + close
  alone, which is where the per-test time goes;
- live fake: ``FakeLayaServer`` (target flavor) on 127.0.0.1, one keep-alive client;
- live reference server: ``ServerThread(create_app(LayaEngine({"tiny": embedded_checkpoint_dir()})))``
  in this process, as the ``laya_reference_server`` fixture runs it, one keep-alive client.
  Measured last, so torch is loaded only after everything else was timed.

Every in-process series runs in ``--rounds`` interleaved rounds after a warm-up; each sample is
one decision (or one test) timed with perf_counter_ns. Reported: median and p90 (nearest
rank) over all samples, and the ratio of medians against the floor. Target: replay within 3x
of the floor.

Part 2, start-up, in fresh subprocesses on a tiny temporary project (its own pytest.ini, one
trivial test, one replayed ``laya_client`` test with its cassette), hyperfine-style: 1 warm-up
run, then ``--startup-runs`` timed runs per configuration, configurations interleaved:
``python -m pytest -q -p no:cacheprovider --collect-only test_trivial.py`` with the plugin
active (default mode: replay) and with ``-p no:laya``; running the trivial test with
``-p no:laya``; and running the replayed test (plugin active), which adds the first use of the
cassette layer, the client and the specs. Every configuration runs twice over: with this
environment's bytecode settings ("as_is"; PYTHONDONTWRITEBYTECODE=1 here, so the editable
pytest_laya sources are compiled, and pytest's assertion rewriting of the plugin's modules is
redone, at every start) and with bytecode cached ("cached": PYTHONDONTWRITEBYTECODE unset,
PYTHONPYCACHEPREFIX in the temporary directory, so nothing is written to the repository).
Target: plugin overhead on start-up (collect-only) < 150 ms. The overhead is then attributed, in as many fresh interpreters that have imported
pytest: the time to import ``pytest_laya.plugin``, then ``pytest_laya.specs.conformance`` (what the
plugin's ``pytest_configure`` imports). One extra run of each plugin-active configuration
(and of the plugin-off collect) under ``-X importtime -s`` lists what got imported: torch,
transformers, laya, uvicorn, starlette, fastapi and pytest_laya_reference must not be.

Part 3, a suite: ``--suite-tests`` replayed ``laya_client`` tests (one cassette each) against as
many tests using a MockTransport client fixture, each file run ``--suite-runs`` times in fresh
subprocesses (bytecode cached); the difference of median wall times divided by the number of
tests is what one replayed test costs in pytest over the floor, once-per-process costs (the
plugin's start-up, the first use of vcrpy and the specs) spread over the tests.

This is a script run by hand, not a test: nothing here asserts on time. Loopback only.

    .venv/bin/python bench/bench_plugin.py [--rounds 5] [--startup-runs 15] [--json] [--profile]
        [--skip-reference] [--skip-startup] [--skip-suite]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import math
import os
import platform
import pstats
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from pytest_laya.cassettes import laya_vcr  # noqa: E402
from pytest_laya.client import ServedLayaClient  # noqa: E402
from pytest_laya.fake import FakeLayaServer  # noqa: E402
from pytest_laya.servers import REPLAY_URL, ServerHandle  # noqa: E402
from pytest_laya.specs.conformance import Conformance  # noqa: E402

PY = sys.executable
TARGET_REPLAY_RATIO = 3.0
TARGET_STARTUP_MS = 150.0
HEAVY = ("torch", "transformers", "laya", "uvicorn", "starlette", "fastapi", "pytest_laya_reference")
VERSIONED = ("pytest", "httpx", "httpcore", "vcrpy", "pyyaml", "jsonschema", "laya", "torch", "transformers",
             "starlette", "uvicorn", "pytest-asyncio", "pytest-recording", "pytest-xdist", "hypothesis")
RECORD_HINT = "--laya-record"

STATE = "I was charged twice for my order. Please refund the duplicate today."
QUESTIONS: dict[str, Any] = {
    "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
    "team": {"type": "choice", "instructions": "Which team should handle this?",
             "criteria": {"billing": "Charges and refunds", "technical": "Software problems",
                          "shipping": "Deliveries and returns"}},
}


# ------------------------------------------------------------------------------ statistics

def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def summarize(samples_ns: list[int]) -> dict[str, Any]:
    us = [s / 1000.0 for s in samples_ns]
    return {"n": len(us), "median_us": statistics.median(us), "p90_us": pct(us, 0.9),
            "min_us": min(us), "max_us": max(us)}


def fmt_us(us: float) -> str:
    if us >= 1000:
        return f"{us / 1000:,.2f} ms"
    return f"{us:,.0f} µs"


# ------------------------------------------------------------------------------ setup

class Setup:
    """Cassettes recorded once from the fake, the canned floor answer, the plugin's observer."""

    def __init__(self, tmp: Path, big_k: int, small_k: int) -> None:
        self.tmp = tmp
        self.cassette_dir = tmp / "cassettes"
        self.sizes = {"one": 1, f"k{small_k}": small_k, f"k{big_k}": big_k}
        with FakeLayaServer() as fake:
            for name, count in self.sizes.items():
                vcr = laya_vcr(record=True, cassette_dir=self.cassette_dir, api_key=None, strict=True,
                               record_hint=RECORD_HINT)
                with vcr.cassette(Path(name + ".yaml"), provenance={"server": "fake", "spec": "target"}) as handle:
                    with ServedLayaClient(fake.url) as client:
                        for _ in range(count):
                            client.decide(STATE, QUESTIONS)
                assert handle.outcome == "written", handle.outcome
        # The floor answers with what the cassette holds: same body bytes, same headers.
        from vcr.serializers import yamlserializer

        data = yamlserializer.deserialize((self.cassette_dir / "one.yaml").read_text(encoding="utf-8"))
        response = data["interactions"][0]["response"]
        self.body: bytes = response["body"]["string"].encode("utf-8")
        self.headers: list[tuple[str, str]] = [(k, v) for k, vs in response["headers"].items() for v in vs]
        self.cassette_bytes = (self.cassette_dir / "one.yaml").stat().st_size
        self.run = self._plugin_run()

    def _plugin_run(self) -> Any:
        from pytest_laya.plugin import LayaRun

        run = LayaRun(mode="replay", url=None, api_key=None, spec=None, cassette_dir=self.cassette_dir,
                      strict=True, report=None, checkpoint=None)
        run.conformance = Conformance()
        return run

    def transport(self) -> httpx.MockTransport:
        body, headers = self.body, self.headers
        return httpx.MockTransport(lambda request: httpx.Response(200, headers=headers, content=body))

    def observer(self, handle: ServerHandle) -> Any:
        from pytest_laya.plugin import spec_observer

        return spec_observer(self.run, handle)

    def vcr(self) -> Any:
        return laya_vcr(record=False, cassette_dir=self.cassette_dir, api_key=None, strict=True, record_hint=RECORD_HINT)


# The fake speaks the target spec (its Server-Timing breaks the current one), so replay claims the
# target spec, as `--laya-spec=target` makes the plugin do. The observer checks every response
# against both specs whichever is claimed, so the claim changes no cost, only what fails a test.
REPLAY_HANDLE = ServerHandle(url=REPLAY_URL, kind="replay", spec="target")


def check(decision: Any) -> None:
    assert 0.0 <= decision["refund"].p <= 1.0 and decision["team"].key in QUESTIONS["team"]["criteria"]


# ------------------------------------------------------------------------------ series
# Each series function runs one block and returns its samples (ns), one per decision or test.

def series_floor(s: Setup, n: int, observe: bool) -> list[int]:
    kwargs = {"on_exchange": s.observer(REPLAY_HANDLE)} if observe else {}
    out = []
    with ServedLayaClient(REPLAY_URL, transport=s.transport(), **kwargs) as client:
        for _ in range(n):
            t0 = time.perf_counter_ns()
            d = client.decide(STATE, QUESTIONS)
            out.append(time.perf_counter_ns() - t0)
    check(d)
    return out


def series_replay_decisions(s: Setup, name: str, observe: bool) -> list[int]:
    out = []
    with s.vcr().cassette(Path(name + ".yaml")) as handle:
        kwargs = {"on_exchange": s.observer(REPLAY_HANDLE)} if observe else {}
        with REPLAY_HANDLE.client(**kwargs) as client:
            for _ in range(s.sizes[name]):
                t0 = time.perf_counter_ns()
                d = client.decide(STATE, QUESTIONS)
                out.append(time.perf_counter_ns() - t0)
    assert handle.outcome == "replayed" and handle.played == s.sizes[name]
    check(d)
    return out


def series_floor_tests(s: Setup, n: int, observe: bool) -> list[int]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        kwargs = {"on_exchange": s.observer(REPLAY_HANDLE)} if observe else {}
        with ServedLayaClient(REPLAY_URL, transport=s.transport(), **kwargs) as client:
            d = client.decide(STATE, QUESTIONS)
        out.append(time.perf_counter_ns() - t0)
    check(d)
    return out


def series_replay_tests(s: Setup, n: int, observe: bool) -> list[int]:
    """What the laya_cassette + laya_client fixtures do for one test, n times."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        vcr = s.vcr()
        with vcr.cassette(Path("one.yaml"), provenance=None):
            kwargs = {"on_exchange": s.observer(REPLAY_HANDLE)} if observe else {}
            with REPLAY_HANDLE.client(**kwargs) as client:
                d = client.decide(STATE, QUESTIONS)
        out.append(time.perf_counter_ns() - t0)
    check(d)
    return out


_SHARED_SSL: list[Any] = []


def series_replay_tests_shared_ssl(s: Setup, n: int) -> list[int]:
    """Fix sketch, not what the package does: the same per test, the client's transport built on
    one SSL context made once (vcrpy patches HTTPTransport.handle_request, so it still replays)."""
    if not _SHARED_SSL:
        _SHARED_SSL.append(httpx.create_ssl_context())
    out = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        with s.vcr().cassette(Path("one.yaml"), provenance=None):
            with ServedLayaClient(REPLAY_URL, transport=httpx.HTTPTransport(verify=_SHARED_SSL[0])) as client:
                d = client.decide(STATE, QUESTIONS)
        out.append(time.perf_counter_ns() - t0)
    check(d)
    return out


def series_client_construction(n: int) -> list[int]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        ServedLayaClient(REPLAY_URL).close()
        out.append(time.perf_counter_ns() - t0)
    return out


def series_live(url: str, n: int, warmup: int) -> list[int]:
    out = []
    with ServedLayaClient(url) as client:
        for _ in range(warmup):
            client.decide(STATE, QUESTIONS)
        for _ in range(n):
            t0 = time.perf_counter_ns()
            d = client.decide(STATE, QUESTIONS)
            out.append(time.perf_counter_ns() - t0)
    check(d)
    return out


def measure_in_process(s: Setup, rounds: int, small: str, big: str, fake_url: str) -> dict[str, dict[str, Any]]:
    plan: list[tuple[str, str, Callable[[], list[int]]]] = [
        ("floor", "floor: MockTransport, per decision", lambda: series_floor(s, 300, False)),
        ("floor_observed", "floor + plugin observer, per decision", lambda: series_floor(s, 150, True)),
        (f"replay_{small}", f"replay, cassette of {s.sizes[small]}, per decision",
         lambda: [t for _ in range(3) for t in series_replay_decisions(s, small, False)]),
        (f"replay_{big}", f"replay, cassette of {s.sizes[big]}, per decision", lambda: series_replay_decisions(s, big, False)),
        (f"replay_{small}_observed", f"replay as laya_client, cassette of {s.sizes[small]}, per decision",
         lambda: [t for _ in range(3) for t in series_replay_decisions(s, small, True)]),
        ("floor_test", "per test: floor (client + 1 decision + close)", lambda: series_floor_tests(s, 150, False)),
        ("replay_test", "per test: replay (laya_vcr + open + client + 1 decision + close)", lambda: series_replay_tests(s, 40, False)),
        ("floor_test_observed", "per test: floor + plugin observer", lambda: series_floor_tests(s, 100, True)),
        ("replay_test_observed", "per test: replay as laya_cassette + laya_client", lambda: series_replay_tests(s, 40, True)),
        ("replay_test_shared_ssl", "fix sketch: per test replay, client on one shared SSL context",
         lambda: series_replay_tests_shared_ssl(s, 60)),
        ("client_init", "ServedLayaClient(url) + close, default transport (no request)",
         lambda: series_client_construction(30)),
        ("fake", "live fake on loopback, per decision", lambda: series_live(fake_url, 150, 0)),
    ]
    for _, _, fn in plan:  # warm-up: imports, spec compilation, connection pools, caches
        fn()
    samples: dict[str, list[int]] = {key: [] for key, _, _ in plan}
    for _ in range(rounds):
        for key, _, fn in plan:
            gc.collect()
            samples[key].extend(fn())
    return {key: {"label": label, **summarize(samples[key])} for key, label, _ in plan}


def measure_reference(n: int, warmup: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    from pytest_laya_reference.app import create_app
    from pytest_laya_reference.engine import LayaEngine
    from pytest_laya_reference.serving import ServerThread
    from pytest_laya_reference.tiny_checkpoint import embedded_checkpoint_dir

    engine = LayaEngine({"tiny": str(embedded_checkpoint_dir())})
    with ServerThread(create_app(engine)) as thread:
        deadline = time.monotonic() + 120
        while httpx.get(thread.url + "/readyz").status_code != 200:
            if time.monotonic() > deadline:
                raise RuntimeError("the reference server did not become ready within 120 s")
            time.sleep(0.05)
        ready_s = time.perf_counter() - t0
        samples = series_live(thread.url, n, warmup)
    return {"label": "live reference server (tiny checkpoint), per decision", **summarize(samples),
            "startup_s": ready_s}


#: Where a profiled function lives, for the breakdown: the kit, vcrpy, httpx and httpcore, YAML.
PROFILED_PACKAGES = ("pytest_laya", "vcr", "httpx", "httpcore", "yaml")


def _package_of(filename: str) -> str | None:
    parts = filename.replace(os.sep, "/").split("/")
    for package in PROFILED_PACKAGES:
        if package in parts[:-1] or (package == "pytest_laya" and "pytest_laya" in filename):
            return package
    return None


def _top_functions(stats: pstats.Stats, count: int, top: int) -> list[dict[str, Any]]:
    """The functions of PROFILED_PACKAGES with the largest cumulative time, per item."""
    entries = stats.stats.items()  # type: ignore[attr-defined]
    total = max((ct for _key, (_cc, _nc, _tt, ct, _) in entries), default=0.0)
    rows = []
    for (filename, line, name), (cc, _nc, tt, ct, _) in entries:
        package = _package_of(filename)
        if package is None:
            continue
        where = filename.replace(os.sep, "/").split(f"/{package}/", 1)[-1]
        rows.append({"what": f"{package}/{where}:{line} {name}", "calls_per_item": cc / count,
                     "profiled_us_per_item": ct / count * 1e6, "own_us_per_item": tt / count * 1e6,
                     "share": ct / total if total else 0.0})
    return sorted(rows, key=lambda row: -row["profiled_us_per_item"])[:top]


def profile_breakdown(s: Setup, small: str, full: bool) -> dict[str, Any]:
    """cProfile of the replay series: the kit's, vcrpy's and httpx's functions by cumulative time.

    Found in the profile rather than named here, so the breakdown follows the code as it changes.
    """
    out: dict[str, Any] = {}
    jobs = {"per_decision": (lambda: [series_replay_decisions(s, small, False) for _ in range(10)], 10 * s.sizes[small]),
            "per_test": (lambda: series_replay_tests(s, 30, False), 30)}
    text = io.StringIO()
    for key, (fn, count) in jobs.items():
        prof = cProfile.Profile()
        prof.enable()
        fn()
        prof.disable()
        stats = pstats.Stats(prof, stream=text)
        out[key] = _top_functions(stats, count, top=15)
        if full:
            text.write(f"\n== cProfile: replay {key.replace('_', ' ')} ({count} items), by own time\n")
            stats.sort_stats("tottime").print_stats(25)
    if full:
        out["text"] = text.getvalue()
    return out


# ------------------------------------------------------------------------------ start-up

TRIVIAL = "def test_ok():\n    assert True\n"
REPLAYED = f"""
STATE = {STATE!r}
QUESTIONS = {QUESTIONS!r}


def test_decide(laya_client):
    decision = laya_client.decide(STATE, QUESTIONS)
    assert decision["team"].key in QUESTIONS["team"]["criteria"]
"""
SUITE_REPLAY = REPLAYED.replace("def test_decide(laya_client):",
                                "@pytest.mark.parametrize('i', range(@N@))\ndef test_decide(laya_client, i):")
SUITE_FLOOR = f"""
import httpx
import pytest
from pytest_laya.client import ServedLayaClient

STATE = {STATE!r}
QUESTIONS = {QUESTIONS!r}
BODY = @BODY@
HEADERS = @HEADERS@


@pytest.fixture
def floor_client():
    transport = httpx.MockTransport(lambda request: httpx.Response(200, headers=HEADERS, content=BODY))
    with ServedLayaClient("http://laya.invalid", transport=transport) as client:
        yield client


@pytest.mark.parametrize('i', range(@N@))
def test_decide(floor_client, i):
    decision = floor_client.decide(STATE, QUESTIONS)
    assert decision["team"].key in QUESTIONS["team"]["criteria"]
"""


# How the children get their bytecode. "as_is": this environment's own settings (here
# PYTHONDONTWRITEBYTECODE=1, so the editable pytest_laya sources are compiled, and pytest's
# assertion rewriting of the plugin's modules redone, at every start). "cached": bytecode
# allowed, kept under PYTHONPYCACHEPREFIX in the temporary directory (nothing written to the
# repository); pytest's rewritten modules are cached there too.
ENV_MODES = ("as_is", "cached")
_PYC_PREFIX: list[Path] = []


def child_env(mode: str = "as_is") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.pop("PYTHONPATH", None)
    if mode == "cached":
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(_PYC_PREFIX[0])
    return env


def make_project(s: Setup, suite_n: int) -> Path:
    proj = s.tmp / "project"
    proj.mkdir()
    # the loop-scope line only silences pytest-asyncio's deprecation warning, in every run alike
    (proj / "pytest.ini").write_text("[pytest]\nasyncio_default_fixture_loop_scope = function\n", encoding="utf-8")
    (proj / "test_trivial.py").write_text(TRIVIAL, encoding="utf-8")
    (proj / "test_replayed.py").write_text("import pytest\n" + REPLAYED, encoding="utf-8")
    one = s.cassette_dir / "one.yaml"
    (proj / "cassettes" / "test_replayed").mkdir(parents=True)
    shutil.copy(one, proj / "cassettes" / "test_replayed" / "test_decide.yaml")
    (proj / "test_suite_replay.py").write_text("import pytest\n" + SUITE_REPLAY.replace("@N@", str(suite_n)),
                                              encoding="utf-8")
    suite_dir = proj / "cassettes" / "test_suite_replay"
    suite_dir.mkdir()
    for i in range(suite_n):
        shutil.copy(one, suite_dir / f"test_decide[{i}].yaml")
    floor = SUITE_FLOOR.replace("@BODY@", repr(s.body)).replace("@HEADERS@", repr(s.headers))
    (proj / "test_suite_floor.py").write_text(floor.replace("@N@", str(suite_n)), encoding="utf-8")
    return proj


STARTUP_CONFIGS = {
    "collect_plugin": ("collect-only, plugin active (replay)", ["--collect-only", "test_trivial.py"]),
    "collect_off": ("collect-only, -p no:laya", ["-p", "no:laya", "--collect-only", "test_trivial.py"]),
    "run_off": ("1 trivial test, -p no:laya", ["-p", "no:laya", "test_trivial.py"]),
    "run_replayed": ("1 replayed laya_client test, plugin active", ["--laya-spec=target", "test_replayed.py"]),
}
# Where the start-up overhead goes: in a fresh interpreter that has imported pytest, how long
# importing the plugin module takes, then what its pytest_configure imports (the conformance
# tracker: the client, httpx, the specs, jsonschema).
ATTRIBUTION = """
import time
import pytest
t0 = time.perf_counter()
import pytest_laya.plugin
t1 = time.perf_counter()
import pytest_laya.specs.conformance
t2 = time.perf_counter()
print((t1 - t0) * 1000, (t2 - t1) * 1000)
"""


def pytest_cmd(args: list[str], extra: list[str] = ()) -> list[str]:
    return [PY, *extra, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]


def run_once(proj: Path, cmd: list[str], mode: str = "as_is") -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=proj, env=child_env(mode), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return wall, done


def measure_startup(proj: Path, runs: int) -> dict[str, Any]:
    _PYC_PREFIX[:] = [proj.parent / "pycache"]
    walls: dict[tuple[str, str], list[float]] = {(m, k): [] for m in ENV_MODES for k in STARTUP_CONFIGS}
    for i in range(runs + 1):
        for mode in ENV_MODES:
            for key, (_, args) in STARTUP_CONFIGS.items():
                wall, _ = run_once(proj, pytest_cmd(args), mode)
                if i >= 1:  # one warm-up run each (bytecode caches, page cache)
                    walls[(mode, key)].append(wall * 1000.0)
    out: dict[str, Any] = {}
    for mode in ENV_MODES:
        res = {key: {"label": label, "n": len(walls[(mode, key)]), "median_ms": statistics.median(walls[(mode, key)]),
                     "p90_ms": pct(walls[(mode, key)], 0.9), "min_ms": min(walls[(mode, key)]),
                     "max_ms": max(walls[(mode, key)])}
               for key, (label, _) in STARTUP_CONFIGS.items()}
        res["overhead_collect_ms"] = res["collect_plugin"]["median_ms"] - res["collect_off"]["median_ms"]
        res["first_replayed_test_ms"] = res["run_replayed"]["median_ms"] - res["run_off"]["median_ms"]
        plugin_ms, conformance_ms = [], []
        for _ in range(runs):
            done = subprocess.run([PY, "-c", ATTRIBUTION], cwd=proj, env=child_env(mode), capture_output=True,
                                  text=True, check=True)
            a, b = map(float, done.stdout.split())
            plugin_ms.append(a)
            conformance_ms.append(b)
        res["import_plugin_module_ms"] = statistics.median(plugin_ms)
        res["import_conformance_ms"] = statistics.median(conformance_ms)
        out[mode] = res
    return out


_IMPORT_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)\s*$")


def import_report(proj: Path) -> dict[str, Any]:
    report: dict[str, Any] = {}
    for key in ("collect_plugin", "run_replayed", "collect_off"):
        # -s: pytest's capture would swallow what is imported while it captures fd 2
        _, done = run_once(proj, pytest_cmd(["-s", *STARTUP_CONFIGS[key][1]], ["-X", "importtime"]))
        modules: dict[str, int] = {}
        for line in done.stderr.splitlines():
            m = _IMPORT_LINE.match(line)
            if m:
                modules[m.group(4)] = int(m.group(2))  # cumulative µs
        heavy = sorted(name for name in modules if name.split(".")[0] in HEAVY)
        ours = {name: us for name, us in modules.items() if name.split(".")[0] == "pytest_laya"}
        report[key] = {
            "modules": len(modules),
            "heavy_imported": heavy,
            "pytest_laya_modules": sorted(ours),
            "pytest_laya_conformance_cumulative_ms": modules.get("pytest_laya.specs.conformance", 0) / 1000.0,
            "vcr_imported": "vcr" in modules,
            "httpx_imported": "httpx" in modules,
        }
    return report


def measure_suite(proj: Path, runs: int, n: int) -> dict[str, Any]:
    walls: dict[str, list[float]] = {"suite_replay": [], "suite_floor": []}
    for _ in range(runs):  # no warm-up: the start-up runs warmed everything but these two files
        for key in walls:
            wall, done = run_once(proj, pytest_cmd(["--laya-spec=target", f"test_{key}.py"]), "cached")
            assert f"{n} passed" in done.stdout, done.stdout[-500:]
            walls[key].append(wall * 1000.0)
    replay, floor = statistics.median(walls["suite_replay"]), statistics.median(walls["suite_floor"])
    return {"tests": n, "runs": runs, "replay_median_ms": replay, "floor_median_ms": floor,
            "replay_all_ms": walls["suite_replay"], "floor_all_ms": walls["suite_floor"],
            "per_test_extra_us": (replay - floor) * 1000.0 / n}


# ------------------------------------------------------------------------------ report

def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


def print_report(res: dict[str, Any]) -> None:
    m, v = res["machine"], res["versions"]
    print(f"machine: {m['cpus']} cpus, {m['processor']}, {m['platform']}; load average before {m['loadavg_before']}, after {m.get('loadavg_after')}")
    print("versions: " + ", ".join(f"{k} {val}" for k, val in v.items()))
    print()
    rows = res["per_decision"]
    floor = rows["floor"]["median_us"]
    floor_test = rows["floor_test"]["median_us"]
    floor_test_obs = rows["floor_test_observed"]["median_us"]
    floor_obs = rows["floor_observed"]["median_us"]
    peers = {"floor_test": floor_test, "replay_test": floor_test, "floor_test_observed": floor_test_obs,
             "replay_test_shared_ssl": floor_test, "client_init": floor_test,
             "replay_test_observed": floor_test_obs}
    print("| series | samples | median | p90 | x floor (per decision) | x peer floor |")
    print("|---|---:|---:|---:|---:|---:|")
    for key, row in rows.items():
        peer = peers.get(key, floor_obs if key.endswith("_observed") else floor)
        print(f"| {row['label']} | {row['n']} | {fmt_us(row['median_us'])} | {fmt_us(row['p90_us'])} | "
              f"{row['median_us'] / floor:,.1f}x | {row['median_us'] / peer:,.1f}x |")
    if "reference" in res:
        ref = res["reference"]
        print(f"(reference server ready {ref['startup_s']:.1f} s after the import started)")
    print()
    for line in res["verdicts"]:
        print("- " + line)
    if "startup" in res:
        print()
        print("| start-up (fresh subprocess) | bytecode | runs | median | p90 | min |")
        print("|---|---|---:|---:|---:|---:|")
        for mode in ENV_MODES:
            st = res["startup"][mode]
            for key in STARTUP_CONFIGS:
                row = st[key]
                print(f"| {row['label']} | {mode} | {row['n']} | {row['median_ms']:.0f} ms | {row['p90_ms']:.0f} ms | "
                      f"{row['min_ms']:.0f} ms |")
        imp = res["imports"]
        for key in ("collect_plugin", "run_replayed", "collect_off"):
            r = imp[key]
            print(f"-X importtime, {STARTUP_CONFIGS[key][0]}: {r['modules']} modules; heavy: "
                  f"{', '.join(r['heavy_imported']) or 'none'}; pytest_laya modules: "
                  f"{', '.join(m.removeprefix('pytest_laya.') for m in r['pytest_laya_modules']) or 'none'} "
                  f"(pytest_laya.specs.conformance cumulative {r['pytest_laya_conformance_cumulative_ms']:.1f} ms); vcr {'yes' if r['vcr_imported'] else 'no'}, "
                  f"httpx {'yes' if r['httpx_imported'] else 'no'}")
    prof = res.get("profile")
    if prof:
        for key in ("per_decision", "per_test"):
            print(f"\ncProfile, replay {key.replace('_', ' ')}: the 15 functions of {', '.join(PROFILED_PACKAGES)} with the "
                  "largest cumulative time (profiled times are inflated; shares of the whole profile):")
            print("| function | calls each | cumulative us each | own us each | share |")
            print("|---|---:|---:|---:|---:|")
            for row in prof[key]:
                print(f"| {row['what']} | {row['calls_per_item']:.1f} | {row['profiled_us_per_item']:.0f} | "
                      f"{row['own_us_per_item']:.0f} | {row['share'] * 100:.0f}% |")
    if "suite" in res:
        su = res["suite"]
        print(f"suite (bytecode cached): {su['tests']} replayed laya_client tests {su['replay_median_ms']:.0f} ms vs {su['tests']} "
              f"MockTransport-fixture tests {su['floor_median_ms']:.0f} ms (medians of {su['runs']} runs): "
              f"{su['per_test_extra_us'] / 1000:.2f} ms more per test")


def verdicts(res: dict[str, Any], small: str, big: str) -> list[str]:
    rows = res["per_decision"]
    floor = rows["floor"]["median_us"]
    out = []
    r_small = rows[f"replay_{small}"]["median_us"] / floor
    r_big = rows[f"replay_{big}"]["median_us"] / floor
    r_test = rows["replay_test"]["median_us"] / rows["floor_test"]["median_us"]
    r_test_obs = rows["replay_test_observed"]["median_us"] / rows["floor_test_observed"]["median_us"]
    met = lambda r: "MET" if r <= TARGET_REPLAY_RATIO else "NOT MET"  # noqa: E731
    out.append(f"replay per decision (cassette of {res['sizes'][small]}) / floor = {r_small:.1f}x "
               f"(target <= {TARGET_REPLAY_RATIO:g}x): {met(r_small)}")
    out.append(f"replay per decision (cassette of {res['sizes'][big]}) / floor = {r_big:.1f}x: {met(r_big)}")
    out.append(f"replay per test (open + 1 decision + close) / floor per test = {r_test:.1f}x: {met(r_test)}")
    out.append(f"as the fixtures build it (with the observer) per test / floor + observer per test = "
               f"{r_test_obs:.1f}x: {met(r_test_obs)}")
    if "startup" in res:
        ok = lambda ms: "MET" if ms < TARGET_STARTUP_MS else "NOT MET"  # noqa: E731
        for mode in ENV_MODES:
            st = res["startup"][mode]
            out.append(f"start-up overhead, collect-only, bytecode {mode}: {st['overhead_collect_ms']:+.0f} ms "
                       f"(target < {TARGET_STARTUP_MS:g} ms): {ok(st['overhead_collect_ms'])}; measured apart: "
                       f"import pytest_laya.plugin {st['import_plugin_module_ms']:.1f} ms, then pytest_configure's "
                       f"import of pytest_laya.specs.conformance {st['import_conformance_ms']:.0f} ms")
            out.append(f"first replayed laya_client test in a fresh process, bytecode {mode}: "
                       f"{st['first_replayed_test_ms']:+.0f} ms over the plugin-off trivial run")
        heavy = sorted(set(res["imports"]["collect_plugin"]["heavy_imported"]) | set(res["imports"]["run_replayed"]["heavy_imported"]))
        out.append("torch/transformers/laya/uvicorn/starlette/fastapi/reference_server imported with the plugin active: "
                   + (", ".join(heavy) if heavy else "none (verified with -X importtime)"))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the in-process series (default 5)")
    parser.add_argument("--startup-runs", type=int, default=15, help="timed start-up runs per configuration (default 15)")
    parser.add_argument("--suite-tests", type=int, default=100, help="tests in each suite file (default 100)")
    parser.add_argument("--suite-runs", type=int, default=2, help="timed runs of each suite file (default 2)")
    parser.add_argument("--reference-decisions", type=int, default=100)
    parser.add_argument("--small-k", type=int, default=20)
    parser.add_argument("--big-k", type=int, default=200)
    parser.add_argument("--skip-reference", action="store_true")
    parser.add_argument("--skip-startup", action="store_true")
    parser.add_argument("--skip-suite", action="store_true")
    parser.add_argument("--profile", action="store_true", help="add a cProfile of the replay series (printed, and in --json)")
    parser.add_argument("--json", action="store_true", help="print the results as one JSON object")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    res: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
                    "platform": platform.platform(), "loadavg_before": [round(x, 2) for x in os.getloadavg()]},
        "versions": versions(),
        "request": {"state": STATE, "questions": QUESTIONS},
    }
    small, big = f"k{args.small_k}", f"k{args.big_k}"
    with tempfile.TemporaryDirectory(prefix="bench-plugin-") as tmpdir:
        s = Setup(Path(tmpdir), big_k=args.big_k, small_k=args.small_k)
        res["sizes"] = s.sizes
        res["cassette_bytes"] = s.cassette_bytes
        with FakeLayaServer() as fake:
            res["per_decision"] = measure_in_process(s, args.rounds, small, big, fake.url)
        res["profile"] = profile_breakdown(s, small, args.profile)
        if not args.skip_startup:
            proj = make_project(s, args.suite_tests)
            res["startup"] = measure_startup(proj, args.startup_runs)
            res["imports"] = import_report(proj)
            if not args.skip_suite:
                res["suite"] = measure_suite(proj, args.suite_runs, args.suite_tests)
        if not args.skip_reference:
            res["reference"] = measure_reference(args.reference_decisions, 10)
            res["per_decision"]["reference"] = {k: v for k, v in res["reference"].items() if k != "startup_s"}
    res["machine"]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    res["verdicts"] = verdicts(res, small, big)
    res["elapsed_s"] = time.perf_counter() - started
    if args.json:
        print(json.dumps(res, indent=2, sort_keys=False, default=str))
    else:
        print_report(res)
        if args.profile:
            print(res["profile"]["text"])
        print(f"\n(elapsed {res['elapsed_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

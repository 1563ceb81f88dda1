#!/usr/bin/env python
"""Downstream replay: what a replayed one-decision test costs with pytest-laya and with pytest-recording.

A downstream project is generated in a temporary directory: a service module (``acme/triage.py``)
that calls Laya through its own module-level ``httpx.Client``, and one test module per suite, each
``--tests`` tests (default 300) parametrized over ``i``. Test ``i`` asks one decision about its own
support message (the same ``i``-th request in every suite), so each test has its own cassette:

- ``empty``: ``def test_decide(i): pass``, the floor every per-test cost is measured over;
- ``recording``: pytest-recording, ``@pytest.mark.vcr`` with body matching (``match_on`` method,
  scheme, host, port, path, query, body), the service's module-level client; replayed with
  ``--record-mode=none``;
- ``laya_own``: pytest-laya as docs/plugin.md tells a downstream user: the test asks for
  ``laya_url`` and calls the same service (its module-level client) with it. Every response is
  validated against its spec by the plugin;
- ``laya_client``: pytest-laya's ``laya_client`` fixture (``ServedLayaClient.decide``), validated;
- ``mock_httpx``: the floor per decision for ``laya_own``: the service called with a module-level
  ``httpx.Client(transport=httpx.MockTransport(...))`` answering the recorded bytes;
- ``mock_kit``: the floor per decision for ``laya_client``: a module-level ``ServedLayaClient`` on
  such a MockTransport.

Both the pytest-laya and the pytest-recording suites are recorded once, from the fake Laya server
(``pytest_laya.fake.FakeLayaServer``) on loopback, so both replay the very same requests and
answers. Then ``--rounds`` rounds (default 3) run every suite once, interleaved, each as a fresh
``python -m pytest -q -p no:cacheprovider test_<suite>.py`` subprocess with bytecode cached in the
temporary directory (one untimed warm-up run of each first). Per suite and round: wall time and the
child's CPU time (user + system, from ``wait4``). Reported: the medians per suite, and the cost per
test over the empty floor, ``(median(suite) - median(empty)) / tests``, in CPU time (the headline:
the machine is shared, and CPU time moves far less with other load than wall time) and in wall
time. Once-per-process costs (importing vcrpy, loading the specs) are part of each suite's time,
spread over its tests.

Goals (issue 18, section 1), each a ratio within one run:

- pytest-laya's cost per test <= 0.5x pytest-recording's, validation included (both pytest-laya
  suites);
- <= 2x the MockTransport floor per decision (``laya_own`` against ``mock_httpx``,
  ``laya_client`` against ``mock_kit``);
- memory: the current RSS (``/proc/self/statm``) after 1,000 replayed tests (``--rss-tests``) at
  most 50 MB above the RSS after 10, measured inside the pytest process by a conftest hook
  (pytest-recording measured alike, for comparison).

``--profile`` runs the ``laya_own`` and ``laya_client`` suites (and ``recording``) once more under
cProfile and prints the functions with the largest cumulative and own times.

This is a script run by hand, not a test: nothing here asserts on time. Loopback only.

    .venv/bin/python bench/bench_downstream_replay.py [--tests 300] [--rounds 3] [--rss-tests 1000]
        [--skip-rss] [--profile] [--json] [--keep DIR]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import pstats
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import bench_plugin  # noqa: E402  (the request, the child environment, versions)
from bench_plugin import PY, QUESTIONS, STATE, child_env, versions  # noqa: E402

from pytest_laya.fake import FakeLayaServer  # noqa: E402

TARGET_VS_RECORDING = 0.5
TARGET_VS_MOCK = 2.0
TARGET_RSS_GROWTH_MB = 50.0
SUITES = ("empty", "recording", "laya_own", "laya_client", "mock_httpx", "mock_kit")
LABELS = {
    "empty": "empty tests (floor)",
    "recording": "pytest-recording, module-level httpx.Client",
    "laya_own": "pytest-laya, module-level httpx.Client on laya_url (validated)",
    "laya_client": "pytest-laya, laya_client (validated)",
    "mock_httpx": "MockTransport floor, module-level httpx.Client",
    "mock_kit": "MockTransport floor, module-level ServedLayaClient",
}
#: The environment variable the pytest-recording suite reads its (recorded) Laya URL from.
URL_ENV = "ACME_LAYA_URL"
RSS_ENV = "BENCH_RSS_OUT"


# ------------------------------------------------------------------------------ the project

SERVICE = f'''"""Acme's ticket triage: calls a served Laya with its own module-level httpx client."""

import httpx

QUESTIONS = {QUESTIONS!r}
CLIENT = httpx.Client(timeout=10.0)


def message(i):
    return {STATE!r} + f" (order {{i}})"


def triage(url, text, client=CLIENT):
    """(team, refund probability) for one support message."""
    response = client.post(url + "/v1/systemone", json={{"state": text, "questions": QUESTIONS}})
    response.raise_for_status()
    answers = response.json()["answers"]
    return answers["team"]["choice"], answers["refund"]["noul"]
'''

CONFTEST = f'''
import os

import pytest

_OUT = os.environ.get({RSS_ENV!r})

if _OUT:
    import json

    _PAGE = os.sysconf("SC_PAGE_SIZE")
    _SEEN = {{"n": 0, "rss": {{}}}}

    def _rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE

    def pytest_runtest_logfinish(nodeid, location):
        _SEEN["n"] += 1
        if _SEEN["n"] in (10, 100) or _SEEN["n"] % 250 == 0:
            _SEEN["rss"][_SEEN["n"]] = _rss()

    def pytest_sessionfinish(session, exitstatus):
        _SEEN["rss"][_SEEN["n"]] = _rss()
        with open(_OUT, "w") as f:
            json.dump(_SEEN["rss"], f)
'''

HEAD = '''import pytest

from acme.triage import QUESTIONS, message, triage
'''

TEMPLATES = {
    "empty": '''import pytest


@pytest.mark.parametrize("i", range(@N@))
def test_decide(i):
    pass
''',
    "recording": HEAD + f'''import os

URL = os.environ[{URL_ENV!r}]


@pytest.fixture(scope="module")
def vcr_config():
    return {{"match_on": ["method", "scheme", "host", "port", "path", "query", "body"]}}


@pytest.mark.vcr
@pytest.mark.parametrize("i", range(@N@))
def test_decide(i):
    team, refund = triage(URL, message(i))
    assert team in QUESTIONS["team"]["criteria"] and 0.0 <= refund <= 1.0
''',
    "laya_own": HEAD + '''

@pytest.mark.parametrize("i", range(@N@))
def test_decide(laya_url, i):
    team, refund = triage(laya_url, message(i))
    assert team in QUESTIONS["team"]["criteria"] and 0.0 <= refund <= 1.0
''',
    "laya_client": HEAD + '''

@pytest.mark.parametrize("i", range(@N@))
def test_decide(laya_client, i):
    decision = laya_client.decide(message(i), QUESTIONS)
    assert decision["team"].key in QUESTIONS["team"]["criteria"] and 0.0 <= decision["refund"].p <= 1.0
''',
    "mock_httpx": HEAD + '''import httpx

BODY = @BODY@
HEADERS = @HEADERS@
MOCK = httpx.Client(transport=httpx.MockTransport(lambda request: httpx.Response(200, headers=HEADERS, content=BODY)))


@pytest.mark.parametrize("i", range(@N@))
def test_decide(i):
    team, refund = triage("http://laya.invalid", message(i), client=MOCK)
    assert team in QUESTIONS["team"]["criteria"] and 0.0 <= refund <= 1.0
''',
    "mock_kit": HEAD + '''import httpx

from pytest_laya.client import ServedLayaClient

BODY = @BODY@
HEADERS = @HEADERS@
CLIENT = ServedLayaClient("http://laya.invalid", transport=httpx.MockTransport(
    lambda request: httpx.Response(200, headers=HEADERS, content=BODY)))


@pytest.mark.parametrize("i", range(@N@))
def test_decide(i):
    decision = CLIENT.decide(message(i), QUESTIONS)
    assert decision["team"].key in QUESTIONS["team"]["criteria"] and 0.0 <= decision["refund"].p <= 1.0
''',
}
RSS_SUITES = ("recording", "laya_own", "laya_client")


def write_suite(proj: Path, name: str, n: int, module: str | None = None, canned: tuple[bytes, list] | None = None) -> None:
    text = TEMPLATES[name].replace("@N@", str(n))
    if canned is not None:
        text = text.replace("@BODY@", repr(canned[0])).replace("@HEADERS@", repr(canned[1]))
    (proj / f"test_{module or name}.py").write_text(text, encoding="utf-8")


def make_project(root: Path, n: int, rss_n: int) -> Path:
    proj = root / "downstream"
    (proj / "acme").mkdir(parents=True)
    (proj / "acme" / "__init__.py").write_text("", encoding="utf-8")
    (proj / "acme" / "triage.py").write_text(SERVICE, encoding="utf-8")
    (proj / "conftest.py").write_text(CONFTEST, encoding="utf-8")
    # pythonpath: the service imports from the project root; the loop-scope line silences
    # pytest-asyncio's deprecation warning, in every suite alike.
    (proj / "pytest.ini").write_text("[pytest]\npythonpath = .\nasyncio_default_fixture_loop_scope = function\n",
                                     encoding="utf-8")
    for name in ("empty", "recording", "laya_own", "laya_client"):
        write_suite(proj, name, n)
    if rss_n:
        for name in RSS_SUITES:
            write_suite(proj, name, rss_n, module=f"rss_{name}")
    return proj


# ------------------------------------------------------------------------------ running

def pytest_run(proj: Path, args: list[str], env: dict[str, str] | None = None,
               extra: list[str] = ()) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """(wall s, CPU s of the child, result) of one ``python -m pytest`` run in `proj`.

    The child's CPU time (user + system) is the growth of this process's RUSAGE_CHILDREN over
    the run: runs are sequential, and the child is reaped before the second reading.
    """
    full_env = child_env("cached")
    full_env.update(env or {})
    cmd = [PY, *extra, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=proj, env=full_env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
    return wall, cpu, done


class Project:
    """The generated downstream project, recorded once, and how each suite is run."""

    def __init__(self, root: Path, n: int, rss_n: int) -> None:
        self.root = root
        self.n = n
        self.rss_n = rss_n
        bench_plugin._PYC_PREFIX[:] = [root / "pycache"]
        self.proj = make_project(root, n, rss_n)
        self.url: str = ""

    def record(self) -> None:
        laya = ["test_laya_own.py", "test_laya_client.py"]
        recording = ["test_recording.py"]
        if self.rss_n:
            laya += ["test_rss_laya_own.py", "test_rss_laya_client.py"]
            recording += ["test_rss_recording.py"]
        with FakeLayaServer() as fake:
            self.url = fake.url
            pytest_run(self.proj, [*laya, "--laya-record", "--laya-url", fake.url])
            pytest_run(self.proj, [*recording, "--record-mode=rewrite"], env={URL_ENV: fake.url})
        # The floors answer with what a cassette holds: the body and headers of test 0's answer.
        from vcr.serializers import yamlserializer

        data = yamlserializer.deserialize(
            (self.proj / "cassettes" / "test_laya_own" / "test_decide[0].yaml").read_text(encoding="utf-8"))
        response = data["interactions"][0]["response"]
        canned = (response["body"]["string"].encode("utf-8"),
                  [(k, v) for k, vs in response["headers"].items() for v in vs])
        for name in ("mock_httpx", "mock_kit"):
            write_suite(self.proj, name, self.n, canned=canned)
        self.cassette_bytes = len(
            (self.proj / "cassettes" / "test_laya_own" / "test_decide[0].yaml").read_bytes())

    def args(self, suite: str, module: str | None = None) -> tuple[list[str], dict[str, str]]:
        path = f"test_{module or suite}.py"
        if suite == "recording":
            return [path, "--record-mode=none"], {URL_ENV: self.url}
        return [path], {}

    def run(self, suite: str) -> tuple[float, float]:
        args, env = self.args(suite)
        wall, cpu, done = pytest_run(self.proj, args, env)
        if f"{self.n} passed" not in done.stdout:
            raise RuntimeError(f"suite {suite}: expected {self.n} passed:\n{done.stdout[-2000:]}")
        return wall, cpu

    def rss(self, suite: str) -> dict[str, int]:
        args, env = self.args(suite, module=f"rss_{suite}")
        out_file = self.root / f"rss_{suite}.json"
        env = {**env, RSS_ENV: str(out_file)}
        _, _, done = pytest_run(self.proj, args, env)
        if f"{self.rss_n} passed" not in done.stdout:
            raise RuntimeError(f"rss suite {suite}: expected {self.rss_n} passed:\n{done.stdout[-2000:]}")
        return {k: int(v) for k, v in json.loads(out_file.read_text()).items()}

    def profile(self, suite: str, top: int) -> str:
        args, env = self.args(suite)
        out = self.root / f"{suite}.prof"
        pytest_run(self.proj, args, env, extra=["-m", "cProfile", "-o", str(out)])
        text = io.StringIO()
        stats = pstats.Stats(str(out), stream=text)
        text.write(f"\n== cProfile of the {suite} suite ({self.n} tests), by cumulative time\n")
        stats.sort_stats("cumulative").print_stats(top)
        text.write(f"\n== cProfile of the {suite} suite, by own time\n")
        stats.sort_stats("tottime").print_stats(top)
        return text.getvalue()


# ------------------------------------------------------------------------------ measuring

def measure(project: Project, rounds: int) -> dict[str, Any]:
    for suite in SUITES:  # warm-up: bytecode, page cache; also checks every suite passes
        project.run(suite)
    samples: dict[str, dict[str, list[float]]] = {s: {"wall": [], "cpu": []} for s in SUITES}
    for _ in range(rounds):
        for suite in SUITES:
            wall, cpu = project.run(suite)
            samples[suite]["wall"].append(wall)
            samples[suite]["cpu"].append(cpu)
    out: dict[str, Any] = {"suites": {}}
    for suite in SUITES:
        out["suites"][suite] = {"wall_s": samples[suite]["wall"], "cpu_s": samples[suite]["cpu"],
                                "median_wall_s": statistics.median(samples[suite]["wall"]),
                                "median_cpu_s": statistics.median(samples[suite]["cpu"])}
    n = project.n
    for suite in SUITES[1:]:
        row = out["suites"][suite]
        floor = out["suites"]["empty"]
        row["per_test_cpu_ms"] = (row["median_cpu_s"] - floor["median_cpu_s"]) * 1000.0 / n
        row["per_test_wall_ms"] = (row["median_wall_s"] - floor["median_wall_s"]) * 1000.0 / n
        # per round, against that round's floor: how much the per-test figure moves
        row["per_test_cpu_ms_by_round"] = [(c - f) * 1000.0 / n for c, f in zip(row["cpu_s"], floor["cpu_s"])]
        row["per_test_wall_ms_by_round"] = [(w - f) * 1000.0 / n for w, f in zip(row["wall_s"], floor["wall_s"])]
    return out


def ratios(res: dict[str, Any]) -> dict[str, float]:
    s = res["suites"]
    out = {}
    for unit in ("cpu", "wall"):
        rec = s["recording"][f"per_test_{unit}_ms"]
        for laya, mock in (("laya_own", "mock_httpx"), ("laya_client", "mock_kit")):
            out[f"{laya}_vs_recording_{unit}"] = s[laya][f"per_test_{unit}_ms"] / rec
            out[f"{laya}_vs_{mock}_{unit}"] = s[laya][f"per_test_{unit}_ms"] / s[mock][f"per_test_{unit}_ms"]
    return out


# ------------------------------------------------------------------------------ report

def verdicts(res: dict[str, Any]) -> list[str]:
    r = res["ratios"]
    met = lambda ok: "MET" if ok else "NOT MET"  # noqa: E731
    lines = []
    for laya in ("laya_own", "laya_client"):
        v = r[f"{laya}_vs_recording_cpu"]
        lines.append(f"{LABELS[laya]} / pytest-recording per test (CPU) = {v:.2f}x (wall {r[f'{laya}_vs_recording_wall']:.2f}x)"
                     f" (goal <= {TARGET_VS_RECORDING}x): {met(v <= TARGET_VS_RECORDING)}")
    for laya, mock in (("laya_own", "mock_httpx"), ("laya_client", "mock_kit")):
        v = r[f"{laya}_vs_{mock}_cpu"]
        lines.append(f"{LABELS[laya]} / {LABELS[mock]} per test (CPU) = {v:.2f}x (wall {r[f'{laya}_vs_{mock}_wall']:.2f}x)"
                     f" (goal <= {TARGET_VS_MOCK}x): {met(v <= TARGET_VS_MOCK)}")
    for suite, row in res.get("rss", {}).items():
        if suite == "tests":
            continue
        growth = row["growth_mb"]
        goal = f" (goal <= {TARGET_RSS_GROWTH_MB:g} MB): {met(growth <= TARGET_RSS_GROWTH_MB)}" if suite.startswith("laya") else ""
        lines.append(f"RSS {LABELS[suite]}: after 10 tests {row['after_10_mb']:.1f} MB, after {res['rss']['tests']} "
                     f"{row['after_n_mb']:.1f} MB, +{growth:.1f} MB{goal}")
    return lines


def print_report(res: dict[str, Any]) -> None:
    m, v = res["machine"], res["versions"]
    print(f"machine: {m['cpus']} cpus, {m['platform']}; load average before {m['loadavg_before']}, after {m.get('loadavg_after')}")
    print("versions: " + ", ".join(f"{k} {val}" for k, val in v.items()))
    print(f"{res['tests']} tests per suite, {res['rounds']} interleaved rounds (after a warm-up run each); "
          f"cassette of one decision: {res['cassette_bytes']:,} bytes")
    print()
    print("| suite | CPU s per round | median CPU s | wall s per round | median wall s | per test over floor, CPU | wall |")
    print("|---|---|---:|---|---:|---:|---:|")
    for suite in SUITES:
        row = res["suites"][suite]
        cpu_rounds = " / ".join(f"{x:.2f}" for x in row["cpu_s"])
        wall_rounds = " / ".join(f"{x:.2f}" for x in row["wall_s"])
        per_cpu = f"{row['per_test_cpu_ms']:.2f} ms" if "per_test_cpu_ms" in row else "(floor)"
        per_wall = f"{row['per_test_wall_ms']:.2f} ms" if "per_test_wall_ms" in row else ""
        print(f"| {LABELS[suite]} | {cpu_rounds} | {row['median_cpu_s']:.2f} | {wall_rounds} | {row['median_wall_s']:.2f} "
              f"| {per_cpu} | {per_wall} |")
    print()
    print("per test over the floor, CPU ms, each round against its own floor:")
    for suite in SUITES[1:]:
        row = res["suites"][suite]
        print(f"  {LABELS[suite]}: " + ", ".join(f"{x:.2f}" for x in row["per_test_cpu_ms_by_round"]))
    print()
    for line in res["verdicts"]:
        print("- " + line)
    if "profile" in res:
        print(res["profile"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", type=int, default=300, help="tests per suite (default 300)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--rss-tests", type=int, default=1000, help="tests in the RSS suites (default 1000)")
    parser.add_argument("--skip-rss", action="store_true")
    parser.add_argument("--profile", action="store_true", help="add cProfile listings of the replay suites")
    parser.add_argument("--profile-top", type=int, default=40)
    parser.add_argument("--json", action="store_true", help="print the results as one JSON object")
    parser.add_argument("--keep", type=Path, help="generate the project in this (new) directory and keep it")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    res: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "loadavg_before": [round(x, 2) for x in os.getloadavg()]},
        "versions": versions(),
        "tests": args.tests,
        "rounds": args.rounds,
    }
    if args.keep:
        args.keep.mkdir(parents=True)
        root = args.keep
    else:
        root = Path(tempfile.mkdtemp(prefix="bench-downstream-"))
    try:
        project = Project(root, args.tests, 0 if args.skip_rss else args.rss_tests)
        project.record()
        res["cassette_bytes"] = project.cassette_bytes
        res.update(measure(project, args.rounds))
        res["ratios"] = ratios(res)
        if not args.skip_rss:
            rss: dict[str, Any] = {"tests": args.rss_tests}
            for suite in RSS_SUITES:
                points = project.rss(suite)
                last = max(int(k) for k in points)
                rss[suite] = {"points_mb": {k: round(b / 2**20, 1) for k, b in points.items()},
                              "after_10_mb": points["10"] / 2**20, "after_n_mb": points[str(last)] / 2**20,
                              "growth_mb": (points[str(last)] - points["10"]) / 2**20}
            res["rss"] = rss
        if args.profile:
            res["profile"] = "".join(project.profile(s, args.profile_top) for s in ("laya_own", "laya_client", "recording"))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    res["machine"]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    res["verdicts"] = verdicts(res)
    res["elapsed_s"] = time.perf_counter() - started
    if args.json:
        print(json.dumps(res, indent=2, default=str))
    else:
        print_report(res)
        print(f"\n(elapsed {res['elapsed_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

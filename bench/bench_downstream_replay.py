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
- ``...@warm``, ``...@first``, ``...@second``: the same with pytest's cache, so the derived cache:
  read back (a later run), empty (a first run, which notes its files), and the run after such a
  first one (which writes the entries; docs/cassettes.md);
- ``mock_httpx``: the service called through a module-level
  ``httpx.Client(transport=httpx.MockTransport(...))`` answering the recorded bytes;
- ``mock_kit``: a module-level ``ServedLayaClient`` on such a MockTransport.
- ``floor_own`` and ``floor_kit``: the floor of a validated replay, as a suite. Each test reads its
  own cassette (the ``laya_own`` or ``laya_client`` suite's file for the same test) as replay reads
  a file (the direct reader, then ``replay._load``); a MockTransport answers each request with the
  interaction its bytes match, its ids echoed, after the plugin's spec check of that exchange
  (``Conformance.check``, its claimed spec). Only the plugin's plumbing is missing: finding the
  route, the exchange's and the call's bookkeeping, the cassette's play counts.

Per decision: the two pytest-laya suites and the two MockTransport suites again, each test making
``--decisions`` (default 30) decisions instead of one (its cassette holds that many). What one more
decision costs is ``(median(suite with D decisions) - median(suite with 1)) / (tests * (D - 1))``:
per-test costs (fixtures, opening the cassette) cancel out, what is left is the request, its
replay, and its validation. ``laya_own`` is compared with ``mock_httpx``, ``laya_client`` with
``mock_kit`` (the same client on both sides).

A floor's parts also cost something measured in this process, in a hot loop (`decision_parts`);
in the suite the same reading and check cost about twice as much (other code runs between two
decisions), so each uncached suite is also compared with its floor measured as a suite, round by
round.

Both the pytest-laya and the pytest-recording suites are recorded once, from the fake Laya server
(``pytest_laya.fake.FakeLayaServer``) on loopback, so both replay the very same requests and
answers. Then ``--rounds`` rounds (default 3) run every suite once, interleaved, each as a fresh
``python -m pytest -q -p no:cacheprovider test_<suite>.py`` subprocess with bytecode cached in the
temporary directory (one untimed warm-up run of each first). Per suite and round, three measures:

- test-loop CPU (the headline): the pytest process's CPU time from its first test to its end
  (the summary included), taken by a conftest hook. Start-up and collection (importing the test
  module) hold none of the plugins' per-test work and only add noise on a shared machine; every
  per-test cost is in the loop, including what happens once per process on first use (importing
  vcrpy, loading the specs);
- process CPU: the whole child process (user + system), start-up included;
- wall time.

Reported: the medians per suite, and the cost per test over the empty floor,
``(median(suite) - median(empty)) / tests``, in each measure, with each round against its own
floor so the spread shows. A goal's verdict is the median of its ratio within each round (in
test-loop CPU): a round runs every suite once, back to back, so a floor that swings between rounds
on a shared machine moves both sides of that round's ratio.

Goals (issue 18, section 1), each a ratio within one run:

- pytest-laya's cost per test <= 0.5x pytest-recording's, validation included (both pytest-laya
  suites);
- per decision, <= 2x the MockTransport floor (``laya_own`` against ``mock_httpx``, ``laya_client``
  against ``mock_kit``);
  where the reading and the check alone cost more than that (the floor suites), within 10% of the
  floor suite;
- memory: the current RSS (``/proc/self/statm``) after 1,000 replayed tests (``--rss-tests``) at
  most 50 MB above the RSS after 10, measured inside the pytest process by a conftest hook
  (pytest-recording measured alike, for comparison).

``--profile`` runs the ``laya_own``, ``laya_client`` and ``recording`` suites once more under
cProfile and prints the functions with the largest cumulative and own times.

This is a script run by hand, not a test: nothing here asserts on time. Loopback only.

    .venv/bin/python bench/bench_downstream_replay.py [--tests 300] [--decisions 30] [--rounds 3]
        [--rss-tests 1000] [--skip-rss] [--profile] [--json] [--keep DIR]
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
PER_TEST = ("empty", "recording", "laya_own", "laya_client", "mock_httpx", "mock_kit", "laya_own@warm", "laya_own@first",
            "laya_own@second", "laya_client@warm")
PER_DECISION = ("laya_own", "laya_client", "mock_httpx", "mock_kit", "floor_own", "floor_kit", "laya_own@warm",
                "laya_own@first", "laya_own@second", "laya_client@warm")
ROUND_ORDER = ("empty", "recording", "laya_own", "mock_httpx", "floor_own", "laya_own@warm", "laya_own@first",
               "laya_own@second", "mock_kit", "floor_kit", "laya_client", "laya_client@warm")
PEERS = {"laya_own": "mock_httpx", "laya_client": "mock_kit", "laya_own@warm": "mock_httpx",
         "laya_own@first": "mock_httpx", "laya_own@second": "mock_httpx", "laya_client@warm": "mock_kit"}
#: Each uncached pytest-laya suite, with the suite that does only what its replay must (its floor, in the suite).
FLOOR_SUITES = {"laya_own": "floor_own", "laya_client": "floor_kit"}
LABELS = {
    "empty": "empty tests (floor)",
    "recording": "pytest-recording, module-level httpx.Client",
    "laya_own": "pytest-laya, module-level httpx.Client on laya_url (validated)",
    "laya_client": "pytest-laya, laya_client (validated)",
    "mock_httpx": "MockTransport, module-level httpx.Client",
    "mock_kit": "MockTransport, module-level ServedLayaClient",
    "floor_own": "MockTransport answering from the cassette, read and checked by the kit (the floor), httpx.Client",
    "floor_kit": "MockTransport answering from the cassette, read and checked by the kit (the floor), ServedLayaClient",
    "laya_own@warm": "pytest-laya, own httpx.Client on laya_url (validated), derived cache read (a later run)",
    "laya_own@first": "pytest-laya, own httpx.Client on laya_url (validated), an empty derived cache (a first run: files noted)",
    "laya_own@second": "pytest-laya, own httpx.Client on laya_url (validated), derived cache written (a second run)",
    "laya_client@warm": "pytest-laya, laya_client (validated), derived cache read (a later run)",
}
#: The environment variable the pytest-recording suite reads its (recorded) Laya URL from.
URL_ENV = "ACME_LAYA_URL"
RSS_ENV = "BENCH_RSS_OUT"
LOOP_ENV = "BENCH_LOOP_OUT"
RSS_SUITES = ("recording", "laya_own", "laya_client")


# ------------------------------------------------------------------------------ the project

SERVICE = f'''"""Acme's ticket triage: calls a served Laya with its own module-level httpx client."""

import httpx

QUESTIONS = {QUESTIONS!r}
CLIENT = httpx.Client(timeout=10.0)


def message(k):
    return {STATE!r} + f" (order {{k}})"


def triage(url, text, client=CLIENT):
    """(team, refund probability) for one support message."""
    response = client.post(url + "/v1/systemone", json={{"state": text, "questions": QUESTIONS}})
    response.raise_for_status()
    answers = response.json()["answers"]
    return answers["team"]["choice"], answers["refund"]["noul"]
'''

CONFTEST = f'''
import os
import time

import pytest

_LOOP = os.environ.get({LOOP_ENV!r})

if _LOOP:  # CPU time from the first test to the end of the run (the summary included)
    _STARTED = []

    def pytest_runtestloop(session):
        _STARTED.append(time.process_time())

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(config):
        with open(_LOOP, "w") as f:
            f.write(repr(time.process_time() - _STARTED[0]))

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
# Test i asks about messages i*D .. i*D+D-1 (D decisions: 1 for the per-test suites).
LOOP = '''@pytest.mark.parametrize("i", range(@N@))
def test_decide(@FIXTURE@i):
    for k in range(i * @D@, i * @D@ + @D@):
'''
CHECK_OWN = '''        team, refund = triage(@URL@, message(k)@CLIENT@)
        assert team in QUESTIONS["team"]["criteria"] and 0.0 <= refund <= 1.0
'''
CHECK_KIT = '''        decision = @CLIENT@.decide(message(k), QUESTIONS)
        assert decision["team"].key in QUESTIONS["team"]["criteria"] and 0.0 <= decision["refund"].p <= 1.0
'''
MOCK = '''import httpx

BODY = @BODY@
HEADERS = @HEADERS@
TRANSPORT = httpx.MockTransport(lambda request: httpx.Response(200, headers=HEADERS, content=BODY))
'''
# The least a validated replay does, with none of the plugin's plumbing: each test reads its own
# cassette (the laya suite's file for the same test) as replay reads a file (the direct reader,
# then ``replay._load``: request ids, filters, scrubbing, the index); a MockTransport answers each
# request with the interaction its bytes match, its ids echoed (``echo_ids``), after the plugin's
# spec check of that exchange against its claimed spec (``Conformance.check``, as a run showing no
# table checks).
FLOOR = '''from pathlib import Path

import httpx

from pytest_laya.cassettes import direct_reader
from pytest_laya.cassettes.config import CassetteConfig
from pytest_laya.cassettes.replay import _load
from pytest_laya.cassettes.request_ids import echo_ids
from pytest_laya.intercept.laya_route import exchange_of
from pytest_laya.intercept.request import Request
from pytest_laya.specs.conformance import Conformance

FOLDER = Path(__file__).parent / "cassettes" / "@CASSETTES@"
CONFIG = CassetteConfig()
TALLY = Conformance(claimed_only=True)
LOADED = []


def answer(request):
    loaded = LOADED[0]
    body = request.read()
    recorded, response = loaded.interactions[loaded.exact[(request.method, request.url.path, (), body)][0]]
    response = echo_ids(response, request)
    assert not TALLY.check(exchange_of(recorded, response), server="replay", claimed="target")
    return httpx.Response(response["status"]["code"], content=response["body"]["string"],
                          headers=[(name, value) for name, values in response["headers"].items() for value in values])


TRANSPORT = httpx.MockTransport(answer)


@pytest.fixture
def cassette(request):
    found = direct_reader.read((FOLDER / f"{request.node.name}.yaml").read_text(encoding="utf-8"), Request)
    LOADED[:] = [_load(found.head, found.requests, found.responses, None, CONFIG)]
    yield
    LOADED.clear()


'''
TEMPLATES = {
    "empty": "import pytest\n\n\n" + LOOP.replace("@FIXTURE@", "") + "        pass\n",
    "recording": HEAD + f'''import os

URL = os.environ[{URL_ENV!r}]


@pytest.fixture(scope="module")
def vcr_config():
    return {{"match_on": ["method", "scheme", "host", "port", "path", "query", "body"]}}


@pytest.mark.vcr
''' + LOOP.replace("@FIXTURE@", "") + CHECK_OWN.replace("@URL@", "URL").replace("@CLIENT@", ""),
    "laya_own": HEAD + "\n" + LOOP.replace("@FIXTURE@", "laya_url, ") + CHECK_OWN.replace("@URL@", "laya_url").replace(
        "@CLIENT@", ""),
    "laya_client": HEAD + "\n" + LOOP.replace("@FIXTURE@", "laya_client, ") + CHECK_KIT.replace("@CLIENT@", "laya_client"),
    "mock_httpx": HEAD + MOCK + "MOCK = httpx.Client(transport=TRANSPORT)\n\n\n" + LOOP.replace("@FIXTURE@", "")
    + CHECK_OWN.replace("@URL@", '"http://laya.invalid"').replace("@CLIENT@", ", client=MOCK"),
    "mock_kit": HEAD + "from pytest_laya.client import ServedLayaClient\n\n" + MOCK
    + 'CLIENT = ServedLayaClient("http://laya.invalid", transport=TRANSPORT)\n\n\n' + LOOP.replace("@FIXTURE@", "")
    + CHECK_KIT.replace("@CLIENT@", "CLIENT"),
    "floor_own": HEAD + FLOOR + "MOCK = httpx.Client(transport=TRANSPORT)\n\n\n" + LOOP.replace("@FIXTURE@", "cassette, ")
    + CHECK_OWN.replace("@URL@", '"http://laya.invalid"').replace("@CLIENT@", ", client=MOCK"),
    "floor_kit": HEAD + "from pytest_laya.client import ServedLayaClient\n" + FLOOR
    + 'CLIENT = ServedLayaClient("http://laya.invalid", transport=TRANSPORT)\n\n\n' + LOOP.replace("@FIXTURE@", "cassette, ")
    + CHECK_KIT.replace("@CLIENT@", "CLIENT"),
}
#: The laya suite whose cassettes each floor suite reads.
FLOOR_READS = {"floor_own": "laya_own", "floor_kit": "laya_client"}


def module_of(suite: str, decisions: int = 1, rss: bool = False) -> str:
    """The test module's name (``test_<it>.py``), with the suite's cache variant after ``@``."""
    suite, at, cached = suite.partition("@")
    return ("rss_" if rss else "") + suite + (f"_d{decisions}" if decisions > 1 else "") + at + cached


def write_suite(proj: Path, suite: str, n: int, decisions: int = 1, rss: bool = False,
                canned: tuple[bytes, list[tuple[str, str]]] | None = None) -> None:
    text = TEMPLATES[suite].replace("@N@", str(n)).replace("@D@", str(decisions))
    if suite in FLOOR_READS:
        text = text.replace("@CASSETTES@", f"test_{module_of(FLOOR_READS[suite], decisions)}")
    if canned is not None:
        text = text.replace("@BODY@", repr(canned[0])).replace("@HEADERS@", repr(canned[1]))
    (proj / f"test_{module_of(suite, decisions, rss)}.py").write_text(text, encoding="utf-8")


# ------------------------------------------------------------------------------ running

def pytest_run(proj: Path, args: list[str], env: dict[str, str] | None = None,
               extra: list[str] = (), cache_dir: Path | None = None) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """(wall s, CPU s of the child, result) of one ``python -m pytest`` run in `proj`.

    The child's CPU time (user + system) is the growth of this process's RUSAGE_CHILDREN over
    the run: runs are sequential, and the child is reaped before the second reading.
    """
    full_env = child_env("cached")
    # The children import the kit from this tree (child_env drops PYTHONPATH; an editable install
    # elsewhere would be measured instead).
    full_env["PYTHONPATH"] = os.pathsep.join([str(BENCH.parent), *filter(None, [os.environ.get("PYTHONPATH")])])
    full_env.update(env or {})
    cache = ["-o", f"cache_dir={cache_dir}"] if cache_dir is not None else ["-p", "no:cacheprovider"]
    cmd = [PY, *extra, "-m", "pytest", "-q", *cache, *args]
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

    def __init__(self, root: Path, n: int, decisions: int, rss_n: int) -> None:
        self.root = root
        self.n, self.decisions, self.rss_n = n, decisions, rss_n
        bench_plugin._PYC_PREFIX[:] = [root / "pycache"]
        self.proj = root / "downstream"
        (self.proj / "acme").mkdir(parents=True)
        (self.proj / "acme" / "__init__.py").write_text("", encoding="utf-8")
        (self.proj / "acme" / "triage.py").write_text(SERVICE, encoding="utf-8")
        (self.proj / "conftest.py").write_text(CONFTEST, encoding="utf-8")
        # pythonpath: the service imports from the project root; the loop-scope line silences
        # pytest-asyncio's deprecation warning, in every suite alike.
        (self.proj / "pytest.ini").write_text("[pytest]\npythonpath = .\nasyncio_default_fixture_loop_scope = function\n",
                                              encoding="utf-8")
        for suite in ("empty", "recording", "laya_own", "laya_client"):
            write_suite(self.proj, suite, n)
        for suite in ("laya_own", "laya_client"):
            write_suite(self.proj, suite, n, decisions)
        for suite in RSS_SUITES if rss_n else ():
            write_suite(self.proj, suite, rss_n, rss=True)
        self.url = ""
        self.cassette_bytes = 0

    def record(self) -> None:
        laya = [f"test_{module_of(s)}.py" for s in ("laya_own", "laya_client")]
        laya += [f"test_{module_of(s, self.decisions)}.py" for s in ("laya_own", "laya_client")]
        recording = [f"test_{module_of('recording')}.py"]
        if self.rss_n:
            laya += [f"test_{module_of(s, rss=True)}.py" for s in ("laya_own", "laya_client")]
            recording += [f"test_{module_of('recording', rss=True)}.py"]
        with FakeLayaServer() as fake:
            self.url = fake.url
            pytest_run(self.proj, [*laya, "--laya-record", "--laya-url", fake.url])
            pytest_run(self.proj, [*recording, "--record-mode=rewrite"], env={URL_ENV: fake.url})
        # The floors answer with what a cassette holds: the body and headers of test 0's answer.
        from vcr.serializers import yamlserializer

        first = self.proj / "cassettes" / "test_laya_own" / "test_decide[0].yaml"
        response = yamlserializer.deserialize(first.read_text(encoding="utf-8"))["interactions"][0]["response"]
        canned = (response["body"]["string"].encode("utf-8"), [(k, v) for k, vs in response["headers"].items() for v in vs])
        for suite in ("mock_httpx", "mock_kit", "floor_own", "floor_kit"):
            write_suite(self.proj, suite, self.n, canned=canned)
            write_suite(self.proj, suite, self.n, self.decisions, canned=canned)
        self.cassette_bytes = len(first.read_bytes())

    def args(self, module: str) -> tuple[list[str], dict[str, str]]:
        if module.removeprefix("rss_").startswith("recording"):
            return [f"test_{module}.py", "--record-mode=none"], {URL_ENV: self.url}
        return [f"test_{module}.py"], {}

    def run(self, module: str, tests: int) -> dict[str, float]:
        """One run of a suite: its wall time, its process's CPU time, and its CPU time from the first
        test to the end (start-up and collection left out: they add noise, not per-test cost).

        A module named ``...@warm`` runs with pytest's cache in a folder of its own that every run of
        it shares (the plugin's derived cache read back, after the warm-up runs filled it); ``...@first``
        with a cache folder emptied before each run (a one-off run: it notes its files); ``...@second``
        the run after such a first one, untimed (the run that keeps the entries)."""
        module, _, cached = module.partition("@")
        cache_dir = None
        if cached:
            cache_dir = self.root / f"cache-{module}-{cached}"
            if cached in ("first", "second"):
                shutil.rmtree(cache_dir, ignore_errors=True)
        args, env = self.args(module)
        if cached == "second":
            pytest_run(self.proj, args, env, cache_dir=cache_dir)
        loop_file = self.root / "loop.txt"
        wall, cpu, done = pytest_run(self.proj, args, {**env, LOOP_ENV: str(loop_file)}, cache_dir=cache_dir)
        if f"{tests} passed" not in done.stdout:
            raise RuntimeError(f"{module}: expected {tests} passed:\n{done.stdout[-2000:]}")
        return {"wall": wall, "cpu": cpu, "loop": float(loop_file.read_text())}

    def rss(self, suite: str) -> dict[str, int]:
        module = module_of(suite, rss=True)
        args, env = self.args(module)
        out_file = self.root / f"{module}.json"
        _, _, done = pytest_run(self.proj, args, {**env, RSS_ENV: str(out_file)})
        if f"{self.rss_n} passed" not in done.stdout:
            raise RuntimeError(f"{module}: expected {self.rss_n} passed:\n{done.stdout[-2000:]}")
        return {k: int(v) for k, v in json.loads(out_file.read_text()).items()}

    def profile(self, suite: str, top: int) -> str:
        args, env = self.args(module_of(suite))
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

UNITS = ("cpu", "loop", "wall")  # process CPU time, CPU time from the first test on ("test-loop"), wall time


def measure(project: Project, rounds: int) -> dict[str, Any]:
    # One round's order: each suite's many-decision run right after its one-decision run, and each
    # cache variant right after its uncached twin, so what is subtracted or compared ran under one load.
    # Each MockTransport floor sits beside the suites measured against it.
    modules = []
    for suite in ROUND_ORDER:
        modules.append(module_of(suite))
        if suite in PER_DECISION:
            modules.append(module_of(suite, project.decisions))
    for module in modules:  # warm-up: bytecode, page cache; also checks every suite passes
        project.run(module, project.n)
        if module.endswith("@warm"):  # a file's entry is kept from its second run on
            project.run(module, project.n)
    samples: dict[str, dict[str, list[float]]] = {m: {unit: [] for unit in UNITS} for m in modules}
    for _ in range(rounds):
        for module in modules:
            for unit, value in project.run(module, project.n).items():
                samples[module][unit].append(value)
    runs = {m: {**{f"{unit}_s": samples[m][unit] for unit in UNITS},
                **{f"median_{unit}_s": statistics.median(samples[m][unit]) for unit in UNITS}} for m in modules}
    n, d = project.n, project.decisions
    floor = runs["empty"]
    per_test: dict[str, Any] = {}
    for suite in PER_TEST[1:]:
        row = runs[suite]
        per_test[suite] = {unit: (row[f"median_{unit}_s"] - floor[f"median_{unit}_s"]) * 1000.0 / n for unit in UNITS}
        per_test[suite]["cpu_by_round"] = [(c - f) * 1000.0 / n for c, f in zip(row["cpu_s"], floor["cpu_s"])]
        per_test[suite]["loop_by_round"] = [(c - f) * 1000.0 / n for c, f in zip(row["loop_s"], floor["loop_s"])]
    per_decision: dict[str, Any] = {}
    for suite in PER_DECISION:
        one, many = runs[suite], runs[module_of(suite, d)]
        per_decision[suite] = {unit: (many[f"median_{unit}_s"] - one[f"median_{unit}_s"]) * 1e6 / (n * (d - 1))
                               for unit in UNITS}
        per_decision[suite]["loop_by_round"] = [(b - a) * 1e6 / (n * (d - 1))
                                                for a, b in zip(one["loop_s"], many["loop_s"])]
    return {"runs": runs, "per_test_ms": per_test, "per_decision_us": per_decision}


def decision_parts(project: Project, cassettes: int = 30, repeats: int = 5) -> dict[str, float]:
    """What parts of one replayed decision cost, in this process (µs a decision, the best of `repeats`
    passes over the 10-decision laya_own cassettes' interactions):

    - ``read``: reading one recorded interaction, as replay does once per file (the kit's YAML
      direct reader, then without request ids, filtered, scrubbed and indexed: ``replay._load``);
    - ``text``: of which the direct read alone (``direct_reader.read``: the text to fresh requests and responses);
    - ``check_both``: the plugin's spec check of its exchange (``Conformance.check``: both specs, for
      the conformance table), the answer rules included;
    - ``check_claimed``: the same exchange held to its claimed spec only
      (``Conformance(claimed_only=True).check``), as a run that shows no conformance table checks it;
    - ``read_warm``: reading it as a later run does, from the derived cache (``replay._loaded``: the
      file's bytes hashed, its parse, its scrubbed and indexed interactions and its spec verdicts
      read back), its memory caches emptied first as a new process has them;
    - ``check_warm``: the spec check of its exchange with its verdicts read back (``Conformance.check``);
    - ``read_first``: reading it as a first run with an empty cache does (parsed, scrubbed,
      indexed, the file noted for the next run);
    - ``read_keep``: reading it as the run after that does (the same, its claimed spec's verdicts
      worked out, all written to the cache).
    """
    from pytest_laya.cassettes import direct_reader
    from pytest_laya.cassettes.config import CassetteConfig
    from pytest_laya.cassettes.replay import _load
    from pytest_laya.intercept.laya_route import exchange_of
    from pytest_laya.specs.conformance import Conformance

    folder = project.proj / "cassettes" / f"test_{module_of('laya_own', project.decisions)}"
    files = sorted(folder.glob("*.yaml"))[:cassettes]
    texts = [f.read_text(encoding="utf-8") for f in files]
    config = CassetteConfig()
    from pytest_laya.intercept.request import Request

    def read(text: str) -> Any:
        found = direct_reader.read(text, Request)
        assert found is not None, "the bench's cassettes are in the layout vcrpy writes"
        return _load(found.head, found.requests, found.responses, None, config)

    loaded = [read(t) for t in texts]
    exchanges = [exchange_of(request, response) for one in loaded for request, response in one.interactions]
    n = len(exchanges)
    tally, alone = Conformance(), Conformance(claimed_only=True)

    def best(work: Any, before: Any = None) -> float:
        times = []
        for _ in range(repeats):
            if before is not None:
                before()
            started = time.process_time()
            work()
            times.append(time.process_time() - started)
        return min(times) * 1e6 / n

    from pytest_laya.cassettes import derived, head, persist, replay
    from pytest_laya.route.spec_check import replay_verdicts
    from pytest_laya.specs import conformance

    def new_process() -> None:  # what a new process remembers: nothing
        persist._PARSED.clear()
        persist._DIRECT.clear()
        head._HEADS.clear()
        replay._CACHE.clear()
        conformance._VERDICTS.clear()
        for load in conformance.SPECS.values():
            load()._header_verdicts.clear()

    cache_dir = project.root / "parts-cache"

    extras = (replay_verdicts(claimed_only=True),)  # the suites show no table

    def run_of(emptied: bool) -> None:  # a new process reading every file, the folder as earlier runs left it
        if emptied:
            shutil.rmtree(cache_dir, ignore_errors=True)
        derived.use(cache_dir, extras)
        new_process()
        for f in files:
            replay._loaded(f, None, config)
        derived.use(None)  # the run ends: what it noted and kept is written to the folder

    def keep() -> float:  # the run after a first one, timed alone
        return best(lambda: run_of(emptied=False), before=lambda: run_of(emptied=True))

    before = derived.use(cache_dir, extras)
    try:
        cached = {"read_first": best(lambda: run_of(emptied=True)), "read_keep": keep()}
        run_of(emptied=True)
        run_of(emptied=False)
        cached["read_warm"] = best(lambda: run_of(emptied=False))
        run_of(emptied=False)
        warm_tally = conformance.Conformance()
        cached["check_warm"] = best(lambda: [warm_tally.check(e, server="replay", claimed="target") for e in exchanges])
    finally:
        derived.use(*before)
        new_process()
    return {
        "decisions": n,
        **cached,
        "text": best(lambda: [direct_reader.read(t, Request) for t in texts]),
        "read": best(lambda: [read(t) for t in texts]),
        "check_both": best(lambda: new_process() or [tally.check(e, server="replay", claimed="target") for e in exchanges]),
        "check_claimed": best(lambda: new_process() or [alone.check(e, server="replay", claimed="target")
                                                        for e in exchanges]),
    }


def suite_floors(res: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per decision, each uncached pytest-laya suite against its floor measured as a suite
    (`FLOOR`: the same reading and check, none of the plugin's plumbing), within each round and
    as the median of those ratios; and that floor against its MockTransport suite."""
    d = res["per_decision_us"]
    out = {}
    for suite, floor in FLOOR_SUITES.items():
        mock = PEERS[suite]
        over_floor = [a / b if b > 0 else float("inf") for a, b in zip(d[suite]["loop_by_round"], d[floor]["loop_by_round"])]
        floor_over_mock = [a / b if b > 0 else float("inf") for a, b in zip(d[floor]["loop_by_round"], d[mock]["loop_by_round"])]
        out[suite] = {"floor": floor, "code_us": d[suite]["loop"], "floor_us": d[floor]["loop"], "mock_us": d[mock]["loop"],
                      "code_over_floor_by_round": over_floor, "code_over_floor": statistics.median(over_floor),
                      "floor_over_mock_by_round": floor_over_mock, "floor_over_mock": statistics.median(floor_over_mock)}
    return out


def floors(res: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per decision, the floor each pytest-laya own-client suite stands on, from parts measured in
    this run: httpx's own work (the MockTransport suite) + reading the interaction + its spec check
    (its claimed spec: the suites show no conformance table), as that suite reads and checks (no
    cache, a first run noting its files, the next writing the cache, a later run reading it)."""
    mock, parts = res["per_decision_us"]["mock_httpx"]["loop"], res["decision_parts_us"]
    rows = {"laya_own": ("read", "check_claimed"), "laya_own@first": ("read_first", "check_claimed"),
            "laya_own@second": ("read_keep", "check_warm"), "laya_own@warm": ("read_warm", "check_warm")}
    out = {}
    for suite, (read, check) in rows.items():
        floor = mock + parts[read] + parts[check]
        code = res["per_decision_us"][suite]["loop"]
        out[suite] = {"floor_us": floor, "code_us": code, "code_over_floor": code / floor,
                      "floor_over_mock": floor / mock, "parts": f"httpx {mock:.0f} + {read} {parts[read]:.0f} "
                                                                 f"+ {check} {parts[check]:.0f}"}
    return out


def ratios(res: dict[str, Any]) -> dict[str, Any]:
    """Each goal's ratio of medians per measure, and, in test-loop CPU, the ratio within each round
    (the suites of a round run back to back, under one load) and their median: the verdict, so a
    round where the floor swung does not decide it."""
    t, d = res["per_test_ms"], res["per_decision_us"]
    out: dict[str, Any] = {}
    for unit in UNITS:
        for laya, mock in PEERS.items():
            out[f"{laya}_per_test_vs_recording_{unit}"] = t[laya][unit] / t["recording"][unit]
            out[f"{laya}_per_decision_vs_{mock}_{unit}"] = d[laya][unit] / d[mock][unit]
    for laya, mock in PEERS.items():
        for name, mine, peer in ((f"{laya}_per_test_vs_recording", t[laya], t["recording"]),
                                 (f"{laya}_per_decision_vs_{mock}", d[laya], d[mock])):
            rounds = [a / b if b > 0 else float("inf") for a, b in zip(mine["loop_by_round"], peer["loop_by_round"])]
            out[f"{name}_by_round"] = rounds
            out[f"{name}_round_median"] = statistics.median(rounds)
    return out


def verdicts(res: dict[str, Any]) -> list[str]:
    r = res["ratios"]
    met = lambda ok: "MET" if ok else "NOT MET"  # noqa: E731
    lines = []
    def rounds(name: str) -> str:
        return ", ".join(f"{x:.2f}" for x in r[f"{name}_by_round"])

    for laya in PEERS:
        v = r[f"{laya}_per_test_vs_recording_round_median"]
        lines.append(f"per test, {LABELS[laya]} / pytest-recording = {v:.2f}x test-loop CPU, the median of the "
                     f"rounds' ratios ({rounds(f'{laya}_per_test_vs_recording')}; ratio of medians "
                     f"{r[f'{laya}_per_test_vs_recording_loop']:.2f}x, "
                     f"{r[f'{laya}_per_test_vs_recording_cpu']:.2f}x process CPU, "
                     f"{r[f'{laya}_per_test_vs_recording_wall']:.2f}x wall) (goal <= {TARGET_VS_RECORDING}x): "
                     f"{met(v <= TARGET_VS_RECORDING)}")
    for laya, mock in PEERS.items():
        v = r[f"{laya}_per_decision_vs_{mock}_round_median"]
        lines.append(f"per decision, {LABELS[laya]} / {LABELS[mock]} = {v:.2f}x test-loop CPU, the median of the "
                     f"rounds' ratios ({rounds(f'{laya}_per_decision_vs_{mock}')}; ratio of medians "
                     f"{r[f'{laya}_per_decision_vs_{mock}_loop']:.2f}x, "
                     f"{r[f'{laya}_per_decision_vs_{mock}_cpu']:.2f}x process CPU, "
                     f"{r[f'{laya}_per_decision_vs_{mock}_wall']:.2f}x wall) (goal <= {TARGET_VS_MOCK}x): "
                     f"{met(v <= TARGET_VS_MOCK)}")
    for suite, row in res.get("floors", {}).items():
        lines.append(f"per decision, {LABELS[suite]}: {row['code_us']:.0f} us over its floor {row['floor_us']:.0f} us "
                     f"({row['parts']}) = {row['code_over_floor']:.2f}x the floor; the floor is "
                     f"{row['floor_over_mock']:.2f}x MockTransport (within 10% of the floor: "
                     f"{met(row['code_over_floor'] <= 1.1)})")
    for suite, row in res.get("suite_floors", {}).items():
        lines.append(f"per decision, {LABELS[suite]}: {row['code_us']:.0f} us against its floor measured as a suite "
                     f"({LABELS[row['floor']]}) {row['floor_us']:.0f} us = {row['code_over_floor']:.2f}x the floor, the "
                     f"median of the rounds' ratios ({', '.join(f'{x:.2f}' for x in row['code_over_floor_by_round'])}); "
                     f"the floor is {row['floor_over_mock']:.2f}x MockTransport (rounds "
                     f"{', '.join(f'{x:.2f}' for x in row['floor_over_mock_by_round'])}) (within 10% of the floor: "
                     f"{met(row['code_over_floor'] <= 1.1)})")
    rss = res.get("rss", {})
    for suite in RSS_SUITES:
        if suite not in rss:
            continue
        row = rss[suite]
        goal = (f" (goal <= {TARGET_RSS_GROWTH_MB:g} MB): {met(row['growth_mb'] <= TARGET_RSS_GROWTH_MB)}"
                if suite.startswith("laya") else "")
        lines.append(f"RSS, {LABELS[suite]}: {row['after_10_mb']:.1f} MB after 10 tests, {row['after_n_mb']:.1f} MB "
                     f"after {rss['tests']}: +{row['growth_mb']:.1f} MB{goal}")
    return lines


# ------------------------------------------------------------------------------ report

def print_report(res: dict[str, Any]) -> None:
    m, v = res["machine"], res["versions"]
    print(f"machine: {m['cpus']} cpus, {m['platform']}; load average before {m['loadavg_before']}, "
          f"after {m.get('loadavg_after')}")
    print("versions: " + ", ".join(f"{k} {val}" for k, val in v.items()))
    print(f"{res['tests']} tests per suite ({res['decisions']} decisions per test in the per-decision suites), "
          f"{res['rounds']} interleaved rounds after a warm-up run each; a one-decision cassette is "
          f"{res['cassette_bytes']:,} bytes")
    print()
    print("| suite | decisions per test | CPU s per round | median | test-loop CPU s per round | median | wall s per round | median |")
    print("|---|---:|---|---:|---|---:|---|---:|")
    for module, row in res["runs"].items():
        plain, at, cached = module.partition("@")
        suite, _, many = plain.partition("_d")
        decisions = many if many.isdigit() else "1"
        suite = (plain if not many.isdigit() else suite) + at + cached
        cells = " | ".join(f"{' / '.join(f'{x:.2f}' for x in row[f'{unit}_s'])} | {row[f'median_{unit}_s']:.2f}" for unit in UNITS)
        print(f"| {LABELS[suite]} | {decisions} | {cells} |")
    print()
    print("| per test, over the empty floor | CPU ms | test-loop CPU ms | wall ms | CPU ms by round | test-loop CPU ms by round |")
    print("|---|---:|---:|---:|---|---|")
    for suite, row in res["per_test_ms"].items():
        print(f"| {LABELS[suite]} | {row['cpu']:.2f} | {row['loop']:.2f} | {row['wall']:.2f} | "
              f"{', '.join(f'{x:.2f}' for x in row['cpu_by_round'])} | {', '.join(f'{x:.2f}' for x in row['loop_by_round'])} |")
    print()
    print("| per decision (one more decision in a test) | CPU us | test-loop CPU us | wall us |")
    print("|---|---:|---:|---:|")
    for suite, row in res["per_decision_us"].items():
        print(f"| {LABELS[suite]} | {row['cpu']:.0f} | {row['loop']:.0f} | {row['wall']:.0f} |")
    print()
    parts = res.get("decision_parts_us")
    if parts:
        print(f"parts of one decision, in process (CPU µs, best of 5 over {parts['decisions']} recorded decisions): "
              f"reading its interaction {parts['read']:.0f} (the text {parts['text']:.0f}); spec check, both specs "
              f"{parts['check_both']:.0f}, its claimed spec alone {parts['check_claimed']:.0f}; with the derived "
              f"cache: reading it in a first run (noted) {parts['read_first']:.0f}, in the next (written) "
              f"{parts['read_keep']:.0f}, in a later run (read back) "
              f"{parts['read_warm']:.0f}, its spec check then {parts['check_warm']:.0f}")
        print()
    for line in res["verdicts"]:
        print("- " + line)
    if "profile" in res:
        print(res["profile"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", type=int, default=300, help="tests per suite (default 300)")
    parser.add_argument("--decisions", type=int, default=30, help="decisions per test in the per-decision suites (default 30: with 10, what one more decision costs is a difference of two noisy times)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--rss-tests", type=int, default=1000, help="tests in the RSS suites (default 1000)")
    parser.add_argument("--skip-rss", action="store_true")
    parser.add_argument("--profile", action="store_true", help="add cProfile listings of the replay suites")
    parser.add_argument("--profile-top", type=int, default=40)
    parser.add_argument("--json", action="store_true", help="print the results as one JSON object")
    parser.add_argument("--keep", type=Path, help="generate the project in this (new) directory and keep it")
    args = parser.parse_args(argv)
    if args.decisions < 2:
        parser.error("--decisions must be at least 2")

    started = time.perf_counter()
    res: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "loadavg_before": [round(x, 2) for x in os.getloadavg()]},
        "versions": versions(),
        "tests": args.tests,
        "decisions": args.decisions,
        "rounds": args.rounds,
    }
    if args.keep:
        args.keep.mkdir(parents=True)
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-downstream-"))
    try:
        project = Project(root, args.tests, args.decisions, 0 if args.skip_rss else args.rss_tests)
        project.record()
        res["cassette_bytes"] = project.cassette_bytes
        res.update(measure(project, args.rounds))
        res["ratios"] = ratios(res)
        res["decision_parts_us"] = decision_parts(project)
        res["floors"] = floors(res)
        res["suite_floors"] = suite_floors(res)
        if not args.skip_rss:
            rss: dict[str, Any] = {"tests": args.rss_tests}
            for suite in RSS_SUITES:
                points = project.rss(suite)
                last = str(max(int(k) for k in points))
                rss[suite] = {"points_mb": {k: round(b / 2**20, 1) for k, b in points.items()},
                              "after_10_mb": points["10"] / 2**20, "after_n_mb": points[last] / 2**20,
                              "growth_mb": (points[last] - points["10"]) / 2**20}
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

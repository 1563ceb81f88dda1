"""The reference server's engine and micro-batcher, on real laya and the shipped tiny checkpoint.

The engine must answer exactly what laya answers in process (``laya.load(dir).predict``), alone or
batched with other requests, and the batcher must batch without letting one caller's outcome leak
into another's, while keeping the event loop free.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from pytest_laya_reference.batching import BatcherClosed, MicroBatcher, Timed
from pytest_laya_reference.engine import (
    DecisionRequest,
    DecisionResult,
    LayaEngine,
    ModelIdentity,
)
from pytest_laya_reference.tiny_checkpoint import embedded_checkpoint_dir
from tests.helpers.engine_passes import watch_passes

pytest.importorskip("torch")
pytest.importorskip("laya")

TOL = 1e-4 + 1e-9  # laya rounds to 4 decimals; one flipped last digit is 1e-4 plus float noise


# ------------------------------------------------------------------------------------ data

def _choice(n: int, instructions: str = "Which option fits best?") -> dict[str, Any]:
    labels = ["billing", "technical", "shipping", "account", "refund", "fraud", "sales",
              "legal", "privacy", "feedback", "outage", "other"][:n]
    return {"type": "choice", "instructions": instructions,
            "criteria": {label: "Requests about %s" % label for label in labels}}


TRIAGE = {
    "department": _choice(3, "Which team should handle this?"),
    "urgency": {"type": "score", "instructions": "How urgent is it?",
                "criteria": ["not urgent", "soon", "today", "immediately"]},
    "needs_human": {"type": "noul", "instructions": "Does a person need to reply?"},
}
TWO = {"escalate": {"type": "choice", "instructions": "Escalate?", "criteria": ["yes", "no"]}}
TWELVE = {"topic": _choice(12, "What is the topic?")}
SCORE_ONLY = {"sentiment": {"type": "score", "instructions": "Wie zufrieden ist der Kunde?",
                            "criteria": ["sehr unzufrieden", "unzufrieden", "neutral",
                                         "zufrieden", "sehr zufrieden"]}}
NOUL_LABELS = {"spam": {"type": "noul", "instructions": "Is this message spam?",
                        "criteria": {"true": "unsolicited advertising", "false": "a real request"},
                        "labels": {"true": "A", "false": "B"}}}
MIXED = {
    "lang": {"type": "choice", "instructions": "Quelle langue ?",
             "criteria": ["français", "english", "deutsch", "español", "日本語", "other"]},
    "refund": {"type": "noul", "instructions": "Veut-il un remboursement ?"},
    "tone": {"type": "score", "instructions": "Tone", "criteria": ["calm", "annoyed"]},
    "route": _choice(7),
}

PARITY_CASES: list[tuple[Any, dict[str, Any]]] = [
    ("I was charged twice for my order. Please refund the duplicate today.", TRIAGE),
    ("The app crashes every time I open it since yesterday's update.", TWELVE),
    ("Mein Konto wurde zweimal belastet, bitte erstatten Sie den Betrag.", TRIAGE),
    ("Ich bin mit dem Service sehr zufrieden, danke!", SCORE_ONLY),
    ("Mon colis n'est jamais arrivé et personne ne répond.", MIXED),
    ("No puedo iniciar sesión en mi cuenta desde ayer.", TWO),
    ("注文した商品がまだ届きません。返金してください。", TRIAGE),
    ({"message": "WIN A FREE CRUISE!!! click here", "channel": "email"}, NOUL_LABELS),
    ([{"role": "user", "content": "Hi, my card was declined."},
      {"role": "agent", "content": "Sorry to hear that, which card?"},
      {"role": "user", "content": "The Visa ending 4242, and now I'm charged anyway."}], MIXED),
    ({"ticket": {"subject": "Outage", "body": "Everything is down for all users"}, "tier": "gold"},
     TWELVE),
    ("Short.", {"q": _choice(5)}),
    ("Please close my account and delete my data under GDPR.", {**TWO, **SCORE_ONLY}),
]


def _flat(answers: Mapping[str, Mapping[str, Any]]) -> dict[tuple[str, str], float]:
    """Every number that must agree: probabilities, noul, score, confidences, act_probability."""
    out: dict[tuple[str, str], float] = {}
    for qid, answer in answers.items():
        for key, value in (answer.get("probabilities") or {}).items():
            out[(qid, "p:" + key)] = float(value)
        for key in ("noul", "score", "confidence", "answer_confidence"):
            if key in answer:
                out[(qid, key)] = float(answer[key])
        out[(qid, "act")] = float(answer["action"]["act_probability"])
    return out


def _max_diff(got: Mapping[str, Mapping[str, Any]], want: Mapping[str, Mapping[str, Any]]) -> float:
    assert list(got) == list(want), "question order or ids differ"
    for qid in want:
        assert got[qid]["type"] == want[qid]["type"]
        assert got[qid].get("choice") == want[qid].get("choice"), qid
        assert got[qid].get("legend") == want[qid].get("legend"), qid
    a, b = _flat(got), _flat(want)
    assert a.keys() == b.keys()
    return max(abs(a[k] - b[k]) for k in a)


# ------------------------------------------------------------------------------------ fixtures

@pytest.fixture(scope="module")
def checkpoint_dir() -> str:
    return str(embedded_checkpoint_dir())


@pytest.fixture(scope="module", autouse=True)
def _restore_torch_threads() -> Iterator[None]:
    """The engine sets torch's (process-wide) thread count; give the next module its own back."""
    import torch

    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def engine(checkpoint_dir: str) -> Iterator[LayaEngine]:
    eng = LayaEngine({"tiny": checkpoint_dir}, device="cpu")
    eng.load()
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def agent(checkpoint_dir: str) -> Any:
    import laya

    return laya.load(checkpoint_dir, device="cpu")


@pytest.fixture(scope="module")
def singles(engine: LayaEngine) -> list[DecisionResult]:
    return [engine.predict("tiny", [DecisionRequest(s, q)])[0] for s, q in PARITY_CASES]


class Counting:
    """An Engine that records each predict call's size, optionally slowed down in the worker."""

    def __init__(self, inner: LayaEngine, delay: float = 0.0) -> None:
        self.inner = inner
        self.delay = delay
        self.calls: list[int] = []
        self.threads: list[str] = []

    @property
    def models(self) -> Mapping[str, ModelIdentity]:
        return self.inner.models

    @property
    def default_model(self) -> str:
        return self.inner.default_model

    @property
    def ready(self) -> bool:
        return self.inner.ready

    def configured(self) -> list[str]:
        return self.inner.configured()

    def load(self) -> None:
        self.inner.load()

    def predict(self, model: str, requests: Sequence[DecisionRequest]) -> list[DecisionResult]:
        self.calls.append(len(requests))
        self.threads.append(threading.current_thread().name)
        if self.delay:
            time.sleep(self.delay)
        return self.inner.predict(model, requests)

    def close(self) -> None:
        pass


def _refusing_sockets(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    attempts: list[Any] = []

    def refuse(self: socket.socket, address: Any) -> None:
        attempts.append(address)
        raise OSError("network disabled by the test: %r" % (address,))

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    return attempts


# ------------------------------------------------------------------------------------ engine

def test_importing_engine_and_batching_imports_no_torch() -> None:
    code = (
        "import sys\n"
        "import pytest_laya_reference.engine, pytest_laya_reference.batching\n"
        "from pytest_laya_reference.engine import LayaEngine\n"
        "from pytest_laya_reference.tiny_checkpoint import embedded_checkpoint_dir\n"
        "e = LayaEngine({'tiny': str(embedded_checkpoint_dir())})\n"
        "heavy = [m for m in ('torch', 'transformers', 'safetensors') if m in sys.modules]\n"
        "print(heavy)\n"
        "sys.exit(1 if heavy else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_identity_and_readiness_with_no_network(checkpoint_dir: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    fresh = LayaEngine({"tiny": checkpoint_dir}, device="cpu")
    assert fresh.configured() == ["tiny"]
    assert fresh.default_model == "tiny"
    assert fresh.ready is False
    assert dict(fresh.models) == {}
    with pytest.raises(RuntimeError):
        fresh.predict("tiny", [DecisionRequest("x", TWO)])

    attempts = _refusing_sockets(monkeypatch)
    fresh.load()
    fresh.load()  # idempotent
    result = fresh.predict("tiny", [DecisionRequest(*PARITY_CASES[0])])
    monkeypatch.undo()
    assert attempts == []
    assert set(result[0].answers) == set(TRIAGE)

    assert fresh.ready is True
    digest = hashlib.sha256((embedded_checkpoint_dir() / "model.safetensors").read_bytes()).hexdigest()
    identity = fresh.models["tiny"]
    assert identity == ModelIdentity(checkpoint="tiny", revision="sha256:" + digest, device="cpu",
                                     weights_dtype="float32", compiled=False)
    assert identity.to_json() == {"checkpoint": "tiny", "revision": "sha256:" + digest,
                                  "device": "cpu", "weights_dtype": "float32", "compiled": False}
    assert "/" not in json.dumps(identity.to_json())  # no host path leaks
    assert fresh.warmup_ms["tiny"] > 0
    fresh.close()
    fresh.close()
    assert fresh.ready is False


def test_the_core_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_laya_reference.cores import auto_cores

    for name in ("LAYA_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(9)))
    assert auto_cores() == 9  # every core this process may use, shared by the passes running
    monkeypatch.setenv("LAYA_THREADS", "junk")
    assert auto_cores() == 9
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert auto_cores() is None  # the operator decided; torch already honours it
    monkeypatch.setenv("LAYA_THREADS", "5")
    assert auto_cores() == 5  # laya-serve's knob wins


def test_passes_share_the_cores_and_only_large_ones_get_more_than_one_thread() -> None:
    import torch

    from pytest_laya_reference.cores import TOKENS_PER_THREAD, CorePool

    pool = CorePool(4)
    seen: list[tuple[int, int]] = []  # (torch threads in the pass, threads computing at once)
    lock = threading.Lock()
    now = {"threads": 0}

    def one_pass(k: int) -> int:
        with lock:
            now["threads"] += torch.get_num_threads()
            seen.append((torch.get_num_threads(), now["threads"]))
        time.sleep(0.02)
        with lock:
            now["threads"] -= torch.get_num_threads()
        return k * 10

    try:
        assert pool.run(one_pass, [1], tokens=[TOKENS_PER_THREAD // 2]) == [10]
        assert seen == [(1, 1)]  # alone but small: one thread, no barriers to wait at
        seen.clear()
        assert pool.run(one_pass, [1], tokens=[3 * TOKENS_PER_THREAD]) == [10]
        assert seen == [(3, 3)]  # alone and large: a thread per 1,024 tokens, cores permitting
        seen.clear()
        assert pool.run(one_pass, [1, 2], tokens=[8 * TOKENS_PER_THREAD] * 2) == [10, 20]
        assert sorted(seen) == [(1, 1), (2, 3)] or sorted(seen) == [(1, 3), (2, 2)]  # one wide pass at a time
        seen.clear()
        assert pool.run(one_pass, list(range(12)), tokens=[8 * TOKENS_PER_THREAD] * 12) == [k * 10 for k in range(12)]
        assert len(seen) == 12 and max(total for _, total in seen) <= 4  # never more threads than cores
        assert sum(1 for threads, _ in seen if threads == 1) >= 8  # under load, one each
        assert pool.idle
    finally:
        pool.close()


def test_every_pass_on_more_than_one_thread_runs_on_the_same_thread() -> None:
    # libgomp stops every team spinning once it manages more threads than cores: two threads that
    # each ran a two-thread pass made each later pass sleep and wake once per parallel region.
    import torch

    from pytest_laya_reference.cores import TOKENS_PER_THREAD, CorePool

    pool = CorePool(2)
    wide: set[int] = set()
    lock = threading.Lock()

    def one_pass(k: int) -> int:
        with lock:
            if torch.get_num_threads() > 1:
                wide.add(threading.get_ident())
        time.sleep(0.005)
        return k

    def caller(k: int) -> list[int]:
        return pool.run(one_pass, [k], tokens=[2 * TOKENS_PER_THREAD])  # alone: both cores

    try:
        with ThreadPoolExecutor(4) as callers:  # different calling threads, now and then together
            for _ in range(5):
                assert list(callers.map(caller, range(4))) == [[k] for k in range(4)]
        assert pool.run(one_pass, [9], alone=[True]) == [9]
        assert len(wide) == 1 and pool.widest == 2
        assert pool.idle
    finally:
        pool.close()


def test_the_shape_chooser_tries_each_shape_then_keeps_the_fastest_and_looks_again() -> None:
    from pytest_laya_reference.cores import Shape, ShapeChooser

    one, wide = Shape(1, 1), Shape(1, 2)
    chooser = ShapeChooser(explore_every=4)
    cost = {one: 10.8, wide: 8.4}  # quiet: two threads win

    def steps(n: int) -> str:
        picked = ""
        for _ in range(n):
            shape = chooser.choose("512", [one, wide])
            chooser.record("512", shape, cost[shape])
            picked += "w" if shape == wide else "o"
        return picked

    assert steps(2) == "ow"  # each measured once, in the order offered
    # then the fastest, and every 4th choice the shape measured longest ago
    assert steps(6) == "wwowww"
    assert chooser.estimate("512", wide) == 8.4 and chooser.estimate("other", wide) is None

    cost = {one: 10.8, wide: 25.0}  # another process takes a core: two threads wait at barriers
    # two slow passes outvote the quiet ones (the median of the last 3), then one thread
    assert steps(6) == "owwooo"
    # over twice the best's cost: wide is looked at only every 16th choice
    assert steps(32) == "oo" + "w" + "o" * 15 + "w" + "o" * 13

    cost = {one: 10.8, wide: 8.4}  # quiet again: back to two threads after two looks
    assert steps(32) == "oo" + "w" + "o" * 15 + "wwww" + "owww" + "owww" + "ow"
    assert steps(8) == "wwowwwow"  # within 2x: one thread looked at every 4th choice again

    chooser.record("512", wide, 500.0)  # one pass interrupted: not enough to switch
    assert chooser.choose("512", [one, wide]) == wide
    with pytest.raises(ValueError):
        ShapeChooser(explore_every=1)
    with pytest.raises(ValueError):
        chooser.choose("512", [])


def test_a_lone_job_offers_the_shapes_its_rows_can_feed_and_records_their_time_per_token() -> None:
    import torch

    from pytest_laya_reference.cores import CorePool, Shape

    now = [0.0]
    pool = CorePool(2, clock=lambda: now[0], load=_Load(1.0))  # another process busy: shapes measured
    seen: list[tuple[str, int]] = []

    def one_pass(name: str) -> str:
        seen.append((name, torch.get_num_threads()))
        now[0] += 0.004 / torch.get_num_threads()  # a pass: 4 ms on one thread, 2 on two
        return name

    try:
        job = pool.lone_job("tiny")
        assert job.shapes([100]) == [Shape(1, 1)]  # one short row: nothing for a second thread
        assert job.shapes([512]) == [Shape(1, 1), Shape(1, 2)]
        assert job.shapes([512] * 4) == [Shape(2, 1), Shape(1, 1), Shape(1, 2)]
        assert job.shapes([80, 80]) == [Shape(2, 1), Shape(1, 1)]
        # Four short rows feed two threads: laya's own predict ran them faster on two (the floor).
        assert job.shapes([80] * 4) == [Shape(2, 1), Shape(1, 1), Shape(1, 2)]

        key = ("tiny", False, (512).bit_length())
        for _ in range(5):  # 512 tokens, one row: one thread, two threads, then the faster
            job = pool.lone_job("tiny")
            assert job.lanes([512]) == 1
            assert job.run(one_pass, ["row"], [512], [False]) == ["row"]
            if len(seen) in (1, 3):  # each shape's first run warms it up: not recorded, offered again
                assert pool.chooser.estimate(key, job.shape) is None
        assert [t for _, t in seen] == [1, 1, 2, 2, 2]
        assert pool.chooser.estimate(key, Shape(1, 1)) == pytest.approx(4.0 * 1000 / 512)  # ms per 1,000 tokens
        assert pool.chooser.estimate(key, Shape(1, 2)) == pytest.approx(2.0 * 1000 / 512)

        for _ in range(2):  # each shape twice: its warm-up, then its measured run
            seen.clear()
            job = pool.lone_job("tiny")
            assert job.lanes([512] * 4) == 2  # four rows, nothing measured: side by side first
            assert job.run(one_pass, ["a", "b"], [1024, 1024], [False, False]) == ["a", "b"]
            assert sorted(seen) == [("a", 1), ("b", 1)]
        for _ in range(2):
            seen.clear()
            job = pool.lone_job("tiny")
            assert job.lanes([512] * 4) == 1  # then all on one thread, one pass after another
            job.run(one_pass, ["a", "b"], [1024, 1024], [False, False])
            assert seen == [("a", 1), ("b", 1)]
        for _ in range(2):
            seen.clear()
            job = pool.lone_job("tiny")
            assert job.lanes([512] * 4) == 1 and job.shape == Shape(1, 2)  # then wide, on the one wide thread
            job.run(one_pass, ["abcd"], [2048], [False])
            assert seen == [("abcd", 2)] and pool.widest == 2
        assert pool.idle
    finally:
        pool.close()


def test_on_a_quiet_machine_a_lone_request_runs_on_every_core_without_measuring() -> None:
    import torch

    from pytest_laya_reference.cores import QUIET_OTHER_CORES, CorePool, Shape

    load = _Load(0.0)
    pool = CorePool(2, load=load)
    seen: list[tuple[str, int]] = []

    def one_pass(name: str) -> str:
        seen.append((threading.current_thread().name.rsplit("_", 1)[0], torch.get_num_threads()))
        return name

    try:
        for lengths in ([512], [512] * 4, [80] * 4):  # every shape that can feed two threads: wide
            job = pool.lone_job("tiny")
            assert job.lanes(lengths) == 1 and job.shape == Shape(1, 2)
            seen.clear()
            assert job.run(one_pass, ["rows"], [sum(lengths)], [False]) == ["rows"]
            assert seen == [("laya-wide", 2)]
        assert pool.chooser.estimate(("tiny", False, (512).bit_length()), Shape(1, 2)) is None  # not measured
        job = pool.lone_job("tiny")
        assert job.lanes([80]) == 1 and job.shape == Shape(1, 1)  # one short row: one thread, quiet or not

        # Other processes busy, or a machine whose load cannot be read: the chooser decides, and
        # with nothing measured it tries one thread first.
        for figure in (QUIET_OTHER_CORES, 1.5, None):
            load.figure = figure
            job = pool.lone_job("tiny")
            job.lanes([512])
            assert job.shape == Shape(1, 1), figure
        assert pool.idle
    finally:
        pool.close()


def test_other_load_is_the_machines_busy_time_less_this_processes_own(tmp_path: Path) -> None:
    from pytest_laya_reference.cores import OtherLoad

    stat = tmp_path / "stat"
    now, own = [100.0], [5.0]

    def write(user: int, system: int, idle: int, iowait: int, steal: int) -> None:
        stat.write_text("cpu  %d 0 %d %d %d 0 0 %d 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n" % (user, system, idle, iowait, steal))

    write(1000, 500, 9000, 50, 10)
    load = OtherLoad(window=0.1, clock=lambda: now[0], own_cpu=lambda: own[0], stat_path=str(stat))
    assert load.cores() is None  # nothing measured over a window yet
    # One second later: 150 ticks busy (user, system, steal; at 100 ticks a second, 1.5 cores),
    # 0.5 of a core of it this process's own; idle and iowait are not busy.
    now[0], own[0] = 101.0, 5.5
    write(1100, 540, 9400, 90, 20)
    assert load.cores() == pytest.approx(1.0)
    now[0] = 101.05  # within the window: the last figure, the file not read again
    write(1100, 540, 9400, 90, 20000)
    assert load.cores() == pytest.approx(1.0)
    now[0], own[0] = 102.05, 6.0
    write(1100, 540, 9500, 90, 20)  # this process's CPU counted before the file shows its ticks: never below 0
    assert load.cores() == 0.0
    stat.unlink()
    now[0] = 103.0
    assert load.cores() == 0.0  # unreadable now: the last figure stands
    assert OtherLoad(stat_path=str(tmp_path / "absent")).cores() is None  # not Linux: no figure


def test_work_outside_the_passes_runs_on_the_wide_thread_with_every_core() -> None:
    import torch

    from pytest_laya_reference.cores import CorePool

    pool = CorePool(2)
    try:
        where = pool.on_wide(lambda: (threading.current_thread().name.rsplit("_", 1)[0], torch.get_num_threads()))
        assert where == ("laya-wide", 2) and pool.idle
        with pytest.raises(ZeroDivisionError):
            pool.on_wide(lambda: 1 / 0)
        assert pool.idle
    finally:
        pool.close()
    one = CorePool(1)
    try:
        assert one.on_wide(lambda: threading.current_thread()) is threading.current_thread()
    finally:
        one.close()


def test_loading_warming_and_checking_a_checkpoint_start_no_openmp_team_but_the_wide_threads(
        checkpoint_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """libgomp lets every team's threads sleep between parallel regions once all teams' threads
    outnumber the cores: a loading thread's warm-up made every later two-thread pass about twice
    as slow. So everything that loads, warms and checks a checkpoint runs on the wide thread."""
    from laya.router import Router

    threads: list[str] = []
    for name in ("load", "predict_batch"):
        original = getattr(Router, name)

        def recording(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            threads.append(threading.current_thread().name.rsplit("_", 1)[0])
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(Router, name, recording)
    engine = LayaEngine({"tiny": checkpoint_dir}, device="cpu", threads=2)
    engine.load()
    try:
        assert engine.packed["tiny"]  # the packing check ran, and agreed
        assert len(threads) >= 3 and set(threads) == {"laya-wide"}  # load, warm-up, laya's side of the check
        assert engine._pool is not None and engine._pool.idle
    finally:
        engine.close()


def test_a_request_alone_runs_on_the_wide_thread_holding_every_core() -> None:
    import torch

    from pytest_laya_reference.cores import TOKENS_PER_THREAD, CorePool, Shape

    pool = CorePool(2)
    seen: list[tuple[str, int]] = []  # (thread, torch threads) of each pass
    lock = threading.Lock()
    release = threading.Event()

    def one_pass(k: int) -> int:
        with lock:
            seen.append((threading.current_thread().name.rsplit("_", 1)[0], torch.get_num_threads()))
        return k

    def lone() -> list[list[int]]:
        assert release.wait(10)
        return [pool.run(one_pass, [1, 2], shape=Shape(2, 1)),  # side by side
                pool.run(one_pass, [3], shape=Shape(1, 2)),     # on every core
                pool.run(one_pass, [4])]                        # no shape: every core too

    try:
        held = pool.run_alone(lone)
        assert held is not None and not pool.idle
        assert pool.run_alone(lambda: None) is None  # the cores are taken
        # Passes that come meanwhile wait for the cores, holding none (the deadlock a lone request
        # on the wide thread once had: it waited for cores that such a pass held).
        with ThreadPoolExecutor(2) as callers:
            waiting = [callers.submit(pool.run, one_pass, [10 + k], tokens=[2 * TOKENS_PER_THREAD]) for k in range(2)]
            time.sleep(0.05)
            assert not any(w.done() for w in waiting)
            release.set()
            assert held.result(timeout=30) == [[1, 2], [3], [4]]
            assert [w.result(timeout=30) for w in waiting] == [[10], [11]]
        assert seen[:4] == [("laya-wide", 1), ("laya-lane", 1), ("laya-wide", 2), ("laya-wide", 2)] or \
            seen[:4] == [("laya-lane", 1), ("laya-wide", 1), ("laya-wide", 2), ("laya-wide", 2)]
        assert pool.idle and pool.run_alone(lambda: 7).result(timeout=30) == 7  # type: ignore[union-attr]
    finally:
        release.set()
        pool.close()


def test_a_lone_request_on_one_thread_leaves_the_other_core_to_other_passes() -> None:
    from pytest_laya_reference.cores import TOKENS_PER_THREAD, CorePool, Shape

    pool = CorePool(2)
    caller = ThreadPoolExecutor(1)
    inside, release = threading.Event(), threading.Event()

    def slow_pass(k: int) -> int:
        inside.set()
        assert release.wait(10)
        return k

    try:
        held = pool.run_alone(lambda: pool.run(slow_pass, [1], shape=Shape(1, 1)))
        assert held is not None and inside.wait(10)
        # One core is left: a one-thread pass runs now, while the lone one still holds the other.
        other = caller.submit(pool.run, lambda k: k, [2], tokens=[2 * TOKENS_PER_THREAD])
        assert other.result(timeout=10) == [2]
        release.set()
        assert held.result(timeout=30) == [1]
        assert pool.idle and pool.widest == 1
    finally:
        release.set()
        caller.shutdown()
        pool.close()

def test_one_client_at_a_time_runs_on_the_thread_of_its_pass_and_busy_ones_do_not(
        checkpoint_dir: str, singles: list[DecisionResult], monkeypatch: pytest.MonkeyPatch) -> None:
    engine = LayaEngine({"tiny": checkpoint_dir}, device="cpu", threads=2, passes=2)
    engine.load()
    try:
        threads: list[str] = []
        watch_passes(engine, "tiny", monkeypatch,
                     lambda batch: threads.append(threading.current_thread().name.rsplit("_", 1)[0]))
        handed: list[bool] = []  # each run_alone call: whether it took the request
        run_alone = engine.run_alone

        def counting_run_alone(model: str, fn: Any) -> Any:
            future = run_alone(model, fn)
            handed.append(future is not None)
            return future

        monkeypatch.setattr(engine, "run_alone", counting_run_alone)

        async def lone_then_many() -> tuple[Timed, list[Timed]]:
            batcher = MicroBatcher(engine, max_batch=4, window_ms=0, passes=2)
            try:
                await batcher.submit("tiny", DecisionRequest(*PARITY_CASES[1]))
                assert handed == []  # the first one: not known to be one client at a time yet
                threads.clear()
                first = await batcher.submit("tiny", DecisionRequest(*PARITY_CASES[0]))  # one client at a time
                lone_threads = list(threads)
                threads.clear()
                many = await asyncio.wait_for(asyncio.gather(*(
                    batcher.submit("tiny", DecisionRequest(*PARITY_CASES[i % len(PARITY_CASES)])) for i in range(12))), 120)
                threads.insert(0, ",".join(lone_threads))
                return first, many
            finally:
                await batcher.aclose()

        first, many = asyncio.run(lone_then_many())
        lone_threads = threads.pop(0).split(",")
        assert handed[0] is True and "laya-wide" in lone_threads and set(lone_threads) <= {"laya-wide", "laya-lane"}
        assert first.result == singles[0]
        for i, timed in enumerate(many):
            assert _max_diff(timed.result.answers, singles[i % len(PARITY_CASES)].answers) <= TOL
        assert engine._pool is not None and engine._pool.idle
        monkeypatch.setattr(engine, "_inflight", 1)  # another decision in inference: not alone
        assert run_alone("tiny", lambda: None) is None
    finally:
        engine.close()

def test_a_failed_pass_fails_the_call_after_the_others_end() -> None:
    from pytest_laya_reference.cores import CorePool

    pool = CorePool(2)
    ended: list[int] = []

    def one_pass(k: int) -> int:
        if k == 1:
            raise ValueError("pass 1 failed")
        time.sleep(0.05)
        ended.append(k)
        return k

    try:
        with pytest.raises(ValueError, match="pass 1"):
            pool.run(one_pass, [0, 1, 2])
        assert sorted(ended) == [0, 2] and pool.idle
        assert pool.run(one_pass, [3]) == [3]  # the budget was given back
    finally:
        pool.close()


def test_a_pass_flagged_alone_runs_by_itself_on_every_core() -> None:
    import torch

    from pytest_laya_reference.cores import CorePool

    pool = CorePool(2)
    log: list[tuple[str, str, int]] = []  # (event, pass, torch threads)
    lock = threading.Lock()

    def one_pass(name: str) -> str:
        with lock:
            log.append(("start", name, torch.get_num_threads()))
        time.sleep(0.03)
        with lock:
            log.append(("end", name, 0))
        return name

    try:
        names = ["a", "b", "big", "c", "d"]
        assert pool.run(one_pass, names, alone=[False, False, True, False, False]) == names
        start, end = log.index(("start", "big", 2)), log.index(("end", "big", 0))
        assert end == start + 1  # nothing started or ended while it ran, and it had both cores
        # the passes queued behind it waited for it: not starved by the small ones
        assert {"c", "d"} <= {n for e, n, _ in log[end + 1:] if e == "start"}
    finally:
        pool.close()


def test_rows_longer_than_a_pass_run_alone(engine: LayaEngine) -> None:
    from pytest_laya_reference.packing import predict_packed

    agent = engine._agents["tiny"]
    flags: list[tuple[list[int], bool]] = []

    def run(fn: Any, passes: list[list[int]], tokens: list[int], alone: list[bool]) -> list[Any]:
        flags.extend(zip(passes, alone))
        return [fn(p) for p in passes]

    long_state = " ".join(["The customer reports a double charge on the invoice."] * 10)
    results = predict_packed(agent, [(long_state, TRIAGE, {}), ("Short.", TWO, {})], run, pass_tokens=64)
    assert len(results) == 2
    for rows, alone in flags:
        assert alone == (len(rows) == 1 and rows[0] < 3)  # the three long rows come first, sorted


def test_without_a_budget_torch_threads_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from pytest_laya_reference.cores import CorePool, Shape

    calls: list[int] = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    pool = CorePool(None, workers=2)
    try:
        assert pool.run(lambda k: k, [0, 1], tokens=[4096, 4096]) == [0, 1]
        assert pool.run(lambda k: k, [2], alone=[True]) == [2]
        assert pool.run(lambda k: k, [3, 4], shape=Shape(1, 2)) == [3, 4]
        assert calls == [] and pool.widest == 0  # never set, whatever the passes
    finally:
        pool.close()


def test_rows_are_planned_longest_first_within_the_token_cap() -> None:
    from pytest_laya_reference.packing import plan_passes

    lengths = [100, 512, 300, 512, 90, 512, 512, 700]
    passes = plan_passes(lengths, pass_tokens=1024)
    assert sorted(i for p in passes for i in p) == list(range(len(lengths)))
    assert passes[0] == [7]  # a row over the cap runs alone
    for p in passes:
        assert [lengths[i] for i in p] == sorted((lengths[i] for i in p), reverse=True)
        assert len(p) == 1 or len(p) * max(lengths[i] for i in p) <= 1024
    # Lanes: at least that many passes, of about equal size, when there are the rows to fill them.
    assert [len(p) for p in plan_passes([50] * 5, lanes=2)] == [3, 2]
    # 12 rows of 512 on 2 lanes: 4 passes of 3 (two rounds of two), not 3 of 4 (one lane idle in the second)
    assert [len(p) for p in plan_passes([512] * 12, lanes=2)] == [3, 3, 3, 3]
    assert plan_passes([50] * 5) == [[0, 1, 2, 3, 4]]
    assert len(plan_passes([50], lanes=4)) == 1 and plan_passes([]) == []


def test_names_and_sources_are_checked_without_loading(checkpoint_dir: str) -> None:
    with pytest.raises(ValueError):
        LayaEngine({})
    with pytest.raises(ValueError):
        LayaEngine({"tiny": checkpoint_dir, "TINY": checkpoint_dir})
    with pytest.raises(ValueError):
        LayaEngine({"a/b": checkpoint_dir})
    hub = LayaEngine({"tiny": checkpoint_dir, "multi": "multilingual", "mine": "someone/laya-ft"})
    assert hub.configured() == ["tiny", "multi", "mine"] and hub.default_model == "tiny"
    # Hub sources keep laya's own loading path; their public name is the hub id.
    assert hub._configured["multi"].spec == ("convaiinnovations/laya", "multilingual")
    assert hub._configured["multi"].checkpoint == "convaiinnovations/laya/multilingual"
    assert hub._configured["mine"].spec == "someone/laya-ft"


def test_read_only_question_mappings_are_accepted(engine: LayaEngine,
                                                  singles: list[DecisionResult]) -> None:
    from types import MappingProxyType

    state, questions = PARITY_CASES[4]
    frozen = MappingProxyType({qid: MappingProxyType(q) for qid, q in questions.items()})
    result = engine.predict("tiny", [DecisionRequest(state, frozen)])[0]
    assert result == singles[4]


def test_unknown_model_is_a_key_error(engine: LayaEngine) -> None:
    with pytest.raises(KeyError) as caught:
        engine.predict("english", [DecisionRequest("hello", TWO)])
    assert caught.value.args == ("english",)
    with pytest.raises(KeyError):
        engine.predict("TINY", [])
    assert engine.predict("tiny", []) == []


def test_laya_rejected_question_is_a_value_error(engine: LayaEngine) -> None:
    bad = {"flag": {"type": "noul", "instructions": "Flag it?", "criteria": {"yes": "y", "no": "n"}}}
    with pytest.raises(ValueError, match="flag"):
        engine.predict("tiny", [DecisionRequest("hello", bad)])


def test_single_predictions_equal_laya_in_process(engine: LayaEngine, agent: Any,
                                                   singles: list[DecisionResult]) -> None:
    worst = 0.0
    for (state, questions), result in zip(PARITY_CASES, singles):
        want = agent.predict(state, questions)
        worst = max(worst, _max_diff(result.answers, want["answers"]))
        assert result.usage == want["usage"]
        for answer in result.answers.values():
            # laya-serve's wire: x_jev_confidence on choice and score answers only
            assert ("x_jev_confidence" in answer) == (answer["type"] in ("choice", "score"))
    assert worst <= TOL, worst


def test_single_predictions_equal_laya_router(engine: LayaEngine, checkpoint_dir: str,
                                              singles: list[DecisionResult]) -> None:
    """laya-serve's path: Router(models=...) and router.predict(..., model=name)."""
    from laya import Router

    router = Router(models={"tiny": checkpoint_dir}, device="cpu", default="tiny", max_loaded=1)
    for (state, questions), result in zip(PARITY_CASES, singles):
        want = router.predict(state, questions, model="tiny")
        assert _max_diff(result.answers, want["answers"]) <= TOL
        assert result.usage == want["usage"]


def _count_passes(engine: LayaEngine, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Rows of each forward pass the engine runs from now on."""
    rows: list[int] = []
    watch_passes(engine, "tiny", monkeypatch, lambda batch: rows.append(int(batch["input_ids"].shape[0])))
    return rows


def test_heterogeneous_batch_shares_passes_and_equals_singles(engine: LayaEngine,
                                                               singles: list[DecisionResult],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    assert engine.packed == {"tiny": True}
    picks = [0, 4, 2, 1, 7, 8, 5, 3]  # 8 requests: different states and question sets, repeats
    rows = _count_passes(engine, monkeypatch)
    batch = engine.predict("tiny", [DecisionRequest(*PARITY_CASES[i]) for i in picks])
    assert len(batch) == len(picks)
    for i, result in zip(picks, batch):
        assert _max_diff(result.answers, singles[i].answers) <= TOL
        assert result.usage == singles[i].usage
    distinct = {json.dumps(PARITY_CASES[i][1]) for i in picks}
    # laya's own path runs one pass per question set; packed, the sets share passes.
    assert sum(rows) == sum(len(PARITY_CASES[i][1]) for i in picks)
    assert len(rows) < len(distinct), rows

    rows.clear()
    same = [DecisionRequest("Customer %d was charged twice for order %d" % (i, i * 37), TRIAGE)
            for i in range(16)]
    batched = engine.predict("tiny", same)
    assert sum(rows) == 48 and len(rows) <= 4  # 48 short rows: a few passes, not 16
    for request, result in zip(same[:4], batched[:4]):
        alone = engine.predict("tiny", [request])[0]
        assert _max_diff(result.answers, alone.answers) <= TOL


def test_passes_hold_a_bounded_number_of_tokens(engine: LayaEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_laya_reference.packing import PASS_TOKENS

    shapes: list[tuple[int, int]] = []
    watch_passes(engine, "tiny", monkeypatch, lambda batch: shapes.append(tuple(batch["input_ids"].shape)))
    long_state = " ".join(["The customer reports a double charge on the invoice."] * 40)
    results = engine.predict("tiny", [DecisionRequest(long_state, TRIAGE) for _ in range(8)])
    assert len(results) == 8 and sum(r for r, _ in shapes) == 24
    assert all(rows * tokens <= PASS_TOKENS for rows, tokens in shapes), shapes


def test_a_request_alone_runs_its_rows_side_by_side(engine: LayaEngine, singles: list[DecisionResult],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_laya_reference.cores import ShapeChooser

    if (engine.threads or 1) < 2:
        pytest.skip("one core: nothing to run side by side")
    assert engine._pool is not None
    monkeypatch.setattr(engine._pool, "chooser", ShapeChooser())  # nothing measured yet: side by side first
    monkeypatch.setattr(engine._pool, "load", _Load(1.0))  # another process busy: shapes measured
    rows = _count_passes(engine, monkeypatch)
    result = engine.predict("tiny", [DecisionRequest(*PARITY_CASES[4])])[0]  # 4 questions
    assert len(rows) == min(4, engine.threads or 1) and sum(rows) == 4
    assert result == singles[4]


class _Load:
    """An ``OtherLoad`` that reports a fixed figure (other processes' CPU, in cores)."""

    def __init__(self, cores: float | None) -> None:
        self.figure = cores

    def cores(self) -> float | None:
        return self.figure


class _Pinned:
    """A ShapeChooser that always picks one shape (when offered) and keeps what it was told."""

    def __init__(self, pick: Any) -> None:
        self.pick = pick
        self.offered: list[list[Any]] = []
        self.recorded: list[tuple[Any, Any, float]] = []

    def choose(self, key: Any, shapes: Sequence[Any]) -> Any:
        self.offered.append(list(shapes))
        return self.pick if self.pick in shapes else shapes[0]

    def record(self, key: Any, shape: Any, cost: float) -> None:
        self.recorded.append((key, shape, cost))


class _EveryShapeWarm(set):  # type: ignore[type-arg]
    def __contains__(self, item: object) -> bool:
        return True


@pytest.mark.parametrize("pick", ["wide", "narrow"])
def test_a_request_alone_runs_in_the_shape_its_chooser_measured_fastest(
        engine: LayaEngine, agent: Any, monkeypatch: pytest.MonkeyPatch, pick: str) -> None:
    import torch

    from pytest_laya_reference.cores import Shape

    if (engine.threads or 1) < 2:
        pytest.skip("one core: one shape only")
    assert engine._pool is not None
    shape = Shape(1, 2) if pick == "wide" else Shape(1, 1)
    chooser = _Pinned(shape)
    monkeypatch.setattr(engine._pool, "chooser", chooser)
    monkeypatch.setattr(engine._pool, "load", _Load(1.0))  # another process busy: shapes measured
    monkeypatch.setattr(engine._pool, "warmed", _EveryShapeWarm())  # its first run is measured too
    passes: list[tuple[int, int]] = []  # (rows, torch threads)
    watch_passes(engine, "tiny", monkeypatch,
                 lambda batch: passes.append((int(batch["input_ids"].shape[0]), torch.get_num_threads())))
    state = " ".join(["The customer reports a double charge on the invoice."] * 12)  # 4 rows of ~150 tokens
    result = engine.predict("tiny", [DecisionRequest(state, MIXED)])[0]
    assert chooser.offered == [[Shape(2, 1), Shape(1, 1), Shape(1, 2)]]
    assert passes == [(4, shape.threads)]  # one pass, on the threads chosen
    assert _max_diff(result.answers, agent.predict(state, MIXED)["answers"]) <= TOL
    assert len(chooser.recorded) == 1 and chooser.recorded[0][1] == shape and chooser.recorded[0][2] > 0

    passes.clear()
    monkeypatch.setattr(engine, "_inflight", 1)  # another decision in inference: not alone
    engine.predict("tiny", [DecisionRequest(state, MIXED)])
    assert len(chooser.offered) == 1 and len(chooser.recorded) == 1  # the fixed rule, unmeasured
    assert [threads for _, threads in passes] == [1]


def test_a_laya_whose_packed_passes_disagree_is_served_by_its_own_path(checkpoint_dir: str,
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str],
                                                                       singles: list[DecisionResult]) -> None:
    import torch

    import pytest_laya_reference.packing as packing

    calls: list[int] = []
    original = packing.predict_packed

    def wrong(agent: Any, requests: Any, run: Any, lanes: int = 1, pass_tokens: int = 0, forward: Any = None,
              tokenizer: Any = None) -> Any:
        calls.append(len(requests))
        out = original(agent, requests, run, lanes, pass_tokens or packing.PASS_TOKENS, forward, tokenizer)
        for result in out:  # a laya whose internals moved: one number off
            for answer in result["answers"].values():
                if "noul" in answer:
                    answer["noul"] = round(answer["noul"] + 0.01, 4)
        return out

    monkeypatch.setattr("pytest_laya_reference.packing.predict_packed", wrong)  # the start-up check's
    monkeypatch.setattr("pytest_laya_reference.engine.predict_packed", wrong)   # and serving's
    fresh = LayaEngine({"tiny": checkpoint_dir}, device="cpu")
    try:
        fresh.load()
        assert calls and fresh.packed == {"tiny": False}
        assert "packed passes disagree" in capsys.readouterr().err
        calls.clear()
        threads: list[tuple[str, int]] = []
        router = fresh._router
        assert router is not None
        laya_own = router.predict_batch

        def recording(items: Any) -> Any:
            threads.append((threading.current_thread().name.rsplit("_", 1)[0], torch.get_num_threads()))
            return laya_own(items)

        monkeypatch.setattr(router, "predict_batch", recording)
        got = fresh.predict("tiny", [DecisionRequest(*PARITY_CASES[0])])[0]
        assert calls == [] and got == singles[0]  # laya's own path, laya's own answer
        # On the core pool like the packed passes: alone, on the wide thread with every core;
        # beside other decisions, on one thread (no second OpenMP team on a batch's thread).
        cores = fresh.threads or 1
        assert threads == [("laya-wide", cores) if cores > 1 else (threading.current_thread().name, 1)]
        threads.clear()
        monkeypatch.setattr(fresh, "_inflight", 1)
        assert _max_diff(fresh.predict("tiny", [DecisionRequest(*PARITY_CASES[0])])[0].answers, singles[0].answers) <= TOL
        assert threads == [(threading.current_thread().name, 1)]
    finally:
        fresh.close()


# ------------------------------------------------------------------------------------ batcher

async def test_concurrent_submits_share_batches(engine: LayaEngine,
                                                singles: list[DecisionResult]) -> None:
    counting = Counting(engine)
    batcher = MicroBatcher(counting, max_batch=16, window_ms=50)
    picks = [i % len(PARITY_CASES) for i in range(12)]
    timed = await asyncio.gather(*(batcher.submit("tiny", DecisionRequest(*PARITY_CASES[i]))
                                   for i in picks))
    await batcher.aclose()
    assert len(counting.calls) < 12 and sum(counting.calls) == 12
    assert set(counting.threads) != {threading.current_thread().name}
    assert len(set(counting.threads)) == 1  # one dedicated worker thread
    for i, t in zip(picks, timed):
        assert isinstance(t, Timed)
        assert t.batch_size in counting.calls and t.batch_size > 1
        assert t.queue_ms >= 0 and t.infer_ms > 0
        assert _max_diff(t.result.answers, singles[i].answers) <= TOL


async def test_passes_run_batches_at_once_and_never_more(engine: LayaEngine,
                                                         singles: list[DecisionResult]) -> None:
    counting = Counting(engine, delay=0.3)
    overlap = {"now": 0, "most": 0}
    lock = threading.Lock()
    real_predict = counting.predict

    def predict(model: str, requests: Sequence[DecisionRequest]) -> list[DecisionResult]:
        with lock:
            overlap["now"] += 1
            overlap["most"] = max(overlap["most"], overlap["now"])
        try:
            return real_predict(model, requests)
        finally:
            with lock:
                overlap["now"] -= 1

    counting.predict = predict  # type: ignore[method-assign]
    batcher = MicroBatcher(counting, max_batch=2, window_ms=0, passes=2)
    assert batcher.passes == 2
    picks = [i % len(PARITY_CASES) for i in range(8)]
    timed = await asyncio.gather(*(batcher.submit("tiny", DecisionRequest(*PARITY_CASES[i])) for i in picks))
    await batcher.aclose()
    assert overlap["most"] == 2, overlap  # two at once, never three
    assert sum(counting.calls) == 8 and len(set(counting.threads)) == 2
    for i, t in zip(picks, timed):
        assert _max_diff(t.result.answers, singles[i].answers) <= TOL


@pytest.mark.parametrize("busy_window_ms", [0.0, 300.0])
async def test_while_a_batch_runs_a_request_waits_the_busy_window_for_company(engine: LayaEngine,
                                                                             busy_window_ms: float) -> None:
    # Each batch takes over a second: the window ends while the first still runs (once it has
    # ended, the waiting requests are shared among the free passes instead).
    counting = Counting(engine, delay=1.2)
    batcher = MicroBatcher(counting, max_batch=16, window_ms=0, passes=2, busy_window_ms=busy_window_ms)
    try:
        first = asyncio.ensure_future(batcher.submit("tiny", DecisionRequest(*PARITY_CASES[0])))
        await asyncio.sleep(0.05)  # alone: it runs at once, whatever the busy window
        assert counting.calls == [1]
        second = asyncio.ensure_future(batcher.submit("tiny", DecisionRequest(*PARITY_CASES[1])))
        await asyncio.sleep(0.01)
        third = asyncio.ensure_future(batcher.submit("tiny", DecisionRequest(*PARITY_CASES[2])))
        timed = await asyncio.gather(first, second, third)
    finally:
        await batcher.aclose()
    if busy_window_ms:
        assert counting.calls == [1, 2] and [t.batch_size for t in timed] == [1, 2, 2]
    else:
        assert counting.calls == [1, 1, 1] and [t.batch_size for t in timed] == [1, 1, 1]


async def test_waiting_requests_are_shared_among_the_free_passes(engine: LayaEngine) -> None:
    counting = Counting(engine, delay=0.2)
    batcher = MicroBatcher(counting, max_batch=16, window_ms=100, passes=2)
    timed = await asyncio.gather(*(batcher.submit("tiny", DecisionRequest("state %d" % i, TWO)) for i in range(8)))
    await batcher.aclose()
    assert counting.calls[:2] == [4, 4], counting.calls  # both passes busy, not one with 8
    assert sorted(t.batch_size for t in timed) == [4] * 8


def test_passes_below_one_are_refused(engine: LayaEngine) -> None:
    with pytest.raises(ValueError, match="passes"):
        MicroBatcher(engine, passes=0)


async def test_max_batch_caps_a_batch(engine: LayaEngine) -> None:
    counting = Counting(engine)
    batcher = MicroBatcher(counting, max_batch=4, window_ms=50)
    timed = await asyncio.gather(*(batcher.submit("tiny", DecisionRequest("state %d" % i, TWO))
                                   for i in range(10)))
    await batcher.aclose()
    assert max(counting.calls) <= 4 and sum(counting.calls) == 10
    assert all(t.batch_size <= 4 for t in timed)


async def test_event_loop_stays_responsive_while_a_batch_runs(engine: LayaEngine) -> None:
    counting = Counting(engine, delay=0.4)  # the worker is busy for at least 400 ms
    batcher = MicroBatcher(counting, max_batch=16, window_ms=0)
    gaps: list[float] = []
    stop = asyncio.Event()

    async def tick() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    long_state = " ".join(["The customer reports a double charge on the invoice."] * 30)
    timed = await asyncio.gather(*(batcher.submit("tiny", DecisionRequest(long_state, TRIAGE))
                                   for _ in range(16)))
    stop.set()
    await ticker
    await batcher.aclose()
    assert timed[0].infer_ms >= 400
    assert len(gaps) >= 20
    assert max(gaps) < 0.2, max(gaps)


async def test_a_rejected_question_fails_only_its_caller(engine: LayaEngine,
                                                         singles: list[DecisionResult]) -> None:
    counting = Counting(engine)
    batcher = MicroBatcher(counting, max_batch=16, window_ms=50)
    bad = {"department": {"type": "choice", "instructions": "Which team?", "criteria": ["a", "a"]}}
    requests = [DecisionRequest(*PARITY_CASES[0]), DecisionRequest("hello", bad),
                DecisionRequest(*PARITY_CASES[1]), DecisionRequest(*PARITY_CASES[0])]
    outcomes = await asyncio.gather(*(batcher.submit("tiny", r) for r in requests),
                                    return_exceptions=True)
    await batcher.aclose()
    assert isinstance(outcomes[1], ValueError) and "department" in str(outcomes[1])
    for i, index in ((0, 0), (2, 1), (3, 0)):
        assert isinstance(outcomes[i], Timed), outcomes[i]
        assert _max_diff(outcomes[i].result.answers, singles[index].answers) <= TOL
        assert outcomes[i].batch_size == 1
    assert counting.calls == [4, 1, 1, 1, 1]


async def test_unknown_model_through_the_batcher(engine: LayaEngine) -> None:
    batcher = MicroBatcher(engine, window_ms=0)
    with pytest.raises(KeyError):
        await batcher.submit("nope", DecisionRequest("hello", TWO))
    assert (await batcher.submit("tiny", DecisionRequest("hello", TWO))).batch_size == 1
    await batcher.aclose()


async def test_cancelled_callers_do_not_break_their_batch(engine: LayaEngine,
                                                          singles: list[DecisionResult]) -> None:
    counting = Counting(engine, delay=0.2)
    batcher = MicroBatcher(counting, max_batch=16, window_ms=30)
    # Batch 1 runs for 200 ms; one of its callers goes away while it runs.
    first = [asyncio.create_task(batcher.submit("tiny", DecisionRequest(*PARITY_CASES[i])))
             for i in (0, 1, 2)]
    await asyncio.sleep(0.1)
    assert counting.calls == [3]
    first[1].cancel()
    # Batch 2 queues behind it; one of its callers goes away before it starts.
    second = [asyncio.create_task(batcher.submit("tiny", DecisionRequest(*PARITY_CASES[i])))
              for i in (3, 4)]
    await asyncio.sleep(0.01)
    second[0].cancel()
    results = await asyncio.gather(*first, *second, return_exceptions=True)
    assert isinstance(results[1], asyncio.CancelledError)
    assert isinstance(results[3], asyncio.CancelledError)
    for position, index in ((0, 0), (2, 2), (4, 4)):
        assert isinstance(results[position], Timed), results[position]
        assert _max_diff(results[position].result.answers, singles[index].answers) <= TOL
    assert counting.calls == [3, 1]  # the cancelled waiter never reached the engine
    assert batcher.waiting == 0
    # The batcher still works afterwards.
    assert (await batcher.submit("tiny", DecisionRequest("hello", TWO))).result.answers
    await batcher.aclose()


async def test_aclose_finishes_in_flight_work_and_is_idempotent(engine: LayaEngine) -> None:
    counting = Counting(engine, delay=0.05)
    batcher = MicroBatcher(counting, max_batch=2, window_ms=0)
    tasks = [asyncio.create_task(batcher.submit("tiny", DecisionRequest("state %d" % i, TWO)))
             for i in range(5)]
    await asyncio.sleep(0)
    await asyncio.gather(batcher.aclose(), batcher.aclose())
    done = await asyncio.gather(*tasks)
    assert all(isinstance(t, Timed) for t in done)
    assert sum(counting.calls) == 5
    await batcher.aclose()
    with pytest.raises(BatcherClosed):
        await batcher.submit("tiny", DecisionRequest("late", TWO))
    assert isinstance(BatcherClosed(), RuntimeError)


async def test_aclose_without_any_submit() -> None:
    class Never:
        def predict(self, model: str, requests: Sequence[DecisionRequest]) -> list[DecisionResult]:
            raise AssertionError("not called")

    batcher = MicroBatcher(Never())  # type: ignore[arg-type]
    await batcher.aclose()
    await batcher.aclose()


def test_one_loop_at_a_time_and_aclose_from_another_loop(engine: LayaEngine) -> None:
    counting = Counting(engine, delay=0.3)
    batcher = MicroBatcher(counting, window_ms=0)
    # A stopped loop's batcher rebinds to the next one (function-scoped test loops, say).
    first = asyncio.run(batcher.submit("tiny", DecisionRequest("one", TWO)))
    second = asyncio.run(batcher.submit("tiny", DecisionRequest("two", TWO)))
    assert first.batch_size == second.batch_size == 1

    # While it serves a running loop in another thread, another loop may not submit...
    outcome: dict[str, Any] = {}
    started = threading.Event()

    def serve() -> None:
        async def main() -> None:
            task = asyncio.ensure_future(batcher.submit("tiny", DecisionRequest("three", TWO)))
            started.set()
            outcome["timed"] = await task
        asyncio.run(main())

    thread = threading.Thread(target=serve)
    thread.start()
    assert started.wait(10)
    time.sleep(0.05)
    with pytest.raises(RuntimeError, match="another running event loop"):
        asyncio.run(batcher.submit("tiny", DecisionRequest("four", TWO)))
    # ...but may close it: the owning loop finishes what it was given first.
    asyncio.run(batcher.aclose())
    thread.join(10)
    assert isinstance(outcome.get("timed"), Timed)
    asyncio.run(batcher.aclose())
    assert counting.calls == [1, 1, 1]

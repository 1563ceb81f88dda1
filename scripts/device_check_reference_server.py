"""Check the reference server on an accelerator against the same server on the CPU.

Starts ``python -m pytest_laya_reference --device DEVICE`` (the embedded tiny checkpoint) on
127.0.0.1 with a free port, then the same server with ``--device BASELINE``, one after the
other, and checks:

1. the server starts and prints its ready line; ``GET /health`` names DEVICE's type (``cuda`` for
   ``cuda:0``) as every model's ``device``;
2. a set of ``POST /v1/systemone`` decisions (choice, score and noul questions: the shared
   ``VARIED_REQUESTS`` plus a three-question request) and one ``/v1/systemone/batch`` answer 200,
   and every response (probes and decisions) has no violation of the target spec;
3. DEVICE and BASELINE give the same choices and input token counts, and every probability-like
   number (probabilities, score, noul, confidences, act probabilities) within ``--tolerance``;
4. a bounded concurrent burst (``--burst`` requests, ``--concurrency`` at a time, loopback only)
   answers 200 everywhere, conforms, and agrees with the sequential answers within the tolerance;
   median latencies of both devices are reported.

Everything has a timeout; the servers are stopped in ``finally``. Results go to
``OUT/device_check_result.json`` and the servers' logs to ``OUT/server_<label>.log``. Exits 0
when every check passed, 1 when one failed (the message says which), 2 when it could not run.

Usage (from the repository root, with the reference extra installed)::

    python scripts/device_check_reference_server.py --device cuda:0 --out /tmp/check
    python scripts/device_check_reference_server.py --device cpu --out /tmp/check   # a dry run, cpu vs cpu
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx

from pytest_laya.specs import Spec
from pytest_laya.wire.samples import VARIED_REQUESTS

READY = re.compile(r"laya-reference-server ready at (http://\S+)")
COMBINED = {
    "state": "I was charged twice for my order. Please refund the duplicate today.",
    "questions": {
        "department": {"type": "choice", "instructions": "Which team should handle this?",
                       "criteria": {"billing": "Charges and refunds", "technical": "Software problems",
                                    "shipping": "Deliveries and returns"}},
        "urgency": {"type": "score", "instructions": "How urgent is the request?",
                    "criteria": ["Not urgent", "Needs attention soon", "Needs attention immediately"]},
        "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
    },
}
BATCH = {"states": ["The app crashes when I open the invoice.", "Where is my parcel?",
                    "Please cancel my subscription."],
         "questions": COMBINED["questions"]}


AUTOCAST_OFF_LAUNCHER = """
import runpy, sys
import torch
import laya.agent as _agent
_init = _agent.Agent.__init__
def _fp32_init(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    self.amp_enabled, self.dtype = False, torch.float32
_agent.Agent.__init__ = _fp32_init
print("device-check: laya autocast switched off (fp32 forward passes)", flush=True)
sys.argv = ["pytest_laya_reference", *sys.argv[1:]]
runpy.run_module("pytest_laya_reference", run_name="__main__", alter_sys=True)
"""


class CheckFailed(Exception):
    pass


# -- servers ---------------------------------------------------------------------------------

class Server:
    """``python -m pytest_laya_reference`` in its own process group, its output collected."""

    def __init__(self, python: str, device: str, label: str, log_path: Path, extra: list[str],
                 autocast_off: bool = False) -> None:
        self.device, self.label, self.log_path = device, label, log_path
        self.lines: list[str] = []
        self.url: str | None = None
        self._ready = threading.Event()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        env.setdefault("PYTHONUNBUFFERED", "1")
        server_args = ["--host", "127.0.0.1", "--port", "0", "--device", device, *extra]
        if autocast_off:
            # Diagnostic only: the same server, with laya's CUDA autocast (fp16 on compute
            # capability >= 8 for a checkpoint without amp_dtype) switched off after each Agent
            # loads, so its forward passes run in fp32 as on the CPU.
            self.cmd = [python, "-c", AUTOCAST_OFF_LAUNCHER, *server_args]
        else:
            self.cmd = [python, "-m", "pytest_laya_reference", *server_args]
        self.started = time.monotonic()
        self.proc = subprocess.Popen(self.cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            self.lines.append(line)
            print(f"  [{self.label}] {line}", flush=True)
            m = READY.search(line)
            if m and self.url is None:
                self.url = m.group(1)
                self._ready.set()
        self._ready.set()  # the process ended: stop waiting

    def wait_ready(self, timeout: float) -> float:
        if not self._ready.wait(timeout):
            raise CheckFailed(f"[{self.label}] no ready line within {timeout:.0f}s; last output:\n" + self.tail())
        if self.url is None:
            raise CheckFailed(f"[{self.label}] the server exited (rc={self.proc.poll()}) before its ready line:\n"
                              + self.tail())
        return time.monotonic() - self.started

    def tail(self, n: int = 60) -> str:
        return "\n".join(self.lines[-n:])

    def stop(self) -> int | None:
        # The whole process group: SIGTERM, then SIGKILL if it is still there after a grace period.
        for sig, grace_s in ((signal.SIGTERM, 15), (signal.SIGKILL, 10)):
            if self.proc.poll() is not None:
                break
            try:
                os.killpg(self.proc.pid, sig)
                self.proc.wait(grace_s)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        self._reader.join(5)
        try:
            self.log_path.write_text("$ " + " ".join(self.cmd) + "\n" + "\n".join(self.lines) + "\n")
        except OSError:
            pass
        return self.proc.poll()


# -- checking --------------------------------------------------------------------------------

def violations_of(response: httpx.Response, path: str) -> list[str]:
    found = Spec.target().violations(response.request.method, path, response.status_code,
                                     response.headers.multi_items(), response.content)
    return [str(v) for v in found]


def numbers(answers: dict[str, Any]) -> dict[str, Any]:
    """Every compared value of an answer set: choices as strings, probability-like numbers as floats."""
    out: dict[str, Any] = {}
    for qid, a in answers.items():
        if not isinstance(a, dict):
            out[f"{qid}"] = a
            continue
        for key in ("choice", "type"):
            if key in a:
                out[f"{qid}.{key}"] = a[key]
        for key in ("noul", "score", "confidence", "answer_confidence", "x_jev_confidence"):
            if key in a:
                out[f"{qid}.{key}"] = a[key]
        probabilities = a.get("probabilities") or {}
        for option, p in probabilities.items():
            out[f"{qid}.p[{option}]"] = p
        if a.get("type") == "score" and probabilities:
            out[f"{qid}.top_level"] = max(probabilities, key=lambda k: probabilities[k])
        action = a.get("action")
        if isinstance(action, dict) and "act_probability" in action:
            out[f"{qid}.act_probability"] = action["act_probability"]
    return out


def top_two_margin(answers: dict[str, Any], key: str) -> float | None:
    """The gap between the two most probable options of the answer a `.choice`/`.top_level` key names."""
    a = answers.get(key.rsplit(".", 1)[0])
    probabilities = sorted((a or {}).get("probabilities", {}).values(), reverse=True) if isinstance(a, dict) else []
    return probabilities[0] - probabilities[1] if len(probabilities) >= 2 else None


#: Derived numbers, compared and reported but not held to the probability tolerance: a score is
#: an expected level (0..levels-1), and x_jev_confidence is Jev's confidence formula, which for a
#: score jumps when the most probable level changes and for a choice scales differences by n/(n-1).
DERIVED = (".score", ".x_jev_confidence")


def compare(got: dict[str, Any], expected: dict[str, Any], tolerance: float, near_ties: list[str] | None = None,
            derived: list[str] | None = None) -> tuple[list[str], float, float, float]:
    """(differences beyond the tolerance or in kind, max abs diff of the probability-like numbers, of
    `probabilities` entries only, of the derived numbers).

    With `near_ties`, a choice or top score level that differs where the expected answer's two
    most probable options are within 2 x tolerance of each other goes there instead. With
    `derived`, differences of scores and x_jev_confidence beyond the tolerance go there.
    """
    g, e = numbers(got), numbers(expected)
    problems: list[str] = []
    if g.keys() != e.keys():
        problems.append(f"answer fields differ: only here {sorted(g.keys() - e.keys())}, "
                        f"only in baseline {sorted(e.keys() - g.keys())}")
    worst = worst_p = worst_derived = 0.0
    for key in sorted(g.keys() & e.keys()):
        a, b = g[key], e[key]
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
            diff = abs(float(a) - float(b))
            is_derived = key.endswith(DERIVED)
            if is_derived:
                worst_derived = max(worst_derived, diff)
            else:
                worst = max(worst, diff)
            if ".p[" in key:
                worst_p = max(worst_p, diff)
            if diff > tolerance + 1e-9:  # the numbers are rounded to 4 decimals: 0.0010 is within 1e-3
                line = f"{key}: {a} vs {b} (diff {diff:.4f})"
                (derived if is_derived and derived is not None else problems).append(line)
        elif a != b:
            margin = top_two_margin(expected, key) if key.endswith((".choice", ".top_level")) else None
            if near_ties is not None and margin is not None and margin <= 2 * tolerance:
                near_ties.append(f"{key}: {a!r} vs {b!r} (expected side's top-two margin {margin:.4f})")
            else:
                problems.append(f"{key}: {a!r} vs {b!r}")
    return problems, worst, worst_p, worst_derived


def p90(values: list[float]) -> float:
    return round(sorted(values)[int(0.9 * (len(values) - 1))], 2)


def requests_to_send() -> list[tuple[str, dict[str, Any]]]:
    items = [(s.id, s.body()) for s in VARIED_REQUESTS]
    items.append(("combined-choice-score-noul", json.loads(json.dumps(COMBINED))))
    return items


Fail = Callable[[str], None]
#: One burst request's outcome: (request id, status, ms, spec violations, JSON body if 200, text head).
BurstResult = tuple[str, int, float, list[str], Any, str]


def run_side(server: Server, args: argparse.Namespace, failures: list[str]) -> dict[str, Any]:
    """Every request against one server; records failures (prefixed with its label) and results."""
    label = server.label
    side: dict[str, Any] = {"device_arg": server.device}

    def fail(msg: str) -> None:
        failures.append(f"[{label}] {msg}")
        print(f"FAIL [{label}] {msg}", flush=True)

    side["startup_s"] = round(server.wait_ready(args.startup_timeout), 2)
    print(f"[{label}] ready at {server.url} after {side['startup_s']}s", flush=True)
    url = server.url
    assert url is not None
    timeout = httpx.Timeout(args.request_timeout, connect=10.0)
    with httpx.Client(base_url=url, timeout=timeout, trust_env=False) as client:
        want = check_probes(client, server.device, side, fail)
        check_decisions(client, args.rounds, want, side, fail)
        check_batch(client, side, fail)
    if args.burst > 0:
        side["burst"] = run_burst(url, timeout, args, side["answers"], fail)
        print(f"[{label}] burst: {side['burst']}", flush=True)

    warnings = [ln for ln in server.lines if "warning" in ln.lower() or "error" in ln.lower() or "Traceback" in ln]
    side["server_warnings"] = warnings[:40]
    if any("Traceback" in ln for ln in server.lines):
        fail("the server printed a traceback:\n" + server.tail())
    return side


def check_probes(client: httpx.Client, device: str, side: dict[str, Any], fail: Fail) -> str:
    """1. The probes answer and conform, and /health names the device's type (returned)."""
    for path in ("/livez", "/readyz", "/health"):
        r = client.get(path)
        v = violations_of(r, path)
        if r.status_code != 200:
            fail(f"GET {path} answered {r.status_code}: {r.text[:500]}")
        if v:
            fail(f"GET {path} breaks the target spec: {v}")
    health = client.get("/health").json()
    side["health"] = health
    want = device.split(":")[0]
    devices = {name: m.get("device") for name, m in (health.get("models") or {}).items()}
    side["health_devices"] = devices
    if not devices or any(str(d).split(":")[0] != want for d in devices.values()):
        fail(f"/health reports devices {devices}, expected {want!r} (asked for --device {device})")
    return want


def check_decisions(client: httpx.Client, rounds: int, want: str, side: dict[str, Any], fail: Fail) -> None:
    """2. The decisions, sequential, `rounds` times over (for latency): each conforms, every round
    answers as the first, and each names the device it ran on."""
    answers: dict[str, Any] = {}
    latencies: list[float] = []
    by_request: dict[str, list[float]] = {}
    for round_ in range(rounds):
        for rid, body in requests_to_send():
            started = time.perf_counter()
            r = client.post("/v1/systemone", json=body)
            elapsed = (time.perf_counter() - started) * 1000.0
            latencies.append(elapsed)
            by_request.setdefault(rid, []).append(round(elapsed, 2))
            v = violations_of(r, "/v1/systemone")
            if v:
                fail(f"POST /v1/systemone {rid} breaks the target spec: {v}")
            if r.status_code != 200:
                fail(f"POST /v1/systemone {rid} answered {r.status_code}: {r.text[:800]}")
                continue
            doc = r.json()
            if round_ == 0:
                answers[rid] = {"answers": doc["answers"], "input_tokens": doc["usage"]["input_tokens"],
                                "served_by": doc.get("served_by")}
            else:
                problems, *_ = compare(doc["answers"], answers[rid]["answers"], 0.0)
                if problems:
                    fail(f"{rid}: round {round_ + 1} differs from round 1 on the same server: {problems[:5]}")
    side["answers"] = answers
    side["latency_by_request_ms"] = by_request
    side["sequential_ms"] = {"n": len(latencies), "median": round(statistics.median(latencies), 2),
                             "p90": p90(latencies),
                             "min": round(min(latencies), 2), "max": round(max(latencies), 2)}
    for rid, a in answers.items():
        sb = a.get("served_by") or {}
        if str(sb.get("device", "")).split(":")[0] != want:
            fail(f"{rid}: served_by.device is {sb.get('device')!r}, expected {want!r}")


def check_batch(client: httpx.Client, side: dict[str, Any], fail: Fail) -> None:
    r = client.post("/v1/systemone/batch", json=BATCH)
    v = violations_of(r, "/v1/systemone/batch")
    if v:
        fail(f"POST /v1/systemone/batch breaks the target spec: {v}")
    if r.status_code != 200:
        fail(f"POST /v1/systemone/batch answered {r.status_code}: {r.text[:800]}")
    else:
        side["batch"] = [{"answers": x["answers"], "input_tokens": x["usage"]["input_tokens"]}
                         for x in r.json()["results"]]


def run_burst(url: str, timeout: httpx.Timeout, args: argparse.Namespace, sequential: dict[str, Any],
              fail: Fail) -> dict[str, Any]:
    """4. A bounded concurrent burst: every answer 200, conforming, and as its sequential answer
    (within the tolerance); its summary."""
    bodies = requests_to_send()
    jobs = [bodies[i % len(bodies)] for i in range(args.burst)]
    started = time.perf_counter()
    results = burst_results(url, timeout, jobs, args.concurrency, args.burst_timeout, fail)
    wall = time.perf_counter() - started
    statuses: dict[str, int] = {}
    worst = 0.0
    for rid, status, _, v, doc, text in results:
        statuses[str(status)] = statuses.get(str(status), 0) + 1
        if status != 200:
            fail(f"burst {rid} answered {status}: {text}")
        if v:
            fail(f"burst {rid} breaks the target spec: {v}")
        if doc is not None and rid in sequential:
            problems, w, *_ = compare(doc["answers"], sequential[rid]["answers"], args.tolerance)
            worst = max(worst, w)
            if problems:
                fail(f"burst {rid} differs from its sequential answer: {problems[:5]}")
    lat = [x[2] for x in results] or [float("nan")]
    return {"requests": len(jobs), "concurrency": args.concurrency, "statuses": statuses,
            "wall_s": round(wall, 3), "median_ms": round(statistics.median(lat), 2),
            "p90_ms": p90(lat), "max_ms": round(max(lat), 2),
            "max_abs_diff_vs_sequential": worst}


def burst_results(url: str, timeout: httpx.Timeout, jobs: list[tuple[str, dict[str, Any]]], concurrency: int,
                  burst_timeout: float, fail: Fail) -> list[BurstResult]:
    """Send `jobs`, `concurrency` at a time, one client per worker thread; the outcomes that came back."""
    local = threading.local()
    clients: list[httpx.Client] = []
    lock = threading.Lock()

    def one(job: tuple[str, dict[str, Any]]) -> BurstResult:
        if not hasattr(local, "client"):
            local.client = httpx.Client(base_url=url, timeout=timeout, trust_env=False)
            with lock:
                clients.append(local.client)
        rid, body = job
        started = time.perf_counter()
        resp = local.client.post("/v1/systemone", json=body)
        elapsed = (time.perf_counter() - started) * 1000.0
        doc = resp.json() if resp.status_code == 200 else None
        return rid, resp.status_code, elapsed, violations_of(resp, "/v1/systemone"), doc, resp.text[:500]

    results: list[BurstResult] = []
    try:
        with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
            futures = [pool.submit(one, job) for job in jobs]
            for fut in concurrent.futures.as_completed(futures, timeout=burst_timeout):
                try:
                    results.append(fut.result())
                except Exception as exc:  # noqa: BLE001 -- a transport error is a failure to report
                    fail(f"burst request raised {type(exc).__name__}: {exc}")
    except concurrent.futures.TimeoutError:
        fail(f"burst did not finish within {burst_timeout}s ({len(results)}/{len(jobs)} done)")
    finally:
        for c in clients:
            c.close()
    return results


def compare_sides(side: dict[str, Any], baseline: dict[str, Any], tolerance: float) -> dict[str, Any]:
    worst = worst_p = 0.0
    compared = 0
    diffs: list[str] = []
    near_ties: list[str] = []
    derived: list[str] = []
    worst_derived = 0.0
    a, b = side.get("answers", {}), baseline.get("answers", {})
    for rid in sorted(set(a) | set(b)):
        if rid not in a or rid not in b:
            diffs.append(f"{rid}: answered on one side only")
            continue
        ties: list[str] = []
        more: list[str] = []
        problems, w, wp, wd = compare(a[rid]["answers"], b[rid]["answers"], tolerance, ties, more)
        derived.extend(f"{rid}: {x}" for x in more)
        worst, worst_p, worst_derived, compared = max(worst, w), max(worst_p, wp), max(worst_derived, wd), compared + 1
        if a[rid]["input_tokens"] != b[rid]["input_tokens"]:
            problems.append(f"input_tokens {a[rid]['input_tokens']} vs {b[rid]['input_tokens']}")
        diffs.extend(f"{rid}: {x}" for x in problems)
        near_ties.extend(f"{rid}: {x}" for x in ties)
    for i, (x, y) in enumerate(zip(side.get("batch") or [], baseline.get("batch") or [])):
        ties, more = [], []
        problems, w, wp, wd = compare(x["answers"], y["answers"], tolerance, ties, more)
        derived.extend(f"batch[{i}]: {d}" for d in more)
        worst, worst_p, worst_derived = max(worst, w), max(worst_p, wp), max(worst_derived, wd)
        diffs.extend(f"batch[{i}]: {d}" for d in problems)
        near_ties.extend(f"batch[{i}]: {d}" for d in ties)
    return {"requests_compared": compared, "max_abs_diff_probability_like": round(worst, 6),
            "max_abs_diff_probabilities_field": round(worst_p, 6),
            "max_abs_diff_derived_score_or_jev": round(worst_derived, 6), "differences": diffs,
            "near_tie_flips": near_ties, "derived_differences_not_counted": derived}


def environment() -> dict[str, Any]:
    info: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform()}
    for mod in ("torch", "transformers", "laya", "starlette", "uvicorn", "tokenizers", "huggingface_hub"):
        try:
            from importlib.metadata import version

            info[mod] = version(mod)
        except Exception as exc:  # noqa: BLE001
            info[mod] = f"unavailable: {exc}"
    return info


def cuda_info() -> dict[str, Any]:
    """Asked in a child process with a timeout, so a wedged driver cannot hang this script."""
    code = ("import json, torch; ok = torch.cuda.is_available(); "
            "print(json.dumps({'cuda_available': ok, 'device_count': torch.cuda.device_count() if ok else 0, "
            "'name': torch.cuda.get_device_name(0) if ok else None, 'torch_cuda': torch.version.cuda}))")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        return json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else {"error": out.stderr[-2000:]}
    except Exception as exc:  # noqa: BLE001
        return {"error": f"{type(exc).__name__}: {exc}"}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda:0", help="device under test (default cuda:0); cpu for a dry run")
    p.add_argument("--baseline-device", default="cpu", help="device to compare with (default cpu)")
    p.add_argument("--out", type=Path, default=None, help="folder for device_check_result.json and the server logs")
    p.add_argument("--python", default=sys.executable, help="interpreter that runs the servers (default: this one)")
    p.add_argument("--tolerance", type=float, default=1e-3, help="max abs difference of a probability (default 1e-3)")
    p.add_argument("--rounds", type=int, default=2, help="sequential passes over the requests per server (default 2)")
    p.add_argument("--burst", type=int, default=64, help="requests in the concurrent burst; 0 skips it (default 64)")
    p.add_argument("--concurrency", type=int, default=8, help="burst requests in flight at once (default 8)")
    p.add_argument("--startup-timeout", type=float, default=240.0, help="seconds to wait for a ready line (default 240)")
    p.add_argument("--request-timeout", type=float, default=60.0, help="seconds per request (default 60)")
    p.add_argument("--burst-timeout", type=float, default=180.0, help="seconds for the whole burst (default 180)")
    p.add_argument("--server-arg", action="append", default=[], help="extra argument for both servers (repeatable)")
    p.add_argument("--also-autocast-off", action="store_true",
                   help="diagnostic: also run DEVICE with laya's autocast switched off (fp32) and compare it with "
                        "the baseline; its differences are reported, not counted as failures")
    return p


def check_cuda(args: argparse.Namespace, result: dict[str, Any]) -> None:
    if args.device.startswith("cuda") or args.baseline_device.startswith("cuda"):
        result["cuda"] = cuda_info()
        print(f"cuda: {result['cuda']}", flush=True)
        if not result["cuda"].get("cuda_available"):
            raise CheckFailed(f"torch sees no CUDA device: {result['cuda']}")


def run_sides(args: argparse.Namespace, out: Path | None, result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Start each server in turn (device, the fp32 diagnostic if asked, baseline) and check it."""
    failures: list[str] = result["failures"]
    sides: dict[str, dict[str, Any]] = {}
    plan = [("primary", args.device, False), ("baseline", args.baseline_device, False)]
    if args.also_autocast_off:
        plan.insert(1, ("primary_fp32", args.device, True))
    for label, device, autocast_off in plan:
        log = out / f"server_{label}.log" if out is not None else Path(os.devnull)
        print(f"== {label}: python -m pytest_laya_reference --device {device}"
              + (" (laya autocast off)" if autocast_off else ""), flush=True)
        server = Server(args.python, device, label, log, args.server_arg, autocast_off=autocast_off)
        # The diagnostic side's findings are reported, never counted as this check's failures.
        side_failures = failures if not autocast_off else result.setdefault("diagnostic_failures", [])
        try:
            sides[label] = run_side(server, args, side_failures)
        except CheckFailed as exc:
            side_failures.append(str(exc))
            print(f"FAIL {exc}", flush=True)
        except Exception as exc:  # noqa: BLE001 -- report it with the server's output
            side_failures.append(f"[{label}] {type(exc).__name__}: {exc}\nserver output:\n{server.tail()}")
            print(f"FAIL [{label}] {type(exc).__name__}: {exc}", flush=True)
        finally:
            code = server.stop()
            if label in sides:
                sides[label]["exit_code"] = code
    return sides


def compare_with_baseline(args: argparse.Namespace, sides: dict[str, dict[str, Any]], result: dict[str, Any]) -> None:
    """3. device vs baseline (a failure per difference), and the diagnostic side vs baseline (reported)."""
    result["comparisons"] = {}
    for label in ("primary", "primary_fp32"):
        if label not in sides or "baseline" not in sides:
            continue
        comparison = compare_sides(sides[label], sides["baseline"], args.tolerance)
        result["comparisons"][f"{label}_vs_baseline"] = comparison
        if label == "primary":
            result["comparison"] = comparison
            result["failures"].extend(f"[{args.device} vs {args.baseline_device}] {d}" for d in comparison["differences"])
        print(f"comparison {label} vs baseline: {json.dumps(comparison)}", flush=True)


def latency_summary(sides: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        label: {"sequential_median_ms": s.get("sequential_ms", {}).get("median"),
                "burst_median_ms": (s.get("burst") or {}).get("median_ms"),
                "burst_wall_s": (s.get("burst") or {}).get("wall_s"), "startup_s": s.get("startup_s")}
        for label, s in sides.items()}


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    if args.rounds < 1 or args.concurrency < 1 or args.burst < 0:
        p.error("--rounds and --concurrency must be >= 1, --burst >= 0")
    out = args.out
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)

    result: dict[str, Any] = {"device": args.device, "baseline_device": args.baseline_device,
                              "tolerance": args.tolerance, "environment": environment(), "failures": []}
    failures: list[str] = result["failures"]
    started = time.monotonic()
    rc = 0
    try:
        check_cuda(args, result)
        Spec.target()  # load the spec once, before any timing
        sides = run_sides(args, out, result)
        result["sides"] = sides
        compare_with_baseline(args, sides, result)
        result["latency_summary"] = latency_summary(sides)
        print(f"latency: {json.dumps(result['latency_summary'])}", flush=True)
    except CheckFailed as exc:
        failures.append(str(exc))
        print(f"FAIL {exc}", flush=True)
    except Exception as exc:  # noqa: BLE001
        failures.append(f"the check itself broke: {type(exc).__name__}: {exc}")
        print(f"ERROR {type(exc).__name__}: {exc}", flush=True)
        rc = 2
    finally:
        result["elapsed_s"] = round(time.monotonic() - started, 2)
        result["passed"] = not failures
        if out is not None:
            (out / "device_check_result.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    if failures:
        print(f"\nDEVICE CHECK FAILED ({len(failures)} failure(s)):", flush=True)
        for f in failures[:50]:
            print(f"  - {f}", flush=True)
        return rc or 1
    print(f"\nDEVICE CHECK PASSED: {args.device} vs {args.baseline_device} in {result['elapsed_s']}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

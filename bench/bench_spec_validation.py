#!/usr/bin/env python
"""Validations per second: `Spec.current().violations(...)` against openapi-core, same run.

Every recorded 200 response (tests/data/system1/ and the shipped cassettes of laya-serve 0.4.15,
cassettes/laya-serve-0.4.15/) is validated against specs/laya-systemone.current.openapi.yaml by both tools:

- ours: ``Spec.current().violations(method, path, 200, {"content-type": ...}, raw_json_bytes)``
- openapi-core: ``OpenAPI(...).validate_response(MockRequest, MockResponse)`` on the very same
  spec file, bytes and header.

Everything either tool builds once (the spec, its validators, the mock request/response
objects) is built before timing, so the numbers compare steady-state validation. Before any
timing both tools must accept every recorded 200 and reject one deliberately broken body
(a probability of 1.5); if either does not, the script says so and exits 1.

Method: a warm-up pass calibrates, per tool, a fixed number of validations per round (a
whole number of passes over the cases, about --round-seconds long); then --rounds rounds,
the two tools interleaved round by round, each timed with perf_counter after a gc.collect().
Reported: per tool the median validations/s over the rounds (and min/max), and the ratio
ours / openapi-core. The project's target is a ratio of at least 10.

This is a script run by hand, not a test: nothing here asserts on time.

    .venv/bin/python bench/bench_spec_validation.py [--rounds 7] [--round-seconds 1.0] [--json] [--profile]
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pytest_laya.specs import Spec  # noqa: E402

DATA_DIRS = (ROOT / "tests" / "data" / "system1", ROOT / "cassettes" / "laya-serve-0.4.15")
HOST_URL = "http://localhost"
TARGET_RATIO = 10.0
VERSIONED = ("jsonschema", "referencing", "openapi-core", "openapi-schema-validator",
             "openapi-spec-validator", "jsonschema-path", "pathable", "pyyaml")


@dataclass
class Case:
    name: str
    method: str
    path: str
    content_type: str
    body: bytes


def load_cases() -> list[Case]:
    """Every recorded 200, as (method, path, content type, raw body bytes)."""
    cases = []
    for directory in DATA_DIRS:
        for file in sorted(directory.glob("*.yaml")):
            cases += _cassette_cases(file)
        for file in sorted(directory.glob("*.json")):
            try:
                record = json.loads(file.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue  # a file a colleague is still writing
            if not isinstance(record, dict) or record.get("status") != 200:
                continue
            if "method" in record and "path" in record:
                method, path = record["method"], record["path"]
            elif ".health." in file.name:
                method, path = "GET", "/health"
            else:
                method, path = "POST", "/v1/systemone"
            body = record["body"]
            raw = body.encode("utf-8") if isinstance(body, str) else json.dumps(body).encode("utf-8")
            cases.append(Case(f"{directory.name}/{file.name}", method.upper(), path,
                              record.get("content_type") or "application/json", raw))
    return cases


def _cassette_cases(file: Path) -> list[Case]:
    """The 200 responses of one cassette, their bodies as the server sent them."""
    import yaml

    found = []
    for i, interaction in enumerate(yaml.safe_load(file.read_text(encoding="utf-8"))["interactions"]):
        request, response = interaction["request"], interaction["response"]
        if response["status"]["code"] != 200:
            continue
        headers = {k.lower(): v[0] for k, v in (response.get("headers") or {}).items()}
        found.append(Case(f"{file.parent.name}/{file.name}#{i}", request["method"].upper(),
                          "/" + request["uri"].split("/", 3)[3], headers.get("content-type", "application/json"),
                          response["body"]["string"].encode("utf-8")))
    return found


def broken_case(cases: list[Case]) -> Case:
    """A recorded choice answer with its first probability set to 1.5."""
    for case in cases:
        body = json.loads(case.body)
        answers = body.get("answers") if isinstance(body, dict) else None
        for name, answer in (answers or {}).items():
            if isinstance(answer, dict) and answer.get("type") == "choice" and answer.get("probabilities"):
                broken = copy.deepcopy(body)
                probabilities = broken["answers"][name]["probabilities"]
                probabilities[next(iter(probabilities))] = 1.5
                return Case(case.name + " [probability 1.5]", case.method, case.path, case.content_type,
                            json.dumps(broken).encode("utf-8"))
    raise SystemExit("no recorded 200 with a choice answer to break")


# -- the two tools: each returns (validate_all, check_one) built outside the timed loop ----


def ours(spec: Spec, cases: list[Case]) -> tuple[Callable[[], None], Callable[[Case], list[str]]]:
    prepared = [(c.method, c.path, {"content-type": c.content_type}, c.body) for c in cases]
    violations = spec.violations

    def validate_all() -> None:
        for method, path, headers, body in prepared:
            violations(method, path, 200, headers, body)

    def check(case: Case) -> list[str]:
        return [str(v) for v in violations(case.method, case.path, 200, {"content-type": case.content_type}, case.body)]

    return validate_all, check


def openapi_core_tool(spec_file: Path, cases: list[Case]):
    from openapi_core import OpenAPI
    from openapi_core.testing import MockRequest, MockResponse

    app = OpenAPI.from_path(spec_file)

    def mocks(case: Case):
        request = MockRequest(HOST_URL, case.method, case.path, content_type="application/json")
        response = MockResponse(case.body, status_code=200, headers={"content-type": case.content_type},
                                content_type=case.content_type)
        return request, response

    prepared = [mocks(c) for c in cases]
    validate_response = app.validate_response
    getattr(app, "response_validator", None)  # build (and cache) the validator now, not in a timed round

    def validate_all() -> None:
        for request, response in prepared:
            validate_response(request, response)

    def check(case: Case) -> list[str]:
        try:
            validate_response(*mocks(case))
        except Exception as exc:  # openapi-core raises on the first problem it meets
            chain, seen = [], set()
            while exc is not None and id(exc) not in seen:
                seen.add(id(exc))
                chain.append(exc)
                exc = exc.__cause__ or exc.__context__
            details = [f"/{'/'.join(map(str, e.absolute_path))}: {e.message}"
                       for link in chain for e in (getattr(link, "schema_errors", None) or ())]
            return details or [" <- ".join(f"{type(e).__name__}: {str(e)[:160]}" for e in chain)]
        return []

    return validate_all, check


# -- measuring ---------------------------------------------------------------------------


def calibrate(validate_all: Callable[[], None], round_seconds: float) -> int:
    """Warm up for at least 0.5 s and 3 passes; return the passes that make a round of ~round_seconds."""
    passes, start = 0, time.perf_counter()
    while True:
        validate_all()
        passes += 1
        elapsed = time.perf_counter() - start
        if elapsed >= 0.5 and passes >= 3:
            break
    return max(1, round(round_seconds * passes / elapsed))


def timed_round(validate_all: Callable[[], None], passes: int) -> float:
    gc.collect()
    start = time.perf_counter()
    for _ in range(passes):
        validate_all()
    return time.perf_counter() - start


def profile(validate_all: Callable[[], None], passes: int) -> None:
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(passes):
        validate_all()
    profiler.disable()
    print()
    print("cProfile of one pytest-laya round (cumulative):")
    pstats.Stats(profiler, stream=sys.stdout).strip_dirs().sort_stats("cumulative").print_stats(22)


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


Tool = tuple[Callable[[], None], Callable[[Case], list[str]]]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds per tool (default 7)")
    parser.add_argument("--round-seconds", type=float, default=1.0,
                        help="about how long one round of one tool lasts; fixes its validation count (default 1.0)")
    parser.add_argument("--json", action="store_true", help="print the results as one JSON object")
    parser.add_argument("--profile", action="store_true",
                        help="afterwards, cProfile one round of pytest-laya and print where its time goes")
    return parser


def really_validates(tools: dict[str, Tool], cases: list[Case], broken: Case) -> tuple[list[str], dict[str, str]]:
    """(why a tool does not really validate, each tool's rejection of the broken body): every
    tool must accept every recorded 200 and reject the broken body for its probability."""
    problems, rejections = [], {}
    for tool, (_, check) in tools.items():
        for case in cases:
            found = check(case)
            if found:
                problems.append(f"{tool} rejects recorded {case.name}: {found[0]}")
        rejected = check(broken)
        if not rejected:
            problems.append(f"{tool} ACCEPTS the broken body {broken.name}")
        elif not any("probabilities" in r and "1.5" in r for r in rejected):
            problems.append(f"{tool} rejects {broken.name}, but not for the probability: {rejected}")
        else:
            rejections[tool] = rejected[0]
    return problems, rejections


def measure(tools: dict[str, Tool], n: int, rounds: int, round_seconds: float) -> tuple[dict[str, Any], dict[str, int]]:
    """(each tool's rates over `rounds` interleaved rounds, each tool's passes per round)."""
    plan = {}
    for tool, (validate_all, _) in tools.items():
        plan[tool] = calibrate(validate_all, round_seconds)
    seconds: dict[str, list[float]] = {tool: [] for tool in tools}
    for _ in range(rounds):
        for tool, (validate_all, _) in tools.items():
            seconds[tool].append(timed_round(validate_all, plan[tool]))

    results = {}
    for tool in tools:
        count = plan[tool] * n
        rates = [count / s for s in seconds[tool]]
        results[tool] = {
            "validations_per_round": count,
            "rounds": rounds,
            "median_per_s": statistics.median(rates),
            "min_per_s": min(rates),
            "max_per_s": max(rates),
            "median_us_per_validation": 1e6 / statistics.median(rates),
        }
    return results, plan


def print_report(report: dict[str, Any], n: int, rounds: int) -> None:
    info, machine, ratio = report["versions"], report["machine"], report["ratio_ours_over_openapi_core"]
    print("versions: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    print(f"machine: {machine['processor']}, {machine['cpus']} cpus, {machine['platform']}")
    print(f"spec: {report['spec']}; {n} recorded 200 responses; {rounds} rounds per tool, interleaved")
    print(f"both accept all {n}; both reject {report['broken_case']}:")
    for tool, why in report["broken_case_rejections"].items():
        print(f"  {tool}: {why[:160]}")
    print()
    print("| tool | validations/round | median validations/s | min | max | median µs/validation |")
    print("|---|---:|---:|---:|---:|---:|")
    for tool, r in report["results"].items():
        print(f"| {tool} | {r['validations_per_round']} | {r['median_per_s']:,.0f} | {r['min_per_s']:,.0f} "
              f"| {r['max_per_s']:,.0f} | {r['median_us_per_validation']:,.1f} |")
    print()
    verdict = "meets" if ratio >= TARGET_RATIO else "BELOW"
    print(f"ratio pytest-laya / openapi-core (medians): {ratio:.1f}x ({verdict} the {TARGET_RATIO:.0f}x target)")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)

    info = versions()
    machine = {"processor": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
               "platform": platform.platform()}
    cases = load_cases()
    if not cases:
        raise SystemExit("no recorded 200 responses found")
    spec = Spec.current()
    spec_file = Path(spec.source)
    broken = broken_case(cases)

    tools: dict[str, Tool] = {"pytest-laya": ours(spec, cases)}
    try:
        tools["openapi-core"] = openapi_core_tool(spec_file, cases)
    except ImportError as exc:
        raise SystemExit(f"openapi-core is not usable here ({exc}); install openapi-core>=0.19") from None

    problems, rejections = really_validates(tools, cases, broken)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1

    n = len(cases)
    results, plan = measure(tools, n, args.rounds, args.round_seconds)
    ratio = results["pytest-laya"]["median_per_s"] / results["openapi-core"]["median_per_s"]
    report = {
        "spec": str(spec_file.relative_to(ROOT)) if spec_file.is_relative_to(ROOT) else str(spec_file),
        "cases": [c.name for c in cases],
        "broken_case": broken.name,
        "broken_case_rejections": rejections,
        "versions": info,
        "machine": machine,
        "results": results,
        "ratio_ours_over_openapi_core": ratio,
        "target_ratio": TARGET_RATIO,
        "meets_target": ratio >= TARGET_RATIO,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print_report(report, n, args.rounds)
    if args.profile:
        profile(tools["pytest-laya"][0], plan["pytest-laya"])
    return 0


if __name__ == "__main__":
    sys.exit(main())

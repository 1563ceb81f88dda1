#!/usr/bin/env python
"""How long the validator takes to judge a hostile body, and how much text it says.

The body: one choice answer whose `probabilities` hold `--count` options (default 100,000), each
2 (out of range): about 1.3 MB. Before issue 31 every violation was listed, 20 s and 7 MB of
text here. Now at most `LISTED` are listed and the rest counted while a work budget lasts
(`pytest_laya/specs/bounded.py`); the promise is at most 2 s and 100 kB under both specs, on
a 2-core machine. Each spec is warmed on a small invalid body first (jsonschema's import and
the validator's compilation are start-up costs, not this body's).

    python bench/measure_hostile_validation.py [--count 100000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from pytest_laya.specs import Spec, SpecViolationError
from pytest_laya.wire.exchange import Exchange

JSON = {"content-type": "application/json"}


def body_of(probabilities: dict[str, float]) -> bytes:
    answer = {"type": "choice", "choice": "o0", "probabilities": probabilities, "confidence": 0.5}
    return json.dumps({"model": "m", "answers": {"q": answer}, "usage": {"input_tokens": 1, "output_tokens": 0}}).encode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    body = body_of({f"o{i}": 2 for i in range(args.count)})
    print(f"body: {len(body):,} bytes, {args.count:,} probabilities out of range")
    for load in (Spec.current, Spec.target):
        spec = load()
        spec.violations("POST", "/v1/systemone", 200, JSON, body_of({"o0": 2}))  # warm
        times = []
        for _ in range(args.rounds):
            started = time.perf_counter()
            found = spec.violations("POST", "/v1/systemone", 200, JSON, body)
            times.append(time.perf_counter() - started)
        exchange = Exchange("POST", "http://laya.test/v1/systemone", "/v1/systemone", 200, JSON, body, None, 0.0)
        text = str(SpecViolationError(exchange, spec.name, found))
        print(f"{spec.name:8} median {statistics.median(times):.3f} s (max {max(times):.3f} s), "
              f"{len(found)} listed, {found.summary()!r}, message {len(text.encode()):,} bytes")


if __name__ == "__main__":
    main()

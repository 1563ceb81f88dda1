"""Recorded served-Laya traffic: standard vcrpy YAML cassettes, one file per test.

The layer the plugin's replay, record and verify modes stand on; it imports neither pytest nor
vcrpy at import time (vcrpy patches many HTTP libraries when it loads, so `_vcr` is imported by
the functions that need it). One job per module: `errors`, `matching` (what pairs a request with
its recording, and what a miss says), `scrub` (secrets and volatile values), `request_ids` (an
exchange's ids out of the file and back on replay), `places` (where in a body they may be
changed) and `json_splice` (changing a value in place), `persist` (files), `rendering` (their text), `handle` (one test's
cassette), `replay` (the plugin's replay, parsed once per file, no vcrpy), `naming` (which file),
`provenance` (where it came from), `verify` (drift against a live server). docs/cassettes.md says why each rule is what it is.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from pytest_laya.cassettes._vcr import RECORD_HINT, laya_vcr, use_cassette
    from pytest_laya.cassettes.errors import (
        CassetteAlreadyPlayed,
        CassetteError,
        CassetteMiss,
        CassetteMissing,
        CassetteUnplayed,
        Unplayed,
    )
    from pytest_laya.cassettes.handle import PROVENANCE_FIELDS, PROVENANCE_FORMAT, CassetteHandle
    from pytest_laya.cassettes.matching import canonical_body, match_key
    from pytest_laya.cassettes.naming import CASSETTE_SUFFIX, cassette_relpath
    from pytest_laya.cassettes.persist import recorded_provenance
    from pytest_laya.cassettes.scrub import (
        RECORDED_ORIGIN,
        RECORDED_REQUEST_ID,
        RECORDED_TRACEPARENT,
        REDACTED,
        REQUEST_HEADERS,
        RESPONSE_HEADERS,
    )

# Where each public name lives. Loaded on first use, so importing one module of the package
# (the plugin's start-up reads only `naming`) does not load the others, httpx and YAML with them.
_HOMES = {
    "RECORD_HINT": "_vcr", "laya_vcr": "_vcr", "use_cassette": "_vcr",
    "CassetteAlreadyPlayed": "errors", "CassetteError": "errors", "CassetteMiss": "errors",
    "CassetteMissing": "errors", "CassetteUnplayed": "errors", "Unplayed": "errors",
    "PROVENANCE_FIELDS": "handle", "PROVENANCE_FORMAT": "handle", "CassetteHandle": "handle",
    "canonical_body": "matching", "match_key": "matching",
    "CASSETTE_SUFFIX": "naming", "cassette_relpath": "naming",
    "recorded_provenance": "persist",
    "RECORDED_ORIGIN": "scrub", "RECORDED_REQUEST_ID": "scrub", "RECORDED_TRACEPARENT": "scrub",
    "REDACTED": "scrub", "REQUEST_HEADERS": "scrub", "RESPONSE_HEADERS": "scrub",
}

__all__ = [
    "CASSETTE_SUFFIX",
    "PROVENANCE_FIELDS",
    "PROVENANCE_FORMAT",
    "RECORDED_ORIGIN",
    "RECORDED_REQUEST_ID",
    "RECORDED_TRACEPARENT",
    "RECORD_HINT",
    "REDACTED",
    "REQUEST_HEADERS",
    "RESPONSE_HEADERS",
    "CassetteAlreadyPlayed",
    "CassetteError",
    "CassetteHandle",
    "CassetteMiss",
    "CassetteMissing",
    "CassetteUnplayed",
    "Unplayed",
    "canonical_body",
    "cassette_relpath",
    "laya_vcr",
    "match_key",
    "recorded_provenance",
    "use_cassette",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'pytest_laya.cassettes' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"pytest_laya.cassettes.{home}"), name)
    globals()[name] = value
    return value

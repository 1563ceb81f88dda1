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

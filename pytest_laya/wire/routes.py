"""The protocol's paths: what a Jev-compatible server answers, and the target's probes."""

from __future__ import annotations

__all__ = ["DECIDE_PATH", "BATCH_PATH", "HEALTH_PATH", "LIVEZ_PATH", "READYZ_PATH", "JSON_MEDIA_TYPE"]

DECIDE_PATH = "/v1/systemone"
BATCH_PATH = "/v1/systemone/batch"
HEALTH_PATH = "/health"
# The target spec's probes: liveness never waits on the model; readiness says it is loaded.
LIVEZ_PATH = "/livez"
READYZ_PATH = "/readyz"
JSON_MEDIA_TYPE = "application/json"

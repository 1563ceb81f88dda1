"""Re-recording an unchanged server leaves a cassette byte for byte the same.

The fake (target flavour) stands in for a target-spec server: its refusals are problem+json
bodies carrying the request id, and it sends a fresh trace span and Server-Timing on every
call, which is exactly what made re-recorded reference-server cassettes differ.
"""

from __future__ import annotations

import httpx
import pytest

from pytest_laya import LayaCallError, ServedLayaClient
from pytest_laya.cassettes import RECORDED_REQUEST_ID, use_cassette
from pytest_laya.fake import FakeLayaServer

NOUL = {"refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"}}


def record(path, *, raw_id: str | None = None) -> None:
    """One decision, one refusal through the client, one raw refusal the server assigns an id to."""
    with FakeLayaServer() as server, use_cassette(path, record=True) as cassette:
        with ServedLayaClient(server.url) as client:
            client.decide("I was charged twice.", NOUL)
            # A 413 state_too_large, with the client's request id: recorded like any answer.
            with pytest.raises(LayaCallError) as refused:
                client.decide("x" * 50_001, NOUL)
            assert (refused.value.status, refused.value.server_code) == (413, "state_too_large")
        headers = {"X-Request-Id": raw_id} if raw_id else {}
        httpx.post(server.url + "/v1/systemone", content=b"{not json", headers={"Content-Type": "application/json", **headers})
    assert cassette.outcome in ("written", "unchanged")


def test_request_ids_inside_bodies_are_stored_normalised(tmp_path):
    path = tmp_path / "c.yaml"
    record(path, raw_id="client-chosen-id-0001")
    text = path.read_text()
    assert "client-chosen-id-0001" not in text
    assert f'"request_id":"{RECORDED_REQUEST_ID}"' in text.replace(" ", "")


def test_server_assigned_request_ids_are_normalised_too(tmp_path):
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    record(first)   # the raw request sends no id: the server makes one up, different each time
    record(second)
    assert first.read_bytes() == second.read_bytes()


def test_re_recording_an_unchanged_target_server_changes_nothing(tmp_path):
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    record(first, raw_id="run-one-request-id")
    record(second, raw_id="run-two-request-id")
    assert first.read_bytes() == second.read_bytes()
    assert "dur=0" in first.read_text()  # Server-Timing durations are stored as 0

"""The default request limits have one home (`pytest_laya.wire.requests`): the fake, the reference
server and the server contract's documented limits all read them from there."""

from __future__ import annotations

from pytest_laya.fake.flavours import LIMITS
from pytest_laya.suites.server_under_test import DOCUMENTED_LIMITS
from pytest_laya.wire import requests
from pytest_laya_reference.settings import Limits

WIRE = {
    "max_questions": requests.MAX_QUESTIONS,
    "max_state_chars": requests.MAX_STATE_CHARS,
    "max_body_bytes": requests.MAX_BODY_BYTES,
    "max_options": requests.MAX_OPTIONS,
    "max_batch_states": requests.MAX_BATCH_STATES,
    "max_request_tokens": requests.MAX_REQUEST_TOKENS,
}


def test_the_defaults_are_laya_serves():
    assert (requests.MAX_QUESTIONS, requests.MAX_STATE_CHARS, requests.MAX_OPTIONS) == (64, 50_000, 100)


def test_the_fake_and_the_reference_server_default_to_the_wire_limits():
    assert dict(LIMITS) == WIRE
    assert Limits().to_json() == WIRE


def test_the_contract_documents_the_wire_limits_for_both_specs():
    for spec in ("current", "target"):
        assert dict(DOCUMENTED_LIMITS[spec]) == {name: WIRE[name] for name in DOCUMENTED_LIMITS[spec]}

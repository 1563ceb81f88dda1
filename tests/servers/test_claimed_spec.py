"""Which spec a server claims: its Laya-Spec header, else /health's "spec", else current."""

from __future__ import annotations

import pytest

from pytest_laya.servers import claimed_spec_of
from pytest_laya.wire.health import Health


def test_the_header_wins_over_health():
    claim = claimed_spec_of({"content-type": "application/json", "laya-spec": "target"}, {"status": "ok", "spec": "current"})
    assert claim.name == "target"
    assert "Laya-Spec header" in claim.reason


def test_health_says_when_the_header_is_absent():
    for health in ({"status": "ok", "spec": "target"}, Health({"status": "ok", "spec": "target"})):
        claim = claimed_spec_of({}, health)
        assert (claim.name, claim.reason) == ("target", 'its /health says "spec": "target"')


@pytest.mark.parametrize("headers, health", [
    (None, None),
    ({"server": "uvicorn"}, {"status": "ok", "loaded": ["tiny"]}),  # laya-serve 0.4.15
    ({"Laya-Spec": "v2"}, {"status": "ok", "spec": "newest"}),  # neither is a spec the kit has
    ({}, ["not", "a", "document"]),
])
def test_a_server_that_claims_nothing_is_held_to_the_current_spec(headers, health):
    claim = claimed_spec_of(headers, health)
    assert claim.name == "current"
    assert "claims none" in claim.reason
    assert "(" not in claim.reason  # summaries show the reason in parentheses: none nested


def test_a_reason_names_the_server_it_is_about():
    # "The current spec applies because the server claims none", never "because the server: it claims none".
    assert claimed_spec_of({}, None).of("the server") == \
        'the server claims none, with no Laya-Spec header and no "spec" in /health'
    assert claimed_spec_of({"laya-spec": "target"}, None).of("the server") == "the server's Laya-Spec header says target"
    assert claimed_spec_of({}, {"spec": "target"}).of("the server") == "the server's /health says \"spec\": \"target\""

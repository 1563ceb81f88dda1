"""`ServerKind`: what kind of server a `ServerHandle` is, as the questions the plugin asks of it."""

from __future__ import annotations

import pickle

import pytest

from pytest_laya.servers import SERVER_KINDS, ServerHandle, ServerKind

TRAITS = {  # kind: (follows_mode, replays, is_live, is_fake, claims)
    "live": (True, False, True, False, "current"),
    "replay": (True, True, False, False, "current"),
    "fake": (False, False, False, True, "target"),
    "reference": (False, False, False, False, "target"),
    "staging": (False, False, False, False, "current"),  # a project's own: captured and checked
}


@pytest.mark.parametrize("name", sorted(TRAITS))
def test_each_kind_answers_what_the_plugin_asks(name):
    kind = ServerHandle(url="http://127.0.0.1:1", kind=name).kind
    assert isinstance(kind, ServerKind) and kind == name and f"{kind}" == name
    assert (kind.follows_mode, kind.replays, kind.is_live, kind.is_fake, kind.claims) == TRAITS[name]


def test_a_projects_own_kind_is_one_object_that_survives_pickling():
    staging = ServerKind("staging")
    assert staging is ServerKind("staging") and pickle.loads(pickle.dumps(staging)) is staging
    assert list(ServerKind) == [ServerKind.LIVE, ServerKind.REPLAY, ServerKind.FAKE, ServerKind.REFERENCE]


def test_the_kinds_claimed_specs_by_name_follow_the_members():
    assert SERVER_KINDS == {"live": "current", "replay": "current", "fake": "target", "reference": "target"}


@pytest.mark.parametrize("bad", ["", None, 3])
def test_a_kind_that_is_no_name_is_a_clear_error(bad):
    with pytest.raises(ValueError, match="ServerHandle kind must be a non-empty string such as 'live'"):
        ServerHandle(url="http://127.0.0.1:1", kind=bad)

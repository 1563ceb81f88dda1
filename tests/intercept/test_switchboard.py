"""The switchboard's HTTP patches: entered for one activation, undone exactly, whatever happens.

A test enters vcrpy's patches (httpx, http.client, urllib3, requests...) through the switchboard
and leaves them; the next test enters them again with its own routes. These tests check that
every patched attribute is the very original object afterwards, that routes never leak from one
activation to the next, and that a host no route claims reaches the real server.
"""

from __future__ import annotations

import http.client
import json

import httpx
import pytest

from pytest_laya.faults import Handler, Respond, ScriptedServer
from pytest_laya.intercept import NetworkBlocked, Switchboard
from pytest_laya.intercept.switchboard import _AttributePatch

_MISSING = object()


class Canned:
    """A route that claims one host and answers every request to it with `answer`."""

    def __init__(self, host: str, answer: str) -> None:
        self.host, self.answer, self.seen = host, answer, []

    def claims(self, request, host):
        return host == self.host

    def can_play_response_for(self, request):
        return True

    def play_response(self, request):
        self.seen.append(request.uri)
        return {"status": {"code": 200, "message": "OK"}, "headers": {"content-type": ["application/json"]},
                "body": {"string": json.dumps({"answer": self.answer}).encode()}}

    def append(self, request, response):  # pragma: no cover - replay only
        raise AssertionError("nothing is recorded here")


def _state(board: Switchboard) -> dict:
    """What every patched attribute holds now, as each target's own dict has it (or not)."""
    board._built()
    out = {}
    for patcher in board._patchers:
        if isinstance(patcher, _AttributePatch):
            out[(id(patcher.target), patcher.attribute)] = patcher.target.__dict__.get(patcher.attribute, _MISSING)
    return out


def test_an_activation_patches_and_then_restores_every_attribute_exactly():
    board = Switchboard()
    before = _state(board)
    assert before, "vcrpy's patches were not built"
    original, connection = httpx.HTTPTransport.handle_request, http.client.HTTPConnection
    with board.active([Canned("laya.test:80", "a")]):
        assert httpx.HTTPTransport.handle_request is not original
        assert http.client.HTTPConnection is not connection  # vcrpy's stand-in
        assert _state(board) != before
    assert _state(board) == before
    assert httpx.HTTPTransport.handle_request is original and http.client.HTTPConnection is connection


def test_an_inherited_attribute_is_removed_again_not_left_as_a_copy():
    board = Switchboard()
    inherited = [p for p in board._built() if isinstance(p, _AttributePatch)
                 and p.attribute not in p.target.__dict__]
    assert inherited, "expected some patch on an inherited attribute (urllib3's HTTPSConnectionPool)"
    with board.active([]):
        assert all(p.attribute in p.target.__dict__ for p in inherited)
    assert all(p.attribute not in p.target.__dict__ for p in inherited)


def test_an_error_inside_the_block_still_undoes_every_patch():
    board = Switchboard()
    before = _state(board)
    with pytest.raises(RuntimeError, match="boom"), board.active([]):
        raise RuntimeError("boom")
    assert _state(board) == before
    with board.active([]):  # and the board can be used again
        pass
    assert _state(board) == before


def test_consecutive_activations_route_to_their_own_routes_and_leave_other_hosts_alone():
    seen_by_server = []

    def server_answer(request):
        seen_by_server.append(request.path)
        return Respond(200, {"answer": "real"})

    board = Switchboard()
    with ScriptedServer(default=Handler(server_answer)).start() as server, httpx.Client() as client:
        for name in ("first", "second", "third"):
            route = Canned("laya.test:80", name)
            with board.active([route]):
                assert client.post("http://laya.test/v1/systemone", json={}).json() == {"answer": name}
                # another host, during the activation: the network, untouched
                assert client.get(server.url + f"/during-{name}").json() == {"answer": "real"}
            assert route.seen == ["http://laya.test/v1/systemone"]
            # between activations nothing is patched: the real server answers directly
            assert client.get(server.url + f"/between-{name}").json() == {"answer": "real"}
    assert seen_by_server == [f"/{when}-{name}" for name in ("first", "second", "third") for when in ("during", "between")]


def test_activations_nest_the_inner_routes_first_until_they_end():
    board = Switchboard()
    outer, inner = Canned("laya.test:80", "outer"), Canned("laya.test:80", "inner")
    fake = Canned("fake.test:80", "fake")
    with httpx.Client() as client:
        with board.active([outer], block_network=True):
            with board.active([inner, fake], block_network=True):
                assert client.post("http://laya.test/v1/systemone", json={}).json() == {"answer": "inner"}
                assert client.post("http://fake.test/v1/systemone", json={}).json() == {"answer": "fake"}
            # the inner activation ended: its routes are gone, the outer's answer again, still patched
            assert client.post("http://laya.test/v1/systemone", json={}).json() == {"answer": "outer"}
            with pytest.raises(NetworkBlocked):
                client.post("http://fake.test/v1/systemone", json={})
        assert board.laya == () and not board.block_network

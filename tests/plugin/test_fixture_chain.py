"""`laya_url`, `laya_client`, `laya_proxy` and `laya_cassette` stand on `laya_server`: a test that
asks for one of them sets up `laya_server`'s function fixtures and that one, nothing more (each
function fixture is pytest machinery every test pays for)."""

from __future__ import annotations

import pytest

from tests.helpers.pytester_runs import run


def _function_fixtures(pytester, test: str) -> list[str]:
    result = run(pytester, "--setup-plan", f"test_it.py::{test}")
    return [line.split()[2] for line in result.outlines if line.strip().startswith("SETUP    F")]


@pytest.mark.parametrize("fixture", ["laya_url", "laya_client", "laya_proxy", "laya_cassette"])
def test_a_fixture_on_laya_server_adds_only_itself(pytester, fixture):
    pytester.makepyfile(test_it=f"""
def test_server(laya_server):
    pass

def test_on_it({fixture}):
    pass
""")
    server = _function_fixtures(pytester, "test_server")
    assert "laya_server" in server
    assert _function_fixtures(pytester, "test_on_it") == [*server, fixture]


def test_a_closed_route_is_freed_without_the_garbage_collector(pytester):
    """A replayed test's route, its cassette and its spec check hold no cycle: they are freed when
    the test ends, so a suite of many short tests does not leave each one to the collector."""
    from pytest_laya.fake import FakeLayaServer

    pytester.makeconftest("""
import gc
import weakref

import pytest

REFS = []
LEFT = []


@pytest.fixture
def watched(laya_server):
    route = laya_server.route
    if route.kind.value != "replay":  # the recording run first
        yield
        return
    REFS[:] = [weakref.ref(route), weakref.ref(route.laya), weakref.ref(route.handle), weakref.ref(route.handle.cassette)]
    gc.disable()
    yield


def pytest_runtest_logfinish(nodeid, location):
    LEFT.extend(type(ref()).__name__ for ref in REFS if ref() is not None)
    REFS.clear()
    gc.enable()


def pytest_sessionfinish(session):
    assert not LEFT, f"still alive after their test: {LEFT}"
""")
    pytester.makepyfile(test_it="""
import httpx

def test_decide(watched, laya_url):
    response = httpx.post(laya_url + "/v1/systemone", json={
        "state": "Refund me.", "questions": {"refund": {"type": "noul", "instructions": "Refund?"}}})
    assert response.status_code == 200
""")
    with FakeLayaServer() as fake:
        run(pytester, "--laya-record", f"--laya-url={fake.url}").assert_outcomes(passed=1)
    result = run(pytester)
    result.assert_outcomes(passed=1)
    assert "still alive" not in result.stdout.str()

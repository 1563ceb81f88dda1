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


def test_laya_server_runs_no_settings_fixture_while_the_project_overrides_none(pytester):
    pytester.makepyfile(test_it="""
def test_server(laya_server):
    pass
""")
    assert not {"laya_vcr_config", "vcr_config"} & set(_function_fixtures(pytester, "test_server"))


@pytest.mark.parametrize("override", ["laya_vcr_config", "vcr_config"])
def test_an_override_in_a_module_or_a_class_applies_there_and_only_there(pytester, override):
    pytester.makepyfile(test_plain="""
def test_plain(laya_url):
    pass
""", test_module=f"""
import pytest

@pytest.fixture
def {override}():
    return {{"filter_headers": 5}}

def test_in_module(laya_url):
    pass
""", test_class=f"""
import pytest

class TestIt:
    @pytest.fixture
    def {override}(self):
        return {{"filter_headers": 5}}

    def test_in_class(self, laya_url):
        pass

def test_beside_the_class(laya_url):
    pass
""")
    result = run(pytester, "test_plain.py", "test_class.py", "test_module.py", "-v")
    result.assert_outcomes(passed=2, errors=2)
    result.stdout.fnmatch_lines_random(["*test_plain PASSED*", "*test_beside_the_class PASSED*",
                                        "*test_in_class ERROR*", "*test_in_module ERROR*",
                                        f"*{override}: filter_headers must be a list*"])

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

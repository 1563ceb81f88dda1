"""A service that reads its Laya URL and API key from the environment gets both, and the key
never shows: not in the handle's repr, a traceback with --showlocals, a cassette or the report."""

from __future__ import annotations

import httpcore  # noqa: F401
import httpx  # noqa: F401
import pytest
import vcr  # noqa: F401
import vcr.stubs.httpx_stubs  # noqa: F401

from pytest_laya.fake import FakeLayaServer
from tests.helpers.leaks import assert_hidden
from tests.helpers.pytester_runs import run

pytest_plugins = ["pytester"]

KEY = "sk-service-env-canary-71c4"

SERVICE = """
import os

import httpx

BODY = {"state": "I was charged twice.", "questions": {"refund": {"type": "noul", "instructions": "Refund?"}}}


def route(url_var, key_var):
    key = os.environ.get(key_var)
    headers = {"Authorization": "Bearer " + key} if key else {}
    return httpx.post(os.environ[url_var] + "/v1/systemone", json=BODY, headers=headers)
"""


@pytest.fixture
def keyed():
    with FakeLayaServer(api_key=KEY) as server:
        yield server


def test_laya_url_env_exports_the_key_beside_the_url(pytester, keyed):
    pytester.makepyfile(test_it=SERVICE + """

def test_service(laya_url_env, laya_server):
    assert laya_url_env is laya_server
    assert route("LAYA_SERVED_URL", "LAYA_SERVED_API_KEY").status_code == 200
    assert laya_server.api_key.reveal() == os.environ["LAYA_SERVED_API_KEY"]


def test_shows_its_locals(laya_url_env, laya_server, laya_client):
    assert route("LAYA_SERVED_URL", "LAYA_SERVED_API_KEY").status_code == 401  # fails: every local shown
""")
    for mode in (["--laya-mode=live"], ["--laya-record"]):
        result = run(pytester, *mode, f"--laya-url={keyed.url}", f"--laya-api-key={KEY}", "--showlocals",
                     "--tb=long", "-vv", "-rA")
        result.assert_outcomes(passed=1, failed=1)
        assert "laya_server = <LayaServer " in result.stdout.str()
        assert_hidden(result.stdout.str() + result.stderr.str(), KEY)
    for cassette in (pytester.path / "cassettes").rglob("*.yaml"):
        assert_hidden(cassette.read_text(), KEY)
    # replay: the key the run was given is exported too, so the service sends what it recorded with
    run(pytester, f"--laya-api-key={KEY}", "-k", "test_service").assert_outcomes(passed=1)


def test_the_ini_names_both_variables_and_a_keyless_server_unsets_the_key(pytester, keyed, monkeypatch):
    pytester.makeini("""
[pytest]
laya_url_env = ROUTER_LAYA_URL
laya_api_key_env = ROUTER_LAYA_KEY
""")
    pytester.makepyfile(test_it=SERVICE + """
import pytest

def test_keyed(laya_server):
    assert route("ROUTER_LAYA_URL", "ROUTER_LAYA_KEY").status_code == 200

@pytest.mark.laya(server="fake")
def test_fake_has_no_key(laya_server):
    assert "ROUTER_LAYA_KEY" not in os.environ
    assert route("ROUTER_LAYA_URL", "ROUTER_LAYA_KEY").status_code == 200
""")
    monkeypatch.setenv("ROUTER_LAYA_KEY", "a-stale-key-from-the-shell")
    result = run(pytester, "--laya-mode=live", f"--laya-url={keyed.url}", f"--laya-api-key={KEY}")
    result.assert_outcomes(passed=2)

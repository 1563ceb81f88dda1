"""A project's own secrets and noise, configured as pytest-recording users configure them (issue 15)."""

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

TENANT = "tenant-token-0c7e19a5"
SERVICE_KEY = "service-key-41f0d2bb"
BODY_SECRET = "body-secret-77a1e3c9"

SERVICE = f"""
import httpx

def test_service_call(laya_url):
    body = {{"state": "I was charged twice.", "metadata": {{"tenant_token": "{BODY_SECRET}", "kept": "visible"}},
             "questions": {{"refund": {{"type": "noul", "instructions": "Refund?"}}}}}}
    response = httpx.post(laya_url + "/v1/systemone?tenant_token={TENANT}&page=1", json=body,
                          headers={{"X-Api-Key": "{SERVICE_KEY}"}})
    assert response.status_code == 200
"""

CONFIG = """
import pytest

@pytest.fixture
def laya_vcr_config():
    return {
        "filter_headers": ["x-api-key"],
        "filter_query_parameters": ["tenant_token"],
        "filter_post_data_parameters": ["/metadata/tenant_token"],
        "before_record_response": lambda response: {**response, "headers": {**response["headers"], "x-seen": ["yes"]}},
    }
"""


def test_the_projects_own_secrets_never_reach_a_cassette_or_the_output(pytester):
    pytester.makeconftest(CONFIG)
    pytester.makepyfile(test_it=SERVICE)
    report = pytester.path / "laya.json"
    with FakeLayaServer(flavor="laya-serve-0.4.15") as server:
        recorded = run(pytester, "--laya-record", f"--laya-url={server.url}", f"--laya-report={report}", "-vv")
        recorded.assert_outcomes(passed=1)
    [cassette] = (pytester.path / "cassettes").rglob("*.yaml")
    text = cassette.read_text()
    written = text + recorded.stdout.str() + recorded.stderr.str() + report.read_text()
    assert_hidden(written, TENANT, SERVICE_KEY, BODY_SECRET)
    assert "page=1" in text and "visible" in text and "x-seen" in text  # what was not filtered stays
    replayed = run(pytester)  # the filtered request still finds its recording
    replayed.assert_outcomes(passed=1)


def test_pytest_recordings_vcr_config_is_read_for_the_keys_that_apply(pytester):
    pytester.makeconftest(CONFIG.replace("def laya_vcr_config", "def vcr_config").replace(
        'return {', 'return {"record_mode": "once", "match_on": ["uri"],'))
    pytester.makepyfile(test_it=SERVICE)
    with FakeLayaServer(flavor="laya-serve-0.4.15") as server:
        run(pytester, "--laya-record", f"--laya-url={server.url}").assert_outcomes(passed=1)
    [cassette] = (pytester.path / "cassettes").rglob("*.yaml")
    assert TENANT not in cassette.read_text()


def test_a_misconfigured_laya_vcr_config_says_which_key(pytester):
    pytester.makeconftest("""
import pytest

@pytest.fixture
def laya_vcr_config():
    return {"filter_header": ["x-api-key"]}
""")
    pytester.makepyfile(test_it=SERVICE)
    result = run(pytester)
    assert "unknown key(s) 'filter_header'" in result.stdout.str()


@pytest.mark.parametrize("hook", ["before_record_request", "before_record_response"])
def test_a_hook_that_drops_the_interaction_records_nothing_of_it(pytester, hook):
    pytester.makeconftest(f"""
import pytest

@pytest.fixture
def laya_vcr_config():
    return {{"{hook}": lambda item: None}}
""")
    pytester.makepyfile(test_it=SERVICE)
    with FakeLayaServer(flavor="laya-serve-0.4.15") as server:
        run(pytester, "--laya-record", f"--laya-url={server.url}").assert_outcomes(passed=1)
    [cassette] = (pytester.path / "cassettes").rglob("*.yaml")
    assert "interactions: []" in cassette.read_text()


@pytest.mark.parametrize("own_vcr_config", [True, False], ids=["own-vcr_config", "none"])
def test_without_pytest_recording_a_projects_vcr_config_is_read_and_none_is_fine(pytester, own_vcr_config):
    if own_vcr_config:
        pytester.makeconftest(CONFIG.replace("def laya_vcr_config", "def vcr_config"))
    pytester.makepyfile(test_it=SERVICE)
    with FakeLayaServer(flavor="laya-serve-0.4.15") as server:
        recorded = run(pytester, "-p", "no:recording", "--laya-record", f"--laya-url={server.url}")
        recorded.assert_outcomes(passed=1)
    [cassette] = (pytester.path / "cassettes").rglob("*.yaml")
    assert (TENANT not in cassette.read_text()) is own_vcr_config
    run(pytester, "-p", "no:recording").assert_outcomes(passed=1)

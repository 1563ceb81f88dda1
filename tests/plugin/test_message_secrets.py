"""Every message that shows a request hides the project's filtered values and the kit's API key.

A blocked host, a cassette miss, a spec violation (enforced, reported, or swallowed by the code
under test) and verify's drift each show a request. Each path runs here with the project's
``laya_vcr_config`` filters, ``--showlocals`` and long tracebacks, and neither the filtered
values nor the API key may appear in any spelling in the output, the JSON report or a cassette.
"""

from __future__ import annotations

import httpcore  # noqa: F401
import httpx  # noqa: F401
import pytest
import vcr  # noqa: F401
import vcr.stubs.httpx_stubs  # noqa: F401

from pytest_laya.fake import FakeLayaServer
from pytest_laya.faults import closed_loopback_url
from tests.helpers.leaks import assert_hidden
from tests.helpers.pytester_runs import cassette_data, report_of, run
from tests.plugin.test_any_client import _break_probability

pytest_plugins = ["pytester"]

TENANT = "tenant-key-5e2b8d41"
TOKEN = "tenant-token-9a0c6f37"
API_KEY = "sk-message-canary-3d7e"
SHOWN = ("--showlocals", "--tb=long", "-vv", "-rA")

CONFTEST = """
import pytest

@pytest.fixture
def laya_vcr_config():
    return {"filter_query_parameters": ["tenant_key"], "filter_headers": ["x-tenant-token"]}
"""

# The secrets are module constants, so --showlocals of the test's own frame does not show them.
SERVICE = f"""
import httpx
import pytest

HEADERS = {{"X-Tenant-Token": "{TOKEN}", "Authorization": "Bearer {API_KEY}"}}
QUERY = "?tenant_key={TENANT}&page=1"
BODY = {{"state": "I was charged twice.", "questions": {{"refund": {{"type": "noul", "instructions": "Refund?"}}}}}}


def call(base, path="/v1/systemone", body=BODY):
    return httpx.post(base + path + QUERY, headers=HEADERS, json=body)
"""


def _assert_hidden(*texts: str) -> None:
    assert_hidden("\n".join(texts), TENANT, TOKEN, API_KEY)


def _output(result) -> str:
    return result.stdout.str() + result.stderr.str()


@pytest.fixture
def project(pytester):
    pytester.makeconftest(CONFTEST)
    return pytester


@pytest.mark.parametrize("fixture", ["", "laya_url"], ids=["no-laya-fixture", "beside-laya"])
@pytest.mark.parametrize("swallowed", [False, True], ids=["raised", "swallowed"])
def test_a_blocked_request_hides_the_filtered_values_and_the_key(project, fixture, swallowed):
    other = closed_loopback_url()
    body = f"call('{other}')"
    if swallowed:
        body = f"try:\n        {body}\n    except Exception:\n        pass"
    project.makepyfile(test_it=SERVICE + f"""

def test_other_host({fixture}):
    {body}
""")
    report = project.path / "laya.json"
    result = run(project, "--laya-block-network", f"--laya-api-key={API_KEY}", f"--laya-report={report}", *SHOWN)
    if swallowed and not fixture:
        result.assert_outcomes(passed=1)  # no Laya route to keep the error: the service's catch wins
        return
    assert result.ret == 1
    out = _output(result)
    assert "NetworkBlocked" in out and "tenant_key=<redacted>" in out and "page=1" in out
    _assert_hidden(out, report.read_text() if report.exists() else "")


def test_a_blocked_url_with_credentials_in_it_shows_neither(project):
    project.makepyfile(test_it=f"""
import httpx

URL = "http://user:{API_KEY}@127.0.0.1:9/x"

def test_other_host():
    httpx.get(URL)
""")
    result = run(project, "--laya-block-network", *SHOWN)
    result.assert_outcomes(failed=1)
    out = _output(result)
    assert "NetworkBlocked: GET 127.0.0.1:9/x" in out
    _assert_hidden(out)


@pytest.fixture
def fake():
    with FakeLayaServer(api_key=API_KEY) as server:
        yield server


def _record(project, fake):
    project.makepyfile(test_it=SERVICE + """

def test_service(laya_url):
    assert call(laya_url).status_code == 200
""")
    recorded = run(project, "--laya-record", f"--laya-url={fake.url}", f"--laya-api-key={API_KEY}", *SHOWN)
    recorded.assert_outcomes(passed=1)
    [cassette] = (project.path / "cassettes").rglob("*.yaml")
    _assert_hidden(_output(recorded), cassette.read_text())
    return cassette


def test_a_cassette_miss_hides_the_filtered_values_and_the_key(project, fake):
    _record(project, fake)
    project.makepyfile(test_it=SERVICE + """

def test_service(laya_url):
    assert call(laya_url, body={**BODY, "state": "I was charged three times."}).status_code == 200
""")
    result = run(project, f"--laya-api-key={API_KEY}", *SHOWN)
    result.assert_outcomes(failed=1)
    out = _output(result)
    assert "CassetteMiss" in out
    _assert_hidden(out)


@pytest.mark.parametrize("mode", ["enforce", "report"])
def test_a_spec_violation_hides_the_filtered_values_and_the_key(project, fake, mode):
    cassette = _record(project, fake)
    _break_probability(cassette)
    report = project.path / "laya.json"
    result = run(project, f"--laya-api-key={API_KEY}", f"--laya-conformance={mode}", f"--laya-report={report}", *SHOWN)
    result.assert_outcomes(**({"failed": 1} if mode == "enforce" else {"passed": 1}))
    out = _output(result)
    assert "/answers/refund/noul" in out
    assert "tenant_key=" in out  # the request is shown, its filtered value is not
    _assert_hidden(out, report.read_text())
    assert report_of(report)["tests"][0]["violations"]


def test_verify_drift_hides_the_filtered_values_and_the_key(project, fake):
    _record(project, fake)
    report = project.path / "laya.json"
    with FakeLayaServer(api_key=API_KEY, model="another-model") as changed:
        result = run(project, "--laya-mode=verify", f"--laya-url={changed.url}", f"--laya-api-key={API_KEY}",
                     f"--laya-report={report}", *SHOWN)
    assert result.ret == 1
    out = _output(result)
    assert "no longer matches the live server" in out
    _assert_hidden(out, report.read_text())
    [cassette] = (project.path / "cassettes").rglob("*.yaml")
    assert cassette_data(cassette)["interactions"]

"""--laya-mode=verify: a test's cassette checked against a live server, interaction by interaction.

Recorded against one fake, verified against the same fake (no drift) or a changed one (drift
that names the cassette and how to record it again). The comparison itself is unit-tested on
response dicts at the end.
"""

from __future__ import annotations

import json

import httpcore  # noqa: F401
import httpx  # noqa: F401
import pytest
import vcr  # noqa: F401
import vcr.stubs.httpx_stubs  # noqa: F401
import yaml

from pytest_laya.cassettes.verify import DEFAULT_TOLERANCE, compare_responses
from pytest_laya.fake import FakeLayaServer
from tests.helpers.pytester_runs import CANARY, TEST_DECIDE, WITHOUT_UNUSED_PLUGINS, run

# pytester's in-process runs drop modules first imported inside them; importing the network
# stack here keeps one copy of each class (as tests/plugin/test_plugin.py does).


# The fakes speak the target spec; the live server is held to it in both modes.
def record(pytester, server, *args):
    result = run(pytester, "--laya-record", f"--laya-url={server.url}", f"--laya-api-key={CANARY}",
                 "--laya-spec=target", *args)
    assert result.ret == 0, result.stdout.str()
    [cassette] = (pytester.path / "cassettes").rglob("*.yaml")
    return cassette


def verify(pytester, server, *args):
    return run(pytester, "--laya-mode=verify", f"--laya-url={server.url}", f"--laya-api-key={CANARY}",
               "--laya-spec=target", *args)


@pytest.fixture
def fake():
    with FakeLayaServer(api_key=CANARY) as server:
        yield server


def shifted(by: float, **kwargs):
    """A fake whose noul probabilities (and so their confidences) are `by` higher."""
    server = FakeLayaServer(api_key=CANARY, **kwargs)
    original = server.laya.noul_probability
    server.laya.noul_probability = lambda state, question: round(original(state, question) + by, 4)
    return server


def test_an_unchanged_server_verifies(pytester, fake):
    pytester.makepyfile(test_it=TEST_DECIDE)
    cassette = record(pytester, fake)
    before = cassette.read_bytes()
    served = len(fake.requests)
    result = verify(pytester, fake)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["mode: verify; cassettes: 1 verified against the live server (below);*",
                                 "verify: 1 cassette, 1 of 1 interactions match, 0 cassettes drifted*"])
    assert "none used" not in result.stdout.str()
    assert len(fake.requests) > served  # verify asked the live server again
    assert cassette.read_bytes() == before  # and never writes a cassette


def test_a_changed_server_fails_with_a_diff_naming_the_cassette(pytester, fake):
    pytester.makepyfile(test_it=TEST_DECIDE)
    record(pytester, fake)
    with FakeLayaServer(api_key=CANARY, revision="fake-1") as changed:
        result = verify(pytester, changed)
    result.assert_outcomes(passed=1, errors=1)  # the test's own assertions hold; the cassette is stale
    out = result.stdout.str()
    result.stdout.fnmatch_lines([
        "*cassette cassettes/test_it/test_refund.yaml no longer matches the live server http://127.0.0.1:*"
        " (1 of 1 interactions differ; numbers compared within 0.0001):",
        '*interaction 1 POST /v1/systemone: body at /served_by/revision (recorded "fake-0", now "fake-1")*',
        "*re-record the cassette: pytest 'test_it.py::test_refund' --laya-record --laya-url http://127.0.0.1:*",
        "verify: 1 cassette, 0 of 1 interactions match, 1 cassette drifted*",
        "  re-record cassettes/test_it/test_refund.yaml: pytest 'test_it.py::test_refund' --laya-record*",
    ])
    assert CANARY not in out


def test_the_re_record_command_keeps_the_cassette_directory(pytester, fake):
    pytester.makepyfile(test_it=TEST_DECIDE)
    run(pytester, "--laya-record", f"--laya-url={fake.url}", f"--laya-api-key={CANARY}", "--laya-spec=target",
        "--laya-cassette-dir=recorded").assert_outcomes(passed=1)
    with FakeLayaServer(api_key=CANARY, revision="fake-1") as changed:
        result = verify(pytester, changed, "--laya-cassette-dir=recorded")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*cassette recorded/test_it/test_refund.yaml no longer matches*",
                                 "*re-record the cassette: pytest 'test_it.py::test_refund' --laya-record --laya-url "
                                 "http://127.0.0.1:* --laya-cassette-dir recorded"])


def test_status_and_headers_must_match_exactly(pytester, fake):
    pytester.makepyfile(test_it=TEST_DECIDE)
    record(pytester, fake)
    with FakeLayaServer(api_key=CANARY, flavor="laya-serve-0.4.15") as other:
        result = verify(pytester, other, "--laya-spec=current")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines([
        "*interaction 1 POST /v1/systemone: *header x-request-id (recorded 'recorded', now absent)*",
        "*request GET /health: the cassette has no recorded interaction for this request*",
    ])


def test_probabilities_within_the_tolerance_still_match(pytester, fake):
    pytester.makepyfile(test_it=TEST_DECIDE)
    record(pytester, fake)
    with shifted(DEFAULT_TOLERANCE / 2) as close:
        result = verify(pytester, close)
    result.assert_outcomes(passed=1)


def test_probabilities_beyond_the_tolerance_drift(pytester, fake):
    pytester.makepyfile(test_it=TEST_DECIDE)
    record(pytester, fake)
    with shifted(0.001) as far:
        result = verify(pytester, far)
        result.assert_outcomes(passed=1, errors=1)
        result.stdout.fnmatch_lines(["*body at /answers/refund/noul (recorded *, now *: differs by 0.001, more than 0.0001)*"])
        verify(pytester, far, "--laya-verify-tolerance=0.01").assert_outcomes(passed=1)
        pytester.makeini("[pytest]\nlaya_verify_tolerance = 0.01\n")
        verify(pytester, far).assert_outcomes(passed=1)
        # The command line wins over the ini file.
        verify(pytester, far, "--laya-verify-tolerance=0").assert_outcomes(passed=1, errors=1)


@pytest.mark.parametrize(("args", "ini", "message"), [
    (["--laya-verify-tolerance=-1"], "", "*--laya-verify-tolerance: the verify tolerance must be a number >= 0*"),
    ([], "laya_verify_tolerance = lots", "*laya_verify_tolerance = 'lots' in the ini file: the verify tolerance*"),
    ([], "", "*--laya-mode=verify needs --laya-url URL*"),
])
def test_bad_verify_settings_are_one_usage_error(pytester, args, ini, message):
    pytester.makepyfile(test_it=TEST_DECIDE)
    if ini:
        pytester.makeini(f"[pytest]\n{ini}\n")
    result = run(pytester, "--laya-mode=verify", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_requests_the_test_no_longer_makes_or_never_recorded_are_drift(pytester, fake):
    pytester.makepyfile(test_it=TEST_DECIDE)
    record(pytester, fake)
    pytester.makepyfile(test_it=TEST_DECIDE.replace("Refund me.", "Refund me now."))
    result = verify(pytester, fake)
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines([
        "*interaction 1 POST /v1/systemone: the test no longer sends this request*",
        "*request POST /v1/systemone: the cassette has no recorded interaction for this request*",
    ])


def test_a_test_without_a_cassette_fails_and_says_how_to_record_it(pytester, fake):
    pytester.makepyfile(test_it=TEST_DECIDE)
    result = verify(pytester, fake)
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*verify: there is no cassette at cassettes/test_it/test_refund.yaml to verify*"
                                 "record it: pytest 'test_it.py::test_refund' --laya-record*"])
    assert not (pytester.path / "cassettes").exists()


def test_the_json_report_lists_every_interaction(pytester, fake):
    pytester.makepyfile(test_it=TEST_DECIDE)
    record(pytester, fake)
    report = pytester.path / "laya.json"
    verify(pytester, fake, f"--laya-report={report}").assert_outcomes(passed=1)
    [result] = json.loads(report.read_text())["verify"]
    assert result["cassette"] == "cassettes/test_it/test_refund.yaml" and not result["drifted"]
    assert [(i["number"], i["request"], i["matches"]) for i in result["interactions"]] == [(1, "POST /v1/systemone", True)]


def test_verify_runs_under_xdist_and_the_controller_reports(pytester, fake):
    pytest.importorskip("xdist")
    pytester.makepyfile(test_it=TEST_DECIDE + TEST_DECIDE.replace("def test_refund", "def test_again"))
    record_two = run(pytester, "--laya-record", f"--laya-url={fake.url}", f"--laya-api-key={CANARY}", "--laya-spec=target")
    record_two.assert_outcomes(passed=2)
    with FakeLayaServer(api_key=CANARY, revision="fake-1") as changed:
        result = verify(pytester, changed, "-n", "2", *WITHOUT_UNUSED_PLUGINS)
    result.stdout.fnmatch_lines(["verify: 2 cassettes, 0 of 2 interactions match, 2 cassettes drifted*"])


# -- the comparison ---------------------------------------------------------------------------

def response(status=200, headers=None, body=b'{"answers": {"q": {"noul": 0.5}}}', message="OK"):
    return {"status": {"code": status, "message": message},
            "headers": headers if headers is not None else {"content-type": ["application/json"], "content-length": ["33"]},
            "body": {"string": body}}


def test_an_identical_response_has_no_differences():
    assert compare_responses(response(), response()) == []


def test_content_length_follows_the_body_and_is_not_compared():
    drifted = response(body=b'{"answers": {"q": {"noul": 0.50001}}}', headers={"content-type": ["application/json"],
                                                                               "content-length": ["37"]})
    assert compare_responses(response(), drifted) == []


def test_every_kind_of_difference_is_named():
    live = response(503, {"content-type": ["application/json"], "retry-after": ["1"]},
                    b'{"answers": {"q": {"noul": 0.6}}, "extra": true}', "Service Unavailable")
    assert compare_responses(response(), live) == [
        "status (recorded 200 OK, now 503 Service Unavailable)",
        "header retry-after (recorded absent, now '1')",
        "body at /answers/q/noul (recorded 0.5, now 0.6: differs by 0.1, more than 0.0001)",
        "body at /extra (recorded absent, now true)",
    ]


def test_types_and_non_json_bodies_compare_exactly():
    assert compare_responses(response(body=b'{"a": 1}'), response(body=b'{"a": true}')) == [
        "body at /a (recorded 1, now true)"]
    assert compare_responses(response(body=b'{"a": 1}'), response(body=b'{"a": 1.0}')) == []
    assert compare_responses(response(body=b"backend unavailable\n"), response(body=b"backend timed out\n")) == [
        'body (recorded "backend unavailable\\n", now "backend timed out\\n")']


# -- /health: what the server happens to hold is not what it is -----------------------------------
# Recorded from laya-serve 0.4.15 (LayaServeProcess on the tiny checkpoint): a fresh server, and
# one that answered a decision routed to "english" and then one naming "multilingual". It loads a
# checkpoint on first use and holds a few, so these members follow the requests served before.
HEALTH_FRESH = (b'{"status":"ok","loaded":["tiny"],"revisions":{"tiny":null},"device":"cpu",'
                b'"device_is_preference":false,"checkpoint_devices":{"tiny":"cpu"},'
                b'"cpu_fallbacks":{"tiny":{"count":0,"last_reason":null}}}')
HEALTH_AFTER_LOADS = (b'{"status":"ok","loaded":["english","multilingual"],"revisions":{"english":null,'
                      b'"multilingual":null},"device":"cpu","device_is_preference":false,"checkpoint_devices":'
                      b'{"english":"cpu","multilingual":"cpu"},"cpu_fallbacks":{"english":{"count":0,"last_reason":null},'
                      b'"multilingual":{"count":0,"last_reason":null}}}')


def health_compared(recorded: bytes, live: bytes) -> list[str]:
    return compare_responses(response(body=recorded), response(body=live), path="/health")


def test_health_members_that_follow_what_the_server_loaded_are_not_drift():
    assert health_compared(HEALTH_FRESH, HEALTH_AFTER_LOADS) == []
    # On any other path the same bodies differ: only /health has volatile members.
    assert compare_responses(response(body=HEALTH_FRESH), response(body=HEALTH_AFTER_LOADS))


@pytest.mark.parametrize("live, difference", [
    (HEALTH_FRESH.replace(b'"status":"ok"', b'"status":"degraded"'), 'body at /status (recorded "ok", now "degraded")'),
    (HEALTH_FRESH.replace(b'"device":"cpu"', b'"device":"cuda"'), 'body at /device (recorded "cpu", now "cuda")'),
    # A model both documents list: its revision and device are the server's, and compared.
    (HEALTH_FRESH.replace(b'"revisions":{"tiny":null}', b'"revisions":{"tiny":"abc123"}'),
     'body at /revisions/tiny (recorded null, now "abc123")'),
    (HEALTH_FRESH.replace(b'"checkpoint_devices":{"tiny":"cpu"}', b'"checkpoint_devices":{"tiny":"cuda:0"}'),
     'body at /checkpoint_devices/tiny (recorded "cpu", now "cuda:0")'),
    # A member's kind, or the member itself, changing is a different server, not a different load.
    (HEALTH_FRESH.replace(b'"loaded":["tiny"]', b'"loaded":"tiny"'), 'body at /loaded (recorded ["tiny"], now "tiny")'),
    (HEALTH_FRESH.replace(b'"loaded":["tiny"],', b''), 'body at /loaded (recorded ["tiny"], now absent)'),
])
def test_what_the_server_is_in_health_is_still_compared(live, difference):
    assert health_compared(HEALTH_FRESH, live) == [difference]


@pytest.fixture(scope="module")
def real_laya_serve():
    pytest.importorskip("laya", reason="needs the reference extra (laya[serve])")
    from pytest_laya.servers.laya_serve import LayaServeProcess
    from pytest_laya_reference.tiny_checkpoint import embedded_checkpoint_dir

    with LayaServeProcess(embedded_checkpoint_dir()) as server:
        yield server


def test_verify_against_laya_serve_that_loaded_other_models_since_the_recording_is_no_drift(pytester, real_laya_serve):
    # laya-serve's answers carry no served_by, so the client reads /health after each: the
    # cassette holds a /health of whatever the server had loaded at that moment.
    pytester.makepyfile(test_it=TEST_DECIDE)
    result = run(pytester, "--laya-record", f"--laya-url={real_laya_serve.url}")
    result.assert_outcomes(passed=1)
    [cassette] = (pytester.path / "cassettes").rglob("*.yaml")
    [recorded] = [json.loads(i["response"]["body"]["string"])["loaded"]
                  for i in yaml.safe_load(cassette.read_text())["interactions"] if i["request"]["uri"].endswith("/health")]
    # Another client of the server, between the recording and verify; then the test's own
    # (default-routed) decision, as verify will send it.
    for model in ("multilingual", None):
        httpx.post(real_laya_serve.url + "/v1/systemone", timeout=60, json={
            "state": "I was charged twice. Refund me.", **({"model": model} if model else {}),
            "questions": {"q": {"type": "noul", "instructions": "Is it fine?"}}})
    now = httpx.get(real_laya_serve.url + "/health", timeout=10).json()["loaded"]
    assert now != recorded, f"the server's load must differ from the recording's ({recorded}) for this test"
    result = run(pytester, "--laya-mode=verify", f"--laya-url={real_laya_serve.url}")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["verify: 1 cassette, 2 of 2 interactions match, 0 cassettes drifted*"])


def test_the_cassette_count_of_a_verify_run_on_workers_is_every_cassette_checked(pytester, fake):
    pytester.makepyfile(test_it=TEST_DECIDE, test_other=TEST_DECIDE)
    run(pytester, "--laya-record", f"--laya-url={fake.url}", f"--laya-api-key={CANARY}").assert_outcomes(passed=2)
    result = run(pytester, *WITHOUT_UNUSED_PLUGINS, "-n", "2", "--laya-mode=verify", f"--laya-url={fake.url}",
                 f"--laya-api-key={CANARY}")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*cassettes: 2 verified against the live server (below);*",
                                 "verify: 2 cassettes, 2 of 2 interactions match, 0 cassettes drifted*"])

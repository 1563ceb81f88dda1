"""The pytest plugin, run with pytester: modes, cassettes, validation, usage errors, summary."""

from __future__ import annotations

import json

import httpcore  # noqa: F401
import httpx  # noqa: F401
import pytest
import vcr  # noqa: F401
import vcr.stubs.httpx_stubs  # noqa: F401
import yaml

from pytest_laya.fake import FakeLayaServer
from pytest_laya.faults import Handler, Respond, ScriptedServer
from tests.helpers.pytester_runs import CANARY, TEST_DECIDE, WITHOUT_UNUSED_PLUGINS, run

# pytester's in-process runs drop modules first imported inside them; importing the network
# stack here keeps one copy of each class, so exceptions map the same in every inner run.

pytest_plugins = ["pytester"]


@pytest.fixture
def laya_serve_like():
    # A live server in laya-serve 0.4.15's shape: what the current spec describes.
    with FakeLayaServer(flavor="laya-serve-0.4.15", api_key=CANARY) as server:
        yield server


def test_fake_mode_answers_and_summarises(pytester):
    pytester.makepyfile(test_it=TEST_DECIDE)
    result = run(pytester, "--laya-mode=fake", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*pytest-laya*", "mode: fake; servers: fake http://127.0.0.1:* (target spec)",
                                 "*target*operations 1/1*"])


def test_record_then_replay_without_a_server(pytester, laya_serve_like):
    pytester.makepyfile(test_it=TEST_DECIDE)
    recorded = run(pytester, "--laya-record", f"--laya-url={laya_serve_like.url}", f"--laya-api-key={CANARY}")
    recorded.assert_outcomes(passed=1)
    recorded.stdout.fnmatch_lines(["*cassettes: 1 recorded;*"])
    [cassette] = (pytester.path / "cassettes").rglob("*.yaml")
    text = cassette.read_text()
    assert CANARY not in text and "interactions" in text
    served = len(laya_serve_like.requests)
    replayed = run(pytester)
    replayed.assert_outcomes(passed=1)
    replayed.stdout.fnmatch_lines(["*cassettes: 1 played;*"])
    assert len(laya_serve_like.requests) == served  # replay never reached the server


def test_replay_without_a_cassette_says_how_to_record(pytester):
    pytester.makepyfile(test_it=TEST_DECIDE)
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*no cassette*--laya-record*"])


def test_a_test_that_fails_while_recording_keeps_the_old_cassette(pytester, laya_serve_like):
    pytester.makepyfile(test_it=TEST_DECIDE)
    run(pytester, "--laya-record", f"--laya-url={laya_serve_like.url}", f"--laya-api-key={CANARY}").assert_outcomes(passed=1)
    [cassette] = (pytester.path / "cassettes").rglob("*.yaml")
    before = cassette.read_bytes()
    pytester.makepyfile(test_it=TEST_DECIDE.replace('"Does the customer ask for a refund?"', '"Changed?"') + "    assert False\n")
    result = run(pytester, "--laya-record", f"--laya-url={laya_serve_like.url}", f"--laya-api-key={CANARY}")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*cassettes: 1 kept (test failed; the old file stays)*", "*old cassette was kept as it was*"])
    assert cassette.read_bytes() == before


def test_a_response_that_breaks_its_spec_fails_the_test(pytester, laya_serve_like):
    # laya-serve's shape held to the target spec: no X-Request-Id, no served_by.
    pytester.makepyfile(test_it=TEST_DECIDE)
    result = run(pytester, "--laya-mode=live", f"--laya-url={laya_serve_like.url}", f"--laya-api-key={CANARY}",
                 "--laya-spec=target")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*SpecViolationError*POST /v1/systemone -> 200 breaks the target spec*",
                                 "*/headers/x-request-id: expected header X-Request-Id (required), got absent*"])
    assert CANARY not in result.stdout.str()


def test_live_mode_conforms_to_the_current_spec_and_writes_a_report(pytester, laya_serve_like):
    pytester.makepyfile(test_it=TEST_DECIDE)
    report = pytester.path / "out" / "laya.json"
    result = run(pytester, "--laya-mode=live", f"--laya-url={laya_serve_like.url}", f"--laya-api-key={CANARY}",
                 f"--laya-report={report}")
    result.assert_outcomes(passed=1)
    data = json.loads(report.read_text())
    assert data["mode"] == "live"
    rows = {row["spec"]: row for row in data["conformance"]}
    assert rows["current"]["violations"] == 0 and rows["target"]["violations"] > 0
    assert CANARY not in report.read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--laya-mode=live"], "*--laya-mode=live needs --laya-url URL*"),
        (["--laya-mode=live", "--laya-url=http://127.0.0.1:9"], "*--laya-url http://127.0.0.1:9 cannot be reached*"),
        (["--laya-mode=live", "--laya-url=localhost:8000"], "ERROR: --laya-url must be an http(s) URL*"),
        (["--laya-mode=live", "--laya-url=http://127.0.0.1:8000/v1/systemone"],
         "ERROR: --laya-url must be * got 'http://127.0.0.1:8000/v1/systemone': it ends in /v1/systemone, which the "
         "client adds itself: drop it and give the server's base URL"),
        (["--laya-record", "--laya-mode=fake"], "*--laya-record asks for record mode, but --laya-mode=fake*"),
    ],
)
def test_bad_configuration_is_one_usage_error(pytester, args, message):
    pytester.makepyfile(test_it=TEST_DECIDE)
    result = run(pytester, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


@pytest.mark.parametrize(("url", "message"), [
    ("localhost:8000", "ERROR: LAYA_SERVED_URL must be an http(s) URL such as http://127.0.0.1:8000, got 'localhost:8000'"),
    ("http://127.0.0.1:9", "ERROR: LAYA_SERVED_URL http://127.0.0.1:9 cannot be reached (connection_refused)*"),
])
def test_a_bad_laya_served_url_is_named_as_the_variable_it_came_from(pytester, monkeypatch, url, message):
    monkeypatch.setenv("LAYA_SERVED_URL", url)
    pytester.makepyfile(test_it=TEST_DECIDE)
    result = run(pytester, "--laya-mode=live")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "--laya-url" not in result.stderr.str()


def test_ini_keys_apply_and_the_command_line_wins(pytester):
    pytester.makeini("[pytest]\nlaya_mode = fake\n")
    pytester.makepyfile(test_it=TEST_DECIDE)
    run(pytester).stdout.fnmatch_lines(["mode: fake*"])
    pytester.makeini("[pytest]\nlaya_mode = nonsense\n")
    bad = run(pytester)
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*laya_mode = 'nonsense' in the ini file*"])


def test_marker_typos_fail_loudly(pytester):
    pytester.makepyfile(test_it="""
import pytest

@pytest.mark.laya(sever="fake")
def test_x(laya_client):
    pass
""")
    result = run(pytester, "--laya-mode=fake")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: test_it.py::test_x: @pytest.mark.laya has no option 'sever'; use cassette, server, strict, answers, caught_errors, "
                                 "block_network"])


def test_marker_picks_the_fake_server_in_any_mode(pytester):
    pytester.makepyfile(test_it="""
import pytest

@pytest.mark.laya(server="fake")
def test_x(laya_client, laya_server):
    assert laya_server.kind == "fake"
    assert laya_client.decide("s", {"q": {"type": "noul", "instructions": "?"}})["q"].p >= 0
""")
    run(pytester).assert_outcomes(passed=1)


def test_the_fake_fixture_scripts_faults(pytester):
    pytester.makepyfile(test_it="""
import pytest
from pytest_laya import ServedLayaClient, LayaCallError

def test_overload_is_retried(laya_fake_server):
    laya_fake_server.status(503, retry_after=0)
    with ServedLayaClient(laya_fake_server.url) as client:
        assert client.decide("s", {"q": {"type": "noul", "instructions": "?"}})["q"].p >= 0

def test_garbage_is_an_error(laya_fake_server):
    laya_fake_server.garbage_body()
    with ServedLayaClient(laya_fake_server.url) as client:
        with pytest.raises(LayaCallError):
            client.decide("s", {"q": {"type": "noul", "instructions": "?"}})
""")
    run(pytester).assert_outcomes(passed=2)


def test_fixtures_are_documented(pytester):
    pytester.makepyfile(test_it="def test_x(): pass\n")
    result = run(pytester, "--fixtures")
    for name in ("laya_client", "async_laya_client", "laya_model", "laya_server", "laya_fake_server", "laya_reference_server", "laya_cassette"):
        result.stdout.fnmatch_lines([f"{name}*"])


# -- unused cassettes ------------------------------------------------------------------------

TEST_TWO = TEST_DECIDE + """

import pytest

@pytest.mark.parametrize("state", ["a", "b"])
def test_each(laya_client, state):
    assert laya_client.decide(state, {"q": {"type": "noul", "instructions": "?"}})["q"].p >= 0
"""


def record(pytester, server, *args):
    result = run(pytester, "--laya-record", f"--laya-url={server.url}", f"--laya-api-key={CANARY}", *args)
    assert result.ret == 0, result.stdout.str()
    return result


def stale(pytester, *relpaths, source="cassettes/test_it/test_refund.yaml"):
    """Copies of a real cassette where no test will look: what a renamed or deleted test leaves."""
    text = (pytester.path / source).read_bytes()
    for relpath in relpaths:
        target = pytester.path / relpath
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(text)


def unused_of(report):
    return json.loads(report.read_text())["unused_cassettes"]


def test_unused_cassettes_are_reported_after_the_whole_suite_and_never_fail_it(pytester, laya_serve_like):
    pytester.makepyfile(test_it=TEST_TWO)
    record(pytester, laya_serve_like)
    stale(pytester, "cassettes/test_it/test_renamed.yaml", "cassettes/test_deleted_module/test_x.yaml")
    # Not pytest-laya's (no metadata.pytest_laya): pytest-recording's or a hand-made vcrpy cassette.
    (pytester.path / "cassettes/test_it/test_plain_vcr.yaml").write_text("interactions: []\nversion: 1\n")
    (pytester.path / "cassettes/test_it/.test_refund.yaml.abc.tmp").write_text("half written")
    report = pytester.path / "laya.json"
    result = run(pytester, f"--laya-report={report}")
    assert result.ret == 0
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines([
        "unused cassettes: 2 (delete them or run the tests that own them)",
        "  cassettes/test_deleted_module/test_x.yaml",
        "  cassettes/test_it/test_renamed.yaml",
    ])
    assert unused_of(report) == ["cassettes/test_deleted_module/test_x.yaml", "cassettes/test_it/test_renamed.yaml"]
    # The rootdir given as the one path is still the whole suite.
    run(pytester, str(pytester.path)).stdout.fnmatch_lines(["unused cassettes: 2 *"])


@pytest.mark.parametrize(
    "args",
    [
        ["-k", "refund"],
        ["-m", "not slow"],
        ["test_it.py::test_refund"],
        ["test_it.py"],
        ["--deselect", "test_it.py::test_each[b]"],
        ["-x"],  # stopped by the failing test before the others ran
        ["--continue-on-collection-errors"],  # a module that cannot be collected
        ["-p", "interrupt"],  # Ctrl-C in the middle of the run
        ["--collect-only"],
        ["--fixtures"],
    ],
    ids=["keyword", "markexpr", "node-id", "file", "deselected-parametrisation", "stopped-early", "collection-error",
         "interrupted", "collect-only", "fixtures"],
)
def test_a_partial_run_never_reports_unused_cassettes(pytester, laya_serve_like, args):
    pytester.makepyfile(test_it=TEST_TWO)
    record(pytester, laya_serve_like)
    stale(pytester, "cassettes/test_it/test_renamed.yaml")
    if "-x" in args:
        pytester.makepyfile(test_aaa_fails="def test_fails():\n    assert False\n")
    if "--continue-on-collection-errors" in args:
        pytester.makepyfile(test_broken="import no_such_module_anywhere\n")
    if "interrupt" in args:
        pytester.makepyfile(interrupt="def pytest_runtest_call(item):\n    if 'each[a]' in item.nodeid:\n"
                                      "        raise KeyboardInterrupt\n")
        pytester.syspathinsert()
    report = pytester.path / "laya.json"
    result = pytester.runpytest("-p", "no:asyncio", "-p", "no:cacheprovider", f"--laya-report={report}", *args,
                                no_reraise_ctrlc=True)
    assert "unused cassettes" not in result.stdout.str()
    assert unused_of(report) is None
    if "-x" in args:  # a failing test alone does not stop the check: stopping early does
        run(pytester, f"--laya-report={report}").assert_outcomes(passed=3, failed=1)
        assert unused_of(report) == ["cassettes/test_it/test_renamed.yaml"]


def test_cassettes_of_skipped_tests_and_modules_are_not_unused(pytester, laya_serve_like):
    pytester.makepyfile(test_it=TEST_TWO, test_later=TEST_DECIDE)
    record(pytester, laya_serve_like)
    pytester.makepyfile(test_it="import pytest\n" + TEST_TWO.replace("def test_refund", "@pytest.mark.skip('not today')\ndef test_refund"),
                        test_later="import pytest\npytest.skip('the whole module', allow_module_level=True)\n" + TEST_DECIDE)
    report = pytester.path / "laya.json"
    result = run(pytester, f"--laya-report={report}", "-rs")
    result.assert_outcomes(passed=2, skipped=2)
    assert unused_of(report) == []
    assert "unused cassettes" not in result.stdout.str()


def test_unused_cassettes_in_a_configured_cassette_dir_and_testpaths(pytester, laya_serve_like):
    pytester.makeini("[pytest]\ntestpaths = tests\nlaya_cassette_dir = recorded\n")
    pytester.mkdir("tests")
    (pytester.path / "tests" / "test_it.py").write_text(TEST_DECIDE)
    record(pytester, laya_serve_like)
    # One directory for every module: the module's path is kept, so same-named modules never meet.
    assert (pytester.path / "recorded/tests/test_it/test_refund.yaml").is_file()
    stale(pytester, "recorded/tests/test_it/test_old.yaml", source="recorded/tests/test_it/test_refund.yaml")
    report = pytester.path / "laya.json"
    for args in ([], ["tests"]):  # the configured testpaths, or no paths: the whole suite
        run(pytester, f"--laya-report={report}", *args).assert_outcomes(passed=1)
        assert unused_of(report) == ["recorded/tests/test_it/test_old.yaml"]
    run(pytester, f"--laya-report={report}", "tests/test_it.py").assert_outcomes(passed=1)
    assert unused_of(report) is None


def test_unused_cassettes_are_not_computed_where_cassettes_are_not_used(pytester, laya_serve_like):
    pytester.makepyfile(test_it=TEST_DECIDE)
    record(pytester, laya_serve_like)
    stale(pytester, "cassettes/test_it/test_renamed.yaml")
    report = pytester.path / "laya.json"
    run(pytester, "--laya-mode=fake", f"--laya-report={report}").assert_outcomes(passed=1)
    assert unused_of(report) is None


# -- provenance --------------------------------------------------------------------------

def cassette_data(path):
    import yaml

    return yaml.safe_load(path.read_text())


def test_recording_writes_where_the_cassette_came_from(pytester):
    pytester.makepyfile(test_it=TEST_DECIDE + TEST_DECIDE.replace("def test_refund", "def test_again"))
    with FakeLayaServer(flavor="target", model="tiny-laya", revision="r42") as target:
        run(pytester, "--laya-record", f"--laya-url={target.url}", "--laya-spec=target").assert_outcomes(passed=2)
        health_reads = [r for r in target.requests if r.path == "/health"]
    data = cassette_data(pytester.path / "cassettes/test_it/test_refund.yaml")
    meta = data["metadata"]["pytest_laya"]
    assert meta["server"] == "tiny-laya" and meta["spec"] == "target"  # the weights that answered, not "live"
    assert meta["identity"] == {"checkpoint": "tiny-laya", "revision": "r42", "device": "cpu",
                                "weights_dtype": "float32", "compiled": False, "source": "served_by"}
    # Only what the server says: nothing of the recording machine (its installed laya, its paths).
    assert set(meta) == {"format", "server", "spec", "identity", "recorded"}
    # The identity read is not part of the cassette; there is one per session (plus the start-up check).
    assert [i["request"]["uri"] for i in data["interactions"]] == ["http://laya.invalid/v1/systemone"]
    assert len(health_reads) == 2
    assert cassette_data(pytester.path / "cassettes/test_it/test_again.yaml")["metadata"]["pytest_laya"]["identity"] == meta["identity"]
    # Replay reads nothing from any server (and holds the responses to the spec they were recorded under).
    run(pytester, "--laya-spec=target").assert_outcomes(passed=2)


def test_recording_laya_serve_names_its_revision_from_health(pytester, laya_serve_like):
    pytester.makepyfile(test_it=TEST_DECIDE)
    record(pytester, laya_serve_like)
    meta = cassette_data(pytester.path / "cassettes/test_it/test_refund.yaml")["metadata"]["pytest_laya"]
    assert meta["identity"] == {"checkpoint": "fake-laya", "revision": "fake-0", "device": "cpu", "source": "health"}
    assert CANARY not in json.dumps(meta)


def test_an_unreadable_identity_never_fails_the_test(pytester):
    pytester.makepyfile(test_it=TEST_DECIDE)
    with FakeLayaServer(flavor="laya-serve-0.4.15") as server:
        # The start-up reachability check and the session's one /health read get garbage.
        server.garbage_body(status=500).garbage_body(status=500)
        run(pytester, "--laya-record", f"--laya-url={server.url}").assert_outcomes(passed=1)
    meta = cassette_data(pytester.path / "cassettes/test_it/test_refund.yaml")["metadata"]["pytest_laya"]
    assert meta["server"] == "fake-laya"
    # No /health document: the weights are named as far as the recorded responses name them.
    assert meta["identity"] == {"checkpoint": "fake-laya", "source": "routing"}


def test_replay_holds_responses_to_the_spec_their_cassette_was_recorded_under(pytester):
    pytester.makepyfile(test_it=TEST_DECIDE)
    with FakeLayaServer() as target_server:  # speaks the target spec
        record(pytester, target_server, "--laya-spec=target")
    replayed = run(pytester, "-v")
    replayed.assert_outcomes(passed=1)
    replayed.stdout.fnmatch_lines(["mode: replay; servers: replay of fake-laya (target spec)"])
    # The command line still wins over the recorded spec (and the target's answers meet the current spec too).
    held_to_current = run(pytester, "--laya-spec=current", "-v")
    held_to_current.assert_outcomes(passed=1)
    held_to_current.stdout.fnmatch_lines(["mode: replay; servers: replay of fake-laya (current spec)"])


def unnamed_weights(server_name: str) -> ScriptedServer:
    """A Jev server that names no weights (no routing, no /health) and sends `Server: server_name`."""
    from pytest_laya.fake import FakeLaya

    laya = FakeLaya(flavor="laya-serve-0.4.15")

    def answer(request):
        if request.path != "/v1/systemone":
            return Respond(404, {"detail": "Not Found"}, headers={"Server": server_name})
        status, headers, body = laya.answer(json.loads(request.body))
        body.pop("routing", None)
        return Respond(status, body, headers={**headers, "Server": server_name})

    return ScriptedServer(default=Handler(answer))


def test_a_server_that_names_no_weights_is_named_by_its_server_header(pytester):
    pytester.makepyfile(test_it=TEST_DECIDE)
    with unnamed_weights("acme-jev/2.1") as server:
        run(pytester, "--laya-record", f"--laya-url={server.url}").assert_outcomes(passed=1)
    meta = cassette_data(pytester.path / "cassettes/test_it/test_refund.yaml")["metadata"]["pytest_laya"]
    assert meta["server"] == "acme-jev/2.1" and "identity" not in meta
    run(pytester, "-v").stdout.fnmatch_lines(["mode: replay; servers: replay of acme-jev/2.1 (current spec)"])


def test_a_server_that_names_nothing_is_named_by_its_url_without_credentials(pytester):
    pytester.makepyfile(test_it=TEST_DECIDE)
    # An empty Server header names nothing (ScriptedServer adds its own name otherwise).
    with unnamed_weights("") as server:
        secret_url = server.url.replace("http://", "http://bob:hunter2-canary@")
        run(pytester, "--laya-record", f"--laya-url={secret_url}").assert_outcomes(passed=1)
    text = (pytester.path / "cassettes/test_it/test_refund.yaml").read_text()
    meta = cassette_data(pytester.path / "cassettes/test_it/test_refund.yaml")["metadata"]["pytest_laya"]
    assert meta["server"] == server.url.replace("http://", "http://***@") and "identity" not in meta
    assert "hunter2-canary" not in text and "bob" not in text


def test_a_replayed_response_that_breaks_the_spec_names_its_cassette(pytester, laya_serve_like):
    pytester.makepyfile(test_it=TEST_DECIDE)
    record(pytester, laya_serve_like)
    path = pytester.path / "cassettes/test_it/test_refund.yaml"
    data = cassette_data(path)
    [decided] = [i for i in data["interactions"] if i["request"]["method"] == "POST"]
    body = json.loads(decided["response"]["body"]["string"])
    body["answers"]["refund"]["noul"] = 1.5  # a hand edit no server would send
    decided["response"]["body"]["string"] = json.dumps(body)
    path.write_text(yaml.safe_dump(data))
    replayed = run(pytester)
    replayed.assert_outcomes(failed=1)
    replayed.stdout.fnmatch_lines(["*SpecViolationError*breaks the current spec*",
                                   "*replayed from the cassette *test_refund.yaml: record it again with --laya-record*"])


def test_two_tests_cannot_share_a_cassette(pytester, laya_serve_like):
    shared = TEST_DECIDE.replace("def test_refund", "import pytest\n\n@pytest.mark.laya(cassette='shared.yaml')\ndef test_refund")
    pytester.makepyfile(test_it=shared + shared.replace("def test_refund", "def test_refund_again").replace("import pytest\n", ""))
    result = run(pytester, "--laya-record", f"--laya-url={laya_serve_like.url}", f"--laya-api-key={CANARY}")
    result.assert_outcomes(errors=2)  # both, before either records: no test keeps half the file
    result.stdout.fnmatch_lines(["*test_it.py::test_refund and test_it.py::test_refund_again both use the cassette "
                                 "*shared.yaml*Give each test its own cassette*"])
    assert not (pytester.path / "cassettes" / "shared.yaml").exists()


# -- async -------------------------------------------------------------------------------

TEST_ASYNC = """
async def test_refund_async(async_laya_client):
    decision = await async_laya_client.decide("I was charged twice. Refund me.", {
        "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
    })
    assert 0 <= decision["refund"].p <= 1
"""


def run_async(pytester, *args):
    return pytester.runpytest("-p", "asyncio", "-p", "no:cacheprovider", *args)


def test_async_client_in_fake_and_replay_mode(pytester, laya_serve_like):
    pytester.makeini("[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_it=TEST_ASYNC)
    run_async(pytester, "--laya-mode=fake").assert_outcomes(passed=1)
    recorded = run_async(pytester, "--laya-record", f"--laya-url={laya_serve_like.url}", f"--laya-api-key={CANARY}")
    recorded.assert_outcomes(passed=1)
    served = len(laya_serve_like.requests)
    replayed = run_async(pytester)
    replayed.assert_outcomes(passed=1)
    replayed.stdout.fnmatch_lines(["*cassettes: 1 played;*"])
    assert len(laya_serve_like.requests) == served


def test_async_client_in_pytest_asyncio_strict_mode(pytester):
    pytester.makeini("[pytest]\nasyncio_mode = strict\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_it="import pytest\n\npytestmark = pytest.mark.asyncio\n" + TEST_ASYNC)
    run_async(pytester, "--laya-mode=fake").assert_outcomes(passed=1)


def test_async_client_under_anyio_without_pytest_asyncio(pytester):
    pytester.makepyfile(test_it="import pytest\n\npytestmark = pytest.mark.anyio\n\n"
                        "@pytest.fixture\ndef anyio_backend():\n    return 'asyncio'\n" + TEST_ASYNC)
    run(pytester, "--laya-mode=fake").assert_outcomes(passed=1)


# -- strict and non-strict replay --------------------------------------------------------

TEST_TWICE = """
import pytest

def test_twice(laya_client):
    for state in ("first", "second"):
        assert laya_client.decide(state, {"q": {"type": "noul", "instructions": "?"}})["q"].p >= 0
"""


def test_unplayed_interactions_fail_strict_replay_only(pytester, laya_serve_like):
    pytester.makepyfile(test_it=TEST_TWICE)
    record(pytester, laya_serve_like)
    pytester.makepyfile(test_it=TEST_TWICE.replace('("first", "second")', '("first",)'))
    strict = run(pytester)
    strict.assert_outcomes(failed=1)  # the test fails, once, not its teardown
    strict.stdout.fnmatch_lines(["*CassetteUnplayed*1 of * recorded interactions in *test_twice.yaml were never played: "
                                 "POST /v1/systemone *second*--laya-record; or, if they may go unplayed, mark the "
                                 "test @pytest.mark.laya(strict=False) (--no-laya-strict for the whole run;*"])
    run(pytester, "--laya-strict").assert_outcomes(failed=1)
    run(pytester, "--no-laya-strict").assert_outcomes(passed=1)
    pytester.makeini("[pytest]\nlaya_strict = false\n")
    run(pytester).assert_outcomes(passed=1)
    run(pytester, "--laya-strict").assert_outcomes(failed=1)  # the command line wins
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_it=TEST_TWICE.replace('("first", "second")', '("first",)')
                        .replace("def test_twice", "@pytest.mark.laya(strict=False)\ndef test_twice"))
    run(pytester).assert_outcomes(passed=1)


# -- a downstream project ------------------------------------------------------------------

def test_a_project_points_the_fixtures_at_its_own_server(pytester):
    pytester.makeconftest("""
import pytest
from pytest_laya.fake import FakeLayaServer
from pytest_laya.servers import ServerHandle

@pytest.fixture(scope="session")
def our_laya():
    with FakeLayaServer(flavor="laya-serve-0.4.15", model="ours") as server:
        yield server

@pytest.fixture
def laya_server(our_laya):
    return ServerHandle(url=our_laya.url, kind="staging", spec="current")
""")
    pytester.makepyfile(test_it=TEST_DECIDE + """

def test_it_is_ours(laya_server, laya_cassette, our_laya):
    assert laya_server.url == our_laya.url and laya_cassette is None
""")
    for args in ([], ["--laya-mode=live"], ["--laya-mode=fake"]):  # live needs no --laya-url: the project chose
        result = run(pytester, *args, "-v")
        result.assert_outcomes(passed=2)
        result.stdout.fnmatch_lines(["*servers: staging http://127.0.0.1:* (current spec)",
                                     "*staging http://127.0.0.1:* current *operations 2/2*0 violations*"])
    assert not (pytester.path / "cassettes").exists()


# -- pytest-recording beside it ----------------------------------------------------------

TEST_BESIDE_VCR = TEST_DECIDE + """
import os
import urllib.request

import pytest


@pytest.mark.vcr
def test_plain_vcr():
    with urllib.request.urlopen(os.environ["PLAIN_URL"] + "/health") as response:
        assert b"ok" in response.read()
"""


def test_pytest_recording_and_pytest_laya_side_by_side(pytester, laya_serve_like, monkeypatch):
    pytest.importorskip("pytest_recording")
    monkeypatch.setenv("PLAIN_URL", laya_serve_like.url)
    pytester.makeini("[pytest]\naddopts = --strict-markers\n")
    pytester.makepyfile(test_it=TEST_BESIDE_VCR)

    def sub(*args):
        return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:asyncio", *WITHOUT_UNUSED_PLUGINS, *args)

    recorded = sub("--laya-record", f"--laya-url={laya_serve_like.url}", f"--laya-api-key={CANARY}", "--record-mode=once")
    recorded.assert_outcomes(passed=2)
    folder = pytester.path / "cassettes" / "test_it"
    assert sorted(p.name for p in folder.iterdir()) == ["test_plain_vcr.yaml", "test_refund.yaml"]
    served = len(laya_serve_like.requests)
    report = pytester.path / "laya.json"
    replayed = sub(f"--laya-report={report}")  # pytest-laya replays, pytest-recording's default mode is none
    replayed.assert_outcomes(passed=2)
    replayed.stdout.fnmatch_lines(["*cassettes: 1 played;*"])
    assert len(laya_serve_like.requests) == served
    assert unused_of(report) == []  # pytest-recording's cassette is not pytest-laya's to call unused
    # Listing runs no test: in process (the runs above are subprocesses, both plugins patching).
    listed = run(pytester, "--fixtures")
    for name in ("vcr_config", "vcr ", "laya_cassette", "laya_client"):
        listed.stdout.fnmatch_lines([f"{name}*"])
    markers = run(pytester, "--markers")
    for name in ("vcr:", "laya("):
        markers.stdout.fnmatch_lines([f"@pytest.mark.{name}*"])


TEST_VCR_FIRST = """
import os
import urllib.request

import pytest


@pytest.mark.vcr
@pytest.mark.laya(cassette="refund_laya")
def test_refund_beside_vcr(laya_client):
    with urllib.request.urlopen(os.environ["PLAIN_URL"] + "/health") as response:
        assert b"ok" in response.read()
    decision = laya_client.decide("I was charged twice.", {"refund": {"type": "noul", "instructions": "Refund?"}})
    assert 0 <= decision["refund"].p <= 1
"""


def test_the_kits_health_read_never_reaches_a_pytest_recording_cassette(pytester, laya_serve_like, monkeypatch):
    # The first Laya test of a recording run is marked @pytest.mark.vcr: the kit reads the live
    # server's /health as the route opens, while pytest-recording's cassette is already in place.
    # That read (with the API key in its Authorization header) must not land in that cassette.
    pytest.importorskip("pytest_recording")
    with FakeLayaServer() as plain:
        monkeypatch.setenv("PLAIN_URL", plain.url)
        pytester.makepyfile(test_it=TEST_VCR_FIRST)
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:asyncio", *WITHOUT_UNUSED_PLUGINS,
                                               "--laya-record", f"--laya-url={laya_serve_like.url}",
                                               f"--laya-api-key={CANARY}", "--record-mode=once")
    result.assert_outcomes(passed=1)
    vcr_file = pytester.path / "cassettes" / "test_it" / "test_refund_beside_vcr.yaml"
    assert CANARY not in vcr_file.read_text()
    assert [i["request"]["uri"] for i in cassette_data(vcr_file)["interactions"]] == [plain.url + "/health"]
    laya_file = pytester.path / "cassettes" / "refund_laya.yaml"
    assert CANARY not in laya_file.read_text()
    assert cassette_data(laya_file)["metadata"]["pytest_laya"]["identity"]  # the /health read still happened


def test_one_test_cannot_give_both_plugins_the_same_cassette(pytester, laya_serve_like, monkeypatch):
    pytest.importorskip("pytest_recording")
    monkeypatch.setenv("PLAIN_URL", laya_serve_like.url)
    pytester.makepyfile(test_it=TEST_DECIDE.replace("def test_refund", "import pytest\n\n@pytest.mark.vcr\ndef test_refund"))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:asyncio", *WITHOUT_UNUSED_PLUGINS)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*test_refund is marked @pytest.mark.vcr and uses a pytest-laya cassette: both would "
                                 "use *test_refund.yaml*@pytest.mark.laya(cassette=...)*"])


def test_laya_model_is_a_decision_model_in_every_mode(pytester, laya_serve_like):
    pytester.makeini("[pytest]\nasyncio_mode = auto\n")
    pytester.makepyfile(test_it="""
from pytest_laya.models import DecisionModel

QUESTIONS = {"refund": {"type": "noul", "instructions": "Refund?"}}

def test_sync(laya_model):
    assert isinstance(laya_model, DecisionModel)
    decision = laya_model.decide("I was charged twice.", QUESTIONS)
    assert laya_model.model == decision.model and decision["refund"].p >= 0
    laya_model.close(); laya_model.close()

async def test_async_agrees(laya_model):
    sync = laya_model.decide("I was charged twice.", QUESTIONS)
    assert (await laya_model.adecide("I was charged twice.", QUESTIONS)).answers == sync.answers
""")
    fake = pytester.runpytest_subprocess("-p", "asyncio", *WITHOUT_UNUSED_PLUGINS, "--laya-mode=fake")
    fake.assert_outcomes(passed=2)


def test_a_violation_by_a_server_that_claims_no_spec_says_so_in_a_sentence(pytester):
    from pytest_laya.faults import Respond, ScriptedServer

    pytester.makepyfile(test_it="def test_x(laya_client):\n    laya_client.health()\n")
    with ScriptedServer(default=Respond(200, {"status": 7})) as server:
        result = run(pytester, "--laya-mode=live", f"--laya-url={server.url}")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*The current spec applies because the server claims none, with no Laya-Spec header "
                                 "and no \"spec\" in /health; pass --laya-spec target*"])

"""Cassettes someone edited, cut, booby-trapped or broke, and recording from parallel workers.

A cassette is a file in the user's repository that anyone can edit, so the kit must treat it as
input: a hand-edited file that is no longer YAML, a YAML tag that would run code, a file cut off
mid-write, an alias bomb, and a response that breaks the spec must each give ONE clear error
naming the file, and nothing in the file may run (every booby trap would create a sentinel
file). This is checked through `pytest_laya.cassettes.use_cassette` and through the plugin.
Recording from pytest-xdist workers into one cassette directory must lose no interaction and
leave no file half-written.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from pytest_laya import ServedLayaClient
from pytest_laya.cassettes import CassetteError, use_cassette
from pytest_laya.fake import FakeLayaServer

pytest_plugins = ["pytester"]

STATE = "I was charged twice for my order."
QUESTIONS = {"refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"}}
# Each booby trap runs `touch SENTINEL` if anything ever executes it.
TRAPS = {
    "apply-os-system": "!!python/object/apply:os.system ['touch {sentinel}']",
    "new-os-system": "!!python/object/new:os.system ['touch {sentinel}']",
    "apply-subprocess": "!!python/object/apply:subprocess.check_call [['touch', '{sentinel}']]",
    "name-os-system": "!!python/name:os.system",
    "module-os": "!!python/module:os",
    "apply-eval": "!!python/object/apply:builtins.eval [\"open('{sentinel}', 'w')\"]",
}


def decide(url: str = "http://127.0.0.1:1"):
    with ServedLayaClient(url) as client:
        return client.decide(STATE, QUESTIONS)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> str:
    """The text of a real cassette: one decision recorded from the fake (target flavor)."""
    path = tmp_path_factory.mktemp("recorded") / "good.yaml"
    with FakeLayaServer() as server, use_cassette(path, record=True, provenance={"server": "fake", "spec": "target"}):
        decide(server.url)
    return path.read_text()


def _trapped(text: str, trap: str, where: str) -> str:
    if where == "header":
        return text.replace("      x-request-id:\n      - recorded\n    method: POST",
                            f"      x-request-id:\n      - {trap}\n    method: POST", 1)
    if where == "body":
        return text.replace("    body:\n      string: ", f"    body:\n      string: {trap}\n      was: ", 1)
    if where == "top":
        return text.replace("version: 1\n", f"extra: {trap}\nversion: 1\n")
    raise AssertionError(where)


def _billion_laughs(text: str) -> str:
    """Nine levels of nine aliases: 387 million strings if anything expands it."""
    anchors = "laughs0: &l0 [" + ", ".join(['"lol"'] * 9) + "]\n"
    anchors += "".join(f"laughs{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]\n" for i in range(1, 9))
    head, _, rest = text.partition("interactions:\n")
    bombed = rest.replace("      string: ", "      string: *l8\n      was: ", 1)
    return head + anchors + "interactions:\n" + bombed


def _hand_edited(text: str) -> str:
    # Someone edited the request in an editor that indented one line with a tab.
    return text.replace("    method: POST\n", "\tmethod: POST\n", 1)


def _cut(text: str, fraction: float) -> str:
    return text[: int(len(text) * fraction)]


CORRUPTIONS = {
    "hand-edited-invalid-yaml": (_hand_edited, "is not valid YAML"),
    "truncated-a-quarter": (lambda t: _cut(t, 0.25), "cassette"),
    "truncated-mid-line": (lambda t: _cut(t, 0.5), "cassette"),
    "truncated-before-version": (lambda t: t.replace("version: 1\n", ""), "has no 'version' key"),
    "billion-laughs": (_billion_laughs, "cassette"),
}


def _assert_one_clear_error(error: BaseException, path: Path, needle: str) -> None:
    assert isinstance(error, CassetteError), repr(error)
    message = str(error)
    assert error.path == path and message.count(str(path)) == 1, message
    assert needle in message, message
    assert len(message) < 2000, "one clear error, not a dump"


# -- through use_cassette --------------------------------------------------------------------

@pytest.mark.parametrize("trap", TRAPS, ids=list(TRAPS))
@pytest.mark.parametrize("where", ["header", "body", "top"])
def test_a_code_executing_tag_is_refused_and_never_runs(recorded, tmp_path, trap, where):
    sentinel = tmp_path / "SENTINEL"
    path = tmp_path / "trapped.yaml"
    path.write_text(_trapped(recorded, TRAPS[trap].format(sentinel=sentinel), where))
    with pytest.raises(CassetteError) as caught:
        with use_cassette(path, record=False):
            decide()
    _assert_one_clear_error(caught.value, path, "nothing in it ran")
    assert TRAPS[trap].split()[0] in str(caught.value)
    assert not sentinel.exists()


@pytest.mark.parametrize("corruption", CORRUPTIONS, ids=list(CORRUPTIONS))
def test_a_broken_cassette_is_one_clear_error_naming_the_file(recorded, tmp_path, corruption):
    corrupt, needle = CORRUPTIONS[corruption]
    path = tmp_path / "broken.yaml"
    path.write_text(corrupt(recorded))
    started = time.monotonic()
    with pytest.raises(CassetteError) as caught:
        with use_cassette(path, record=False):
            decide()
    assert time.monotonic() - started < 10, "a hostile cassette must not hang the run"
    _assert_one_clear_error(caught.value, path, needle)


def test_every_byte_cut_of_a_cassette_is_refused(recorded, tmp_path):
    # tests/cassettes/test_cassettes.py cuts at every line; a crash mid-write can stop at any byte.
    path = tmp_path / "cut.yaml"
    for size in range(0, len(recorded), max(1, len(recorded) // 60)):
        path.write_text(recorded[:size])
        with pytest.raises(CassetteError) as caught:
            with use_cassette(path, record=False):
                decide()
        assert caught.value.path == path, size


def test_recording_over_a_booby_trapped_cassette_never_reads_it(recorded, tmp_path):
    sentinel = tmp_path / "SENTINEL"
    path = tmp_path / "trapped.yaml"
    path.write_text(_trapped(recorded, TRAPS["apply-os-system"].format(sentinel=sentinel), "top"))
    with FakeLayaServer() as server, use_cassette(path, record=True) as cassette:
        decide(server.url)
    assert cassette.outcome == "written" and not sentinel.exists()
    assert "python/object" not in path.read_text()


# -- through the plugin ----------------------------------------------------------------------

TEST_FILE = f"""
def test_refund(laya_client):
    decision = laya_client.decide({STATE!r}, {QUESTIONS!r})
    assert 0 <= decision["refund"].p <= 1
"""


def _plugin_project(pytester, recorded: str) -> Path:
    pytester.makepyfile(test_it=TEST_FILE)
    cassette = pytester.path / "cassettes" / "test_it" / "test_refund.yaml"
    cassette.parent.mkdir(parents=True)
    cassette.write_text(recorded)
    return cassette


def _replay(pytester):
    return pytester.runpytest("-p", "no:asyncio", "-p", "no:cacheprovider", "--laya-spec=target")


def test_the_plugin_replays_the_good_cassette(pytester, recorded):
    _plugin_project(pytester, recorded)
    _replay(pytester).assert_outcomes(passed=1)


@pytest.mark.parametrize("damage", ["hand-edited-invalid-yaml", "truncated-mid-line", "apply-os-system",
                                    "apply-subprocess"])
def test_the_plugin_reports_a_broken_cassette_once_naming_it(pytester, recorded, damage):
    sentinel = pytester.path / "SENTINEL"
    cassette = _plugin_project(pytester, recorded)
    if damage in TRAPS:
        cassette.write_text(_trapped(recorded, TRAPS[damage].format(sentinel=sentinel), "body"))
    else:
        cassette.write_text(CORRUPTIONS[damage][0](recorded))
    result = _replay(pytester)
    result.assert_outcomes(errors=1)  # the laya_cassette fixture refuses the file: a setup error
    output = result.stdout.str()
    summary = [line for line in output.splitlines() if line.startswith(("FAILED", "ERROR"))]
    assert len(summary) == 1 and summary[0].startswith("ERROR test_it.py::test_refund - ") and \
        "CassetteError: cassette" in summary[0], summary
    error_lines = [line for line in output.splitlines() if line.startswith("E ") and "CassetteError" in line]
    assert len(error_lines) == 1 and "cassettes/test_it/test_refund.yaml" in error_lines[0], error_lines
    assert not sentinel.exists()


def test_the_plugin_fails_a_cassette_whose_response_breaks_the_spec(pytester, recorded):
    cassette = _plugin_project(pytester, recorded)
    data = yaml.safe_load(recorded)
    response = data["interactions"][0]["response"]
    answer = json.loads(response["body"]["string"])
    answer["answers"]["refund"]["noul"] = 1.5  # a probability above 1: well-formed, but not a served Laya
    response["body"]["string"] = json.dumps(answer)
    response["headers"]["content-length"] = [str(len(response["body"]["string"]))]
    cassette.write_text(yaml.safe_dump(data))
    result = _replay(pytester)
    result.assert_outcomes(failed=1)
    output = result.stdout.str()
    violations = [line for line in output.splitlines() if line.startswith("E ") and "breaks the target spec" in line]
    assert len(violations) == 1, violations
    assert "/body/answers/refund/noul: expected <= 1, got 1.5" in output
    # The spec error does not name the cassette yet: reported against pytest_laya/plugin.py's
    # spec observer (the fixtures hold the CassetteHandle and could pass its path in).


# -- recording from parallel workers -----------------------------------------------------------

PARALLEL_MODULE = """
import pytest

@pytest.mark.parametrize("n", range(8))
def test_decide(laya_client, n):
    for question in ("Is it urgent?", "Is it a refund?"):
        state = "{module} case " + str(n)
        assert 0 <= laya_client.decide(state, {{"q": {{"type": "noul", "instructions": question}}}})["q"].p <= 1
"""


def test_recording_from_parallel_workers_loses_no_interaction(pytester):
    # Two workers: the box these tests run on has two cores (-n 4 took 20 s here, -n 2 12 s).
    pytest.importorskip("xdist")
    modules = ("test_alpha", "test_beta", "test_gamma")
    for name in modules:
        pytester.makepyfile(**{name: PARALLEL_MODULE.format(module=name)})
    shared = pytester.path / "shared-cassettes"
    common = ("-p", "no:cacheprovider", "-p", "no:asyncio", "-n", "2", f"--laya-cassette-dir={shared}",
              "--laya-spec=target")
    with FakeLayaServer() as server:
        recorded = pytester.runpytest_subprocess(*common, "--laya-record", f"--laya-url={server.url}")
        recorded.assert_outcomes(passed=24)
        assert sum(1 for r in server.requests if r.method == "POST") == 48
    files = sorted(shared.rglob("*"))
    assert [f for f in files if f.is_file() and f.suffix != ".yaml"] == [], "temporary files were left behind"
    cassettes = [f for f in files if f.suffix == ".yaml"]
    assert len(cassettes) == 24
    for path in cassettes:
        module = path.parent.name
        n = path.stem.split("[")[1].rstrip("]")
        data = yaml.safe_load(path.read_text())
        assert data["version"] == 1
        states = [json.loads(i["request"]["body"])["state"] for i in data["interactions"]]
        assert states == [f"{module} case {n}"] * 2, (path, states)  # its own two, nobody else's
    # The server is gone: strict replay on two workers plays every interaction of every file.
    replayed = pytester.runpytest_subprocess(*common)
    replayed.assert_outcomes(passed=24)
    replayed.stdout.fnmatch_lines(["cassettes: 24 played"])

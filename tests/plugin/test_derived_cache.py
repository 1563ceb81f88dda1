"""Replay keeps what it derives from a cassette file in pytest's cache, across processes (issue 36).

The parsed file, its scrubbed and indexed interactions, and both specs' verdicts on its exchanges
are kept under ``.pytest_cache/d/pytest-laya/derived/``, keyed by the file's bytes: a later run
reads them instead of parsing and judging again, an edited cassette is read afresh, a corrupt
entry is written again, and ``-p no:cacheprovider`` keeps nothing. Each run is its own process:
what one process remembers in memory must not stand in for the cache.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_laya.cassettes import yaml_loader
from pytest_laya.fake import FakeLayaServer
from tests.helpers.pytester_runs import WITHOUT_UNUSED_PLUGINS, run
from tests.plugin.test_answer_rules_in_plugin import CASSETTE, OWN_HTTPX, edit_answer

pytest_plugins = ["pytester"]

# With a file named ``no-parsing`` in the project, the inner run may neither parse a cassette's
# YAML nor judge an exchange: it passes only if both came from the cache.
CONFTEST = """
import pytest

from pytest_laya.cassettes import direct_reader, yaml_loader
from pytest_laya.specs import conformance
from pytest_laya.specs.spec import Spec


def _forbidden(*args, **kwargs):
    raise AssertionError("parsed or judged again: the derived cache was not read")


def pytest_configure(config):
    if (config.rootpath / "no-parsing").exists():
        yaml_loader.load = direct_reader.read = _forbidden
        Spec.judge = _forbidden
    log = config.rootpath / "judged-by"
    if log.exists():  # each spec an exchange is judged by, one line each
        real = conformance._judged_by

        def judged_by(name, exchange, headers):
            with open(log, "a") as f:
                f.write(name + "\\n")
            return real(name, exchange, headers)

        conformance._judged_by = judged_by
"""


def replay(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:asyncio", *WITHOUT_UNUSED_PLUGINS, "-v", *args)


def entries(pytester: pytest.Pytester) -> list[Path]:
    """The derived entries the runs kept (their notes of the files they read left out)."""
    folder = pytester.path / ".pytest_cache" / "d" / "pytest-laya" / "derived"
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix != ".seen") if folder.exists() else []


@pytest.fixture
def recorded(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_it=OWN_HTTPX)
    pytester.makeconftest(CONFTEST)
    with FakeLayaServer() as fake:
        run(pytester, "--laya-record", "--laya-url", fake.url).assert_outcomes(passed=1)
    return pytester


def conformance(result: pytest.RunResult) -> list[str]:
    return [line for line in result.outlines if "target" in line or "current" in line]


def test_a_one_off_run_keeps_nothing_a_second_keeps_the_entry_and_a_third_reads_it(recorded):
    replay(recorded).assert_outcomes(passed=1)
    assert entries(recorded) == []  # a CI job from a clean checkout writes no entry
    first = replay(recorded)
    first.assert_outcomes(passed=1)
    kinds = sorted(p.suffix for p in entries(recorded))
    assert kinds == [".pack"]  # one file for the run: the cassette's head, its interactions and their verdicts
    (recorded.path / "no-parsing").touch()
    second = replay(recorded)
    second.assert_outcomes(passed=1)
    assert conformance(second) == conformance(first)  # the same table, from the kept verdicts
    assert conformance(first)


def test_a_quiet_run_keeps_the_claimed_specs_verdicts_and_a_run_showing_the_table_both(recorded):
    """A run that shows no conformance table judges each response by its claimed spec alone, a
    first run writing the cache included; a run showing the table keeps both specs' verdicts beside."""
    claimed = yaml_loader.load(recorded.path.joinpath(*CASSETTE).read_text())["metadata"]["pytest_laya"]["spec"]
    log = recorded.path / "judged-by"
    log.touch()
    quiet = ("-p", "no:asyncio", *WITHOUT_UNUSED_PLUGINS)
    recorded.runpytest_subprocess(*quiet).assert_outcomes(passed=1)  # the file's first run: noted
    log.write_text("")
    recorded.runpytest_subprocess(*quiet).assert_outcomes(passed=1)
    assert log.read_text().split() == [claimed]  # the run writing the cache: one spec, once
    (recorded.path / "no-parsing").touch()
    log.write_text("")
    recorded.runpytest_subprocess(*quiet).assert_outcomes(passed=1)  # its verdict read back
    (recorded.path / "no-parsing").unlink()
    table = replay(recorded)  # -v: the table reads both specs
    table.assert_outcomes(passed=1)
    assert sorted(log.read_text().split()) == ["current", "target"]
    assert sum("operations" in line for line in conformance(table)) == 2  # a row for each spec
    (recorded.path / "no-parsing").touch()
    log.write_text("")
    assert conformance(replay(recorded)) == conformance(table)  # both kept, beside the quiet run's
    recorded.runpytest_subprocess(*quiet).assert_outcomes(passed=1)
    assert log.read_text() == ""


def test_an_edited_cassette_is_read_and_judged_again(recorded):
    replay(recorded).assert_outcomes(passed=1)
    edit_answer(recorded.path.joinpath(*CASSETTE), choice="billing", probabilities={"billing": 0.8, "tech": 0.8})
    result = replay(recorded)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*rule probabilities-sum: expected a sum of 1 within 0.02, got 1.6000*"])


def test_an_edited_cassette_fails_again_in_a_later_run_from_the_kept_verdicts(recorded):
    replay(recorded).assert_outcomes(passed=1)  # the unedited file's entries: stale once it is edited
    edit_answer(recorded.path.joinpath(*CASSETTE), choice="billing", probabilities={"billing": 0.8, "tech": 0.8})
    replay(recorded).assert_outcomes(failed=1)  # the edited file's first run: noted
    replay(recorded).assert_outcomes(failed=1)  # its entry kept, with the verdict
    (recorded.path / "no-parsing").touch()
    result = replay(recorded)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*rule probabilities-sum: expected a sum of 1 within 0.02, got 1.6000*"])


KIT_CLIENT = """
QUESTIONS = {"team": {"type": "choice", "instructions": "Which team?", "criteria": ["billing", "tech"]}}


def test_team(laya_client):
    for _ in range(2):  # each call with its own request id and trace, echoed into the replayed answer
        assert laya_client.decide("I was charged twice. Refund me.", QUESTIONS)["team"].key in ("billing", "tech")
"""


def test_the_kit_clients_decisions_each_with_its_own_ids_are_judged_from_the_kept_verdicts(pytester):
    pytester.makepyfile(test_it=KIT_CLIENT)
    pytester.makeconftest(CONFTEST)
    with FakeLayaServer() as fake:
        run(pytester, "--laya-record", "--laya-url", fake.url).assert_outcomes(passed=1)
    replay(pytester).assert_outcomes(passed=1)  # noted
    first = replay(pytester)
    first.assert_outcomes(passed=1)
    (pytester.path / "no-parsing").touch()  # judging again would fail the run
    second = replay(pytester)
    second.assert_outcomes(passed=1)
    assert conformance(second) == conformance(first)
    assert conformance(first)


def test_a_corrupt_or_foreign_entry_is_ignored_and_written_again(recorded):
    replay(recorded).assert_outcomes(passed=1)
    replay(recorded).assert_outcomes(passed=1)
    kept = entries(recorded)
    assert kept
    for number, entry in enumerate(kept):
        entry.write_bytes(b"not an entry" if number % 2 else entry.read_bytes()[:-7])
    replay(recorded).assert_outcomes(passed=1)
    (recorded.path / "no-parsing").touch()
    replay(recorded).assert_outcomes(passed=1)  # each entry was written again, whole
    again = entries(recorded)
    assert len(again) == 1 and again != kept  # in a new pack; the damaged one removed


def kept_at_all(pytester: pytest.Pytester) -> list[Path]:
    """Every file in the derived cache's folder, the runs' notes included."""
    folder = pytester.path / ".pytest_cache" / "d" / "pytest-laya" / "derived"
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def test_without_the_cache_provider_nothing_is_kept(recorded):
    for _ in range(2):
        replay(recorded, "-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert kept_at_all(recorded) == []


def test_a_run_with_an_api_key_keeps_nothing(recorded):
    for _ in range(2):  # not even a note that the file was read
        replay(recorded, "--laya-api-key", "sk-derived-cache-canary-7781").assert_outcomes(passed=1)
    assert kept_at_all(recorded) == []

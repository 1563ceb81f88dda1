"""`Mode` and `RecordMode`: each question the code asks about a mode is answered by the type, so a
new mode is one member and its rows in `pytest_laya/route/modes.py`, and nothing else compares
a mode with a string."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from pytest_laya.plugin.options import MODES, RECORD_MODES, SPECS
from pytest_laya.route.modes import Mode, RecordMode, RouteKind
from pytest_laya.wire.spec_name import SpecName

KIT = Path(__file__).resolve().parents[2] / "pytest_laya"

TRAITS = {  # mode: (needs_url, uses_cassette_file, records, replays, reads_cassettes, accounts_cassettes)
    "replay": (False, True, False, True, True, True),
    "record": (True, True, True, False, False, True),
    "live": (True, False, False, False, False, False),
    "fake": (False, False, False, False, False, False),
    "verify": (True, True, False, False, True, False),
}


@pytest.mark.parametrize("name", sorted(TRAITS))
def test_each_mode_answers_what_the_plugin_asks(name):
    mode = Mode(name)
    assert (mode.needs_url, mode.uses_cassette_file, mode.records, mode.replays, mode.reads_cassettes,
            mode.accounts_cassettes) == TRAITS[name]
    assert mode.fakes is (name == "fake") and mode.verifies is (name == "verify")


def test_every_mode_is_described_and_offered_on_the_command_line():
    assert set(TRAITS) == set(Mode.values()) == set(MODES)
    assert RECORD_MODES == ("all", "missing", "new_episodes") and SPECS == ("auto", "current", "target")


def test_a_mode_is_its_string_where_settings_were_strings():
    assert Mode.REPLAY == "replay" and f"--laya-mode={Mode.VERIFY}" == "--laya-mode=verify"
    assert str(RecordMode.MISSING) == "missing" and "%s" % SpecName.TARGET == "target"
    assert json.dumps({"mode": Mode.RECORD}) == '{"mode": "record"}'
    assert type(Mode.LIVE.value) is str  # what goes into YAML and through execnet


RECORD_TRAITS = {  # record mode: (replays_recorded, appends, reads_recorded, vcr_record_mode)
    "all": (False, False, False, "all"),
    "missing": (True, False, True, "all"),
    "new_episodes": (False, True, True, "new_episodes"),
}


@pytest.mark.parametrize("name", sorted(RECORD_TRAITS))
def test_each_record_mode_answers_what_the_plugin_and_the_cassette_ask(name):
    mode = RecordMode(name)
    assert (mode.replays_recorded, mode.appends, mode.reads_recorded, mode.vcr_record_mode) == RECORD_TRAITS[name]


def test_record_modes_say_what_they_do_and_how_they_are_asked_for():
    assert set(RECORD_TRAITS) == set(RecordMode.values())
    assert [mode.flag for mode in RecordMode] == ["--laya-record", "--laya-record=missing",
                                                  "--laya-record=new_episodes"]
    assert RecordMode.parse("missing") is RecordMode.MISSING and RecordMode.parse("new_episodes").appends


def test_a_bad_record_mode_says_what_to_pass_naming_every_record_mode():
    with pytest.raises(ValueError) as caught:
        RecordMode.parse("tests/x.py")
    assert str(caught.value) == (
        "'tests/x.py' is not a record mode: use one of --laya-record (refresh every selected test), "
        "--laya-record=missing (record only tests without a cassette), --laya-record=new_episodes (keep each "
        "cassette and append the requests it lacks); put test paths before --laya-record")


def test_spec_names_tell_a_document_from_auto():
    assert [name.is_document for name in SpecName] == [False, True, True]
    assert SpecName.document("target") is SpecName.TARGET and SpecName.document("current") is SpecName.CURRENT
    assert [SpecName.document(value) for value in ("auto", None, "TARGET", 3, "")] == [None] * 5


def _string_comparisons(path: Path) -> list[str]:
    """`x.mode == "..."`, `x.spec in ("current", "target")` and the like in one module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        names = [side.attr for side in sides if isinstance(side, ast.Attribute)] + [
            side.id for side in sides if isinstance(side, ast.Name)]
        words = {elt.value for side in sides for elt in ([side] if isinstance(side, ast.Constant) else
                 getattr(side, "elts", [])) if isinstance(elt, ast.Constant) and isinstance(elt.value, str)}
        asked = {"mode", "record_mode"} & set(names)
        if (asked and words & set(Mode.values()) | words & set(RecordMode.values())) or \
                {"current", "target"} <= words:
            found.append(f"{path.relative_to(KIT.parent)}:{node.lineno}")
    return found


def test_no_module_compares_a_mode_or_a_spec_name_with_strings():
    """A new mode or record mode is one place: the kit asks the types, never repeats their words."""
    found = [hit for path in sorted(KIT.rglob("*.py")) for hit in _string_comparisons(path)]
    assert found == []


ROUTE_TRAITS = {  # kind: (replays, records, verifies, captures, uses_cassette_file, finishes_cassette)
    "replay": (True, False, False, False, True, True),
    "record": (False, True, False, False, True, True),
    "capture": (False, False, False, True, False, False),
    "verify": (False, False, True, True, True, False),
}


@pytest.mark.parametrize("name", sorted(ROUTE_TRAITS))
def test_each_route_kind_answers_what_the_route_asks(name):
    kind = RouteKind(name)
    assert (kind.replays, kind.records, kind.verifies, kind.captures, kind.uses_cassette_file,
            kind.finishes_cassette) == ROUTE_TRAITS[name]
    assert set(ROUTE_TRAITS) == set(RouteKind.values())

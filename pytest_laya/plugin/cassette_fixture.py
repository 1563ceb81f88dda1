"""Which cassette file a test uses, and that it is the only test using it.

The file is named from the test's whole node id (`pytest_laya.cassettes.naming`), beside the test
module by default or under ``--laya-cassette-dir``; ``@pytest.mark.laya(cassette=...)`` names it
instead, inside the cassette directory. Two tests may not share a file: recording would keep
one test's interactions and lose the other's, replay would leave one test's unplayed. Sharing
is found when the tests are collected (`find_shared_cassettes`), where every pytest-xdist
worker sees every test, so each of those tests is an error before it runs, naming all of them
and the file, and nothing is written to it. A file pytest-recording's ``vcr`` marker would also
use is refused.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_laya.cassettes.naming import CASSETTE_SUFFIX, cassette_relpath, confined
from pytest_laya.plugin.markers import marker_options
from pytest_laya.plugin.run import LayaRun
from pytest_laya.route.modes import RecordMode

__all__ = ["broken_cassette", "cassette_file", "cassette_files", "cassette_location", "claim_cassette",
           "find_shared_cassettes", "plays_recorded", "pytest_recording_clash", "recording_into", "replays_recorded",
           "cassette_of", "uses_a_cassette"]

#: Test node id -> (the cassette file, every collected test that would use it, in collection order, and
#: why they meet: "marker" (cassette=), "name" (their names), "case" (names that differ only in case)),
#: for the tests that share a file with another.
SHARED = pytest.StashKey[dict[str, tuple[Path, tuple[str, ...], str]]]()
#: A test's cassette file, once worked out (`cassette_of`).
CASSETTE = pytest.StashKey[Path]()


def cassette_location(node: pytest.Item, run: LayaRun) -> tuple[Path, Path]:
    """(cassette directory, path relative to it) of a test's cassette."""
    options = marker_options(node)
    directory = run.cassette_dir or Path(node.path).parent / "cassettes"
    named = options.get("cassette")
    if named:
        if not isinstance(named, str):
            raise pytest.UsageError(f"{node.nodeid}: @pytest.mark.laya(cassette=...) takes a file name, got {named!r}")
        try:
            confined(directory, named, where=f"{node.nodeid}: @pytest.mark.laya")
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
        return directory, Path(named)
    return directory, Path(cassette_relpath(node.nodeid, shared=run.cassette_dir is not None))


def cassette_of(item: pytest.Item, run: LayaRun) -> Path:
    """The file a test's cassette is (`cassette_location`, `cassette_file`), worked out once per test."""
    path = item.stash.get(CASSETTE, None)
    if path is None:
        path = item.stash[CASSETTE] = cassette_file(*cassette_location(item, run))
    return path


def cassette_file(directory: Path, relpath: Path) -> Path:
    """The file a cassette at `relpath` in `directory` is (``.yaml`` added as `laya_vcr` adds it)."""
    full = str(directory / relpath)
    # Absolute, but no link resolved: a cassette that is a link is known by the link's path.
    return Path(os.path.abspath(full if full.endswith(CASSETTE_SUFFIX) else full + CASSETTE_SUFFIX))


def broken_cassette(path: Path) -> str | None:
    """Why the cassette at `path` cannot be replayed (broken, not a regular file, too big), or None
    when it can or there is none: recording replaces a broken one."""
    from pytest_laya.cassettes.errors import CassetteError
    from pytest_laya.cassettes.persist import read_cassette

    try:
        read_cassette(path)
    except CassetteError as exc:
        text = str(exc)
        shown = f"cassette {path} "
        return (text.split(shown, 1)[1] if shown in text else text).split(". To fix it", 1)[0]
    return None


def replays_recorded(run: LayaRun, path: Path) -> bool:
    """Whether a record-mode test replays its cassette at `path` instead (--laya-record=missing and
    a readable file; a broken one is recorded again)."""
    return plays_recorded(run.record_mode, path)


def plays_recorded(mode: RecordMode | None, path: Path) -> bool:
    """Whether recording in `mode` (the plugin's --laya-record, the proxy's --record) replays the
    cassette at `path` instead: ``missing`` and a readable file."""
    return mode is not None and mode.replays_recorded and path.is_file() and broken_cassette(path) is None


def recording_into(mode: RecordMode | None, path: Path) -> bool | RecordMode:
    """How a recording in `mode` records into `path` (`laya_vcr`'s ``record``): appending to a
    readable cassette (`RecordMode.appends`), else replacing it as a whole (a broken one too)."""
    if mode is not None and mode.appends and path.is_file() and broken_cassette(path) is None:
        return mode
    return True


def pytest_recording_clash(request: pytest.FixtureRequest, ours: Path) -> None:
    """Fail a test that pytest-recording's `vcr` marker would give the very same cassette file."""
    if request.node.get_closest_marker("vcr") is None or not request.config.pluginmanager.has_plugin("recording"):
        return
    try:
        theirs = Path(request.getfixturevalue("vcr_cassette_dir")) / request.getfixturevalue("default_cassette_name")
    except pytest.FixtureLookupError:
        return
    if cassette_file(theirs.parent, Path(theirs.name)) == ours:
        pytest.fail(f"{request.node.nodeid} is marked @pytest.mark.vcr and uses a pytest-laya cassette: both would "
                    f"use {ours}. Give pytest-laya's another name with @pytest.mark.laya(cassette=...) "
                    f"(or pytest-recording's with @pytest.mark.default_cassette(...)).", pytrace=False)


def uses_a_cassette(item: pytest.Item, run: LayaRun) -> bool:
    """Whether the test will read or write a cassette file (the route `_choose` would give it)."""
    if "laya_server" not in getattr(item, "fixturenames", ()) or not run.mode.uses_cassette_file:
        return False
    return marker_options(item).get("server") != "fake"


def cassette_files(items: list[pytest.Item], run: LayaRun) -> Iterator[tuple[pytest.Item, Path]]:
    """Each collected test that will use a cassette file, with that file (a test whose marker is
    bad is left out: its setup reports it)."""
    for item in items:
        if not uses_a_cassette(item, run):
            continue
        try:
            yield item, cassette_of(item, run)
        except pytest.UsageError:
            continue


def find_shared_cassettes(config: pytest.Config, items: list[pytest.Item], run: LayaRun) -> None:
    """After collection: note every test whose cassette file another collected test uses too, or
    would use on a case-insensitive disk (macOS, Windows): names that differ only in case."""
    users: dict[str, list[pytest.Item]] = {}
    files: dict[str, set[Path]] = {}
    for item, path in cassette_files(items, run):
        key = os.path.normcase(str(path)).casefold()
        users.setdefault(key, []).append(item)
        files.setdefault(key, set()).add(path)
    shared: dict[str, tuple[Path, tuple[str, ...], str]] = {}
    for key, sharing in users.items():
        if len(sharing) < 2:
            continue
        paths = sorted(files[key])
        named = any(marker_options(item).get("cassette") for item in sharing)
        why = "case" if len(paths) > 1 else "marker" if named else "name"
        for item in sharing:
            shared[item.nodeid] = (paths[0], tuple(i.nodeid for i in sharing), why)
    config.stash[SHARED] = shared


def _sharing(path: Path, nodeids: tuple[str, ...], why: str = "marker") -> str:
    two = len(nodeids) == 2
    others = "other's" if two else "others'"
    named = ", ".join(nodeids[:-1]) + f" and {nodeids[-1]}"
    if why == "case":
        return (f"{named} have cassette names that differ only in case ({path.name} and the like): on a "
                f"case-insensitive file system (macOS, Windows) they are one file, so recording would keep only "
                f"one test's interactions. {'Neither' if two else 'None of them'} ran, and nothing was written. "
                f"Give the tests ids that differ in more than case (pytest.param(..., id='...')), or name one "
                f"test's cassette with @pytest.mark.laya(cassette='another_name.yaml').")
    advice = ("drop @pytest.mark.laya(cassette=...), or name another file" if why == "marker" else
              "give the tests ids that differ (pytest.param(..., id='...')), or name one test's cassette with "
              "@pytest.mark.laya(cassette='another_name.yaml')")
    return (f"{named} {'both' if two else 'all'} use the cassette {path}: recording would keep only one test's "
            f"interactions, and replay would leave the {others} unplayed. "
            f"{'Neither' if two else 'None of them'} ran, and nothing was written to that file. Give each test "
            f"its own cassette ({advice}).")


def claim_cassette(request: pytest.FixtureRequest, run: LayaRun, path: Path) -> None:
    """Record that this test owns `path`; fail it if another collected test uses it too.

    Paths are compared as the platform compares them (`os.path.normcase`: case-folded on Windows).
    """
    run.used_cassettes.add(path)  # the test's, whatever happens to it below (never an unused file)
    shared = request.config.stash.get(SHARED, {}).get(request.node.nodeid)
    if shared is not None:
        pytest.fail(_sharing(*shared), pytrace=False)
    key = Path(os.path.normcase(str(path)))
    owner = run.cassette_owners.setdefault(key, request.node.nodeid)
    if owner != request.node.nodeid:  # not seen at collection (a test added to the session later)
        pytest.fail(_sharing(path, (owner, request.node.nodeid)), pytrace=False)

"""Which cassette file a test uses, and that it is the only test using it.

The file is named from the test's whole node id (`pytest_laya.cassettes.naming`), beside the test
module by default or under ``--laya-cassette-dir``; ``@pytest.mark.laya(cassette=...)`` names it
instead, inside the cassette directory. Two tests may not share a file (per process; across
pytest-xdist workers the controller says so), and a file pytest-recording's ``vcr`` marker would
also use is refused.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_laya.cassettes.naming import CASSETTE_SUFFIX, cassette_relpath, confined
from pytest_laya.plugin.markers import marker_options
from pytest_laya.plugin.run import LayaRun

__all__ = ["cassette_file", "cassette_location", "claim_cassette", "pytest_recording_clash"]


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


def cassette_file(directory: Path, relpath: Path) -> Path:
    """The file a cassette at `relpath` in `directory` is (``.yaml`` added as `laya_vcr` adds it)."""
    full = str(directory / relpath)
    return Path(full if full.endswith(CASSETTE_SUFFIX) else full + CASSETTE_SUFFIX).resolve()


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


def claim_cassette(request: pytest.FixtureRequest, run: LayaRun, path: Path) -> None:
    """Record that this test owns `path`; fail it if another test of this process owns it already.

    Paths are compared as the platform compares them (`os.path.normcase`: case-folded on Windows).
    """
    key = Path(os.path.normcase(str(path)))
    owner = run.cassette_owners.setdefault(key, request.node.nodeid)
    if owner != request.node.nodeid:
        pytest.fail(f"{request.node.nodeid} and {owner} both use the cassette {path}: recording would keep "
                    f"only one test's interactions, and replay would leave the other's unplayed. Give each "
                    f"test its own cassette (drop @pytest.mark.laya(cassette=...), or name another file).",
                    pytrace=False)
    run.used_cassettes.add(path)  # the test owns it, whatever happens to it below

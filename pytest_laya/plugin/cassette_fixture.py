"""What `laya_cassette` does for one test: which file, who owns it, and record or replay.

In replay nothing is sent and nothing is written; in record the file is replaced when the test
passes, and kept when it fails or never ran. Two tests may not share a file (per process), and a
file pytest-recording's ``vcr`` marker would also use is refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_laya.cassettes.naming import CASSETTE_SUFFIX
from pytest_laya.plugin.markers import marker_options
from pytest_laya.plugin.run import LayaRun

__all__ = ["FAILED", "CALLED", "cassette_file", "cassette_location", "use_test_cassette"]

#: Set on a test's stash once any of its phases failed, and once its call phase ran.
FAILED = pytest.StashKey[bool]()
CALLED = pytest.StashKey[bool]()


def cassette_location(node: pytest.Item, run: LayaRun) -> tuple[Path, Path]:
    """(cassette directory, path relative to it) of a test's cassette, as `laya_cassette` uses them."""
    from pytest_laya.cassettes.naming import cassette_relpath

    options = marker_options(node)
    directory = run.cassette_dir or Path(node.path).parent / "cassettes"
    relpath = Path(options["cassette"]) if options.get("cassette") else Path(cassette_relpath(node.nodeid))
    return directory, relpath


def cassette_file(directory: Path, relpath: Path) -> Path:
    """The file vcrpy opens for `relpath` in `directory` (``.yaml`` added as `laya_vcr` adds it)."""
    full = str(directory / relpath)
    return Path(full if full.endswith(CASSETTE_SUFFIX) else full + CASSETTE_SUFFIX).resolve()


def _pytest_recording_clash(request: pytest.FixtureRequest, ours: Path) -> None:
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


def _claim(request: pytest.FixtureRequest, run: LayaRun, path: Path) -> None:
    owner = run.cassette_owners.setdefault(path, request.node.nodeid)
    if owner != request.node.nodeid:
        pytest.fail(f"{request.node.nodeid} and {owner} both use the cassette {path}: recording would keep "
                    f"only one test's interactions, and replay would leave the other's unplayed. Give each "
                    f"test its own cassette (drop @pytest.mark.laya(cassette=...), or name another file).",
                    pytrace=False)
    run.used_cassettes.add(path)  # the test owns it, whatever happens to it below


def use_test_cassette(request: pytest.FixtureRequest, run: LayaRun, server: Any,
                      recorded_health: dict[str, Any]) -> Iterator[Any]:
    """The body of the `laya_cassette` fixture: yields the `CassetteHandle`, or None where the
    mode and server have no cassette."""
    if run.mode not in ("replay", "record", "verify") or server.kind not in ("replay", "live"):
        yield None
        return
    from pytest_laya.cassettes import laya_vcr
    from pytest_laya.cassettes.provenance import laya_version, read_health, recorded_identity

    directory, relpath = cassette_location(request.node, run)
    path = cassette_file(directory, relpath)
    _pytest_recording_clash(request, path)
    _claim(request, run, path)
    if run.mode == "verify":
        from pytest_laya.plugin.verify_mode import verify_test_cassette

        yield from verify_test_cassette(request, run, server, directory, relpath, path)
        return
    record = run.mode == "record"
    strict = marker_options(request.node).get("strict", run.strict)
    vcr = laya_vcr(record=record, cassette_dir=directory, api_key=run.api_key, strict=strict,
                   record_hint="--laya-record")
    provenance = None
    health = None
    if record:
        provenance = {"server": server.kind, "spec": server.spec, "laya_version": laya_version()}
        health = recorded_health.get(server.url)
        if health is None:  # not read yet, or it failed: once more, before the cassette is in place
            health = recorded_health[server.url] = read_health(server)
    handle = None
    try:
        with vcr.cassette(relpath, provenance=provenance) as handle:
            yield handle
            if request.node.stash.get(FAILED, False) or not request.node.stash.get(CALLED, False):
                handle.discard()  # failed, or never ran (interrupted): nothing to save or to hold it to
            elif record:
                try:
                    handle.set_provenance(identity=recorded_identity(handle, health, getattr(server, "model", None)))
                except Exception:  # noqa: BLE001 - provenance never fails a test
                    pass
    finally:
        if handle is not None:
            run.used_cassettes.add(handle.path.resolve())
            if handle.outcome:
                run.count_cassette(handle.outcome)

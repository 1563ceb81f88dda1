"""--laya-store: the cassettes the local directory lacks are fetched from the shared store into
it once the tests are collected, before any test runs (so no test's HTTP patches, nor
pytest-recording's, ever see the store's traffic); with --laya-store-write, each cassette
recorded is written to the store too, after its test's route has closed. A store that cannot be
read fails each test whose cassette it could not fetch, saying why (never a secret)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_laya.plugin.cassette_fixture import cassette_files
from pytest_laya.plugin.run import WRITTEN_OUTCOMES, LayaRun

__all__ = ["fail_unfetched", "fetch_missing", "store_recorded"]

#: Cassette files the store could not give, with why (set once the tests are collected).
UNFETCHED = pytest.StashKey[dict[Path, str]]()


def _key(run: LayaRun, path: Path, root: Path) -> str | None:
    """The store's key of a cassette: its path relative to the rootdir (None when outside it)."""
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        run.note("shared store", f"{path} is outside the rootdir {root}, so it has no key in the store")
        return None


def fetch_missing(config: pytest.Config, items: list[pytest.Item], run: LayaRun) -> None:
    """After collection: fetch every collected test's cassette the local directory lacks (replay,
    verify, --laya-record=missing). After one failed read, the other missing ones are not tried:
    each of their tests fails with the same reason."""
    if run.store is None or not run.reads_cassettes:
        return
    from pytest_laya.cassettes.persist import atomic_write
    from pytest_laya.store import StoreError

    unfetched: dict[Path, str] = {}
    failure: str | None = None
    for _, path in cassette_files(items, run):
        if path in unfetched or path.is_file():
            continue
        key = _key(run, path, config.rootpath)
        if key is None:
            continue
        if failure is not None:
            unfetched[path] = failure
            continue
        try:
            data = run.store.get(key)
        except StoreError as exc:
            failure = unfetched[path] = str(exc)
            continue
        if data is None:
            run.note("shared store", f"{key}: not in {run.store.shown} either")
            continue
        atomic_write(path, data)
        run.count_cassette("fetched")
    config.stash[UNFETCHED] = unfetched


def fail_unfetched(request: pytest.FixtureRequest, path: Path) -> None:
    """Fail the test whose cassette the store could not give (its local directory lacks it)."""
    why = request.config.stash.get(UNFETCHED, {}).get(path)
    if why is not None and not path.is_file():
        pytest.fail(f"{request.node.nodeid}: {why}", pytrace=False)


def store_recorded(request: pytest.FixtureRequest, run: LayaRun, path: Path, outcome: str | None) -> None:
    """With --laya-store-write: write a cassette just recorded, appended to, or left unchanged to the store."""
    if run.store is None or not run.store.writable or outcome not in (*WRITTEN_OUTCOMES, "unchanged") or not path.is_file():
        return
    from pytest_laya.store import StoreError

    key = _key(run, path, request.config.rootpath)
    if key is None:
        return
    try:
        run.store.put(key, path.read_bytes())
    except StoreError as exc:
        pytest.fail(f"{request.node.nodeid}: the cassette was saved in {path}, but {exc}", pytrace=False)
    run.count_cassette("stored")

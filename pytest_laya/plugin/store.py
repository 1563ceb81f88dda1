"""--laya-store: a cassette the local directory lacks is fetched from the shared store into it
before the test opens it; with --laya-store-write, each cassette recorded is written to the
store too. A store that cannot be read or written fails the test, saying why (never a secret)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_laya.plugin.run import LayaRun

__all__ = ["fetch_missing", "store_recorded"]


def _key(run: LayaRun, path: Path, root: Path) -> str | None:
    """The store's key of a cassette: its path relative to the rootdir (None when outside it)."""
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        run.note("shared store", f"{path} is outside the rootdir {root}, so it has no key in the store")
        return None


def fetch_missing(request: pytest.FixtureRequest, run: LayaRun, path: Path) -> None:
    """Fetch `path` from the store when the local directory lacks it (nothing when the store has none)."""
    if run.store is None or path.is_file():
        return
    from pytest_laya.cassettes.persist import atomic_write
    from pytest_laya.store import StoreError

    key = _key(run, path, request.config.rootpath)
    if key is None:
        return
    try:
        data = run.store.get(key)
    except StoreError as exc:
        pytest.fail(f"{request.node.nodeid}: {exc}", pytrace=False)
    if data is None:
        run.note("shared store", f"{key}: not in {run.store.shown} either")
        return
    atomic_write(path, data)
    run.count_cassette("fetched")


def store_recorded(request: pytest.FixtureRequest, run: LayaRun, path: Path, outcome: str | None) -> None:
    """With --laya-store-write: write a cassette just recorded (or re-recorded unchanged) to the store."""
    if run.store is None or not run.store.writable or outcome not in ("written", "unchanged") or not path.is_file():
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

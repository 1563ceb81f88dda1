"""Shared cassette storage through fsspec: ``s3://``, ``gs://``, ``az://``, ``memory://``, ``file://``.

Layered the way Hypothesis layers its example databases: the local cassette directory is read
first and written to; a shared store behind it is read when a cassette is missing locally (the
copy lands in the local directory), and written only when asked (``--laya-store-write``).
``python -m pytest_laya store push DIR URL`` and ``pull URL DIR`` move cassettes, one file at a
time, each atomically: an object store writes an object whole; a local directory gets a temporary
file renamed into place.

Credentials come from the engine's usual sources (for S3: ``AWS_*`` variables, ``~/.aws``, an
instance role; ``FSSPEC_*`` configuration), never from the kit, and never reach a cassette or a
message: a store is shown by its URL as `redact_url` shows every URL (user, password and query
masked), and an engine's error text is shown with any credential-looking value of the environment
replaced.

fsspec (and s3fs, gcsfs, adlfs for their schemes) are imported only when a store is opened:
``pip install 'pytest-laya[store]'``.
"""

from __future__ import annotations

import os
import posixpath
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pytest_laya.cassettes.naming import CASSETTE_SUFFIX, written_by_pytest_laya
from pytest_laya.wire.redaction import MASK
from pytest_laya.wire.urls import redact_url

__all__ = ["CassetteStore", "StoreError", "pull", "push", "local_cassettes"]

#: Environment variables whose values are never shown (an engine's error may quote one).
_SECRET_WORDS = ("SECRET", "TOKEN", "PASSWORD", "KEY", "CREDENTIAL", "SAS", "SIGNATURE")
#: Directories `push` never walks into: virtual environments, caches, VCS metadata.
_SKIPPED_DIRS = {"node_modules", "__pycache__", "site-packages"}


class StoreError(Exception):
    """A store that cannot be opened, read or written; the message says which and what to do."""


def _scrubbed(text: str, url: str) -> str:
    if url != redact_url(url):
        text = text.replace(url, redact_url(url))
    parts = urlsplit(url)
    for secret in (parts.password, parts.username):
        if secret:
            text = text.replace(secret, MASK)
    for name, value in os.environ.items():
        if len(value) >= 8 and any(word in name.upper() for word in _SECRET_WORDS):
            text = text.replace(value, MASK)
    return text


class CassetteStore:
    """A directory of cassettes in any fsspec file system; keys are ``/``-separated relative paths."""

    def __init__(self, url: str, *, writable: bool = False) -> None:
        self.url = url
        self.writable = writable
        self.shown = redact_url(url)
        self._fs: Any = None
        self._root = ""

    def _problem(self, doing: str, exc: BaseException) -> StoreError:
        detail = _scrubbed(f"{type(exc).__name__}: {exc}", self.url)
        return StoreError(f"could not {doing} the cassette store {self.shown} ({detail}); check the URL and the "
                          f"credentials the storage engine reads (for s3://: AWS_* variables or ~/.aws)")

    def _open(self) -> tuple[Any, str]:
        if self._fs is None:
            try:
                import fsspec
            except ImportError:
                raise StoreError(f"the cassette store {self.shown} needs fsspec: pip install 'pytest-laya[store]'") from None
            try:
                # A fresh file system per store: an engine's cached one may hold another endpoint.
                self._fs, self._root = fsspec.core.url_to_fs(self.url, skip_instance_cache=True)
            except ImportError as exc:
                raise StoreError(f"the cassette store {self.shown} needs a storage engine for its scheme ({exc}): "
                                 f"pip install 'pytest-laya[store]' (s3fs), gcsfs or adlfs") from None
            except Exception as exc:  # noqa: BLE001 - any engine's error, shown without credentials
                raise self._problem("open", exc) from None
            self._root = self._root.rstrip("/")
        return self._fs, self._root

    def _path(self, key: str) -> str:
        parts = key.split("/")
        if not key or key.startswith("/") or any(part in ("", ".", "..") for part in parts):
            raise StoreError(f"{key!r} is not a cassette key (a relative path such as tests/cassettes/test_a/test_b.yaml)")
        _, root = self._open()
        return posixpath.join(root, key) if root else key

    def get(self, key: str) -> bytes | None:
        """The cassette at `key`, or None when the store has none."""
        fs, _ = self._open()
        path = self._path(key)
        try:
            data: bytes = fs.cat_file(path)
        except FileNotFoundError:
            return None
        except Exception as exc:  # noqa: BLE001
            raise self._problem(f"read {key} from", exc) from None
        return data

    def put(self, key: str, data: bytes) -> None:
        """Write the cassette at `key`, atomically: readers see the old object or the new one."""
        if not self.writable:
            raise StoreError(f"the cassette store {self.shown} is read-only here: pass --laya-store-write to write to it")
        fs, _ = self._open()
        path = self._path(key)
        try:
            if _is_local(fs):
                from pytest_laya.cassettes.persist import atomic_write

                atomic_write(Path(path), data)
                return
            parent = posixpath.dirname(path)
            if parent and _needs_directories(fs):
                fs.makedirs(parent, exist_ok=True)
            if _renames_atomically(fs):
                temporary = posixpath.join(parent, f".{posixpath.basename(path)}.{uuid.uuid4().hex}.tmp")
                fs.pipe_file(temporary, data)
                fs.mv(temporary, path)
            else:
                fs.pipe_file(path, data)  # an object store writes an object whole
        except StoreError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise self._problem(f"write {key} to", exc) from None

    def keys(self) -> list[str]:
        """Every cassette key in the store (files ending in .yaml, not hidden)."""
        fs, root = self._open()
        try:
            found = fs.find(root) if root else fs.find("")
        except FileNotFoundError:
            return []
        except Exception as exc:  # noqa: BLE001
            raise self._problem("list", exc) from None
        keys = []
        for path in found:
            path = str(path)
            key = path[len(root):].lstrip("/") if root and path.startswith(root) else path.lstrip("/")
            if key.endswith(CASSETTE_SUFFIX) and not any(part.startswith(".") for part in key.split("/")):
                keys.append(key)
        return sorted(keys)


def _is_local(fs: Any) -> bool:
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return protocol in ("file", "local")


def _needs_directories(fs: Any) -> bool:
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return protocol not in ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "memory")


def _renames_atomically(fs: Any) -> bool:
    """File systems with real directories (sftp, smb, ...) rename in place; object stores do not
    need to (a PUT is atomic) and copy on "rename"."""
    return _needs_directories(fs)


def local_cassettes(directory: Path) -> Iterator[tuple[str, Path]]:
    """(key, file) of every pytest-laya cassette under `directory`, keys relative to it; hidden
    directories, virtual environments and caches are not walked."""
    for current, dirs, files in os.walk(directory):
        here = Path(current)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIPPED_DIRS
                         and not (here / d / "pyvenv.cfg").exists())
        for name in sorted(files):
            if not name.endswith(CASSETTE_SUFFIX) or name.startswith("."):
                continue
            path = here / name
            try:
                if written_by_pytest_laya(path.read_bytes()):
                    yield path.relative_to(directory).as_posix(), path
            except OSError:
                continue


def push(directory: Path, store: CassetteStore) -> list[str]:
    """Copy every pytest-laya cassette under `directory` to `store`; returns the keys written."""
    if not directory.is_dir():
        raise StoreError(f"{directory} is not a directory of cassettes")
    written = []
    for key, path in local_cassettes(directory):
        store.put(key, path.read_bytes())
        written.append(key)
    return written


def pull(store: CassetteStore, directory: Path) -> tuple[list[str], list[str]]:
    """Copy every pytest-laya cassette of `store` into `directory` (each file atomically).

    Returns (keys written, keys skipped because they are not pytest-laya cassettes).
    """
    from pytest_laya.cassettes.persist import atomic_write

    written, skipped = [], []
    for key in store.keys():
        data = store.get(key)
        if data is None:
            continue
        if not written_by_pytest_laya(data):
            skipped.append(key)
            continue
        atomic_write(directory / key, data)
        written.append(key)
    return written, skipped

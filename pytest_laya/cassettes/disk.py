"""Cassette files on disk: bounded reads of regular files only, atomic writes, and every
file-system failure as a `CassetteError` that names the file and says what to do.

A save writes a temporary file in the same directory and `os.replace`s it, so a reader sees the
old file or the new one, never a part. A read opens without blocking and refuses what is not a
regular file (a FIFO would hang, ``/dev/zero`` never ends) and what is over the size limit.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from pytest_laya.cassettes.errors import CassetteError

__all__ = ["DEFAULT_SIZE_LIMIT", "REPAIR", "KeptByFile", "atomic_write", "file_identity", "os_problem",
           "read_limited", "set_size_limit", "size_limit"]

#: What every message about a broken cassette file ends with.
REPAIR = ("To fix it, record the test again (--laya-record, or --laya-record=missing, replaces a broken file), "
          "or restore the file from version control.")
#: The largest cassette read or written unless `set_size_limit` says otherwise (a cassette of a few
#: answers is a few kB; parsing takes several times the file's size in memory).
DEFAULT_SIZE_LIMIT = 16 * 1024 * 1024
_size_limit = DEFAULT_SIZE_LIMIT


def size_limit() -> int:
    """The largest cassette, in bytes, this process reads or writes."""
    return _size_limit


def set_size_limit(limit: int) -> int:
    """Set the largest cassette this process reads or writes (the plugin's ``--laya-max-cassette-size``);
    returns the limit it replaces."""
    global _size_limit
    if limit <= 0:
        raise ValueError(f"a cassette size limit must be a positive number of bytes, got {limit}")
    previous, _size_limit = _size_limit, int(limit)
    return previous


def _megabytes(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB" if size >= 1024 * 1024 else f"{size} bytes"


def _over_limit(path: Path, size: int, doing: str) -> CassetteError:
    return CassetteError(
        f"cannot {doing} cassette {path}: it is {_megabytes(size)}, over the size limit of "
        f"{_megabytes(_size_limit)}. A test that needs a cassette this big can raise the limit "
        f"(--laya-max-cassette-size, or laya_max_cassette_size in the ini file); otherwise make the test "
        f"send fewer or smaller requests.", path=path)


_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _not_regular(path: Path, mode: int, doing: str) -> CassetteError:
    kind = next((name for test, name in _FILE_KINDS if test(mode)), "not a regular file")
    return CassetteError(f"cannot {doing} cassette {path}: it is {kind}, not a regular file. Remove it "
                         f"(a cassette is a plain YAML file), then record the test again.", path=path)


def os_problem(path: Path, exc: OSError, doing: str) -> CassetteError:
    """`exc`, met while doing something to the cassette at `path`, as a `CassetteError` that says what to do."""
    code = exc.errno
    if code == errno.ENAMETOOLONG:
        advice = (f"its name is too long for the file system ({len(path.name)} characters): give the test's "
                  f"cassette a shorter name with @pytest.mark.laya(cassette='short_name.yaml')")
    elif code in (errno.EACCES, errno.EPERM, errno.EROFS):
        advice = ("the file or its directory is read-only: make it writable, or put cassettes in a writable "
                  "directory with --laya-cassette-dir")
    elif code in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG):
        advice = "the disk (or your quota) is full: free some space and record the test again"
    elif code in (errno.ENOTDIR, errno.EEXIST) or (code == errno.ENOENT and doing == "write"):
        advice = ("a part of its path is not a directory: move that file away, or put cassettes elsewhere "
                  "with --laya-cassette-dir")
    elif code == errno.EISDIR:
        advice = "it is a directory, not a file: remove it, then record the test again"
    elif code == errno.ELOOP:
        advice = "it is a symbolic link that loops: remove the link, then record the test again"
    else:
        advice = "check the path and its permissions"
    reason = exc.strerror or str(exc)
    previous = "; the previous file is unchanged" if doing == "write" else ""
    return CassetteError(f"could not {doing} cassette {path}: {reason}{previous}. {advice[0].upper()}{advice[1:]}.",
                         path=path)


def read_limited(path: Path, doing: str = "read") -> bytes | None:
    """The bytes of the cassette at `path`, or None if there is none; a `CassetteError` for a file
    that is not a regular file (a FIFO would block, ``/dev/zero`` never ends) or is over `size_limit`."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)  # non-blocking: opening a FIFO with no writer must not hang
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise os_problem(path, exc, doing) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _not_regular(path, info.st_mode, doing)
        if info.st_size > _size_limit:
            raise _over_limit(path, info.st_size, doing)
        chunks = []
        left = _size_limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        raw = b"".join(chunks)
    except OSError as exc:
        raise os_problem(path, exc, doing) from None
    finally:
        os.close(fd)
    if len(raw) > _size_limit:  # it grew while being read
        raise _over_limit(path, len(raw), doing)
    return raw


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that a reader sees the old file or the new one, never a part.

    Every failure is a `CassetteError` naming the file and what to do; no temporary file is left.
    """
    import tempfile

    if len(data) > _size_limit:
        raise _over_limit(path, len(data), "write")
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            info = os.stat(path)
        except FileNotFoundError:
            mode = 0o644
        else:
            if not stat.S_ISREG(info.st_mode):
                raise _not_regular(path, info.st_mode, "write")
            mode = info.st_mode & 0o777
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:40]}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise os_problem(path, exc, "write") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    if hasattr(os, "O_DIRECTORY"):  # make the rename itself durable; best effort
        with contextlib.suppress(OSError):
            dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)


def file_identity(path: Path) -> tuple[int, int, int, int] | None:
    """What says a file is unchanged (inode, size, mtime, ctime); None if there is none."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise os_problem(path, exc, "read") from None
    return info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns


Identity = tuple[int, int, int, int]
V = TypeVar("V")


class KeptByFile(Generic[V]):
    """What was worked out from a file, kept by path for the last `size` files while the file is
    what it was when it was read (`file_identity`: inode, size, mtime and ctime in ns); any write,
    or an atomic replace, reads it again. Bounded, so memory stays flat over a run of any length."""

    def __init__(self, size: int = 16) -> None:
        self.size = size
        self._items: collections.OrderedDict[str, tuple[Identity, V]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def get(self, path: Path, identity: Identity) -> V | None:
        key = str(path)
        with self._lock:
            cached = self._items.get(key)
            if cached is None or cached[0] != identity:
                return None
            self._items.move_to_end(key)
            return cached[1]

    def read(self, path: Path, make: Callable[[], V | None]) -> V | None:
        """What `make()` works out from the file at `path`, kept while the file is unchanged; None
        when there is no file, or when `make` gives None (not kept)."""
        identity = file_identity(path)
        if identity is None:
            return None
        cached = self.get(path, identity)
        if cached is not None:
            return cached
        value = make()
        if value is not None:
            self.keep(path, identity, value)
        return value

    def take(self, path: Path) -> V | None:
        """What is kept for `path` while the file is unchanged, no longer kept: the caller's own."""
        identity = file_identity(path)
        with self._lock:
            cached = self._items.pop(str(path), None)
        return cached[1] if cached is not None and identity is not None and cached[0] == identity else None

    def forget(self, path: Path) -> None:
        """Drop what is kept for `path` (its reader keeps what it needs of it)."""
        with self._lock:
            self._items.pop(str(path), None)

    def keep(self, path: Path, identity: Identity, value: V) -> None:
        """Keep `value` for `path`, if the file is still the one `identity` names: one that changed
        while it was read is read again next time."""
        try:
            unchanged = file_identity(path) == identity
        except CassetteError:
            return
        if unchanged:
            key = str(path)
            with self._lock:
                self._items[key] = (identity, value)
                self._items.move_to_end(key)
                while len(self._items) > self.size:
                    self._items.popitem(last=False)

"""What replay derives from a cassette file, kept across processes (as Python keeps ``.pyc`` files).

Parsing a cassette's YAML, then scrubbing and indexing its interactions, costs more than playing
them. Under the plugin, with pytest's cache directory (``config.cache``; none under
``-p no:cacheprovider``), both results are kept in ``.pytest_cache/d/pytest-laya/derived/``: one
entry per cassette file, its head (its top level but the interactions) and, by variant, the
interactions as replay holds them. Content-addressed: an entry is found by the SHA-256 of the
file's bytes, in packs made by the kit's code (the source of the modules that derive and judge
it, so a new version or an edit in place counts) and the Python version; a variant's key is the
scrubbing configuration and what layers above add (`Extra`: the specs' text, for their
verdicts). An edited cassette or spec, another configuration or another kit never reads a stale
entry.

Entries are written in packs: the entries a process keeps are held until it stops using the
folder (`use`, which the plugin calls when its run ends), then written as one ``.pack`` file,
through a temporary file moved into place (``os.replace``), so a reader never meets one half
written. Creating a file costs far more than filling it (about 0.25 ms of CPU each here), so
one file a run, not one a cassette. A process reads every pack once, the first time it looks
for an entry, and keeps their entries' bytes (each unmarshalled when asked); the newest pack's
entry of a file wins. Once a folder holds `_PACKS_MAX` packs, the next process writing one
merges them all into it and removes them, keeping the newest `_PACKED_MAX` entries (those it
read or wrote itself counting as the newest); a pack another process removed meanwhile is only
a miss. pytest-xdist workers each write their own pack; two adding different variants of one
file at once may keep one of them (the other is worked out again when next asked).

An entry is kept from a file's second run on: a run notes the files it read that have no entry
(their digests, in one ``.seen`` file) and keeps entries only for those an earlier run noted. A
one-off run, such as a CI job from a clean checkout, writes one small file and no entry; a file
run again is read from the cache from its third run on. Runs that note files at once (pytest-xdist
workers) may keep one run's notes: the others' files are noted again next time.

A pack or note file that cannot be read (cut off, corrupted, another format, another kit's) is
ignored, never an error: its files' entries are worked out and kept again, and the next pack
written removes it. A file no earlier run noted is not looked up at all. Nothing is stored that
the cassette file does not hold already, and nothing of a file whose scrubbing learns a secret
from it or that is read while an API key is set (`pytest_laya.cassettes.replay` decides).
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import marshal
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

__all__ = ["Extra", "digest_of_parsed", "directory", "extras", "get", "head", "keep", "keeps", "note", "note_head",
           "note_parsed", "noted", "put", "use", "variant"]

_MAGIC = b"pytest-laya derived 2\n"
_CHECK_BYTES = 16

_folder: Path | None = None
_SEEN = "seen"
_NOTED_BYTES = 16  # of a file's SHA-256: a collision only keeps an entry a run early
_SEEN_MAX = 20_000  # digests noted at most (the newest): a bigger suite's oldest notes are taken again
_seen: set[bytes] = set()  # the files earlier runs noted (digest prefixes): the only ones with entries
_seen_now: dict[bytes, None] = {}  # the files this run notes, in order
_missing: set[Path] = set()  # entries a look-up found missing: created in place when written
_extras: tuple[Extra, ...] = ()
_code_digest: bytes | None = None
_lock = threading.Lock()
# The file digest of each parsed cassette this process read through the cache, by the parse
# itself (held, so its id stays its own): replay keys its derived entry by the same bytes.
_digests: collections.OrderedDict[int, tuple[Any, str]] = collections.OrderedDict()
_DIGESTS_MAX = 64
#: The cassette entries read last, by file digest (hex), None for one the folder does not hold:
#: replay asks for a file's head, then its variant, then keeps one.
_entries: collections.OrderedDict[str, dict[str, Any] | None] = collections.OrderedDict()
_ENTRIES_MAX = 4
_PACK_MAGIC = b"pytest-laya derived pack 1\n"
_PACK = ".pack"
_PACKS_MAX = 8  # packs in a folder before the next one written merges them all
_PACKED_MAX = 20_000  # entries a merged pack keeps at most (the newest)
#: The entries this process keeps, by file digest (bytes): marshalled, written as one pack by `use`.
_pending: dict[bytes, bytes] = {}
#: The folder's packs' entries, by file digest, read once when an entry is first looked for.
_packed: dict[bytes, bytes] | None = None
_used: dict[bytes, None] = {}  # the packed entries this process read: the newest when packs merge
_unreadable: set[Path] = set()  # packs found damaged or another kit's: the next pack written removes them


class Extra(NamedTuple):
    """Something a layer above derives from a replayed file's interactions, kept in its entry too
    (the plugin's spec verdicts): `key` names its inputs beyond the file (bytes, asked once per
    entry), `derive` gives a built-in value from the file's head and interactions, `restore`
    takes it back (False if it is not one of its own)."""

    name: str
    key: Callable[[], bytes]
    derive: Callable[[Any, Any], Any]
    restore: Callable[[Any], bool]


def use(folder: Path | None, extras: tuple[Extra, ...] = ()) -> tuple[Path | None, tuple[Extra, ...]]:
    """Keep derived results under `folder` from now on (None: keep none), with `extras`; returns
    what was in use before (to give back to `use`)."""
    global _folder, _extras, _packed
    _note_seen()
    _write_pack()
    with _lock:
        before = (_folder, _extras)
        _folder, _extras, _packed = folder, tuple(extras), None
        for kept in (_entries, _seen, _seen_now, _missing, _pending, _used, _unreadable):  # of the folder in use before
            kept.clear()
    _seen.update(_noted())
    return before


def _noted() -> list[bytes]:
    """The digests earlier runs noted in the folder (`_note_seen`)."""
    noted = get(_SEEN)
    return [d for d in noted if isinstance(d, bytes)] if isinstance(noted, tuple) else []


def _note_seen() -> None:
    """Add the files this run read without an entry to the folder's notes, the newest kept."""
    if _folder is None or not _seen_now:
        return
    merged = dict.fromkeys(_noted())
    merged.update(dict.fromkeys(_seen))
    merged.update(_seen_now)
    put(_SEEN, tuple(merged)[-_SEEN_MAX:])


def directory() -> Path | None:
    return _folder


def extras() -> tuple[Extra, ...]:
    return _extras


def _code() -> bytes:
    """The source of the modules whose output is cached (and of those judging it), hashed once per process."""
    global _code_digest
    code = _code_digest
    if code is None:
        root = Path(__file__).resolve().parent.parent
        digest = hashlib.sha256(f"{sys.version_info[:2]} {marshal.version}".encode())
        for package in ("cassettes", "wire", "intercept", "specs", "route"):
            for source in sorted((root / package).glob("*.py")):
                digest.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
        code = _code_digest = digest.digest()
    return code


def _path(kind: str, parts: tuple[bytes, ...]) -> Path | None:
    folder = _folder
    if folder is None:
        return None
    digest = hashlib.sha256(_code() + kind.encode())
    for part in parts:
        digest.update(len(part).to_bytes(8, "big") + part)
    name = digest.hexdigest()
    return folder / name[:2] / f"{name[2:]}.{kind}"


def get(kind: str, *parts: bytes) -> Any:
    """The value kept for (`kind`, `parts`), or None: no cache, no entry, or one that cannot be read."""
    path = _path(kind, parts)
    if path is None:
        return None
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        _missing.add(path)
        return None
    except OSError:
        return None
    try:
        return _unsealed(_MAGIC, blob)
    except ValueError:
        return None


def put(kind: str, value: Any, *parts: bytes) -> None:
    """Keep `value` (built-in types only) for (`kind`, `parts`); a value or folder that cannot be kept is skipped."""
    path = _path(kind, parts)
    if path is None:
        return
    try:
        blob = _sealed(_MAGIC, value)
    except ValueError:  # a type marshal cannot hold (a date in a cassette's metadata): not kept
        return
    try:
        if not (path in _missing and _created(path, blob)):
            _replaced(path, blob)
    except OSError:  # a read-only or full disk: the run goes on without the cache
        return
    _missing.discard(path)


def _sealed(magic: bytes, value: Any) -> bytes:
    """`value` marshalled behind `magic` and its checksum (ValueError: a type marshal cannot hold)."""
    payload = marshal.dumps(value)
    return magic + hashlib.blake2b(payload, digest_size=_CHECK_BYTES).digest() + payload


def _unsealed(magic: bytes, blob: bytes) -> Any:
    """The value `_sealed(magic, ...)` gave `blob`; ValueError if it is not one (cut off, damaged,
    another format)."""
    head = len(magic) + _CHECK_BYTES
    payload = blob[head:]
    if not blob.startswith(magic) or len(blob) < head \
            or hashlib.blake2b(payload, digest_size=_CHECK_BYTES).digest() != blob[len(magic):head]:
        raise ValueError("not a sealed value")
    try:
        return marshal.loads(payload)
    except (EOFError, TypeError) as error:
        raise ValueError("not a sealed value") from error


_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
_T = TypeVar("_T")


def _in_folder(path: Path, open_beside: Callable[[], _T]) -> _T:
    """`open_beside()`, a file opened in `path`'s folder, the folder made first if it is missing."""
    try:
        return open_beside()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        return open_beside()


def _created(path: Path, blob: bytes) -> bool:
    """Write a new entry at `path` in place; False, nothing written, if one is there already."""
    try:
        fd = _in_folder(path, lambda: os.open(path, _CREATE, 0o600))
    except FileExistsError:
        return False
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(blob)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    return True


def _replaced(path: Path, blob: bytes) -> None:
    """Write `blob` to a temporary file beside `path`, then move it into place."""
    fd, temporary = _in_folder(path, lambda: tempfile.mkstemp(dir=path.parent, prefix=".tmp-"))
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(blob)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _file_digest(raw: bytes) -> bytes:
    return hashlib.sha256(raw).digest()


def head(raw: bytes) -> Any:
    """The head of a cassette file's bytes (`head.head_of`: the file without its interactions)
    kept by an earlier run, or None. Its entry's variants are `variant`'s from then on."""
    if _folder is None:
        return None
    digest = _file_digest(raw)
    entry = _entry(digest.hex())
    if entry is None:
        return None
    _remember(entry["head"], digest)
    return entry["head"]


def variant(digest: str, key: bytes) -> Any:
    """The value kept as `key`'s variant of the file whose bytes have `digest` (hex), or None."""
    entry = _entry(digest)
    return None if entry is None else entry["variants"].get(key)


def _noted_as(digest: str) -> bytes:
    return bytes.fromhex(digest)[:_NOTED_BYTES]


def noted(digest: str) -> bool:
    """Whether an earlier run noted the file with `digest` (hex): only such a file has an entry, or gets one."""
    return _noted_as(digest) in _seen


def note(digest: str) -> None:
    """Note that this run read the file with `digest` (hex) and could keep its entry: a later run keeps it."""
    if _folder is not None:
        _seen_now[_noted_as(digest)] = None


def keeps(digest: str) -> bool:
    """Whether this run keeps an entry of the file with `digest` (hex): only if an earlier run noted
    it. A file none noted is noted now, and kept from its next run."""
    if noted(digest):
        return True
    note(digest)
    return False


def keep(head: Any, digest: str, variant: Callable[[], tuple[bytes, Any]]) -> None:
    """Keep the variant `variant()` gives, (key, value: built-in types only), of the file with
    `digest` (hex) and `head`, beside the variants its entry holds already. `variant` is called
    only when the entry is kept (`keeps`): a file no earlier run noted is noted instead."""
    if _folder is None or not keeps(digest):
        return
    key, value = variant()
    entry = _entry(digest)
    variants = dict(entry["variants"]) if entry is not None else {}
    variants[key] = value
    kept = {"head": head, "variants": variants}
    try:
        blob = marshal.dumps(kept)
    except ValueError:  # a type marshal cannot hold (a date in a cassette's metadata): not kept
        return
    with _lock:
        _pending[bytes.fromhex(digest)] = blob
    _keep_entry(digest, kept)


def _entry(digest: str) -> dict[str, Any] | None:
    """The cassette entry of the file with `digest` (hex), None if there is none: read from the
    folder once, then remembered (that there is none too: a first run asks for its head, its
    variant and, to keep one, its other variants, and finds nothing three times)."""
    with _lock:
        if digest in _entries:
            return _entries[digest]
    if not noted(digest):  # kept by no run
        return None
    key = bytes.fromhex(digest)
    with _lock:
        blob = _pending.get(key)
        if blob is None:
            blob = _packs_read().get(key)
            if blob is not None:
                _used[key] = None
    read = None
    if blob is not None:
        try:
            read = marshal.loads(blob)
        except (ValueError, EOFError, TypeError):
            read = None
    entry: dict[str, Any] | None = read
    if not isinstance(read, dict) or not isinstance(read.get("head"), dict) \
            or not isinstance(read.get("variants"), dict) or "interactions" in read["head"]:
        entry = None  # none, or not one of ours
    _keep_entry(digest, entry)
    return entry


def _packs_read() -> dict[bytes, bytes]:
    """Every pack's entries in the folder, the newest pack's winning; read once (under `_lock`)."""
    global _packed
    if _packed is None:
        _packed = {}
        for path in _packs():
            _packed.update(_pack(path))
    return _packed


def _packs() -> list[Path]:
    """The folder's packs, oldest first (their names start with the time they were written)."""
    try:
        return sorted(_folder.glob(f"*{_PACK}")) if _folder is not None else []
    except OSError:
        return []


def _pack(path: Path) -> dict[bytes, bytes]:
    """A pack's entries (marshalled), by file digest; none if it is gone (merged away meanwhile),
    or if it is damaged or another kit's (noted, for the next pack written to remove)."""
    try:
        blob = path.read_bytes()
    except OSError:  # gone (merged away), or unreadable here: a miss, not noted
        return {}
    try:
        code, entries = _unsealed(_PACK_MAGIC, blob)
        if code != _code() or not isinstance(entries, dict) \
                or not all(isinstance(k, bytes) and isinstance(v, bytes) for k, v in entries.items()):
            raise ValueError("another kit's")
    except (ValueError, TypeError):  # damaged, or not a (code, entries) pair
        _unreadable.add(path)
        return {}
    return entries


def _write_pack() -> None:
    """Write the entries this process kept as one new pack, merging the folder's packs into it
    once there are `_PACKS_MAX` of them; remove the packs merged and those found unreadable.
    A folder that cannot be written is skipped: the run goes on without the cache."""
    folder = _folder
    with _lock:
        entries, used = dict(_pending), list(_used)
        _pending.clear()
    if folder is None or not entries:
        return
    merged: list[Path] = []
    packs = _packs()
    if len(packs) >= _PACKS_MAX:
        everything: dict[bytes, bytes] = {}
        for path in packs:
            for key, blob in _pack(path).items():
                everything.pop(key, None)  # the newest write last
                everything[key] = blob
            merged.append(path)
        for key in used:  # read by this run: among the newest
            if key in everything:
                everything[key] = everything.pop(key)
        for key, blob in entries.items():
            everything.pop(key, None)
            everything[key] = blob
        entries = dict(list(everything.items())[-_PACKED_MAX:])
    blob = _sealed(_PACK_MAGIC, (_code(), entries))  # bytes only: marshal holds them
    name = folder / f"{time.time_ns():020d}-{os.getpid()}{_PACK}"
    try:
        _replaced(name, blob)
    except OSError:  # a read-only or full disk: the run goes on without the cache
        return
    for path in {*merged, *_unreadable} - {name}:
        with contextlib.suppress(OSError):
            path.unlink()


def _keep_entry(digest: str, entry: dict[str, Any] | None) -> None:
    with _lock:
        _entries[digest] = entry
        _entries.move_to_end(digest)
        while len(_entries) > _ENTRIES_MAX:
            _entries.popitem(last=False)


def note_parsed(raw: bytes, data: Any) -> None:
    """Remember which bytes `data` (a checked parse) came from (`digest_of_parsed`)."""
    if _folder is not None:
        _remember(data, _file_digest(raw))


def note_head(data: Any, head: Any) -> None:
    """Remember that `head` (`head.head_of(data)`) came from the bytes `data` came from."""
    digest = digest_of_parsed(data)
    if digest is not None:
        _remember(head, bytes.fromhex(digest))


def _remember(data: Any, digest: bytes) -> None:
    with _lock:
        _digests[id(data)] = (data, digest.hex())
        _digests.move_to_end(id(data))
        while len(_digests) > _DIGESTS_MAX:
            _digests.popitem(last=False)


def digest_of_parsed(data: Any) -> str | None:
    """The digest of the file bytes `data` was parsed from, when it was read with a cache folder in use."""
    with _lock:
        found = _digests.get(id(data))
    return found[1] if found is not None and found[0] is data else None

"""Which file holds a test's cassette: one file per test, and no two tests in one file.

A test's cassette is named from its whole node id. Characters a file system cannot hold, or that
would make two ids look alike (``/``, space, ``:``, ``%``, a leading ``.``, anything outside
ASCII letters, digits and ``_.,=+-[]``), are percent-escaped, so ``a/b``, ``a b``, ``a:b``,
``a::b``, ``a.b`` and ``a_b`` stay six files; a name over `MAX_NAME` characters keeps its start
and a hash of the whole id. Letters keep their case (so the files of ids that differ only in case
meet on a case-insensitive disk: the plugin refuses such ids at collection). A cassette named on
the marker must stay inside the cassette directory.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path, PurePosixPath

__all__ = ["CASSETTE_SUFFIX", "LAYA_METADATA", "MAX_NAME", "cassette_relpath", "confined", "safe_name",
           "written_by_pytest_laya"]

CASSETTE_SUFFIX = ".yaml"
#: The longest file name (without the suffix) a cassette gets; longer ones are shortened + hashed.
MAX_NAME = 120
# How a file pytest-laya wrote is told from other vcrpy cassettes sharing its directory
# (pytest-recording's use the same <module>/<test>.yaml layout): it has `metadata.pytest_laya`.
LAYA_METADATA = re.compile(rb"(?m)^metadata:[ \t]*\r?\n(?:[ \t]+.*\r?\n)*?[ \t]+pytest_laya:")
_KEPT = re.compile(r"[A-Za-z0-9_.,=+\-\[\]]")
_ALL_KEPT = re.compile(r"[A-Za-z0-9_.,=+\-\[\]]+")


def safe_name(name: str) -> str:
    """`name` as one file name: unsafe characters percent-escaped, never empty, never hidden."""
    if len(name) <= MAX_NAME and not name.startswith(".") and _ALL_KEPT.fullmatch(name):
        return name  # nothing to escape (most test names)
    out = []
    for char in name:
        if _KEPT.fullmatch(char):
            out.append(char)
        else:
            out.extend(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogatepass"))
    safe = "".join(out) or "%00"
    if safe.startswith("."):
        safe = "%2E" + safe[1:]  # no hidden files, and neither "." nor ".."
    if len(safe) > MAX_NAME:
        digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        safe = f"{safe[: MAX_NAME - 13]}-{digest}"
    return safe


def cassette_relpath(nodeid: str, *, shared: bool = False) -> PurePosixPath:
    """The cassette file of a test, relative to the cassette directory.

    Beside the test module (the default, ``<module dir>/cassettes/``) it is ``<module>/<test>.yaml``:
    ``tests/unit/test_x.py::TestA::test_b[p-1]`` gives ``test_x/TestA.test_b[p-1].yaml``. In a
    directory `shared` by every module (``--laya-cassette-dir``), the module's path is kept, so two
    ``test_x.py`` in different packages never share cassettes: ``tests/unit/test_x/TestA...``.
    """
    file_part, _, test_part = nodeid.partition("::")
    module_path = PurePosixPath(file_part.replace("\\", "/"))
    stem = module_path.name[:-3] if module_path.name.endswith(".py") else module_path.name
    folders = [safe_name(part) for part in module_path.parent.parts if part not in ("", ".", "/")] if shared else []
    # `::` between classes and the test becomes `.`; inside a parametrize id (after `[`) it is
    # escaped like any `:`, so `test_x[a::b]` and `test_x[a.b]` stay two files.
    head, bracket, params = test_part.partition("[")
    name = (head.replace("::", ".") + bracket + params) or "module"
    return PurePosixPath(*folders, safe_name(stem or "tests"), safe_name(name) + CASSETTE_SUFFIX)


def confined(directory: Path, relpath: str | PurePosixPath, *, where: str) -> Path:
    """`directory / relpath`, or a ValueError saying why a path that leaves `directory` is refused."""
    candidate = PurePosixPath(str(relpath).replace("\\", "/"))
    if candidate.is_absolute() or ".." in candidate.parts:
        raise ValueError(f"{where}: cassette {str(relpath)!r} must be a relative path inside the cassette "
                         f"directory ({directory}), without '..'")
    full = (directory / candidate).resolve()
    if not full.is_relative_to(directory.resolve()):
        raise ValueError(f"{where}: cassette {str(relpath)!r} resolves outside the cassette directory ({directory})")
    return full


def written_by_pytest_laya(raw: bytes) -> bool:
    """Whether a cassette file's bytes are pytest-laya's (they carry ``metadata.pytest_laya``)."""
    return LAYA_METADATA.search(raw) is not None

"""Which file holds a test's cassette."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

__all__ = [
    "CASSETTE_SUFFIX",
    "cassette_relpath",
]


CASSETTE_SUFFIX = ".yaml"


_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.,=+\-\[\]]+")


_MAX_NAME = 120


def cassette_relpath(nodeid: str) -> PurePosixPath:
    """The cassette file of a test, relative to the cassette directory: ``<module>/<test>.yaml``.

    ``tests/unit/test_x.py::TestA::test_b[p-1]`` gives ``test_x/TestA.test_b[p-1].yaml``.
    Characters that are unsafe in file names become ``_``; very long names are shortened
    and keep a hash, so two tests never share a file.
    """
    file_part, _, test_part = nodeid.partition("::")
    module = PurePosixPath(file_part.replace("\\", "/")).name
    module = module[:-3] if module.endswith(".py") else module
    name = test_part.replace("::", ".") or "module"
    return PurePosixPath(safe_name(module or "tests")) / (safe_name(name) + CASSETTE_SUFFIX)


def safe_name(name: str) -> str:
    safe = _SAFE_NAME.sub("_", name).strip(".") or "_"
    if len(safe) > _MAX_NAME:
        import hashlib

        digest = hashlib.sha1(name.encode("utf-8")).hexdigest()[:10]
        safe = f"{safe[: _MAX_NAME - 11]}-{digest}"
    return safe

"""What a run's report says of its part of the suite, so `python -m pytest_laya report merge`
can join the reports of a split run (pytest-split, CI matrices, ``-k`` per job) into one.

Each report names the cassettes the run could see (``cassette_files``: every file pytest-laya
wrote in the cassette directories of the collected modules), those its tests used
(``used_cassettes``), both relative to the rootdir, and its ``scope``: the tests that ran, the
tests deselected (by ``-k``, ``-m``, ``--deselect`` or a plugin such as pytest-split), and why
else it is not the whole suite.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from pytest_laya.plugin.run import LayaRun
from pytest_laya.plugin.unused import find_unused, selection_problems

__all__ = ["shard_scope"]


def _shown(path: Path, root: Path) -> str:
    try:
        # No link resolved, as `find_unused` names files: a cassette that is a link is the link.
        return Path(os.path.abspath(path)).relative_to(os.path.abspath(root)).as_posix()
    except ValueError:
        return path.as_posix()


def shard_scope(run: LayaRun, config: pytest.Config) -> dict[str, Any]:
    """The report's ``cassette_files``, ``used_cassettes`` and ``scope`` for this run."""
    root = config.rootpath
    files = None
    if run.mode.accounts_cassettes:
        files = find_unused(run, root, used=set())
    return {
        "cassette_files": files,
        "used_cassettes": sorted({_shown(path, root) for path in run.used_cassettes}),
        "scope": {
            "ran": sorted(set(run.ran_tests)),
            "deselected": sorted(set(run.deselected)),
            "selection": selection_problems(config),
            "partial": [why for why in run.partial if not why.endswith(" deselected")],
        },
    }

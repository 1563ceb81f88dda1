"""Which cassettes no test used, and whether this run may say so.

Unused cassettes are reported only when the whole suite ran (syrupy's rule): a partial run
(`-k`, node ids, deselection, `-x`, ...) would call every cassette it did not reach unused.
Only files pytest-laya wrote are counted, so other vcrpy cassettes sharing the directories
(pytest-recording uses the same layout) are never listed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_laya.cassettes.naming import CASSETTE_SUFFIX, cassette_relpath, written_by_pytest_laya

if TYPE_CHECKING:  # pragma: no cover
    from pytest_laya.plugin.run import LayaRun

__all__ = ["cassette_directories", "find_unused", "is_laya_cassette", "note_dropped_items", "prune",
           "selection_problems"]

# Options that run part of the suite (their `config.option` names and how they are spelt).
PARTIAL_OPTIONS = (
    ("keyword", "-k"), ("markexpr", "-m"), ("lf", "--lf"), ("failedfirst", "--ff"), ("stepwise", "--sw"),
    ("stepwise_skip", "--sw-skip"), ("deselect", "--deselect"), ("ignore", "--ignore"),
    ("ignore_glob", "--ignore-glob"), ("collectonly", "--collect-only"), ("setuponly", "--setup-only"),
    ("setupplan", "--setup-plan"), ("showfixtures", "--fixtures"), ("show_fixtures_per_test", "--fixtures-per-test"),
)


def selection_problems(config: pytest.Config) -> list[str]:
    """Why the command line does not select the whole suite (empty when it does)."""
    opt = config.option
    why = [flag for name, flag in PARTIAL_OPTIONS if getattr(opt, name, None)]
    if not _whole_suite_args(config):
        why.append("paths or node ids given")
    return why


def _whole_suite_args(config: pytest.Config) -> bool:
    if config.args_source == pytest.Config.ArgsSource.TESTPATHS:
        return True
    if getattr(config.option, "pyargs", False):
        return False

    def norm(path: str | os.PathLike[str]) -> str:
        return os.path.normcase(os.path.abspath(path))

    cwd = config.invocation_params.dir
    given = set()
    for arg in config.args:
        if "::" in arg:
            return False
        given.add(norm(cwd / arg))
    root = config.rootpath
    if norm(root) in given:
        return True
    import glob

    wanted = {norm(found) for pattern in config.getini("testpaths")
              for found in glob.glob(os.path.join(root, pattern), recursive=True)}
    return bool(wanted) and given == wanted


def is_laya_cassette(path: Path) -> bool:
    try:
        return written_by_pytest_laya(path.read_bytes())
    except OSError:
        return False


def _shown(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def note_dropped_items(run: LayaRun, items: list[pytest.Item]) -> None:
    """After collection: mark the run partial when a conftest or plugin dropped collected tests
    without `pytest_deselected` (``items[:] = [...]``, the ``--runslow`` idiom), and note the
    cassette families of parametrised tests (`LayaRun.families`)."""
    from pytest_laya.plugin.cassette_fixture import cassette_of

    dropped = run.items_seen - len(items) - len(run.deselected)
    if dropped > 0:
        run.partial.append(f"{dropped} of {run.items_seen} collected tests were left out of the run without "
                           f"pytest_deselected (a conftest's pytest_collection_modifyitems?)")
    if not run.mode.accounts_cassettes:
        return
    for item in items:
        if getattr(item, "callspec", None) is None:
            continue
        try:
            path = cassette_of(item, run)
        except pytest.UsageError:
            continue
        if "[" in path.name:
            run.families.add(str(path.parent / path.name.split("[", 1)[0]) + "[")


def _absolute(path: Path) -> Path:
    """`path` made absolute without resolving a link (``..`` folded as text)."""
    return Path(os.path.abspath(path))


def find_unused(run: LayaRun, root: Path, *, used: set[Path] | None = None) -> list[str]:
    """Cassettes pytest-laya wrote, in the cassette directories in use, that no test used
    (`used`: those files instead of the run's; an empty set lists every cassette in scope).

    No link is resolved: a cassette that is a symbolic link is named as the link, and a linked
    directory inside a cassette directory is not entered.
    """
    used = run.used_cassettes if used is None else used
    directories = cassette_directories(run)
    def module_folder(module: Path) -> Path:
        nodeid = module.relative_to(root).as_posix() if module.is_relative_to(root) else module.name
        return _directory_of(run, module) / cassette_relpath(f"{nodeid}::_", shared=run.cassette_dir is not None).parent

    kept = {module_folder(m) for m in run.skipped_modules}
    found = set()
    for directory in directories:
        if not directory.is_dir():
            continue
        for path in directory.rglob("*" + CASSETTE_SUFFIX):
            if path.name.startswith(".") or not path.is_file():
                continue  # half-written temporary files and hidden ones are not cassettes
            path = _absolute(path)
            if path in used or any(k == path.parent or k in path.parents for k in kept):
                continue
            if is_laya_cassette(path):
                found.add(path)
    return sorted(_shown(p, _absolute(root)) for p in found)


def _directory_of(run: LayaRun, module: Path) -> Path:
    return _absolute(run.cassette_dir or module.parent / "cassettes")


def cassette_directories(run: LayaRun) -> set[Path]:
    """The cassette directories of the run's collected modules (absolute, links not resolved)."""
    return {_absolute(run.cassette_dir)} if run.cassette_dir else {_directory_of(run, m) for m in run.modules}


def prune(unused: list[str], root: Path, *, families: set[str] | frozenset[str] = frozenset(),
          within: set[Path] | None = None) -> list[str]:
    """Delete the `unused` cassettes (paths relative to `root`, as `find_unused` gives them).

    Only a file inside `within` (the cassette directories; by default `root`) is deleted, never
    through a link: a cassette that is a link loses the link, its target stays. A cassette of a
    parametrised test that still runs (`families`) is kept.
    """
    bounds = [_absolute(d) for d in within] if within is not None else [_absolute(root)]
    deleted = []
    for shown in unused:
        path = _absolute(root / shown)
        if not any(path.is_relative_to(bound) and path != bound for bound in bounds):
            continue  # outside the cassette directories: never touched
        if any(str(path).startswith(family) for family in families):
            continue
        if path.is_file() and is_laya_cassette(path):
            path.unlink()  # a link is removed, not its target
            deleted.append(shown)
    return deleted

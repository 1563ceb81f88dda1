"""What re-recording changed: the old cassette against the new one, per pointer, for the
summary (a refresh that can be reviewed)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from pytest_laya.cassettes import CassetteHandle

__all__ = ["CHANGED_SECTION", "changed_answers", "shown_path"]

#: The summary section the changes are listed under.
CHANGED_SECTION = "re-recorded cassettes whose answers changed"


def changed_answers(old_path: Path, new: CassetteHandle, *, api_key: Any, server: str) -> list[str]:
    """The summary's lines for what recording `new` over the cassette at `old_path` changed (none
    when there was no file or nothing changed); `server` names the server in them."""
    from pytest_laya.cassettes import laya_vcr
    from pytest_laya.cassettes.verify import verify_interactions

    if not old_path.is_file():
        return []
    old = laya_vcr(record=False, cassette_dir=None, api_key=api_key, strict=False).open(old_path)
    shown = shown_path(old_path)
    result = verify_interactions(list(old.cassette.data), list(new.cassette.data), path=shown, rerecord="",
                                 server=server, tolerance=0.0)
    changed = [check for check in result.checks if not check.matches]
    if not changed and len(result.checks) == len(old.cassette.data):
        return []
    lines = [f"{shown}: {len(changed)} of {len(result.checks)} interactions changed"]
    lines.extend(f"  {check.line()}" for check in changed[:5])
    return lines


def shown_path(path: Path) -> str:
    """`path` relative to the working directory when it is below it, as the summary shows a cassette."""
    try:
        return path.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return path.as_posix()

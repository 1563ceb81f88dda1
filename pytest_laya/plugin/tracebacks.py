"""Tracebacks that end where the user's code met the kit, not inside httpx or vcrpy.

A cassette miss, a spec violation or a blocked host is raised from deep inside an HTTP library
(vcrpy's patched transport, httpx's send loop, http.client). Those frames say nothing the
message does not, so they are dropped from the report of a test that failed with one of the
kit's errors; the test's own frames stay.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["hide_library_frames"]

_LIBRARIES = ("httpx", "httpcore", "vcr", "urllib3", "requests", "anyio", "h11", "sniffio", "pytest_laya")
_STDLIB_HTTP = (os.path.join("http", "client.py"), os.path.join("urllib", "request.py"))


def _kit_error(value: BaseException) -> bool:
    from pytest_laya.cassettes.errors import CassetteError
    from pytest_laya.intercept.switchboard import NetworkBlocked
    from pytest_laya.specs.conformance import SpecViolationError

    return isinstance(value, (CassetteError, NetworkBlocked, SpecViolationError))


def _library_frame(entry: Any) -> bool:
    path = str(entry.path)
    parts = path.replace("\\", "/").split("/")
    if "site-packages" in parts or "dist-packages" in parts:
        below = parts[max(i for i, p in enumerate(parts) if p in ("site-packages", "dist-packages")) + 1:]
        return bool(below) and below[0].split(".")[0] in _LIBRARIES
    if "pytest_laya" in parts and "tests" not in parts:
        return True  # the kit's own frames, in a source checkout
    # contextlib's plumbing: a kit error raised while a fixture's `with` opens or closes shows no
    # `contextlib.__enter__` frame, only its message.
    return path.endswith(_STDLIB_HTTP) or entry.frame.f_globals.get("__name__") == "contextlib"


def _hidden_for_kit_errors(excinfo: Any) -> bool:
    """pytest's ``__tracebackhide__`` protocol: hide the frame only when a kit error is shown."""
    try:
        return _kit_error(excinfo.value)
    except Exception:  # noqa: BLE001
        return False


def hide_library_frames(excinfo: Any) -> None:
    """Hide HTTP-library and kit frames from `excinfo`'s report when it holds one of the kit's errors.

    pytest cuts a test's traceback at the test function and then drops frames whose module (or
    function) sets ``__tracebackhide__``; a callable one decides per exception. The modules of the
    library frames in this traceback get one that hides them for the kit's errors only.
    """
    try:
        if not _kit_error(excinfo.value):
            return
        for entry in excinfo.traceback:
            if _library_frame(entry):
                module_globals = entry.frame.f_globals
                module_globals.setdefault("__tracebackhide__", _hidden_for_kit_errors)
    except Exception:  # noqa: BLE001 - a prettier traceback is never worth a broken report
        return

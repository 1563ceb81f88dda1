"""Hand heap memory that was freed back to the operating system, once the server is idle.

A large request allocates hundreds of MB that Python, the tokenizer and torch free as soon as
it is answered (a million-character `instructions` tokenizes to 500,000 tokens first), but
glibc's malloc keeps freed pages in its arenas: after hostile traffic the reference server's
RSS stayed 150-190 MiB (about 50%) above idle. `malloc_trim(0)` returns them. Where there is no
glibc (macOS, musl) this does nothing.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable

__all__ = ["release_free_heap"]


@functools.lru_cache(maxsize=1)
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    trim = getattr(libc, "malloc_trim", None)
    if trim is not None:
        trim.argtypes = [ctypes.c_size_t]
        trim.restype = ctypes.c_int
    return trim


def release_free_heap() -> bool:
    """Return free heap pages to the OS; False where malloc_trim does not exist.

    ctypes releases the GIL for the call, so it may run on any thread while others work.
    """
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True

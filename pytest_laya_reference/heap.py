"""Keep the reference server's resident memory near its idle level, under load and after it.

- `cap_malloc_arenas`: the server's threads share one glibc arena (unless `MALLOC_ARENA_MAX` is set);
- `keep_freed_heap`: fixed mmap and trim thresholds, so a request's tensors reuse the heap the
  last one freed instead of faulting in fresh pages;
- `freeze_loaded_objects`: laya's long-lived objects out of the collector's view, so a full
  collection is cheap;
- `release_free_heap`: once idle, a collection and then `malloc_trim(0)`.

Where there is no glibc (macOS, musl) the malloc parts do nothing. Figures:
docs/reliability.md and docs/benchmarks.md; the environment each respects:
docs/reference-server.md.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import os

__all__ = ["cap_malloc_arenas", "freeze_loaded_objects", "keep_freed_heap", "release_free_heap"]

# mallopt parameter numbers, from glibc's malloc.h
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8

#: Blocks up to this size come from the heap, not a fresh mmap each (glibc's own dynamic
#: threshold stops there too).
MMAP_THRESHOLD = 32 * 1024 * 1024
#: Free heap kept at its top between requests before glibc gives it back by itself.
TRIM_THRESHOLD = 64 * 1024 * 1024
_THRESHOLD_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")


@functools.lru_cache(maxsize=1)
def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    if not (hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt")):
        return None
    libc.malloc_trim.argtypes = [ctypes.c_size_t]
    libc.malloc_trim.restype = ctypes.c_int
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallopt.restype = ctypes.c_int
    return libc


def cap_malloc_arenas(arenas: int = 1) -> bool:
    """Limit glibc to `arenas` malloc arenas; False where that is not possible.

    Call it before starting threads: an arena a thread already has is kept. The same as
    setting `MALLOC_ARENA_MAX`; where the environment already sets it, that choice stands and
    this returns False.
    """
    if arenas < 1:
        raise ValueError(f"arenas must be at least 1, not {arenas}")
    libc = _glibc()
    if libc is None or "MALLOC_ARENA_MAX" in os.environ:
        return False
    return bool(libc.mallopt(_M_ARENA_MAX, arenas))


def keep_freed_heap() -> bool:
    """Keep freed blocks for the next request: fixed mmap and trim thresholds; False where that
    is not possible, or the environment sets glibc's malloc thresholds or tunables itself."""
    libc = _glibc()
    if libc is None or any(name in os.environ for name in _THRESHOLD_VARIABLES):
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def freeze_loaded_objects() -> None:
    """Collect once, then move every surviving object to the permanent generation.

    For a process that owns its heap, once the model is loaded: later collections walk only
    what requests create.
    """
    gc.collect()
    gc.freeze()


def release_free_heap() -> bool:
    """Return free heap pages to the OS; False where malloc_trim does not exist.

    Collects first when `freeze_loaded_objects` has run (otherwise a full collection over
    the model's objects would hold the GIL for a noticeable time). ctypes releases the GIL
    for the trim itself, so this may run on any thread while others work.
    """
    if gc.get_freeze_count():
        gc.collect()
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True

"""What keeps the reference server's RSS near idle after hostile traffic (pytest_laya_reference.heap).

Each check runs in a fresh interpreter: capping arenas and freezing the collector change the
whole process, and pytest's own must stay as it is.
"""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys
import textwrap

import pytest

from pytest_laya_reference.heap import cap_malloc_arenas

glibc = pytest.mark.skipif(sys.platform != "linux" or ctypes.util.find_library("c") is None
                           or os.confstr("CS_GNU_LIBC_VERSION") is None, reason="needs glibc (Linux)")


def _run(code: str, **env: str) -> str:
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")} | env
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                            timeout=60, env=environment)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@glibc
def test_arenas_are_capped_with_glibc():
    assert _run("from pytest_laya_reference.heap import cap_malloc_arenas; print(cap_malloc_arenas())") == "True"


@glibc
def test_an_explicit_malloc_arena_max_is_left_to_glibc():
    code = "from pytest_laya_reference.heap import cap_malloc_arenas; print(cap_malloc_arenas())"
    assert _run(code, MALLOC_ARENA_MAX="4") == "False"


_FAULTS_PER_ROUND = """
    import resource
    from pytest_laya_reference.heap import cap_malloc_arenas, keep_freed_heap
    cap_malloc_arenas()
    print(keep_freed_heap())
    def request():  # what a request's tensors do: a few MB allocated, touched and freed
        blocks = [bytearray(4 << 20) for _ in range(3)]
        del blocks
    for _ in range(5):
        request()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        request()
    print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) // 10)
"""


@glibc
def test_freed_heap_is_kept_for_the_next_request():
    # Without it, glibc gave the 12 MB back after each round and took ~2,000 page faults to get it again.
    kept, faults = _run(_FAULTS_PER_ROUND).split()
    assert kept == "True" and int(faults) < 100


@glibc
def test_malloc_thresholds_set_in_the_environment_are_left_to_glibc():
    kept, faults = _run(_FAULTS_PER_ROUND, MALLOC_TRIM_THRESHOLD_="1048576").split()
    assert kept == "False" and int(faults) > 1000  # glibc's own choice stands, page faults and all


def test_a_cap_below_one_arena_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        cap_malloc_arenas(0)


def test_after_freezing_the_idle_release_collects_what_cycles_hold():
    # A refused 150,000-key body stays alive in an exception/traceback cycle until a collection.
    out = _run("""
        import gc, weakref
        from pytest_laya_reference.heap import freeze_loaded_objects, release_free_heap
        freeze_loaded_objects()
        assert gc.get_freeze_count() > 0
        gc.disable()  # nothing else may collect the cycle
        class Body: pass
        body = Body(); body.cycle = body
        alive = weakref.ref(body)
        del body
        release_free_heap()
        print(alive() is None)
    """)
    assert out == "True"


def test_without_a_freeze_the_release_does_not_walk_the_whole_heap():
    # A full collection over an unfrozen heap (laya's ~350,000 objects) holds the GIL ~190 ms.
    out = _run("""
        import gc, weakref
        from pytest_laya_reference.heap import release_free_heap
        gc.disable()
        class Body: pass
        body = Body(); body.cycle = body
        alive = weakref.ref(body)
        del body
        release_free_heap()
        print(alive() is not None)
    """)
    assert out == "True"


def test_the_command_line_freezes_the_loaded_model_before_it_says_ready():
    # main() as the console script runs it, with uvicorn's server replaced by one that checks
    # what was frozen once ready and stops.
    out = _run("""
        import gc, sys
        import uvicorn
        from pytest_laya_reference.__main__ import main
        class Probe:
            def __init__(self, config): self.config = config; self.should_exit = False
            def run(self, sockets):
                import asyncio
                async def serve():
                    async with self.config.app.router.lifespan_context(self.config.app):
                        while not ready: await asyncio.sleep(0.05)
                asyncio.run(serve())
        ready = []
        import builtins
        real_print = builtins.print
        def spy(*args, **kwargs):
            if args and str(args[0]).startswith("laya-reference-server ready at"):
                ready.append(gc.get_freeze_count())
            real_print(*args, **kwargs)
        builtins.print = spy
        uvicorn.Server = Probe
        main(["--port", "0"])
        print("frozen", ready[0] > 100_000)
    """)
    assert out.splitlines()[-1] == "frozen True"

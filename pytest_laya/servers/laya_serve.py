"""Start laya's own HTTP server (``laya-serve``) on a local checkpoint, as a subprocess.

Why a subprocess: pytest_laya must never import torch or laya itself (they cost seconds and
hundreds of MB, and most users only validate or replay), and a real server process is what
clients talk to in production -- its own event loop, admission limits, startup and shutdown.

The server only ever binds 127.0.0.1 on a free port, runs on the CPU, and is pointed at one
local checkpoint under every name laya might route to (``english``, ``multilingual``, ``tiny``),
with the hub switched off, so it never needs the network. Inherited ``LAYA_*`` variables are
dropped so a developer's shell cannot change what a test sees.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import weakref
from collections.abc import Mapping
from types import TracebackType
from typing import IO

from pytest_laya.faults.loopback import free_loopback_port
from pytest_laya.servers.readiness import NotReady, wait_ready
from pytest_laya.wire.redaction import REDACTED

__all__ = ["LayaServeProcess"]

#: The loopback address the server binds; nothing else is ever used.
HOST = "127.0.0.1"
#: Names every request may route to. All point at the one checkpoint so auto-routing stays local.
MODEL_NAMES = ("english", "multilingual", "tiny")
#: Variables this launcher owns; `extra_env` may not override them.
_OWNED_ENV = frozenset({"LAYA_HOST", "LAYA_PORT", "LAYA_EXTRA_MODELS", "LAYA_API_KEY", "LAYA_JEV_STRICT"})
_LOG_TAIL_CHARS = 4000
_STOP_GRACE_S = 5.0
#: Another process may grab the free port between our probe and the server's bind.
_PORT_ATTEMPTS = 3


class _PortTaken(Exception):
    """The server exited because the port it was given was taken meanwhile."""


def _stop_process(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """Terminate, then kill after `grace_s`; also the weakref finaliser, so it takes no self."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=grace_s)


class LayaServeProcess:
    """``laya-serve`` on `checkpoint_dir`, listening on ``http://127.0.0.1:<free port>``.

    Use as a context manager, or call `start()` and `stop()`. `start()` returns once
    ``GET /health`` answers 200, and raises `RuntimeError` with the tail of the server's log if
    the process exits or `startup_timeout_s` passes first. The API key never appears in `log`
    or in an error message. `jev_strict` starts it with ``LAYA_JEV_STRICT=1``: answers with
    Jev's field set only (no `routing`, `action`, `answer_confidence`, `x_jev_confidence`, no
    `confidence` on noul answers, `usage` with the two token counts).
    """

    def __init__(
        self,
        checkpoint_dir: os.PathLike[str] | str,
        *,
        api_key: str | None = None,
        max_concurrent: int | None = None,
        jev_strict: bool = False,
        extra_env: Mapping[str, str] | None = None,
        startup_timeout_s: float = 60.0,
        python: str = sys.executable,
    ) -> None:
        self.checkpoint_dir = pathlib.Path(checkpoint_dir).resolve()
        self.api_key = api_key or None
        if max_concurrent is not None and max_concurrent < 1:
            raise ValueError("max_concurrent must be a positive integer, got %r" % (max_concurrent,))
        self.max_concurrent = max_concurrent
        self.jev_strict = bool(jev_strict)
        self.extra_env = dict(extra_env or {})
        clash = sorted(_OWNED_ENV & set(self.extra_env))
        if clash:
            raise ValueError("extra_env may not set %s; use the constructor arguments" % ", ".join(clash))
        self.startup_timeout_s = float(startup_timeout_s)
        self.python = python
        self.port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None
        self._finalizer: weakref.finalize[[subprocess.Popen[bytes], float], LayaServeProcess] | None = None

    # ------------------------------------------------------------------ public

    @property
    def url(self) -> str:
        """Base URL, ``http://127.0.0.1:PORT``; only valid after `start()`."""
        if self.port is None:
            raise RuntimeError("LayaServeProcess has not been started")
        return "http://%s:%d" % (HOST, self.port)

    @property
    def pid(self) -> int:
        """The server process's id; only valid after `start()`."""
        if self._proc is None:
            raise RuntimeError("LayaServeProcess has not been started")
        return self._proc.pid

    @property
    def log(self) -> str:
        """Everything the server wrote to stdout and stderr so far, with the API key redacted."""
        if self._log_file is None:
            return ""
        fd = self._log_file.fileno()
        raw = os.pread(fd, os.fstat(fd).st_size, 0)
        return self._redact(raw.decode("utf-8", "replace"))

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> LayaServeProcess:
        """Start the server and wait until ``/health`` answers 200. One start per object."""
        if self._proc is not None:
            raise RuntimeError("LayaServeProcess already started")
        if not self.checkpoint_dir.is_dir():
            raise RuntimeError("laya-serve checkpoint directory does not exist: %s" % self.checkpoint_dir)
        # An unlinked temporary file, not a pipe: a pipe nobody drains blocks a chatty server.
        self._log_file = tempfile.TemporaryFile(prefix="laya-serve-", suffix=".log")
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            self._spawn()
            try:
                self._wait_healthy()
                return self
            except _PortTaken:
                self._stop_proc()
                if attempt == _PORT_ATTEMPTS:
                    self.stop()
                    raise self._failure("could not bind a free port in %d attempts" % _PORT_ATTEMPTS) from None
            except BaseException:
                self.stop()
                raise
        raise AssertionError("unreachable")

    def stop(self) -> None:
        """Stop the server: SIGTERM, then SIGKILL after a grace period. Safe to call twice.

        The captured `log` stays readable afterwards, for error messages.
        """
        self._stop_proc()

    def __enter__(self) -> LayaServeProcess:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self.url if self.port is not None else "not started"
        return "LayaServeProcess(%s, %s)" % (self.checkpoint_dir, where)

    # ------------------------------------------------------------------ internals

    def _spawn(self) -> None:
        assert self._log_file is not None
        # Each attempt starts a fresh log; the child shares this file's offset.
        self._log_file.seek(0)
        self._log_file.truncate()
        self.port = free_loopback_port()
        self._proc = subprocess.Popen(
            [self.python, "-m", "laya.serve"],
            env=self._environment(),
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            # The checkpoint is registered relative to this directory; see `_environment`.
            cwd=str(self.checkpoint_dir.parent),
        )
        self._finalizer = weakref.finalize(self, _stop_process, self._proc, _STOP_GRACE_S)

    def _stop_proc(self) -> None:
        if self._proc is not None:
            _stop_process(self._proc, _STOP_GRACE_S)
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None

    def _environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAYA_")}
        # Relative to the server's working directory, because laya echoes the source string in
        # every answer's `routing.repo`: "./tiny" is the same on every machine and checkout,
        # where an absolute path would make recorded bodies depend on where the repo lives.
        source = "./" + self.checkpoint_dir.name if self.checkpoint_dir.name else str(self.checkpoint_dir)
        env.update({
            "LAYA_HOST": HOST,
            "LAYA_PORT": str(self.port),
            "LAYA_DEVICE": "cpu",
            "LAYA_MODELS": "tiny",
            "LAYA_EXTRA_MODELS": json.dumps({name: source for name in MODEL_NAMES}),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "USE_TF": "0",
            "PYTHONUNBUFFERED": "1",
        })
        if self.api_key is not None:
            env["LAYA_API_KEY"] = self.api_key
        if self.max_concurrent is not None:
            env["LAYA_MAX_CONCURRENT"] = str(self.max_concurrent)
        if self.jev_strict:
            env["LAYA_JEV_STRICT"] = "1"
        env.update(self.extra_env)
        return env

    def _redact(self, text: str) -> str:
        return text.replace(self.api_key, REDACTED) if self.api_key else text

    def _failure(self, what: str) -> RuntimeError:
        tail = self.log[-_LOG_TAIL_CHARS:]
        return RuntimeError("laya-serve on %s %s; log tail:\n%s" % (self.checkpoint_dir, what, tail))

    def _wait_healthy(self) -> None:
        proc = self._proc
        assert proc is not None
        try:
            wait_ready(self.url, path="/health", timeout_s=self.startup_timeout_s,
                       alive=lambda: proc.poll() is None, what="laya-serve")
        except NotReady:
            code = proc.poll()
            if code is None:
                raise self._failure("was not healthy within %.1f s" % self.startup_timeout_s) from None
            if "address already in use" in self.log.lower():
                raise _PortTaken() from None
            raise self._failure("exited with status %d before it was healthy" % code) from None

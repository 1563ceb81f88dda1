"""Run an ASGI app with uvicorn on a loopback socket in a background thread.

Tests, benchmarks and the plugin's `laya_reference_server` fixture need a real server on a real
port inside the current process; this is the one way they all start and stop it.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

__all__ = ["ServerThread", "listen_tcp"]


def listen_tcp(host: str, port: int) -> socket.socket:
    """A listening TCP socket whose accepted connections get TCP_NODELAY from asyncio.

    `socket.create_server` leaves `proto` 0, and asyncio sets TCP_NODELAY only on sockets whose
    proto is IPPROTO_TCP. Without it, uvicorn's two writes per response (head, then body) meet
    Nagle's algorithm and the client's delayed ACK: about 40 ms on every keep-alive response.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


class ServerThread:
    """`with ServerThread(app) as server: server.url` — bound to 127.0.0.1 on a free port."""

    def __init__(self, app: Any, *, host: str = "127.0.0.1", port: int = 0, startup_timeout_s: float = 30.0) -> None:
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(f"ServerThread binds loopback addresses only, not {host!r}")
        self.app = app
        self._sock = listen_tcp("127.0.0.1" if host == "localhost" else host, port)
        bound_host, bound_port = self._sock.getsockname()[:2]
        self.url = f"http://{'[' + bound_host + ']' if ':' in bound_host else bound_host}:{bound_port}"
        self._startup_timeout_s = startup_timeout_s
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> "ServerThread":
        """Start serving and wait until uvicorn accepts connections; idempotent."""
        if self._thread is not None:
            return self
        import uvicorn

        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]},
                                        name="reference-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + self._startup_timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the server on {self.url} did not start within {self._startup_timeout_s:g} s")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        self._sock.close()

    def __enter__(self) -> "ServerThread":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

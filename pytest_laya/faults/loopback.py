"""Loopback addresses only: the check every server of the kit binds through, and ports for tests."""

from __future__ import annotations

import ipaddress
import socket
import threading

__all__ = [
    "check_loopback_host",
    "closed_loopback_url",
    "free_loopback_port",
]


def check_loopback_host(host: str) -> tuple[str, int]:
    """Validate that ``host`` is a loopback address; return (address, family)."""
    if not isinstance(host, str):
        raise TypeError(f"host must be a str, got {host!r}")
    candidate = "127.0.0.1" if host.lower() == "localhost" else host.strip("[]")
    try:
        address = ipaddress.ip_address(candidate)
    except ValueError:
        raise ValueError(
            f"ScriptedServer binds loopback addresses only; {host!r} is not an IP address or 'localhost'"
        ) from None
    if not address.is_loopback:
        raise ValueError(
            f"ScriptedServer binds loopback addresses only (127.0.0.0/8 or ::1), not {host!r}: "
            "a fault-injection server must never be reachable from the network"
        )
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    return str(address), family


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago.

    The kernel picks it (bind to port 0) and the socket is closed again, so another
    process may take it before the caller binds; fine for tests, not a reservation.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


_closed_port_lock = threading.Lock()
_closed_port_socket: socket.socket | None = None


def closed_loopback_url() -> str:
    """A URL on 127.0.0.1 where nothing listens: every connection is refused.

    The port is bound (but never listening) by a socket this process keeps open for its
    whole life, so no other socket can take the port and start listening there; that
    makes "connection refused" tests deterministic, unlike a port that is merely free.
    The same URL is returned on every call.
    """
    global _closed_port_socket
    with _closed_port_lock:
        if _closed_port_socket is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            _closed_port_socket = sock
        port = _closed_port_socket.getsockname()[1]
    return f"http://127.0.0.1:{port}"

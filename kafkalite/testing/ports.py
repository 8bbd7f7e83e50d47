"""Free loopback ports for test servers (ZooKeeper, brokers).

A port is found by binding 127.0.0.1:0 and letting the kernel pick. The socket is closed
before the port is handed out, so another process could in principle take it first; to at
least keep one process from handing the same port out twice (the kernel happily reuses a
just-released ephemeral port), every port returned is remembered for the life of the
process.
"""

from __future__ import annotations

import socket
import threading

LOOPBACK_HOST = "127.0.0.1"
# Attempts to find a port not yet handed out by this process before giving up.
_ATTEMPTS_MAX = 1000

_lock = threading.Lock()
_handed_out: set[int] = set()


def _bind_ephemeral() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # No SO_REUSEADDR: we want a port nobody is using, including TIME_WAIT leftovers.
        sock.bind((LOOPBACK_HOST, 0))
        return sock.getsockname()[1]


def free_port() -> int:
    """One free TCP port on 127.0.0.1 that this process has not handed out before."""
    with _lock:
        for _ in range(_ATTEMPTS_MAX):
            port = _bind_ephemeral()
            if port not in _handed_out:
                _handed_out.add(port)
                return port
    raise RuntimeError(f"no free loopback port after {_ATTEMPTS_MAX} attempts")


def free_ports(count: int) -> list[int]:
    """`count` distinct free TCP ports on 127.0.0.1."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    return [free_port() for _ in range(count)]

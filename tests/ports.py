"""Loopback ports for the tests' and benchmarks' clusters."""

from __future__ import annotations

import socket
from typing import List


def free_loopback_ports(count: int) -> List[int]:
    """Ports free on 127.0.0.1 right now; callers retry if one is taken before use."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()

"""Holds a private network namespace for a local cluster: `python -m estimator_mnist.supervise.netns_holder`.

It enters a new network namespace, brings up its loopback interface, prints
"ready" (or "error REASON") and then lives until its stdin closes or its
parent dies; the launcher's tasks join the namespace through
/proc/<this pid>/ns/net (see supervise/private_network.py).
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import socket
import struct
import sys

from estimator_mnist.supervise.process_group import die_with_parent
from estimator_mnist.supervise.private_network import CLONE_NEWNET

SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1


def bring_up_loopback() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH", fcntl.ioctl(s, SIOCGIFFLAGS, request)[:18])[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | IFF_UP, b""))


def main() -> int:
    die_with_parent()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        print("error", os.strerror(ctypes.get_errno()), flush=True)
        return 1
    bring_up_loopback()
    print("ready", flush=True)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher ends it; Ctrl-C on the terminal must not
    sys.stdin.read()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The fault file system's process: mounts FaultOperations (tests/fault_fs/operations.py) in the foreground and
takes rules on a Unix socket, one JSON object a line, answering "ok" or "error: why" once the rule is in force:

    {"cmd": "inject", "op": "stat", "glob": "model/model.ckpt-200*", "errno": 116, "seconds": 10}
    {"cmd": "lag", "glob": "model", "on": true}
    {"cmd": "clear"}
    {"cmd": "failed"}        (answers "ok N": the operations failed so far)

It exits (and libfuse unmounts) on SIGTERM, on `fusermount3 -u`, and when its parent dies (PR_SET_PDEATHSIG), so
a test runner killed mid-test leaves no live file system behind.

    python -m tests.fault_fs.server BACKING MOUNTPOINT CONTROL_SOCKET ATTR_TIMEOUT ENTRY_TIMEOUT
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import sys
import threading

import mfusepy

from tests.fault_fs.operations import FaultOperations, Faults

PR_SET_PDEATHSIG = 1


def _answer(faults: Faults, line: str) -> str:
    try:
        command = json.loads(line)
        if command["cmd"] == "inject":
            faults.add(command["op"], command["glob"], int(command["errno"]), float(command["seconds"]))
        elif command["cmd"] == "lag":
            faults.lag(command["glob"], bool(command["on"]))
        elif command["cmd"] == "clear":
            faults.clear()
        elif command["cmd"] == "failed":
            return f"ok {faults.failed}"
        else:
            return f"error: unknown command {command['cmd']!r}"
    except (ValueError, KeyError, TypeError) as error:
        return f"error: {error}"
    return "ok"


def _serve_control(listener: socket.socket, faults: Faults) -> None:
    while True:
        connection, _ = listener.accept()
        with connection, connection.makefile("rw", encoding="utf-8") as stream:
            for line in stream:
                stream.write(_answer(faults, line) + "\n")
                stream.flush()


def main(argv) -> int:
    backing, mountpoint, control, attr_timeout, entry_timeout = argv
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    faults = Faults()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(control)
    listener.listen(4)
    threading.Thread(target=_serve_control, args=(listener, faults), daemon=True).start()
    # NFS-like caching: the kernel keeps names and attributes for these many seconds (NFS's actimeo), so a
    # second mount sees this one's changes late; negative look-ups are not cached (NFS revalidates them).
    mfusepy.FUSE(FaultOperations(backing, faults), mountpoint, foreground=True, nothreads=False,
                 fsname=f"faultfs:{os.path.basename(backing)}", attr_timeout=float(attr_timeout),
                 entry_timeout=float(entry_timeout), negative_timeout=0.0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

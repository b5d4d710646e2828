"""Bounds a trainer's wait for its cluster to form: `python -m estimator_mnist.startup_watchdog PID SECS TASK PEERS`.

A MultiWorkerMirrored task with a missing peer was seen waiting for ever in
the strategy's set-up (TF 2.15), and Estimator waits up to two hours for a
session by default. The trainer starts this helper with a pipe on its stdin
and closes the pipe once its session exists. If that has not happened after
SECS seconds, the helper probes every peer's address, logs which ones do not
answer, and ends the trainer. It is a process of its own because while TF
sets up the cluster it holds the GIL, so no thread of the trainer could act.
No TensorFlow.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
from typing import List, Tuple


def missing_peers(peers: List[Tuple[str, str]], timeout: float = 3.0) -> List[str]:
    """'role:index (host:port)' of every peer whose port does not accept a connection."""
    missing = []
    for name, address in peers:
        host, _, port = address.rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
        except OSError:
            missing.append(f"{name} ({address})")
    return missing


def reason(missing: List[str]) -> str:
    if missing:
        return (f"these peers do not answer: {', '.join(missing)}; start them, or check their host:port in the "
                "cluster file and the firewall")
    return "every peer answers but the cluster did not form; check that all tasks use the same cluster file"


def main(argv: List[str]) -> int:
    parent, timeout, task, peers = int(argv[0]), float(argv[1]), argv[2], json.loads(argv[3])
    if select.select([sys.stdin], [], [], timeout)[0]:
        return 0  # the cluster formed (the task closed our stdin), or the task is gone
    print(f"[estimator-mnist] task {task}: no training session after training.session_creation_timeout_secs="
          f"{timeout:g} s: {reason(missing_peers(peers))}; stopping this task", file=sys.stderr, flush=True)
    os.kill(parent, signal.SIGKILL)  # MultiWorkerMirrored tasks ignore SIGTERM
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""A task's peers: who they are (from TF_CONFIG), which of them answer, and which one an error names.

Used when something went wrong, to say which peer to look at: the startup
watchdog (the session never formed) and the mapping of TensorFlow's transient
errors to the retryable exit code. No TensorFlow.
"""

from __future__ import annotations

import re
import socket
from typing import List, Optional, Tuple

from estimator_mnist.config import timeouts

# How TensorFlow names a task in its errors, e.g. /job:worker/replica:0/task:1.
_TF_TASK = re.compile(r"/job:(?P<job>[a-z]+)/replica:\d+/task:(?P<task>\d+)")
# Lines of a TensorFlow error that say what happened, before its generic header and the graph traceback.
_CAUSE = re.compile(r"timed out|heartbeat|unavailable|connect|socket|preempt|deadline|aborted", re.IGNORECASE)
_NOISE = ("Graph execution error", "Detected at node", "File ", "[[", "Node:", "Original stack trace")


def peers_of(tf_config: Optional[dict], me: str) -> List[Tuple[str, str]]:
    """('role:index', 'host:port') of every task in the TF_CONFIG cluster but `me`."""
    cluster = (tf_config or {}).get("cluster", {})
    return [(f"{role}:{index}", address) for role, addresses in cluster.items()
            for index, address in enumerate(addresses) if f"{role}:{index}" != me]


def missing_peers(peers: List[Tuple[str, str]], timeout: float = timeouts.PEER_PROBE_SECS) -> List[str]:
    """'role:index (host:port)' of every peer whose port does not accept a connection."""
    missing = []
    for name, address in peers:
        host, _, port = address.rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
        except OSError:
            missing.append(f"{name} ({address})")
    return missing


def named_in(message: str, peers: List[Tuple[str, str]]) -> List[str]:
    """The peers a TensorFlow error message names, as 'role:index (host:port)'."""
    addresses = dict(peers)
    names = {f"{m['job']}:{m['task']}" for m in _TF_TASK.finditer(message)}
    return [f"{name} ({addresses[name]})" for name in sorted(names) if name in addresses]


def cause_of(message: str) -> str:
    """The line of a TensorFlow error message that says what went wrong (TF 2.15 puts a generic
    'Graph execution error:' and a Python traceback of the graph first)."""
    lines = [line.strip() for line in message.splitlines() if line.strip() and not line.startswith(" ")]
    lines = [line for line in lines if not line.startswith(_NOISE)] or lines or [""]
    return next((line for line in lines if _CAUSE.search(line)), lines[0])[:300]


def describe_missing(missing: List[str]) -> str:
    if missing:
        return (f"these peers do not answer: {', '.join(missing)}; start them, or check their host:port in the "
                "cluster file, the network and the firewall")
    return "every peer answers; check that all tasks use the same cluster file"

"""The ports of a Slurm step's tasks: each task holds its own port on its node and the tasks tell each other.

Two jobs on one node must never meet on a port, whatever their ids, and a port must never end a job. So each
task that runs a TensorFlow server takes its port from the kernel and holds it, bound, until the task ends:
- where slurm.conf reserves ports (MpiParams=ports=...), the k-th task on a node takes the k-th of the step's
  reserved ports (SLURM_STEP_RESV_PORTS, held by no other step on its node: Slurm 22.05,
  src/slurmctld/port_mgr.c); should another process hold it anyway, the task takes a free one instead,
  within the same step;
- elsewhere (the common configuration) the kernel chooses a free one (bind to port 0), which no other bound
  socket on the node holds: no hash, no collision.
The socket is bound with SO_REUSEPORT and never listens; the task's TensorFlow server binds the same port
with SO_REUSEPORT too (TF_GRPC_REUSE_PORT=1, TF 2.15's grpc_server_lib.cc, set in the task's plan), so no
other process can take the port between this choice and TensorFlow's bind. Each task then publishes its
port in model_dir (slurm_records.py) and waits, at most SLURM_PORTS_WAIT_SECS, for its peers'; the evaluator,
which has no server, only reads them. No TensorFlow.
"""

from __future__ import annotations

import errno
import socket
import time
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from estimator_mnist.config import timeouts
from estimator_mnist.errors import RetryableFailure
from estimator_mnist.model_files import slurm_records

PORT_KIND = "port"
CHOICES = 5  # binds tried before giving up: a reserved port, then the kernel's choices
POLL_SECS = 0.2
WAIT_SECS = timeouts.SLURM_PORTS_WAIT_SECS
_HELD: List[socket.socket] = []  # the ports this process holds, until it ends

ERR_NO_PORT = ("task {task} on node {node} could not bind a port for its TensorFlow server ({reason}); exiting with "
               "200 (retryable): the step's rerun tries again")
ERR_PEERS = ("task {task}: the step's ports of {missing} were not published in {where} within "
             "SLURM_PORTS_WAIT_SECS={secs:g} s (their tasks did not start, or model_dir is not on storage every node "
             "sees); exiting with 200 (retryable)")


def _bind(port: int) -> socket.socket:
    """A socket bound to `port` (0: the kernel's choice) on every address, shareable with TensorFlow's server."""
    for family, address in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 here
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # IPv4 too, as gRPC's wildcard
            sock.bind((address, port))
            return sock
        except OSError as exc:
            sock.close()
            if family == socket.AF_INET6 and exc.errno in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL):
                continue
            raise
    raise OSError(errno.EAFNOSUPPORT, "no IPv4 or IPv6 socket")


def listening(port: int) -> bool:
    """Whether a process listens on `port` here (a connection to it is accepted); the held socket never listens."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def hold_port(reserved: Optional[int], task: str, node: str, listening: Callable[[int], bool] = listening,
              bind: Callable[[int], socket.socket] = _bind) -> Tuple[int, Optional[str]]:
    """(the port this task holds from now on, a note when the reserved port was taken and another chosen)."""
    note, reason = None, "no attempt"
    for attempt in range(CHOICES):
        wanted = reserved if reserved is not None and attempt == 0 else 0
        try:
            sock = bind(wanted)
        except OSError as exc:
            reason = f"port {wanted or 'chosen by the kernel'}: {exc.strerror or exc}"
            if wanted:
                note = f"reserved port {wanted} on {node} is taken by another process ({reason}); chose another"
            continue
        port = sock.getsockname()[1]
        if wanted and listening(port):  # a listener sharing the port (SO_REUSEPORT, same user): not ours
            sock.close()
            reason = f"port {wanted}: another process listens there"
            note = f"reserved port {wanted} on {node} is taken by another process (listening); chose another"
            continue
        _HELD.append(sock)
        return port, (f"{note}: {port}" if note else None)
    raise RetryableFailure(ERR_NO_PORT.format(task=task, node=node, reason=reason))


def agree(model_dir: str, job_id: str, key: str, rank: int, own: Optional[Tuple[str, int]],
          server_ranks: Iterable[int], task: str, secs: float = WAIT_SECS, sleep=time.sleep,
          clock=time.monotonic) -> Dict[int, Tuple[str, int]]:
    """Publishes this task's (node, port) (None: it has no server) and returns every server rank's, once all
    of this step (`key`) are published."""
    if own is not None:
        slurm_records.publish(model_dir, job_id, PORT_KIND, rank,
                              {"step": key, "rank": rank, "node": own[0], "port": own[1], "time": time.time()})
    wanted, found = sorted(server_ranks), {}
    deadline = clock() + secs
    while True:
        for peer in wanted:
            if peer not in found:
                record = slurm_records.read_published(model_dir, job_id, PORT_KIND, peer)
                if record and record.get("step") == key and isinstance(record.get("port"), int):
                    found[peer] = (record["node"], record["port"])
        if len(found) == len(wanted):
            return found
        if clock() >= deadline:
            missing = ", ".join(f"rank {r}" for r in wanted if r not in found)
            where = slurm_records.job_dir(model_dir, job_id)
            raise RetryableFailure(ERR_PEERS.format(task=task, missing=missing, where=where, secs=secs))
        sleep(POLL_SECS)

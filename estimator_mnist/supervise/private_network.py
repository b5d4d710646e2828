"""A private network namespace for a local cluster. No TensorFlow.

TF's gRPC servers listen on every interface and accept anyone who reaches the
port, with no authentication. When every task of the cluster is on this
machine's loopback, the launcher starts them inside one network namespace of
their own that has only a loopback interface: they reach each other as
before, and nothing outside the namespace (another machine, another
container, another namespace of this machine) can reach their ports.

The namespace is held by a helper process (supervise/netns_holder.py); each task joins it with
setns(2) between fork and exec, so the launcher itself stays in the
machine's network.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

from estimator_mnist.errors import UsageError
from estimator_mnist.plan.hosts import LOOPBACK_HOSTS, all_on_loopback
from estimator_mnist.storage import is_bucket


CLONE_NEWNET = 0x40000000  # setns(2)/unshare(2): the network namespace

ERR_PRIVATE_NOT_LOOPBACK = ("{file}: launcher.network is private but task {task} is on host '{host}', which a private "
                            "namespace cannot reach; use localhost for every task, or launcher.network: auto or host")
ERR_PRIVATE_BUCKET = ("{file}: launcher.network is private but model_dir {model_dir} is a bucket, which a namespace "
                      "with only loopback cannot reach; set launcher.network: auto or host (and firewall the task "
                      "ports), or give a local model_dir")
ERR_PRIVATE_UNAVAILABLE = ("{file}: launcher.network is private but this system does not allow a private network "
                           "namespace ({reason}); run as a user with CAP_SYS_ADMIN, or set launcher.network: host and "
                           "firewall the task ports")

PROTECTED = ("network: the tasks run in a private network namespace with only loopback; no other machine or "
             "network namespace can reach their ports")
UNPROTECTED = ("network: WARNING: the tasks use this machine's network ({why}). TensorFlow's servers accept anyone "
               "who reaches their ports, with no authentication: keep ports {ports} reachable only from the "
               "cluster's own hosts (firewall or private network)")

class PrivateNetwork:
    """The helper process that holds the namespace, and the way for a child to join it."""

    def __init__(self):
        self._holder = subprocess.Popen([sys.executable, "-m", "estimator_mnist.supervise.netns_holder"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        answer = self._holder.stdout.readline().strip()
        if answer != "ready":
            self.close()
            raise OSError(answer.removeprefix("error ").strip() or "the namespace helper exited")
        self._fd = os.open(f"/proc/{self._holder.pid}/ns/net", os.O_RDONLY)
        self._libc = ctypes.CDLL(None, use_errno=True)

    def join(self) -> None:
        """Runs in a child between fork and exec: move it into the namespace."""
        if self._libc.setns(self._fd, CLONE_NEWNET) != 0:
            os._exit(126)  # never run a task unprotected when protection was promised

    def close(self) -> None:
        if getattr(self, "_fd", None) is not None:
            os.close(self._fd)
            self._fd = None
        if self._holder.poll() is None:
            self._holder.send_signal(signal.SIGKILL)
            self._holder.wait()


def choose_network(config, file: str):
    """(PrivateNetwork or None, the line saying which protection is in force)."""
    mode = config.launcher.network
    cluster = config.cluster
    ports = ", ".join(str(cluster.address(t).port) for t in cluster.server_tasks())
    if mode == "host":
        return None, UNPROTECTED.format(why="launcher.network: host", ports=ports)
    if not all_on_loopback(config.cluster):
        if mode == "private":
            task = next(t for t in cluster.tasks() if cluster.host(t) not in LOOPBACK_HOSTS)
            raise UsageError(ERR_PRIVATE_NOT_LOOPBACK.format(file=file, task=task, host=cluster.host(task)))
        return None, UNPROTECTED.format(why="some tasks use a non-loopback host name", ports=ports)
    if is_bucket(config.model_dir):  # the tasks reach the bucket over the network: a loopback-only one cuts it off
        if mode == "private":
            raise UsageError(ERR_PRIVATE_BUCKET.format(file=file, model_dir=config.model_dir))
        return None, UNPROTECTED.format(why="model_dir is a bucket, which the tasks reach over it", ports=ports)
    try:
        return PrivateNetwork(), PROTECTED
    except OSError as exc:
        if mode == "private":
            raise UsageError(ERR_PRIVATE_UNAVAILABLE.format(file=file, reason=exc)) from None
        return None, UNPROTECTED.format(why=f"a private network namespace is not allowed here: {exc}", ports=ports)


"""This machine's side of a cluster: which hosts are local, which ports are free. No TensorFlow."""

from __future__ import annotations

import errno
import socket
from typing import List

from estimator_mnist.config import ClusterConfig
from estimator_mnist.errors import UsageError

# Every spelling of loopback a cluster file may use; these tasks can share a private network namespace.
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
# Names that bind on this machine without a lookup (the wildcards too).
_LOCAL_NAMES = LOOPBACK_HOSTS | {"0.0.0.0", "::"}

ERR_PORT_BUSY = "{file}: port {port} of task {task} ({address}) is already in use on this machine; stop the process that holds it or give {task} another port in the YAML"
ERR_NOT_LOCAL = "{file}: task {task} is on host '{host}', which is not this machine; 'launch' starts local tasks only: run 'estimator-mnist train --cluster {file} --task {task}' on '{host}', or change the host to localhost"


def same_machine(a: str, b: str) -> bool:
    return a == b or (a in LOOPBACK_HOSTS and b in LOOPBACK_HOSTS)


def all_on_loopback(cluster: ClusterConfig) -> bool:
    return all(cluster.host(task) in LOOPBACK_HOSTS for task in cluster.tasks())


def is_local_host(host: str) -> bool:
    """True when `host` names this machine: we can bind one of its addresses."""
    if host in _LOCAL_NAMES or host in (socket.gethostname(), socket.getfqdn()):
        return True
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError):
        return False
    for family, _, _, _, sockaddr in infos:
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.bind((sockaddr[0], 0))
            return True
        except OSError:
            continue
    return False


def port_in_use(port: int) -> bool:
    """Whether a TF server could not listen on `port`.

    TF's gRPC server listens on every interface, so that is what we try.
    SO_REUSEADDR ignores sockets in TIME_WAIT (which gRPC can reuse too) but
    not a live listener.
    """
    for family, address in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind((address, port))
            return False
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            if family == socket.AF_INET6:
                continue  # no IPv6 on this machine: the IPv4 check decides.
            raise
    return False


def check_local(cluster: ClusterConfig, file: str) -> None:
    """Refuses clusters that 'launch' cannot start on this machine."""
    for task in cluster.tasks():
        host = cluster.host(task)
        if not is_local_host(host):
            raise UsageError(ERR_NOT_LOCAL.format(file=file, task=task, host=host))


def check_ports_free(cluster: ClusterConfig, file: str) -> None:
    for task in cluster.server_tasks():
        address = cluster.address(task)
        if port_in_use(address.port):
            raise UsageError(ERR_PORT_BUSY.format(file=file, port=address.port, task=task, address=address))

"""Tasks, TF_CONFIG and the checks a cluster needs before anything starts.

Pure functions only: `build_tf_config` returns a dict and never touches
os.environ; the caller serialises it when it starts a process. No TensorFlow.
"""

from __future__ import annotations

import copy
import errno
import json
import re
import socket
from dataclasses import dataclass
from typing import Dict, List, Mapping

from .config import TRAINING_ROLES, ClusterConfig
from .errors import UsageError

ERR_TASK_FORMAT = "--task {got!r} is not TYPE:INDEX; use one of: {tasks}"
ERR_NO_SUCH_TASK = "{file}: there is no task {task} in this cluster; use one of: {tasks}"
ERR_TF_CONFIG_JSON = "TF_CONFIG is not valid JSON ({reason}); export it as printed by 'estimator-mnist tf-config', or pass --cluster FILE --task TYPE:INDEX"
ERR_TF_CONFIG_SHAPE = "TF_CONFIG {problem}; it needs {{\"cluster\": {{...}}, \"task\": {{\"type\": ..., \"index\": ...}}}} as printed by 'estimator-mnist tf-config'"
ERR_NO_TF_CONFIG = "train needs --cluster FILE --task TYPE:INDEX, or a TF_CONFIG environment variable (as Kubeflow's TFJob sets it)"
ERR_PORT_BUSY = "{file}: port {port} of task {task} ({address}) is already in use on this machine; stop the process that holds it or give {task} another port in the YAML"
ERR_NOT_LOCAL = "{file}: task {task} is on host '{host}', which is not this machine; 'launch' starts local tasks only: run 'estimator-mnist train --cluster {file} --task {task}' on '{host}', or change the host to localhost"

ALL_ROLES = TRAINING_ROLES + ("evaluator",)
_TASK = re.compile(r"^(?P<type>[a-z]+):(?P<index>\d+)$")


@dataclass(frozen=True, order=True)
class TaskId:
    type: str
    index: int

    def __str__(self) -> str:
        return f"{self.type}:{self.index}"

    @property
    def is_evaluator(self) -> bool:
        return self.type == "evaluator"


def cluster_tasks(cluster: ClusterConfig) -> List[TaskId]:
    """Every task of the cluster, in the order the launcher starts them (ps first)."""
    order = ("ps", "chief", "worker")
    tasks = [TaskId(role, i) for role in order for i in range(len(cluster.addresses(role)))]
    if cluster.evaluator is not None:
        tasks.append(TaskId("evaluator", 0))
    return tasks


def task_host(cluster: ClusterConfig, task: TaskId) -> str:
    if task.is_evaluator:
        return cluster.evaluator
    return cluster.addresses(task.type)[task.index].host


def chief_task(cluster: ClusterConfig) -> TaskId:
    """The task that saves checkpoints: the chief, or worker 0 when there is none."""
    return TaskId("chief", 0) if cluster.chief else TaskId("worker", 0)


def parse_task(text: str, cluster: ClusterConfig, file: str) -> TaskId:
    valid = ", ".join(str(t) for t in cluster_tasks(cluster))
    match = _TASK.match(text.strip()) if isinstance(text, str) else None
    if not match:
        raise UsageError(ERR_TASK_FORMAT.format(got=text, tasks=valid))
    task = TaskId(match["type"], int(match["index"]))
    if task not in cluster_tasks(cluster):
        raise UsageError(ERR_NO_SUCH_TASK.format(file=file, task=task, tasks=valid))
    return task


def _training_cluster(cluster: ClusterConfig) -> Dict[str, List[str]]:
    return {role: [str(a) for a in cluster.addresses(role)] for role in TRAINING_ROLES if cluster.addresses(role)}


def estimator_tf_config(tf_config: Mapping) -> dict:
    """Rewrites any TF_CONFIG (ours or Kubeflow's) into the layout that works for every role.

    - The evaluator is never part of the training cluster: MultiWorkerMirrored
      workers must not wait for it, and it must not place ops on them.
    - Estimator's RunConfig insists on a `chief` in the cluster even for the
      evaluator, which never contacts it. For a worker-only cluster the
      evaluator therefore sees worker 0 as the chief (worker 0 is the chief of
      a worker-only MultiWorkerMirrored cluster anyway).
    """
    result = copy.deepcopy(dict(tf_config))
    cluster = {k: list(v) for k, v in dict(result.get("cluster") or {}).items() if k != "evaluator"}
    task = dict(result.get("task") or {})
    if task.get("type") == "evaluator" and cluster and "chief" not in cluster and cluster.get("worker"):
        workers = cluster.pop("worker")
        cluster["chief"] = workers[:1]
        if workers[1:]:
            cluster["worker"] = workers[1:]
    result["cluster"] = cluster
    result["task"] = task
    return result


def build_tf_config(cluster: ClusterConfig, task: TaskId) -> dict:
    """The TF_CONFIG dict for one task of the YAML cluster."""
    return estimator_tf_config({"cluster": _training_cluster(cluster), "task": {"type": task.type, "index": task.index}})


def parse_tf_config_env(text: str) -> dict:
    """Validates a TF_CONFIG string from the environment (e.g. set by Kubeflow's TFJob)."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise UsageError(ERR_TF_CONFIG_JSON.format(reason=exc)) from None
    if not isinstance(value, dict):
        raise UsageError(ERR_TF_CONFIG_SHAPE.format(problem="is not a JSON object"))
    task = value.get("task")
    if not isinstance(task, dict) or task.get("type") not in ALL_ROLES + ("master",):
        raise UsageError(ERR_TF_CONFIG_SHAPE.format(problem=f"has no valid task.type (one of {', '.join(ALL_ROLES)})"))
    index = task.get("index", 0)
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise UsageError(ERR_TF_CONFIG_SHAPE.format(problem=f"has task.index {index!r}, not a whole number >= 0"))
    clusters = value.get("cluster")
    if not isinstance(clusters, dict) or not any(clusters.get(r) for r in ("chief", "worker", "master")):
        raise UsageError(ERR_TF_CONFIG_SHAPE.format(problem="has no cluster with a chief or workers"))
    role = task["type"]
    if role != "evaluator" and index >= len(clusters.get(role) or []):
        raise UsageError(ERR_TF_CONFIG_SHAPE.format(problem=f"names task {role}:{index}, which its cluster does not list"))
    return estimator_tf_config(value)


def is_local_host(host: str) -> bool:
    """True when `host` names this machine: we can bind one of its addresses."""
    if host in ("localhost", "127.0.0.1", "::1", "0.0.0.0", "::"):
        return True
    if host in (socket.gethostname(), socket.getfqdn()):
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


def free_loopback_ports(count: int) -> List[int]:
    """Ports free on 127.0.0.1 right now, for tests and benchmarks; callers retry if one is taken before use."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


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
    for task in cluster_tasks(cluster):
        host = task_host(cluster, task)
        if not is_local_host(host):
            raise UsageError(ERR_NOT_LOCAL.format(file=file, task=task, host=host))


def check_ports_free(cluster: ClusterConfig, file: str) -> None:
    for role, index, address in cluster.training_tasks():
        if port_in_use(address.port):
            task = TaskId(role, index)
            raise UsageError(ERR_PORT_BUSY.format(file=file, port=address.port, task=task, address=address))

"""`train` under srun: its role, its index and its peers from Slurm's step environment and the YAML's roles.

The YAML's `cluster:` gives the roles and their counts; its hosts are replaced by the step's nodes. The
roles are laid over the step's ranks in ROLE_ORDER (chief, evaluator, workers, ps), and the ranks over the
nodes in block distribution, Slurm's default: SLURM_STEP_NODELIST in Slurm's order (never sorted),
SLURM_STEP_TASKS_PER_NODE tasks on each. A task checks that its computed node is SLURMD_NODENAME, so a step
started with another distribution stops with one line instead of forming a wrong cluster.

Ports: the k-th task on a node listens on the k-th of the step's reserved ports, SLURM_STEP_RESV_PORTS.
The batch script asks for them (srun --resv-ports) where the cluster reserves ports (slurm.conf's
MpiParams=ports=LOW-HIGH): slurmctld then gives each step ports that no other step holds on any of its
nodes, the same numbers on every node (Slurm 22.05, src/slurmctld/port_mgr.c, resv_port_alloc), so every
task computes its peers' ports alone, two jobs sharing a node never take the same ones whatever their ids,
and a rerun's step gets its own. Where the cluster reserves none, a step's ports come from a hash of
(job id, requeue count, step id) into PORT_SLOTS slots of PORT_STRIDE ports, below Linux's ephemeral ports
(32768-60999): a rerun chooses again, and two jobs on one node rarely meet. Either way each task checks that
its own port is free before TensorFlow starts: a port taken is exit 200 (retryable), never permanent, and
the rerun's step chooses again. No TensorFlow.
"""

from __future__ import annotations

import socket
import zlib
from dataclasses import dataclass
from typing import Callable, List, Mapping, Optional, Tuple

from estimator_mnist.config import TaskId
from estimator_mnist.config.cluster import parse_cluster
from estimator_mnist.errors import RetryableFailure, UsageError
from estimator_mnist.plan.hosts import port_in_use
from estimator_mnist.plan.resolved_task import TaskSource
from estimator_mnist.plan.slurm_hostlist import expand_hostlist, expand_tasks_per_node

ROLE_ORDER = ("chief", "evaluator", "worker", "ps")  # the evaluator beside the chief: the trainers spread out
PORT_BASE, PORT_SLOTS, PORT_STRIDE = 16384, 512, 32  # ports 16384-32767
STEP_VARS = ("SLURM_STEP_NODELIST", "SLURM_PROCID")  # both set in every task srun starts

ERR_NO_CLUSTER = ("{file}: under srun, train takes the roles and their counts from the YAML's cluster section, and "
                  "this file has none; add e.g. cluster: {{chief: ['localhost:2222'], worker: ['localhost:2223']}}")
ERR_VAR = "{var} is {got!r}, not {expected}; run train as one task of an srun step, or pass --task TYPE:INDEX"
ERR_COUNT = ("{file}: the cluster has {count} tasks ({tasks}) but the Slurm step has {step} "
             "(SLURM_STEP_NUM_TASKS); start it with srun --ntasks={count}, as 'estimator-mnist slurm' writes it")
ERR_LAYOUT = ("SLURM_STEP_TASKS_PER_NODE {per_node!r} gives {counts} node(s) and {total} task(s), but "
              "SLURM_STEP_NODELIST {nodes!r} lists {names} node(s) and SLURM_STEP_NUM_TASKS is {step}")
ERR_DISTRIBUTION = ("Slurm started rank {rank} on {actual}, but block distribution puts it on {computed}: start "
                    "the step with srun --distribution=block (the default), as 'estimator-mnist slurm' writes it")
ERR_RESOLVE = ("node {node} (task {task}) does not resolve to an address ({reason}), so TensorFlow's gRPC cannot "
               "reach it; make the Slurm node names resolve on every node (DNS or /etc/hosts)")
ERR_PORTS = ("node {node} runs {count} tasks of this step, more than the {stride} ports a job has per node; "
             "spread the step over more nodes")
ERR_RESV = ("SLURM_STEP_RESV_PORTS {ports!r} reserves {count} port(s), but node {node} runs {tasks} tasks of this "
            "step; start the step with srun --resv-ports={tasks} or more, as 'estimator-mnist slurm' writes it")
ERR_PORT_TAKEN = ("port {port} on node {node} (task {task}) is taken by another process ({how}); exiting with 200 "
                  "(retryable) before TensorFlow starts: the step's rerun chooses its ports again")


@dataclass(frozen=True)
class SlurmStep:
    """The facts of one srun task, read from its environment."""

    job_id: int
    step_id: str
    rank: int
    node: str                     # SLURMD_NODENAME: where this task runs
    nodes: Tuple[str, ...]        # the step's nodes, in Slurm's order
    tasks_per_node: Tuple[int, ...]
    cpus_per_task: Optional[int]  # SLURM_CPUS_PER_TASK, set by --cpus-per-task
    gpus_by_slurm: bool           # Slurm set CUDA_VISIBLE_DEVICES to this task's GPUs (GRES)
    resv_ports: Tuple[int, ...] = ()  # SLURM_STEP_RESV_PORTS, ascending: the same on every node of the step
    restarts: int = 0             # SLURM_RESTART_COUNT: the job's requeues so far

    def rank_nodes(self) -> List[Tuple[str, int]]:
        """(node, position on that node) of each rank, in block distribution."""
        return [(node, k) for node, count in zip(self.nodes, self.tasks_per_node) for k in range(count)]


def in_slurm_step(environ: Mapping[str, str]) -> bool:
    """Whether this process is a task of an srun step (the batch script itself is not)."""
    return all(environ.get(var) for var in STEP_VARS)


def _number(environ: Mapping[str, str], var: str, default: Optional[str] = None) -> int:
    text = environ.get(var, default)
    if text is None or not text.strip().isdigit():
        raise UsageError(ERR_VAR.format(var=var, got=text, expected="a whole number"))
    return int(text)


def read_step(environ: Mapping[str, str]) -> SlurmStep:
    """The step's facts; one line (UsageError) for a variable that is missing, malformed or contradicts another."""
    nodes = expand_hostlist(environ.get("SLURM_STEP_NODELIST", ""))
    per_node = environ.get("SLURM_STEP_TASKS_PER_NODE") or environ.get("SLURM_TASKS_PER_NODE", "")
    counts = expand_tasks_per_node(per_node)
    step_tasks = _number(environ, "SLURM_STEP_NUM_TASKS", str(sum(counts)))
    if len(counts) != len(nodes) or sum(counts) != step_tasks:
        raise UsageError(ERR_LAYOUT.format(per_node=per_node, counts=len(counts), total=sum(counts),
                                           nodes=environ.get("SLURM_STEP_NODELIST"), names=len(nodes),
                                           step=step_tasks))
    rank = _number(environ, "SLURM_PROCID")
    if rank >= step_tasks:
        raise UsageError(ERR_VAR.format(var="SLURM_PROCID", got=str(rank),
                                        expected=f"a rank below the step's {step_tasks} tasks"))
    node = environ.get("SLURMD_NODENAME") or ""
    if not node:
        raise UsageError(ERR_VAR.format(var="SLURMD_NODENAME", got=None, expected="the name of this task's node"))
    cpus = environ.get("SLURM_CPUS_PER_TASK")
    gpus = bool(environ.get("CUDA_VISIBLE_DEVICES") is not None
                and any(environ.get(v) for v in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "SLURM_GPUS_PER_TASK")))
    return SlurmStep(job_id=_number(environ, "SLURM_JOB_ID"), step_id=environ.get("SLURM_STEP_ID", "?"), rank=rank,
                     node=node, nodes=tuple(nodes), tasks_per_node=tuple(counts),
                     cpus_per_task=_number(environ, "SLURM_CPUS_PER_TASK") if cpus else None, gpus_by_slurm=gpus,
                     resv_ports=_reserved(environ.get("SLURM_STEP_RESV_PORTS") or ""),
                     restarts=_number(environ, "SLURM_RESTART_COUNT", "0"))


def _reserved(text: str) -> Tuple[int, ...]:
    """SLURM_STEP_RESV_PORTS ("12000-12002", "12000,12005", "12000-12001,12007"), ascending."""
    ports = []
    for part in filter(None, text.split(",")):
        low, _, high = part.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            raise UsageError(ERR_VAR.format(var="SLURM_STEP_RESV_PORTS", got=text,
                                            expected="ports and ranges such as 12000-12002,12005"))
        ports += range(int(low), int(high or low) + 1)
    return tuple(sorted(ports))


def ordered_tasks(tasks: List[TaskId]) -> List[TaskId]:
    """The cluster's tasks in the order they take the ranks: ROLE_ORDER, then by index."""
    return sorted(tasks, key=lambda t: (ROLE_ORDER.index(t.type), t.index))


def step_port(step: SlurmStep, position: int) -> int:
    """The port of the task at `position` on its node, in `step`: its reserved port, else its hashed slot's."""
    if step.resv_ports:
        return step.resv_ports[position]
    slot = zlib.crc32(f"{step.job_id}.{step.restarts}.{step.step_id}".encode()) % PORT_SLOTS
    return PORT_BASE + slot * PORT_STRIDE + position


def _resolve(node: str, task: TaskId, resolver: Callable) -> None:
    # TensorFlow's gRPC resolves a target's host through the system resolver (getaddrinfo, /etc/hosts
    # included) for a TCP connection; ask it the same question before TensorFlow starts.
    try:
        resolver(node, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise UsageError(ERR_RESOLVE.format(node=node, task=task, reason=exc)) from None


def step_cluster(step: SlurmStep, tasks: List[TaskId], file: str,
                 resolver: Callable = socket.getaddrinfo) -> Tuple[dict, TaskId, dict]:
    """(the YAML cluster section on the step's nodes, this task, each task's node)."""
    order = ordered_tasks(tasks)
    if len(order) != len(step.rank_nodes()):
        raise UsageError(ERR_COUNT.format(file=file, count=len(order), tasks=", ".join(map(str, order)),
                                          step=len(step.rank_nodes())))
    placed = dict(zip(order, step.rank_nodes()))
    for node, count in zip(step.nodes, step.tasks_per_node):
        if step.resv_ports and count > len(step.resv_ports):
            raise UsageError(ERR_RESV.format(ports=",".join(map(str, step.resv_ports)), count=len(step.resv_ports),
                                             node=node, tasks=count))
        if count > PORT_STRIDE:
            raise UsageError(ERR_PORTS.format(node=node, count=count, stride=PORT_STRIDE))
    computed = step.rank_nodes()[step.rank][0]
    if computed != step.node:
        raise UsageError(ERR_DISTRIBUTION.format(rank=step.rank, actual=step.node, computed=computed))
    cluster: dict = {}
    for task, (node, position) in placed.items():
        if task.is_evaluator:
            cluster["evaluator"] = node  # no server, so no port
            continue
        _resolve(node, task, resolver)
        cluster.setdefault(task.type, []).append(f"{node}:{step_port(step, position)}")
    return cluster, order[step.rank], {task: node for task, (node, _) in placed.items()}


def check_own_port(cluster: dict, task: TaskId, node: str, in_use: Callable[[int], bool]) -> None:
    """A port taken on this node is found before TensorFlow starts: 200, and the rerun chooses again."""
    if task.is_evaluator:
        return
    port = int(cluster[task.type][task.index].rsplit(":", 1)[1])
    try:
        taken, how = in_use(port), "listening"
    except OSError as exc:
        taken, how = True, exc.strerror or str(exc)
    if taken:
        raise RetryableFailure(ERR_PORT_TAKEN.format(port=port, node=node, task=task, how=how))


def from_slurm(data: dict, file: str, environ: Mapping[str, str], resolver: Callable = socket.getaddrinfo,
               in_use: Optional[Callable[[int], bool]] = None) -> TaskSource:
    """This task of the step: the YAML data with the step's nodes as its cluster, the GPUs and CPUs Slurm gave it.
    `in_use(port)`: whether a port is taken on this node (plan/hosts.py's check, as launch's)."""
    if data.get("cluster") is None:
        raise UsageError(ERR_NO_CLUSTER.format(file=file))
    step = read_step(environ)
    cluster, task, nodes = step_cluster(step, parse_cluster(file, data["cluster"]).tasks(), file, resolver)
    check_own_port(cluster, task, step.node, in_use or port_in_use)
    where = ", ".join(f"{t} {nodes[t]}" + ("" if t.is_evaluator else f":{cluster[t.type][t.index].rsplit(':', 1)[1]}")
                      for t in ordered_tasks(list(nodes)))
    origin = "reserved by Slurm (SLURM_STEP_RESV_PORTS)" if step.resv_ports else \
        "from the step's hash (no ports reserved: slurm.conf sets no MpiParams=ports)"
    note = (f"Slurm job {step.job_id} step {step.step_id}: this is {task} (rank {step.rank} on {step.node}); the "
            f"YAML's hosts are replaced by the step's nodes, ports {origin}: {where}")
    return TaskSource(data={**data, "cluster": cluster}, task=task, gpus_from_manager=step.gpus_by_slurm,
                      own_cpus=step.cpus_per_task, note=note)

"""`train` under srun: its role, its index and its peers from Slurm's step environment and the YAML's roles.

The YAML's `cluster:` gives the roles and their counts; its hosts are replaced by the step's nodes. The
roles are laid over the step's ranks in ROLE_ORDER (chief, evaluator, workers, ps), and the ranks over the
nodes in block distribution, Slurm's default: SLURM_STEP_NODELIST in Slurm's order (never sorted),
SLURM_STEP_TASKS_PER_NODE tasks on each. A task checks that its computed node is SLURMD_NODENAME, so a step
started with another distribution stops with one line instead of forming a wrong cluster.

Ports: each task with a server holds a port of its own on its node and publishes it in model_dir, and
every task waits for its peers' before TensorFlow starts (slurm_ports.py): the step's reserved ports where
slurm.conf has MpiParams=ports (SLURM_STEP_RESV_PORTS, the k-th for the k-th task on a node), else a free one
the kernel chooses. Two jobs on one node never meet on a port, and a taken port is chosen again within the
step, never a failure. The YAML is validated first, so bad input is one line and exit 2 before any port is
taken. No TensorFlow.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from estimator_mnist.config import TaskId, config_from_dict
from estimator_mnist.config.cluster import parse_cluster
from estimator_mnist.errors import UsageError
from estimator_mnist.model_files import slurm_records
from estimator_mnist.plan.slurm_ports import agree, hold_port
from estimator_mnist.plan.resolved_task import TaskSource
from estimator_mnist.plan.slurm_hostlist import expand_hostlist, expand_tasks_per_node

ROLE_ORDER = ("chief", "evaluator", "worker", "ps")  # the evaluator beside the chief: the trainers spread out
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
ERR_RESV = ("SLURM_STEP_RESV_PORTS {ports!r} reserves {count} port(s), but node {node} runs {tasks} tasks of this "
            "step; start the step with srun --resv-ports={tasks} or more, as 'estimator-mnist slurm' writes it")

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


def _resolve(node: str, task: TaskId, resolver: Callable) -> None:
    # TensorFlow's gRPC resolves a target's host through the system resolver (getaddrinfo, /etc/hosts
    # included) for a TCP connection; ask it the same question before TensorFlow starts.
    try:
        resolver(node, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise UsageError(ERR_RESOLVE.format(node=node, task=task, reason=exc)) from None


def place(step: SlurmStep, tasks: List[TaskId], file: str) -> Dict[TaskId, Tuple[str, int]]:
    """Each task's (node, position on that node), checked against the step's size, distribution and ports."""
    order = ordered_tasks(tasks)
    if len(order) != len(step.rank_nodes()):
        raise UsageError(ERR_COUNT.format(file=file, count=len(order), tasks=", ".join(map(str, order)),
                                          step=len(step.rank_nodes())))
    for node, count in zip(step.nodes, step.tasks_per_node):
        if step.resv_ports and count > len(step.resv_ports):
            raise UsageError(ERR_RESV.format(ports=",".join(map(str, step.resv_ports)), count=len(step.resv_ports),
                                             node=node, tasks=count))
    computed = step.rank_nodes()[step.rank][0]
    if computed != step.node:
        raise UsageError(ERR_DISTRIBUTION.format(rank=step.rank, actual=step.node, computed=computed))
    return dict(zip(order, step.rank_nodes()))


def step_cluster(order: List[TaskId], placed: Dict[TaskId, Tuple[str, int]],
                 ports: Dict[int, Tuple[str, int]]) -> dict:
    """The YAML cluster section on the step's nodes, with the ports the tasks agreed on (by rank)."""
    cluster: dict = {}
    for rank, task in enumerate(order):
        if task.is_evaluator:
            cluster["evaluator"] = placed[task][0]  # no server, so no port
            continue
        cluster.setdefault(task.type, []).append(f"{placed[task][0]}:{ports[rank][1]}")
    return cluster


def from_slurm(data: dict, file: str, environ: Mapping[str, str], resolver: Callable = socket.getaddrinfo,
               hold: Callable = hold_port, agree_on: Callable = agree) -> TaskSource:
    """This task of the step: the YAML data with the step's nodes and agreed ports as its cluster, the GPUs and
    CPUs Slurm gave it. `hold(reserved, task, node)` takes this task's port, `agree_on(...)` gathers the step's
    (slurm_ports.py)."""
    if data.get("cluster") is None:
        raise UsageError(ERR_NO_CLUSTER.format(file=file))
    model_dir = config_from_dict(data, file).model_dir  # the whole YAML checked before a port is taken
    step = read_step(environ)
    order = ordered_tasks(parse_cluster(file, data["cluster"]).tasks())
    placed = place(step, order, file)
    task = order[step.rank]
    for other in order:
        if not other.is_evaluator:
            _resolve(placed[other][0], other, resolver)
    own, chosen = None, None
    if not task.is_evaluator:
        port, chosen = hold(step.resv_ports[placed[task][1]] if step.resv_ports else None, str(task), step.node)
        own = (step.node, port)
    ports = agree_on(model_dir, str(step.job_id), slurm_records.step_key(environ), step.rank, own,
                     [r for r, t in enumerate(order) if not t.is_evaluator], str(task))
    cluster = step_cluster(order, placed, ports)
    where = ", ".join(f"{t} {placed[t][0]}" + ("" if t.is_evaluator else f":{ports[r][1]}")
                      for r, t in enumerate(order))
    origin = "reserved by Slurm (SLURM_STEP_RESV_PORTS)" if step.resv_ports else \
        "chosen free on each node (no ports reserved: slurm.conf sets no MpiParams=ports)"
    note = (f"Slurm job {step.job_id} step {step.step_id}: this is {task} (rank {step.rank} on {step.node}); the "
            f"YAML's hosts are replaced by the step's nodes, ports {origin}, held by each task and published in "
            f"model_dir: {where}" + (f"; {chosen}" if chosen else ""))
    return TaskSource(data={**data, "cluster": cluster}, task=task, gpus_from_manager=step.gpus_by_slurm,
                      own_cpus=step.cpus_per_task, note=note, shares_port=own is not None)

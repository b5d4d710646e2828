"""One plan per task: everything a task process needs before TensorFlow is imported, from (config, task).

`plan_task` is pure: the machine facts it depends on (cores, bfloat16 CPU
flags, the inherited environment) are arguments with this machine's values as
defaults. The plan is part of the task's TaskSpec (task_spec.py), made once
by `launch` or by `train`, so a task's settings never depend on how it was
started. It is applied once, by `train` to itself before it starts the task's
TensorFlow process (`apply_to_this_process`), which inherits all of it. No
TensorFlow.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Mapping, Optional, Sequence, Tuple

from estimator_mnist.plan import cpu
from estimator_mnist.config import IN_GRAPH_STRATEGIES, PS_STRATEGIES, Config, TaskId, TaskSettings, device_index, timeouts
from estimator_mnist.plan.hosts import same_machine
from estimator_mnist.plan.topology import build_tf_config

# Files and directories a run creates: nobody else may replace a checkpoint.
PRIVATE_UMASK = 0o027
# session.operation_timeout_ms: auto under the ps strategies, so that a trainer notices a lost ps.
PS_OPERATION_TIMEOUT_MS = timeouts.PS_OPERATION_TIMEOUT_MS


@dataclass(frozen=True)
class TaskPlan:
    task: TaskId
    chief: TaskId                       # the task that saves checkpoints
    env: Tuple[Tuple[str, str], ...]    # environment variables to set before TensorFlow loads
    tf_config: Optional[dict]           # None: in-graph replication runs without a cluster
    settings: TaskSettings              # the task's `tasks:` settings (GPU memory, step delay)
    intra_op_threads: int
    inter_op_threads: int
    umask: int
    nice: object                        # the CPU priority to take ('idle' or 0-19), None to keep it
    precision: str                      # float32/mixed_*; 'auto' while it waits on the GPUs' compute capability
    cpu_precision: str                  # what 'auto' means on this CPU when the task sees no GPU
    evaluation_precision: str           # what evaluation computes in (evaluation.precision); 'auto' as precision
    in_graph: bool                      # mirrored/one_device: one process, no TF server
    evaluates_itself: bool              # in-graph without an evaluator: train, then evaluate and export here
    logical_cpus: int                   # CPU devices to create (mirrored over /cpu:0 and /cpu:1 needs 2)
    sync_replicas: Optional[Tuple[int, int]]  # (replicas_to_aggregate, total) for parameter_server_sync
    operation_timeout_ms: int           # 0: no limit
    waits_for_evaluation: bool          # the checkpointing task of a cluster with an evaluator exits after its result
    gpus_from_manager: bool = False     # Kubeflow's pod or Slurm's GRES gave the GPUs: `gpus` counts them, no mask
    cpus: Optional[Tuple[int, ...]] = None  # the cores a trainer sharing its machine is pinned to; None: not pinned
    starts_after_trainers: bool = False  # an evaluator beside trainers starts TensorFlow once they train

    @property
    def is_chief(self) -> bool:
        return self.task == self.chief

    def with_precision(self, gpu_capabilities: Sequence[Tuple[int, int]]) -> "TaskPlan":
        """The plan with `precision: auto` resolved, once the task knows its GPUs' compute capabilities ([] for
        none): what only its TensorFlow process can tell. Every other precision stays as planned.

        'auto' picks the fastest type the devices compute natively: emulated
        16-bit arithmetic is slower than float32, so auto never picks a type the
        hardware lacks.
        """
        if self.precision != "auto":
            return self
        if gpu_capabilities:
            precision = "mixed_float16" if all(tuple(c) >= (7, 0) for c in gpu_capabilities) else "float32"
        else:
            precision = self.cpu_precision
        evaluation = precision if self.evaluation_precision == "auto" else self.evaluation_precision
        return replace(self, precision=precision, evaluation_precision=evaluation)


def _trainers_beside(config: Config, task: TaskId) -> list:
    """The trainers on `task`'s machine (itself included when it trains), in the cluster's order."""
    host = config.cluster.host(task)
    return [t for t in config.cluster.tasks() if t.is_trainer and same_machine(config.cluster.host(t), host)]


def _pinned_cpus(config: Config, task: TaskId, settings: TaskSettings,
                 cpu_set: Sequence[int]) -> Optional[Tuple[int, ...]]:
    """The k-th of n trainers on a machine gets the k-th n-th of the cores this process may use.

    Unpinned, two single-threaded workers on two cores kept migrating and
    interrupting each other: pinned, each makes more images/s
    (docs/performance.md, "What makes it fast").
    """
    trainers = _trainers_beside(config, task)
    if not settings.pin_cores or not task.is_trainer or len(trainers) < 2 or len(cpu_set) < len(trainers):
        return None
    share = len(cpu_set) // len(trainers)
    k = trainers.index(task)
    return tuple(sorted(cpu_set)[k * share:(k + 1) * share])


def _threads(config: Config, task: TaskId, settings: TaskSettings, cores: int, shared: bool = True) -> Tuple[int, int]:
    """(intra_op, inter_op); 'auto' splits this machine's cores between its trainers (`shared`), or takes the
    task's own (Slurm's --cpus-per-task).

    Left to TensorFlow, every process on a shared machine starts one thread per
    core, and two workers on two cores then run slower than one.
    """
    if task.is_evaluator:
        # A thread per core: at SCHED_IDLE it computes only on what the
        # trainers leave idle, and the final evaluation, with the trainers
        # done, gets every core. With one the trainers went no faster, and the
        # final evaluation took longer (docs/performance.md, "What was tried and not kept").
        auto = (cores, 1)
    elif task.type == "ps":
        auto = (1, 2)  # a ps task only applies updates
    else:
        auto = (max(1, cores // (max(1, len(_trainers_beside(config, task))) if shared else 1)), 2)
    intra = auto[0] if settings.intra_op_threads == "auto" else settings.intra_op_threads
    inter = auto[1] if settings.inter_op_threads == "auto" else settings.inter_op_threads
    return intra, inter


def _logical_cpus(config: Config, task: TaskId) -> int:
    """Logical CPU devices `mirrored`/`one_device` ask for (e.g. /cpu:1 needs two)."""
    strategy = config.strategy
    if task.type != "chief" or strategy.name not in IN_GRAPH_STRATEGIES:
        return 1
    devices = strategy.devices if strategy.name == "mirrored" else (strategy.device,)
    cpu_indices = [device_index(d)[1] for d in devices or () if d != "auto" and device_index(d)[0] == "cpu"]
    return max(cpu_indices, default=0) + 1


PROXY_VARIABLES = ("grpc_proxy", "https_proxy", "http_proxy", "HTTPS_PROXY", "HTTP_PROXY")


def _environment(config: Config, settings: TaskSettings, environ: Mapping[str, str],
                 gpus_from_manager: bool = False, x86: bool = True,
                 shares_port: bool = False) -> Tuple[Tuple[str, str], ...]:
    env = {"PYTHONUNBUFFERED": "1"}
    if shares_port:
        # The task's parent holds the server's port, bound with SO_REUSEPORT, so that nothing else takes it
        # before TensorFlow's bind (plan/slurm_ports.py); TF 2.15's gRPC server binds it beside only with this.
        env["TF_GRPC_REUSE_PORT"] = "1"
    if any(environ.get(name) for name in PROXY_VARIABLES):
        # TF 2.15's gRPC channels between the tasks honour https_proxy and http_proxy (gRPC's http_proxy mapper):
        # with a proxy set for the bucket (docs/storage.md) the peers were dialled through it, and the cluster
        # never formed (tests/e2e/test_gcs_run.py, its pods). gRPC reads no_grpc_proxy before no_proxy: the
        # cluster's hosts, with what the user already excluded.
        kept = environ.get("no_grpc_proxy") or environ.get("no_proxy") or environ.get("NO_PROXY") or ""
        hosts = sorted({config.cluster.host(t) for t in config.cluster.tasks()})
        env["no_grpc_proxy"] = ",".join(dict.fromkeys([*filter(None, kept.split(",")), *hosts]))
    if x86:
        # TF 2.15 turns oneDNN on by itself only with cpu.TF_ONEDNN_DEFAULT_FLAGS; elsewhere (AVX2-only
        # EPYCs) its Eigen kernels are much slower (docs/performance.md, "oneDNN on every x86 CPU").
        # A value the user exported wins.
        env["TF_ENABLE_ONEDNN_OPTS"] = environ.get("TF_ENABLE_ONEDNN_OPTS", "1")
    if config.session.log_device_placement:
        env["TF_CPP_MIN_LOG_LEVEL"] = "0"  # the placement lines are INFO-level C++ logs
    else:
        # C++ INFO lines (oneDNN notices, CPU feature banners) drown the useful ones.
        env["TF_CPP_MIN_LOG_LEVEL"] = environ.get("TF_CPP_MIN_LOG_LEVEL", "1")
    if settings.gpus is not None and not gpus_from_manager:
        # In a pod the device plugin, under Slurm its GRES, hands over the task's GPUs renumbered from 0: a mask
        # of the host's indices would hide them. Elsewhere "-1" rather than "": an invalid index hides every GPU after it on
        # every CUDA version, while an empty value has been read as "unset".
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, settings.gpus)) if settings.gpus else "-1"
    return tuple(sorted(env.items()))


def plan_task(config: Config, task: TaskId, tf_config: Optional[dict] = None, *, cores: Optional[int] = None,
              cpu_set: Optional[Sequence[int]] = None, cpu_bfloat16: Optional[bool] = None,
              environ: Optional[Mapping[str, str]] = None, gpus_from_manager: bool = False,
              x86: Optional[bool] = None, own_cpus: Optional[int] = None, shares_port: bool = False) -> TaskPlan:
    """The plan of `task`; `tf_config` defaults to the one the YAML cluster gives it.

    `cpu_set`/`cores`: the CPUs this process may run on (its affinity) or their number.
    `gpus_from_manager`: a cluster manager gave the task its GPUs (Kubeflow's operator, TF_CONFIG's
    "environment": "cloud"; or Slurm's GRES, which sets CUDA_VISIBLE_DEVICES), so `gpus` only counts them.
    `x86`: whether the machine is x86-64 (default: this one's), where the plan turns oneDNN on.
    `own_cpus`: the CPUs a cluster manager gave this task alone (Slurm's SLURM_CPUS_PER_TASK): its threads
    follow them, and it neither shares them with the trainers beside it nor pins itself (Slurm binds tasks)."""
    settings = config.task_settings(task)
    if cpu_set is None:  # the cores this process may run on; `cores=N` stands for the first N
        cpu_set = tuple(range(cores)) if cores is not None else cpu.usable_cpus()
    cores = own_cpus or len(cpu_set)
    cpu_bfloat16 = cpu.cpu_has_bfloat16() if cpu_bfloat16 is None else cpu_bfloat16
    in_graph = config.strategy.name in IN_GRAPH_STRATEGIES and not task.is_evaluator
    cpu_precision = "mixed_bfloat16" if cpu_bfloat16 else "float32"
    precision = config.model.precision
    if precision == "auto" and settings.gpus == ():
        precision = cpu_precision  # no GPU can show up: the CPU decides now
    intra, inter = _threads(config, task, settings, cores, shared=own_cpus is None)
    total = config.cluster.num_workers
    timeout = config.session.operation_timeout_ms
    if timeout == "auto":
        timeout = PS_OPERATION_TIMEOUT_MS if config.strategy.name in PS_STRATEGIES else 0
    return TaskPlan(
        task=task, chief=config.cluster.chief_task, settings=settings,
        env=_environment(config, settings, os.environ if environ is None else environ, gpus_from_manager,
                         cpu.is_x86() if x86 is None else x86, shares_port),
        tf_config=None if in_graph else (tf_config or build_tf_config(config.cluster, task)),
        intra_op_threads=intra, inter_op_threads=inter, umask=PRIVATE_UMASK,
        nice=config.evaluation.nice if task.is_evaluator else None,
        precision=precision, cpu_precision=cpu_precision, in_graph=in_graph,
        evaluation_precision=precision if config.evaluation.precision == "training" else "float32",
        evaluates_itself=in_graph and config.cluster.evaluator is None,
        logical_cpus=_logical_cpus(config, task),
        sync_replicas=((config.strategy.replicas_to_aggregate or total), total)
        if config.strategy.name == "parameter_server_sync" else None,
        operation_timeout_ms=timeout,
        waits_for_evaluation=task == config.cluster.chief_task and config.cluster.evaluator is not None,
        gpus_from_manager=gpus_from_manager,
        cpus=None if own_cpus else _pinned_cpus(config, task, settings, cpu_set),
        starts_after_trainers=task.is_evaluator and bool(_trainers_beside(config, task)))


def apply_to_this_process(plan: TaskPlan) -> str:
    """The environment, cores, umask and priority of the plan, applied to this process; says what it did.

    The one place a plan is applied: `train`, before it starts its TensorFlow
    process, which inherits the environment, the cores, the umask and the
    priority of every thread (Linux copies each across fork and exec). The
    TF_CONFIG is not part of it: only the TensorFlow process sets one, from
    its spec (tf_task/__main__.py)."""
    os.environ.update(plan.env)
    if plan.cpus is not None:
        cpu.pin_to(plan.cpus)
    os.umask(plan.umask)
    return cpu.lower_cpu_priority(plan.nice) if plan.nice is not None else "unchanged"


def describe(plan: TaskPlan) -> str:
    """The applied plan, for the task's first log line."""
    env = " ".join(f"{k}={v!r}" for k, v in plan.env if k != "PYTHONUNBUFFERED")
    cuda = "" if any(k == "CUDA_VISIBLE_DEVICES" for k, _ in plan.env) else " CUDA_VISIBLE_DEVICES=(inherited)"
    if plan.gpus_from_manager and plan.settings.gpus is not None:
        cuda += (f" gpus={len(plan.settings.gpus)} (Kubernetes or Slurm: the pod's or Slurm task's own GPUs, "
                 "numbered from 0 by the device plugin or Slurm; no CUDA_VISIBLE_DEVICES mask)")
    cores = "" if plan.cpus is None else f" cpus={','.join(map(str, plan.cpus))}"
    return (f"{env}{cuda}{cores} intra_op_threads={plan.intra_op_threads} inter_op_threads={plan.inter_op_threads} "
            f"umask={plan.umask:03o} in_graph={plan.in_graph} evaluates_itself={plan.evaluates_itself} "
            f"operation_timeout_ms={plan.operation_timeout_ms or 'none'}")

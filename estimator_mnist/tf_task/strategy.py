"""Distribution strategy, devices and session settings for one task.

Every strategy of the YAML maps to what Estimator (TF 2.15) can actually run:

- multi_worker_mirrored: the v1 MultiWorkerMirroredStrategy (between-graph,
  synchronous collective all-reduce);
- parameter_server: the v1 ParameterServerStrategy (Estimator refuses the v2
  class), asynchronous: each worker applies its own gradients on the ps tasks;
- parameter_server_sync: no strategy object at all. Estimator's own ps
  replication (replica_device_setter) with SyncReplicasOptimizer, the only
  synchronous ps mode Estimator has, and the one with backup workers;
- mirrored: in-graph replication over the devices of one machine;
- one_device: one process on one device, the baseline.
"""

from __future__ import annotations

import tensorflow as tf

from estimator_mnist.config import Config, TaskId, device_index, timeouts
from estimator_mnist.errors import UsageError
from estimator_mnist.plan.task_plan import TaskPlan
from estimator_mnist.tf_task.tf_workarounds import no_bfloat16_fusion, set_collective_options, size_thread_pools
ERR_NCCL_NO_GPU_RUNTIME = ("task {task}: {key} is nccl but this process sees no GPU ({visible}); "
                           "use ring or auto, or give the task GPUs with tasks.{task}.gpus")
ERR_NO_SUCH_DEVICE = ("task {task}: strategy {key} lists {device} but this process has only {count} {kind} device(s) "
                      "({visible}); list devices it has, or change tasks.chief.gpus")

_COMMUNICATION = {
    "auto": tf.distribute.experimental.CommunicationImplementation.AUTO,
    "ring": tf.distribute.experimental.CommunicationImplementation.RING,
    "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL,
}


def configure_devices(plan: TaskPlan) -> None:
    """Sizes the thread pools and makes the logical CPU devices the strategy names; must run before TF initialises devices."""
    size_thread_pools(plan.intra_op_threads, plan.inter_op_threads)
    if plan.logical_cpus > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * plan.logical_cpus)


def gpu_capabilities():
    """The compute capability of every GPU this process sees ([] on CPU-only machines)."""
    return [tuple(tf.config.experimental.get_device_details(g).get("compute_capability") or (0, 0))
            for g in tf.config.list_physical_devices("GPU")]


def session_config(config: Config, plan: TaskPlan) -> tf.compat.v1.ConfigProto:
    """The task's session ConfigProto: its thread pools, GPU memory options, logical CPUs, operation timeout, no
    bfloat16 fusion when it computes in bfloat16, and a synchronous-ps trainer's device filters; from `plan` with
    its precision resolved (TaskPlan.with_precision)."""
    task = plan.task
    proto = tf.compat.v1.ConfigProto(
        allow_soft_placement=True,
        intra_op_parallelism_threads=plan.intra_op_threads,
        inter_op_parallelism_threads=plan.inter_op_threads,
        log_device_placement=config.session.log_device_placement,
        operation_timeout_in_ms=plan.operation_timeout_ms,
    )
    proto.gpu_options.allow_growth = plan.settings.gpu_memory_growth
    proto.gpu_options.per_process_gpu_memory_fraction = plan.settings.gpu_memory_fraction
    if plan.logical_cpus > 1:
        # Graph sessions and the task's server build their devices from the
        # ConfigProto, not from tf.config's logical devices.
        proto.device_count["CPU"] = plan.logical_cpus
    # What this task computes in: the evaluator evaluates in evaluation.precision's choice.
    if (plan.evaluation_precision if task.is_evaluator else plan.precision) == "mixed_bfloat16":
        no_bfloat16_fusion(proto)
    if config.strategy.name == "parameter_server_sync" and task.is_trainer:
        # Estimator sets these filters only when it builds the session config
        # itself: a worker talks to the ps tasks and to itself, so it neither
        # waits for nor depends on the other workers.
        proto.device_filters.extend(["/job:ps", f"/job:{task.type}/task:{task.index}"])
    return proto


def _visible(kind: str):
    return tf.config.list_logical_devices(kind.upper())


def _describe_visible() -> str:
    return ", ".join(d.name for d in tf.config.list_logical_devices()) or "none"


def _check_devices_exist(task: TaskId, key: str, devices) -> None:
    for device in devices:
        kind, index = device_index(device)
        if index >= len(_visible(kind)):
            raise UsageError(ERR_NO_SUCH_DEVICE.format(task=task, key=key, device=device, count=len(_visible(kind)),
                                                       kind=kind.upper(), visible=_describe_visible()))


def _mirrored_cross_device_ops(name: str, devices):
    all_gpus = all(device_index(d)[0] == "gpu" for d in devices)
    if name == "nccl" or (name == "auto" and all_gpus and len(devices) > 1):
        return tf.distribute.NcclAllReduce()
    if name == "hierarchical_copy":
        return tf.distribute.HierarchicalCopyAllReduce()
    # Also for 'auto' on CPUs: the default there (a collective all-reduce
    # between the CPU devices) was seen to hang with two logical CPUs.
    return tf.distribute.ReductionToOneDevice()


def mirrored_devices(config: Config):
    if config.strategy.devices:
        return list(config.strategy.devices)
    gpus = _visible("gpu")
    return [f"/gpu:{i}" for i in range(len(gpus))] or ["/cpu:0"]


def one_device(config: Config) -> str:
    if config.strategy.device != "auto":
        return config.strategy.device
    return "/gpu:0" if _visible("gpu") else "/cpu:0"


# TF 2.15's coordination service, which MultiWorkerMirroredStrategy starts on the chief, fails every trainer once one's
# last heartbeat is older than heartbeat_timeout_in_ms (default 10 s) by the wall clock, checked every second
# (coordination_service.cc, CheckHeartbeatTimeout). A Slurm job suspended past it (`scontrol suspend`: every
# process SIGSTOPped; `resume`: SIGCONT, node by node) met that check as soon as the chief's node ran again,
# before the other trainers' next heartbeats: "Task /job:worker/replica:0/task:0 heartbeat timeout" aborted the
# all-reduce and the step counted an incident; so did a chief and a worker stopped for 40 s without Slurm, the
# worker resumed 3 s after the chief. Stopped time is no sign of a lost peer, so the service's bound is past any
# suspension; a peer lost or hung is the product's to find (step_watchdog.py bounds each step, its stopped time
# left out; a dead peer's connection fails the all-reduce at once): one watcher per situation. Pinned by
# tests/e2e/test_slurm_preemption.py::test_a_job_suspended_past_its_bounds_resumes_with_no_restart_and_no_incident.
COORDINATION_HEARTBEAT_TIMEOUT_MS = timeouts.COORDINATION_HEARTBEAT_TIMEOUT_MS


def configure_coordination_service() -> None:
    """The coordination service as MultiWorkerMirroredStrategy configures it (TF 2.15,
    collective_all_reduce_strategy.py), with COORDINATION_HEARTBEAT_TIMEOUT_MS; from TF_CONFIG. The strategy
    keeps a configuration already there."""
    # pylint: disable=import-outside-toplevel
    from tensorflow.python.distribute import multi_worker_util
    from tensorflow.python.eager import context
    from tensorflow.tsl.protobuf import coordination_config_pb2

    if context.context().coordination_service is not None:
        return
    spec = tf.distribute.cluster_resolver.TFConfigClusterResolver().cluster_spec()
    jobs = [coordination_config_pb2.CoordinatedJob(name=job, num_tasks=spec.num_tasks(job))
            for job in ("chief", "worker") if job in spec.jobs]
    context.context().configure_coordination_service(
        service_type="standalone", service_leader=multi_worker_util.coordination_leader(spec),
        coordinated_jobs=jobs, heartbeat_timeout_in_ms=COORDINATION_HEARTBEAT_TIMEOUT_MS)


def build_train_strategy(config: Config, plan: TaskPlan):
    """The tf.distribute strategy for this task, or None where Estimator must run without one.

    The evaluator never gets one: it is not a member of the training cluster
    (MultiWorkerMirrored fails in it with KeyError: 'evaluator') and evaluates
    on one machine anyway.
    """
    strategy, task = config.strategy, plan.task
    if task.is_evaluator or strategy.name == "parameter_server_sync":
        return None
    if strategy.name == "multi_worker_mirrored":
        if strategy.communication == "nccl" and not _visible("gpu"):
            raise UsageError(ERR_NCCL_NO_GPU_RUNTIME.format(task=task, key="strategy.communication",
                                                            visible=_describe_visible()))
        # The v1 class: Estimator builds graphs, and the v2 class sets up eager
        # collectives that an Estimator session never uses. Estimator also
        # recognises it by its exact class name, so it cannot be subclassed.
        configure_coordination_service()
        result = tf.compat.v1.distribute.experimental.MultiWorkerMirroredStrategy(
            communication=_COMMUNICATION[strategy.communication])
        # No timeout on the ops: TF 2.15 would start a thread per collective op for it, and thousands pile up.
        # step_watchdog.StepWatchdogHook bounds each step by strategy.collective_timeout_secs instead.
        set_collective_options(result, tf.distribute.experimental.CommunicationOptions(
            implementation=_COMMUNICATION[strategy.communication]))
        return result
    if strategy.name == "parameter_server":
        return tf.compat.v1.distribute.experimental.ParameterServerStrategy()
    if strategy.name == "mirrored":
        devices = mirrored_devices(config)
        _check_devices_exist(task, "devices", devices)
        if strategy.cross_device_ops == "nccl" and not all(device_index(d)[0] == "gpu" for d in devices):
            raise UsageError(ERR_NCCL_NO_GPU_RUNTIME.format(task=task, key="strategy.cross_device_ops",
                                                            visible=_describe_visible()))
        return tf.compat.v1.distribute.MirroredStrategy(
            devices=devices, cross_device_ops=_mirrored_cross_device_ops(strategy.cross_device_ops, devices))
    if strategy.name == "one_device":
        device = one_device(config)
        _check_devices_exist(task, "device", [device])
        return tf.compat.v1.distribute.OneDeviceStrategy(device)
    raise ValueError(f"unsupported strategy {strategy.name!r}")

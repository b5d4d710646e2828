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

from .cluster import TaskId, task_host
from .config import Config, device_index
from .cpu import available_cores, cpu_has_bfloat16
from .errors import UsageError

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
ERR_NCCL_NO_GPU_RUNTIME = ("task {task}: {key} is nccl but this process sees no GPU ({visible}); "
                           "use ring or auto, or give the task GPUs with tasks.{task}.gpus")
ERR_NO_SUCH_DEVICE = ("task {task}: strategy {key} lists {device} but this process has only {count} {kind} device(s) "
                      "({visible}); list devices it has, or change tasks.chief.gpus")

_COMMUNICATION = {
    "auto": tf.distribute.experimental.CommunicationImplementation.AUTO,
    "ring": tf.distribute.experimental.CommunicationImplementation.RING,
    "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL,
}


def _same_machine(a: str, b: str) -> bool:
    return a == b or (a in LOOPBACK_NAMES and b in LOOPBACK_NAMES)


def thread_settings(config: Config, task: TaskId):
    """(intra_op, inter_op) threads; 'auto' splits this machine's cores between its trainers.

    Left to TensorFlow, every process on a shared machine starts one thread per
    core, and two workers on two cores then run slower than one.
    """
    settings = config.task_settings(task.type, task.index)
    if task.is_evaluator:
        # One thread: even at SCHED_IDLE an evaluator on every core slowed
        # the trainers sharing its machine by a quarter (caches, memory
        # bandwidth); with one it costs little, and the final evaluation
        # of 10k images still takes only seconds.
        auto_intra, auto_inter = 1, 1
    elif task.type == "ps":
        auto_intra, auto_inter = 1, 2  # a ps task only applies updates
    else:
        host = task_host(config.cluster, task)
        trainers = [h for r, _, h in config.cluster.task_hosts() if r in ("chief", "worker") and _same_machine(h, host)]
        auto_intra = max(1, available_cores() // max(1, len(trainers)))
        auto_inter = 2
    intra = auto_intra if settings.intra_op_threads == "auto" else settings.intra_op_threads
    inter = auto_inter if settings.inter_op_threads == "auto" else settings.inter_op_threads
    return intra, inter


def _cpu_devices_needed(config: Config, task: TaskId) -> int:
    """Logical CPU devices `mirrored`/`one_device` ask for (e.g. /cpu:1 needs two)."""
    strategy = config.strategy
    if task.type != "chief" or strategy.name not in ("mirrored", "one_device"):
        return 1
    devices = strategy.devices if strategy.name == "mirrored" else (strategy.device,)
    cpu_indices = [device_index(d)[1] for d in devices or () if d != "auto" and device_index(d)[0] == "cpu"]
    return max(cpu_indices, default=0) + 1


def configure_devices(config: Config, task: TaskId) -> None:
    """Makes the logical CPU devices the strategy names; must run before TF initialises devices."""
    count = _cpu_devices_needed(config, task)
    if count > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)


def session_config(config: Config, task: TaskId) -> tf.compat.v1.ConfigProto:
    intra, inter = thread_settings(config, task)
    settings = config.task_settings(task.type, task.index)
    proto = tf.compat.v1.ConfigProto(
        allow_soft_placement=True,
        intra_op_parallelism_threads=intra,
        inter_op_parallelism_threads=inter,
        log_device_placement=config.session.log_device_placement,
        operation_timeout_in_ms=config.session.operation_timeout_ms,
    )
    proto.gpu_options.allow_growth = settings.gpu_memory_growth
    proto.gpu_options.per_process_gpu_memory_fraction = settings.gpu_memory_fraction
    cpus = _cpu_devices_needed(config, task)
    if cpus > 1:
        # Graph sessions and the task's server build their devices from the
        # ConfigProto, not from tf.config's logical devices.
        proto.device_count["CPU"] = cpus
    if not task.is_evaluator and resolve_precision(config.model.precision) == "mixed_bfloat16":
        from tensorflow.core.protobuf import rewriter_config_pb2  # pylint: disable=import-outside-toplevel
        # In a cluster session grappler fuses bfloat16 Conv2D+BiasAdd+Relu into
        # a _FusedConv2D that has no bfloat16 CPU kernel, and the step fails.
        # The evaluator computes in float32 and keeps the fusion.
        proto.graph_options.rewrite_options.remapping = rewriter_config_pb2.RewriterConfig.OFF
    if config.strategy.name == "parameter_server_sync" and task.type in ("chief", "worker"):
        # Estimator sets these filters only when it builds the session config
        # itself: a worker talks to the ps tasks and to itself, so it neither
        # waits for nor depends on the other workers.
        proto.device_filters.extend(["/job:ps", f"/job:{task.type}/task:{task.index}"])
    return proto


def resolve_precision(setting: str) -> str:
    """model.precision for this process: 'auto' picks the fastest type its devices compute natively.

    Emulated 16-bit arithmetic is slower than float32, so auto never picks a
    type the hardware lacks.
    """
    if setting != "auto":
        return setting
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        capabilities = [tf.config.experimental.get_device_details(g).get("compute_capability") or (0, 0)
                        for g in gpus]
        return "mixed_float16" if all(tuple(c) >= (7, 0) for c in capabilities) else "float32"
    return "mixed_bfloat16" if cpu_has_bfloat16() else "float32"


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


def build_train_strategy(config: Config, task: TaskId):
    """The tf.distribute strategy for this task, or None where Estimator must run without one.

    The evaluator never gets one: it is not a member of the training cluster
    (MultiWorkerMirrored fails in it with KeyError: 'evaluator') and evaluates
    on one machine anyway.
    """
    strategy = config.strategy
    if task.is_evaluator or strategy.name == "parameter_server_sync":
        return None
    if strategy.name == "multi_worker_mirrored":
        if strategy.communication == "nccl" and not _visible("gpu"):
            raise UsageError(ERR_NCCL_NO_GPU_RUNTIME.format(task=task, key="strategy.communication",
                                                            visible=_describe_visible()))
        # The v1 class: Estimator builds graphs, and the v2 class sets up eager
        # collectives that an Estimator session never uses. Estimator also
        # recognises it by its exact class name, so it cannot be subclassed.
        result = tf.compat.v1.distribute.experimental.MultiWorkerMirroredStrategy(
            communication=_COMMUNICATION[strategy.communication])
        # The v1 constructor takes no CommunicationOptions; its extended object
        # builds the all-reduce ops from these options when Estimator configures
        # it for this task, so the timeout reaches every collective op.
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=_COMMUNICATION[strategy.communication],
            timeout_seconds=strategy.collective_timeout_secs or None)
        result.extended._communication_options = options  # pylint: disable=protected-access
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


def sync_replicas(config: Config):
    """(replicas_to_aggregate, total_replicas) for parameter_server_sync, else None."""
    if config.strategy.name != "parameter_server_sync":
        return None
    total = config.cluster.num_workers
    return (config.strategy.replicas_to_aggregate or total), total

"""The run configuration: one YAML file, parsed once into frozen dataclasses.

Nothing here imports TensorFlow, so a bad file is rejected in well under a
second and before any process starts. Every rejection is a `UsageError` whose
one-line message names the file, the key and the fix.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Tuple

from .errors import UsageError

# Error messages are constants so tests can match them and users can grep them.
ERR_UNREADABLE = "{file}: cannot read the cluster file ({reason}); pass an existing YAML file with --cluster"
ERR_NOT_YAML = "{file}: not valid YAML ({reason}); fix the syntax at the place named"
ERR_NOT_MAPPING = "{file}: {key} must be a mapping of keys to values, got {got}"
ERR_UNKNOWN_KEY = "{file}: unknown key '{key}' in {section}; valid keys are: {valid}"
ERR_MISSING_KEY = "{file}: missing required key '{key}'; add it ({hint})"
ERR_TYPE = "{file}: {key} must be {expected}, got {got!r}"
ERR_CHOICE = "{file}: {key} must be one of {choices}, got {got!r}"
ERR_RANGE = "{file}: {key} must be {bound}, got {got!r}"
ERR_ADDRESS = "{file}: {key} is {got!r}, not a 'host:port' address; write it like 'localhost:2222' (IPv6: '[::1]:2222')"
ERR_PORT = "{file}: {key} has port {port}, outside 1-65535; pick a free port in that range"
ERR_DUPLICATE = "{file}: {key} repeats the address {address} already used by {other}; give every task its own host:port"
ERR_NO_TRAINER = "{file}: cluster has no chief and no worker; add 'chief: [host:port]' or 'worker: [host:port, ...]'"
ERR_MANY = "{file}: cluster.{role} lists {count} addresses but at most one {role} is allowed; keep one"
ERR_STRATEGY_ROLES = "{file}: strategy '{strategy}' {problem}; {fix}"
ERR_EMPTY_LIST = "{file}: {key} is an empty list; list at least one 'host:port' or remove the key"
ERR_STRATEGY_KEY = "{file}: strategy.{key} applies to strategy {owners} only, not '{strategy}'; remove it or change strategy.name"
ERR_TASK_SELECTOR = "{file}: tasks.{selector} names no task of this cluster; use 'all', a role ({roles}) or a task ({tasks})"
ERR_NCCL_NO_GPU = "{file}: {key} is nccl but {who} has no GPU ({why}); use {fix}"
ERR_R2A = "{file}: strategy.replicas_to_aggregate is {got} but the cluster has only {replicas} training replicas (chief + workers); use at most {replicas}"
ERR_DEVICE = "{file}: {key} is {got!r}, not a device like '/gpu:0' or '/cpu:0'"

TRAINING_ROLES = ("chief", "worker", "ps")
STRATEGIES = ("multi_worker_mirrored", "parameter_server", "parameter_server_sync", "mirrored", "one_device")
COMMUNICATIONS = ("auto", "ring", "nccl")
CROSS_DEVICE_OPS = ("auto", "nccl", "hierarchical_copy", "reduction_to_one_device")
NETWORKS = ("classic_cnn", "tutorial_cnn")
OPTIMIZERS = ("adam", "momentum")
EXPORTERS = ("latest", "best")
RESTART_POLICIES = ("never", "on_failure")
NETWORK_MODES = ("auto", "private", "host")
LR_SCHEDULES = ("cosine", "constant")
PRECISIONS = ("auto", "float32", "mixed_bfloat16", "mixed_float16")


def _positive(v):
    return None if v > 0 else "a positive number"


def _non_negative(v):
    return None if v >= 0 else "zero or more"


def _fraction(v):
    return None if 0 <= v < 1 else "in [0, 1)"


def _share(v):
    return None if 0 <= v <= 1 else "between 0 and 1"


def _nice(v):
    if v == "idle" or (isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 19):
        return None
    return "'idle' or a whole number between 0 and 19"


def _threads(v):
    if v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
        return None
    return "'auto' or a whole number >= 0 (0 lets TensorFlow decide)"


def _gpu_list(v):
    if v is None:
        return None
    if isinstance(v, list) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in v) \
            and len(set(v)) == len(v):
        return None
    return "a list of distinct GPU indices such as [0, 1] ([] hides every GPU)"


def _device_list(v):
    if isinstance(v, list) and v and all(isinstance(d, str) and _DEVICE.match(d) for d in v) and len(set(v)) == len(v):
        return None
    return "a list of distinct devices of this machine such as ['/gpu:0', '/gpu:1'] or ['/cpu:0', '/cpu:1']"


def _device(v):
    return None if v == "auto" or (isinstance(v, str) and _DEVICE.match(v)) else "'auto' or a device such as '/gpu:0' or '/cpu:0'"


_DEVICE = re.compile(r"^/(?:device:)?(?P<type>cpu|gpu|CPU|GPU):(?P<index>\d+)$")


def device_index(device: str):
    """('cpu'|'gpu', index) of a device string validated by the config."""
    match = _DEVICE.match(device)
    return match["type"].lower(), int(match["index"])


def _opt(default, *, check=None, choices=None, kind=None, doc="", strategies=None):
    return field(default=default, metadata={"check": check, "choices": choices, "kind": kind, "doc": doc,
                                            "strategies": strategies})


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class ClusterConfig:
    """Who trains where. `evaluator` is a host only: it runs no server."""

    chief: Tuple[Address, ...] = ()
    worker: Tuple[Address, ...] = ()
    ps: Tuple[Address, ...] = ()
    evaluator: Optional[str] = None

    def addresses(self, role: str) -> Tuple[Address, ...]:
        return getattr(self, role)

    def training_tasks(self):
        """(role, index, address) of every task that runs a TF server."""
        return [(role, i, a) for role in TRAINING_ROLES for i, a in enumerate(self.addresses(role))]

    def task_hosts(self):
        """(role, index, host) of every task, the evaluator included."""
        tasks = [(r, i, a.host) for r, i, a in self.training_tasks()]
        if self.evaluator is not None:
            tasks.append(("evaluator", 0, self.evaluator))
        return tasks

    @property
    def num_workers(self) -> int:
        """Training replicas' machines: the chief counts as a worker."""
        return len(self.chief) + len(self.worker)


@dataclass(frozen=True)
class StrategyConfig:
    """`strategy:` in the YAML: a name, or a mapping with `name` and that strategy's keys."""

    name: str = _opt("multi_worker_mirrored", choices=STRATEGIES,
                     doc="multi_worker_mirrored: sync all-reduce; parameter_server: async ps; parameter_server_sync: "
                         "sync ps with backup workers; mirrored: one machine, several devices; one_device: one process")
    communication: str = _opt("auto", choices=COMMUNICATIONS, strategies=("multi_worker_mirrored",),
                              doc="all-reduce between workers: ring (gRPC), nccl (GPUs) or auto")
    collective_timeout_secs: int = _opt(300, check=_non_negative, kind=int, strategies=("multi_worker_mirrored",),
                                        doc="an all-reduce that waits longer fails with DeadlineExceeded; 0 = no limit")
    replicas_to_aggregate: Optional[int] = _opt(None, check=_positive, kind=int, strategies=("parameter_server_sync",),
                                                doc="gradients averaged per step; fewer than the replicas leaves the "
                                                    "rest as backup workers (default: all replicas)")
    devices: Optional[Tuple[str, ...]] = _opt(None, check=_device_list, kind="list", strategies=("mirrored",),
                                              doc="devices to replicate over (default: every GPU, else /cpu:0)")
    cross_device_ops: str = _opt("auto", choices=CROSS_DEVICE_OPS, strategies=("mirrored",),
                                 doc="how mirrored replicas combine gradients; auto: nccl on GPUs, "
                                     "reduction_to_one_device on CPUs")
    device: str = _opt("auto", check=_device, kind="str", strategies=("one_device",),
                       doc="the device of one_device (auto: /gpu:0 when there is one, else /cpu:0)")

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class TaskSettings:
    """Device and session settings of one task: `tasks: {all|ROLE|ROLE:INDEX: {...}}` in the YAML."""

    gpus: Optional[Tuple[int, ...]] = _opt(None, check=_gpu_list, kind="list",
                                           doc="GPU indices this task may see (sets CUDA_VISIBLE_DEVICES); "
                                               "[] hides all GPUs; default: inherit the environment")
    gpu_memory_growth: bool = _opt(False, kind=bool, doc="allocate GPU memory as needed instead of all at once")
    gpu_memory_fraction: float = _opt(0.0, check=_share, kind=float,
                                      doc="cap on the share of each GPU's memory; 0 = no cap")
    intra_op_threads: Any = _opt("auto", check=_threads, kind="threads",
                                 doc="auto: this machine's cores split between its training tasks")
    inter_op_threads: Any = _opt("auto", check=_threads, kind="threads")
    step_delay_ms: int = _opt(0, check=_non_negative, kind=int,
                              doc="sleep after each training step of this task, to rehearse a straggler")


@dataclass(frozen=True)
class SessionConfig:
    """Run-wide TensorFlow session settings."""

    log_device_placement: bool = _opt(False, kind=bool, doc="log every op's device in each task's log")
    operation_timeout_ms: int = _opt(0, check=_non_negative, kind=int,
                                     doc="an op that waits longer fails with DeadlineExceeded; 0 = no limit")


@dataclass(frozen=True)
class ModelConfig:
    network: str = _opt("classic_cnn", choices=NETWORKS,
                        doc="classic_cnn: conv5x5x32-pool-conv5x5x64-pool-dense500; tutorial_cnn: conv3x3x32-pool-dense64")
    optimizer: str = _opt("adam", choices=OPTIMIZERS)
    learning_rate: float = _opt(0.003, check=_positive, kind=float)
    lr_schedule: str = _opt("cosine", choices=LR_SCHEDULES,
                            doc="cosine: decay from learning_rate to a tenth of it at training.max_steps")
    momentum: float = _opt(0.9, check=_fraction, kind=float, doc="used by optimizer: momentum")
    dropout: float = _opt(0.4, check=_fraction, kind=float,
                          doc="dropout rate before the last layer while training (classic_cnn: after dense500)")
    precision: str = _opt("auto", choices=PRECISIONS,
                          doc="training compute type; variables stay float32. auto: mixed_float16 on GPUs of compute "
                              "capability 7.0+, mixed_bfloat16 on CPUs with bfloat16 instructions (AMX or "
                              "AVX512_BF16), else float32")


@dataclass(frozen=True)
class TrainingConfig:
    batch_size_per_replica: int = _opt(256, check=_positive, kind=int)
    max_steps: int = _opt(700, check=_positive, kind=int)
    save_checkpoints_steps: int = _opt(200, check=_positive, kind=int)
    keep_checkpoint_max: int = _opt(5, check=_positive, kind=int)
    log_step_count_steps: int = _opt(100, check=_positive, kind=int)
    shuffle_buffer: int = _opt(10000, check=_positive, kind=int)
    seed: int = _opt(0, check=_non_negative, kind=int)
    session_creation_timeout_secs: int = _opt(300, check=_positive, kind=int,
                                              doc="a trainer whose cluster has not formed by then names the "
                                                  "peers that do not answer and stops (Estimator's own: 2 hours)")
    teardown_timeout_secs: int = _opt(3, check=_positive, kind=int,
                                      doc="exit when closing the session still blocks this long after the last step")


@dataclass(frozen=True)
class EvaluationConfig:
    throttle_secs: int = _opt(20, check=_non_negative, kind=int)
    start_delay_secs: int = _opt(5, check=_non_negative, kind=int)
    batch_size: int = _opt(1000, check=_positive, kind=int)
    export: str = _opt("latest", choices=EXPORTERS,
                       doc="latest: export every evaluated checkpoint; best: only when eval loss improves")
    exports_to_keep: int = _opt(3, check=_positive, kind=int)
    nice: Any = _opt("idle", check=_nice, kind="nice",
                     doc="the evaluator's CPU priority, so that it never slows training: idle (Linux SCHED_IDLE: it "
                         "runs only on cores the trainers leave idle) or a niceness 0-19")


@dataclass(frozen=True)
class LauncherConfig:
    grace_secs: int = _opt(10, check=_positive, kind=int, doc="SIGTERM to SIGKILL")
    finish_timeout_secs: int = _opt(60, check=_positive, kind=int,
                                    doc="how long other tasks may take to exit once the chief finished")
    eval_timeout_secs: int = _opt(600, check=_positive, kind=int,
                                  doc="how long the evaluator may take to evaluate the final checkpoint")
    stall_timeout_secs: int = _opt(300, check=_positive, kind=int,
                                   doc="count the run as failed when no task reports progress for this long")
    network: str = _opt("auto", choices=NETWORK_MODES,
                        doc="private: run the tasks in a network namespace of their own, loopback only, so no "
                            "other machine or namespace reaches their unauthenticated ports; auto: private when "
                            "every task is on loopback and the system allows it; host: the machine's network")


@dataclass(frozen=True)
class RestartConfig:
    policy: str = _opt("never", choices=RESTART_POLICIES,
                       doc="on_failure: when a training task dies or the run stalls, stop the group and start it "
                           "again from the latest checkpoint")
    max_restarts: int = _opt(3, check=_non_negative, kind=int, doc="give up after this many restarts")
    backoff_secs: int = _opt(5, check=_non_negative, kind=int, doc="pause before each restart")


@dataclass(frozen=True)
class Config:
    """Everything one run needs; built once by `load_config` and passed down."""

    source: str
    cluster: ClusterConfig
    strategy: StrategyConfig = StrategyConfig()
    session: SessionConfig = SessionConfig()
    # (selector, overrides) pairs from `tasks:`, least specific first; see task_settings().
    tasks: Tuple[Tuple[str, Tuple[Tuple[str, Any], ...]], ...] = ()
    model: ModelConfig = ModelConfig()
    training: TrainingConfig = TrainingConfig()
    evaluation: EvaluationConfig = EvaluationConfig()
    launcher: LauncherConfig = LauncherConfig()
    restart: RestartConfig = RestartConfig()
    run_dir: str = ""
    model_dir: str = ""
    data_dir: str = ""

    def task_settings(self, role: str, index: int) -> TaskSettings:
        """Defaults, then `tasks.all`, then `tasks.ROLE`, then `tasks.ROLE:INDEX`."""
        values = {}
        for selector, overrides in self.tasks:
            if selector in ("all", role, f"{role}:{index}"):
                values.update(overrides)
        return TaskSettings(**values)


SECTIONS = {
    "session": SessionConfig,
    "model": ModelConfig,
    "training": TrainingConfig,
    "evaluation": EvaluationConfig,
    "launcher": LauncherConfig,
    "restart": RestartConfig,
}
TOP_LEVEL_KEYS = ("cluster", "strategy", "tasks", *SECTIONS, "run_dir", "model_dir", "data_dir")
CLUSTER_KEYS = ("chief", "worker", "ps", "evaluator")


def default_data_dir() -> str:
    # Shared by every run on this machine: MNIST is prepared once, not per run.
    return os.environ.get("ESTIMATOR_MNIST_DATA_DIR") or str(Path.home() / "tensorflow_datasets")


def _type_name(value) -> str:
    return type(value).__name__


def _check_keys(file, mapping, valid, section):
    for key in mapping:
        if key not in valid:
            raise UsageError(ERR_UNKNOWN_KEY.format(file=file, key=key, section=section, valid=", ".join(valid)))


def _as_mapping(file, value, key):
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise UsageError(ERR_NOT_MAPPING.format(file=file, key=key, got=_type_name(value)))
    return value


def _coerce(file, key, value, f: dataclasses.Field):
    meta = f.metadata
    kind = meta.get("kind")
    choices = meta.get("choices")
    if choices is not None:
        if value not in choices:
            raise UsageError(ERR_CHOICE.format(file=file, key=key, choices=", ".join(choices), got=value))
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UsageError(ERR_TYPE.format(file=file, key=key, expected="a whole number", got=value))
    elif kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UsageError(ERR_TYPE.format(file=file, key=key, expected="a number", got=value))
        value = float(value)
    elif kind is bool:
        if not isinstance(value, bool):
            raise UsageError(ERR_TYPE.format(file=file, key=key, expected="true or false", got=value))
    check = meta.get("check")
    problem = check(value) if check else None
    if problem:
        raise UsageError(ERR_RANGE.format(file=file, key=key, bound=problem, got=value))
    return tuple(value) if kind == "list" and value is not None else value


def _parse_values(file, mapping, cls, name):
    """Validated {field: value} of a section mapping; unknown keys are refused."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    _check_keys(file, mapping, list(fields), name)
    return {k: _coerce(file, f"{name}.{k}", v, fields[k]) for k, v in mapping.items()}


def _parse_section(file, raw, cls, name):
    return cls(**_parse_values(file, _as_mapping(file, raw, name), cls, name))


_ADDRESS = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9_.-]+)):(?P<port>\d+)$")


def parse_address(file, key, text) -> Address:
    if not isinstance(text, str):
        raise UsageError(ERR_ADDRESS.format(file=file, key=key, got=text))
    match = _ADDRESS.match(text.strip())
    if not match:
        raise UsageError(ERR_ADDRESS.format(file=file, key=key, got=text))
    port = int(match["port"])
    if not 1 <= port <= 65535:
        raise UsageError(ERR_PORT.format(file=file, key=key, port=port))
    return Address(host=match["v6"] or match["host"], port=port)


def _parse_cluster(file, raw) -> ClusterConfig:
    if raw is None:
        raise UsageError(ERR_MISSING_KEY.format(file=file, key="cluster", hint="e.g. cluster: {chief: ['localhost:2222'], worker: ['localhost:2223']}"))
    mapping = _as_mapping(file, raw, "cluster")
    _check_keys(file, mapping, CLUSTER_KEYS, "cluster")
    seen = {}
    roles = {}
    for role in TRAINING_ROLES:
        entries = mapping.get(role)
        if entries is None:
            roles[role] = ()
            continue
        if isinstance(entries, str):
            entries = [entries]
        if not isinstance(entries, list):
            raise UsageError(ERR_TYPE.format(file=file, key=f"cluster.{role}", expected="a list of 'host:port' strings", got=entries))
        if not entries:
            raise UsageError(ERR_EMPTY_LIST.format(file=file, key=f"cluster.{role}"))
        addresses = []
        for index, text in enumerate(entries):
            key = f"cluster.{role}[{index}]"
            address = parse_address(file, key, text)
            if address in seen:
                raise UsageError(ERR_DUPLICATE.format(file=file, key=key, address=address, other=seen[address]))
            seen[address] = key
            addresses.append(address)
        roles[role] = tuple(addresses)
    evaluator = mapping.get("evaluator")
    if evaluator is not None:
        if isinstance(evaluator, list):
            if len(evaluator) != 1:
                raise UsageError(ERR_MANY.format(file=file, role="evaluator", count=len(evaluator)))
            evaluator = evaluator[0]
        if not isinstance(evaluator, str) or not re.match(r"^[A-Za-z0-9_.:\[\]-]+$", evaluator):
            raise UsageError(ERR_TYPE.format(file=file, key="cluster.evaluator", expected="a host name such as 'localhost' (the evaluator runs no server, so no port)", got=evaluator))
        # Accept 'host:port' for symmetry with the other roles; the port is unused.
        if _ADDRESS.match(evaluator):
            evaluator = parse_address(file, "cluster.evaluator", evaluator).host
    if len(roles["chief"]) > 1:
        raise UsageError(ERR_MANY.format(file=file, role="chief", count=len(roles["chief"])))
    if not roles["chief"] and not roles["worker"]:
        raise UsageError(ERR_NO_TRAINER.format(file=file))
    return ClusterConfig(evaluator=evaluator, **roles)


def _parse_strategy(file, raw) -> StrategyConfig:
    if raw is None:
        return StrategyConfig()
    if isinstance(raw, str):
        raw = {"name": raw}
    mapping = _as_mapping(file, raw, "strategy")
    if "name" not in mapping:
        raise UsageError(ERR_MISSING_KEY.format(file=file, key="strategy.name", hint=f"one of {', '.join(STRATEGIES)}"))
    fields = {f.name: f for f in dataclasses.fields(StrategyConfig)}
    name = _coerce(file, "strategy.name", mapping["name"], fields["name"])
    values = _parse_values(file, mapping, StrategyConfig, "strategy")
    for key in mapping:
        owners = fields[key].metadata.get("strategies")
        if owners and name not in owners:
            raise UsageError(ERR_STRATEGY_KEY.format(file=file, key=key, owners=" or ".join(owners), strategy=name))
    return StrategyConfig(**values)


def _roles_error(file, strategy, problem, fix):
    return UsageError(ERR_STRATEGY_ROLES.format(file=file, strategy=strategy, problem=problem, fix=fix))


def _check_strategy_roles(file, strategy: StrategyConfig, cluster: ClusterConfig):
    """Each strategy's roles: the ones it needs are required and the others refused."""
    name = strategy.name
    if name == "multi_worker_mirrored" and cluster.ps:
        raise _roles_error(file, name, "does not use parameter servers but cluster.ps is set",
                           "remove cluster.ps (variables are mirrored on every worker), or use strategy parameter_server")
    if name in ("parameter_server", "parameter_server_sync") and not cluster.ps:
        raise _roles_error(file, name, "keeps the variables on parameter servers but cluster.ps is empty",
                           "add cluster.ps: ['host:port']")
    if name == "parameter_server_sync" and not cluster.chief:
        raise _roles_error(file, name, "needs a chief (Estimator's own ps replication requires one; it trains too)",
                           "move one address from cluster.worker to cluster.chief")
    if name in ("mirrored", "one_device"):
        if cluster.ps or cluster.worker:
            extra = "cluster.ps" if cluster.ps else "cluster.worker"
            raise _roles_error(file, name, f"runs one training process on one machine but {extra} is set",
                               "keep only cluster.chief (and the evaluator), or use multi_worker_mirrored "
                               "for several machines")
    if name == "parameter_server_sync" and strategy.replicas_to_aggregate is not None \
            and strategy.replicas_to_aggregate > cluster.num_workers:
        raise UsageError(ERR_R2A.format(file=file, got=strategy.replicas_to_aggregate, replicas=cluster.num_workers))


def _task_selectors(cluster: ClusterConfig):
    tasks = [f"{role}:{index}" for role, index, _ in cluster.task_hosts()]
    roles = sorted({t.split(":")[0] for t in tasks})
    return roles, tasks


def _parse_tasks(file, raw, cluster: ClusterConfig):
    mapping = _as_mapping(file, raw, "tasks")
    roles, tasks = _task_selectors(cluster)
    parsed = []
    for selector, overrides in mapping.items():
        if selector != "all" and selector not in roles and selector not in tasks:
            raise UsageError(ERR_TASK_SELECTOR.format(file=file, selector=selector, roles=", ".join(roles),
                                                      tasks=", ".join(tasks)))
        key = f"tasks.{selector}"
        values = _parse_values(file, _as_mapping(file, overrides, key), TaskSettings, key)
        parsed.append((selector, tuple(values.items())))
    specificity = {"all": 0, **{r: 1 for r in roles}, **{t: 2 for t in tasks}}
    return tuple(sorted(parsed, key=lambda item: specificity[item[0]]))


def _check_devices(config: "Config"):
    """Refusals that follow from the devices a task is given, when the YAML tells them."""
    file, strategy, cluster = config.source, config.strategy, config.cluster
    trainers = [(role, index) for role, index, _ in cluster.training_tasks() if role != "ps"]
    if strategy.name == "multi_worker_mirrored" and strategy.communication == "nccl":
        for role, index in trainers:
            if config.task_settings(role, index).gpus == ():
                raise UsageError(ERR_NCCL_NO_GPU.format(file=file, key="strategy.communication", who=f"task {role}:{index}",
                                                        why="its gpus is []", fix="communication: ring or auto"))
    if strategy.name not in ("mirrored", "one_device"):
        return
    gpus = config.task_settings("chief", 0).gpus
    devices = strategy.devices or ()
    if strategy.name == "one_device" and strategy.device != "auto":
        devices = (strategy.device,)
    kinds = [device_index(d) for d in devices]
    if strategy.name == "mirrored" and strategy.cross_device_ops == "nccl" and devices \
            and all(kind == "cpu" for kind, _ in kinds):
        raise UsageError(ERR_NCCL_NO_GPU.format(file=file, key="strategy.cross_device_ops", who="strategy.devices",
                                                why="only CPU devices are listed",
                                                fix="cross_device_ops: auto or reduction_to_one_device"))
    key = "strategy.devices" if strategy.name == "mirrored" else "strategy.device"
    for (kind, index), device in zip(kinds, devices):
        if kind == "gpu" and gpus is not None and index >= len(gpus):
            raise UsageError(ERR_RANGE.format(
                file=file, key=key, got=device,
                bound=f"one of the {len(gpus)} GPU(s) the chief sees, /gpu:0 to /gpu:{len(gpus) - 1} "
                      f"(tasks.chief.gpus is {list(gpus)}; indices count from 0 after masking)"
                if gpus else "a CPU device, because the chief's gpus is [] (no GPU visible)"))


def _resolve_path(value, file, key, default):
    if value is None:
        value = default
    if not isinstance(value, str) or not value:
        raise UsageError(ERR_TYPE.format(file=file, key=key, expected="a path", got=value))
    # Relative paths are taken from the directory the command runs in, so that
    # the launcher and the tasks it starts (same cwd) agree on them.
    return str(Path(os.path.expanduser(value)).resolve())


def config_from_dict(data, source: str) -> Config:
    """Builds the frozen config from already-loaded YAML data; `source` names it in errors."""
    file = source
    data = _as_mapping(file, data, "the top level")
    _check_keys(file, data, TOP_LEVEL_KEYS, "the top level")
    cluster = _parse_cluster(file, data.get("cluster"))
    strategy = _parse_strategy(file, data.get("strategy"))
    _check_strategy_roles(file, strategy, cluster)
    tasks = _parse_tasks(file, data.get("tasks"), cluster)
    sections = {name: _parse_section(file, data.get(name), cls, name) for name, cls in SECTIONS.items()}
    training = sections["training"]
    if training.save_checkpoints_steps > training.max_steps:
        raise UsageError(ERR_RANGE.format(file=file, key="training.save_checkpoints_steps",
                                          bound=f"at most training.max_steps ({training.max_steps})",
                                          got=training.save_checkpoints_steps))
    if cluster.evaluator is not None and training.keep_checkpoint_max < 2:
        # Each save deletes the oldest checkpoint beyond the limit: with 1 kept,
        # that is the very checkpoint the evaluator may be reading.
        raise UsageError(ERR_RANGE.format(file=file, key="training.keep_checkpoint_max",
                                          bound="at least 2 when the cluster has an evaluator (with 1, each save "
                                                "deletes the checkpoint the evaluator may be reading)",
                                          got=training.keep_checkpoint_max))
    stem = Path(source).stem if source else "run"
    run_dir = _resolve_path(data.get("run_dir"), file, "run_dir", os.path.join("runs", stem))
    model_dir = _resolve_path(data.get("model_dir"), file, "model_dir", os.path.join(run_dir, "model"))
    data_dir = _resolve_path(data.get("data_dir"), file, "data_dir", default_data_dir())
    config = Config(source=source, cluster=cluster, strategy=strategy, tasks=tasks, run_dir=run_dir,
                    model_dir=model_dir, data_dir=data_dir, **sections)
    _check_devices(config)
    return config


def read_yaml(path) -> dict:
    """The raw mapping of a YAML file, or a UsageError naming the file and the problem."""
    import yaml  # Imported here so `--help` stays instant.

    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(ERR_UNREADABLE.format(file=file, reason=reason)) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        reason = where + str(getattr(exc, "problem", None) or exc)
        raise UsageError(ERR_NOT_YAML.format(file=file, reason=reason)) from None
    if data is None:
        raise UsageError(ERR_MISSING_KEY.format(file=file, key="cluster", hint="the file is empty"))
    return dict(_as_mapping(file, data, "the top level"))


def load_config(path, **overrides) -> Config:
    """Reads and validates a cluster YAML file; `overrides` replace top-level keys (e.g. model_dir)."""
    data = read_yaml(path)
    data.update({k: v for k, v in overrides.items() if v is not None})
    return config_from_dict(data, str(path))


def _describe_fields(cls, indent="  "):
    lines = []
    for f in dataclasses.fields(cls):
        extra = f" one of {', '.join(f.metadata['choices'])}" if f.metadata.get("choices") else ""
        owners = f" [{', '.join(f.metadata['strategies'])} only]" if f.metadata.get("strategies") else ""
        doc = f"  # {f.metadata['doc']}" if f.metadata.get("doc") else ""
        lines.append(f"{indent}{f.name}: {f.default!r}{extra}{owners}{doc}")
    return lines


def describe_keys() -> str:
    """Every valid key with its default, for `estimator-mnist keys`."""
    lines = ["cluster: {chief: [host:port], worker: [host:port, ...], ps: [host:port, ...], evaluator: host}",
             "strategy: a name, or a mapping:", *_describe_fields(StrategyConfig),
             "tasks: settings per task, keyed by all, a role (worker) or a task (worker:1); the most specific wins:",
             *_describe_fields(TaskSettings, indent="  all: "),
             "run_dir: default runs/<yaml name>; model_dir: default <run_dir>/model",
             "data_dir: default $ESTIMATOR_MNIST_DATA_DIR or ~/tensorflow_datasets"]
    for name, cls in SECTIONS.items():
        lines.append(f"{name}:")
        lines.extend(_describe_fields(cls))
    return "\n".join(lines)

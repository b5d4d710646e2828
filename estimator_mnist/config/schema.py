"""The schema of the run configuration: frozen dataclasses for every YAML section, with defaults and help.

A field's metadata carries what `values.coerce` checks (kind, choices, a
range check), the help text of `estimator-mnist keys`, and, for strategy keys,
which strategies own them. Nothing here reads files or imports TensorFlow.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Tuple

from estimator_mnist.config import values as v
from estimator_mnist.model_files import layout
from estimator_mnist.config.identity import Address, ClusterConfig, TaskId  # noqa: F401  (re-exported: the config's public names)

TRAINING_ROLES = ("chief", "worker", "ps")
ROLES = TRAINING_ROLES + ("evaluator",)
STRATEGIES = ("multi_worker_mirrored", "parameter_server", "parameter_server_sync", "mirrored", "one_device")
# One training process replicates over this machine's devices: no TF server, no TF_CONFIG cluster.
IN_GRAPH_STRATEGIES = ("mirrored", "one_device")
PS_STRATEGIES = ("parameter_server", "parameter_server_sync")
COMMUNICATIONS = ("auto", "ring", "nccl")
CROSS_DEVICE_OPS = ("auto", "nccl", "hierarchical_copy", "reduction_to_one_device")
NETWORKS = ("classic_cnn", "tutorial_cnn")
OPTIMIZERS = ("adam", "momentum")
EXPORTERS = ("latest", "best")
RESTART_POLICIES = ("never", "on_failure")
NETWORK_MODES = ("auto", "private", "host")
LR_SCHEDULES = ("warmup_cosine", "cosine", "constant")
PRECISIONS = ("auto", "float32", "mixed_bfloat16", "mixed_float16")
EVAL_PRECISIONS = ("float32", "training")
GRADIENT_COMPRESSIONS = ("none", "fp16", "bf16")


def _opt(default, *, check=None, choices=None, kind=None, doc="", strategies=None):
    return field(default=default, metadata={"check": check, "choices": choices, "kind": kind, "doc": doc,
                                            "strategies": strategies})


def default_data_dir() -> str:
    # Shared by every run on this machine: MNIST is prepared once, not per run.
    return os.environ.get("ESTIMATOR_MNIST_DATA_DIR") or str(Path.home() / "tensorflow_datasets")


@dataclass(frozen=True)
class StrategyConfig:
    """`strategy:` in the YAML: a name, or a mapping with `name` and that strategy's keys."""

    name: str = _opt("multi_worker_mirrored", choices=STRATEGIES,
                     doc="multi_worker_mirrored: sync all-reduce; parameter_server: async ps; parameter_server_sync: "
                         "sync ps with backup workers; mirrored: one machine, several devices; one_device: one process")
    communication: str = _opt("auto", choices=COMMUNICATIONS, strategies=("multi_worker_mirrored",),
                              doc="all-reduce between workers: ring (gRPC), nccl (GPUs) or auto")
    collective_timeout_secs: int = _opt(300, check=v.non_negative, kind=int, strategies=("multi_worker_mirrored",),
                                        doc="a step whose all-reduce waits longer ends the task with 200 (retryable); 0 = no limit")
    gradient_compression: str = _opt("none", choices=GRADIENT_COMPRESSIONS,
                                     strategies=("multi_worker_mirrored", "mirrored"),
                                     doc="gradients all-reduced as float32 (none), float16 or bfloat16; the "
                                         "variables and their update stay float32")
    replicas_to_aggregate: Optional[int] = _opt(None, check=v.positive, kind=int, strategies=("parameter_server_sync",),
                                                doc="gradients averaged per step; fewer than the replicas leaves the "
                                                    "rest as backup workers (default: all replicas)")
    devices: Optional[Tuple[str, ...]] = _opt(None, check=v.device_list, kind="list", strategies=("mirrored",),
                                              doc="devices to replicate over (default: every GPU, else /cpu:0)")
    cross_device_ops: str = _opt("auto", choices=CROSS_DEVICE_OPS, strategies=("mirrored",),
                                 doc="how mirrored replicas combine gradients; auto: nccl on GPUs, "
                                     "reduction_to_one_device on CPUs")
    device: str = _opt("auto", check=v.device, kind="str", strategies=("one_device",),
                       doc="the device of one_device (auto: /gpu:0 when there is one, else /cpu:0)")

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class TaskSettings:
    """Device and session settings of one task: `tasks: {all|ROLE|ROLE:INDEX: {...}}` in the YAML."""

    gpus: Optional[Tuple[int, ...]] = _opt(None, check=v.gpu_list, kind="list",
                                           doc="GPU indices this task may see (sets CUDA_VISIBLE_DEVICES); "
                                               "[] hides all GPUs; default: inherit the environment")
    gpu_memory_growth: bool = _opt(False, kind=bool, doc="allocate GPU memory as needed instead of all at once")
    gpu_memory_fraction: float = _opt(0.0, check=v.share, kind=float,
                                      doc="cap on the share of each GPU's memory; 0 = no cap")
    intra_op_threads: Any = _opt("auto", check=v.threads, kind="threads",
                                 doc="auto: this machine's cores split between its training tasks (the evaluator: all)")
    inter_op_threads: Any = _opt("auto", check=v.threads, kind="threads")
    pin_cores: bool = _opt(True, kind=bool,
                           doc="a trainer sharing its machine with other trainers runs only on its own share of "
                               "the cores (CPU affinity), as auto threads assume")
    step_delay_ms: int = _opt(0, check=v.non_negative, kind=int,
                              doc="sleep after each training step of this task, to rehearse a straggler")


@dataclass(frozen=True)
class SessionConfig:
    """Run-wide TensorFlow session settings."""

    log_device_placement: bool = _opt(False, kind=bool, doc="log every op's device in each task's log")
    operation_timeout_ms: Any = _opt("auto", check=v.ms_or_auto, kind="auto_int",
                                     doc="an op that waits longer fails with DeadlineExceeded and the task exits "
                                         "200 (retryable); 0 = no limit; auto: 60000 for the parameter_server "
                                         "strategies (a lost ps is noticed), else 0")


@dataclass(frozen=True)
class ModelConfig:
    network: str = _opt("classic_cnn", choices=NETWORKS,
                        doc="classic_cnn: conv5x5x32-pool-conv5x5x64-pool-dense500; tutorial_cnn: conv3x3x32-pool-dense64")
    optimizer: str = _opt("adam", choices=OPTIMIZERS)
    learning_rate: float = _opt(0.006, check=v.positive, kind=float)
    lr_schedule: str = _opt("warmup_cosine", choices=LR_SCHEDULES,
                            doc="warmup_cosine: from a tenth of learning_rate up to it over warmup_steps, then down "
                                "to 0 at training.max_steps; cosine: from learning_rate to a tenth of it")
    warmup_steps: int = _opt(30, check=v.non_negative, kind=int, doc="used by lr_schedule: warmup_cosine")
    momentum: float = _opt(0.9, check=v.fraction, kind=float, doc="used by optimizer: momentum")
    adam_beta1: float = _opt(0.8, check=v.fraction, kind=float,
                             doc="used by optimizer: adam; decay of its gradient average")
    adam_beta2: float = _opt(0.95, check=v.fraction, kind=float,
                             doc="used by optimizer: adam; decay of its squared-gradient average")
    dropout: float = _opt(0.0, check=v.fraction, kind=float,
                          doc="dropout rate before the last layer while training (classic_cnn: after dense500)")
    normalise_inputs: bool = _opt(True, kind=bool, doc="the network's first layer maps pixels to mean 0 and standard "
                                  "deviation 1 over MNIST's training set (no weights; the export does the same); "
                                  "checkpoints trained without it need false")
    label_smoothing: float = _opt(0.1, check=v.fraction, kind=float, doc="training targets spread this much of "
                                  "their probability over the 10 classes (0: one-hot); evaluation's loss is one-hot")
    weight_average_decay: float = _opt(0.99, check=v.fraction, kind=float, doc="the evaluator scores, and the "
                                       "export holds, a moving average of the weights with this decay (its horizon "
                                       "grows to 1/(1-decay) steps over the first hundreds); 0: the weights themselves")
    weight_average_warmup: int = _opt(8, check=v.non_negative, kind=int,
                                      doc="the average's decay at step n is min(weight_average_decay, (n - 1) / "
                                          "(n + this)): 8 is tf.train.ExponentialMovingAverage's warm-up; lower "
                                          "lengthens the average's horizon sooner")
    precision: str = _opt("auto", choices=PRECISIONS,
                          doc="training compute type; variables stay float32. auto: mixed_float16 on GPUs of compute "
                              "capability 7.0+, mixed_bfloat16 on CPUs with bfloat16 instructions (AMX or "
                              "AVX512_BF16), else float32")


@dataclass(frozen=True)
class TrainingConfig:
    batch_size_per_replica: int = _opt(256, check=v.positive, kind=int)
    max_steps: int = _opt(300, check=v.positive, kind=int)
    save_checkpoints_steps: int = _opt(60, check=v.positive, kind=int)
    keep_checkpoint_max: int = _opt(5, check=v.positive, kind=int)
    log_step_count_steps: int = _opt(100, check=v.positive, kind=int)
    shuffle_buffer: int = _opt(10000, check=v.positive, kind=int)
    seed: int = _opt(0, check=v.non_negative, kind=int)
    session_creation_timeout_secs: int = _opt(300, check=v.positive, kind=int,
                                              doc="a trainer whose cluster has not formed by then names the "
                                                  "peers that do not answer and stops (Estimator's own: 2 hours)")
    teardown_timeout_secs: int = _opt(3, check=v.positive, kind=int,
                                      doc="exit when closing the session still blocks this long after the final checkpoint")
    preemption_grace_secs: int = _opt(25, check=v.positive, kind=int,
                                      doc="after SIGTERM every trainer stops at the same step, the chief saves, and "
                                          "each exits 200 within this; below Kubernetes' default 30 s grace period")
    ps_idle_timeout_secs: int = _opt(300, check=v.positive, kind=int,
                                     doc="a ps task that no trainer has reached for this long exits 200 (retryable)")
    trace_step: int = _opt(0, check=v.non_negative, kind=int,
                           doc="0: off; N: each trainer writes its local step N, every op with its start and "
                               "duration, to <run_dir>/traces/<task>-step-N.json (Chrome's trace format; "
                               "benchmarks/step_timeline.py summarises it)")


@dataclass(frozen=True)
class DataConfig:
    validation_examples: int = _opt(0, check=v.held_out, kind=int,
                                    doc="the last N images of MNIST's training set (the same on every task and "
                                        "host) are held out: never trained on, scored with the test set at every "
                                        "evaluation, and what sweeps and ensembles choose on; 0: train on all "
                                        "60,000 (sweep: 5000 unless set)")


@dataclass(frozen=True)
class EvaluationConfig:
    throttle_secs: int = _opt(2, check=v.non_negative, kind=int)
    start_delay_secs: int = _opt(0, check=v.non_negative, kind=int,
                                 doc="no evaluation before this many seconds after the evaluator's start; 0: each "
                                     "checkpoint is scored as soon as it is noticed")
    batch_size: int = _opt(1000, check=v.positive, kind=int)
    export: str = _opt("latest", choices=EXPORTERS,
                       doc="latest: export every evaluated checkpoint; best: only when the loss improves, on "
                           "the validation split when there is one (data.validation_examples), else on the test set")
    exports_to_keep: int = _opt(3, check=v.positive, kind=int)
    final_timeout_secs: int = _opt(600, check=v.positive, kind=int,
                                   doc="how long the chief (and launch) wait for the evaluation of the final "
                                       "checkpoint; past it the chief exits 1")
    precision: str = _opt("float32", choices=EVAL_PRECISIONS,
                          doc="what the evaluator computes in. float32: as the export computes, so the score is the "
                              "export's; training: what training computes in, as Keras's evaluate does under a "
                              "mixed policy (with bfloat16 about 2 s sooner per evaluation on 2 cores, but the "
                              "score can differ from the export's by a few images of 10k)")
    nice: Any = _opt("idle", check=v.nice, kind="nice",
                     doc="the evaluator's CPU priority, so that it slows training as little as it can: idle (Linux "
                         "SCHED_IDLE: it runs only on cores the trainers leave idle, though it still shares "
                         "their caches and memory; on a kernel with autogroups, Debian's default, its session "
                         "still gets an equal share beside each trainer's) or a niceness 0-19")


@dataclass(frozen=True)
class LauncherConfig:
    grace_secs: int = _opt(10, check=v.positive, kind=int, doc="SIGTERM to SIGKILL")
    finish_timeout_secs: int = _opt(60, check=v.positive, kind=int,
                                    doc="how long other tasks may take to exit once the chief finished")
    stall_timeout_secs: int = _opt(300, check=v.positive, kind=int,
                                   doc="launch counts the run as failed when no task reports progress for this "
                                       "long; every task (launched or not) ends its TensorFlow process once it "
                                       "has been stopped by a signal (SIGSTOP, a debugger) this long")
    network: str = _opt("auto", choices=NETWORK_MODES,
                        doc="private: run the tasks in a network namespace of their own, loopback only, so no "
                            "other machine or namespace reaches their unauthenticated ports; auto: private when "
                            "every task is on loopback and the system allows it; host: the machine's network")


@dataclass(frozen=True)
class RestartConfig:
    policy: str = _opt("never", choices=RESTART_POLICIES,
                       doc="on_failure: when a training task dies or the run stalls, stop the group and start it "
                           "again from the latest checkpoint")
    max_restarts: int = _opt(3, check=v.non_negative, kind=int, doc="give up after this many restarts")
    backoff_secs: int = _opt(5, check=v.non_negative, kind=int, doc="pause before each restart")


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
    data: DataConfig = DataConfig()
    evaluation: EvaluationConfig = EvaluationConfig()
    launcher: LauncherConfig = LauncherConfig()
    restart: RestartConfig = RestartConfig()
    run_dir: str = ""
    model_dir: str = ""
    data_dir: str = ""

    @property
    def records_dir(self) -> str:
        """Where the records that other tasks read while the job runs live (each trainer's progress, which the
        launcher, the evaluator's start gate and Slurm's steps read): run_dir, unless model_dir is a bucket,
        whose machines share nothing else (docs/storage.md); then model_dir."""
        return layout.records_dir(self.model_dir, self.run_dir)

    def task_settings(self, task: TaskId) -> TaskSettings:
        """Defaults, then `tasks.all`, then `tasks.ROLE`, then `tasks.ROLE:INDEX`."""
        settings = {}
        for selector, overrides in self.tasks:
            if selector in ("all", task.type, str(task)):
                settings.update(overrides)
        return TaskSettings(**settings)


SECTIONS = {
    "session": SessionConfig,
    "model": ModelConfig,
    "training": TrainingConfig,
    "data": DataConfig,
    "evaluation": EvaluationConfig,
    "launcher": LauncherConfig,
    "restart": RestartConfig,
}
TOP_LEVEL_KEYS = ("cluster", "strategy", "tasks", *SECTIONS, "run_dir", "model_dir", "data_dir")
CLUSTER_KEYS = ("chief", "worker", "ps", "evaluator")



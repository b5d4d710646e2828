"""Runs one task from its TaskSpec: builds the Estimator, then trains, evaluates or both.

The spec (plan/task_spec.py) was resolved before TensorFlow was imported;
here the one fact only TensorFlow knows (the GPUs, hence `precision: auto`)
is filled into its plan once, the whole spec is logged as the task's first
line, and it is passed down: strategy -> RunConfig -> Estimator ->
train_and_evaluate.
"""

from __future__ import annotations

import functools
import gc
import logging
import os
from dataclasses import replace

import tensorflow as tf

from estimator_mnist import storage
from estimator_mnist.model_files import checkpoints
from estimator_mnist.tf_task.bucket_errors import bucket_failure
from estimator_mnist.tf_task.checkpoint_repair import fall_back_to_intact
from estimator_mnist.config import PS_STRATEGIES, Config, TaskId
from estimator_mnist.tf_task.data import VALIDATION_SPLIT, input_fn
from estimator_mnist.tf_task.disk_full import disk_full_failure, is_disk_full
from estimator_mnist.errors import RETRYABLE_EXIT_CODE, RETRYABLE_NOTE, RetryableFailure
from estimator_mnist.tf_task.evaluator import exporter
from estimator_mnist.tf_task.hooks import ProgressHook, ReadyHook, ThroughputSummaryHook, VariablePlacementHook, log
from estimator_mnist.tf_task.save_times import save_times_listeners, saves_recorded
from estimator_mnist.tf_task.model import model_fn
from estimator_mnist.plan.peers import cause_of, missing_peers, named_in, peers_of
from estimator_mnist.tf_task.preemption import Preemption, PreemptionHook, stop_save_listeners
from estimator_mnist.model_files.progress import ProgressWriter, fresh_rates, progress_path
from estimator_mnist.tf_task.roles import DoneSignalHook, finish_training, run_evaluator, run_ps, run_trainer
from estimator_mnist.tf_task.step_watchdog import StepWatchdogHook
from estimator_mnist.tf_task.step_trace import StepTraceHook, trace_path
from estimator_mnist.tf_task.strategy import build_train_strategy, configure_devices, gpu_capabilities, session_config
from estimator_mnist.plan.task_plan import TaskPlan, describe
from estimator_mnist.plan.task_spec import TaskSpec
from estimator_mnist.tf_task.teardown import TeardownWatchdogHook, exit_now
from estimator_mnist.tf_task.tf_workarounds import (bound_close_after_an_error, bound_session_recreation, lean_checkpoint_start,
                             lean_events_graph, without_autograph)

# TensorFlow's errors for a peer that is gone or unreachable, or a wait that timed out: a restart can cure them.
TRANSIENT_ERRORS = (tf.errors.UnavailableError, tf.errors.DeadlineExceededError, tf.errors.AbortedError)
# TF 2.15's error when its gRPC server cannot bind its port (grpc_server_lib.cc): UnknownError with this text.
SERVER_NOT_STARTED = "Could not start gRPC server"


def _configure_logging(task: TaskId) -> None:
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.INFO)
    logger = logging.getLogger("tensorflow")
    logger.propagate = False  # absl's root handler would print every line a second time
    for handler in logger.handlers:
        handler.setFormatter(logging.Formatter(f"%(asctime)s {task} %(levelname)s %(message)s"))


def _strategy_text(config: Config, plan: TaskPlan, strategy) -> str:
    if plan.task.is_evaluator:
        return "none (evaluator)"
    if strategy is None:
        r2a, total = plan.sync_replicas
        return f"{config.strategy.name} (replicas_to_aggregate={r2a} of {total})"
    text = f"{config.strategy.name} ({type(strategy).__name__})"
    if config.strategy.name == "multi_worker_mirrored":
        text += (f" communication={config.strategy.communication} "
                 f"collective_timeout_secs={config.strategy.collective_timeout_secs or 'none'}")
    if config.strategy.name in ("multi_worker_mirrored", "mirrored"):
        text += f" gradient_compression={config.strategy.gradient_compression}"
    return text


def first_log_line(spec: TaskSpec) -> str:
    """The spec the task runs with, its precision resolved: one line of JSON."""
    return f"task {spec.plan.task} spec {spec.to_json()}"


def setup_log_line(config: Config, plan: TaskPlan, strategy, priority: str) -> str:
    """The second line, for people: the plan as applied, and what TensorFlow sees."""
    devices = ", ".join(d.name for d in tf.config.list_logical_devices()) or "none"
    replicas = strategy.num_replicas_in_sync if strategy is not None else 1
    return (f"task {plan.task} role={plan.task.type} strategy={_strategy_text(config, plan, strategy)} "
            f"replicas_in_sync={replicas} devices=[{devices}] {describe(plan)} "
            f"gpu_memory_growth={plan.settings.gpu_memory_growth} "
            f"gpu_memory_fraction={plan.settings.gpu_memory_fraction} cpu_priority={priority} "
            f"precision={plan.precision} (model.precision={config.model.precision}) "
            f"evaluates_in={plan.evaluation_precision} (evaluation.precision={config.evaluation.precision}) "
            f"log_device_placement={config.session.log_device_placement} "
            f"model_dir={config.model_dir} pid={os.getpid()}")


def build_estimator(config: Config, plan: TaskPlan, strategy=None):
    """The task's Estimator: its RunConfig (model_dir, checkpoints, summaries, the session settings and `strategy`)
    over model_fn. `plan` has its precision resolved already (TaskPlan.with_precision)."""
    training = config.training
    lean_checkpoint_start()
    lean_events_graph()
    run_config = tf.estimator.RunConfig(
        model_dir=config.model_dir,
        train_distribute=strategy,
        # Under MultiWorkerMirrored, save_checkpoints_secs would silently become
        # "every 1000 steps"; steps are explicit and the same for every task.
        save_checkpoints_steps=training.save_checkpoints_steps,
        save_summary_steps=training.log_step_count_steps,
        keep_checkpoint_max=training.keep_checkpoint_max,
        checkpoint_save_graph_def=False,  # tf_workarounds.lean_checkpoint_start
        log_step_count_steps=training.log_step_count_steps,
        session_config=session_config(config, plan),
        session_creation_timeout_secs=training.session_creation_timeout_secs,
        tf_random_seed=training.seed,
    )
    params = {"config": config.model, "batch_size_per_replica": training.batch_size_per_replica,
              "max_steps": training.max_steps, "sync_replicas": plan.sync_replicas, "precision": plan.precision,
              "eval_precision": plan.evaluation_precision,
              "gradient_compression": config.strategy.gradient_compression}
    return tf.estimator.Estimator(model_fn=model_fn, config=run_config, params=params)


def train_and_eval_specs(config: Config, make_dataset=None, hooks=()):
    training = config.training
    held_out = config.data.validation_examples
    common = dict(data_dir=config.data_dir, batch_size_per_replica=training.batch_size_per_replica,
                  eval_batch_size=config.evaluation.batch_size, shuffle_buffer=training.shuffle_buffer,
                  seed=training.seed, make_dataset=make_dataset, validation_examples=held_out)
    train_spec = tf.estimator.TrainSpec(input_fn=functools.partial(input_fn, tf.estimator.ModeKeys.TRAIN, **common),
                                        max_steps=training.max_steps, hooks=list(hooks))
    # The validation split, scored by the exporter after each test evaluation (evaluator.py); none without one.
    validation_input_fn = functools.partial(input_fn, tf.estimator.ModeKeys.EVAL, eval_split=VALIDATION_SPLIT,
                                            **common) if held_out else None
    eval_spec = tf.estimator.EvalSpec(
        input_fn=functools.partial(input_fn, tf.estimator.ModeKeys.EVAL, **common),
        steps=None,  # the whole test split
        exporters=[exporter(config, validation_input_fn)],
        start_delay_secs=config.evaluation.start_delay_secs,
        throttle_secs=config.evaluation.throttle_secs)
    return train_spec, eval_spec


def local_replicas(config: Config, strategy) -> int:
    """Replicas this process computes per step (MultiWorkerMirrored counts every worker's in num_replicas_in_sync)."""
    if strategy is None:
        return 1
    if config.strategy.name == "multi_worker_mirrored":
        return max(1, strategy.num_replicas_in_sync // max(1, config.cluster.num_workers))
    return strategy.num_replicas_in_sync


def examples_per_global_step(config: Config, plan: TaskPlan, strategy) -> int:
    """Images behind one advance of the global step: the whole synchronous batch, or one worker's batch (async ps)."""
    batch = config.training.batch_size_per_replica
    if plan.sync_replicas:
        return batch * plan.sync_replicas[0]  # SyncReplicasOptimizer: one update from replicas_to_aggregate batches
    return batch * (strategy.num_replicas_in_sync if strategy is not None else 1)


def _before_teardown_exit(config: Config, plan: TaskPlan, progress: ProgressHook) -> None:
    """What a trainer does at its end when the teardown watchdog ends it instead of Estimator's return."""
    progress.report(checkpoints.latest_step(config.model_dir))
    finish_training(config, plan)


def training_hooks(config: Config, plan: TaskPlan, strategy=None, ready_fd=None, preemption=None):
    examples = config.training.batch_size_per_replica * local_replicas(config, strategy)
    writer = ProgressWriter(progress_path(config.records_dir, plan.task) if config.records_dir else None, str(plan.task),
                            examples)
    writer.note(precision=plan.precision)  # what model.precision resolved to here, for the summary and the benchmarks
    progress = ProgressHook(plan.task, writer, plan.settings.step_delay_ms / 1000.0)
    hooks = [progress,
             TeardownWatchdogHook(config.model_dir, timeout_secs=config.training.teardown_timeout_secs,
                                  max_steps=config.training.max_steps,
                                  wait_for_final_evaluation=plan.evaluates_itself or plan.waits_for_evaluation,
                                  final_timeout_secs=config.evaluation.final_timeout_secs,
                                  before_exit=lambda: _before_teardown_exit(config, plan, progress))]
    if plan.is_chief:
        hooks.append(ThroughputSummaryHook(config.model_dir, plan.task, examples,
                                           examples_per_global_step(config, plan, strategy),
                                           config.training.log_step_count_steps,
                                           lambda: fresh_rates(config.records_dir) if config.records_dir else {}))
    if config.session.log_device_placement:
        hooks.append(VariablePlacementHook())
    if config.training.trace_step:
        hooks.append(StepTraceHook(config.training.trace_step,
                                   trace_path(config.run_dir or config.model_dir, plan.task, config.training.trace_step)))
    if config.strategy.name in PS_STRATEGIES and not plan.is_chief:
        hooks.append(DoneSignalHook(config, plan))  # the chief: report_final_checkpoint, after its final save
    if ready_fd is not None:
        hooks.append(ReadyHook(ready_fd))
    if config.strategy.name == "multi_worker_mirrored" and config.strategy.collective_timeout_secs:
        hooks.append(StepWatchdogHook(str(plan.task), config.strategy.collective_timeout_secs,
                                      peers_of(plan.tf_config, str(plan.task))))
    if preemption is not None:
        # First, so that the record it notes the stop step in is written by the progress hook's end.
        hooks.insert(0, PreemptionHook(preemption, writer, config.model_dir, plan.is_chief,
                                       config.training.teardown_timeout_secs))
    return hooks


def lost_cluster(plan: TaskPlan, exc: Exception) -> RetryableFailure:
    """The one-line retryable failure for a TensorFlow error that a restart can cure, naming the peers."""
    peers = peers_of(plan.tf_config, str(plan.task))
    lost = named_in(str(exc), peers) or missing_peers(peers)
    who = f"lost {', '.join(lost)}" if lost else "lost its cluster"
    return RetryableFailure(f"task {plan.task} {who}: {type(exc).__name__}: {cause_of(str(exc))}; {RETRYABLE_NOTE}")


def server_failure(plan: TaskPlan, exc: Exception) -> RetryableFailure:
    """The one-line retryable failure for a server whose port was taken between its choice and TensorFlow's bind."""
    cluster, task = (plan.tf_config or {}).get("cluster") or {}, plan.task
    address = (cluster.get(task.type) or [])[task.index:task.index + 1] or ["?"]
    port = address[0].rsplit(":", 1)[-1]
    return RetryableFailure(f"task {task}: TensorFlow could not listen on port {port} ({address[0]}: {exc.message}, "
                            f"the port was taken by another process); {RETRYABLE_NOTE}")


def run_task(spec: TaskSpec, priority: str = "unchanged", ready_fd=None) -> int:
    """Runs the task of `spec` until training (or evaluation) ends. Its plan is already applied."""
    configure_devices(spec.plan)  # before anything starts TensorFlow's runtime
    spec = replace(spec, plan=spec.plan.with_precision(gpu_capabilities()))
    config, plan, task = spec.config, spec.plan, spec.plan.task
    log(first_log_line(spec))
    if task.type != "ps":  # every task that restores agrees on the checkpoint, before TensorFlow reads it
        fall_back_to_intact(config.model_dir, log, writer=plan.is_chief)  # only the writer repairs
    finished_step = checkpoints.latest_step(config.model_dir)
    if not task.is_evaluator and finished_step is not None and finished_step >= config.training.max_steps:
        # Starting a server here would leave the peers waiting for a chief that skips training (and a ps
        # task waiting for trainers that will not come).
        log(f"task {task}: model_dir already holds step {finished_step} >= max_steps "
            f"{config.training.max_steps}; nothing to train. Raise training.max_steps to continue.")
        return 0
    storage.makedirs(config.model_dir)  # a no-op on a bucket, where names need no directory
    _configure_logging(task)
    # Graceful: a trainer stops at the step all agree on; a ps task stays until they have (ps_preemption.py).
    preemption = Preemption(str(task), config.training.preemption_grace_secs, graceful=not task.is_evaluator,
                            # A process that evaluates itself has more to do after its final checkpoint.
                            saved=lambda: checkpoints.work_saved(config.model_dir, config.training.max_steps,
                                                                 evaluates=task.is_evaluator or plan.evaluates_itself))
    preemption.install()
    bound_session_recreation(config.training.session_creation_timeout_secs)
    bound_close_after_an_error(config.training.teardown_timeout_secs, TRANSIENT_ERRORS,
                               lambda exc: exit_now(f"error: {bucket_failure(str(task), exc) or lost_cluster(plan, exc)}",
                                                    RETRYABLE_EXIT_CODE))
    try:
        strategy = build_train_strategy(config, plan)
        log(setup_log_line(config, plan, strategy, priority))
        hooks = training_hooks(config, plan, strategy, ready_fd, preemption) if task.is_trainer else []
        estimator = build_estimator(config, plan, strategy)
        train_spec, eval_spec = train_and_eval_specs(config, hooks=hooks)
        # Everything imported and built so far lives as long as the process: the collector, paused since
        # before TensorFlow's import (tf_task/__main__.py), leaves it alone from now on and scans only what is new.
        gc.freeze()
        gc.enable()
        # The saving task records each save's times (save_times.py); its preemption, when the final save is done.
        with without_autograph(), saves_recorded(save_times_listeners(hooks) + stop_save_listeners(hooks)):
            if task.is_evaluator:
                run_evaluator(config, plan, estimator, eval_spec)
            elif task.type == "ps":
                run_ps(config, plan, estimator, preemption)
            else:
                run_trainer(config, plan, estimator, train_spec, eval_spec, preemption)
    except (*TRANSIENT_ERRORS, tf.errors.PermissionDeniedError, tf.errors.UnauthenticatedError) as exc:
        named = bucket_failure(str(task), exc)  # TF's gs:// gave up or was refused: the storage, not a peer
        if named is None and not isinstance(exc, TRANSIENT_ERRORS):
            raise
        raise named or lost_cluster(plan, exc) from None
    except tf.errors.UnknownError as exc:
        if SERVER_NOT_STARTED not in exc.message:
            raise
        raise server_failure(plan, exc) from None
    except (tf.errors.ResourceExhaustedError, OSError) as exc:
        if is_disk_full(exc):  # a full disk while saving or exporting: exit 1 (disk_full.py says why)
            raise disk_full_failure(str(task), config.model_dir, exc) from None
        raise
    log(f"task {task} finished")
    return 0

"""What each role does once its Estimator is built, and how it ends by itself.

- a trainer trains; under the ps strategies it tells every ps task when it
  has finished; the checkpointing task of a cluster with an evaluator then
  waits for the evaluation of the final checkpoint (evaluation.final_timeout_secs);
- a ps task serves the variables until every trainer and the evaluator have
  reported (ps_done.py), then exits 0; after a SIGTERM, until the trainers
  have stopped (ps_preemption.py);
- the evaluator scores checkpoints until the final one, then reports to the ps tasks.
"""

from __future__ import annotations

import threading

import tensorflow as tf

from estimator_mnist.model_files import checkpoints
from estimator_mnist.config import PS_STRATEGIES, Config
from estimator_mnist.errors import RETRYABLE_NOTE, PermanentFailure, RetryableFailure
from estimator_mnist.tf_task.evaluator import evaluate_checkpoints
from estimator_mnist.tf_task.hooks import log
from estimator_mnist.tf_task.ps_done import PsDoneWatcher, serve_until_done, signal_done
from estimator_mnist.tf_task.preemption import Preemption, mark_if_saved, wait_for_stop_checkpoint
from estimator_mnist.tf_task.ps_preemption import stop_with_the_trainers
from estimator_mnist.plan.task_plan import TaskPlan
from estimator_mnist.tf_task.tf_workarounds import poll_for_ready_model_quickly, remove_collective_scratch


def ps_addresses(config: Config):
    return [str(a) for a in config.cluster.ps]


class DoneSignalHook(tf.compat.v1.train.SessionRunHook):
    """At the end of training, tells every ps task that this trainer has finished. Not on a failure, and not
    on a stop short of max_steps (a preemption): the ps must stay for the restart.

    For the trainers that save no checkpoint only. In TF 2.15's independent-worker mode,
    MonitoredTrainingSession calls the training hooks' `end` before the chief-only CheckpointSaverHook's, which
    writes the final checkpoint from the ps's variables: told too early, the ps left while that save waited
    on it, and the chief hung (a fresh-clone CI run of tests/e2e/test_preemption.py, ps-worker). The chief
    reports once its final checkpoint is on disk (`report_final_checkpoint`)."""

    def __init__(self, config: Config, plan: TaskPlan):
        self._config, self._plan = config, plan

    def begin(self):
        self._step = tf.compat.v1.train.get_global_step()

    def end(self, session):
        if int(session.run(self._step)) >= self._config.training.max_steps:
            _report_done(self._config, self._plan)


# The (model_dir, task) pairs that told the ps tasks they finished, and the lock of the telling.
_REPORTED, _REPORT_LOCK = set(), threading.Lock()


def _report_done(config: Config, plan: TaskPlan) -> None:
    """Tells every ps task that this trainer finished, once: a worker reports from its hook's `end` or, when
    the teardown watchdog ends it first (a backup worker of parameter_server_sync left waiting for a step
    that never comes), from finish_training. A second report to a ps that has left would wait out the
    operation timeout before the task could exit."""
    with _REPORT_LOCK:
        key = (config.model_dir, str(plan.task))
        if key not in _REPORTED:
            _REPORTED.add(key)
            signal_done(ps_addresses(config), str(plan.task), plan.operation_timeout_ms, log)


def report_final_checkpoint(config: Config, plan: TaskPlan) -> None:
    """A ps strategy's trainer tells the ps tasks it finished once the final checkpoint is on disk: the chief
    always here, after its final save; a worker here only if its DoneSignalHook never ran its `end`."""
    if config.strategy.name in PS_STRATEGIES and plan.task.is_trainer and \
            (checkpoints.latest_step(config.model_dir) or -1) >= config.training.max_steps:
        _report_done(config, plan)


# The (model_dir, task) pairs this process has finished, and the lock the two callers of finish_training share.
_FINISHED, _FINISH_LOCK = set(), threading.Lock()


def finish_training(config: Config, plan: TaskPlan) -> None:
    """A trainer's last steps once training has returned, or once the teardown watchdog gave up waiting for
    it to (runner._before_teardown_exit). They run once: the watchdog also fires after training returned if
    the task is still there `teardown_timeout_secs` later, and a second report to a ps that has left would
    wait out the operation timeout before the task could exit."""
    with _FINISH_LOCK:
        key = (config.model_dir, str(plan.task))
        if key in _FINISHED:
            return
        _FINISHED.add(key)
        if config.strategy.name == "multi_worker_mirrored" and not plan.is_chief:
            remove_collective_scratch(config.model_dir, plan.task)
        report_final_checkpoint(config, plan)


def wait_for_final_evaluation(config: Config, plan: TaskPlan) -> None:
    """The chief of a cluster with an evaluator succeeds only once the final checkpoint is evaluated."""
    timeout = config.evaluation.final_timeout_secs
    log(f"task {plan.task}: training done; waiting up to {timeout} s (evaluation.final_timeout_secs) for the "
        "evaluation of the final checkpoint")
    record = checkpoints.wait_for_final_evaluation(config.model_dir, config.training.max_steps, timeout)
    if record is None:
        raise PermanentFailure(f"task {plan.task}: the final checkpoint was not evaluated within "
                               f"evaluation.final_timeout_secs={timeout} s; check the evaluator's log")
    log(f"task {plan.task}: final evaluation: step {record['global_step']} accuracy {record['accuracy']:.4f}")


def run_trainer(config: Config, plan: TaskPlan, estimator, train_spec, eval_spec, preemption=None) -> None:
    poll_for_ready_model_quickly()
    if plan.in_graph and not plan.evaluates_itself:
        # The evaluator process scores the checkpoints; evaluating here too
        # would pause training at every checkpoint.
        estimator.train(train_spec.input_fn, hooks=train_spec.hooks, max_steps=train_spec.max_steps)
    else:
        tf.estimator.train_and_evaluate(estimator, train_spec, eval_spec)
    finish_training(config, plan)
    if preemption is not None and preemption.stopped_at_step is not None:
        # The chief's checkpoint saver wrote the stop step as training ended; the others wait for it.
        wait_for_stop_checkpoint(preemption, config.model_dir, config.training.preemption_grace_secs,
                                 marked=not plan.is_chief)
        if plan.is_chief:
            mark_if_saved(preemption, config.model_dir)
        raise RetryableFailure(f"{preemption.describe_stop(checkpoints.latest_checkpoint(config.model_dir))}; "
                               f"{RETRYABLE_NOTE}")
    if plan.waits_for_evaluation:
        wait_for_final_evaluation(config, plan)


def run_ps(config: Config, plan: TaskPlan, estimator, preemption: Preemption) -> None:
    """Estimator's own ps role is server.join(), which never returns; this one ends when the run does, or after
    a SIGTERM once the trainers have stopped (ps_preemption.py)."""
    run_config = estimator.config
    server = tf.distribute.Server(
        run_config.cluster_spec, job_name="ps", task_index=plan.task.index, start=True,
        config=tf.compat.v1.ConfigProto(gpu_options=run_config.session_config.gpu_options))
    trainers = [(str(t), str(config.cluster.address(t))) for t in config.cluster.tasks() if t.is_trainer]
    expected = [name for name, _ in trainers] + (["evaluator:0"] if config.cluster.evaluator is not None else [])
    watcher = PsDoneWatcher(expected, trainers, config.training.ps_idle_timeout_secs,
                            config.evaluation.final_timeout_secs)
    log(f"task {plan.task}: serving the variables until {', '.join(expected)} have finished")
    if not serve_until_done(server, plan.task.index, watcher, log,
                            stop_asked=lambda: preemption.requested_at is not None):
        stop_with_the_trainers(preemption, server.target, len(config.cluster.ps), trainers, log)
        return
    log(f"task {plan.task}: every trainer{' and the evaluator' if config.cluster.evaluator else ''} finished")


def run_evaluator(config: Config, plan: TaskPlan, estimator, eval_spec) -> None:
    evaluate_checkpoints(estimator, eval_spec, config.training.max_steps)
    if config.cluster.ps:
        signal_done(ps_addresses(config), str(plan.task), plan.operation_timeout_ms or 60000, log)

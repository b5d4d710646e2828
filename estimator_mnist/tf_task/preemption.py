"""Preemption-safe training: a SIGTERM stops every trainer at the same step, the chief saves, each exits 200.

Clusters take machines away with SIGTERM and, a grace period later (30 s by
default on Kubernetes), SIGKILL. TensorFlow offers a preemption handler to
Keras and custom loops only, not to Estimator, so:
- every trainer adds a flag (1 after SIGTERM, else 0) to a shared counter at
  each step: under MultiWorkerMirrored the counter is a mirrored variable
  with SUM aggregation, so the addition is an all-reduce and every worker
  sees the same value at the same step; under the ps strategies it lives on
  the ps. When it rises, every trainer requests a stop after that step;
- the chief's checkpoint saver writes a checkpoint at that step as training
  ends; every trainer then exits 200 (retryable), all within
  training.preemption_grace_secs;
- a second SIGTERM (2 s or more after the first), the grace period running
  out, or the training session lost after the SIGTERM (a peer left: no step
  can be agreed) ends the task at once with 200; the evaluator exits 200 at
  once; a ps task raises the counter and stays until the trainers have left
  (ps_preemption.py).
The code says what the signal stopped: once a task's work is saved (the final
checkpoint on disk; for the evaluator, the final evaluation recorded), a
SIGTERM or Ctrl-C ends it with 0, because nothing is left to resume. Before
that, Ctrl-C is 130 as always (KeyboardInterrupt, cli.py).
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Callable, Optional

import tensorflow as tf

from estimator_mnist.model_files import checkpoints
from estimator_mnist.config.schema import TrainingConfig
from estimator_mnist.errors import RETRYABLE_EXIT_CODE, SUCCESS_EXIT_CODE, RetryableFailure
from estimator_mnist.model_files.preemption_mark import mark_step, write_mark
from estimator_mnist.tf_task.hooks import log
from estimator_mnist.tf_task.teardown import exit_now

FLAGS, COUNTERS, READS = "estimator_mnist_preemption_flags", "estimator_mnist_preemption_counters", \
    "estimator_mnist_preemption_reads"
COUNTER_NAME = "preemption/requests"  # the shared stop counter's variable (ps_preemption.py raises it by this name)
REPEAT_SECS = 2.0  # a SIGTERM this soon after the first is the same request (sent to the group and forwarded)


def _stop_saved(model_dir: str, step: int, marked: bool, session_step: Optional[int] = None) -> bool:
    latest = checkpoints.latest_step(model_dir)
    if latest is None:
        return False
    if not marked or latest > step:
        return latest >= step
    try:
        mark = mark_step(model_dir)
    except (OSError, RetryableFailure):  # a storage that fails to answer now: looked at again at the next poll
        return False
    # The chief's mark of the newest checkpoint. Under the ps strategies the trainers step on their own: a
    # worker's last step can come after the chief's final save (stopped at 32, saved 32, the chief at 31; seen in
    # CI), so a mark past this trainer's session start is this stop's, whatever step the worker read.
    return mark == latest and (latest >= step or (session_step is not None and latest > session_step))


def wait_for_stop_checkpoint(preemption: "Preemption", model_dir: str, secs: float, sleep=time.sleep,
                             clock=time.monotonic, marked: bool = False) -> None:
    """Until the chief's checkpoint of the stop step is on disk, at most `secs`. Every trainer waits for it
    before it exits: under srun --kill-on-bad-exit a task that exits 200 first has the others signalled again,
    and a second SIGTERM ends the chief at once, its save of the stop step cut short (a real Slurm run on 2
    busy cores); the stop then lost the step, and the restart budget counted it as a failure. `marked`: the
    trainers other than the chief wait for its mark too (mark_if_saved), written just after the checkpoint."""
    deadline = clock() + secs
    while clock() < deadline and not _stop_saved(model_dir, preemption.stopped_at_step, marked,
                                                 preemption.session_step):
        sleep(0.2)


def mark_if_saved(preemption: "Preemption", model_dir: str) -> None:
    """The writer's mark (preemption_mark.py): asked to stop, its stop step saved, so the restart budget counts
    no incident for it. Called once the chief's final save is done (StopSaveListener); the mark names the step
    saved, which is past the chief's own stop step when a ps strategy's worker stepped once more. Written once,
    by whichever path ends the chief first: the hook's thread or run_trainer (the two raced in a real Slurm run;
    tests/unit/test_preemption.py pins the once)."""
    with preemption.mark_lock:
        step, latest = preemption.stopped_at_step, checkpoints.latest_step(model_dir)
        if step is not None and preemption.marked_step is None and latest is not None and latest >= step:
            write_mark(model_dir, latest, preemption.task)
            preemption.marked_step = latest


class Preemption:
    """This process's preemption state, set by the SIGTERM handler.

    `saved()` says what of the task's work is on disk once all of it is (work_saved), else None: it decides
    between 0 and 200 whenever the task ends because of a signal.
    """

    def __init__(self, task: str, grace_secs: float, graceful: bool, exit_fn=exit_now, clock=time.monotonic,
                 saved: Callable[[], Optional[str]] = lambda: None):
        self.task, self.grace_secs, self.graceful = task, grace_secs, graceful
        self.requested_at: Optional[float] = None
        self.stopped_at_step: Optional[int] = None
        self.marked_step: Optional[int] = None  # the step whose mark this process wrote (mark_if_saved)
        self.mark_lock = threading.Lock()
        self.session_step: Optional[int] = None  # the global step when the training session was (re)created
        self.final_save = threading.Event()  # the chief's: its checkpoint saver's save at training's end is done
        self._exit_fn, self._clock, self._saved = exit_fn, clock, saved

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self.on_sigterm)
        signal.signal(signal.SIGINT, self.on_sigint)

    def _exit(self, what: str) -> None:
        """Ends the task after a signal: 0 if its work is saved, else 200."""
        saved = self._saved()
        if saved:
            self._exit_fn(f"task {self.task}: {what}, but {saved}: nothing is lost; exiting with "
                          f"{SUCCESS_EXIT_CODE}", SUCCESS_EXIT_CODE)
        else:
            self._exit_fn(f"task {self.task}: {what}; exiting with {RETRYABLE_EXIT_CODE} (retryable)",
                          RETRYABLE_EXIT_CODE)

    def on_sigint(self, signum=signal.SIGINT, frame=None) -> None:
        if self._saved():
            self._exit("Ctrl-C")
            return
        signal.default_int_handler(signum, frame)  # KeyboardInterrupt: 130

    def on_sigterm(self, _signum=None, _frame=None) -> None:
        now = self._clock()
        if self.requested_at is not None:
            if now - self.requested_at >= REPEAT_SECS:
                self._exit("a second SIGTERM")
            return
        self.requested_at = now
        if not self.graceful or self._saved():
            self._exit("SIGTERM")
            return
        log(f"task {self.task}: SIGTERM: stopping every trainer at the same step, within "
            f"training.preemption_grace_secs={self.grace_secs:g} s")
        threading.Thread(target=self._deadline, name="preemption-deadline", daemon=True).start()

    def session_lost(self) -> None:
        """The training session was re-created after the SIGTERM and before a stop step was agreed: a peer left
        (MonitoredSession re-creates it after UnavailableError), so no stop step can be agreed any more, and
        waiting out the grace would only hold the node."""
        self._exit("the training session was lost after SIGTERM (a peer left), so the trainers cannot stop at one "
                   "step")

    def leave(self, what: str) -> None:
        """Ends a task that stayed after its SIGTERM for the others (a ps task, ps_preemption.py)."""
        self._exit(what)

    def _deadline(self) -> None:
        time.sleep(self.grace_secs)
        self._exit(f"training.preemption_grace_secs={self.grace_secs:g} s ran out after SIGTERM")

    def describe_stop(self, checkpoint: Optional[str]) -> str:
        return (f"task {self.task} preempted: stopped at step {self.stopped_at_step}, latest checkpoint "
                f"{checkpoint or 'none'}")

    def exit_after_stop(self, checkpoint: Optional[str]) -> None:
        if self._saved():  # the stop step was the last one
            self._exit(self.describe_stop(checkpoint))
            return
        self._exit_fn(f"{self.describe_stop(checkpoint)}; exiting with {RETRYABLE_EXIT_CODE} (retryable) so that "
                      "a restart resumes from it", RETRYABLE_EXIT_CODE)

    @property
    def flag(self) -> float:
        return 1.0 if self.requested_at is not None else 0.0


def add_preemption_counter() -> None:
    """In model_fn (TRAIN): the shared counter of stop requests, raised by each step's flag."""
    flag = tf.compat.v1.placeholder_with_default(0.0, [], name="preemption_flag")
    # AUTO_REUSE: in-graph replication calls model_fn once per device, for one shared counter.
    scope, name = COUNTER_NAME.split("/")
    with tf.compat.v1.variable_scope(scope, reuse=tf.compat.v1.AUTO_REUSE):
        counter = tf.compat.v1.get_variable(
            name, [], tf.float32, tf.compat.v1.zeros_initializer(), trainable=False,
            synchronization=tf.VariableSynchronization.ON_WRITE, aggregation=tf.VariableAggregation.SUM)
    tf.compat.v1.add_to_collection(FLAGS, flag)
    tf.compat.v1.add_to_collection(READS, tf.identity(counter.read_value()))
    tf.compat.v1.add_to_collection(COUNTERS, counter.assign_add(flag))


class PreemptionHook(tf.compat.v1.train.SessionRunHook):
    """Feeds this trainer's flag at every step, and requests the stop once any trainer raised it."""

    def __init__(self, preemption: Preemption, writer=None, model_dir: str = "", is_chief: bool = False,
                 teardown_secs: float = TrainingConfig.teardown_timeout_secs):
        self._preemption, self._writer = preemption, writer
        self._model_dir, self._is_chief, self._teardown_secs = model_dir, is_chief, teardown_secs
        self._baseline, self._sent, self._sessions = None, False, 0

    @property
    def preemption(self) -> Preemption:
        return self._preemption

    @property
    def is_chief(self) -> bool:
        return self._is_chief

    def begin(self):
        self._flags = tf.compat.v1.get_collection(FLAGS)
        self._counter = tf.compat.v1.get_collection(COUNTERS)[0]
        self._read = tf.compat.v1.get_collection(READS)[0]
        self._step = tf.compat.v1.train.get_global_step()

    def after_create_session(self, session, coord):
        # TensorFlow's own SIGTERM notifier may have replaced the handler while the cluster formed.
        self._preemption.install()
        self._sessions += 1
        if self._sessions > 1 and self._preemption.requested_at is not None \
                and self._preemption.stopped_at_step is None:
            # After a Slurm node failure the survivors got SIGTERM while re-creating their session in a loop
            # (TF 2.15: the lost peer's all-reduce fails each one), and held the node for the whole grace
            # (tests/unit/test_preemption.py, test_slurm_preemption.py's node failure).
            self._preemption.session_lost()
        # A restored checkpoint holds earlier requests; the step is where this session began. One run for both.
        baseline, step = session.run([self._read, self._step])
        self._baseline, self._preemption.session_step = float(baseline), int(step)

    def before_run(self, run_context):
        flag = self._preemption.flag if not self._sent else 0.0
        self._sent = self._sent or flag > 0
        return tf.compat.v1.train.SessionRunArgs({"requests": self._counter}, feed_dict={f: flag for f in self._flags})

    def after_run(self, run_context, run_values):
        if run_values.results["requests"] > self._baseline and self._preemption.stopped_at_step is None:
            # Read once more: the fetch in this run may have seen the step before its own increment.
            self._preemption.stopped_at_step = int(run_context.session.run(self._step))
            if self._writer is not None:
                self._writer.note(preempted_at=self._preemption.stopped_at_step)
            log(f"task {self._preemption.task}: a trainer was preempted: stopping after step "
                f"{self._preemption.stopped_at_step}")
            run_context.request_stop()

    def end(self, session):
        if self._preemption.stopped_at_step is not None:
            threading.Thread(target=self._exit_when_saved, name="preemption-teardown", daemon=True).start()

    def _exit_when_saved(self) -> None:
        """Closing the session may block on peers that already left (TF 2.15, as at the end of training):
        once the chief's checkpoint of the stop step is on disk, exit after the teardown timeout."""
        wait_for_stop_checkpoint(self._preemption, self._model_dir, self._preemption.grace_secs,
                                 marked=not self._is_chief)
        if self._is_chief:
            # This hook's end comes before the saver's: a checkpoint at the stop step can be a periodic one, with
            # the final save (a ps worker's step later) still to come.
            self._preemption.final_save.wait(self._preemption.grace_secs)
            mark_if_saved(self._preemption, self._model_dir)
        time.sleep(self._teardown_secs)
        self._preemption.exit_after_stop(checkpoints.latest_checkpoint(self._model_dir))


class StopSaveListener(tf.estimator.CheckpointSaverListener):
    """The chief's: tells its Preemption that the saver's final save, at training's end, is done."""

    def __init__(self, preemption: Preemption):
        self._preemption = preemption

    def end(self, session, global_step_value):
        self._preemption.final_save.set()


def stop_save_listeners(hooks) -> list:
    """A StopSaveListener for the chief's PreemptionHook among `hooks` (none for other tasks)."""
    return [StopSaveListener(hook.preemption) for hook in hooks if isinstance(hook, PreemptionHook) and hook.is_chief]

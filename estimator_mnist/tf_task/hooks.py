"""The training hooks a trainer runs with: progress records, images/s for TensorBoard, the ready signal, variable placement.

(The teardown watchdog is a TensorFlow work-around: tf_workarounds.py.)
"""

from __future__ import annotations

import os
import time
from typing import Optional

import tensorflow as tf

from estimator_mnist.config import TaskId
from estimator_mnist.model_files.progress import ProgressWriter
from estimator_mnist.tasklog import log


class ProgressHook(tf.compat.v1.train.SessionRunHook):
    """Writes this task's progress record (progress.py): its own steps, the global step, the loss, examples/s.

    The local and global step counts also tell the strategies apart:
    asynchronous ps training advances the global step once per worker step,
    synchronous training once per aggregated update. At the end the task logs
    both. `delay_secs` (tasks.<task>.step_delay_ms) makes a straggler on purpose.
    """

    def __init__(self, task: TaskId, writer: ProgressWriter, delay_secs: float = 0.0):
        self._task = task
        self._writer = writer
        self._delay_secs = delay_secs
        self._fetches = None

    @property
    def local_steps(self) -> int:
        return self._writer.local_steps

    @property
    def writer(self) -> ProgressWriter:
        return self._writer

    def begin(self):
        # Estimator adds its (replica-reduced) training loss to LOSSES before the hooks begin.
        losses = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.LOSSES)
        self._fetches = {"global_step": tf.compat.v1.train.get_global_step()}
        if losses:
            self._fetches["loss"] = losses[-1]

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self._fetches)

    def after_run(self, run_context, run_values):
        results = run_values.results or {}
        loss = results.get("loss")
        self._writer.step(int(results["global_step"]) if "global_step" in results else None,
                          float(loss) if loss is not None else None)
        if self._delay_secs:
            time.sleep(self._delay_secs)

    def end(self, session):
        try:
            global_step = int(session.run(tf.compat.v1.train.get_global_step()))
        except tf.errors.OpError:
            global_step = None  # the ps holding it is gone
        self.report(global_step)

    def report(self, global_step: Optional[int]) -> None:
        """Writes the final record and logs the task's own step count (also when the teardown watchdog ends it)."""
        self._writer.finish(global_step)
        log(f"task {self._task} ran {self.local_steps} local steps; global_step {global_step}")


class ReadyHook(tf.compat.v1.train.SessionRunHook):
    """Tells the task's parent process (supervise/task_parent.py) that the session exists: the cluster formed."""

    def __init__(self, ready_fd: int):
        self._fd = ready_fd

    def after_create_session(self, session, coord):
        if self._fd is not None:
            os.write(self._fd, b"ready")
            os.close(self._fd)
            self._fd = None


class VariablePlacementHook(tf.compat.v1.train.SessionRunHook):
    """Logs where each variable lives, in the task's log, with session.log_device_placement."""

    def begin(self):
        for variable in tf.compat.v1.global_variables():
            log(f"variable {variable.op.name} placed on {variable.device or '(default device)'}")


class ThroughputSummaryHook(tf.compat.v1.train.SessionRunHook):
    """The chief's: images/s in the training run TensorBoard shows for model_dir, as scalars at the global step.

    `images_per_sec` is the global rate, from the global step's advance
    (`examples_per_global_step` images each); `images_per_sec/<type>_<index>`
    is each trainer's own rate: the chief's measured here, the others' from
    their progress records (`other_rates()`, fresh ones only). All of it goes
    through Estimator's own writer for model_dir, into the one events file:
    with an events file per task, TensorBoard's reader dropped the points of
    a file it read before the chief's, whose session-start event purges
    every point at or past its step (seen when the files' timestamps differed).
    """

    def __init__(self, model_dir: str, task: TaskId, examples_per_local_step: int, examples_per_global_step: int,
                 every_steps: int, other_rates=lambda: {}, clock=time.time):
        self._model_dir, self._task, self._every = model_dir, task, max(1, every_steps)
        self._per_local, self._per_global = examples_per_local_step, examples_per_global_step
        self._other_rates, self._clock = other_rates, clock
        self._writer = None
        self._mark = None  # (local step, global step, time) at the start of the interval

    def begin(self):
        self._global_step = tf.compat.v1.train.get_global_step()
        self._writer = tf.compat.v1.summary.FileWriterCache.get(self._model_dir)
        self._local = 0

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self._global_step)

    def after_run(self, run_context, run_values):
        self._local += 1
        now, self._last_global = self._clock(), int(run_values.results)
        if self._mark is None:  # timing starts after the first step: the graph's start-up is not throughput
            self._mark = (self._local, self._last_global, now)
        elif self._local - self._mark[0] >= self._every:
            self._write(now)

    def _write(self, now: float) -> None:
        local0, global0, then = self._mark
        if now <= then or self._local <= local0:
            return
        rates = {"images_per_sec": (self._last_global - global0) * self._per_global / (now - then),
                 f"images_per_sec/{self._task.type}_{self._task.index}":
                     (self._local - local0) * self._per_local / (now - then)}
        rates.update({f"images_per_sec/{name.replace(':', '_')}": rate for name, rate in self._other_rates().items()
                      if name != str(self._task)})
        values = [tf.compat.v1.Summary.Value(tag=tag, simple_value=rate) for tag, rate in rates.items()]
        self._writer.add_summary(tf.compat.v1.Summary(value=values), self._last_global)
        self._mark = (self._local, self._last_global, now)

    def end(self, session):
        if self._mark is not None:
            self._write(self._clock())  # the last stretch, so that a short run has its points too
        self._writer.flush()

"""Each checkpoint save's times in the progress record of the task that saves it (the chief).

[step, started, saved] per save (progress.py's `saves`): with eval_results.jsonl's `started` they split the time
to accuracy into training, the save, the wait for the evaluator and the evaluation
(benchmarks/time_to_accuracy.py), and show each evaluation's start against its checkpoint's save.
"""

from __future__ import annotations

import time
import types

import tensorflow as tf

from estimator_mnist.progress import ProgressWriter
from estimator_mnist.tf_task.hooks import ProgressHook


class SaveTimesListener(tf.estimator.CheckpointSaverListener):
    """Notes each save's start and end in the progress record, written at once."""

    def __init__(self, writer: ProgressWriter, clock=time.time):
        self._writer, self._clock, self._started = writer, clock, None

    def before_save(self, session, global_step_value):
        self._started = self._clock()

    def after_save(self, session, global_step_value):
        if self._started is not None:
            self._writer.saved(global_step_value, self._started, self._clock())
        self._started = None


def save_times_listeners(hooks) -> list:
    """A SaveTimesListener on the writer of the progress hook among a trainer's `hooks` (none for other tasks)."""
    return [SaveTimesListener(hook.writer) for hook in hooks if isinstance(hook, ProgressHook)]


def listen_to_saves(estimator: tf.estimator.Estimator, listeners) -> tf.estimator.Estimator:
    """Makes every train() of `estimator` (and of its copies) call `listeners` first among the saver's listeners.

    TF 2.15: under MultiWorkerMirrored, train_and_evaluate runs through the distribute coordinator
    (tensorflow/python/distribute/estimator_training.py, `_worker_fn`), which trains a copy.deepcopy of the
    estimator without the TrainSpec's saving_listeners: they were never called. Estimator refuses subclasses
    that override train(); an instance's own bound method is copied with it (deepcopy binds it to the copy),
    with the same listeners. First: one-process train_and_evaluate adds its evaluating listener after them,
    so a save is recorded before it is evaluated. Pinned by tests/unit/test_hooks.py (the chief's `saves`,
    trained by a deep copy).
    """
    if not listeners:
        return estimator

    def train(self, input_fn, hooks=None, steps=None, max_steps=None, saving_listeners=None):
        return tf.estimator.Estimator.train(self, input_fn, hooks=hooks, steps=steps, max_steps=max_steps,
                                            saving_listeners=[*listeners, *(saving_listeners or [])])

    estimator.train = types.MethodType(train, estimator)
    return estimator

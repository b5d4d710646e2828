"""Each checkpoint save's times in the progress record of the task that saves it (the chief).

[step, started, saved] per save (progress.py's `saves`): with eval_results.jsonl's `started` they split the time
to accuracy into training, the save, the wait for the evaluator and the evaluation
(benchmarks/time_to_accuracy.py), and show each evaluation's start against its checkpoint's save.
"""

from __future__ import annotations

import contextlib
import time
from typing import List

import tensorflow as tf

from estimator_mnist.model_files.progress import ProgressWriter
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


_ACTIVE: List[tf.estimator.CheckpointSaverListener] = []  # this process's, while saves_recorded runs


def _install() -> None:
    """TF 2.15: Estimator refuses saving_listeners under a distribution strategy ("Saving listenor is not
    supported by the current Distribution Strategies", estimator.py's _train_with_estimator_spec_distributed), and
    train_and_evaluate's distribute coordinator drops the TrainSpec's anyway. The saver hook itself calls any
    listener it holds: after its own begin(), the active ones go first among them (before one-process
    train_and_evaluate's evaluating listener, so a save is recorded before it is evaluated). Pinned by
    tests/unit/test_hooks.py (the chief's `saves`) and, under MultiWorkerMirrored, the `saves` benchmarks/time_to_accuracy.py
    reads (it fails without them)."""
    hook = tf.compat.v1.train.CheckpointSaverHook
    if getattr(hook.begin, "_records_saves", False):
        return
    original = hook.begin

    def begin(self):
        original(self)
        self._listeners[:0] = [listener for listener in _ACTIVE if listener not in self._listeners]

    begin._records_saves = True
    hook.begin = begin


@contextlib.contextmanager
def saves_recorded(listeners):
    """While it runs, every checkpoint saver of this process also calls `listeners` (save_times_listeners)."""
    _install()
    _ACTIVE[:] = list(listeners)
    try:
        yield
    finally:
        _ACTIVE.clear()

"""A trainer's end: exit once its work is on disk, even when TensorFlow 2.15 blocks in closing its session.

One of the work-arounds tf_workarounds.py indexes: the symptom, the version
and the tests that pin it are in TeardownWatchdogHook's docstring.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time

import tensorflow as tf

from estimator_mnist.model_files import checkpoints
from estimator_mnist.config import timeouts
from estimator_mnist.config.schema import EvaluationConfig
from estimator_mnist.tasklog import log

# After the final evaluation is recorded, a chief whose session did close waits for the record (polling every
# 0.5 s, roles.wait_for_final_evaluation), logs it and exits by itself: this long is left to it first.
AFTER_FINAL_EVALUATION_SECS = timeouts.AFTER_FINAL_EVALUATION_SECS


def exit_now(message: str, code: int = 0) -> None:
    """Ends the process at once (TF threads blocked in C++ would stop a normal exit), logs flushed."""
    log(message)
    logging.shutdown()
    sys.stdout.flush()
    os._exit(code)


class TeardownWatchdogHook(tf.compat.v1.train.SessionRunHook):
    """TF 2.15: trainers kept running after training was over, waiting on peers or in session close.

    Seen, all after the chief's final checkpoint was on disk: under
    MultiWorkerMirrored, GrpcSession::Close on the chief and the workers waited
    60-90 s on peers that had already finished (py-spy: LocalMaster::CloseSession
    in WaitForNotification); a worker stayed blocked after the chief finished;
    with in-graph MirroredStrategy, BaseSession.close blocked for minutes with
    no peer at all. So every trainer watches model_dir from the start. Once its
    work is on disk (the checkpoint at or past max_steps; for a process that
    evaluates itself, and for the chief of a cluster with an evaluator, the
    final evaluation too) and `timeout_secs` have passed since that checkpoint,
    it says why and exits 0: nothing is lost. The evaluation runs within those
    seconds, not before them: the default run's chief, blocked every time,
    used to exit a whole timeout after the final evaluation (docs/performance.md,
    "What makes it fast").
    A final evaluation that does not come within `final_timeout_secs` ends it
    with 1. Pinned by
    tests/unit/test_hooks.py::test_teardown_watchdog_exits_only_once_the_work_is_saved and
    ::test_the_teardown_timeout_counts_from_the_final_checkpoint.
    """

    def __init__(self, model_dir: str, timeout_secs: float, max_steps: int, wait_for_final_evaluation: bool = False,
                 before_exit=None, exit_fn=exit_now, poll_secs: float = 0.5, final_timeout_secs: float = EvaluationConfig.final_timeout_secs,
                 after_final_evaluation_secs: float = AFTER_FINAL_EVALUATION_SECS):
        self._model_dir, self._timeout_secs, self._max_steps = model_dir, timeout_secs, max_steps
        self._wait_for_final_evaluation = wait_for_final_evaluation
        self._final_timeout_secs, self._after_final_evaluation_secs = final_timeout_secs, after_final_evaluation_secs
        self._before_exit, self._exit_fn, self._poll_secs = before_exit, exit_fn, poll_secs

    def begin(self):
        threading.Thread(target=self.watch, name="teardown-watchdog", daemon=True).start()

    def watch(self) -> None:
        while (checkpoints.latest_step(self._model_dir) or -1) < self._max_steps:
            time.sleep(self._poll_secs)
        saved = time.monotonic()
        remaining = self._timeout_secs
        if self._wait_for_final_evaluation:
            if checkpoints.wait_for_final_evaluation(self._model_dir, self._max_steps, self._final_timeout_secs,
                                                     self._poll_secs) is None:
                self._exit_fn(f"the final checkpoint was not evaluated within evaluation.final_timeout_secs="
                              f"{self._final_timeout_secs:g} s; check the evaluator's log", 1)
                return
            remaining = max(self._timeout_secs - (time.monotonic() - saved), self._after_final_evaluation_secs)
        time.sleep(remaining)
        if self._before_exit is not None:
            self._before_exit()
        self._exit_fn(f"training ended at step {checkpoints.latest_step(self._model_dir)} and its results are saved, "
                      f"but this task is still blocked {time.monotonic() - saved:.1f} s after the final checkpoint "
                      f"(TensorFlow waiting on peers that left, or closing its session); exiting")

"""One watchdog thread per trainer for a training step that never ends: a peer lost or hung under MultiWorkerMirrored.

One of the work-arounds tf_workarounds.py indexes. TF 2.15 bounds an
all-reduce's wait (CommunicationOptions.timeout_seconds) by starting, for every
collective op it runs, a thread that sleeps out the whole timeout
(base_collective_executor.cc, SchedNonBlockingClosureAfter; its own TODO says
"Share the timeout watchdog thread among collectives"). Three collectives run
per step, so with the default 300 s a trainer gained dozens of threads a
second and held thousands after a few minutes; two trainers then reached the
machine's pid_max and died with std::system_error (SIGABRT). A container's
pids limit ends them within seconds.

So the collective ops get no timeout (strategy.py), and this hook bounds each
training step instead: one thread per trainer, whatever the run's length. A
step (`session.run` and the hooks' work around it) that lasts longer than
`strategy.collective_timeout_secs` means a peer is lost or hung: the task names
the peers that do not answer, and exits 200 (retryable), as the timed-out
all-reduce did; time the whole process spent stopped (a suspended job) is left out (frozen_time.py). It cannot
raise into the step: the main thread is blocked in
C++, so the process ends here. Pinned by
tests/unit/test_step_watchdog.py::test_a_step_that_outlasts_the_timeout_ends_the_task_retryably and
tests/e2e/test_multi_host.py::test_a_link_lost_mid_training_ends_every_trainer_retryably_and_a_restart_resumes.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, List, Optional, Tuple

import tensorflow as tf

from estimator_mnist.errors import RETRYABLE_EXIT_CODE, RETRYABLE_NOTE
from estimator_mnist.frozen_time import FrozenTime
from estimator_mnist.plan.peers import missing_peers
from estimator_mnist.tf_task.teardown import exit_now

ERR_STEP_TIMED_OUT = ("task {task} {who}: a training step waited {waited:.0f} s for its all-reduce "
                      "(strategy.collective_timeout_secs={timeout:g}); {note}")
LOST = "lost {peers}"
NONE_LOST = "lost no peer's connection, but one of its peers stopped taking steps (hung or stopped)"


def step_timed_out_message(task: str, waited: float, timeout: float, lost: List[str]) -> str:
    who = LOST.format(peers=", ".join(lost)) if lost else NONE_LOST
    return ERR_STEP_TIMED_OUT.format(task=task, who=who, waited=waited, timeout=timeout, note=RETRYABLE_NOTE)


class StepWatchdogHook(tf.compat.v1.train.SessionRunHook):
    """Ends the task with 200 when one training step lasts longer than `timeout_secs`.

    The clock runs from this hook's before_run to its after_run: the step's
    session.run and the work of the hooks ordered around it (a checkpoint's
    save on the chief). Between steps (the final evaluation, the teardown) it
    is stopped; session creation has its own bound (supervise/task_parent.py).
    """

    def __init__(self, task: str, timeout_secs: float, peers: List[Tuple[str, str]],
                 exit_fn: Callable[[str, int], None] = exit_now, clock=time.monotonic,
                 poll_secs: Optional[float] = None):
        self._task, self._timeout_secs, self._peers = task, timeout_secs, peers
        self._exit_fn, self._clock = exit_fn, clock
        self._poll_secs = poll_secs if poll_secs is not None else min(1.0, timeout_secs / 10.0)
        self._step_started: Optional[float] = None
        self._frozen = FrozenTime(self._poll_secs, clock)  # a suspended job's stop is no step's wait
        self._stop = threading.Event()
        self.fired = False

    def begin(self):
        threading.Thread(target=self.watch, name="step-watchdog", daemon=True).start()

    def before_run(self, run_context):
        self._step_started = self._clock()

    def after_run(self, run_context, run_values):
        self._step_started = None

    def end(self, session):
        self._stop.set()

    def check(self) -> bool:
        """Ends the task if the current step is overdue; True if it did."""
        frozen = self._frozen.frozen()
        if frozen and self._step_started is not None:
            self._step_started += frozen
        started = self._step_started
        if started is None or self.fired:
            return False
        waited = self._clock() - started
        if waited <= self._timeout_secs:
            return False
        self.fired = True
        lost = missing_peers(self._peers)
        self._exit_fn(step_timed_out_message(self._task, waited, self._timeout_secs, lost), RETRYABLE_EXIT_CODE)
        return True

    def watch(self) -> None:
        while not self._stop.wait(self._poll_secs):
            if self.check():
                return

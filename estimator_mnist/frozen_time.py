"""Time a process spent frozen (SIGSTOP: `scontrol suspend` of a whole Slurm job, a debugger), left out of its bounds.

A bound measured on time.monotonic() counts the time its own process was stopped: after `scontrol suspend` and
`scontrol resume` of a job (every process of it stopped, then continued), a training step's watchdog
(tf_task/step_watchdog.py) and train's parent watching its child (supervise/task_parent.py) found the step
or the stop "too long" and ended the task, though nothing was lost. Each of them polls every second or
less; a gap between two polls far longer than that means this process itself did not run, so the gap is
no part of what it bounds. A peer stopped alone still trips the bound: the watcher's own polls go on.
Pinned by tests/unit/test_frozen_time.py and tests/e2e/test_slurm_preemption.py. No TensorFlow.
"""

from __future__ import annotations

import time
from typing import Callable, Optional

FROZEN_GAP_SECS = 5.0  # a poll this much later than due: the process was stopped, not slow


class FrozenTime:
    """Polled by its watcher every `poll_secs`; `frozen()` gives the time since the last poll that the process
    spent stopped (0 when the poll came about on time)."""

    def __init__(self, poll_secs: float, clock: Callable[[], float] = time.monotonic):
        self._poll_secs, self._clock = poll_secs, clock
        self._last: Optional[float] = None

    def frozen(self) -> float:
        now = self._clock()
        gap = 0.0 if self._last is None else now - self._last - self._poll_secs
        self._last = now
        return gap if gap > FROZEN_GAP_SECS else 0.0

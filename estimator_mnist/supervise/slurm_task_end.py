"""How each task of a Slurm step ended, in its own word, for the batch script's count of incidents. No TensorFlow.

Under srun, train's parent (task_parent.py) publishes in model_dir (model_files/slurm_records.py) when it is asked
to stop (SIGTERM, SIGINT: `scancel --signal`, a preemption, a time limit, or srun ending the step's other
tasks after one failed, --kill-on-bad-exit) and, at its end, its exit code. The batch script reads every
task's word after the step (slurm_reruns.py): a task that ended non-zero without being asked to, or left no
word at all (killed by a signal nobody asked it to stop with: the OOM killer, a crash, or never started),
failed by itself, and the step is one incident, whatever its peers did when Slurm signalled them; a step
whose every task was asked to stop is none.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from typing import Iterator, Mapping, Optional

from estimator_mnist.errors import INTERRUPTED_EXIT_CODE, RETRYABLE_EXIT_CODE
from estimator_mnist.model_files import slurm_records
from estimator_mnist.plan.slurm_source import in_slurm_step

END_KIND = "end"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopAsked(Exception):
    """A stop signal that came before train's parent took its signals."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_stop(signum, _frame):
    raise StopAsked(signum)


@contextlib.contextmanager
def stop_raises(active: bool) -> Iterator[None]:
    """While a task of an srun step resolves its place (the wait for its peers' ports), SIGTERM and SIGINT raise
    StopAsked; afterwards Python's own handling is back, until train's parent installs its handlers."""
    previous = {sig: signal.signal(sig, _raise_stop) for sig in STOP_SIGNALS} if active else {}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def stopped_before_start(config, environ: Mapping[str, str], signum: int) -> int:
    """Said as train's parent says a stop (asked to, then its code), for the task of this srun step: 200 after
    SIGTERM, 130 after SIGINT."""
    from estimator_mnist.plan.slurm_source import ordered_tasks  # pylint: disable=import-outside-toplevel

    rank = int(environ["SLURM_PROCID"])
    task = str(ordered_tasks(config.cluster.tasks())[rank])
    code = INTERRUPTED_EXIT_CODE if signum == signal.SIGINT else RETRYABLE_EXIT_CODE
    end = TaskEnd.under_slurm(config.model_dir, task, environ)
    if end is not None:
        end.asked_to_stop(signum)
        end.ended(code)
    print(f"estimator-mnist: task {task}: asked to stop ({signal.Signals(signum).name}) before it started: exit "
          f"{code}; nothing of its work was done", file=sys.stderr, flush=True)
    return code


class TaskEnd:
    def __init__(self, model_dir: str, job_id: str, rank: int, key: str, task: str):
        self.model_dir, self.job_id, self.rank, self.key, self.task = model_dir, job_id, rank, key, task
        self.signal: Optional[str] = None

    @classmethod
    def under_slurm(cls, model_dir: str, task: str, environ: Mapping[str, str]) -> Optional["TaskEnd"]:
        """The task's word-keeper when it runs as a task of an srun step, else None."""
        if not in_slurm_step(environ) or not environ.get("SLURM_JOB_ID"):
            return None
        return cls(model_dir, environ["SLURM_JOB_ID"], int(environ["SLURM_PROCID"]),
                   slurm_records.step_key(environ), task)

    def _publish(self, code: Optional[int]) -> None:
        try:
            slurm_records.publish(self.model_dir, self.job_id, END_KIND, self.rank, {
                "step": self.key, "rank": self.rank, "task": self.task, "signal": self.signal, "code": code,
                "time": time.time()})
        except OSError:
            pass  # no word: the batch script counts the step as this task's failure, the safe side

    def asked_to_stop(self, signum: int) -> None:
        """At the first stop signal: said at once, since a SIGKILL may follow before the task's end."""
        if self.signal is None:
            self.signal = signal.Signals(signum).name
            self._publish(None)

    def ended(self, code: int) -> None:
        self._publish(code)


def failed_by_itself(record: Optional[dict], key: str) -> Optional[str]:
    """Why a task failed by itself in the step `key`, from its word (None: it did not: it was asked to stop, or
    ended 0)."""
    if record is None or record.get("step") != key:
        return "ended with no word: killed by a signal it was not asked to stop with, or never started"
    if record.get("signal"):
        return None
    if record.get("code") == 0:
        return None
    return f"exited {record.get('code')} by itself"

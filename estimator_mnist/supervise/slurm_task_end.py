"""How each task of a Slurm step ended, in its own word, for the batch script's count of incidents. No TensorFlow.

Under srun, train's parent (task_parent.py) publishes in model_dir (model_files/slurm_records.py) when it is asked
to stop (SIGTERM, SIGINT: `scancel --signal`, a preemption, a time limit, or srun ending the step's other
tasks after one failed, --kill-on-bad-exit) and, at its end, its exit code. The batch script reads every
task's word after the step (slurm_reruns.py): a task that ended non-zero without being asked to, or left no
word at all (killed by a signal nobody asked it to stop with: the OOM killer, a crash, or never started),
failed by itself, and the step is one incident, whatever its peers did when Slurm signalled them; a step
whose every task was asked to stop is none.

Under the batch script a task that was asked to stop, stopped, and said so exits 0 to srun (`srun_code`); its
200 is in its record, and `python -m estimator_mnist.supervise.slurm_job_end TRAIN_ARGS --step-code`, run by
the script after a step srun ended with 0, prints the step's code from the records (`step_code`). Why: with
--kill-on-bad-exit srun takes any other code for a failure and asks slurmctld to send the step SIG_TERM_KILL;
slurmstepd answers that request only after KillWait (req.c sleeps in the handler; default 30 s), past
MessageTimeout (10 s), so slurmctld queues the signal for a retry 60 s later (agent.c, "Queue RPC
msg_type=6004 ... for retry"). A requeue resets the job's step ids, and on Slurm 22.05.8 that retry stopped
the requeued run's step of the same id at its end (tests/e2e/test_slurm_preemption.py). A real failure still
exits non-zero, and srun still ends the step's other tasks at once.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from typing import Iterator, Mapping, Optional

from estimator_mnist.errors import INTERRUPTED_EXIT_CODE, RETRYABLE_EXIT_CODE, SUCCESS_EXIT_CODE
from estimator_mnist.model_files import slurm_records
from estimator_mnist.plan.slurm_source import in_slurm_step, ordered_tasks

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
    if active:
        # What the stop's own config load imports comes before the window: a StopAsked raised inside the first
        # `import yaml` left yaml half imported, and that load failed (AttributeError: exit 1, not a stop; a
        # Slurm e2e run, tests/process/test_slurm_task_start.py).
        # pylint: disable=unused-import,import-outside-toplevel
        import yaml  # noqa: F401
        from estimator_mnist.config import load_config  # noqa: F401
    previous = {sig: signal.signal(sig, _raise_stop) for sig in STOP_SIGNALS} if active else {}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def stopped_before_start(config, environ: Mapping[str, str], signum: int) -> int:
    """Said as train's parent says a stop (asked to, then its code), for the task of this srun step: 200 after
    SIGTERM, 130 after SIGINT (0 to srun under the batch script: srun_code)."""
    rank = int(environ["SLURM_PROCID"])
    task = str(ordered_tasks(config.cluster.tasks())[rank])
    code = INTERRUPTED_EXIT_CODE if signum == signal.SIGINT else RETRYABLE_EXIT_CODE
    end = TaskEnd.under_slurm(config.model_dir, task, environ)
    if end is not None:
        end.asked_to_stop(signum)
        end.ended(code)
    print(f"estimator-mnist: task {task}: asked to stop ({signal.Signals(signum).name}) before it started: exit "
          f"{code}; nothing of its work was done", file=sys.stderr, flush=True)
    return code if end is None else end.srun_code(code)


class TaskEnd:
    def __init__(self, model_dir: str, job_id: str, rank: int, key: str, task: str, scripted: bool = False):
        self.model_dir, self.job_id, self.rank, self.key, self.task = model_dir, job_id, rank, key, task
        self.scripted = scripted  # a step of the batch script, which reads the records after it
        self.signal: Optional[str] = None
        self.said_end = False

    @classmethod
    def under_slurm(cls, model_dir: str, task: str, environ: Mapping[str, str]) -> Optional["TaskEnd"]:
        """The task's word-keeper when it runs as a task of an srun step, else None."""
        if not in_slurm_step(environ) or not environ.get("SLURM_JOB_ID"):
            return None
        return cls(model_dir, environ["SLURM_JOB_ID"], int(environ["SLURM_PROCID"]),
                   slurm_records.step_key(environ), task, scripted=bool(environ.get(slurm_records.ATTEMPT_ENV)))

    def _publish(self, code: Optional[int]) -> bool:
        try:
            slurm_records.publish(self.model_dir, self.job_id, END_KIND, self.rank, {
                "step": self.key, "rank": self.rank, "task": self.task, "signal": self.signal, "code": code,
                "time": time.time()})
        except OSError:
            return False  # no word: the batch script counts the step as this task's failure, the safe side
        return True

    def asked_to_stop(self, signum: int) -> None:
        """At the first stop signal: said at once, since a SIGKILL may follow before the task's end."""
        if self.signal is None:
            self.signal = signal.Signals(signum).name
            self._publish(None)

    def ended(self, code: int) -> None:
        self.said_end = self._publish(code)

    def srun_code(self, code: int) -> int:
        """The code the task exits with to srun: 0 for a stop it was asked for and said (the module's docstring
        says why), else its own."""
        stopped = code in (RETRYABLE_EXIT_CODE, INTERRUPTED_EXIT_CODE) and self.signal is not None
        if not (stopped and self.scripted and self.said_end):
            return code
        print(f"estimator-mnist: task {self.task}: exits {SUCCESS_EXIT_CODE} to srun; its code {code} (asked to "
              f"stop) is in its record for the batch script", file=sys.stderr, flush=True)
        return SUCCESS_EXIT_CODE


def step_code(model_dir: str, job_id: str, key: str, ranks: int) -> int:
    """The code of the step `key`, which srun ended with 0, from its tasks' words: 200 when a task said it stopped
    with a code of its own (a stop it was asked for: srun_code), else 0."""
    for rank in range(ranks):
        record = slurm_records.read_published(model_dir, job_id, END_KIND, rank)
        if record is not None and record.get("step") == key and record.get("code") not in (None, 0):
            return RETRYABLE_EXIT_CODE
    return SUCCESS_EXIT_CODE


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

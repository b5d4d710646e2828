"""`train` runs its task in two processes: this thin parent, with no TensorFlow, and a child that runs it.

The parent exists so that a task always ends with a code of the exit table
(errors.py), however TensorFlow behaves:
- while a MultiWorkerMirrored cluster forms, TensorFlow holds the GIL (TF
  2.15), so no thread of the task could end a task whose peer never comes;
  the parent bounds that wait (training.session_creation_timeout_secs), names
  the peers that do not answer, ends the child and exits 200 (retryable);
- a child killed by a signal (the OOM killer, a crash) ends the task with
  200, never as a SIGKILL seen from outside;
- SIGTERM and SIGINT are forwarded to the child; a child still there after
  a grace period is killed (MultiWorkerMirrored ignores SIGTERM). The child
  decides its own code, since only it knows what the signal stopped: 200
  after SIGTERM or 130 after Ctrl-C when work was left, its real outcome
  otherwise (0 once its work is saved, 2 for bad input found meanwhile;
  preemption.py). The parent passes that code through. A child the parent
  had to kill after its grace ends with 0 if its work was already saved
  (its final checkpoint; for the evaluator, its final evaluation:
  checkpoints.work_saved), else with the stop signal's code (200 or 130).
- a child stopped by a signal (SIGSTOP, a debugger) for
  `launcher.stall_timeout_secs` is ended and the task exits 200, naming
  itself: its peers only wait for it (a stopped process's kernel still
  accepts their connections), so nothing else would name it. Only when no
  `launch` watches the task (its spec says so): `launch`'s Supervisor
  watches its tasks' processes for the same, and one watcher per situation
  is the rule (config/timeouts.py).
The child takes the task's TaskSpec on its stdin, and reports that its session
exists by writing to a pipe (--ready-fd). Its stderr passes through the
parent, which leaves out TensorFlow's known start-up lines and nothing else
(supervise/child_stderr.py): a pod's log is its stderr.

An evaluator on the trainers' machine starts its child only once a trainer
has taken a step (or a checkpoint exists): importing TensorFlow and building
its graph beside them delayed their first step by 0.5 to 3.5 s on 2 cores,
even at SCHED_IDLE, and there is nothing to evaluate before a checkpoint.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from typing import Callable, List, Optional

from estimator_mnist.model_files import checkpoints
from estimator_mnist.config import timeouts
from estimator_mnist.config.schema import LauncherConfig, TrainingConfig
from estimator_mnist.errors import INTERRUPTED_EXIT_CODE, RETRYABLE_EXIT_CODE, SUCCESS_EXIT_CODE
from estimator_mnist.supervise.process_group import describe_exit, die_with_parent, stopped_by_signal
from estimator_mnist.plan.peers import describe_missing, missing_peers, peers_of
from estimator_mnist.model_files.progress import FRESH_SECS, read_progress
from estimator_mnist.supervise.child_stderr import FilteredStderr
from estimator_mnist.frozen_time import FrozenTime
from estimator_mnist.supervise.slurm_task_end import TaskEnd
from estimator_mnist.plan.task_plan import TaskPlan
from estimator_mnist.plan.task_spec import TaskSpec, spec_environment
from estimator_mnist.tasklog import log
from estimator_mnist.tf_task import TF_PROCESS_MODULE

STOP_GRACE_SECS = timeouts.INTERRUPT_GRACE_SECS  # after Ctrl-C
REPEAT_SECS = 2.0  # a SIGTERM this soon after the first is the same request
POLL_SECS = 0.2  # the child's watch
GATE_POLL_SECS = 0.2
# The gate opens after this at the latest: trainers whose records and checkpoints this task cannot see
# (another --run-dir) must not keep their evaluator from ever starting.
GATE_MAX_SECS = timeouts.EVALUATOR_START_GATE_SECS


def trainers_under_way(records_dir: str, model_dir: str, since: float, now: Optional[float] = None) -> bool:
    """A checkpoint exists, or a trainer's progress record shows a step taken since `since` or a recent one."""
    if checkpoints.latest_checkpoint(model_dir):
        return True
    now = time.time() if now is None else now
    for name, record in (read_progress(records_dir) if records_dir else {}).items():
        if name.split(":")[0] not in ("chief", "worker"):
            continue
        if (record.get("first_step_time") or 0) >= since:
            return True
        if not record.get("done") and record.get("time") and now - record["time"] <= FRESH_SECS:
            return True  # training already (an evaluator started by hand after the trainers)
    return False


def child_command(ready_fd: int) -> List[str]:
    """The task's TensorFlow process: it takes its TaskSpec on stdin and nothing else (tf_task/__main__.py)."""
    return [sys.executable, "-m", TF_PROCESS_MODULE, "--ready-fd", str(ready_fd)]


def evaluator_gate(records_dir: str, model_dir: str, started: float, clock=time.time) -> Callable[[], bool]:
    """What an evaluator's parent waits on: the trainers under way, or GATE_MAX_SECS since `started`."""
    return lambda: (clock() - started >= GATE_MAX_SECS
                    or trainers_under_way(records_dir, model_dir, started, now=clock()))


def _end_child(child: subprocess.Popen, reason: str) -> None:
    """Logs why, then ends the TensorFlow process at once and reaps it; its parent then exits 200 (retryable)."""
    log(reason)
    child.kill()
    child.wait()


class TaskParent:
    def __init__(self, plan: TaskPlan, session_timeout_secs: float,
                 preemption_grace_secs: float = TrainingConfig.preemption_grace_secs,
                 start_gate: Optional[Callable[[], bool]] = None,
                 stall_secs: Optional[float] = LauncherConfig.stall_timeout_secs, clock=time.monotonic,
                 saved: Callable[[], Optional[str]] = lambda: None, on_stop: Callable[[int], None] = lambda _: None):
        self.plan, self.saved, self.on_stop = plan, saved, on_stop  # saved(): what of the task's work is on disk once all is, else None
        self.stall_secs, self._clock = stall_secs, clock  # stall_secs None: launch watches
        self.stopped_since: Optional[float] = None
        self._frozen = FrozenTime(POLL_SECS, clock)  # this process stopped too (a suspended job): not the child alone
        # The child starts once start_gate says True; its session must form within session_timeout_secs.
        self.start_gate, self.session_timeout_secs = start_gate, session_timeout_secs
        # The child stops by itself within its grace period after SIGTERM; this is the backstop.
        self.sigterm_grace_secs = preemption_grace_secs + timeouts.SIGTERM_BACKSTOP_SECS
        self.child: Optional[subprocess.Popen] = None
        self.stop_signal, self.stop_requested_at = None, None  # the first stop signal's number and time.monotonic()

    def _on_signal(self, signum, _frame) -> None:
        now = time.monotonic()
        if self.stop_signal is None:
            self.stop_signal, self.stop_requested_at = signum, now
            self.on_stop(signum)  # under srun, said before anything else: a SIGKILL may follow (slurm_task_end.py)
        elif signum == signal.SIGTERM and now - self.stop_requested_at >= REPEAT_SECS and self.child is not None:
            self.child.kill()  # a second SIGTERM: at once
            return
        if self.child is not None and self.child.poll() is None:
            os.kill(self.child.pid, signum)

    def stopped_too_long(self) -> bool:
        """True (the child killed, the reason logged) once stopped by a signal for stall_secs (None: never)."""
        frozen = self._frozen.frozen()
        if self.stall_secs is None or not stopped_by_signal(self.child.pid, with_children=False) or frozen:
            self.stopped_since = None
            return False
        now = self._clock()
        self.stopped_since = self.stopped_since if self.stopped_since is not None else now
        if now - self.stopped_since <= self.stall_secs:
            return False
        _end_child(self.child, f"task {self.plan.task}: its TensorFlow process (pid {self.child.pid}) has been "
                   f"stopped by a signal (process state T: SIGSTOP or a debugger) for {now - self.stopped_since:.0f} s "
                   f"(launcher.stall_timeout_secs={self.stall_secs:g}); its peers only wait for it; ending it and "
                   f"exiting with {RETRYABLE_EXIT_CODE} (retryable)")
        return True

    def _kill_child_if_overdue(self) -> None:
        grace = self.sigterm_grace_secs if self.stop_signal == signal.SIGTERM else STOP_GRACE_SECS
        if self.stop_requested_at is not None and time.monotonic() - self.stop_requested_at > grace:
            self.child.kill()

    def _needs_startup_watchdog(self) -> bool:
        return self.plan.task.is_trainer and not self.plan.in_graph

    def _wait_ready(self, ready_read: int) -> bool:
        """False when the session did not form in time (the child is then ended)."""
        deadline = time.monotonic() + self.session_timeout_secs
        while self.child.poll() is None and time.monotonic() < deadline:
            self._kill_child_if_overdue()
            if self.stopped_too_long():
                return False
            if select.select([ready_read], [], [], 0.5)[0]:
                return True  # "ready", or EOF because the child is gone: its exit code says which
        if self.child.poll() is not None or self.stop_signal is not None:
            return True
        missing = missing_peers(peers_of(self.plan.tf_config, str(self.plan.task)))
        _end_child(self.child, f"task {self.plan.task}: no training session after "
                   f"training.session_creation_timeout_secs={self.session_timeout_secs:g} s: "
                   f"{describe_missing(missing)}; stopping this task with exit code {RETRYABLE_EXIT_CODE} (retryable)")
        return False

    def _wait_for_gate(self) -> bool:
        """False when a stop signal came first."""
        log(f"task {self.plan.task}: starts TensorFlow once a trainer on this machine has taken a step or a "
            f"checkpoint exists, at the latest in {GATE_MAX_SECS:g} s (beside them, its start-up slows theirs)")
        while self.stop_signal is None:
            if self.start_gate():
                return True
            time.sleep(GATE_POLL_SECS)
        return False

    def _hand_over(self, spec: bytes) -> None:
        """Writes the spec to the child's stdin and closes it; a child already gone reports by its exit code."""
        try:
            self.child.stdin.write(spec)
            self.child.stdin.close()
        except BrokenPipeError:
            pass

    def stop_code(self) -> int:
        """The code of the stop this process was asked for: 130 after Ctrl-C, 200 after SIGTERM."""
        return INTERRUPTED_EXIT_CODE if self.stop_signal == signal.SIGINT else RETRYABLE_EXIT_CODE

    def exit_code(self, returncode: int) -> int:
        """The task's code on the exit table: the child's own, or 200 (130) for a child that died of a signal."""
        if returncode >= 0:
            return returncode
        if self.stop_signal is not None:  # killed by this process after its grace period, or by the group's signal
            saved = self.saved()
            if saved:
                log(f"task {self.plan.task}: its TensorFlow process was ended after the stop signal, but {saved}: "
                    f"nothing is lost; exiting with {SUCCESS_EXIT_CODE}")
                return SUCCESS_EXIT_CODE
            return self.stop_code()
        log(f"task {self.plan.task}: its TensorFlow process was {describe_exit(returncode)}; exiting with "
            f"{RETRYABLE_EXIT_CODE} (retryable) so that a restart resumes from the last checkpoint")
        return RETRYABLE_EXIT_CODE

    def _start_child(self, command: List[str], ready_write: int, env: Optional[dict], stderr: FilteredStderr,
                     spec: bytes) -> None:
        try:
            self.child = subprocess.Popen(command, stdin=subprocess.PIPE, pass_fds=(ready_write,),
                                          preexec_fn=die_with_parent, env=env, stderr=stderr.child_end)
        except BaseException:
            stderr.finish()
            raise
        finally:
            os.close(ready_write)
        stderr.started()
        self._hand_over(spec)

    def _wait_child(self, ready_read: int) -> bool:
        """Until the child has ended; False when this process had to end it (retryable)."""
        if self._needs_startup_watchdog() and not self._wait_ready(ready_read):
            return False
        while self.child.poll() is None:
            self._kill_child_if_overdue()
            if self.stopped_too_long():
                return False
            time.sleep(POLL_SECS)
        return True

    def run(self, command: List[str], ready_write: int, ready_read: int, env: Optional[dict] = None,
            spec: bytes = b"") -> int:
        """Starts `command` with `spec` on its stdin and waits for it, bounding its start-up and its stops."""
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            if self.start_gate is not None and not self._wait_for_gate():
                os.close(ready_write)
                return self.stop_code()  # stopped before its child started: nothing of its work is done
            stderr = FilteredStderr()  # TensorFlow's known start-up lines left out (supervise/child_stderr.py)
            self._start_child(command, ready_write, env, stderr, spec)
            try:
                ended_by_itself = self._wait_child(ready_read)
            finally:
                stderr.finish()  # the child's last lines come before the task's own last word
            return self.exit_code(self.child.returncode) if ended_by_itself else RETRYABLE_EXIT_CODE
        finally:
            os.close(ready_read)
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def stopped_child_limit(spec: TaskSpec) -> Optional[float]:
    """How long the parent lets its child stay stopped by a signal: launcher.stall_timeout_secs, or None (not
    watched here) for a task `launch` started, whose Supervisor watches the same (supervise/launch/supervisor.py)."""
    return None if spec.launched else spec.config.launcher.stall_timeout_secs


def run_task_process(spec: TaskSpec) -> int:
    """Runs the task of `spec` in its TensorFlow process, handed the spec on a pipe; returns the task's exit code."""
    config, plan = spec.config, spec.plan
    gate = evaluator_gate(config.records_dir, config.model_dir, started=time.time()) if plan.starts_after_trainers else None
    ready_read, ready_write = os.pipe()
    end = TaskEnd.under_slurm(config.model_dir, str(plan.task), os.environ)
    parent = TaskParent(plan, config.training.session_creation_timeout_secs, config.training.preemption_grace_secs,
                        gate, stopped_child_limit(spec),
                        saved=lambda: checkpoints.work_saved(config.model_dir, config.training.max_steps,
                                                             plan.task.is_evaluator or plan.evaluates_itself),
                        on_stop=end.asked_to_stop if end else lambda _: None)
    code = parent.run(child_command(ready_write), ready_write, ready_read, spec_environment(os.environ),
                      spec.to_json().encode())
    if end is not None:
        end.ended(code)
        return end.srun_code(code)  # a stop it was asked for is no failure to srun (slurm_task_end.py says why)
    return code

"""The restart policy: after a failure a restart can cure, stop the group and start it again.

MultiWorkerMirrored cannot go on with a member missing, so a failed trainer
restarts the whole training group, which Estimator resumes from the latest
checkpoint; a failed evaluator restarts alone while training goes on.
"""

from __future__ import annotations

import time
from typing import List, Optional

from estimator_mnist.model_files import checkpoints
from estimator_mnist.config import Config, TaskId, timeouts
from estimator_mnist.plan.hosts import port_in_use
from estimator_mnist.model_files.preemption_mark import take_mark
from estimator_mnist.supervise.restart_budget import Job, RestartBudget
from estimator_mnist.supervise.launch.group import TaskGroup
from estimator_mnist.supervise.launch.monitor import Monitor
from estimator_mnist.supervise.launch.report import Console
from estimator_mnist.supervise.launch.supervisor import RunFailed, Supervisor, TaskFailure

PORT_RELEASE_SECS = timeouts.PORT_RELEASE_SECS


class Restarts:
    """What the launcher does about a failure; the counting is the restart budget's (restart_budget.py), as for
    tasks under a cluster manager: a preemption (a task asked to stop, its stop step saved) is never an incident,
    and restart.max_restarts bounds the failures in a row without a newer checkpoint. Each launch is a job of its
    own, with a fresh budget. The supervisor stops and starts the tasks and keeps its own state; this decides
    which, and when."""

    def __init__(self, config: Config, launch_time: float, group: TaskGroup, monitor: Monitor, console: Console):
        self.config = config
        self.launch_time = launch_time
        self.group, self.monitor, self.console = group, monitor, console
        self.budget = RestartBudget(Job(f"launch-{launch_time:.0f}", "launch"), config.restart.max_restarts)
        self._restarts: List[dict] = []  # every restart, preemptions ("counted": False) included
        restored = checkpoints.latest_step(config.model_dir)
        take_mark(config.model_dir, restored)  # an earlier job's preemption: this launch counts afresh
        self.budget.note_start(restored)

    @property
    def records(self) -> List[dict]:
        """Every restart of the run, in order; those a preemption caused are not counted against the budget."""
        return self._restarts

    def _check_allowed(self, failure: TaskFailure, restored: Optional[int]) -> None:
        if not self.budget.allows_another(restored):
            raise RunFailed(f"{failure}; gave up after {self.budget.streak} restarts in a row without a newer "
                            f"checkpoint (restart.max_restarts={self.config.restart.max_restarts})")

    def restart(self, failure: TaskFailure, supervisor: Supervisor) -> None:
        """Stops what failed and starts it again, or re-raises when the policy says no."""
        if self.config.restart.policy != "on_failure":
            raise failure
        group, monitor = self.group, self.monitor
        evaluator_only = failure.task is not None and failure.task.is_evaluator
        stopping = [group.processes[failure.task]] if evaluator_only else \
            [p for p in group.processes.values() if not p.task.is_evaluator]
        monitor.update(time.time())  # the failed task's last record may have come after the loop last read
        step_at_failure = monitor.step
        supervisor.stop(stopping, f"restarting after: {failure.task or 'the run'} {failure.reason}")
        restored = checkpoints.latest_step(self.config.model_dir)
        mark = None if evaluator_only else take_mark(self.config.model_dir, restored)
        if mark is None:
            self._check_allowed(failure, restored)
        self._record(failure, stopping, step_at_failure, restored, evaluator_only, mark)
        if group.network is None:
            self._wait_for_ports([p.task for p in stopping])
        time.sleep(self.config.restart.backoff_secs)
        if not evaluator_only:
            self.budget.note_start(restored)
            supervisor.training_restarts(restored)
        supervisor.start([p.task for p in stopping])
        monitor.note_change(time.time())

    def _record(self, failure: TaskFailure, stopping, step_at_failure, restored, evaluator_only: bool,
                mark: Optional[dict]) -> None:
        redo = (step_at_failure - (restored or 0)) if step_at_failure is not None and not evaluator_only else 0
        tasks = [str(p.task) for p in stopping]
        details = dict(seconds_since_launch=time.time() - self.launch_time,
                       failed_task=str(failure.task) if failure.task else None, reason=failure.reason,
                       error=str(failure), step_at_failure=step_at_failure, restored_checkpoint_step=restored,
                       steps_redone=max(0, redo), restarted_tasks=tasks)
        if mark is not None:
            preemption = self.budget.record_preemption(mark, restored)
            self._restarts.append({**preemption, **details, "counted": False})
            self.console.timed(f"{failure.task or 'a trainer'} preempted at step {mark['step']}, checkpoint "
                               f"{restored} written: preemption {preemption['number']}, not counted against "
                               f"restart.max_restarts; starting {', '.join(tasks)} again", always=True)
            return
        record = self.budget.record_failure(f"{failure.task or 'the run'} {failure.reason}", restored, **details)
        self._restarts.append({**record, "counted": True})
        self.console.timed(
            f"restart {record['in_a_row']}/{self.config.restart.max_restarts}: {record['failed_task'] or 'the run'} "
            f"{failure.reason} at step {step_at_failure}; starting {', '.join(tasks)} again "
            f"from checkpoint {restored} ({record['steps_redone']} steps to redo)", always=True)

    def _wait_for_ports(self, tasks: List[TaskId]) -> None:
        """A restarted task must be able to listen on its port again (in a private namespace the
        stopped tasks' sockets died with them)."""
        cluster = self.config.cluster
        ports = [cluster.address(t).port for t in tasks if not t.is_evaluator]
        deadline = time.time() + PORT_RELEASE_SECS
        busy = [port for port in ports if port_in_use(port)]
        while busy and time.time() < deadline:
            time.sleep(0.5)
            busy = [port for port in ports if port_in_use(port)]
        if busy:
            raise RunFailed(f"ports {busy} were still in use {PORT_RELEASE_SECS:g} s after the tasks that held them "
                            "were stopped; cannot restart")

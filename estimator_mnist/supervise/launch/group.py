"""The task processes of one launch: each task's TaskSpec and command, starting and stopping them.

The launcher makes each task's TaskSpec once and writes it beside the task's
log; the task is `train --spec FILE`, which hands that same spec to its
TensorFlow process. Nothing is planned twice.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Dict, List

from estimator_mnist.config import Config, TaskId
from estimator_mnist.storage import write_atomic
from estimator_mnist.plan.task_plan import plan_task
from estimator_mnist.plan.task_spec import TaskSpec, spec_environment
from estimator_mnist.supervise.process_group import (TaskProcess, die_with_parent, signal_group, spec_file,
                                                     start_task, stop_processes, wait_for_groups)


class TaskGroup:
    def __init__(self, config: Config, log_dir: Path, command_for=None, network=None, network_line=None):
        self.config = config
        self.log_dir = log_dir
        self.network = network  # a PrivateNetwork the tasks join, or None for the machine's network
        self.network_line = network_line
        # launched: the Supervisor, not each task's parent, ends a task stopped by a signal (config/timeouts.py).
        self.specs = {task: TaskSpec(config=config, plan=plan_task(config, task), launched=True)
                      for task in config.cluster.tasks()}
        # Tests swap in stand-in tasks; the supervision logic is the same.
        self.command_for = command_for or self.command
        self.processes: Dict[TaskId, TaskProcess] = {}
        self.all_processes: List[TaskProcess] = []

    def command(self, task: TaskId) -> List[str]:
        return [sys.executable, "-m", "estimator_mnist", "train", "--spec", str(spec_file(self.log_dir, task))]

    def _preexec(self, task: TaskId) -> None:
        """Runs in each task between fork and exec: it ends with the launcher and joins the private network.
        `train` applies the task's plan itself, before its TensorFlow process starts."""
        die_with_parent()
        if self.network is not None:
            self.network.join()

    def start(self, task: TaskId) -> TaskProcess:
        """Writes the task's spec (again at a restart: the same text), then starts its command."""
        write_atomic(spec_file(self.log_dir, task), self.specs[task].to_json() + "\n")
        process = start_task(task, self.command_for(task), spec_environment(os.environ),
                             self.log_dir / f"{task.type}-{task.index}.log", lambda: self._preexec(task))
        self.processes[task] = process
        self.all_processes.append(process)
        return process

    def running(self, predicate=lambda task: True) -> List[TaskProcess]:
        return [p for p in self.processes.values() if p.running and predicate(p.task)]

    def stop(self, processes: List[TaskProcess], grace_secs=None) -> List[TaskProcess]:
        return stop_processes(processes, self.config.launcher.grace_secs if grace_secs is None else grace_secs)

    def stop_all(self, grace_secs=None) -> List[TaskProcess]:
        stopped = self.stop(list(self.processes.values()), grace_secs)
        for p in self.processes.values():
            signal_group(p, signal.SIGKILL)  # the stragglers of leaders that had already exited
        wait_for_groups([p.pid for p in self.processes.values()])
        if self.network is not None:
            self.network.close()
        return stopped

"""The task processes of one launch: the command and plan of each task, starting and stopping them."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Dict, List, Sequence

from ..config import Config, TaskId
from ..task_plan import apply_in_child, child_environment, plan_task
from .processes import TaskProcess, die_with_parent, signal_group, start_task, stop_processes, wait_for_groups


class TaskGroup:
    def __init__(self, config: Config, cluster_file: str, log_dir: Path, overrides: Sequence[str] = (),
                 command_for=None, network=None, network_line=None):
        self.config = config
        self.cluster_file = cluster_file
        self.log_dir = log_dir
        self.overrides = list(overrides)
        self.network = network  # a PrivateNetwork the tasks join, or None for the machine's network
        self.network_line = network_line
        self.plans = {task: plan_task(config, task) for task in config.cluster.tasks()}
        # Tests swap in stand-in tasks; the supervision logic is the same.
        self.command_for = command_for or self.command
        self.processes: Dict[TaskId, TaskProcess] = {}
        self.all_processes: List[TaskProcess] = []

    def command(self, task: TaskId) -> List[str]:
        c = self.config
        sets = [arg for text in self.overrides for arg in ("--set", text)]
        return [sys.executable, "-m", "estimator_mnist", "train", "--cluster", self.cluster_file, "--task", str(task),
                "--model-dir", c.model_dir, "--data-dir", c.data_dir, "--run-dir", c.run_dir, *sets]

    def _preexec(self, task: TaskId) -> None:
        """Runs in each task between fork and exec: the plan's umask and priority before even Python starts,
        so that importing TensorFlow in the evaluator does not compete with the trainers' start-up."""
        die_with_parent()
        apply_in_child(self.plans[task])
        if self.network is not None:
            self.network.join()

    def start(self, task: TaskId) -> TaskProcess:
        process = start_task(task, self.command_for(task), child_environment(self.plans[task], os.environ),
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

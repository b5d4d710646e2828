"""The launcher's stall names the task that was stopped by a signal, also when that task's own parent ended its
stopped TensorFlow process (after the same timeout) a moment before the launcher looked (supervise/launch/supervisor.py)."""

import pytest

from estimator_mnist.config import TaskId, config_from_dict
from estimator_mnist.supervise.launch.supervisor import Supervisor, TaskFailure

CONFIG = config_from_dict({"cluster": {"chief": ["localhost:1"], "worker": ["localhost:2"]},
                           "launcher": {"stall_timeout_secs": 60}}, "t.yaml")
CHIEF, WORKER = TaskId("chief", 0), TaskId("worker", 0)


class Task:
    def __init__(self, task):
        self.task, self.stopped = task, False

    def is_stopped_by_signal(self):
        return self.stopped


class Group:
    def __init__(self, tasks):
        self.tasks, self.log_dir, self.processes = tasks, "logs", {}

    def running(self):
        return self.tasks


class Monitor:
    step, last_change, leader_done = 220, 1000.0, False

    def started_since(self, _time):
        return True


def supervisor(tasks):
    watcher = Supervisor(CONFIG, Group(tasks), Monitor(), console=None)
    watcher.group_started = 0.0
    return watcher


def stall(watcher, now):
    with pytest.raises(TaskFailure) as failure:
        watcher._check_stall(now)  # pylint: disable=protected-access
    return failure.value


def test_a_task_seen_stopped_since_the_last_progress_is_named_after_its_parent_ended_it():
    chief, worker = Task(CHIEF), Task(WORKER)
    watcher = supervisor([chief, worker])
    chief.stopped = True  # SIGSTOPped right after step 220
    watcher._check_stopped(1001.0)  # pylint: disable=protected-access
    chief.stopped = False  # its parent has just killed the stopped process, and has not exited yet
    watcher._check_stopped(1061.0)  # pylint: disable=protected-access
    failure = stall(watcher, 1061.0)
    assert failure.task == CHIEF and "stopped by a signal: chief:0" in str(failure), failure


def test_a_task_stopped_before_the_last_progress_is_not_blamed_for_a_later_stall():
    chief, worker = Task(CHIEF), Task(WORKER)
    watcher = supervisor([chief, worker])
    worker.stopped = True
    watcher._check_stopped(990.0)  # pylint: disable=protected-access; continued before step 220 (time 1000)
    worker.stopped = False
    failure = stall(watcher, 1061.0)
    assert failure.task is None and "stopped by a signal" not in str(failure), failure

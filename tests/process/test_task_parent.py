"""The task's parent (supervise/task_parent.py) with a real child process: a child stopped by a signal is named and ended
within launcher.stall_timeout_secs, before its session formed or after, with no launcher around."""

import os
import signal
import sys
import time

import pytest

from estimator_mnist.config import TaskId, config_from_dict
from estimator_mnist.errors import RETRYABLE_EXIT_CODE
from estimator_mnist.plan.task_plan import plan_task
from estimator_mnist.supervise.task_parent import TaskParent
from tests.helpers import TF_STARTUP_LINES
from tests.process.startup_lines_probe import LAST_WORDS, OTHERS

CONFIG = config_from_dict({"cluster": {"chief": ["localhost:1"], "worker": ["localhost:2"], "evaluator": "localhost"}},
                          "t.yaml")
STOPS_ITSELF = [sys.executable, "-m", "tests.process.stop_probe"]


@pytest.mark.parametrize("task", [TaskId("worker", 0),     # before its session formed: the startup watchdog's loop
                                  TaskId("evaluator", 0)])  # no session to wait for: the main loop
def test_a_child_stopped_by_a_signal_ends_the_task_retryably_within_the_stall_timeout(task, capfd):
    parent = TaskParent(plan_task(CONFIG, task), session_timeout_secs=300, stall_secs=1.0)
    read, write = os.pipe()
    started = time.monotonic()
    assert parent.run(STOPS_ITSELF, write, read) == RETRYABLE_EXIT_CODE
    assert time.monotonic() - started < 1.0 + 4
    assert parent.child.poll() is not None  # ended, not left stopped
    err = capfd.readouterr().err
    assert f"task {task}: its TensorFlow process (pid {parent.child.pid}) has been stopped by a signal" in err
    assert "launcher.stall_timeout_secs=1" in err


def test_a_child_that_is_continued_in_time_is_left_alone():
    parent = TaskParent(plan_task(CONFIG, TaskId("evaluator", 0)), session_timeout_secs=300, stall_secs=3.0)
    read, write = os.pipe()
    # Stops itself, and a helper continues it after 1 s (as a debugger that lets go).
    assert parent.run([*STOPS_ITSELF, "1"], write, read) == 0


@pytest.mark.parametrize("code, task_code", [(3, 3), (0, 0), (-signal.SIGKILL, RETRYABLE_EXIT_CODE)])
def test_the_task_s_stderr_leaves_out_tensorflow_s_start_up_lines_and_nothing_else(code, task_code, capfd):
    parent = TaskParent(plan_task(CONFIG, TaskId("evaluator", 0)), session_timeout_secs=300)
    read, write = os.pipe()
    assert parent.run([sys.executable, "-m", "tests.process.startup_lines_probe", str(code)], write, read) == task_code
    out, err = capfd.readouterr()
    assert out == "on stdout\n"
    lines = err.splitlines()
    assert lines[:len(OTHERS)] == OTHERS  # in order
    assert lines[len(OTHERS)].startswith(LAST_WORDS)  # the unfinished line too, before the parent's own
    assert not set(TF_STARTUP_LINES) & set(lines)

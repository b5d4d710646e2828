"""An evaluator beside trainers starts TensorFlow once they train: the gate its parent waits on (supervise/task_parent.py)."""

import os
import signal

from estimator_mnist.config import TaskId, config_from_dict
from estimator_mnist.model_files.progress import ProgressWriter, progress_path
from estimator_mnist.plan.task_plan import plan_task
from estimator_mnist.supervise.task_parent import (GATE_MAX_SECS, TaskParent, child_command, evaluator_gate,
                                                  trainers_under_way)

CONFIG = config_from_dict({"cluster": {"chief": ["localhost:1"], "worker": ["localhost:2"], "evaluator": "localhost"}},
                          "t.yaml")
EVALUATOR = plan_task(CONFIG, TaskId("evaluator", 0), cores=2, cpu_bfloat16=False, environ={})


def record(run_dir, task, *, first_step_at, last_step_at, done=False):
    clock = iter([first_step_at, last_step_at])
    writer = ProgressWriter(progress_path(str(run_dir), task), str(task), 64, clock=lambda: next(clock))
    writer.step(1, 2.3)
    writer.step(2, 2.2)
    writer.write(done=done)


def test_nothing_yet_means_wait(tmp_path):
    assert not trainers_under_way(str(tmp_path), str(tmp_path / "model"), since=1000.0, now=1001.0)
    assert not trainers_under_way("", str(tmp_path / "model"), since=1000.0, now=1001.0)  # no run_dir


def test_a_trainer_s_first_step_after_the_evaluator_started_opens_it(tmp_path):
    record(tmp_path, TaskId("worker", 0), first_step_at=1003.0, last_step_at=1003.5)
    assert trainers_under_way(str(tmp_path), str(tmp_path / "model"), since=1000.0, now=1004.0)


def test_a_finished_run_s_record_does_not_but_a_trainer_training_now_does(tmp_path):
    record(tmp_path, TaskId("chief", 0), first_step_at=500.0, last_step_at=600.0, done=True)
    assert not trainers_under_way(str(tmp_path), str(tmp_path / "model"), since=1000.0, now=1001.0)
    record(tmp_path, TaskId("chief", 0), first_step_at=500.0, last_step_at=999.0)  # started by hand before us
    assert trainers_under_way(str(tmp_path), str(tmp_path / "model"), since=1000.0, now=1001.0)


def test_an_evaluator_s_own_record_does_not_count(tmp_path):
    record(tmp_path, TaskId("evaluator", 0), first_step_at=1003.0, last_step_at=1003.5)
    assert not trainers_under_way(str(tmp_path), str(tmp_path / "model"), since=1000.0, now=1004.0)


def test_a_checkpoint_opens_it(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.ckpt-100.index").write_text("")
    (model / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-100"\n')
    assert trainers_under_way("", str(model), since=1000.0, now=1001.0)


def test_a_stop_while_waiting_ends_the_task_without_starting_tensorflow(tmp_path):
    parent = TaskParent(EVALUATOR, session_timeout_secs=10, start_gate=lambda: parent._on_signal(signal.SIGTERM, None))
    ready_read, ready_write = os.pipe()
    marker = tmp_path / "started"
    assert parent.run(["touch", str(marker)], ready_write, ready_read) == 200  # retryable: SIGTERM means "stop"
    assert parent.child is None and not marker.exists()


def test_the_gate_opens_and_the_child_runs(tmp_path):
    calls = []
    parent = TaskParent(EVALUATOR, session_timeout_secs=10, start_gate=lambda: calls.append(1) or len(calls) > 2)
    ready_read, ready_write = os.pipe()
    assert parent.run(["true"], ready_write, ready_read) == 0 and len(calls) == 3


def test_the_child_takes_its_spec_and_nothing_else():
    """No --cluster, --task, --set or paths: the TaskSpec on its stdin is the whole task."""
    command = child_command(7)
    assert command[1:] == ["-m", "estimator_mnist.tf_task", "--ready-fd", "7"]


def test_the_gate_opens_at_the_latest_after_its_maximum(tmp_path):
    now = [1000.0]
    gate = evaluator_gate(str(tmp_path), str(tmp_path / "model"), started=1000.0, clock=lambda: now[0])
    now[0] += GATE_MAX_SECS - 1
    assert not gate()  # nothing visible yet (another run_dir, a model_dir on GCS)
    now[0] += 1
    assert gate()

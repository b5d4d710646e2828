"""Progress records (written by trainers) and the launcher's view of them (no log parsing)."""

import json
from pathlib import Path
import os

from estimator_mnist.config import TaskId, config_from_dict
from estimator_mnist.supervise.launch.monitor import Monitor
from estimator_mnist.model_files.progress import STEP_TIMES_EVERY, WRITE_EVERY_SECS, ProgressWriter, progress_path, read_progress


class Clock:
    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now


def test_writer_records_steps_rate_and_step_times(tmp_path):
    clock = Clock()
    path = Path(progress_path(str(tmp_path), TaskId("worker", 1)))
    writer = ProgressWriter(path, "worker:1", examples_per_step=64, clock=clock)
    writer.step(1, 2.3)
    assert json.loads(path.read_text())["local_step"] == 1  # written after the first step
    for step in range(2, 26):
        clock.now += 0.5
        writer.step(step, 1.0 / step)
    record = read_progress(str(tmp_path))["worker:1"]
    # Written every WRITE_EVERY_SECS: the record is at most that old.
    assert clock.now - record["time"] < WRITE_EVERY_SECS + 0.5
    assert record["examples_per_sec"] == 64 / 0.5
    assert record["pid"] == os.getpid() and record["done"] is False
    writer.finish(25)
    record = read_progress(str(tmp_path))["worker:1"]
    assert record["done"] and record["local_step"] == 25 and record["loss"] == 1.0 / 25
    assert [s for s, _ in record["step_times"]] == [1, STEP_TIMES_EVERY, 2 * STEP_TIMES_EVERY, 25]
    assert record["first_step_time"] == 1000.0 and record["time"] == clock.now


def test_unreadable_or_foreign_files_are_skipped(tmp_path):
    (tmp_path / "progress").mkdir()
    (tmp_path / "progress" / "chief-0.json").write_text('{"task": "chief:0", "pi')
    (tmp_path / "progress" / "x.json").write_text("[1]")
    assert read_progress(str(tmp_path)) == {}


def config_for(tmp_path):
    return config_from_dict({"cluster": {"chief": ["localhost:1"], "worker": ["localhost:2"]},
                             "training": {"max_steps": 100, "save_checkpoints_steps": 50},
                             "run_dir": str(tmp_path)}, "t.yaml")


def write_record(tmp_path, task, pid, step, when, rate=100.0, first=None):
    record = {"task": str(task), "pid": pid, "local_step": step, "global_step": step, "loss": 0.5,
              "examples_per_sec": rate, "time": when, "first_step_time": first or when, "done": False,
              "step_times": [[1, first or when]]}
    path = Path(progress_path(str(tmp_path), task))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


def test_monitor_follows_the_current_processes_records_only(tmp_path):
    monitor = Monitor(config_for(tmp_path), now=0.0)
    chief, worker = TaskId("chief", 0), TaskId("worker", 0)
    monitor.track(chief, 11)
    monitor.track(worker, 12)
    write_record(tmp_path, chief, 99, 80, 50.0)  # a record of the process before a restart
    monitor.update(now=51.0)
    assert monitor.step is None and monitor.last_step_time is None
    write_record(tmp_path, chief, 11, 20, 60.0, first=40.0)
    write_record(tmp_path, worker, 12, 19, 61.0, first=41.0)
    monitor.update(now=62.0)
    assert (monitor.step, monitor.loss, monitor.images_per_sec) == (20, 0.5, 200.0)
    assert monitor.first_step_time == 40.0 and monitor.last_step_time == 61.0 and monitor.last_change == 62.0
    write_record(tmp_path, chief, 11, 60, 80.0, first=40.0)
    monitor.update(now=81.0)
    assert monitor.seconds_left(81.0) == (100 - 60) / 2.0 - 1.0  # 40 steps in 19 s of the window
    assert monitor.images_per_sec == 100.0  # the worker's record is too old to count
    monitor.update(now=200.0)
    assert monitor.last_change == 81.0  # nothing new: no progress since
    monitor.restart_from(50, now=201.0)
    assert monitor.step == 50 and monitor.seconds_left(201.0) is None


def test_monitor_reads_new_evaluations(tmp_path):
    config = config_for(tmp_path)
    monitor = Monitor(config, now=0.0)
    os.makedirs(config.model_dir)
    with open(os.path.join(config.model_dir, "eval_results.jsonl"), "w") as handle:
        handle.write('{"global_step": 50, "accuracy": 0.9, "loss": 0.3}\n')
    assert [r["global_step"] for r in monitor.update(now=5.0)] == [50]
    assert monitor.update(now=6.0) == [] and monitor.final_evaluation() is None
    with open(os.path.join(config.model_dir, "eval_results.jsonl"), "a") as handle:
        handle.write('{"global_step": 100, "accuracy": 0.95, "loss": 0.2}\n')
    assert [r["global_step"] for r in monitor.update(now=7.0)] == [100]
    assert monitor.final_evaluation()["accuracy"] == 0.95 and monitor.last_change == 7.0

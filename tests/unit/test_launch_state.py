"""Each launcher object owns its state: the supervisor its run's phase, and run_summary.json is built from a plain
record of the run, not from the Launcher."""

import io
import json
import os
import time
from types import SimpleNamespace

from estimator_mnist.config import TaskId
from estimator_mnist.supervise.launch.monitor import Monitor
from estimator_mnist.supervise.launch.report import Console, RunRecord, TaskRecord, build_summary
from estimator_mnist.supervise.launch.supervisor import Supervisor
from tests.unit.test_progress import config_for, write_record

CHIEF, WORKER = TaskId("chief", 0), TaskId("worker", 0)


class StandInGroup:
    """TaskGroup.start, with made-up pids: 101, 102, ..."""

    def __init__(self):
        self.started, self.processes = [], {}

    def start(self, task):
        self.started.append(task)
        return SimpleNamespace(pid=100 + len(self.started))


def supervisor_for(tmp_path):
    config = config_for(tmp_path)
    group = StandInGroup()
    return Supervisor(config, group, Monitor(config, now=0.0), Console(io.StringIO())), group


def test_the_supervisor_starts_tasks_and_counts_only_their_new_processes(tmp_path):
    supervisor, group = supervisor_for(tmp_path)
    monitor = supervisor.monitor
    supervisor.start([CHIEF, WORKER])
    assert group.started == [CHIEF, WORKER]
    write_record(tmp_path, CHIEF, 101, 20, 10.0)
    monitor.update(now=11.0)
    assert monitor.step == 20
    supervisor.start([CHIEF])  # started again: pid 103
    write_record(tmp_path, CHIEF, 101, 30, 20.0)  # the old process's last word
    monitor.update(now=21.0)
    assert monitor.last_step_time == 10.0
    write_record(tmp_path, CHIEF, 103, 5, 22.0)
    monitor.update(now=23.0)
    assert monitor.step == 5


def test_training_that_restarts_is_not_done_and_starts_afresh_from_the_restored_step(tmp_path):
    supervisor, _ = supervisor_for(tmp_path)
    monitor, config = supervisor.monitor, supervisor.config
    supervisor.start([CHIEF, WORKER])
    write_record(tmp_path, CHIEF, 101, 40, time.time())
    monitor.update(now=time.time())
    assert monitor.started_since(supervisor.group_started)
    assert supervisor.stall_limit() == config.launcher.stall_timeout_secs
    before = time.time()
    supervisor.training_restarts(25)
    assert supervisor.training_done_time is None and supervisor.group_started >= before
    assert (monitor.step, monitor.loss, monitor.images_per_sec) == (25, None, None)
    # The new group has not taken a step yet: it gets its start-up time again.
    assert supervisor.stall_limit() == (config.launcher.stall_timeout_secs
                                        + config.training.session_creation_timeout_secs)


def finished_model_dir(config):
    model_dir = config.model_dir
    os.makedirs(model_dir)
    with open(os.path.join(model_dir, "checkpoint"), "w") as handle:
        handle.write('model_checkpoint_path: "model.ckpt-100"\n')
    open(os.path.join(model_dir, "model.ckpt-100.index"), "w").close()
    evaluations = [{"global_step": 50, "accuracy": 0.9, "loss": 0.3},
                   {"global_step": 100, "accuracy": 0.97, "loss": 0.1, "export": "/e/1"}]
    with open(os.path.join(model_dir, "eval_results.jsonl"), "w") as handle:
        handle.write("".join(json.dumps(e) + "\n" for e in evaluations))
    return evaluations


def test_the_summary_says_what_the_record_and_model_dir_say(tmp_path):
    config = config_for(tmp_path)
    evaluations = finished_model_dir(config)
    record = RunRecord(
        config=config, cluster_file="c.yaml", status="finished", error=None, launch_time=1000.0, ended=1090.0,
        log_dir="/logs/1", final_evaluation=evaluations[-1], first_step_time=1005.0, last_step_time=1070.0,
        training_done_time=1071.0, notes=("worker:0 still running", "stopped after the work was saved"),
        restarts=({"number": 1, "failed_task": "worker:0"},), network_line="private", all_pids=(11, 12, 13),
        tasks=(TaskRecord("chief:0", 13, "/logs/1/chief-0.log", 0, False, 1040.0, 1080.0),
               TaskRecord("worker:0", 12, "/logs/1/worker-0.log", -9, True, 1001.0, None)))
    summary = build_summary(record)
    assert summary == {
        "status": "finished", "error": None, "cluster_file": "c.yaml", "strategy": "multi_worker_mirrored",
        "max_steps": 100, "global_step": 100, "accuracy": 0.97, "export": "/e/1", "validation_accuracy": None,
        "evaluations": evaluations, "run_dir": config.run_dir, "model_dir": config.model_dir, "log_dir": "/logs/1",
        "launch_time": 1000.0, "seconds_to_first_step": 5.0, "seconds_to_last_step": 70.0,
        "seconds_to_training_done": 71.0, "seconds_to_exit": 90.0,
        "notes": ["worker:0 still running", "stopped after the work was saved"],
        "restart_policy": "never", "restarts": [{"number": 1, "failed_task": "worker:0"}], "network": "private",
        "all_pids": [11, 12, 13],
        "tasks": {"chief:0": {"pid": 13, "log": "/logs/1/chief-0.log", "exit": 0, "exit_reason": "exit code 0",
                              "stopped_by_launcher": False, "seconds": 40.0},
                  "worker:0": {"pid": 12, "log": "/logs/1/worker-0.log", "exit": -9,
                               "exit_reason": "killed by SIGKILL", "stopped_by_launcher": True, "seconds": 89.0}}}
    assert json.loads(json.dumps(summary)) == summary


def test_a_run_with_nothing_to_do_has_no_tasks_timings_or_accuracy_beyond_its_record(tmp_path):
    config = config_for(tmp_path)
    summary = build_summary(RunRecord(config, "c.yaml", "finished", None, 1000.0, 1000.5, "/logs/1"))
    assert summary["tasks"] == {} and summary["all_pids"] == [] and summary["notes"] == []
    assert summary["accuracy"] is None and summary["global_step"] is None and summary["seconds_to_first_step"] is None
    assert summary["seconds_to_exit"] == 0.5



def test_a_final_evaluation_slower_than_the_stall_limit_is_no_stall_but_a_hung_chief_still_is(tmp_path):
    from estimator_mnist import storage
    from estimator_mnist.config import config_from_dict
    from estimator_mnist.model_files import layout
    from estimator_mnist.model_files.progress import ProgressWriter, progress_path
    from estimator_mnist.supervise.launch.supervisor import TaskFailure
    import pytest

    config = config_from_dict({"cluster": {"chief": ["localhost:1"], "worker": ["localhost:2"],
                                           "evaluator": "localhost"},
                               "training": {"max_steps": 80, "save_checkpoints_steps": 40},
                               "launcher": {"stall_timeout_secs": 15}, "evaluation": {"final_timeout_secs": 600},
                               "run_dir": str(tmp_path)}, "t.yaml")
    monitor = Monitor(config, now=0.0)
    evaluator = SimpleNamespace(running=True)
    group = SimpleNamespace(processes={TaskId("evaluator", 0): evaluator}, log_dir="logs")
    supervisor = Supervisor(config, group, monitor, Console(io.StringIO()))
    supervisor.group_started = 0.0
    monitor.track(CHIEF, os.getpid())  # the record below is this process's, as the chief's is its own
    now = [1000.0]
    writer = ProgressWriter(progress_path(config.records_dir, CHIEF), str(CHIEF), 32, clock=lambda: now[0])
    writer.step(80, 0.05)
    monitor.update(now[0])
    writer.finish(80)  # the chief's hook ends training; it now waits for the final evaluation (roles.py)
    monitor.update(1001.0)
    assert supervisor.awaiting_final_evaluation()
    supervisor._check_stall(1016.1)  # pylint: disable=protected-access; the evaluation runs 16 s (CI, Xeon)
    supervisor._check_stall(1000.0 + 15 + 600)  # pylint: disable=protected-access
    with pytest.raises(TaskFailure, match=r"no task made progress for 615 s .*evaluation.final_timeout_secs, while "
                                          r"the chief waits for the final evaluation"):
        supervisor._check_stall(1000.0 + 15 + 600 + 1)  # pylint: disable=protected-access; hung past its bound

    storage.append_line(layout.eval_results_file(config.model_dir),
                        json.dumps({"global_step": 80, "accuracy": 0.98, "loss": 0.05}))
    monitor.update(1017.0)  # the final evaluation is recorded: the stall clock starts again from it
    assert not supervisor.awaiting_final_evaluation()
    supervisor._check_stall(1032.0)  # pylint: disable=protected-access
    with pytest.raises(TaskFailure, match="no task made progress for 15 s"):
        supervisor._check_stall(1032.1)  # pylint: disable=protected-access; a chief that hangs in its teardown

    monitor.evaluations = []  # as if the score were not there: the running evaluator alone adds the bound
    storage.remove(layout.eval_results_file(config.model_dir), missing_ok=True)
    assert supervisor.stall_limit() == 615
    evaluator.running = False  # an evaluator that ended without the final evaluation: the stall limit as always
    assert supervisor.stall_limit() == 15

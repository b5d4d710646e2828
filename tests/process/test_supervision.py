"""The launcher's supervision with stand-in tasks (fake_task.py): success, failures, deadlines, Ctrl-C."""

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from estimator_mnist.plan.task_spec import read_spec
from estimator_mnist.errors import UsageError
from estimator_mnist.supervise.launch import launch
from estimator_mnist.supervise.process_group import describe_exit
from tests.helpers import descendants, pids_alive
from tests.process.launching import HEALTHY, make_config, mark_data_prepared, run


def test_success_prints_the_final_line_and_summary(tmp_path):
    config = make_config(tmp_path)
    code, out, summary, _, pids = run(config, {"chief:0": "chief_ok", "worker:0": "worker_ok", "evaluator:0": "evaluator_ok"})
    assert code == 0, out
    last = out.strip().splitlines()[-1]
    assert last == f"finished: accuracy=0.9700 global_step=100 export={config.model_dir}/export/1"
    assert summary["status"] == "finished" and summary["accuracy"] == 0.97 and summary["global_step"] == 100
    assert all(t["exit"] == 0 for t in summary["tasks"].values())
    assert not pids_alive(pids)
    for task in ("chief-0", "worker-0", "evaluator-0"):
        assert (Path(summary["log_dir"]) / f"{task}.log").read_text().startswith("fake task")


def test_a_failed_worker_stops_everyone_and_names_itself(tmp_path):
    config = make_config(tmp_path)
    code, out, summary, elapsed, pids = run(
        config, {"chief:0": "hang_ignoring_sigterm", "worker:0": "fail_soon", "evaluator:0": "evaluator_never_final"})
    assert code == 200  # the worker's failure was retryable; restart.policy never leaves the restart to the caller
    assert f"failed: task worker:0 failed (exit code 200); its log: {summary['log_dir']}/worker-0.log" in out
    assert summary["status"] == "failed" and "worker:0" in summary["error"]
    # SIGTERM is ignored by the others: they were SIGKILLed after the 1 s grace period.
    assert summary["tasks"]["chief:0"]["exit_reason"] == "killed by SIGKILL"
    assert summary["tasks"]["chief:0"]["stopped_by_launcher"]
    assert not pids_alive(pids)
    assert elapsed < 30


def test_a_worker_hanging_after_the_chief_finished_is_stopped(tmp_path):
    config = make_config(tmp_path)
    code, out, summary, _, pids = run(
        config, {"chief:0": "chief_ok", "worker:0": "hang_ignoring_sigterm", "evaluator:0": "evaluator_ok"})
    assert code == 0, out
    assert any("worker:0 still running 2 s after the chief finished; stopped" in n for n in summary["notes"])
    assert summary["tasks"]["worker:0"]["stopped_by_launcher"]
    assert not pids_alive(pids)


@pytest.mark.parametrize("limits, behaviours, message, expected", [
    pytest.param({"launcher": {"stall_timeout_secs": 2}},
                 {"chief:0": "silent_forever", "worker:0": "silent_forever", "evaluator:0": "silent_forever"},
                 "no task made progress for 4 s (launcher.stall_timeout_secs + training.session_creation_timeout_secs, "
                 "while starting; last step: None)", 200, id="stalled-cluster"),
    pytest.param({"evaluation": {"final_timeout_secs": 2}},
                 {"chief:0": "chief_ok", "worker:0": "worker_ok", "evaluator:0": "evaluator_never_final"},
                 "the evaluator did not evaluate the final checkpoint within evaluation.final_timeout_secs=2 s",
                 1, id="evaluator-never-final"),
])
def test_a_run_past_its_deadline_is_stopped(tmp_path, limits, behaviours, message, expected):
    config = make_config(tmp_path, **limits)
    code, out, summary, _, pids = run(config, behaviours)
    assert code == expected
    assert message in out
    assert not pids_alive(pids)


def test_without_evaluator_the_run_finishes_with_no_accuracy(tmp_path):
    config = make_config(tmp_path, evaluator=False)
    code, out, summary, _, _ = run(config, {"chief:0": "chief_ok", "worker:0": "worker_ok"})
    assert code == 0
    assert out.strip().splitlines()[-1] == "finished: accuracy=none global_step=100 export=none"


def signal_driver(tmp_path, sig, ready, behaviour="hang_ignoring_sigterm"):
    """Runs launch_driver.py, sends `sig` once `ready()` holds (or after 30 s): (exit code, output)."""
    proc = subprocess.Popen([sys.executable, str(Path(__file__).parent / "launch_driver.py"), str(tmp_path / "run"),
                             behaviour], stdout=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    while time.time() < deadline and not ready():
        time.sleep(0.2)
    time.sleep(1)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    return proc.returncode, out


def test_ctrl_c_stops_every_task(tmp_path):
    code, out = signal_driver(tmp_path, signal.SIGINT,
                              lambda: len(list((tmp_path / "run" / "logs").glob("*/*.log"))) >= 2)
    assert code == 130, out
    assert "failed: interrupted by SIGINT" in out
    summary = json.loads((tmp_path / "run" / "run_summary.json").read_text())
    assert not pids_alive([t["pid"] for t in summary["tasks"].values()])


def cmdline(pid):
    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:
        return []


def test_a_sigkilled_launcher_leaves_no_task_running(tmp_path):
    """SIGKILL cannot be caught: its tasks (which here ignore SIGTERM) die with it, through PR_SET_PDEATHSIG."""
    proc = subprocess.Popen([sys.executable, str(Path(__file__).parent / "launch_driver.py"), str(tmp_path / "run")],
                            stdout=subprocess.DEVNULL)
    deadline, tasks = time.time() + 30, []
    while time.time() < deadline and len(tasks) < 2:
        tasks = [pid for pid in descendants(proc.pid) if "fake_task.py" in " ".join(cmdline(pid))]
        time.sleep(0.2)
    assert len(tasks) == 2
    proc.kill()
    proc.wait(timeout=30)
    deadline = time.time() + 10
    while time.time() < deadline and pids_alive(tasks):
        time.sleep(0.1)
    assert not pids_alive(tasks)


def test_a_sigterm_after_the_run_s_work_is_saved_exits_0(tmp_path):
    """The stop came once the final checkpoint was on disk (no evaluator): nothing was lost, so 0, not 200."""
    code, out = signal_driver(tmp_path, signal.SIGTERM, (tmp_path / "run" / "model" / "checkpoint").exists,
                              behaviour="save_then_hang")
    assert code == 0, out
    assert "note: stopped by SIGTERM (preempted) after the run's work was saved" in out
    assert out.strip().splitlines()[-1].startswith("finished:")


def test_launch_refuses_unprepared_data(tmp_path):
    config = make_config(tmp_path)
    with pytest.raises(UsageError, match=r"MNIST is not prepared in .*data \(no prepared dataset found\); run 'estimator-mnist prepare-data --data-dir"):
        launch(config, "cluster.yaml")


def test_a_finished_run_is_not_trained_again(tmp_path):
    config = make_config(tmp_path)
    code, *_ = run(config, {"chief:0": "chief_ok", "worker:0": "worker_ok", "evaluator:0": "evaluator_ok"})
    assert code == 0
    mark_data_prepared(config)
    out = io.StringIO()
    assert launch(config, "cluster.yaml", out=out) == 0
    assert "already holds step 100 >= max_steps 100: nothing to do" in out.getvalue()
    assert out.getvalue().strip().splitlines()[-1].startswith("finished: accuracy=0.9700 global_step=100")


def test_describe_exit():
    assert describe_exit(0) == "exit code 0"
    assert describe_exit(-9) == "killed by SIGKILL"
    assert describe_exit(None) == "still running"


def test_run_files_are_not_writable_by_other_users(tmp_path):
    config = make_config(tmp_path)
    code, *_ = run(config, HEALTHY)
    assert code == 0
    for path in (Path(config.run_dir), Path(config.model_dir), *Path(config.run_dir, "logs").rglob("*")):
        assert path.stat().st_mode & 0o022 == 0, path
    # Files the tasks write (checkpoints here) get the same protection.
    assert Path(config.model_dir, "checkpoint").stat().st_mode & 0o022 == 0




def test_each_launched_task_gets_its_spec_and_not_the_launcher_s_tf_config(tmp_path, monkeypatch):
    """Each task's TaskSpec is written beside its log (GPU mask, placement log level); the umask reaches the
    process before it starts; the launcher's TF_CONFIG does not."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    monkeypatch.setenv("TF_CONFIG", "{}")
    config = make_config(tmp_path, tasks={"worker": {"gpus": [2, 3]}, "evaluator": {"gpus": []}},
                         session={"log_device_placement": True})
    code, out, summary, _, _ = run(config, HEALTHY)
    assert code == 0, out
    logs = {task: Path(info["log"]) for task, info in summary["tasks"].items()}
    first = {task: json.loads(log.read_text().splitlines()[0].split(" env=", 1)[1]) for task, log in logs.items()}
    assert all(env["TF_CONFIG"] is None for env in first.values())
    assert all(" umask=027 " in log.read_text().splitlines()[0] for log in logs.values())
    specs = {task: read_spec(str(log.with_name(log.stem + ".spec.json"))) for task, log in logs.items()}
    env = {task: dict(spec.plan.env) for task, spec in specs.items()}
    assert "CUDA_VISIBLE_DEVICES" not in env["chief:0"]  # no gpus: inherited
    assert env["worker:0"]["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert env["evaluator:0"]["CUDA_VISIBLE_DEVICES"] == "-1"  # [] hides every GPU
    assert all(e["TF_CPP_MIN_LOG_LEVEL"] == "0" for e in env.values())  # placement lines are INFO logs
    assert all(spec.config == config and str(spec.plan.task) == task for task, spec in specs.items())


def test_summary_times_come_from_the_trainers_records(tmp_path):
    code, out, summary, _, _ = run(make_config(tmp_path), HEALTHY)
    assert code == 0, out
    from estimator_mnist.model_files.progress import read_progress

    records = read_progress(str(tmp_path / "run"))
    assert summary["seconds_to_first_step"] == min(r["first_step_time"] for r in records.values()) - summary["launch_time"]
    assert summary["seconds_to_last_step"] == max(r["time"] for r in records.values()) - summary["launch_time"]


def test_the_wait_for_a_group_finds_members_whose_leader_is_gone():
    """A leader's children outlive it as init's children; the launcher waits for them by their process group."""
    from estimator_mnist.supervise.process_group import group_members, wait_for_groups  # pylint: disable=C0415

    leader = subprocess.Popen([sys.executable, str(Path(__file__).parent / "group_probe.py")], stdout=subprocess.PIPE,
                              text=True, start_new_session=True)
    child = int(leader.stdout.readline())
    leader.wait(timeout=30)  # the leader is gone and reaped; its child lives on in the group
    try:
        assert group_members([leader.pid]) == [child]
        assert wait_for_groups([leader.pid], timeout=0.3) == [child]
        os.killpg(leader.pid, signal.SIGKILL)
        assert wait_for_groups([leader.pid], timeout=10) == []
        assert not pids_alive([child])
    finally:
        try:
            os.killpg(leader.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

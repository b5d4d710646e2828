"""The launcher's supervision, with stand-in tasks (tests/fake_task.py) instead of TensorFlow."""

import io
import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import REPO, pids_alive
from estimator_mnist import launcher as L
from estimator_mnist.cluster import TaskId
from estimator_mnist.config import config_from_dict
from estimator_mnist.errors import UsageError

FAKE = str(Path(__file__).parent / "fake_task.py")


def make_config(tmp_path, launcher=None, evaluator=True, ports=(1, 2)):
    cluster = {"chief": [f"localhost:{ports[0]}"], "worker": [f"localhost:{ports[1]}"]}
    if evaluator:
        cluster["evaluator"] = "localhost"
    return config_from_dict({
        "cluster": cluster,
        "training": {"max_steps": 100, "save_checkpoints_steps": 50},
        "launcher": {"grace_secs": 1, "finish_timeout_secs": 2, "eval_timeout_secs": 20, "stall_timeout_secs": 30,
                     **(launcher or {})},
        "run_dir": str(tmp_path / "run"),
        "data_dir": str(tmp_path / "data"),
    }, str(tmp_path / "cluster.yaml"))


def mark_data_prepared(config):
    """What launch checks for, without preparing MNIST."""
    version_dir = Path(config.data_dir, "mnist", "3.0.1")
    version_dir.mkdir(parents=True)
    (version_dir / "dataset_info.json").write_text("{}")


def fake_commands(config, behaviours):
    def command_for(task: TaskId):
        return [sys.executable, FAKE, behaviours[str(task)], config.model_dir, str(config.training.max_steps)]
    return command_for


def run(config, behaviours):
    out = io.StringIO()
    launcher = L.Launcher(config, "cluster.yaml", out=out, command_for=fake_commands(config, behaviours))
    started = time.monotonic()
    code = launcher.run()
    summary = json.loads(Path(config.run_dir, "run_summary.json").read_text())
    pids = [t["pid"] for t in summary["tasks"].values()]
    return code, out.getvalue(), summary, time.monotonic() - started, pids


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
    assert code == 1
    assert f"failed: task worker:0 failed (exit code 3); its log: {summary['log_dir']}/worker-0.log" in out
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


@pytest.mark.parametrize("limits, behaviours, message", [
    pytest.param({"stall_timeout_secs": 2},
                 {"chief:0": "silent_forever", "worker:0": "silent_forever", "evaluator:0": "silent_forever"},
                 "no task made progress for launcher.stall_timeout_secs=2 s", id="stalled-cluster"),
    pytest.param({"eval_timeout_secs": 2},
                 {"chief:0": "chief_ok", "worker:0": "worker_ok", "evaluator:0": "evaluator_never_final"},
                 "the evaluator did not evaluate the final checkpoint within launcher.eval_timeout_secs=2 s",
                 id="evaluator-never-final"),
])
def test_a_run_past_its_deadline_is_stopped(tmp_path, limits, behaviours, message):
    config = make_config(tmp_path, launcher=limits)
    code, out, summary, _, pids = run(config, behaviours)
    assert code == 1
    assert message in out
    assert not pids_alive(pids)


def test_without_evaluator_the_run_finishes_with_no_accuracy(tmp_path):
    config = make_config(tmp_path, evaluator=False)
    code, out, summary, _, _ = run(config, {"chief:0": "chief_ok", "worker:0": "worker_ok"})
    assert code == 0
    assert out.strip().splitlines()[-1] == "finished: accuracy=none global_step=100 export=none"


def test_ctrl_c_stops_every_task(tmp_path):
    model_dir = tmp_path / "run" / "model"
    driver = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from estimator_mnist import launcher
        from estimator_mnist.config import config_from_dict
        config = config_from_dict({{"cluster": {{"chief": ["localhost:1"], "worker": ["localhost:2"]}},
                                   "launcher": {{"grace_secs": 1}}, "run_dir": {str(tmp_path / 'run')!r}}}, "c.yaml")
        cmd = lambda task: [sys.executable, {FAKE!r}, "hang_ignoring_sigterm", {str(model_dir)!r}, "100"]
        sys.exit(launcher.Launcher(config, "c.yaml", command_for=cmd).run())
    """)
    proc = subprocess.Popen([sys.executable, "-c", driver], stdout=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    summary_path = tmp_path / "run" / "run_summary.json"
    log_dir = tmp_path / "run" / "logs"
    while time.time() < deadline and len(list(log_dir.glob("*/*.log"))) < 2:
        time.sleep(0.2)
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130, out
    assert "failed: interrupted by SIGINT" in out
    summary = json.loads(summary_path.read_text())
    assert not pids_alive([t["pid"] for t in summary["tasks"].values()])


def test_launch_refuses_unprepared_data(tmp_path):
    config = make_config(tmp_path)
    with pytest.raises(UsageError, match=r"MNIST is not prepared in .*data; run 'estimator-mnist prepare-data --data-dir"):
        L.launch(config, "cluster.yaml")


def test_launch_refuses_a_busy_port(tmp_path):
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        config = make_config(tmp_path, ports=(port, port + 1 if port < 65535 else port - 1))
        mark_data_prepared(config)
        with pytest.raises(UsageError, match=rf"port {port} of task chief:0 .* is already in use"):
            L.launch(config, "cluster.yaml")
    assert not Path(config.run_dir, "logs").exists()


def test_a_finished_run_is_not_trained_again(tmp_path):
    config = make_config(tmp_path)
    code, *_ = run(config, {"chief:0": "chief_ok", "worker:0": "worker_ok", "evaluator:0": "evaluator_ok"})
    assert code == 0
    mark_data_prepared(config)
    out = io.StringIO()
    assert L.launch(config, "cluster.yaml", out=out) == 0
    assert "already holds step 100 >= max_steps 100: nothing to do" in out.getvalue()
    assert out.getvalue().strip().splitlines()[-1].startswith("finished: accuracy=0.9700 global_step=100")


def test_describe_exit():
    assert L.describe_exit(0) == "exit code 0"
    assert L.describe_exit(-9) == "killed by SIGKILL"
    assert L.describe_exit(None) == "still running"


def test_each_task_gets_its_gpu_mask_and_log_level(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    monkeypatch.setenv("TF_CONFIG", "{}")
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    config = config_from_dict({
        "cluster": {"chief": ["localhost:1"], "worker": ["localhost:2", "localhost:3"], "evaluator": "localhost"},
        "tasks": {"worker": {"gpus": [2, 3]}, "worker:1": {"gpus": [1]}, "evaluator": {"gpus": []}},
        "session": {"log_device_placement": True},
    }, "cluster.yaml")
    launcher = L.Launcher(config, "cluster.yaml")
    env = {str(t): launcher.environment(t) for t in
           (TaskId("chief", 0), TaskId("worker", 0), TaskId("worker", 1), TaskId("evaluator", 0))}
    assert env["chief:0"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"  # no gpus: inherited
    assert env["worker:0"]["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert env["worker:1"]["CUDA_VISIBLE_DEVICES"] == "1"
    assert env["evaluator:0"]["CUDA_VISIBLE_DEVICES"] == "-1"  # [] hides every GPU
    assert all(e["TF_CPP_MIN_LOG_LEVEL"] == "0" for e in env.values())  # placement lines are INFO logs
    assert all("TF_CONFIG" not in e for e in env.values())
    quiet = L.Launcher(config_from_dict({"cluster": {"chief": ["localhost:1"]}}, "c.yaml"), "c.yaml")
    assert quiet.environment(TaskId("chief", 0))["TF_CPP_MIN_LOG_LEVEL"] == "1"

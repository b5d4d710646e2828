"""The launcher's supervision, with stand-in tasks (tests/fake_task.py) instead of TensorFlow."""

import io
import json
import re
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
HEALTHY = {"chief:0": "chief_ok", "worker:0": "worker_ok", "evaluator:0": "evaluator_ok"}


def make_config(tmp_path, launcher=None, evaluator=True, ports=(1, 2), restart=None):
    cluster = {"chief": [f"localhost:{ports[0]}"], "worker": [f"localhost:{ports[1]}"]}
    if evaluator:
        cluster["evaluator"] = "localhost"
    return config_from_dict({
        "cluster": cluster,
        "training": {"max_steps": 100, "save_checkpoints_steps": 50, "session_creation_timeout_secs": 2},
        "launcher": {"grace_secs": 1, "finish_timeout_secs": 2, "eval_timeout_secs": 20, "stall_timeout_secs": 30,
                     **(launcher or {})},
        "restart": restart or {"policy": "never"},
        "run_dir": str(tmp_path / "run"),
        "data_dir": str(tmp_path / "data"),
    }, str(tmp_path / "cluster.yaml"))


def mark_data_prepared(config):
    """What launch checks for, without preparing MNIST."""
    version_dir = Path(config.data_dir, "mnist", "3.0.1")
    version_dir.mkdir(parents=True)
    (version_dir / "dataset_info.json").write_text("{}")


def fake_commands(config, behaviours):
    ports = {TaskId(r, i): a.port for r, i, a in config.cluster.training_tasks()}

    def command_for(task: TaskId):
        return [sys.executable, FAKE, behaviours[str(task)], config.model_dir, str(config.training.max_steps),
                str(ports.get(task, 0))]
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
                 "no task made progress for 4 s (launcher.stall_timeout_secs + training.session_creation_timeout_secs, "
                 "while starting; last step: None)", id="stalled-cluster"),
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


@pytest.fixture
def held_port():
    """A loopback port that another process is listening on, as far as a new cluster is concerned."""
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def test_launch_refuses_a_busy_port_on_the_host_network(tmp_path, held_port):
    config = make_config(tmp_path, launcher={"network": "host"}, ports=(held_port, held_port ^ 1))
    mark_data_prepared(config)
    with pytest.raises(UsageError, match=rf"port {held_port} of task chief:0 .* is already in use"):
        L.launch(config, "cluster.yaml")
    assert not Path(config.run_dir, "logs").exists()


def test_a_private_network_does_not_collide_with_host_ports(tmp_path, held_port):
    config = make_config(tmp_path, launcher={"network": "private"}, ports=(held_port, held_port ^ 1))
    mark_data_prepared(config)
    out = io.StringIO()
    code = L.launch(config, "cluster.yaml", out=out, command_for=fake_commands(config, HEALTHY))
    assert code == 0, out.getvalue()
    assert L.netns.PROTECTED in out.getvalue()


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


ON_FAILURE = {"policy": "on_failure", "max_restarts": 2, "backoff_secs": 0}


def test_on_failure_restarts_the_training_group_and_finishes(tmp_path):
    config = make_config(tmp_path, restart=ON_FAILURE)
    code, out, summary, _, _ = run(config, {**HEALTHY, "chief:0": "chief_fails_once"})
    assert code == 0, out
    assert "restart 1/2: chief:0 exit code 3 at step 20; starting chief:0, worker:0 again from checkpoint None" in out
    [restart] = summary["restarts"]
    assert restart["failed_task"] == "chief:0" and restart["reason"] == "exit code 3"
    assert restart["restarted_tasks"] == ["chief:0", "worker:0"]  # the evaluator kept running
    assert restart["step_at_failure"] == 20 and restart["steps_redone"] == 20
    assert summary["status"] == "finished" and summary["global_step"] == 100
    assert len(summary["all_pids"]) == 5 and not pids_alive(summary["all_pids"])


def test_never_does_not_restart(tmp_path):
    config = make_config(tmp_path)
    code, out, summary, _, _ = run(config, {**HEALTHY, "chief:0": "chief_fails_once"})
    assert code == 1 and summary["restarts"] == []
    assert "failed: task chief:0 failed (exit code 3)" in out


def test_gives_up_after_max_restarts(tmp_path):
    config = make_config(tmp_path, restart=ON_FAILURE)
    code, out, summary, _, _ = run(config, {**HEALTHY, "worker:0": "fail_soon"})
    assert code == 1
    assert len(summary["restarts"]) == 2
    assert re.search(r"failed: task worker:0 failed \(exit code 3\).*; gave up after 2 restarts "
                     r"\(restart\.max_restarts=2\)", out), out
    assert not pids_alive(summary["all_pids"])


def test_a_stall_is_a_failure_that_restarts(tmp_path):
    config = make_config(tmp_path, restart=ON_FAILURE, launcher={"stall_timeout_secs": 3})
    code, out, summary, _, _ = run(config, {**HEALTHY, "chief:0": "chief_stalls_once"})
    assert code == 0, out
    [restart] = summary["restarts"]
    assert restart["failed_task"] is None and restart["reason"].startswith("stalled for 5 s")  # 3 + startup 2
    assert not pids_alive(summary["all_pids"])


def test_a_failed_evaluator_is_restarted_alone(tmp_path):
    config = make_config(tmp_path, restart=ON_FAILURE)
    code, out, summary, _, _ = run(config, {**HEALTHY, "evaluator:0": "evaluator_fails_once"})
    assert code == 0, out
    [restart] = summary["restarts"]
    assert restart["restarted_tasks"] == ["evaluator:0"] and restart["steps_redone"] == 0
    assert summary["accuracy"] == 0.97


def test_run_files_are_not_writable_by_other_users(tmp_path):
    config = make_config(tmp_path)
    code, *_ = run(config, HEALTHY)
    assert code == 0
    for path in (Path(config.run_dir), Path(config.model_dir), *Path(config.run_dir, "logs").rglob("*")):
        assert path.stat().st_mode & 0o022 == 0, path
    # Files the tasks write (checkpoints here) get the same protection.
    assert Path(config.model_dir, "checkpoint").stat().st_mode & 0o022 == 0


def test_task_ports_cannot_be_reached_from_outside_the_private_network(tmp_path):
    """The tasks' namespace has its own loopback: they reach each other, this process cannot reach them."""
    import socket
    import threading

    from conftest import free_ports

    port, other = free_ports(2)
    config = make_config(tmp_path, ports=(port, other), launcher={"network": "private"})
    mark_data_prepared(config)
    probes = {}

    def probe():
        listening = Path(config.model_dir, "listening")
        deadline = time.time() + 60
        while not listening.exists() and time.time() < deadline:
            time.sleep(0.1)
        probes["listening"] = listening.exists()
        try:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
            probes["outside"] = "connected"
        except OSError as exc:
            probes["outside"] = type(exc).__name__
        Path(config.model_dir, "release").touch()

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    out = io.StringIO()
    code = L.launch(config, "cluster.yaml", out=out,
                    command_for=fake_commands(config, {**HEALTHY, "chief:0": "chief_listens"}))
    thread.join(timeout=10)
    assert code == 0, out.getvalue()
    assert probes["listening"], "the task never listened (it checks loopback inside its namespace first)"
    assert probes["outside"] == "ConnectionRefusedError"
    assert L.netns.PROTECTED in out.getvalue()


def test_private_network_refuses_hosts_it_cannot_reach(tmp_path):
    config = config_from_dict({"cluster": {"chief": ["localhost:1"], "worker": ["10.0.0.7:2"]},
                               "launcher": {"network": "private"}}, "c.yaml")
    with pytest.raises(UsageError, match=r"^c\.yaml: launcher\.network is private but task worker:0 is on host "
                                         r"'10\.0\.0\.7', which a private namespace cannot reach"):
        L.netns.choose_network(config, "c.yaml")
    network, line = L.netns.choose_network(dict_config := config_from_dict(
        {"cluster": {"chief": ["localhost:1"], "worker": ["10.0.0.7:2"]}}, "c.yaml"), "c.yaml")
    assert network is None and line.startswith("network: WARNING: the tasks use this machine's network (some tasks "
                                                "use a non-loopback host name)")
    assert "ports 1, 2" in line and dict_config.launcher.network == "auto"

"""Real multi-process clusters on loopback, started through the same launcher as run_local.sh."""

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

import psutil

from estimator_mnist.tf_task import TF_PROCESS_MODULE
from tests.process_table import task_of_command
from tests.helpers import CLUSTER_YAML, REPO, descendants, pids_alive, start_launch, write_cluster



def task_pid(launcher_pid: int, task: str, tensorflow: bool = False):
    """The task's process as the launcher started it (`train`'s parent), or its TensorFlow child."""
    for pid in descendants(launcher_pid):
        try:
            process = psutil.Process(pid)
            if task_of_command(process.cmdline()) != task:
                continue
            if not tensorflow:
                return pid
            children = [c.pid for c in process.children() if TF_PROCESS_MODULE in c.cmdline()]
            return children[0] if children else None
        except psutil.Error:
            continue
    return None


def launch_and_kill_when(tmp_path, template, log_pattern, task="worker:1", sig=signal.SIGKILL, ports=2,
                         tensorflow=False, **fields):
    """Starts a launch, sends `sig` to `task` once worker 0's log matches `log_pattern`; (proc, killed_at, pids)."""
    for _ in range(3):
        proc = start_launch(write_cluster(tmp_path, template, ports, **fields))
        deadline = time.time() + 300
        victim = None
        while time.time() < deadline and proc.poll() is None and victim is None:
            logs = list((tmp_path / "run" / "logs").glob("*/worker-0.log"))
            if logs and re.search(log_pattern, logs[0].read_text(errors="replace")):
                victim = task_pid(proc.pid, task, tensorflow)
            time.sleep(0.5)
        if proc.poll() == 2:
            continue  # a port was taken between choosing and binding: try new ones
        if victim is None:
            proc.send_signal(signal.SIGINT)
            pytest.fail(f"{task} never reached {log_pattern!r}: {proc.communicate(timeout=120)[0][-3000:]}")
        everyone = descendants(proc.pid)
        os.kill(victim, sig)
        return proc, time.monotonic(), everyone
    pytest.fail("no free ports after 3 attempts")


def test_killing_a_worker_stops_the_whole_run(tmp_path, mnist_data_dir):
    proc, killed_at, everyone = launch_and_kill_when(tmp_path, CLUSTER_YAML, r"step = [1-9]\d*", steps=100000,
                                                     save=1000, data_dir=mnist_data_dir)
    out, _ = proc.communicate(timeout=120)
    elapsed = time.monotonic() - killed_at
    assert proc.returncode not in (0, None), out
    assert "failed: task worker:1 failed (killed by SIGKILL)" in out
    assert elapsed < 60, f"launcher took {elapsed:.0f} s to give up"
    assert not pids_alive(everyone)


def test_on_failure_restarts_from_the_checkpoint_and_finishes(tmp_path, mnist_data_dir):
    """The chief (worker 0) is SIGKILLed while it saves a checkpoint; the group restarts and finishes."""
    template = CLUSTER_YAML + "restart: {{policy: on_failure, max_restarts: 2, backoff_secs: 1}}\n"
    proc, _, _ = launch_and_kill_when(tmp_path, template, r"Saving checkpoints for 40 ", task="worker:0", steps=80,
                                      save=40, data_dir=mnist_data_dir)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    assert re.search(r"finished: accuracy=[\d.]+ global_step=80 ", out), out
    summary = json.loads((tmp_path / "run" / "run_summary.json").read_text())
    [restart] = summary["restarts"]
    assert restart["failed_task"] == "worker:0" and restart["reason"] == "killed by SIGKILL"
    # Killed mid-save: the restart restores the last complete checkpoint (step 0 or 40), never a torn one.
    assert restart["restored_checkpoint_step"] in (0, 40)
    assert restart["restarted_tasks"] == ["worker:0", "worker:1"]
    assert "restart 1/2: worker:0 killed by SIGKILL" in out
    # The restarted chief resumed: its log says it restored the checkpoint instead of starting over.
    chief_log = Path(summary["tasks"]["worker:0"]["log"]).read_text(errors="replace")
    assert re.search(r"Restoring parameters from .*model\.ckpt-(\d+)", chief_log), chief_log[-2000:]
    assert not pids_alive(summary["all_pids"])


def test_a_peer_that_never_starts_is_named_within_the_timeout(tmp_path, mnist_data_dir):
    """Only worker:0 of a two-worker cluster starts: it gives up after session_creation_timeout_secs."""
    import subprocess
    import sys

    template = CLUSTER_YAML.replace("log_step_count_steps: 10}}", "log_step_count_steps: 10, "
                                    "session_creation_timeout_secs: 10}}")
    path = write_cluster(tmp_path, template, 2, steps=50, save=50, data_dir=mnist_data_dir)
    missing = re.search(r'"localhost:\d+", "(localhost:\d+)"', path.read_text())[1]
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "estimator_mnist", "train", "--cluster", str(path),
                             "--task", "worker:0"], cwd=REPO, capture_output=True, text=True, timeout=300)
    elapsed = time.monotonic() - started
    assert result.returncode == 200  # retryable, never a SIGKILL seen from outside
    assert (f"task worker:0: no training session after training.session_creation_timeout_secs=10 s: these peers "
            f"do not answer: worker:1 ({missing})") in result.stderr
    assert elapsed < 10 + 60


PS_CLUSTER_YAML = """
cluster:
  worker: ["localhost:{p0}", "localhost:{p1}"]
  ps: ["localhost:{p2}"]
strategy: parameter_server
training: {{batch_size_per_replica: 64, max_steps: {steps}, save_checkpoints_steps: {save}, log_step_count_steps: 10}}
launcher: {{grace_secs: 5, stall_timeout_secs: 120}}
restart: {{policy: on_failure, max_restarts: 2, backoff_secs: 1}}
run_dir: {run_dir}
data_dir: {data_dir}
"""


def test_on_failure_survives_the_loss_of_the_parameter_server(tmp_path, mnist_data_dir):
    """The ps holds every variable: after its SIGKILL the group restarts and the chief restores them."""
    proc, _, _ = launch_and_kill_when(tmp_path, PS_CLUSTER_YAML, r"Saving checkpoints for [1-9]\d* ", task="ps:0", ports=3,
                                      steps=120, save=50, data_dir=mnist_data_dir)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    summary = json.loads((tmp_path / "run" / "run_summary.json").read_text())
    [restart] = summary["restarts"]
    assert restart["failed_task"] == "ps:0" and restart["reason"] == "killed by SIGKILL"
    assert restart["restarted_tasks"] == ["ps:0", "worker:0", "worker:1"]
    assert 120 <= summary["global_step"] <= 122  # asynchronous: each worker may finish one more step
    assert not pids_alive(summary["all_pids"])


def test_a_stopped_worker_is_a_stall_that_restarts(tmp_path, mnist_data_dir):
    """SIGSTOP leaves worker:1 alive but silent; the all-reduce stalls, and the launcher restarts the group."""
    template = CLUSTER_YAML.replace("stall_timeout_secs: 300", "stall_timeout_secs: 15") + \
        "restart: {{policy: on_failure, max_restarts: 2, backoff_secs: 1}}\n"
    proc, _, _ = launch_and_kill_when(tmp_path, template, r"Saving checkpoints for 40 ", sig=signal.SIGSTOP,
                                      tensorflow=True, steps=80, save=40, data_dir=mnist_data_dir)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    summary = json.loads((tmp_path / "run" / "run_summary.json").read_text())
    assert len(summary["restarts"]) == 1, summary["restarts"]
    [restart] = summary["restarts"]
    # Named, not its peers, by the launcher alone (a stall naming it, or a task stopped for stall_timeout_secs):
    # under launch the task's own parent leaves a stopped process to it (config/timeouts.py).
    assert restart["failed_task"] == "worker:1", out
    assert "stopped by a signal" in restart["reason"], restart
    own_log = "".join(p.read_text(errors="replace") for p in (tmp_path / "run" / "logs").glob("*/worker-1.log"))
    assert "task worker:1: its TensorFlow process" not in own_log, own_log[-2000:]
    assert summary["global_step"] == 80
    assert not pids_alive(summary["all_pids"])

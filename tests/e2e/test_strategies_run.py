"""Each strategy as a real multi-process run on loopback, asserting what makes that strategy itself.

Short runs (tens of steps): they check behaviour, not accuracy or speed.
"""

import re
from pathlib import Path


from estimator_mnist.model_files.progress import read_progress
from tests.helpers import launch_cluster, pids_alive

COMMON = """
training: {{batch_size_per_replica: 32, max_steps: {steps}, save_checkpoints_steps: {steps}, log_step_count_steps: 10}}
evaluation: {{throttle_secs: 0, start_delay_secs: 0, batch_size: 2000}}
launcher: {{grace_secs: 5, stall_timeout_secs: 300, finish_timeout_secs: 60}}
run_dir: {run_dir}
data_dir: {data_dir}
"""

PS_ASYNC = """
cluster:
  chief: ["localhost:{p0}"]
  worker: ["localhost:{p1}"]
  ps: ["localhost:{p2}"]
  evaluator: localhost
strategy: parameter_server
session: {{log_device_placement: true}}
tasks:
  worker:0: {{step_delay_ms: 100}}   # slower than the chief
""" + COMMON

PS_SYNC = """
cluster:
  chief: ["localhost:{p0}"]
  worker: ["localhost:{p1}", "localhost:{p2}"]
  ps: ["localhost:{p3}"]
strategy: {{name: parameter_server_sync, replicas_to_aggregate: 2}}
tasks:
  # Estimator starts worker i 5*(i+1) s late: the others are slowed a little so
  # that training is still on when the straggler joins.
  chief: {{step_delay_ms: 150}}
  worker:0: {{step_delay_ms: 150}}
  worker:1: {{step_delay_ms: 2000}}  # the straggler that backup workers leave behind
""" + COMMON

MIRRORED = """
cluster:
  chief: ["localhost:{p0}"]
  evaluator: localhost
strategy: {{name: mirrored, devices: ["/cpu:0", "/cpu:1"]}}
""" + COMMON

ONE_DEVICE = """
cluster:
  chief: ["localhost:{p0}"]
strategy: one_device
""" + COMMON

_LOCAL_STEPS = re.compile(r"task (?P<task>\S+) ran (?P<local>\d+) local steps; global_step (?P<global>\d+)")


def task_log(summary, task: str) -> str:
    return Path(summary["tasks"][task]["log"]).read_text(errors="replace")


def local_steps(summary, task: str) -> int:
    """The task's own steps, from its final progress record; its log says the same in words."""
    record = read_progress(summary["run_dir"])[task]
    assert record["done"] and _LOCAL_STEPS.search(task_log(summary, task)), task_log(summary, task)[-3000:]
    return record["local_step"]


def assert_clean_finish(code, out, summary, steps, overshoot=0):
    """`overshoot`: asynchronous workers each finish the step they are in after max_steps."""
    assert code == 0, out
    assert summary["status"] == "finished" and steps <= summary["global_step"] <= steps + overshoot, out
    assert not pids_alive([t["pid"] for t in summary["tasks"].values()])


def test_parameter_server_async(tmp_path, mnist_data_dir):
    steps = 150
    code, out, summary = launch_cluster(tmp_path, PS_ASYNC, 3, steps=steps, data_dir=mnist_data_dir)
    assert_clean_finish(code, out, summary, steps, overshoot=2)
    # The ps task learnt from the trainers and the evaluator that the run was over, and exited 0 by itself.
    assert summary["tasks"]["ps:0"]["exit"] == 0 and summary["tasks"]["ps:0"]["stopped_by_launcher"] is False
    assert "every trainer and the evaluator finished" in task_log(summary, "ps:0")

    worker_log = task_log(summary, "worker:0")
    # TensorFlow's own placement log (log_device_placement) and the variable list both say /job:ps.
    assert re.search(r"placer\.cc.*\] classic_cnn/dense/kernel: \(VarHandleOp\): /job:ps/replica:0/task:0/", worker_log)
    assert "variable classic_cnn/dense/kernel placed on /job:ps/task:0" in worker_log

    # Asynchronous: every step of either worker advances the shared global step,
    # and the slower worker simply contributes fewer of them.
    chief, worker = local_steps(summary, "chief:0"), local_steps(summary, "worker:0")
    assert worker >= 1, "the worker never trained"
    assert worker < chief
    assert steps <= chief + worker <= steps + 2


def test_parameter_server_sync_with_a_backup_worker(tmp_path, mnist_data_dir):
    steps = 100
    code, out, summary = launch_cluster(tmp_path, PS_SYNC, 4, steps=steps, data_dir=mnist_data_dir)
    assert_clean_finish(code, out, summary, steps)
    assert "replicas_to_aggregate=2 of 3" in task_log(summary, "chief:0")
    done = {task: local_steps(summary, task) for task in ("chief:0", "worker:0", "worker:1")}
    # Synchronous: each global step averaged 2 gradients, so the replicas'
    # own steps add up to at least twice the global step (async: about once).
    assert sum(done.values()) >= 2 * steps - 2, done
    # The straggler's gradients were not waited for: it did a fraction of the steps.
    assert 0 < done["worker:1"] < steps / 2, done
    # Every trainer told the ps it finished, the straggler too when the teardown watchdog ended it blocked in its
    # last step's token queue: the ps exited by itself, not after launch's finish timeout (60 s).
    assert summary["tasks"]["ps:0"]["exit"] == 0 and summary["tasks"]["ps:0"]["stopped_by_launcher"] is False, out
    assert "every trainer finished" in task_log(summary, "ps:0")


def test_mirrored_replicates_over_two_devices(tmp_path, mnist_data_dir):
    steps = 40
    code, out, summary = launch_cluster(tmp_path, MIRRORED, 1, steps=steps, data_dir=mnist_data_dir)
    assert_clean_finish(code, out, summary, steps)
    chief_log = task_log(summary, "chief:0")
    assert "strategy=mirrored (MirroredStrategyV1) gradient_compression=none replicas_in_sync=2" in chief_log
    assert "devices=[/device:CPU:0, /device:CPU:1]" in chief_log
    assert summary["accuracy"] is not None and summary["evaluations"][-1]["global_step"] == steps


def test_one_device_trains_and_evaluates_in_one_process(tmp_path, mnist_data_dir):
    steps = 40
    code, out, summary = launch_cluster(tmp_path, ONE_DEVICE, 1, steps=steps, data_dir=mnist_data_dir)
    assert_clean_finish(code, out, summary, steps)
    assert list(summary["tasks"]) == ["chief:0"]
    assert "strategy=one_device (OneDeviceStrategyV1) replicas_in_sync=1" in task_log(summary, "chief:0")
    # No evaluator task: the training process evaluated and exported the final checkpoint itself.
    assert summary["accuracy"] > 0.3 and summary["export"]
    assert re.search(r"finished: accuracy=[\d.]+ global_step=40 export=\S+", out)

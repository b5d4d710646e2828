"""The restart budget under Kubeflow's TF_CONFIG, with the pod re-created after every exit as training-operator
v1.9 does under restartPolicy ExitCode (a fresh `train` each time, nothing kept but model_dir; the chief, the
writer of the record, is the pod). restart.max_restarts: 2. Three preemptions (SIGTERM, each after some
progress; one more than the budget) never count: the job trains on. Then a fault that repeats without progress (the pod killed as soon
as it starts) ends with exit 1 once two restarts in a row were spent, in one line naming the job and the
incidents. About a minute: one TensorFlow start per preemption; the killed starts never import it."""

import json
import os
import signal
import time
import uuid

import pytest

from estimator_mnist.model_files.checkpoints import latest_step
from estimator_mnist.model_files.progress import read_progress
from estimator_mnist.model_files.layout import BUDGET_FILE
from tests.e2e.simulated_hosts import require_namespaces
from tests.e2e.simulated_pods import SimulatedPods

JOB_YAML = """
training: {{batch_size_per_replica: 32, max_steps: 100000, save_checkpoints_steps: 100000, log_step_count_steps: 5,
           preemption_grace_secs: 20, teardown_timeout_secs: 1}}
evaluation: {{throttle_secs: 100000, start_delay_secs: 100000}}
tasks: {{all: {{step_delay_ms: 30}}}}
restart: {{max_restarts: 2}}
data_dir: {data_dir}
"""
WAIT_SECS = 180


@pytest.fixture
def pod(tmp_path, mnist_data_dir):
    require_namespaces()
    pods = SimulatedPods(uuid.uuid4().hex[:6], {"Chief": 1})
    yaml_file = tmp_path / "job.yaml"
    yaml_file.write_text(JOB_YAML.format(data_dir=mnist_data_dir))
    args = ["train", "--cluster", str(yaml_file), "--model-dir", str(tmp_path / "volume" / "model"),
            "--run-dir", str(tmp_path / "volume" / "run")]
    starts = []

    def start():
        log = tmp_path / f"chief-{len(starts)}.log"
        starts.append(log)
        return pods.start("chief", 0, args, log), log

    yield start
    pods.close()


def wait_until(predicate, what, log):
    deadline = time.monotonic() + WAIT_SECS
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    pytest.fail(f"{what} did not happen within {WAIT_SECS} s:\n{log.read_text()[-4000:]}")


def trained_past(run_dir, step):
    records = read_progress(str(run_dir)).values()
    return any((r.get("global_step") or 0) >= step for r in records)


def test_preemptions_never_count_and_a_crash_loop_ends_after_the_budget(pod, tmp_path):
    model_dir, run_dir = tmp_path / "volume" / "model", tmp_path / "volume" / "run"
    stops = []
    for number in range(1, 4):
        proc, log = pod()
        since = stops[-1] if stops else 0
        wait_until(lambda: trained_past(run_dir, since + 5), f"start {number}: progress past step {since + 5}", log)
        proc.send_signal(signal.SIGTERM)  # the kubelet's SIGTERM to the container's first process
        assert proc.wait(timeout=60) == 200, log.read_text()[-4000:]
        stops.append(latest_step(str(model_dir)))
        assert stops[-1] > since, (stops, log.read_text()[-4000:])
        if number > 1:
            assert f"resumes after preemption {number - 1} (preempted at step {since}: not counted)" in log.read_text()
    record = json.loads((model_dir / BUDGET_FILE).read_text())
    assert len(record["preemptions"]) == 2 and record["incidents"] == []  # the third is taken at the next start

    lines = []
    for number in range(3):  # the fault: each start dies before it trains (as a node killing the pod would)
        proc, log = pod()
        expected = "resumes after preemption 3" if number == 0 else f"restart {number}/2 of job tfjob-default-mnist"
        wait_until(lambda: expected in log.read_text(), f"the crash loop's start {number}", log)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    proc, log = pod()
    assert proc.wait(timeout=60) == 1, log.read_text()[-4000:]
    lines = [line for line in log.read_text().splitlines() if "restart budget used up" in line]
    assert len(lines) == 1 and "job tfjob-default-mnist failed 3 times in a row without a newer checkpoint " \
        "(restart.max_restarts=2)" in lines[0], log.read_text()[-4000:]
    record = json.loads((model_dir / BUDGET_FILE).read_text())
    assert len(record["preemptions"]) == 3 and [i["in_a_row"] for i in record["incidents"]] == [1, 2, 3]
    assert [p["step"] for p in record["preemptions"]] == stops

"""train in the pods of a TFJob: TF_CONFIG exactly as Kubeflow's training-operator v1.9 writes it (every replica
type in the cluster, the evaluator included, lower-cased, `<job>-<type>-<index>.<ns>.svc:<port>`,
"environment": "cloud"), and a one-replica job, which gets no TF_CONFIG at all. Each job trains a few steps,
evaluates the final checkpoint, and every task exits 0 by itself."""

import os
import subprocess
import sys
import time
import uuid

import pytest

from estimator_mnist.model_files.checkpoints import read_eval_results
from tests.e2e.simulated_hosts import require_namespaces
from tests.e2e.simulated_pods import SimulatedPods
from tests.helpers import REPO

STEPS = 20
JOB_YAML = """
strategy: {strategy}
training: {{batch_size_per_replica: 32, max_steps: {steps}, save_checkpoints_steps: 10, log_step_count_steps: 10}}
evaluation: {{throttle_secs: 0, start_delay_secs: 0}}
data_dir: {data_dir}
"""


@pytest.fixture
def pods_factory():
    require_namespaces()
    made = []

    def make(replicas):
        made.append(SimulatedPods(uuid.uuid4().hex[:6], replicas))
        return made[-1]

    yield make
    for pods in made:
        pods.close()


def run_job(pods, tmp_path, strategy, data_dir, timeout=300):
    yaml_file = tmp_path / "job.yaml"
    yaml_file.write_text(JOB_YAML.format(strategy=strategy, steps=STEPS, data_dir=data_dir))
    shared = ["--model-dir", str(tmp_path / "volume" / "model"), "--run-dir", str(tmp_path / "volume" / "run")]
    procs = {f"{kind}:{index}": pods.start(kind, index, ["train", "--cluster", str(yaml_file), *shared],
                                           tmp_path / f"{kind}-{index}.log")
             for kind, index in pods.tasks()}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(p.poll() is None for p in procs.values()):
        time.sleep(0.5)
    logs = "\n".join(f"--- {name}\n" + (tmp_path / f"{name.replace(':', '-')}.log").read_text()[-3000:]
                     for name in procs)
    assert all(p.poll() is not None for p in procs.values()), f"a task did not exit by itself:\n{logs}"
    assert {name: p.returncode for name, p in procs.items()} == {name: 0 for name in procs}, logs
    return read_eval_results(str(tmp_path / "volume" / "model")), logs


@pytest.mark.parametrize("replicas, strategy", [
    ({"Chief": 1, "Worker": 1, "Evaluator": 1}, "multi_worker_mirrored"),
    ({"Worker": 2, "Evaluator": 1}, "multi_worker_mirrored"),
    ({"Chief": 1, "Worker": 1, "PS": 1, "Evaluator": 1}, "parameter_server"),
], ids=["chief-worker-evaluator", "workers-evaluator", "chief-worker-ps-evaluator"])
def test_a_tfjob_s_pods_train_evaluate_and_all_exit_by_themselves(pods_factory, tmp_path, mnist_data_dir,
                                                                   replicas, strategy):
    evaluations, logs = run_job(pods_factory(replicas), tmp_path, strategy, mnist_data_dir)
    assert evaluations and evaluations[-1]["global_step"] >= STEPS and evaluations[-1]["final"], logs
    assert evaluations[-1]["export"]
    # The evaluator's presence reached every task: the chief waited for the final evaluation.
    assert "waiting up to" in logs and "final evaluation: step" in logs


def test_a_one_replica_job_without_tf_config_trains_evaluates_and_exports(tmp_path, mnist_data_dir):
    yaml_file = tmp_path / "job.yaml"
    yaml_file.write_text(JOB_YAML.format(strategy="multi_worker_mirrored", steps=STEPS, data_dir=mnist_data_dir)
                         + "cluster: {chief: ['localhost:2222']}\n")
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    proc = subprocess.run([sys.executable, "-m", "estimator_mnist", "train", "--cluster", str(yaml_file),
                           "--model-dir", str(tmp_path / "model"), "--run-dir", str(tmp_path / "run")],
                          capture_output=True, text=True, env=env, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "a single-process job (strategy one_device" in proc.stderr
    evaluations = read_eval_results(str(tmp_path / "model"))
    assert evaluations and evaluations[-1]["global_step"] == STEPS and evaluations[-1]["export"]

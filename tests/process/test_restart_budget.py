"""Pods re-created after every failure, as Kubeflow's training-operator does under restartPolicy: ExitCode: a fresh
`train` process each time with the operator's TF_CONFIG, nothing kept but model_dir. A fault that keeps coming back
(here: a worker that never comes, so the session never forms) must end with exit 1 once restart.max_restarts
incidents are used up, instead of restarting for ever, also when the record is torn between two starts."""

import json
import os
import subprocess
import sys
from estimator_mnist.model_files.layout import BUDGET_FILE

from tests.helpers import REPO, free_ports

YAML = """
training: {{session_creation_timeout_secs: 2, max_steps: 20, save_checkpoints_steps: 10}}
restart: {{max_restarts: 2}}
model_dir: {root}/model
run_dir: {root}/run
"""


def test_a_fault_that_repeats_under_the_operator_ends_with_exit_1_after_the_budget(tmp_path):
    chief, worker = free_ports(2)
    tf_config = {"cluster": {"chief": [f"mnist-chief-0.default.svc:{chief}"],
                             "worker": [f"mnist-worker-0.default.svc:{worker}"]},
                 "task": {"type": "chief", "index": 0}, "environment": "cloud"}
    path = tmp_path / "cluster.yaml"
    path.write_text(YAML.format(root=tmp_path), encoding="utf-8")
    env = {**os.environ, "TF_CONFIG": json.dumps(tf_config)}
    codes, last, outputs = [], None, []
    record_path = tmp_path / "model" / BUDGET_FILE
    for start in range(4):  # the first start, two restarts within the budget, then one past it
        if start == 2:  # the record torn between two starts of the loop: its copy keeps the count
            record_path.write_bytes(b'{"job": "tfjob-default-mnist", "sta')
        last = subprocess.run([sys.executable, "-m", "estimator_mnist", "train", "--cluster", str(path)], cwd=REPO,
                              env=env, capture_output=True, text=True, timeout=120)
        codes.append(last.returncode)
        outputs.append(last.stderr)
    assert codes == [200, 200, 200, 1], last.stderr[-3000:]  # no later than with an intact record
    kept = [line for line in outputs[2].splitlines() if "is unreadable" in line]
    assert len(kept) == 1 and f"the restart budget's record {record_path} is unreadable" in kept[0], outputs[2]
    [aside] = list((tmp_path / "model").glob(BUDGET_FILE + ".unreadable-*"))
    assert aside.read_bytes() == b'{"job": "tfjob-default-mnist", "sta' and aside.name in kept[0]
    refusal = [line for line in last.stderr.splitlines() if "restart budget used up" in line]
    assert len(refusal) == 1 and "job tfjob-default-mnist failed 3 times in a row without a newer checkpoint (restart.max_restarts=2)" \
        in refusal[0], last.stderr
    record = json.loads((tmp_path / "model" / BUDGET_FILE).read_text())
    assert record["starts"] == 4 and len(record["incidents"]) == 3

    # The same job resubmitted (a new ESTIMATOR_MNIST_JOB_ID, as `tfjob` renders it) starts with a fresh budget.
    again = subprocess.run([sys.executable, "-m", "estimator_mnist", "train", "--cluster", str(path)], cwd=REPO,
                           env={**env, "ESTIMATOR_MNIST_JOB_ID": "default/mnist/2"}, capture_output=True, text=True,
                           timeout=120)
    assert again.returncode == 200, again.stderr[-3000:]

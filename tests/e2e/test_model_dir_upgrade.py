"""A model_dir written by an earlier version of the product resumes under this one, on a disk and on a bucket of
the GCS API server (tests/gcs_server.py): model_files/layout.py is where this version looks for what that one wrote.

OLD is the last commit before model_files took over the layout. Its package is taken from git (`git archive`)
and run from a folder of its own, the current one never on its path. As a TFJob's pod would (the operator's
TF_CONFIG and the job's identity, so the restart budget counts), the old version trains to step 10 (evaluates and
exports), then, as the next job, to step 40 and is preempted (SIGTERM) past step 20: checkpoints and their state,
evaluations, an export, the restart budget and its last good copy, a preemption's mark, progress records. Then
this version trains that job on to step 40 in the same model_dir: it resumes from the stop step, takes the old
mark as a preemption (not a failure), goes on with the old count, finds both exports, and adds no name the old
version did not write.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
import uuid

import pytest

from estimator_mnist import storage
from estimator_mnist.model_files import layout
from estimator_mnist.model_files.checkpoints import latest_step, read_eval_results
from estimator_mnist.model_files.progress import read_progress
from estimator_mnist.model_files.exports import candidates
from estimator_mnist.storage.lock import SCHEME_FILE
from estimator_mnist.tf_model.predict import find_export
from tests.helpers import REPO, free_ports

OLD = "a0a80d8"
JOB_ID = "ESTIMATOR_MNIST_JOB_ID"  # as `tfjob` sets it in every pod: starts are counted
YAML = """
strategy: one_device
training: {{batch_size_per_replica: 32, max_steps: {steps}, save_checkpoints_steps: 10, preemption_grace_secs: 25}}
evaluation: {{throttle_secs: 600, exports_to_keep: 20}}
tasks: {{all: {{step_delay_ms: {delay}}}}}
data_dir: {data_dir}
"""
FIRST, STOP_AFTER, STEPS = 10, 20, 40  # the old version's first job, its second's stop, that job's end


@pytest.fixture(scope="module")
def old_package(tmp_path_factory):
    """The package of OLD, unpacked from git; a shallow clone fetches that commit from its origin first."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", OLD, "estimator_mnist"],
                             capture_output=True, timeout=60)
    if archive.returncode != 0:
        subprocess.run(["git", "-C", str(REPO), "fetch", "--quiet", "--unshallow"], capture_output=True, timeout=300)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", OLD, "estimator_mnist"],
                                 capture_output=True, timeout=60)
    if archive.returncode != 0:
        message = f"git cannot give commit {OLD} ({archive.stderr.decode(errors='replace').strip()}): clone in full"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    root = tmp_path_factory.mktemp("old-version")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(root)
    assert not (root / "estimator_mnist" / "model_files").exists()  # truly the version before
    return root


class Runs:
    def __init__(self, tmp_path, model_dir, data_dir, env):
        self.tmp, self.model_dir, self.data_dir, self.env, self.count = tmp_path, model_dir, data_dir, env, 0

    def start(self, code_root, job, steps, delay=0):
        """`train` of the chief of `job` from `code_root` (the old version's folder, or the repository), as the
        operator starts a pod, in a new run_dir."""
        self.count += 1
        yaml_file = self.tmp / f"run-{self.count}.yaml"
        yaml_file.write_text(YAML.format(steps=steps, delay=delay, data_dir=self.data_dir))
        log = open(self.tmp / f"run-{self.count}.log", "wb")
        tf_config = {"cluster": {"chief": [f"localhost:{free_ports(1)[0]}"]}, "task": {"type": "chief", "index": 0}}
        env = {**self.env, JOB_ID: job, "TF_CONFIG": json.dumps(tf_config), "PYTHONPATH": str(code_root)}
        return subprocess.Popen([sys.executable, "-m", "estimator_mnist", "train", "--cluster", str(yaml_file),
                                 "--model-dir", self.model_dir, "--run-dir", str(self.tmp / f"run-{self.count}")],
                                cwd=code_root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def log(self, number=None):
        return (self.tmp / f"run-{number or self.count}.log").read_text(errors="replace")

    def records_dir(self):
        return self.model_dir if storage.is_bucket(self.model_dir) else str(self.tmp / f"run-{self.count}")


def _finish(runs, proc, timeout=300):
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"run {runs.count} did not end within {timeout} s:\n{runs.log()[-3000:]}")


def _names(model_dir):
    """The kinds of names in model_dir, their numbers made '#'."""
    return {re.sub(r"\d+", "#", name) for name in storage.listdir(model_dir)}


@pytest.mark.parametrize("where", ["disk", "bucket"])
def test_a_model_dir_written_by_the_previous_version_resumes(where, old_package, mnist_data_dir, tmp_path,
                                                             request, monkeypatch):
    env = dict(os.environ)
    if where == "bucket":
        gcs_server = request.getfixturevalue("gcs_server")
        model_dir = f"gs://{gcs_server.create_bucket()}/upgrade-{uuid.uuid4().hex[:6]}"
        env.update(gcs_server.env())
        for key, value in gcs_server.env().items():
            monkeypatch.setenv(key, value)  # this process reads the bucket too
    else:
        model_dir = str(tmp_path / "model")
    runs = Runs(tmp_path, model_dir, mnist_data_dir, env)
    assert _finish(runs, runs.start(old_package, "upgrade/first", FIRST)) == 0, runs.log()
    old_export = find_export(model_dir)
    proc = runs.start(old_package, "upgrade/second", STEPS, delay=150)
    deadline = time.monotonic() + 240
    while ((read_progress(runs.records_dir()).get("chief:0") or {}).get("global_step") or 0) < STOP_AFTER:
        assert proc.poll() is None and time.monotonic() < deadline, runs.log()
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)  # the kubelet's: the pod's node is taken away
    assert _finish(runs, proc) == 200, runs.log()
    stopped = latest_step(model_dir)
    assert STOP_AFTER <= stopped < STEPS and storage.exists(layout.mark_file(model_dir)), runs.log()
    written_by_old = _names(model_dir)

    assert _finish(runs, runs.start(REPO, "upgrade/second", STEPS)) == 0, runs.log()
    log = runs.log()
    assert f"job upgrade/second resumes after preemption 1 (preempted at step {stopped}: not counted)" in log, log
    progress = read_progress(runs.records_dir())["chief:0"]
    assert progress["global_step"] == STEPS and progress["local_step"] == STEPS - stopped, progress  # resumed
    budget = storage.read_json(layout.budget_file(model_dir))
    assert budget["job"] == "upgrade/second" and budget["starts"] == 2 and budget["incidents"] == [] \
        and len(budget["preemptions"]) == 1, budget
    assert not storage.exists(layout.mark_file(model_dir))  # taken
    steps = [r["global_step"] for r in read_eval_results(model_dir)]
    assert FIRST in steps and steps[-1] == STEPS, steps  # the old version's evaluations, then this one's
    assert old_export in candidates(model_dir) and find_export(model_dir) > old_export
    # One name is new by design: the lock's scheme record, which a directory made before it gets from its first
    # holder after it (storage/lock.py); a bucket keeps none.
    written = {name for name in _names(model_dir) if not name.startswith(SCHEME_FILE)}
    assert written == written_by_old - {layout.MARK_FILE}, (written_by_old, _names(model_dir))

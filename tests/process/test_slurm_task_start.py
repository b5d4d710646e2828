"""A task of an srun step asked to stop (SIGTERM: a preemption, a cancel) while it waits for its peers' ports,
before train's parent takes its signals: it says so in model_dir as the parent would (200) and, under the batch
script, exits 0 to srun, so that srun ends no peer and the batch script counts no incident
(supervise/slurm_task_end.py)."""

import os
import signal
import subprocess
import sys
import time

from estimator_mnist.model_files import slurm_records
from estimator_mnist.supervise.slurm_task_end import END_KIND, failed_by_itself
from tests.helpers import REPO

STEP = {"SLURM_STEP_NODELIST": "localhost", "SLURM_STEP_TASKS_PER_NODE": "3", "SLURM_PROCID": "0",
        "SLURMD_NODENAME": "localhost", "SLURM_JOB_ID": "31", "SLURM_STEP_ID": "0",
        "ESTIMATOR_MNIST_SLURM_ATTEMPT": "0.0", "SLURM_STEP_NUM_TASKS": "3"}


def stopped_while_waiting(tmp_path, command):
    """`command` (train's, as srun starts it) signalled once it published its port; (exit code, stderr)."""
    model_dir = tmp_path / "model"
    proc = subprocess.Popen([sys.executable, "-m", *command, "train", "--cluster", "config/local.yaml",
                             "--model-dir", str(model_dir), "--run-dir", str(tmp_path / "run")],
                            cwd=REPO, env={**os.environ, **STEP}, stderr=subprocess.PIPE, text=True)
    try:
        port = slurm_records.record_path(str(model_dir), "31", "port", 0)
        deadline = time.monotonic() + 60
        while not os.path.exists(port) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)  # its own port published: it waits
        if proc.poll() is None:  # (ended already: its code and stderr say why)
            assert os.path.exists(port), "the chief never published its port"
            proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err


def test_a_sigterm_while_the_task_waits_for_its_peers_ports_is_a_stop_not_a_failure(tmp_path):
    code, err = stopped_while_waiting(tmp_path, ["estimator_mnist"])
    assert code == 0, err
    assert "task chief:0: asked to stop (SIGTERM) before it started: exit 200" in err, err
    assert "task chief:0: exits 0 to srun; its code 200 (asked to stop) is in its record" in err, err
    record = slurm_records.read_published(str(tmp_path / "model"), "31", END_KIND, 0)
    assert record["signal"] == "SIGTERM" and record["code"] == 200, record
    assert failed_by_itself(record, "attempt 0.0") is None


def test_a_sigterm_inside_the_first_import_of_yaml_is_a_stop_too(tmp_path):
    """tests/process/stop_inside_import.py signals train as its import of yaml (if it comes while the stop raises)
    imports yaml.cyaml: the stop's own config load met a half-imported yaml and exited 1."""
    code, err = stopped_while_waiting(tmp_path, ["tests.process.stop_inside_import"])
    assert code == 0 and "AttributeError" not in err, err
    assert "task chief:0: asked to stop (SIGTERM) before it started: exit 200" in err, err

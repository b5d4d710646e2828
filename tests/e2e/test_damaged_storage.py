"""Damaged storage on a real cluster: a truncated newest checkpoint between a kill and a restart."""

import json
import os
import re
import signal
import time
from pathlib import Path

from estimator_mnist import checkpoints
from tests.e2e.test_cluster_run import task_pid
from tests.helpers import CLUSTER_YAML, launch_cluster, pids_alive, start_launch, write_cluster


def _kill_the_chief_once_a_checkpoint_is_listed(tmp_path, model_dir: Path, step: int, **fields):
    """A launch of the two-worker cluster whose chief's TensorFlow process is SIGKILLed at checkpoint `step`."""
    proc = start_launch(write_cluster(tmp_path, CLUSTER_YAML, 2, **fields))
    deadline = time.time() + 300
    while proc.poll() is None and time.time() < deadline:
        if (checkpoints.latest_step(str(model_dir)) or 0) >= step:
            victim = task_pid(proc.pid, "worker:0", tensorflow=True)
            if victim is not None:
                os.kill(victim, signal.SIGKILL)
                break
        time.sleep(0.2)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode not in (0, None), out
    return out


def test_a_truncated_newest_checkpoint_resumes_from_the_previous_one(tmp_path, mnist_data_dir):
    model_dir = tmp_path / "run" / "model"
    fields = dict(steps=80, save=20, data_dir=mnist_data_dir)
    _kill_the_chief_once_a_checkpoint_is_listed(tmp_path, model_dir, 40, **fields)
    newest = checkpoints.latest_checkpoint(str(model_dir))
    listed = [str(model_dir / path) for path in  # relative to model_dir, as Estimator writes them
              re.findall(r'all_model_checkpoint_paths: "([^"]+)"', (model_dir / "checkpoint").read_text())]
    previous = listed[listed.index(newest) - 1]
    data = Path(newest + ".data-00000-of-00001")
    truncated = data.stat().st_size // 3
    os.truncate(data, truncated)  # as a disk that filled, or a host that crashed, leaves it

    code, out, summary = launch_cluster(tmp_path, CLUSTER_YAML, 2, **fields)
    assert code == 0, out
    assert re.search(r"finished: accuracy=[\d.]+ global_step=80 ", out), out
    for task in ("worker:0", "worker:1"):  # both restore from the shared model_dir: they must agree
        log = Path(summary["tasks"][task]["log"]).read_text(errors="replace")
        assert f"Restoring parameters from {previous}\n" in log, log[-3000:]
    logs = "".join(Path(summary["tasks"][t]["log"]).read_text(errors="replace") for t in summary["tasks"])
    [line] = [line for line in logs.splitlines() if "is damaged" in line]  # named once, by the first task
    assert f"checkpoint {newest} is damaged (" in line and f"training resumes from {previous}" in line
    kept = model_dir / "damaged"
    assert (kept / data.name).stat().st_size == truncated  # kept aside as it was, for a look
    assert json.loads((model_dir / "eval_results.jsonl").read_text().splitlines()[-1])["global_step"] == 80
    assert not pids_alive(summary["all_pids"])

"""Damaged storage on a real cluster: a truncated newest checkpoint between a kill and a restart."""

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from estimator_mnist.model_files import checkpoints, exports
from estimator_mnist.tf_task.checkpoint_repair import verify_checkpoint
from estimator_mnist.tf_task.disk_full import ERR_DISK_FULL, checkpoint_bytes
from tests.e2e.test_cluster_run import task_pid
from tests.helpers import CLUSTER_YAML, error_pattern, launch_cluster, pids_alive, run_cli, start_launch, write_cluster


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
    # Killed at checkpoint 40 or a little later: far enough from max_steps that the kill comes before the end.
    fields = dict(steps=120, save=20, data_dir=mnist_data_dir)
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
    assert re.search(r"finished: accuracy=[\d.]+ global_step=120 ", out), out
    for task in ("worker:0", "worker:1"):  # both restore from the shared model_dir: they must agree
        log = Path(summary["tasks"][task]["log"]).read_text(errors="replace")
        assert f"Restoring parameters from {previous}\n" in log, log[-3000:]
    logs = "".join(Path(summary["tasks"][t]["log"]).read_text(errors="replace") for t in summary["tasks"])
    # Repaired once, by the writer (worker 0 here); the other worker, should it look first, says it waits for that.
    [line] = [line for line in logs.splitlines() if "is damaged (" in line]
    assert f"checkpoint {newest} is damaged (" in line and f"training resumes from {previous}" in line
    assert all("this task is not the writer" in waiting for waiting in logs.splitlines()
               if "is damaged" in waiting and waiting != line)
    kept = model_dir / "damaged"
    assert (kept / data.name).stat().st_size == truncated  # kept aside as it was, for a look
    assert json.loads((model_dir / "eval_results.jsonl").read_text().splitlines()[-1])["global_step"] == 120
    assert not pids_alive(summary["all_pids"])


ONE_PROCESS_YAML = """
cluster: {{chief: ["localhost:{p0}"]}}
strategy: one_device
training: {{batch_size_per_replica: 32, max_steps: 10, save_checkpoints_steps: 10, log_step_count_steps: 10}}
evaluation: {{throttle_secs: 0, start_delay_secs: 0}}
run_dir: {run_dir}
data_dir: {data_dir}
"""


@pytest.fixture
def small_filesystem(tmp_path):
    """A 160 MB tmpfs of this test's own (root only): a real file system that fills, not the machine's disk.

    Big enough for a checkpoint, an export and the space the test leaves free after filling it."""
    mount_point = tmp_path / f"fs-{os.getpid()}"
    mount_point.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160m", "tmpfs", str(mount_point)],
                            capture_output=True, text=True) if shutil.which("mount") else None
    if result is None or result.returncode != 0:
        reason = f"mounting a tmpfs needs root and mount(8): {result.stderr.strip() if result else 'no mount'}"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; in CI this is a failure, not a skip")
        pytest.skip(reason)
    yield mount_point
    subprocess.run(["umount", "--lazy", str(mount_point)], check=True)


def _leave_free(mount_point: Path, free_bytes: int) -> None:
    """Fills the file system up to `free_bytes` of free space (blocks really allocated, so tmpfs counts them)."""
    filler = mount_point / f"filler-{len(list(mount_point.glob('filler-*')))}"
    with open(filler, "wb") as handle:
        os.posix_fallocate(handle.fileno(), 0, shutil.disk_usage(mount_point).free - free_bytes)


def _train(path, model_dir, max_steps):
    return run_cli("train", "--cluster", str(path), "--model-dir", str(model_dir),
                   "--set", f"training.max_steps={max_steps}", timeout=600)


def test_a_full_disk_during_a_checkpoint_or_an_export_keeps_the_earlier_ones(tmp_path, mnist_data_dir,
                                                                             small_filesystem):
    path = write_cluster(tmp_path, ONE_PROCESS_YAML, 1, data_dir=mnist_data_dir)
    model_dir = small_filesystem / "model"
    first = _train(path, model_dir, 10)
    assert first.returncode == 0, first.stderr[-3000:]
    [export] = exports.exports_in(str(model_dir / "export" / "latest"))
    checkpoint_size = checkpoint_bytes(str(model_dir / "model.ckpt-10"))
    export_files = {p: p.stat().st_size for p in Path(export).rglob("*") if p.is_file()}

    _leave_free(small_filesystem, checkpoint_size // 2)  # checkpoint 20 does not fit
    second = _train(path, model_dir, 20)
    lines = [line for line in second.stderr.splitlines() if "no space left on device" in line]
    assert second.returncode == 1 and len(lines) == 1, second.stderr[-3000:]
    assert re.search(error_pattern(ERR_DISK_FULL), lines[0]), lines[0]
    assert f"writing the checkpoint {model_dir}/model.ckpt-20: it needs about " in lines[0]
    assert "Traceback" not in second.stderr
    assert checkpoints.latest_checkpoint(str(model_dir)) == str(model_dir / "model.ckpt-10")
    assert verify_checkpoint(str(model_dir / "model.ckpt-10")) is None
    assert not [n for n in os.listdir(model_dir) if n.startswith("model.ckpt-20")]  # no torn files hold space

    for filler in small_filesystem.glob("filler-*"):
        filler.unlink()
    export_size = sum(export_files.values())
    _leave_free(small_filesystem, checkpoint_size + (1 << 20) + export_size // 2)  # the export does not fit
    third = _train(path, model_dir, 20)
    lines = [line for line in third.stderr.splitlines() if "no space left on device" in line]
    print(f"checkpoint {checkpoint_size} bytes, export {export_size} bytes; {lines}")
    assert third.returncode == 1 and len(lines) == 1, third.stderr[-3000:]
    assert f"writing an export in {model_dir}/export/latest: it needs about " in lines[0]
    assert verify_checkpoint(str(model_dir / "model.ckpt-20")) is None
    assert exports.exports_in(str(model_dir / "export" / "latest")) == [export]
    assert {p: p.stat().st_size for p in Path(export).rglob("*") if p.is_file()} == export_files
    assert not list((model_dir / "export" / "latest").glob("temp-*"))

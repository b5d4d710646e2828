"""A model_dir on a file system that fails the way NFS does (the suite's FUSE file system, tests/fault_fs/: real
ESTALE and EIO from the kernel's stat, open and read), during a restart: training resumes from the newest
checkpoint; a failed stat or read is never taken for a missing checkpoint; the state file is never rewritten;
nothing is moved aside.

- a chief and a worker restart while the newest checkpoint's stat, open and read fail ESTALE for 10 s;
- every listed checkpoint fails EIO past the storage bound (ESTIMATOR_MNIST_STORAGE_RETRY_SECS=4 here, so that
  the test waits 4 s, not 60): exit 200 naming the file, the state unchanged; after the fault a rerun resumes
  from the newest;
- model_dir itself fails ESTALE for 8 s at a chief's start: no restart from step 0.
Each run is a few steps (save every 10) on the suite's real MNIST."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from estimator_mnist.storage.bounds import RETRY_SECS_ENV
from tests.fault_fs import EIO, ESTALE, mounted, require_fuse
from tests.e2e.test_damaged_storage import ONE_PROCESS_YAML  # one task, one_device, a checkpoint every 10
from tests.helpers import CLUSTER_YAML, launch_cluster, run_cli, write_cluster

FIRST, THEN = 20, 30  # steps of the first run, then of the restart; a checkpoint every 10
TWO_WORKERS = 'worker: ["localhost:{p0}", "localhost:{p1}"]'
assert TWO_WORKERS in CLUSTER_YAML
CHIEF_AND_WORKER_YAML = CLUSTER_YAML.replace(TWO_WORKERS, 'chief: ["localhost:{p0}"]\n  worker: ["localhost:{p1}"]') \
    + "model_dir: {model_dir}\n"
BOUND_SECS = 4


@pytest.fixture
def fs(tmp_path):
    """The fault file system over tmp_path/backing at tmp_path/mnt, with NFS-like caching of 1 s."""
    require_fuse()
    with mounted(str(tmp_path / "backing"), str(tmp_path / "mnt"), attr_timeout=1.0, entry_timeout=1.0) as mount:
        yield mount


@pytest.fixture(scope="module")
def trained(tmp_path_factory, mnist_data_dir):
    """A one-task model_dir trained to step FIRST (checkpoints 10 and 20), on the local disk: copied per test."""
    tmp_path = tmp_path_factory.mktemp("trained")
    path = write_cluster(tmp_path, ONE_PROCESS_YAML, 1, data_dir=mnist_data_dir)
    result = _train(path, tmp_path / "model", FIRST)
    assert result.returncode == 0, result.stderr[-3000:]
    return path, tmp_path / "model"


def _fingerprint(model_dir: Path) -> dict:
    """The state file's bytes and each checkpoint file's inode and mtime: what a rewrite or a resave changes."""
    files = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in model_dir.glob("model.ckpt-*")}
    return {"state": (model_dir / "checkpoint").read_bytes(), "files": files}


def _train(cluster: Path, model_dir: Path, steps: int, env=None):
    return run_cli("train", "--cluster", str(cluster), "--model-dir", str(model_dir), "--set",
                   f"training.max_steps={steps}", env=env, timeout=600)


def _copy_in(trained, fs) -> Path:
    cluster, source = trained
    shutil.copytree(source, Path(fs.backing) / "model")
    return Path(fs.path("model"))


def test_every_checkpoint_unreadable_past_the_bound_is_200_naming_it_then_a_rerun_resumes(trained, fs):
    model_dir = _copy_in(trained, fs)
    before = _fingerprint(Path(fs.backing) / "model")
    fs.inject("stat", "model/model.ckpt-*", EIO, seconds=120)
    fs.inject("open", "model/model.ckpt-*", EIO, seconds=120)
    fs.inject("read", "model/model.ckpt-*", EIO, seconds=120)
    failed = _train(trained[0], model_dir, THEN, env={RETRY_SECS_ENV: str(BOUND_SECS)})
    errors = [line for line in failed.stderr.splitlines() if "error:" in line]
    assert failed.returncode == 200, failed.stderr[-3000:]
    assert len(errors) == 1 and f"{model_dir}/model.ckpt-20" in errors[0], errors
    assert f"for {BOUND_SECS} s" in errors[0] and "Input/output error" in errors[0], errors
    assert fs.failed() > 0
    assert _fingerprint(Path(fs.backing) / "model") == before
    assert not (Path(fs.backing) / "model" / "damaged").exists()

    fs.clear()
    rerun = _train(trained[0], model_dir, THEN)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"Restoring parameters from {model_dir}/model.ckpt-20\n" in rerun.stderr, rerun.stderr[-3000:]


def test_model_dir_itself_stale_for_8_s_at_a_chiefs_start_resumes_from_the_newest(trained, fs):
    model_dir = _copy_in(trained, fs)
    fs.inject("all", "model", ESTALE, seconds=8)
    result = _train(trained[0], model_dir, THEN)
    assert fs.failed() > 0
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"Restoring parameters from {model_dir}/model.ckpt-20\n" in result.stderr, result.stderr[-3000:]
    assert "step 0" not in result.stderr and not (Path(fs.backing) / "model" / "damaged").exists()


def test_a_chief_and_a_worker_restart_while_the_newest_checkpoint_is_stale_for_10_s(tmp_path, fs, mnist_data_dir):
    model_dir = Path(fs.path("model"))
    fields = dict(steps=FIRST, save=10, data_dir=mnist_data_dir, model_dir=model_dir)
    code, out, _ = launch_cluster(tmp_path, CHIEF_AND_WORKER_YAML, 2, **fields)
    assert code == 0, out
    backing = Path(fs.backing) / "model"
    newest = _fingerprint(backing)["files"]
    for op in ("stat", "open", "read"):
        fs.inject(op, f"model/model.ckpt-{FIRST}.*", ESTALE, seconds=10)
    code, out, summary = launch_cluster(tmp_path, CHIEF_AND_WORKER_YAML, 2, **dict(fields, steps=THEN))
    assert fs.failed() > 0
    assert code == 0, out
    for task in ("chief:0", "worker:0"):
        log = Path(summary["tasks"][task]["log"]).read_text(errors="replace")
        assert f"Restoring parameters from {model_dir}/model.ckpt-{FIRST}\n" in log, log[-3000:]
        assert "is listed but none of its files" not in log and "is damaged" not in log, log[-3000:]
    after = _fingerprint(backing)["files"]
    assert {name: after[name] for name in newest} == newest  # checkpoint 20 never saved again over the intact one
    assert f'model_checkpoint_path: "model.ckpt-{THEN}"' in (backing / "checkpoint").read_text()
    assert not (backing / "damaged").exists()
    assert re.search(rf"finished: accuracy=[\d.]+ global_step={THEN} ", out), out
    assert os.path.ismount(fs.mountpoint)

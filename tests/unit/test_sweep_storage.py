"""A sweep's records through the storage layer: locks whose errors are named (a mount without flock takes the
lease; EIO/ESTALE exit 200, never "nothing to run"), read and write errors named as what they are, records
replaced whole, prepare-data's lock, and a sweep whose directory is a gs:// bucket (the memory bucket)."""

import errno
import io
import json
import os
import types
from pathlib import Path

import pytest

from estimator_mnist import storage
from estimator_mnist.errors import PermanentFailure, RetryableFailure, UsageError
from estimator_mnist.mnist_data import prepare
from estimator_mnist.slurm import sweep_script
from estimator_mnist.storage import lock
from estimator_mnist.storage.local import LocalStore
from estimator_mnist.storage.urls import ERR_SCHEME
from estimator_mnist.sweep import array_task, records, shared
from estimator_mnist.sweep.run import ERR_SLURM_BUCKET, array_script, build_plan, run_sweep
from estimator_mnist.sweep.status import status_text
from estimator_mnist.tf_model import ensemble_plan
from tests import memory_bucket
from tests.helpers import error_pattern

BASE = """
cluster: {{chief: ["localhost:1"]}}
training: {{max_steps: 20, save_checkpoints_steps: 10}}
data_dir: {data_dir}
"""
ENV = {"SLURM_ARRAY_TASK_ID": "1", "SLURMD_NODENAME": "n2", "SLURM_JOB_ID": "7"}


def _base(tmp_path) -> str:
    (tmp_path / "data").mkdir(exist_ok=True)
    path = tmp_path / "base.yaml"
    path.write_text(BASE.format(data_dir=tmp_path / "data"))
    return str(path)


def _plan(tmp_path, sweep_dir=None, slurm=True, **options):
    return build_plan(_base(tmp_path), ["model.dropout=0.0,0.1"], sweep_dir=sweep_dir or str(tmp_path / "s"),
                      slurm=slurm, **options)


def _flock_failing(monkeypatch, code):
    """The lock module's fcntl, its flock failing with `code` (as on a mount without a lock manager, or a sick
    NFS server)."""
    def flock(handle, operation):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(lock, "fcntl", types.SimpleNamespace(flock=flock, LOCK_EX=2, LOCK_NB=4, LOCK_UN=8))


def _array_task(tmp_path, monkeypatch):
    """An array task of a sweep started on a shared directory, MNIST taken as prepared, its trial's run recorded
    instead of run."""
    plan = _plan(tmp_path)
    array_script(plan, [], sweep_script.ArrayOptions())
    monkeypatch.setattr(array_task, "is_prepared", lambda data_dir: True)
    out = io.StringIO()
    task = array_task.ArrayTask(plan, ENV, out)
    ran = []

    def run_trial():
        ran.append(task.trial.name)
        return shared.update_row(plan.sweep_dir, task.trial.name, lambda row: row.update(state="finished"))

    monkeypatch.setattr(task, "_run_trial", run_trial)
    return task, ran, out


def test_a_mount_without_flock_runs_the_trial_under_the_lease_and_names_the_error(tmp_path, monkeypatch):
    _flock_failing(monkeypatch, errno.ENOLCK)  # from the sweep's start: the lease is recorded, once per directory
    task, ran, out = _array_task(tmp_path, monkeypatch)
    assert task.run() == 0
    assert ran == ["trial-001"]  # run, never "being run by another array task"
    # The sweep's set-up said why (its first holder) and recorded the lease; the array task follows the record.
    assert lock.recorded_scheme(str(tmp_path / "s")) == lock.LEASE
    assert "nothing to run" not in out.getvalue() and "does not support flock" not in out.getvalue()


def test_a_node_whose_mount_refuses_the_recorded_flock_runs_nothing_and_says_so_in_one_line(tmp_path, monkeypatch):
    """The sweep was set up where flock works (recorded); this node's mount answers ENOLCK: it never falls back to
    a lease alone, which the other nodes' flock would not exclude."""
    task, ran, _ = _array_task(tmp_path, monkeypatch)
    _flock_failing(monkeypatch, errno.ENOLCK)
    with pytest.raises(PermanentFailure, match=error_pattern(lock.ERR_MOUNT_REFUSES)) as info:
        task.run()
    assert ran == [] and "\n" not in str(info.value) and "trial-001/trial.lock" in str(info.value)
    assert str(tmp_path / "s" / lock.SCHEME_FILE) in str(info.value)  # the sweep's one record


def test_under_the_lease_a_trial_held_elsewhere_is_left_to_its_holder(tmp_path, monkeypatch):
    _flock_failing(monkeypatch, errno.ENOLCK)
    real = lock.Lease
    monkeypatch.setattr(lock, "Lease", lambda path, log: real(path, log, beat_secs=0.1))  # a heartbeat seen soon
    lines = []
    with shared.trial_lock(tmp_path / "trial-000", log=lines.append) as mine:
        assert mine is True
        with shared.trial_lock(tmp_path / "trial-000", log=lines.append) as other:
            assert other is False  # its holder renews it: alive, as on another node


@pytest.mark.parametrize("code", [errno.EIO, errno.ESTALE])
def test_a_transient_lock_error_exits_200_naming_it_and_runs_nothing(tmp_path, monkeypatch, code):
    task, ran, out = _array_task(tmp_path, monkeypatch)
    _flock_failing(monkeypatch, code)
    with pytest.raises(RetryableFailure, match=error_pattern(records.ERR_TRANSIENT)) as info:
        task.run()
    assert errno.errorcode[code] in str(info.value) and "trial.lock" in str(info.value)
    assert ran == [] and "nothing to run" not in out.getvalue()


def test_a_lock_refused_for_good_exits_1_and_the_sweep_lock_is_named_too(tmp_path, monkeypatch):
    task, ran, _ = _array_task(tmp_path, monkeypatch)
    _flock_failing(monkeypatch, errno.EACCES)
    with pytest.raises(PermanentFailure, match=error_pattern(records.ERR_STORAGE)):
        task.run()
    with pytest.raises(PermanentFailure, match="sweep.lock: taking the sweep's lock failed"):
        shared.update_row(task.plan.sweep_dir, "trial-000", lambda row: None)
    assert ran == []


def _failing_reads(monkeypatch, name, exc):
    real = LocalStore.read_bytes

    def read_bytes(self, path):
        if path.endswith(name):
            raise exc
        return real(self, path)

    monkeypatch.setattr(LocalStore, "read_bytes", read_bytes)


def test_a_read_error_of_sweep_json_is_named_not_taken_for_an_unshared_directory(tmp_path, monkeypatch):
    task, _, _ = _array_task(tmp_path, monkeypatch)
    _failing_reads(monkeypatch, records.SWEEP_FILE, OSError(errno.ESTALE, os.strerror(errno.ESTALE)))
    with pytest.raises(RetryableFailure, match="reading the sweep's record failed") as info:
        task.check()
    assert "ESTALE" in str(info.value) and "does not see" not in str(info.value)
    _failing_reads(monkeypatch, records.SWEEP_FILE, PermissionError(errno.EACCES, os.strerror(errno.EACCES)))
    with pytest.raises(PermanentFailure, match="EACCES"):
        status_text(task.plan.sweep_dir)


def test_a_failed_write_leaves_the_old_results_whole_and_is_named(tmp_path, monkeypatch):
    plan = _plan(tmp_path)
    record = shared.start_or_resume(plan.sweep_dir, plan.identity, [t.values for t in plan.trials], plan.ranked_by)
    record["trials"][0].update(state="finished", validation_accuracy=0.9, accuracy=0.9)
    args = (plan.thresholds, plan.base_data, plan.base_file, {t.name: t.batch for t in plan.trials})
    best = Path(records.write_results(plan.sweep_dir, record, *args))
    before = best.read_text()

    def full(self, path, data, durable=False):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(LocalStore, "write_atomic", full)
    record["trials"][1].update(state="finished", validation_accuracy=0.95, accuracy=0.9)
    with pytest.raises(PermanentFailure, match="writing sweep.csv failed .*ENOSPC"):
        records.write_results(plan.sweep_dir, record, *args)
    assert best.read_text() == before


def test_prepare_data_locks_through_the_storage_layer(tmp_path, monkeypatch):
    _flock_failing(monkeypatch, errno.ENOLCK)
    lines = []
    with prepare.prepare_lock(tmp_path, lines.append):
        pass
    assert len(lines) == 1 and "does not support flock" in lines[0]
    _flock_failing(monkeypatch, errno.EIO)
    (tmp_path / "other").mkdir()  # tmp_path's record says lease now: flock is not tried there
    with pytest.raises(UsageError, match=error_pattern(prepare.ERR_LOCK)):
        with prepare.prepare_lock(tmp_path / "other", lines.append):
            pass


def _trial_records(bucket, trial, accuracy):
    """What a finished trial leaves in its model_dir on the bucket: evaluations, a checkpoint, progress."""
    model = trial.model_dir
    bucket.objects[f"{model}/eval_results.jsonl"] = (json.dumps(
        {"global_step": 20, "accuracy": accuracy, "loss": 0.1, "validation_accuracy": accuracy,
         "validation_loss": 0.1, "export": None, "final": True, "time": 2.0}).encode() + b"\n", 1)
    bucket.objects[f"{model}/checkpoint"] = (b'model_checkpoint_path: "model.ckpt-20"\n', 1)
    bucket.objects[f"{model}/model.ckpt-20.index"] = (b"x", 1)
    bucket.objects[f"{model}/progress/chief-0.json"] = (json.dumps(
        {"task": "chief:0", "global_step": 20, "first_step_time": 1.0, "examples_per_step": 64,
         "step_times": [[1.0, 1], [2.0, 20]]}).encode(), 1)


def test_a_sweep_on_one_machine_keeps_its_records_in_a_bucket(tmp_path, monkeypatch):
    bucket = memory_bucket.install(monkeypatch)
    monkeypatch.chdir(tmp_path)
    url = "gs://bkt/sweeps/a"
    plan = _plan(tmp_path, url, slurm=False, parallel=1, allowed=[0], gpus=[])
    trial = plan.trials[0]
    assert plan.sweep_dir == url and trial.records == f"{url}/trial-000" and trial.model_dir == f"{url}/trial-000/model"
    assert trial.directory == tmp_path / "runs" / "sweep-logs" / "bkt" / "sweeps" / "a" / "trial-000"
    for t, accuracy in zip(plan.trials, (0.97, 0.98)):
        _trial_records(bucket, t, accuracy)
    out = io.StringIO()
    assert run_sweep(plan, out=out, command_for=lambda t: ["true"], poll_secs=0.05) == 0, \
        out.getvalue()
    record = records.read_sweep(url)
    assert [t["state"] for t in record["trials"]] == ["finished", "finished"] and record["best"] == "trial-001"
    for name in (records.CSV_FILE, records.BEST_FILE, f"trial-000/{records.TRIAL_FILE}"):
        assert f"{url}/{name}" in bucket.objects
    assert (trial.directory / "trial.log").is_file() and not (tmp_path / "gs:").exists()
    assert "best so far: trial-001" in status_text(url)
    member = ensemble_plan.plan_ensemble(url, 1, gpus=[]).members[0]
    assert member.trial == "trial-001" and member.checkpoint == f"{url}/trial-001/model/model.ckpt-20"


def test_a_bucket_under_slurm_and_other_schemes_are_refused_in_one_line(tmp_path):
    with pytest.raises(UsageError, match=error_pattern(ERR_SLURM_BUCKET)):
        _plan(tmp_path, "gs://bkt/sweeps/a", slurm=True)
    for refuse in (lambda: _plan(tmp_path, "s3://bkt/a"), lambda: status_text("s3://bkt/a"),
                   lambda: ensemble_plan.plan_ensemble("hdfs://bkt/a", gpus=[])):
        with pytest.raises(UsageError, match=error_pattern(ERR_SCHEME)):
            refuse()


def test_a_bucket_that_refuses_the_records_is_named_before_any_trial_starts(tmp_path, monkeypatch):
    bucket = memory_bucket.install(monkeypatch)
    monkeypatch.chdir(tmp_path)
    url = "gs://bkt/sweeps/denied"
    plan = _plan(tmp_path, url, slurm=False, parallel=1, allowed=[0], gpus=[])
    bucket.denied.add(f"{url}/{records.SWEEP_FILE}")
    with pytest.raises(PermanentFailure, match="refused access"):
        run_sweep(plan, out=io.StringIO(), command_for=lambda t: ["true"], poll_secs=0.05)
    assert not plan.trials[0].directory.exists()  # no trial started

"""The checkpoint state file's rules (issue 54, item 1), on a disk with injected NFS errors and on a bucket:
rewritten only when it was read whole and is no state, only by the writer; a refused read is exit 1 naming it,
a storage that fails to serve it exit 200, never "no state"; a newest checkpoint never de-listed on a listing."""

import errno
import os

import pytest
import tensorflow as tf

from estimator_mnist import storage
from estimator_mnist.model_files import checkpoints, layout
from estimator_mnist.errors import PermanentFailure, RetryableFailure
from estimator_mnist.storage import local
from estimator_mnist.storage.errors import ERR_DENIED, ERR_UNAVAILABLE, StorageDenied, StorageUnavailable
from estimator_mnist.tf_task import checkpoint_repair, checkpoint_state
from estimator_mnist.tf_task.checkpoint_repair import fall_back_to_intact
from tests import memory_bucket
from tests.disk_faults import failing_opens, short_storage_bound
from tests.helpers import error_pattern
from tests.unit.test_checkpoint_repair import _save_checkpoints, _truncate

BUCKET_DIR = "gs://bucket/model"
STEPS = (10, 20, 30)
BOUND_SECS = 1.0  # the storage bound in these tests: a disk's failing read is asked again for this long


@pytest.fixture(autouse=True)
def bound(monkeypatch):
    short_storage_bound(monkeypatch, BOUND_SECS)


@pytest.fixture
def model_dir(tmp_path):
    path = tmp_path / "model"
    path.mkdir()
    return str(path)


def _no_sleep(secs):
    del secs


class Clock:
    """A clock that each sleep moves on."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, secs):
        self.now += secs


def _failing_reads(monkeypatch, path, errors, forever=False):
    failing_opens(monkeypatch, path, errors, forever)


def _state(model_dir):
    return os.path.join(model_dir, layout.STATE_FILE)


def _bytes(path):
    with open(path, "rb") as handle:
        return handle.read()


def test_a_state_file_refused_is_one_line_exit_1_and_not_rewritten(model_dir, monkeypatch):
    paths = _save_checkpoints(model_dir)
    before = _bytes(_state(model_dir))
    _failing_reads(monkeypatch, _state(model_dir), [PermissionError(errno.EACCES, "Permission denied")])
    with pytest.raises(StorageDenied) as error:
        fall_back_to_intact(model_dir, print, sleep=_no_sleep)
    assert str(error.value) == ERR_DENIED.format(path=_state(model_dir), problem="Permission denied")
    assert isinstance(error.value, PermanentFailure)
    assert _bytes(_state(model_dir)) == before and tf.train.latest_checkpoint(model_dir) == paths[-1]


@pytest.mark.parametrize("code", [errno.EIO, errno.ESTALE])
def test_a_state_file_the_disk_fails_to_serve_is_read_again_then_200(model_dir, monkeypatch, code):
    paths = _save_checkpoints(model_dir)
    before, opened = _bytes(_state(model_dir)), []
    _failing_reads(monkeypatch, _state(model_dir), [OSError(code, os.strerror(code))], forever=True)
    real_open = local.open
    monkeypatch.setattr(local, "open", lambda where, *a, **k: opened.append(where) or real_open(where, *a, **k))
    with pytest.raises(StorageUnavailable) as error:
        fall_back_to_intact(model_dir, print, sleep=_no_sleep)
    assert str(error.value) == ERR_UNAVAILABLE.format(path=_state(model_dir), secs=BOUND_SECS,
                                                      problem=os.strerror(code))
    assert isinstance(error.value, RetryableFailure) and error.value.errno == code
    assert opened.count(_state(model_dir)) >= 3  # asked again within the bound
    assert _bytes(_state(model_dir)) == before and tf.train.latest_checkpoint(model_dir) == paths[-1]


def test_a_stale_handle_that_passes_reads_the_state_as_it_is(model_dir, monkeypatch):
    paths = _save_checkpoints(model_dir)
    before, lines = _bytes(_state(model_dir)), []
    _failing_reads(monkeypatch, _state(model_dir), [OSError(errno.ESTALE, "Stale file handle")])
    assert fall_back_to_intact(model_dir, lines.append, sleep=_no_sleep) == paths[-1]
    assert lines == [] and _bytes(_state(model_dir)) == before


def test_a_state_file_said_missing_but_there_is_read_again(model_dir, monkeypatch):
    """An NFS client's lookup that lags: ENOENT from the read, the stat finds the file: not 'no state'."""
    paths = _save_checkpoints(model_dir)
    _failing_reads(monkeypatch, _state(model_dir), [FileNotFoundError(errno.ENOENT, "No such file or directory")])
    assert fall_back_to_intact(model_dir, print, sleep=_no_sleep) == paths[-1]


def test_a_missing_state_file_is_not_written(model_dir):
    _save_checkpoints(model_dir)
    os.remove(_state(model_dir))
    assert fall_back_to_intact(model_dir, print, sleep=_no_sleep) is None
    assert not os.path.exists(_state(model_dir))


def test_a_listing_that_lags_never_de_lists_the_newest(model_dir, monkeypatch):
    """Its reads fail NotFound (a stale NFS view) and a listing shows none of its files; its index file is
    there by a stat: 200, and the state still names it."""
    paths = _save_checkpoints(model_dir)
    before = _bytes(_state(model_dir))
    listdir = storage.store_for(model_dir).listdir
    monkeypatch.setattr(storage.store_for(model_dir), "listdir", lambda path: [
        n for n in listdir(path) if not n.startswith("model.ckpt-30.")])
    stale = checkpoint_repair.Problem(checkpoint_repair.UNAVAILABLE, "Failed to find any matching files")
    with pytest.raises(RetryableFailure):
        fall_back_to_intact(model_dir, print, verify=lambda p: stale if p == paths[-1] else None, sleep=_no_sleep)
    assert _bytes(_state(model_dir)) == before


def test_a_state_rebuilt_on_a_listing_that_lags_keeps_the_newest_it_names(model_dir, monkeypatch):
    paths = _save_checkpoints(model_dir)
    with open(_state(model_dir), "w") as handle:
        handle.write(f'model_checkpoint_path: "{paths[-1]}"\nall_model_checkpoint_paths: "model.ckpt-')
    listdir = storage.store_for(model_dir).listdir
    monkeypatch.setattr(storage.store_for(model_dir), "listdir", lambda path: [
        n for n in listdir(path) if not n.startswith("model.ckpt-30.")])
    lines = []
    assert fall_back_to_intact(model_dir, lines.append, sleep=_no_sleep) == paths[-1]
    assert len(lines) == 1 and "is unreadable" in lines[0]
    assert tf.train.latest_checkpoint(model_dir) == paths[-1]


def test_only_the_writer_rewrites_an_unparsable_state(model_dir):
    _save_checkpoints(model_dir)
    with open(_state(model_dir), "w") as handle:
        handle.write("not a state {")
    clock, lines = Clock(), []
    with pytest.raises(RetryableFailure) as error:
        fall_back_to_intact(model_dir, lines.append, sleep=clock.sleep, writer=False, clock=clock)
    assert _bytes(_state(model_dir)) == b"not a state {"
    assert len(lines) == 1 and "is not the writer" in lines[0]
    assert "the writer (the chief, or worker 0 without one) has not repaired it" in str(error.value)
    assert clock.now >= checkpoint_repair.WAIT_SECS


def test_a_task_other_than_the_writer_leaves_a_damaged_newest_to_the_writer(model_dir):
    paths = _save_checkpoints(model_dir)
    _truncate(paths[-1] + ".index")
    clock, repaired = Clock(), []

    def sleep(secs):  # the writer repairs while this task waits
        clock.sleep(secs)
        if not repaired:
            repaired.append(fall_back_to_intact(model_dir, print, writer=True))

    assert os.path.exists(paths[-1] + ".index")
    assert fall_back_to_intact(model_dir, print, sleep=sleep, writer=False, clock=clock) == paths[1]
    assert repaired == [paths[1]] and not os.path.exists(paths[-1] + ".index")


def test_the_rebuilt_state_names_checkpoints_relative_to_model_dir():
    text = checkpoint_state.state_text(BUCKET_DIR, f"{BUCKET_DIR}/model.ckpt-20", [f"{BUCKET_DIR}/model.ckpt-10"])
    assert checkpoint_state.parse(BUCKET_DIR, text) == [f"{BUCKET_DIR}/model.ckpt-10", f"{BUCKET_DIR}/model.ckpt-20"]
    assert "gs://" not in text  # TensorFlow joins a name it takes for relative: gs:// in it would be mangled


def _bucket_checkpoints(bucket, steps=STEPS):
    for step in steps:
        for suffix in (".index", ".data-00000-of-00001", ".meta"):
            storage.write_atomic(f"{BUCKET_DIR}/model.ckpt-{step}{suffix}", b"x")
    paths = [f"{BUCKET_DIR}/model.ckpt-{s}" for s in steps]
    storage.write_atomic(f"{BUCKET_DIR}/checkpoint", checkpoint_state.state_text(BUCKET_DIR, paths[-1], paths))
    return paths


def _damaged(bad):
    return lambda path: checkpoint_repair.Problem(checkpoint_repair.DAMAGED, "corrupted") if path in bad else None


def test_a_damaged_newest_checkpoint_on_a_bucket_is_moved_aside_and_the_state_rewritten(monkeypatch):
    bucket = memory_bucket.install(monkeypatch)
    paths = _bucket_checkpoints(bucket)
    lines = []
    assert fall_back_to_intact(BUCKET_DIR, lines.append, verify=_damaged({paths[-1]}), sleep=_no_sleep) == paths[1]
    assert sorted(storage.listdir(f"{BUCKET_DIR}/damaged")) == [
        "model.ckpt-30.data-00000-of-00001", "model.ckpt-30.index", "model.ckpt-30.meta"]
    assert not any(n.startswith("model.ckpt-30.") for n in storage.listdir(BUCKET_DIR))
    assert checkpoints.latest_checkpoint(BUCKET_DIR) == paths[1]
    assert len(lines) == 1 and f"checkpoint {paths[-1]} is damaged" in lines[0]


def test_a_state_object_refused_is_exit_1_naming_it_and_nothing_moves(monkeypatch):
    bucket = memory_bucket.install(monkeypatch)
    paths = _bucket_checkpoints(bucket)
    before = dict(bucket.objects)
    bucket.denied.add(f"{BUCKET_DIR}/checkpoint")
    with pytest.raises(StorageDenied) as error:
        fall_back_to_intact(BUCKET_DIR, print, verify=_damaged({paths[-1]}), sleep=_no_sleep)
    assert f"{BUCKET_DIR}/checkpoint" in str(error.value) and isinstance(error.value, PermanentFailure)
    assert {k: v for k, v in bucket.objects.items() if ".lease" not in k} == before


def test_a_state_object_not_served_is_exit_200_and_nothing_moves(monkeypatch):
    bucket = memory_bucket.install(monkeypatch)
    paths = _bucket_checkpoints(bucket)
    before = dict(bucket.objects)
    bucket.failing[f"{BUCKET_DIR}/checkpoint"] = 1
    with pytest.raises(StorageUnavailable) as error:
        fall_back_to_intact(BUCKET_DIR, print, verify=_damaged({paths[-1]}), sleep=_no_sleep)
    assert isinstance(error.value, RetryableFailure)
    assert {k: v for k, v in bucket.objects.items() if ".lease" not in k} == before


@pytest.mark.parametrize("kind, failure", [(checkpoint_repair.DENIED, PermanentFailure),
                                           (checkpoint_repair.UNAVAILABLE, RetryableFailure)])
def test_an_intact_checkpoint_on_a_bucket_is_never_moved_because_a_read_failed(monkeypatch, kind, failure):
    bucket = memory_bucket.install(monkeypatch)
    paths = _bucket_checkpoints(bucket)
    before = dict(bucket.objects)
    problem = checkpoint_repair.Problem(kind, "403 Forbidden" if kind == checkpoint_repair.DENIED else "503")
    with pytest.raises(failure):
        fall_back_to_intact(BUCKET_DIR, print, verify=lambda p: problem if p == paths[-1] else None,
                            sleep=_no_sleep)
    assert {k: v for k, v in bucket.objects.items() if ".lease" not in k} == before


def test_a_bucket_state_names_checkpoints_tensorflow_and_the_launcher_both_read(monkeypatch):
    memory_bucket.install(monkeypatch)
    storage.write_atomic(f"{BUCKET_DIR}/model.ckpt-7.index", b"x")
    storage.write_atomic(f"{BUCKET_DIR}/checkpoint", 'model_checkpoint_path: "model.ckpt-7"\n')
    assert checkpoints.latest_checkpoint(BUCKET_DIR) == f"{BUCKET_DIR}/model.ckpt-7"
    storage.write_atomic(f"{BUCKET_DIR}/checkpoint", f'model_checkpoint_path: "{BUCKET_DIR}/model.ckpt-7"\n')
    assert checkpoints.latest_step(BUCKET_DIR, strict=True) == 7


def test_the_error_texts_are_one_line_templates():
    for template in (checkpoints.ERR_READ_FAILED, checkpoint_repair.ERR_NOT_REPAIRED,
                     checkpoint_repair.MSG_WAITING):
        assert "\n" not in template and error_pattern(template)

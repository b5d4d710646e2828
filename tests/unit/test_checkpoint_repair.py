"""A damaged newest checkpoint: every restoring task falls back to the newest intact one, and keeps the bad one."""

import errno
import os
import threading

import pytest
import tensorflow as tf

from estimator_mnist.errors import PermanentFailure, RetryableFailure
from estimator_mnist import storage
from estimator_mnist.model_files import layout
from estimator_mnist.storage import lock
from estimator_mnist.storage.bounds import STORAGE_RETRY_SECS
from estimator_mnist.tf_task import checkpoint_repair
from estimator_mnist.tf_task.checkpoint_repair import fall_back_to_intact, verify_checkpoint
from tests.disk_faults import failing_stats, short_storage_bound


def _save_checkpoints(model_dir, steps=(10, 20, 30)):
    """Checkpoints as Estimator's Saver writes them: model.ckpt-N.{index,data,meta} and the state file."""
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.get_variable("dense/kernel", [300, 100])
        step = tf.compat.v1.train.get_or_create_global_step()
        saver = tf.compat.v1.train.Saver(max_to_keep=10)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for value in steps:
                session.run(step.assign(value))
                saver.save(session, os.path.join(model_dir, "model.ckpt"), global_step=step)
    return [os.path.join(model_dir, f"model.ckpt-{s}") for s in steps]


def _truncate(path):
    os.truncate(path, os.path.getsize(path) // 2)


def _flip_a_byte(path):
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(path, "wb").write(bytes(data))


@pytest.fixture
def model_dir(tmp_path):
    path = tmp_path / "model"
    path.mkdir()
    return str(path)


@pytest.mark.parametrize("damage, suffix", [
    (_truncate, ".data-00000-of-00001"),
    (_flip_a_byte, ".data-00000-of-00001"),
    (_truncate, ".index"),
    (_flip_a_byte, ".index"),
])
def test_a_damaged_newest_checkpoint_gives_way_to_the_previous_one(model_dir, damage, suffix):
    paths = _save_checkpoints(model_dir)
    damage(paths[-1] + suffix)
    lines = []
    assert fall_back_to_intact(model_dir, lines.append) == paths[1]
    assert tf.train.latest_checkpoint(model_dir) == paths[1]  # what Estimator restores
    state = tf.train.get_checkpoint_state(model_dir)
    assert list(state.all_model_checkpoint_paths) == paths[:2]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert lines[0].startswith(f"checkpoint {paths[-1]} is damaged (")
    assert f"training resumes from {paths[1]}" in lines[0]
    kept = os.path.join(model_dir, "damaged")
    assert sorted(os.listdir(kept)) == ["model.ckpt-30.data-00000-of-00001", "model.ckpt-30.index",
                                        "model.ckpt-30.meta"]
    assert not any(name.startswith("model.ckpt-30.") for name in os.listdir(model_dir))


def test_intact_checkpoints_are_left_alone(model_dir):
    paths = _save_checkpoints(model_dir)
    before = open(os.path.join(model_dir, "checkpoint")).read()
    lines = []
    assert fall_back_to_intact(model_dir, lines.append) == paths[-1]
    assert lines == [] and open(os.path.join(model_dir, "checkpoint")).read() == before
    assert not os.path.exists(os.path.join(model_dir, "damaged"))


def test_no_checkpoint_at_all_is_nothing_to_do(model_dir, tmp_path):
    assert fall_back_to_intact(model_dir, print) is None
    assert fall_back_to_intact(str(tmp_path / "not-yet"), print) is None


def test_every_checkpoint_damaged_starts_again_from_step_0(model_dir):
    for path in _save_checkpoints(model_dir, steps=(10, 20)):
        _truncate(path + ".data-00000-of-00001")
    lines = []
    assert fall_back_to_intact(model_dir, lines.append) is None
    assert len(lines) == 2 and all(checkpoint_repair.MSG_NONE_LEFT in line for line in lines)
    assert tf.train.latest_checkpoint(model_dir) is None
    assert len(os.listdir(os.path.join(model_dir, "damaged"))) == 6


def test_an_unreadable_state_file_is_rebuilt_from_the_files(model_dir):
    paths = _save_checkpoints(model_dir)
    with open(os.path.join(model_dir, "checkpoint"), "w") as handle:
        handle.write('model_checkpoint_path: "model.ckpt-3')  # cut short by a full disk
    lines = []
    assert fall_back_to_intact(model_dir, lines.append) == paths[-1]
    assert len(lines) == 1 and "is unreadable" in lines[0]
    assert tf.train.latest_checkpoint(model_dir) == paths[-1]


def test_a_second_damage_of_the_same_step_is_kept_beside_the_first(model_dir):
    for _ in range(2):
        paths = _save_checkpoints(model_dir)
        _truncate(paths[-1] + ".index")
        assert fall_back_to_intact(model_dir, lambda line: None) == paths[1]
    kept = os.path.join(model_dir, "damaged")
    assert "model.ckpt-30.index" in os.listdir(kept)
    numbered = [name for name in os.listdir(kept) if os.path.isdir(os.path.join(kept, name))]
    assert len(numbered) == 1 and "model.ckpt-30.index" in os.listdir(os.path.join(kept, numbered[0]))


def test_tasks_starting_together_agree_and_move_the_files_once(model_dir):
    paths = _save_checkpoints(model_dir)
    _truncate(paths[-1] + ".data-00000-of-00001")
    results, lines = [], []
    barrier = threading.Barrier(4)

    def task():
        barrier.wait()
        results.append(fall_back_to_intact(model_dir, lines.append))

    threads = [threading.Thread(target=task) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [paths[1]] * 4
    assert len(lines) == 1  # the first task repaired; the others found the state already right


def test_verify_names_what_is_wrong(model_dir):
    paths = _save_checkpoints(model_dir, steps=(10,))
    assert verify_checkpoint(paths[0]) is None
    _truncate(paths[0] + ".data-00000-of-00001")
    problem = verify_checkpoint(paths[0])
    assert problem.kind == checkpoint_repair.DAMAGED and "Read less bytes than requested" in problem.text
    assert verify_checkpoint(os.path.join(model_dir, "model.ckpt-99")).kind == checkpoint_repair.UNAVAILABLE


@pytest.mark.parametrize("damage, suffix", [(_truncate, ".data-00000-of-00001"), (_flip_a_byte, ".data-00000-of-00001"),
                                            (_truncate, ".index"), (_flip_a_byte, ".index")])
def test_what_the_reader_says_of_damage_is_damage(model_dir, damage, suffix):
    """TF 2.15's reader raises a bare OpError for most damage: its text tells it apart (kind_of)."""
    path = _save_checkpoints(model_dir, steps=(10,))[0]
    damage(path + suffix)
    assert verify_checkpoint(path).kind == checkpoint_repair.DAMAGED


@pytest.mark.parametrize("error, kind", [
    (tf.errors.OpError(None, None, "/m/model.ckpt-30.index; Permission denied", tf.errors.UNKNOWN), "permission denied"),
    (tf.errors.PermissionDeniedError(None, None, "/m/model.ckpt-30.index"), "permission denied"),
    (PermissionError(13, "Permission denied"), "permission denied"),
    (tf.errors.NotFoundError(None, None, "Failed to find any matching files for /m/model.ckpt-30"), "unavailable"),
    (tf.errors.UnavailableError(None, None, "Stale file handle"), "unavailable"),
    (tf.errors.OpError(None, None, "/m/model.ckpt-30.index; Input/output error", tf.errors.UNKNOWN), "unavailable"),
    (tf.errors.DataLossError(None, None, "checksum mismatch"), "damaged"),
    (IndexError("Read less bytes than requested"), "damaged"),
])
def test_storage_errors_are_told_apart_from_damage(error, kind):
    assert checkpoint_repair.kind_of(error) == kind


def _failing(paths, problem, calls):
    def verify(path):
        calls.append(path)
        return problem if path == paths[-1] else None
    return verify


def _files(model_dir):
    return sorted(name for name in os.listdir(model_dir) if name != layout.LOCK_FILE
                  and not name.startswith(lock.SCHEME_FILE))


def test_a_newest_checkpoint_the_storage_refuses_is_not_moved_and_is_one_line_exit_1(model_dir):
    paths = _save_checkpoints(model_dir)
    before, calls = _files(model_dir), []
    problem = checkpoint_repair.Problem(checkpoint_repair.DENIED, f"{paths[-1]}.index; Permission denied")
    with pytest.raises(PermanentFailure) as error:
        fall_back_to_intact(model_dir, print, verify=_failing(paths, problem, calls), sleep=lambda s: None)
    assert str(error.value) == checkpoint_repair.ERR_DENIED.format(path=paths[-1], problem=problem.text)
    assert _files(model_dir) == before and tf.train.latest_checkpoint(model_dir) == paths[-1]
    assert calls == [paths[-1]]  # a refusal is not read again


def test_a_newest_checkpoint_the_storage_fails_to_serve_is_read_again_then_200(model_dir):
    """Read again for the storage bound (its index file is there by every stat), then 200: nothing moved."""
    paths = _save_checkpoints(model_dir)
    before, calls, now = _files(model_dir), [], [0.0]
    problem = checkpoint_repair.Problem(checkpoint_repair.UNAVAILABLE, "Stale file handle")

    def sleep(secs):
        now[0] += secs

    with pytest.raises(RetryableFailure) as error:
        fall_back_to_intact(model_dir, print, verify=_failing(paths, problem, calls), sleep=sleep,
                            clock=lambda: now[0])
    assert str(error.value) == checkpoint_repair.ERR_UNAVAILABLE.format(
        path=paths[-1], secs=STORAGE_RETRY_SECS, problem="Stale file handle")
    assert STORAGE_RETRY_SECS - 2 * checkpoint_repair.READ_RETRY_SECS <= now[0] <= STORAGE_RETRY_SECS
    assert len(calls) > 3 and set(calls) == {paths[-1]}
    assert _files(model_dir) == before and tf.train.latest_checkpoint(model_dir) == paths[-1]


def test_a_transient_failure_that_passes_restores_the_newest(model_dir):
    paths = _save_checkpoints(model_dir)
    answers = [checkpoint_repair.Problem(checkpoint_repair.UNAVAILABLE, "Stale file handle"), None]
    assert fall_back_to_intact(model_dir, print, verify=lambda path: answers.pop(0), sleep=lambda s: None) == paths[-1]


def test_a_listed_checkpoint_whose_files_were_taken_away_is_dropped(model_dir):
    paths = _save_checkpoints(model_dir)
    for name in os.listdir(model_dir):
        if name.startswith("model.ckpt-30."):
            os.remove(os.path.join(model_dir, name))
    lines = []
    assert fall_back_to_intact(model_dir, lines.append, sleep=lambda s: None) == paths[1]
    assert lines == [checkpoint_repair.MSG_GONE.format(path=paths[-1],
                                                       outcome=checkpoint_repair.MSG_RESUME.format(path=paths[1]))]
    assert tf.train.latest_checkpoint(model_dir) == paths[1]


@pytest.mark.parametrize("code", [errno.ESTALE, errno.EIO])
def test_a_checkpoint_whose_stat_fails_is_never_gone_and_the_state_is_kept(model_dir, monkeypatch, code):
    """Issue 57: its reads fail and so does every stat of its index file (os.path.exists answered False): it is
    not dropped, the state file keeps its bytes, and the task exits 200 naming the index file."""
    paths = _save_checkpoints(model_dir)
    state = os.path.join(model_dir, "checkpoint")
    with open(state, "rb") as handle:
        before = handle.read()
    short_storage_bound(monkeypatch, 0.5)
    failing_stats(monkeypatch, paths[-1] + ".index", OSError(code, os.strerror(code)))
    problem = checkpoint_repair.Problem(checkpoint_repair.UNAVAILABLE, os.strerror(code))
    with pytest.raises(RetryableFailure) as error:
        fall_back_to_intact(model_dir, print, verify=_failing(paths, problem, []), sleep=lambda s: None)
    assert f"{paths[-1]}.index: the storage failed to serve it" in str(error.value)
    with open(state, "rb") as handle:
        assert handle.read() == before
    assert not os.path.exists(os.path.join(model_dir, layout.DAMAGED_DIR))


def test_a_file_system_without_flock_checks_with_one_warning(model_dir, monkeypatch):
    """A Lustre client mounted without flock answers ENOSYS: the check goes on under the storage layer's lease,
    released at its end."""
    paths = _save_checkpoints(model_dir)
    _truncate(paths[-1] + ".index")

    def no_flock(handle, operation):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(lock.fcntl, "flock", no_flock)
    lines = []
    assert fall_back_to_intact(model_dir, lines.append) == paths[1]
    assert lines[0].startswith("warning: ") and "does not support flock(2) (Function not implemented)" in lines[0]
    assert len(lines) == 2 and "is damaged" in lines[1]
    data, version = storage.read_versioned(os.path.join(model_dir, layout.LOCK_FILE + lock.LEASE_SUFFIX))
    assert version >= 2 and b'"holder": null' in data  # taken, then released

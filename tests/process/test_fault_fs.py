"""The suite's fault file system (tests/fault_fs/): a real FUSE mount whose injected errors reach the kernel's
syscalls, whose two mounts of one directory see each other's changes late (NFS's attribute cache) and exclude
each other with flock, and that is always unmounted."""

import errno
import fcntl
import os
import time

import pytest

import tests.fault_fs as fault_fs
from tests.fault_fs import ESTALE, EIO, FaultFSError, mounted, require_fuse


@pytest.fixture
def backing(tmp_path):
    require_fuse()
    path = tmp_path / "backing"
    (path / "model").mkdir(parents=True)
    (path / "model" / "checkpoint").write_text("state\n")
    return path


def test_the_requirement_fails_under_ci_instead_of_skipping(monkeypatch):
    monkeypatch.setenv("CI", "1")
    monkeypatch.setattr(fault_fs, "fuse_missing", lambda: "needs /dev/fuse (the fuse kernel module)")
    with pytest.raises(pytest.fail.Exception, match="in CI this is a failure, not a skip"):
        require_fuse()


def test_a_passthrough_that_fails_stat_and_read_for_the_time_asked(backing, tmp_path):
    with mounted(str(backing), str(tmp_path / "mnt"), attr_timeout=0, entry_timeout=0) as fs:
        state = fs.path("model", "checkpoint")
        with open(fs.path("model", "new"), "w", encoding="utf-8") as stream:
            stream.write("written through the mount\n")
        assert (backing / "model" / "new").read_text() == "written through the mount\n"
        fs.inject("stat", "model/checkpoint", ESTALE, seconds=1.5)
        with pytest.raises(OSError) as raised:
            os.stat(state)
        assert raised.value.errno == errno.ESTALE and fs.failed() >= 1
        assert os.path.exists(fs.path("model", "new"))  # only the chosen path fails
        time.sleep(1.6)
        assert os.stat(state).st_size == 6
        fs.inject("read", "model/*", EIO, seconds=30)
        with pytest.raises(OSError) as raised, open(state, encoding="utf-8") as stream:
            stream.read()
        assert raised.value.errno == errno.EIO
        fs.clear()
        with open(state, encoding="utf-8") as stream:
            assert stream.read() == "state\n"


def test_the_mount_itself_can_fail_and_a_listing_can_lag(backing, tmp_path):
    with mounted(str(backing), str(tmp_path / "mnt"), attr_timeout=0, entry_timeout=0) as fs:
        assert sorted(os.listdir(fs.path("model"))) == ["checkpoint"]
        fs.lag_listing("model")
        (backing / "model" / "model.ckpt-200.index").write_text("")
        assert sorted(os.listdir(fs.path("model"))) == ["checkpoint"]  # one version behind
        assert sorted(os.listdir(fs.path("model"))) == ["checkpoint", "model.ckpt-200.index"]
        fs.inject("all", "model", ESTALE, seconds=30)
        with pytest.raises(OSError) as raised:
            os.listdir(fs.path("model"))
        assert raised.value.errno == errno.ESTALE


def test_two_mounts_see_each_others_changes_late_as_nfs_does(backing, tmp_path):
    with mounted(str(backing), str(tmp_path / "a"), attr_timeout=3, entry_timeout=3) as first, \
            mounted(str(backing), str(tmp_path / "b"), attr_timeout=3, entry_timeout=3) as second:
        assert os.stat(second.path("model", "checkpoint")).st_size == 6
        with open(first.path("model", "checkpoint"), "a", encoding="utf-8") as stream:
            stream.write("more\n")
        assert os.stat(second.path("model", "checkpoint")).st_size == 6  # its cached attributes
        deadline = time.monotonic() + 10
        while os.stat(second.path("model", "checkpoint")).st_size != 11:
            assert time.monotonic() < deadline, "the second mount never saw the change"
            time.sleep(0.2)


def _locks_within(fd, secs: float) -> bool:
    deadline = time.monotonic() + secs
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)


def test_two_mounts_of_one_directory_exclude_each_other_with_flock(backing, tmp_path):
    """The lock issue's premise: without flock passed through, each mount's kernel inode locks by itself.

    LOCK_UN reaches the file system before flock() returns; a close does not: FUSE sends the file's RELEASE
    after close() has returned, so another mount may find the lock still held for a moment."""
    with mounted(str(backing), str(tmp_path / "a")) as first, mounted(str(backing), str(tmp_path / "b")) as second:
        held = os.open(first.path("model", "checkpoint"), os.O_RDONLY)
        other = os.open(second.path("model", "checkpoint"), os.O_RDONLY)
        try:
            fcntl.flock(held, fcntl.LOCK_EX)
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(held, fcntl.LOCK_UN)
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # at once
            fcntl.flock(other, fcntl.LOCK_UN)
            fcntl.flock(held, fcntl.LOCK_EX)
            os.close(held)  # closing drops the lock, as on a disk, once the RELEASE is through
            held = -1
            assert _locks_within(other, 5.0)
            backing_fd = os.open(backing / "model" / "checkpoint", os.O_RDONLY)
            with pytest.raises(BlockingIOError):  # and the backing file itself is what is locked
                fcntl.flock(backing_fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            os.close(backing_fd)
        finally:
            for fd in (held, other):
                if fd >= 0:
                    os.close(fd)


def test_the_mount_is_gone_after_a_failing_test_and_a_refused_rule_says_why(backing, tmp_path):
    mountpoint = str(tmp_path / "mnt")
    with pytest.raises(ZeroDivisionError):
        with mounted(str(backing), mountpoint) as fs:
            with pytest.raises(FaultFSError, match="unknown operation 'chmod'"):
                fs.inject("chmod", "*", EIO, seconds=1)
            process = fs.process
            _ = 1 / 0
    assert process.poll() is not None
    assert not fault_fs._is_mount(mountpoint)  # pylint: disable=protected-access
    assert os.listdir(mountpoint) == []

"""The storage layer's lock rule (storage/lock.py): flock where it works, else a lease with a heartbeat, judged
by the waiter's own clock; and the checkpoint check's policy on top of it (tf_task/model_dir_lock.py)."""

import errno
import json
import os
import threading
import time

import pytest

from estimator_mnist import storage
from estimator_mnist.storage.lock import (LEASE, LEASE_SUFFIX, MSG_NO_FLOCK, MSG_TAKEN_OVER, SCHEME_FILE, Lease,
                                          exclusive, recorded_scheme)
from estimator_mnist.model_files import lock as model_dir_lock


def _unsupported(code):
    def flock(handle, operation):
        raise OSError(code, os.strerror(code))
    return flock


def _holder(path):
    data, _ = storage.read_versioned(path)
    return json.loads(data)["holder"] if data else None


class FastClock:
    """A waiter's clock that runs `step` seconds per look, from any start (a host whose clock is far ahead)."""

    def __init__(self, start, step=10.0):
        self.now, self.step = start, step

    def __call__(self):
        self.now += self.step
        return self.now


def _die(lease):
    """The holder dies: no more heartbeats, never released (its process's write guard goes with it)."""
    lease._stop.set()
    lease._thread.join()
    storage.unguard_writes(lease.check)


def _fast(path, lines, **kwargs):
    return Lease(path, lines.append, sleep=lambda _: time.sleep(0.01), **kwargs)


@pytest.mark.parametrize("code", [errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK])
def test_without_flock_a_lease_excludes_the_others_and_is_released(tmp_path, code):
    path, inside, most, lines = str(tmp_path / "lock"), [], [], []

    def task():
        with exclusive(path, lines.append, flock=_unsupported(code),
                       lease_factory=lambda where: Lease(where, lines.append, sleep=lambda _: time.sleep(0.01))):
            inside.append(1)
            most.append(len(inside))
            time.sleep(0.05)
            inside.pop()

    threads = [threading.Thread(target=task) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert max(most) == 1 and len(most) == 4
    # The first holder decided the scheme and said so once; the others followed the record.
    assert lines == [MSG_NO_FLOCK.format(path=path, reason=os.strerror(code), lease=path + LEASE_SUFFIX,
                                         record=str(tmp_path / SCHEME_FILE))]
    assert recorded_scheme(str(tmp_path)) == LEASE and _holder(path + LEASE_SUFFIX) is None


def test_a_lease_whose_heartbeat_stopped_is_taken_over_by_the_waiter_s_own_clock(tmp_path):
    path, lines = str(tmp_path / "lock.lease"), []
    dead = Lease(path, print)
    assert dead.take()
    _die(dead)
    waiter = Lease(path, lines.append, clock=FastClock(-1e9), sleep=lambda _: None)
    assert waiter.take()
    assert _holder(path) == waiter._token
    assert len(lines) == 1 and lines[0].startswith(MSG_TAKEN_OVER.split("{holder}")[0].format(path=path))
    waiter.release()


def test_clocks_200_s_apart_neither_break_a_fresh_lease_nor_keep_a_dead_one(tmp_path):
    """The old lock file compared this host's clock with the file server's mtime: 200 s apart broke a fresh lock.
    The record carries its holder's wall clock (`renewed`, for a reader); the waiter's clocks are another host's:
    a monotonic clock counted from another epoch and a wall clock 200 s away. A rule that compared any of them
    with the record would take the fresh lease at once, or never take the dead one."""
    path = str(tmp_path / "lock.lease")
    holder = Lease(path, print, beat_secs=0.02, wall=lambda: time.time() - 200.0)
    assert holder.take()
    try:
        other_host = dict(clock=time.time, wall=lambda: time.time() + 200.0, stale_secs=0.3,
                          sleep=lambda _: time.sleep(0.05))
        assert json.loads(storage.read_versioned(path)[0])["renewed"] < time.time() - 199
        assert Lease(path, print, **other_host).take(blocking=False) is False
        assert _holder(path) == holder._token
    finally:
        holder.release()
    dead = Lease(path, print, wall=lambda: time.time() + 200.0)
    assert dead.take()
    _die(dead)  # its record says it renewed 200 s in this host's future
    waiter = Lease(path, print, **{**other_host, "wall": time.time})
    taking = threading.Thread(target=waiter.take, daemon=True)
    taking.start()
    taking.join(timeout=5)  # 0.3 s of the waiter's own clock, not 200 s
    assert _holder(path) == waiter._token
    waiter.release()


def test_two_waiters_on_a_stale_lease_one_takes_it_and_the_other_waits(tmp_path):
    path = str(tmp_path / "lock.lease")
    dead = Lease(path, print)
    assert dead.take()
    _die(dead)
    barrier, inside, most, order = threading.Barrier(2), [], [], []

    def waiter(number, offset):
        lease = Lease(path, lambda line: None, clock=lambda: time.monotonic() + offset, stale_secs=0.3, beat_secs=0.05,
                      sleep=lambda _: time.sleep(0.01))
        barrier.wait()
        lease.take()
        inside.append(number)
        most.append(len(inside))
        order.append(number)
        time.sleep(0.5)  # longer than stale_secs: the holder's heartbeat keeps the other waiting
        inside.remove(number)
        lease.release()

    threads = [threading.Thread(target=waiter, args=(0, 0.0)), threading.Thread(target=waiter, args=(1, 1e6))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert max(most) == 1 and sorted(order) == [0, 1]


def test_a_holder_whose_lease_was_taken_over_leaves_its_successor_s_alone(tmp_path):
    path, lines = str(tmp_path / "lock.lease"), []
    stalled = Lease(path, lines.append)
    assert stalled.take()
    stalled._stop.set()  # hung past LOCK_STALE_SECS
    stalled._thread.join()
    successor = Lease(path, print, clock=FastClock(0.0), sleep=lambda _: None)
    assert successor.take()
    stalled.release()  # wakes up and releases: a conditional write of its own version, which is gone
    assert _holder(path) == successor._token
    successor.release()


def test_flock_is_the_lock_where_it_works_and_another_flock_error_is_not_hidden(tmp_path):
    lines = []
    with exclusive(str(tmp_path / "lock"), lines.append) as taken:
        assert taken
        with exclusive(str(tmp_path / "lock"), lines.append, blocking=False) as again:
            assert again is False  # another open file description: flock says held
    assert lines == [] and not os.path.exists(str(tmp_path / "lock") + LEASE_SUFFIX + ".1")
    with pytest.raises(OSError):
        with exclusive(str(tmp_path / "lock"), print, flock=_unsupported(errno.EBADF)):
            pass


def test_the_checkpoint_check_goes_on_with_one_warning_when_no_lock_can_be_made(tmp_path):
    (tmp_path / "ro").mkdir()
    os.chmod(tmp_path / "ro", 0o500)
    path, lines, entered = str(tmp_path / "ro" / "sub" / "lock"), [], []
    try:
        with model_dir_lock.exclusive(path, lines.append):
            entered.append(True)
    finally:
        os.chmod(tmp_path / "ro", 0o700)
    if os.geteuid() == 0:  # root writes anyway: the lock is made
        assert entered and lines == []
    else:
        assert entered and len(lines) == 1 and lines[0].startswith(f"warning: cannot lock {path} (")


def test_the_checkpoint_check_raises_a_storage_failure_as_what_it_is(tmp_path):
    with pytest.raises(OSError):
        with model_dir_lock.exclusive(str(tmp_path / "lock"), print, flock=_unsupported(errno.EIO)):
            pass

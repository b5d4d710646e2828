"""A lease holder that may have lost its lease writes nothing more (storage/lease.py), its heartbeat survives every
error, and one lock scheme holds per directory (storage/lock.py's record)."""

import errno
import os
import threading
import time

import pytest
from google.auth.exceptions import RefreshError

from estimator_mnist import storage
from estimator_mnist.errors import PermanentFailure
from estimator_mnist.storage import lock
from estimator_mnist.storage.lease import Lease, LeaseLost, WHY_TAKEN


def _renewals_failing(monkeypatch, lease, errors):
    """The holder's heartbeat (its own thread, as in the product) meets `errors` in turn, then the real write."""
    real, left = storage.write_if_version, list(errors)

    def write_if_version(path, data, version, request_secs=None):
        if threading.current_thread() is lease._thread and left:
            raise left.pop(0)
        return real(path, data, version, request_secs=request_secs)

    monkeypatch.setattr(storage, "write_if_version", write_if_version)
    return left


def test_the_heartbeat_survives_every_error_and_renews_after_them(tmp_path, monkeypatch):
    holder = Lease(str(tmp_path / "lock.lease"), print, beat_secs=0.05, stale_secs=10)
    assert holder.take()
    left = _renewals_failing(monkeypatch, holder, [RefreshError("invalid_grant", retryable=False), OSError(
        errno.EIO, "I/O error"), RuntimeError("anything else"), ValueError("bad")])
    deadline = time.monotonic() + 5
    while (left or holder._version < 3) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not left and holder._version >= 3 and holder._thread.is_alive()  # renewed after all four
    holder.check(str(tmp_path / "record.json"))  # still held: writes go on
    holder.release()


def test_a_holder_whose_renewals_fail_too_long_writes_nothing_more_and_names_why(tmp_path, monkeypatch):
    holder = Lease(str(tmp_path / "lock.lease"), print, beat_secs=0.05, stale_secs=0.8)  # hold 0.6 s
    assert holder.take()
    storage.write_atomic(tmp_path / "record.json", "before")
    _renewals_failing(monkeypatch, holder, [OSError(errno.ESTALE, "Stale file handle")] * 1000)
    time.sleep(0.7)
    with pytest.raises(LeaseLost) as info:
        storage.write_atomic(tmp_path / "record.json", "after")
    assert (tmp_path / "record.json").read_text() == "before"
    text = str(info.value)
    assert "\n" not in text and text.startswith(f"{holder.path}: this process's lock was taken over by another")
    assert "past LOCK_HOLD_SECS=0.6 s" in text and "last: Stale file handle" in text
    storage.write_atomic(tmp_path.parent / f"{tmp_path.name}-elsewhere.json", "x")  # not under the lease: goes on
    holder.release()
    storage.write_atomic(tmp_path / "record.json", "released")  # no guard left behind


def test_a_holder_whose_heartbeat_saw_the_lease_taken_writes_nothing_and_leaves_the_successor_s(tmp_path,
                                                                                             monkeypatch):
    """The holder's heartbeat hangs (a renewal that never returns) past the stale bound; a waiter takes over; the
    renewal returns refused: the holder's next write raises, and its release changes nothing."""
    path, frozen = str(tmp_path / "lock.lease"), threading.Event()
    holder = Lease(path, print, beat_secs=0.05, stale_secs=0.5, hold_secs=100.0)  # only the heartbeat can tell
    assert holder.take()
    real = storage.write_if_version

    def hanging(where, data, version, request_secs=None):
        if threading.current_thread() is holder._thread:
            frozen.wait()
        return real(where, data, version, request_secs=request_secs)

    monkeypatch.setattr(storage, "write_if_version", hanging)
    lines = []
    successor = Lease(path, lines.append, beat_secs=0.05, stale_secs=0.5, sleep=lambda _: time.sleep(0.02))
    assert successor.take() and len(lines) == 1 and "took over the lock of" in lines[0]
    frozen.set()
    holder._thread.join(timeout=5)
    assert not holder._thread.is_alive()
    with pytest.raises(LeaseLost, match=WHY_TAKEN):
        storage.append_line(tmp_path / "trial.log", "the old holder")
    holder.release()
    data, _ = storage.read_versioned(path)
    assert successor._token.encode() in data and not (tmp_path / "trial.log").exists()
    successor.release()


def _flock_refused(code):
    def flock(handle, operation):
        raise OSError(code, os.strerror(code))
    return flock


def test_a_mount_refusing_the_recorded_flock_stops_in_one_line_naming_it(tmp_path):
    path = str(tmp_path / "trial.lock")
    with lock.exclusive(path, print) as taken:  # the first holder: flock works, recorded
        assert taken and lock.recorded_scheme(str(tmp_path)) == lock.FLOCK
    with pytest.raises(PermanentFailure) as info:
        with lock.exclusive(path, print, flock=_flock_refused(errno.ENOLCK)):
            pytest.fail("ran without a lock the others honour")
    mount, fstype = lock.mount_of(path)
    assert str(info.value) == lock.ERR_MOUNT_REFUSES.format(
        path=path, record=str(tmp_path / lock.SCHEME_FILE), mount=mount, fstype=fstype,
        reason=os.strerror(errno.ENOLCK))
    assert not [p for p in os.listdir(tmp_path) if ".lease" in p]  # no lease of its own


def test_where_the_lease_is_recorded_a_node_with_flock_takes_the_lease_too(tmp_path):
    path, lines = str(tmp_path / "trial.lock"), []
    factory = lambda where: Lease(where, lines.append, beat_secs=0.05, sleep=lambda _: time.sleep(0.02))
    with lock.exclusive(path, lines.append, flock=_flock_refused(errno.ENOLCK), lease_factory=factory) as first:
        assert first and lock.recorded_scheme(str(tmp_path)) == lock.LEASE
        with lock.exclusive(path, lines.append, blocking=False, lease_factory=factory) as second:
            assert second is False  # its flock would be granted, but it follows the record: held
    assert len(lines) == 1 and "does not support flock" in lines[0]


def test_a_record_that_is_not_one_is_named(tmp_path):
    storage.write_if_version(str(tmp_path / lock.SCHEME_FILE), b"garbage", 0)
    with pytest.raises(PermanentFailure, match="not a lock scheme record"):
        with lock.exclusive(str(tmp_path / "sweep.lock"), print):
            pass
